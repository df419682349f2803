"""The data every part of the relay core reads and changes, held in one place.

The server's name, its phase, its live handshake and the time of the event being handled, the
snapshot, the attached clients, the queue, the routes, era detection and the listing engine: made
once by the core and handed to each part, so a part's constructor names only its port and peers,
and restoring the core's state fills one object the parts already hold.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lazyd.core.cache import HandshakeEntry, Snapshot
from lazyd.core.eras.state import EraState
from lazyd.core.relay.listings import ListingEngine
from lazyd.core.relay.actions import Phase
from lazyd.core.relay.client_state import ClientState
from lazyd.core.relay.waiting import Waiting
from lazyd.core.relay.routing import ClientId, Routes


@dataclass
class RelayShared:
    name: str
    snapshot: Snapshot
    era: EraState
    listings: ListingEngine
    routes: Routes
    clients: dict[ClientId, ClientState] = field(default_factory=dict)
    queue: Waiting = field(default_factory=Waiting)
    phase: Phase = Phase.DOWN
    instance: HandshakeEntry | None = None  # the live process's handshake and listings (startup.py)
    now: float = 0.0  # the wall-clock time the event being handled brought
