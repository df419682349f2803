"""Handshake-era clients on a process that speaks only the stateless era on its connection.

For a server that speaks only the stateless era, or any with `era = "stateless"`, handshake-era
clients are served in their own era by the process the stateless clients use (docs/protocol-eras.md,
"The bridge: a handshake-era client on a stateless server"): `initialize` from the cached
discovery, each request upstream in an envelope made of the client's own `initialize` params,
results without the stateless-only fields, an `input_required` result turned into real requests to
the very client it answers and retried with their answers (at most MAX_INPUT_ROUNDS rounds),
listings from the stateless cache whatever their age, subscriptions through the relay's listen
stream (lazyd/core/eras/listen.py).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from lazyd.core.eras import versions as eras
from lazyd.core.relay import jsonrpc as rpc
from lazyd.core.eras.asker import PROBE_VERSION, Asker, asker_from_params
from lazyd.core.cache import LISTINGS, HandshakeEntry, Listing, handshake_key
from lazyd.core.relay.jsonrpc import JsonId, JsonObj, Kind, Message
from lazyd.core.relay.listings import Waiter
from lazyd.core.relay.actions import Action, Activity, Note, Phase, ToClient
from lazyd.core.relay.client_state import ClientState
from lazyd.core.relay.upstream import forward
from lazyd.core.relay.shared import RelayShared
from lazyd.core.relay.routing import CALLBACK_CAPABILITY, ClientId, Upstream
from lazyd.core.eras.stateless_cache import StatelessCache, advertised
from lazyd.core.eras.listen import ListenRelay

# The python SDK's own cap on input_required rounds: a server that keeps asking is given up on.
MAX_INPUT_ROUNDS = 10
# Requests whose result may be `input_required` (2026-07-28): only these keep a round's state.
INPUT_METHODS = frozenset({"tools/call", "prompts/get", "resources/read"})
MISSING_CAPABILITY = -32021  # MissingRequiredClientCapabilityError
BRIDGED_DEFAULT_LOG_LEVEL = "debug"


@dataclass
class InputRound:
    """A bridged request whose server asked for input: what to retry it with."""

    cid: ClientId
    client_id: JsonId
    method: str
    params: JsonObj  # the client's own params, without envelope
    rounds: int = 0
    pending: dict[str, int] = field(default_factory=dict)  # input key -> client-facing request id
    answers: dict[str, object] = field(default_factory=dict)
    request_state: str | None = None


# What the bridge keeps (lazyd/core/state_codec.py): the input rounds, and the requests for input
# a client was sent under a client-facing id -> (the client's request id, the server's input key).
KEPT = {"rounds": dict[tuple[ClientId, JsonId], InputRound],
        "input_waits": dict[tuple[ClientId, JsonId], tuple[JsonId, str]]}


class Bridge:
    """Handshake-era clients served by a stateless process, and their input rounds in progress."""

    def __init__(self, shared: RelayShared, cache: StatelessCache, listen: ListenRelay) -> None:
        self.shared = shared
        self.cache = cache
        self.listen = listen
        self.rounds: dict[tuple[ClientId, JsonId], InputRound] = {}
        self.input_waits: dict[tuple[ClientId, JsonId], tuple[JsonId, str]] = {}

    def bridging(self) -> bool:
        """Whether handshake-era clients are served through the bridge right now."""
        return self.shared.era.bridging(self.shared.phase, self.shared.instance is not None)

    def upstream_version(self) -> str:
        return eras.upstream_version(self.cache.known_discovery()) or PROBE_VERSION

    def client_asker(self, client: ClientState) -> Asker:
        asker = asker_from_params(client.params or {}, self.upstream_version())
        # A handshake-era server logs to a client that set no level (the python SDK sends every
        # message); a stateless one logs only to requests that opt in: opt in for it, as direct.
        level = self.shared.routes.levels.get(client.cid, BRIDGED_DEFAULT_LOG_LEVEL)
        return Asker(asker.version, asker.client_info, asker.capabilities, level)

    def initialize(self, client: ClientState, msg: Message) -> list[Action]:
        assert msg.id is not None
        asker = self.client_asker(client)
        # The handshake era has no ttl: a session must be able to begin from what is known.
        found = self.shared.snapshot.discovery_result(asker.version, asker.identity)
        if found is not None:
            result = eras.initialize_result_from_discover(found[0], msg.params.get("protocolVersion"), self.shared.name)
            return [ToClient(client.cid, rpc.result_line(msg.id, result), msg.id),
                    Note(f"client {client.cid} initialize answered from the server's discovery (bridged)")]
        if self.cache.can_fetch():
            waiter = Waiter(client.cid, msg.id, "initialize", msg.params.get("protocolVersion"))
            return self.cache.fetch("server/discover", asker, "client", waiter)
        return self.shared.queue.add(client.cid, msg, "initialize: no discovery cached for this client")

    def listing(self, client: ClientState, msg: Message) -> list[Action]:
        assert msg.id is not None and msg.method is not None
        if isinstance(msg.params.get("cursor"), str):
            if self.shared.phase is Phase.READY and self.shared.era.stateless_up:
                return self._forward(client, msg)
            # Everything was served as one page: the rest of "all pages" is nothing.
            return [ToClient(client.cid, rpc.result_line(msg.id, {LISTINGS[msg.method]: []}), msg.id)]
        return self.cache.listing(client.cid, msg, self.client_asker(client))

    def request(self, client: ClientState, msg: Message) -> list[Action]:
        """Any other handshake-era request, with the server READY and bridged."""
        assert msg.id is not None and msg.method is not None
        if msg.method in ("resources/subscribe", "resources/unsubscribe"):
            uri = msg.params.get("uri")
            resources = eras.discover_capabilities(self.shared.era.discovery).get("resources")
            if not (isinstance(resources, dict) and resources.get("subscribe") is True):
                # As the server itself answers a handshake client it offers no subscriptions to.
                return [ToClient(client.cid, rpc.error_line(msg.id, rpc.METHOD_NOT_FOUND, "Method not found", msg.method), msg.id)]
            if not isinstance(uri, str):
                return [ToClient(client.cid, rpc.error_line(msg.id, rpc.INVALID_PARAMS, "Invalid params: uri"), msg.id)]
            if msg.method == "resources/subscribe":
                self.shared.routes.subscriptions.setdefault(uri, set()).add(client.cid)
            else:
                self.shared.routes.unsubscribe(uri, client.cid)
            return [ToClient(client.cid, rpc.result_line(msg.id, {}), msg.id), Activity(), *self.listen.sync()]
        if msg.method in INPUT_METHODS:
            self.rounds.setdefault((client.cid, msg.id), InputRound(client.cid, msg.id, msg.method, copy.deepcopy(msg.params)))
        return self._forward(client, msg)

    def _forward(self, client: ClientState, msg: Message) -> list[Action]:
        asker = self.client_asker(client)
        msg.obj["params"] = eras.with_envelope(msg.params, asker.envelope())
        msg.raw = b""  # the line changed: never splice into the one received
        return forward(self.shared.routes, client.cid, msg, bridged=True, inspect=True, log_level=asker.log_level)

    def response(self, up: Upstream, msg: Message) -> list[Action]:
        assert up.cid is not None and up.client_id is not None
        result = msg.obj.get("result")
        if eras.is_input_required(result):
            assert isinstance(result, dict)
            return self._input_required(up.cid, up.client_id, result)
        self.end_round(up.cid, up.client_id)
        if "result" in msg.obj:
            return [ToClient(up.cid, rpc.result_line(up.client_id, eras.for_handshake_client(result)), up.client_id)]
        error = msg.obj.get("error")
        if up.method in INPUT_METHODS and isinstance(error, dict) and error.get("code") == rpc.INVALID_REQUEST:
            # Most likely a tool written for the handshake era's call-backs (the python SDK's
            # "no back-channel for server-initiated requests"): say why it cannot work here.
            return [ToClient(up.cid, rpc.dumps({"jsonrpc": "2.0", "id": up.client_id,
                                                "error": {**error, "message": self._hint(error)}}), up.client_id)]
        return [ToClient(up.cid, rpc.with_id(msg, up.client_id), up.client_id)]

    def _hint(self, error: JsonObj) -> str:
        why = ('era = "stateless" is set for it; with era = "auto" a handshake-era client gets a process in its own era'
               if self.shared.era.setting == "stateless" else "it speaks only the stateless era")
        return (f"{error.get('message', '')} (lazyd: this handshake-era client is served through the stateless era "
                f"of {self.shared.name}, where a server cannot send requests to its client: {why})")

    # ---- input_required, answered by the client it concerns -------------------------------------

    def _input_required(self, cid: ClientId, client_id: JsonId, result: JsonObj) -> list[Action]:
        client = self.shared.clients[cid]
        state = self.rounds.get((cid, client_id))
        if state is None:
            return self._round_failed(cid, client_id, rpc.INTERNAL_ERROR, "lazyd: the server asked for input on a request that cannot take it")
        state.rounds += 1
        if state.rounds > MAX_INPUT_ROUNDS:
            return self._round_failed(cid, client_id, rpc.INTERNAL_ERROR,
                                      f"lazyd: the server asked for input more than {MAX_INPUT_ROUNDS} times")
        request_state = result.get("requestState")
        state.request_state = request_state if isinstance(request_state, str) else None
        state.answers, state.pending = {}, {}
        out: list[Action] = []
        for key, request in eras.input_requests(result).items():
            method = str(request["method"])
            needed = CALLBACK_CAPABILITY.get(method)
            if needed is not None and not client.declares(needed):
                if method == "elicitation/create":
                    state.answers[key] = {"action": "decline"}
                    out.append(Note(f"client {cid} does not declare elicitation: declined for it"))
                    continue
                return self._round_failed(cid, client_id, MISSING_CAPABILITY,
                                          f"lazyd: the server needs {method} from this client, which does not declare {needed}",
                                          {"requiredCapabilities": {needed: {}}})
            down_id = self.shared.routes.take_down_id()
            state.pending[key] = down_id
            self.input_waits[(cid, down_id)] = (client_id, key)
            params = request.get("params")
            out.append(ToClient(cid, rpc.request_line(down_id, method, params if isinstance(params, dict) else None)))
            out.append(Note(f"{method} asked of client {cid} for its request id={client_id!r} (input_required)"))
        if not state.pending:
            out.extend(self._retry_round(state))
        return out

    def input_answer(self, cid: ClientId, msg: Message) -> list[Action] | None:
        """A client's answer to a request the bridge made for an `input_required` result."""
        assert msg.id is not None
        wait = self.input_waits.pop((cid, msg.id), None) if isinstance(msg.id, int) else None
        if wait is None:
            return None
        client_id, key = wait
        state = self.rounds.get((cid, client_id))
        if state is None or key not in state.pending:
            return [Note(f"client {cid} answer to a finished input round dropped")]
        del state.pending[key]
        result = msg.obj.get("result")
        if not isinstance(result, dict):
            error = msg.obj.get("error")
            why = error.get("message") if isinstance(error, dict) else None
            return self._round_failed(cid, client_id, rpc.INTERNAL_ERROR,
                                      f"lazyd: the client refused the server's request for input: {why or 'no reason given'}")
        state.answers[key] = result
        if state.pending:
            return [Activity()]
        return [Activity(), *self._retry_round(state)]

    def _retry_round(self, state: InputRound) -> list[Action]:
        params = dict(state.params)
        params["inputResponses"] = state.answers
        if state.request_state is not None:
            params["requestState"] = state.request_state
        obj: JsonObj = {"jsonrpc": "2.0", "id": state.client_id, "method": state.method, "params": params}
        msg = Message(Kind.REQUEST, obj, state.client_id, state.method)
        if self.shared.phase is Phase.READY and self.bridging():
            return self.request(self.shared.clients[state.cid], msg)
        return self.shared.queue.add(state.cid, msg, "retry with the client's input")

    def _round_failed(self, cid: ClientId, client_id: JsonId, code: int, message: str, data: object = None) -> list[Action]:
        self.end_round(cid, client_id)
        return [ToClient(cid, rpc.error_line(client_id, code, message, data), client_id), Note(message)]

    def end_round(self, cid: ClientId, client_id: JsonId) -> None:
        state = self.rounds.pop((cid, client_id), None)
        if state is not None:
            for down_id in state.pending.values():
                self.input_waits.pop((cid, down_id), None)

    def forget_rounds(self, cid: ClientId) -> None:
        for key in [k for k in self.rounds if k[0] == cid]:
            self.end_round(*key)

    def end_answered_rounds(self) -> None:
        """Rounds whose retry was waiting (in flight or queued) were just answered with an error."""
        for key in [k for k, r in self.rounds.items() if not r.pending]:
            self.end_round(*key)

    # ---- what a handshake-era client sees (lazyctl check) ----------------------------------------

    def handshake_view(self, params: JsonObj) -> HandshakeEntry | None:
        """The handshake a client with these params is served from the snapshot (maybe bridged)."""
        entry = self.shared.snapshot.entries.get(handshake_key(params))
        if entry is not None:
            return entry
        asker = asker_from_params(params, self.upstream_version())
        found = self.shared.snapshot.discovery_result(asker.version, asker.identity)
        if found is None:
            return None
        result = eras.initialize_result_from_discover(found[0], params.get("protocolVersion"), self.shared.name)
        listings: dict[str, Listing] = {}
        for method in advertised(found[0]):
            cached = self.cache.lookup(method, asker)
            items = cached.result.get(LISTINGS[method]) if cached is not None else None
            if isinstance(items, list):
                listings[method] = Listing(items=items)
        return HandshakeEntry(params, result, listings)
