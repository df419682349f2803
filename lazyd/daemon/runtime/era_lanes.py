"""The processes of one registration, one per protocol era where the server needs it.

The era policy (lazyd/core/eras/choice.py) decides from a session's first request which of a
registration's lanes serves it; this module carries that out. `EraLanes` holds the primary runtime
and, only when a client of the other era needs a process of its own, a sibling opened on demand
(one at a time), sharing the snapshot object, cache file, policy name and spawn spec, with its own
process, lifecycle, log and status row. `EraRoute` stands for a session until its first request
chooses the lane (`client_era`); before it, an invalid line is answered by the route itself, a few
notifications are held, and nothing is started: a session answered from the cache stays so. A
session resumed from a previous daemon lands in its era at once, by its earlier lines.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import trio

from lazyd.core.relay import jsonrpc as rpc
from lazyd.core.eras.choice import Era, EraPolicy, Lane, LaneChoice, client_era, facts_of
from lazyd.core.relay.jsonrpc import Invalid, Kind, Message
from lazyd.core.lifecycle.machine import PROCESS_STATES, State
from lazyd.daemon.runtime.outbox import Outbox
from lazyd.daemon.runtime.supervisor import ServerRuntime

log = logging.getLogger("lazyd.eras")

# Notifications a client may send before its first request, kept for the lane it will get (the
# python SDK's own limit for frames ahead of the first request); more are dropped.
MAX_HELD_LINES = 8

OpenLane = Callable[[Era], Awaitable[ServerRuntime]]


def _busy(runtime: ServerRuntime) -> bool:
    """A lane that cannot be given another era: clients attached, or a process up or coming."""
    state = runtime.life.state
    return bool(runtime.sessions) or state in PROCESS_STATES or state is State.BACKOFF or bool(runtime.core.queue)


class EraLanes:
    """One registration's runtimes by era (see the module docstring)."""

    def __init__(self, primary: ServerRuntime, open_lane: OpenLane, *, reserved: bool,
                 place: Callable[[ServerRuntime, str], Awaitable[EraLanes]],
                 on_detach: Callable[[ServerRuntime], None], on_change: Callable[[], None]) -> None:
        self.primary = primary
        self.runtimes: list[ServerRuntime] = [primary]
        self.policy = EraPolicy(primary.config.era)
        self._open_lane = open_lane
        self.opening: trio.Event | None = None  # set when the lane being opened is there
        self._pending = 0  # routes that have not chosen a lane yet (a share = false instance is not free)
        self.on_change = on_change  # the registry's status signal (status_signal.py)
        # A session left one of these runtimes (the registry stops a process of a session's own).
        self.on_detach = on_detach
        # Where a session of this registration goes once its compatibility key is known (its
        # roots: lazyd/core/sharing/roots.py), given the primary runtime it is on: that runtime
        # (it stays) or another (the registry's sharing gate decides).
        self.place = place
        # A share = false instance being created for a session: taken from the moment it exists
        # (its start awaits) until that session's route counts in `pending`, so a second session
        # opened meanwhile never takes it for a free one.
        self.reserved = reserved

    @property
    def pending(self) -> int:
        return self._pending

    @pending.setter
    def pending(self, count: int) -> None:
        self._pending = count
        self.on_change()  # sessions waiting for their lane count as clients in status

    def lanes(self) -> list[Lane]:
        return [Lane(r.core.lane, _busy(r)) for r in self.runtimes]

    def in_use(self) -> bool:
        return self.reserved or self.pending > 0 or any(r.sessions for r in self.runtimes)

    def choose(self, era: Era) -> tuple[ServerRuntime | None, LaneChoice]:
        """The lane for a client of `era` (None: a new one must be opened), given that lane's era."""
        choice = self.policy.choose(era, facts_of(self.primary.core.snapshot), self.lanes())
        if choice.index is None:
            return None, choice
        runtime = self.runtimes[choice.index]
        runtime.core.lane = choice.era
        return runtime, choice

    async def get(self, era: Era) -> tuple[ServerRuntime, str]:
        """The lane for a client of `era`, opening one if needed (after any opening under way)."""
        while self.opening is not None:
            await self.opening.wait()
        runtime, choice = self.choose(era)
        if runtime is None:
            self.opening = trio.Event()
            try:
                runtime = await self._open_lane(choice.era)  # the registry adds it to `runtimes`
                runtime.core.lane = choice.era
            finally:
                self.opening.set()
                self.opening = None
        return runtime, choice.reason

    def describe(self) -> list[dict[str, object]]:
        """Each lane's name, era and why its clients got it (`lazyctl explain`)."""
        facts = facts_of(self.primary.core.snapshot)
        out: list[dict[str, object]] = []
        for runtime in self.runtimes:
            era = runtime.core.lane
            # Why in the light of what is known now (the server's eras may have been learned since).
            reason = self.policy.lane_era(era, facts)[2] if era is not None else "no client chose it yet"
            out.append({"name": runtime.name, "era": era, "process_era": runtime.core.process_era(),
                        "reason": reason, "server": str(facts.kind)})
        return out


class EraRoute:
    """A session until its first request chose its lane, then a pass-through to that lane."""

    def __init__(self, lanes: EraLanes, session: Outbox, resume: list[bytes], nursery: trio.Nursery, *,
                 attached: ServerRuntime | None = None, held: list[bytes] | None = None) -> None:
        """A session's route. With `attached`, the session is attached to that lane already (a
        route a predecessor daemon handed over, as `handover` described it, with the lines it
        `held`); else its resumed lines' first request, if any, chooses its lane at once."""
        self.lanes = lanes
        self.session = session
        self.name = lanes.primary.name
        self.runtime: ServerRuntime | None = attached
        self._resume = resume
        self._held: list[bytes] = held if held is not None else []
        self._nursery = nursery
        self._choosing: trio.Event | None = None  # set once a lane being opened has been joined
        self._moving: trio.Event | None = None  # set once a move to another process is over (`_move`)
        self._era: Era = "handshake"  # the era of its first request, for a lane elsewhere after a move
        self._gone = False
        if attached is not None:
            attached.sessions[session.cid] = session  # its relay core knows the client already
            attached.placers[session.cid] = self._placed
            waiting = attached.core.roots.sessions.get(session.cid)
            if waiting is not None and waiting.key is not None and not waiting.placed:
                self._placed(session.cid, waiting.key)  # its predecessor was placing it: place it again
            return
        lanes.pending += 1
        lanes.reserved = False  # this route holds the instance now
        first = next((m for m in map(rpc.parse, resume) if isinstance(m, Message) and m.kind is Kind.REQUEST), None)
        if first is not None:
            assert first.method is not None
            self._choose(client_era(first.method, first.params), None)

    def handover(self) -> tuple[ServerRuntime | None, list[bytes], list[bytes]] | None:
        """What an upgrade carries of this route: the lane it is attached to (None: no request
        chose one yet) and, until one did, the resumed and held lines it keeps for it. None while
        it cannot be carried: a lane is being opened for it, or its session is gone."""
        if self._choosing is not None or self._moving is not None or self._gone:
            return None
        if self.runtime is not None:
            return self.runtime, [], []
        return None, list(self._resume), list(self._held)

    # ---- what a connection calls (the same as a ServerRuntime) --------------------------------

    def client_line(self, cid: int, line: bytes, parsed: Message | Invalid | None = None) -> None:
        """`parsed`: `rpc.parse(line)`, where the caller parsed it already."""
        if self._moving is not None:
            self._held.append(line)  # the connection waits for room before sending more
            return
        if self.runtime is not None:
            self.runtime.client_line(cid, line, parsed)
            return
        if self._choosing is not None:
            self._held.append(line)  # the connection waits for room before sending more
            return
        msg = parsed if parsed is not None else rpc.parse(line)
        if not isinstance(msg, Message):
            if msg.reply is not None:
                self.session.deliver(msg.reply, msg.id)
            return
        if msg.kind is not Kind.REQUEST:
            if len(self._held) < MAX_HELD_LINES:
                self._held.append(line)
            return
        assert msg.method is not None
        self._choose(client_era(msg.method, msg.params), line)

    def has_room(self) -> bool:
        if self._moving is not None:
            return False
        if self.runtime is not None:
            return self.runtime.has_room()
        return self._choosing is None

    async def wait_for_room(self) -> None:
        if self._moving is not None:
            await self._moving.wait()
        if self._choosing is not None:
            await self._choosing.wait()
        if self.runtime is not None:
            await self.runtime.wait_for_room()

    def detach(self, cid: int) -> None:
        if self._gone:
            return
        self._gone = True
        if self.runtime is not None:
            self.runtime.detach(cid)
            self.lanes.on_detach(self.runtime)
            return
        self.lanes.pending -= 1
        self.session.close()
        self.lanes.on_detach(self.lanes.primary)  # a process reserved for it and never used goes

    # ---- choosing ------------------------------------------------------------------------------

    def _choose(self, era: Era, line: bytes | None) -> None:
        self._era = era
        if line is not None:
            self._held.append(line)
        if self.lanes.primary.closing:
            # A reload replaced this server while the session said nothing: end it, and its shim
            # reconnects to the new definition with what it sent (as attached sessions do).
            log.info("[%s] session %d: the server was replaced before its first request; closing it",
                     self.name, self.session.cid)
            self.session.close()
            return
        runtime, choice = (None, None) if self.lanes.opening is not None else self.lanes.choose(era)
        if runtime is not None:
            self._attach(runtime, choice.reason if choice is not None else "")
            return
        self._choosing = trio.Event()
        self._nursery.start_soon(self._open, era)

    async def _open(self, era: Era) -> None:
        assert self._choosing is not None
        try:
            runtime, reason = await self.lanes.get(era)
            if not self._gone:
                self._attach(runtime, reason)
        finally:
            self._choosing.set()
            self._choosing = None

    def _attach(self, runtime: ServerRuntime, reason: str) -> None:
        self.runtime = runtime
        self.lanes.pending -= 1
        log.info("[%s] session %d: %s lane (%s)", runtime.name, self.session.cid, runtime.core.lane, reason)
        runtime.placers[self.session.cid] = self._placed
        runtime.attach(self.session, self._resume)
        held, self._held = self._held, []
        for line in held:
            runtime.client_line(self.session.cid, line)  # a request the session must not send yet waits in the relay

    # ---- placing: the session's key is known (lazyd/core/relay/session_roots.py) ----------------

    def _placed(self, cid: int, key: str) -> None:
        """The relay knows the session's key: it stays where it is when every other session there
        has that key (at once, the common case), else it moves (the gate finds its process)."""
        runtime = self.runtime
        assert runtime is not None
        others = {k for r in self.lanes.runtimes for k in r.core.session_keys()}
        # A stateless-era process asks for roots within each request, through the bridge: the
        # session that made it answers, so roots keep no session from sharing it.
        stateless = runtime.core.lane == "stateless"
        if stateless or not others - {key} or self._moving is not None:
            runtime.release(cid)
            return
        self._moving = trio.Event()  # its lines wait here meanwhile
        self._nursery.start_soon(self._move, runtime, key)

    async def _move(self, runtime: ServerRuntime, key: str) -> None:
        assert self._moving is not None
        cid = self.session.cid
        try:
            lanes = await self.lanes.place(self.lanes.primary, key)
            if lanes is self.lanes:
                runtime.release(cid)
                return
            target, _ = await lanes.get(self._era)
            if self._gone or self.runtime is not runtime:
                lanes.reserved = False  # the session left meanwhile: nobody holds the new instance
                return
            params = runtime.core.clients[cid].params if cid in runtime.core.clients else None
            taken = runtime.take(cid)
            if taken is None:
                return
            known, held = taken
            self.lanes.on_detach(runtime)
            self.lanes = lanes
            lanes.reserved = False  # this route holds the instance now
            self.runtime = target
            target.placers[cid] = self._placed
            log.info("[%s] session %d: moved to %s (its roots differ from those of the sessions on %s)",
                     runtime.name, cid, target.name, runtime.name)
            target.move_in(self.session, params, known, held)
        finally:
            moving, self._moving = self._moving, None
            moving.set()
        lines, self._held = self._held, []
        for line in lines:
            if self.runtime is not None:
                self.runtime.client_line(cid, line)
