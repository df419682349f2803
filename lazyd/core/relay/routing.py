"""Who owns what, when several clients share one server (docs/relay.md, "Sharing one process").

Client requests go upstream under fresh *relay ids* from a counter never reused, server requests
go to clients under fresh *client-facing ids*; these tables map both back, and hold what the
server must not see mixed up: progress tokens, task and URL-elicitation ownership, subscriptions,
log levels. Nothing on the stdio wire ties a server-to-client request to the client request that
caused it, so routing is a policy: the owner of its related task; else the only client with a
callback-capable request in flight that declared the capability; else the `sampling_policy`:
"refuse" (never guess: a wrong guess leaks one client's data to another, GHSA-345p-7cg4-v4c7) or
"most-recent".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from lazyd.core.relay.jsonrpc import JsonId, JsonObj

ClientId = int
SamplingPolicy = Literal["refuse", "most-recent"]

# Requests during which a server may legitimately call back into the client.
CALLBACK_CAPABLE = frozenset({"tools/call", "prompts/get", "resources/read", "completion/complete"})
# Server-to-client request -> the client capability it needs.
CALLBACK_CAPABILITY = {
    "sampling/createMessage": "sampling",
    "elicitation/create": "elicitation",
    "roots/list": "roots",
}
RELATED_TASK_META = "io.modelcontextprotocol/related-task"

# Syslog severities as MCP names them, most verbose first.
LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


def level_rank(level: object) -> int:
    try:
        return LOG_LEVELS.index(str(level))
    except ValueError:
        return 0


@dataclass(slots=True)
class Upstream:
    """A request the relay sent to the server, keyed by its relay id."""

    method: str
    cid: ClientId | None  # None: the relay's own request (replay, refresh, subscribe replay)
    client_id: JsonId | None
    purpose: str = ""  # for the relay's own requests
    token: JsonId | None = None  # the client's original progress token, if rewritten
    seq: int = 0  # start order, for the "most-recent" policy
    # The relay reads the result (to cache, convert or answer it): always decoded, however large.
    inspect: bool = False
    # A bridged handshake-era client's request (bridge.py): its result is converted back.
    bridged: bool = False
    log_level: str | None = None  # a stateless request's `_meta` log-level opt-in


class Downstream(NamedTuple):
    """A server-to-client request sent to one client under a client-facing id."""

    server_id: JsonId
    method: str


@dataclass
class Routes:
    """Every id mapping of one server instance, as plain data. The counters are part of it: relay
    ids are never reused, so a late response can never be misrouted."""

    upstream: dict[int, Upstream] = field(default_factory=dict)
    # (client, original id) -> relay id, to rewrite cancellations.
    by_client: dict[tuple[ClientId, JsonId], int] = field(default_factory=dict)
    # relay progress token -> (client, original token); the relay token is the relay id.
    tokens: dict[int, tuple[ClientId, JsonId]] = field(default_factory=dict)
    downstream: dict[tuple[ClientId, JsonId], Downstream] = field(default_factory=dict)
    tasks: dict[str, ClientId] = field(default_factory=dict)
    elicitations: dict[str, ClientId] = field(default_factory=dict)
    subscriptions: dict[str, set[ClientId]] = field(default_factory=dict)
    levels: dict[ClientId, str] = field(default_factory=dict)
    next_id: int = 1  # the next relay id (requests to the server)
    next_down_id: int = 1  # the next client-facing id (server-to-client requests)
    seq: int = 0  # order of client requests: the roots owner, the "most-recent" policy
    # Entries of `upstream` a client waits on, kept with every change of `upstream`: the count is
    # read after every relayed message, and counting the map would cost O(requests in flight).
    client_inflight: int = field(default=0, init=False)
    # Each client's session id, and whether requests carry it in `_meta` (session_meta.py: a
    # session-aware server); `session_forced`: the setting says so, whatever the server declares.
    sessions: dict[ClientId, str] = field(default_factory=dict)
    session_meta: bool = False
    session_forced: bool = False

    def __post_init__(self) -> None:
        self.client_inflight = sum(1 for up in self.upstream.values() if up.cid is not None)

    def take_id(self) -> int:
        rid = self.next_id
        self.next_id += 1
        return rid

    def take_down_id(self) -> int:
        down_id = self.next_down_id
        self.next_down_id += 1
        return down_id

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def process_gone(self) -> None:
        """Nothing in flight or created by the process outlives it; subscriptions and log levels
        are the clients' and stay."""
        self.upstream.clear()
        self.client_inflight = 0
        self.by_client.clear()
        self.tokens.clear()
        self.downstream.clear()
        self.tasks.clear()
        self.elicitations.clear()

    def add(self, relay_id: int, up: Upstream) -> None:
        self.pop(relay_id)  # relay ids are never reused; were one, the count must stay right
        self.upstream[relay_id] = up
        if up.cid is not None:
            self.client_inflight += 1
        if up.cid is not None and up.client_id is not None:
            self.by_client[(up.cid, up.client_id)] = relay_id

    def pop(self, relay_id: int) -> Upstream | None:
        up = self.upstream.pop(relay_id, None)
        if up is not None and up.cid is not None:
            self.client_inflight -= 1
        if up is not None and up.cid is not None and up.client_id is not None:
            self.by_client.pop((up.cid, up.client_id), None)
        return up

    def unsubscribe(self, uri: str, cid: ClientId) -> bool:
        """Drop `cid`'s subscription to `uri`; whether any client is still subscribed to it."""
        subscribers = self.subscriptions.get(uri, set())
        subscribers.discard(cid)
        if not subscribers:
            self.subscriptions.pop(uri, None)
        return bool(subscribers)

    def release_token(self, relay_id: int) -> None:
        self.tokens.pop(relay_id, None)

    def inflight_of(self, cid: ClientId) -> list[int]:
        return [rid for rid, up in self.upstream.items() if up.cid == cid]

    def callback_candidates(self) -> list[tuple[int, ClientId]]:
        """(seq, client) of every in-flight callback-capable client request."""
        return [(up.seq, up.cid) for up in self.upstream.values() if up.cid is not None and up.method in CALLBACK_CAPABLE]

    def most_verbose_level(self) -> str | None:
        if not self.levels:
            return None
        return min(self.levels.values(), key=level_rank)

    def forget_client(self, cid: ClientId) -> None:
        """Drop everything but in-flight upstream requests (the relay cancels those itself)."""
        for key in [k for k in self.downstream if k[0] == cid]:
            del self.downstream[key]
        for token in [t for t, (c, _) in self.tokens.items() if c == cid]:
            del self.tokens[token]
        for task in [t for t, c in self.tasks.items() if c == cid]:
            del self.tasks[task]
        for eid in [e for e, c in self.elicitations.items() if c == cid]:
            del self.elicitations[eid]
        self.levels.pop(cid, None)
        self.sessions.pop(cid, None)


def choose_callback_target(
    routes: Routes,
    params: JsonObj,
    policy: SamplingPolicy,
    capable: Callable[[ClientId], bool] = lambda cid: True,
) -> tuple[ClientId | None, str]:
    """The client a sampling/elicitation request goes to, and the reason (for the log).
    `capable` tells whether a client declared the capability the request needs."""
    meta = params.get("_meta")
    if isinstance(meta, dict):
        related = meta.get(RELATED_TASK_META)
        if isinstance(related, dict) and isinstance(related.get("taskId"), str):
            owner = routes.tasks.get(related["taskId"])
            if owner is not None:
                return owner, "owner of the related task"
    busy = routes.callback_candidates()
    candidates = [(seq, cid) for seq, cid in busy if capable(cid)]
    clients = {cid for _, cid in candidates}
    if len(clients) == 1:
        return clients.pop(), "only client with a callback-capable request in flight"
    if not clients:
        if busy:
            return None, "no client with a callback-capable request in flight declares the capability it needs"
        return None, "no client has a callback-capable request in flight"
    if policy == "most-recent":
        return max(candidates)[1], "most recent callback-capable request (sampling_policy = most-recent)"
    return None, f"{len(clients)} clients have callback-capable requests in flight (sampling_policy = refuse)"
