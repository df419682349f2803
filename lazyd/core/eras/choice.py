"""Which protocol era a server process runs in, and which process a client is given (pure).

The python SDK's servers lock each connection to the era of its first request, and handshake-era
call-backs work only on a handshake connection, so the era follows the clients
(docs/protocol-eras.md): a client of the other era gets a process of its own unless the server
serves both eras on one connection or only one era.

The facts the snapshot recorded (cache.Snapshot), never guessed: `discovery` ("unknown", "none":
handshake only, "stateless": a DiscoverResult), `mixed` (one connection carried both eras; None:
never tried), `handshake_first` (False: a first `initialize` was refused). Five kinds of server:

| kind | facts |
|---|---|
| unknown | discovery unknown |
| handshake only | discovery none |
| both eras on one connection | discovery stateless, mixed True |
| stateless only | discovery stateless, mixed not True, handshake_first False |
| both eras, one per connection | discovery stateless otherwise (the python SDK; also assumed while untried) |

The lane table (which process a client gets)
--------------------------------------------
A client's era is that of its first request (`client_era`): `initialize` and any plain request
are the handshake era's, an enveloped request or a `server/discover` the stateless era's. The
processes of one registration are *lanes*, each running in one era. The `era` setting (config key
and shim option `era`, default "auto") and the kind decide the lane:

| era setting | kind | handshake client | stateless client | processes |
|---|---|---|---|---|
| handshake | any | handshake lane | handshake lane (discovery -32601, others -32022) | one |
| stateless | any | stateless lane (bridged) | stateless lane | one |
| auto | unknown | handshake lane | stateless lane | one per era |
| auto | handshake only | handshake lane | handshake lane (-32601 / -32022 from cache) | one |
| auto | both eras on one connection | stateless lane (native) | stateless lane | one |
| auto | both eras, one per connection | handshake lane | stateless lane | one per era |
| auto | stateless only | stateless lane (bridged) | stateless lane | one |

Where the table says "one", a process already busy (clients attached, or up or coming up) serves
every new client whatever its lane: a server that can serve all clients on one process never gets
a second while one is up. Where it says "one per era", a client goes to the lane of its era; a
lane nobody uses (no client, no process) is taken over by the era that needs one; else a new lane
is opened.

The start plan (what the relay sends a new process first)
---------------------------------------------------------
| era setting | kind | lane | first request | `initialize` | `server/discover` after the handshake |
|---|---|---|---|---|---|
| handshake | any | any | `initialize` | first | never |
| stateless | any | any | the era probe | never: bridged | - |
| auto | stateless only | any | the era probe | never: bridged | - |
| auto | handshake only | any | `initialize` | first | never |
| auto | other | handshake (or none: a start no client asked for) | `initialize` | first | while `mixed` is unknown, or the connection carries both eras |
| auto | unknown, or both on one connection | stateless | the era probe | pipelined behind it, unless `mixed` is False | - |
| auto | both eras, one per connection | stateless | the era probe | never: bridged | - |

The probe after the handshake tells what the connection carries: a DiscoverResult, both eras;
-32601 on a server never probed, handshake only; any other error, one era per connection.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from lazyd.core.eras import versions as eras
from lazyd.core.cache import Snapshot
from lazyd.core.relay.jsonrpc import JsonObj

Era = Literal["handshake", "stateless"]
EraSetting = Literal["auto", "handshake", "stateless"]
ERA_SETTINGS: tuple[EraSetting, ...] = ("auto", "handshake", "stateless")
Discovery = Literal["unknown", "none", "stateless"]
InitializeWhen = Literal["first", "pipelined", "never"]


class Kind(enum.StrEnum):
    UNKNOWN = "unknown"
    HANDSHAKE_ONLY = "handshake only"
    ONE_CONNECTION = "both eras on one connection"
    PER_CONNECTION = "both eras, one per connection"
    STATELESS_ONLY = "stateless only"


@dataclass(frozen=True, slots=True)
class Facts:
    discovery: Discovery = "unknown"
    mixed: bool | None = None
    handshake_first: bool | None = None

    @property
    def kind(self) -> Kind:
        if self.discovery == "unknown":
            return Kind.UNKNOWN
        if self.discovery == "none":
            return Kind.HANDSHAKE_ONLY
        if self.mixed is True:
            return Kind.ONE_CONNECTION
        if self.handshake_first is False:
            return Kind.STATELESS_ONLY
        return Kind.PER_CONNECTION


@dataclass(frozen=True, slots=True)
class Lane:
    """One process slot of a registration as the policy sees it."""

    era: Era | None  # the era it was given; None: never given one
    busy: bool  # a client attached, or a process up, coming up or being restarted


@dataclass(frozen=True, slots=True)
class LaneChoice:
    index: int | None  # the lane to use; None: open a new one
    era: Era  # the era that lane runs in from now on
    reason: str  # for the log and `lazyctl explain`


@dataclass(frozen=True, slots=True)
class StartPlan:
    probe_first: bool  # the relay's own server/discover is the connection's first request
    initialize: InitializeWhen  # when the replayed handshake is sent (never: handshake clients are bridged)
    probe_after_handshake: bool  # a server/discover once the handshake is done


def facts_of(snapshot: Snapshot) -> Facts:
    """What a snapshot recorded about the server's eras."""
    era = snapshot.era()
    discovery: Discovery = "unknown" if era is None else "stateless" if era == "stateless" else "none"
    return Facts(discovery, snapshot.mixed_connection, snapshot.handshake_first)


def other_era(era: Era) -> Era:
    return "stateless" if era == "handshake" else "handshake"


def client_era(method: str, params: JsonObj) -> Era:
    """The era of a client's first request: an enveloped request or a discovery probe is the
    stateless era's, `initialize` and plain requests the handshake era's."""
    if method == "initialize":
        return "handshake"
    if method == "server/discover" or eras.is_stateless_request(method, params):
        return "stateless"
    return "handshake"


class EraPolicy:
    """The decisions of the module docstring's tables for one registration's `era` setting."""

    def __init__(self, setting: EraSetting = "auto") -> None:
        self.setting: EraSetting = setting

    def lane_era(self, client: Era, facts: Facts) -> tuple[Era, bool, str]:
        """(the lane's era, whether one process serves every client, why) for a client of `client`'s era."""
        if self.setting != "auto":
            return self.setting, True, f'era = "{self.setting}" is set for this server'
        kind = facts.kind
        if kind is Kind.HANDSHAKE_ONLY:
            return "handshake", True, "the server speaks only the handshake era"
        if kind is Kind.ONE_CONNECTION:
            return "stateless", True, "the server serves both eras on one connection"
        if kind is Kind.STATELESS_ONLY:
            return "stateless", True, "the server speaks only the stateless era: handshake-era clients are bridged"
        if kind is Kind.UNKNOWN:
            return client, False, f"a {client}-era client; the server's eras are not known yet"
        return client, False, f"a {client}-era client; the server locks each connection to the era of its first request"

    def choose(self, client: Era, facts: Facts, lanes: Sequence[Lane]) -> LaneChoice:
        """Which lane serves a new client of era `client` (the lane table)."""
        era, single, why = self.lane_era(client, facts)
        if single:
            busy = [i for i, lane in enumerate(lanes) if lane.busy]
            if busy:
                same = [i for i in busy if lanes[i].era == era]
                index = same[0] if same else busy[0]
                return LaneChoice(index, lanes[index].era or era, f"{why}; its process is shared")
        for i, lane in enumerate(lanes):
            if lane.era == era:
                return LaneChoice(i, era, why)
        for i, lane in enumerate(lanes):
            if not lane.busy:
                return LaneChoice(i, era, why)
        return LaneChoice(None, era, f"{why}; the {other_era(era)}-era process cannot serve it")

    def start_plan(self, lane: Era | None, facts: Facts) -> StartPlan:
        """What the relay sends a new process of `lane` first (the start-plan table)."""
        kind = facts.kind
        if self.setting == "handshake":
            return StartPlan(probe_first=False, initialize="first", probe_after_handshake=False)
        if self.setting == "stateless" or kind is Kind.STATELESS_ONLY:
            return StartPlan(probe_first=True, initialize="never", probe_after_handshake=False)
        if kind is Kind.HANDSHAKE_ONLY:
            return StartPlan(probe_first=False, initialize="first", probe_after_handshake=False)
        if lane != "stateless":
            after = facts.mixed is None or kind is Kind.ONE_CONNECTION
            return StartPlan(probe_first=False, initialize="first", probe_after_handshake=after)
        if kind is Kind.PER_CONNECTION or facts.mixed is False:
            return StartPlan(probe_first=True, initialize="never", probe_after_handshake=False)
        return StartPlan(probe_first=True, initialize="pipelined", probe_after_handshake=False)
