"""Each session's roots, learned by the relay, and the roots a server is answered with.

A session's *key* (lazyd/core/sharing/roots.py) is what sessions sharing a process must have in
common: `NO_ROOTS` for a client without the `roots` capability, else a digest of its answer to the
relay's own `roots/list` (asked after `notifications/initialized` and at each `list_changed`);
`UNANSWERED` for no answer within `ROOTS_WAIT_S`.

Once the key is known (`SessionKey`) the session's requests that need the server are held until
the daemon *places* it: here (`release`) or on a process whose sessions share its key (`take`,
then that core's `move_in`). Nothing of it has reached this process before, so a move loses
nothing.

The server's `roots/list` is answered by the relay, never routed to a client: the roots the placed
sessions have in common, a wait while one is being asked, or -32601 when none declares roots; a
change sends the server `notifications/roots/list_changed`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lazyd.core.relay import jsonrpc as rpc
from lazyd.core.relay.actions import Action, Dispatch, Note, Phase, SessionKey, ToClient, ToServer
from lazyd.core.relay.client_state import ClientState
from lazyd.core.relay.jsonrpc import JsonId, Message
from lazyd.core.relay.routing import ClientId
from lazyd.core.relay.shared import RelayShared
from lazyd.core.sharing.roots import NO_ROOTS, UNANSWERED, Root, common_roots, parse_roots, roots_key, roots_result

# A client that declares roots and never answers must not hold its requests for ever.
ROOTS_WAIT_S = 10.0


@dataclass
class SessionRoots:
    """What the relay knows of one session's roots."""

    key: str | None = None  # None: not known yet
    roots: tuple[Root, ...] | None = None  # what it answered (None: it declares none, or not yet)
    asking: int | None = None  # the client-facing id of the relay's own roots/list to it
    asked_at: float = 0.0
    placed: bool = False
    held: list[Message] = field(default_factory=list)  # requests waiting for its placement


# What the part keeps (lazyd/core/state_codec.py).
KEPT = {"sessions": dict[ClientId, SessionRoots], "deferred": list[JsonId], "told": tuple[Root, ...] | None,
        "answered": bool}


class RootsPart:
    """The sessions' roots of one server instance (see the module docstring)."""

    def __init__(self, shared: RelayShared, dispatch: Dispatch) -> None:
        self.shared = shared
        self.dispatch = dispatch  # a held request handled again once placed
        self.sessions: dict[ClientId, SessionRoots] = {}
        self.deferred: list[JsonId] = []  # the server's roots/list requests waiting for roots
        self.told: tuple[Root, ...] | None = None  # the roots the server was last given (None: an error)
        self.answered = False  # the server asked and was answered (told holds what) since it last heard of a change

    @property
    def clients(self) -> dict[ClientId, ClientState]:
        return self.shared.clients

    # ---- what a session says -----------------------------------------------------------------

    def session(self, cid: ClientId) -> SessionRoots:
        return self.sessions.setdefault(cid, SessionRoots())

    def initialize(self, cid: ClientId) -> list[Action]:
        """The client sent its `initialize`: a client without `roots` has its key now."""
        client = self.clients[cid]
        mine = self.session(cid)
        if client.declares("roots") or mine.key is not None:
            return []
        mine.key = NO_ROOTS
        return [SessionKey(cid, NO_ROOTS)]

    def initialized(self, cid: ClientId) -> list[Action]:
        """The client sent `notifications/initialized`: from now on it may be asked."""
        if not self.clients[cid].declares("roots") or self.session(cid).asking is not None:
            return []
        if self.session(cid).key is not None:
            return []
        return self._ask(cid)

    def list_changed(self, cid: ClientId) -> list[Action]:
        """The client's roots changed: ask again (its key may change with them)."""
        if not self.clients[cid].declares("roots"):
            return [Note(f"client {cid} sent roots/list_changed but declares no roots: dropped")]
        return self._ask(cid)

    def _ask(self, cid: ClientId) -> list[Action]:
        mine = self.session(cid)
        mine.asking = self.shared.routes.take_down_id()
        mine.asked_at = self.shared.now
        return [ToClient(cid, rpc.request_line(mine.asking, "roots/list")), Note(f"asking client {cid} for its roots")]

    def needs_placing(self, cid: ClientId) -> bool:
        """Whether a request of this session that needs the server must wait for its placement."""
        client = self.clients[cid]
        if client.params is None:
            return False  # no handshake: nothing to place it by (a stateless or odd client)
        return not self.session(cid).placed

    def hold(self, cid: ClientId, msg: Message) -> list[Action]:
        """Keep a request until the session is placed, asking its roots if nobody did yet."""
        mine = self.session(cid)
        mine.held.append(msg)
        out: list[Action] = [Note(f"client {cid} {msg.method} id={msg.id!r} held until its roots are known")]
        if mine.key is None and mine.asking is None and self.clients[cid].declares("roots"):
            out.extend(self._ask(cid))
        return out

    def answer(self, cid: ClientId, msg: Message) -> list[Action] | None:
        """The client's answer to the relay's own roots/list (None: not one)."""
        mine = self.sessions.get(cid)
        if mine is None or mine.asking is None or msg.id != mine.asking or isinstance(msg.id, bool):
            return None
        mine.asking = None
        roots = parse_roots(msg.obj.get("result"))
        if roots is None:
            # An error or a malformed answer: the client gives no roots; its server gets none.
            return [Note(f"client {cid} did not give its roots (it answered roots/list with an error)"),
                    *self._learned(cid, UNANSWERED, ())]
        return [Note(f"client {cid} declared {len(roots)} root(s)"), *self._learned(cid, roots_key(roots), roots)]

    def _learned(self, cid: ClientId, key: str, roots: tuple[Root, ...]) -> list[Action]:
        mine = self.session(cid)
        changed = mine.key != key
        mine.key, mine.roots = key, roots
        out: list[Action] = []
        if changed and not mine.placed:
            out.append(SessionKey(cid, key))
        out.extend(self.roots_moved())
        return out

    def overdue(self, now: float) -> list[Action]:
        """Sessions that did not answer the relay's roots/list within ROOTS_WAIT_S."""
        out: list[Action] = []
        for cid, mine in list(self.sessions.items()):
            if mine.asking is not None and now - mine.asked_at >= ROOTS_WAIT_S:
                mine.asking = None  # its late answer is dropped as a response to an unknown id
                out.append(Note(f"client {cid} did not answer roots/list within {ROOTS_WAIT_S:g}s: no roots for it"))
                out.extend(self._learned(cid, UNANSWERED, ()))
        return out

    def next_deadline(self) -> float | None:
        asked = [mine.asked_at + ROOTS_WAIT_S for mine in self.sessions.values() if mine.asking is not None]
        return min(asked) if asked else None

    # ---- placing -------------------------------------------------------------------------------

    def release(self, cid: ClientId) -> list[Action]:
        """The session stays on this process: its held requests are handled now, in order."""
        mine = self.sessions.get(cid)
        if mine is None or cid not in self.clients:
            return []
        mine.placed = True
        held, mine.held = mine.held, []
        out: list[Action] = [Note(f"client {cid} placed on this process")]
        out.extend(self.roots_moved())
        for msg in held:
            out.extend(self.dispatch(cid, msg))
        return out

    def keys(self) -> set[str]:
        """The keys of the sessions placed on this process."""
        return {mine.key for cid, mine in self.sessions.items() if mine.placed and mine.key is not None and cid in self.clients}

    def left(self, cid: ClientId) -> list[Action]:
        self.sessions.pop(cid, None)
        return self.roots_moved()

    # ---- the server asks -----------------------------------------------------------------------

    def _given(self) -> tuple[Root, ...] | None | str:
        """Roots, None (-32601), or "wait" (a session is being placed, none is yet)."""
        placed = [(cid, mine) for cid, mine in self.sessions.items() if mine.placed and cid in self.clients]
        if not placed:
            # A session being placed is the one this process will serve: its roots are worth a wait.
            waiting = any(not mine.placed and self.clients[cid].declares("roots")
                          for cid, mine in self.sessions.items() if cid in self.clients)
            return "wait" if waiting else None
        if all(mine.key == NO_ROOTS for _, mine in placed):
            return None
        return common_roots([mine.roots or () for _, mine in placed])

    def server_request(self, request_id: JsonId) -> list[Action]:
        """The server asked `roots/list`."""
        given = self._given()
        if given == "wait":
            self.deferred.append(request_id)
            return [Note("roots/list: waiting for the roots of the session this process serves")]
        return self._answer(request_id, given if not isinstance(given, str) else None)

    def _answer(self, request_id: JsonId, given: tuple[Root, ...] | None) -> list[Action]:
        self.told, self.answered = given, True
        if given is None:
            return [ToServer(rpc.error_line(request_id, rpc.METHOD_NOT_FOUND, "lazyd: no session of this process provides roots")),
                    Note("roots/list refused: no session of this process declares roots")]
        return [ToServer(rpc.result_line(request_id, roots_result(given))),
                Note(f"roots/list answered with the {len(given)} root(s) of the session(s) this process serves")]

    def roots_moved(self) -> list[Action]:
        """Answer what waits, and tell the server when its roots are no longer the ones given."""
        given = self._given()
        if given == "wait":
            return []
        roots = given if not isinstance(given, str) else None
        out: list[Action] = []
        deferred, self.deferred = self.deferred, []
        for request_id in deferred:
            out.extend(self._answer(request_id, roots))
        if self.answered and roots != self.told and self.shared.phase in (Phase.REFRESH, Phase.READY):
            self.answered = False  # until it asks again
            out.append(ToServer(rpc.notification_line("notifications/roots/list_changed")))
            out.append(Note("the roots of this process changed: sent roots/list_changed to the server"))
        return out

    def gone(self) -> None:
        """The process ended: it was given nothing any more, and asks nothing."""
        self.deferred = []
        self.told, self.answered = None, False

    # ---- moving a session ----------------------------------------------------------------------

    def take(self, cid: ClientId) -> tuple[SessionRoots, list[Message]]:
        """A session leaving for another process: its roots and its held requests."""
        mine = self.sessions.get(cid) or SessionRoots()
        held, mine.held = mine.held, []
        return SessionRoots(mine.key, mine.roots, None, mine.asked_at, False, []), held

    def move_in(self, cid: ClientId, known: SessionRoots) -> None:
        """A session arriving from another process with its roots known, placed here."""
        self.sessions[cid] = SessionRoots(known.key, known.roots, None, known.asked_at, True, [])
