"""The data every part of the relay core reads and changes, held in one place.

The relay core (relay.py) is composed of parts, each with its own state and a port back to the
core; besides that, they work on the same few things: the cache model of the registration
(`snapshot`), the attached clients, the requests waiting for the server (`queue`), the id and
token routes, era detection and the listing engine. `RelayShared` is those, made once by the core
and handed to each part, so that a part's constructor names only its port and the peer parts it
calls, and so that restoring the core's state fills one object the parts already hold.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lazyd.core.cache import Snapshot
from lazyd.core.eras.state import EraState
from lazyd.core.relay.listings import ListingEngine
from lazyd.core.relay.client_state import ClientState
from lazyd.core.relay.waiting import Waiting
from lazyd.core.relay.routing import ClientId, Routes

__all__ = ["RelayShared"]


@dataclass
class RelayShared:
    snapshot: Snapshot
    era: EraState
    listings: ListingEngine
    routes: Routes
    clients: dict[ClientId, ClientState] = field(default_factory=dict)
    queue: Waiting = field(default_factory=Waiting)
