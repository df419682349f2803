"""The stateless era in the relay core: the era probe and what its answers teach, the stateless
start, and where each stateless request goes (stages: lazyd/core/eras/state.py).

Era probe: the relay's own `server/discover`, with a real client's identity in the envelope, first
on a stateless lane's connection, after the handshake on a handshake lane's. A stateless
DiscoverResult means the process speaks that era; anything else, or a handshake completed before
the answer, handshake only. A replayed `initialize` pipelined behind the probe tells the rest: both
answered, one connection carries both eras (`mixed_connection`); `initialize` refused, one era per
connection, and handshake-era clients here are bridged. A first `initialize` refused with -32022
naming stateless versions (or by a server known to have a stateless era) means stateless only
(`Snapshot.handshake_first = False`): the relay probes, and bridges.

Stateless start: no handshake; the listen stream opens and every advertised listing is fetched
under the identity of whoever caused the start; READY once both are in.

Requests: discovery and listings through the cache, `subscriptions/listen` the relay's own,
methods the era removed -32601, a version the server does not list (or a handshake-only server)
-32022 from the cache without a start; the rest forwarded under a relay id, results untouched.
"""

from __future__ import annotations


from lazyd.core.eras import versions as eras
from lazyd.core.relay import jsonrpc as rpc
from lazyd.core.eras.asker import PROBE_VERSION
from lazyd.core.cache import ANY_VERSION, LISTINGS, is_stateless_discovery
from lazyd.core.eras.state import Event, Stage
from lazyd.core.relay.jsonrpc import JsonObj, Message
from lazyd.core.relay.upstream import foreign_task, forward
from lazyd.core.relay.actions import Abort, Action, Dispatch, Note, Phase, Ready, SnapshotChanged, ToClient
from lazyd.core.relay.startup import Handshake, refusal_reason
from lazyd.core.relay.shared import RelayShared
from lazyd.core.relay.routing import ClientId
from lazyd.core.eras.stateless_cache import StatelessCache, advertised
from lazyd.core.eras.listen import ListenRelay


class StatelessEra:
    """The era probe's verdicts, the stateless start and stateless requests (module docstring)."""

    def __init__(self, shared: RelayShared, cache: StatelessCache, listen: ListenRelay, handshake: Handshake,
                 dispatch: Dispatch) -> None:
        self.shared = shared
        self.dispatch = dispatch  # a queued request handled again once ready
        self.cache = cache
        self.listen = listen
        self.handshake = handshake
        self.starting = False  # a stateless start is under way (READY once its listings are in)

    # ---- the era probe and its verdicts ----------------------------------------------------------

    def send_probe(self) -> list[Action]:
        return self.cache.probe("probe", f"probing the protocol era with server/discover {PROBE_VERSION}")

    def probe_answered(self, msg: Message) -> list[Action]:
        out = self.cache.record_probe(msg.obj)
        result = msg.obj.get("result")
        stateless = is_stateless_discovery(result) and eras.upstream_version(result) is not None
        self.shared.era.move(Event.PROBE_STATELESS if stateless else Event.PROBE_OTHER)
        self.shared.era.discovery = result if stateless and isinstance(result, dict) else None
        if stateless:
            out.append(Note(f"the server speaks the stateless era ({', '.join(eras.stateless_versions(result))})"))
            if self.shared.era.held is not None:
                self.shared.era.held = None
                out.extend(self.shared.era.learn_mixed(False))
                out.extend(self.start())
            elif self.shared.phase is Phase.HANDSHAKE:
                pass  # the replayed initialize's answer decides whether one connection does both
            elif self.shared.instance is not None:
                out.extend(self.shared.era.learn_mixed(True))
                out.extend(self.listen.sync())
            else:
                out.extend(self.start())
            return out
        out.append(Note("the server does not speak the stateless era: handshake only"))
        if self.shared.era.setting == "stateless":
            # The user's setting asks for an era the server lacks: said as such (era_refusal).
            self.shared.era.held = None
            reason = self._no_stateless_era_text()
            return [*out, *self.shared.queue.fail(reason, self.shared.clients), Abort(reason)]
        refused = self.shared.era.held
        if refused is not None:
            self.shared.era.held = None
            reason = refusal_reason(refused)
            return [*out, *self.shared.queue.fail(f"lazyd: {reason}", self.shared.clients), Abort(reason)]
        out.extend(self.refuse_queued_stateless())
        if self.shared.instance is None and self.shared.phase is Phase.PREINIT:
            params = self.handshake.replay_params()
            if params is not None:
                out.extend(self.handshake.send_initialize(params))
        return out

    def initialize_refused(self, error: JsonObj) -> list[Action] | None:
        """The stateless era's reading of a refused replayed initialize (None: a failed start)."""
        if self.shared.era.stateless_up is True:
            self.shared.instance = None
            out = [Note("the server refused initialize after discovery: handshake-era clients are bridged"),
                   *self.shared.era.learn_mixed(False)]
            if not self.starting and self.shared.phase is not Phase.READY:
                out.extend(self.start())
            return out
        if self.shared.era.stage is Stage.PROBING:
            self.shared.era.held = error
            self.shared.instance = None
            self.shared.phase = Phase.PREINIT
            return [Note("initialize refused while the era probe is pending: its answer decides")]
        data = error.get("data")
        names_stateless = error.get("code") == eras.UNSUPPORTED_PROTOCOL_VERSION and bool(eras.stateless_versions(
            {"supportedVersions": data.get("supported") if isinstance(data, dict) else None}))
        if self.shared.era.stage is Stage.HANDSHAKE and (names_stateless or self.shared.snapshot.era() == "stateless"):
            # Refused by a server with a stateless era (-32022 naming one is that evidence, the
            # SDK's own rule): stateless only. Probe it, and bridge the handshake-era clients.
            self.shared.era.held = error
            self.shared.era.move(Event.FIRST_INITIALIZE_REFUSED)
            self.shared.instance = None
            self.shared.phase = Phase.PREINIT
            learned: list[Action] = [Note("the first initialize was refused: the server speaks only the stateless era"),
                                     *self.shared.era.learn_first_initialize(False)]
            return learned + self.send_probe()
        return None

    def probe_after_answered(self, msg: Message) -> list[Action]:
        """The answer to the `server/discover` after the handshake: what else the connection carries."""
        result = msg.obj.get("result")
        if is_stateless_discovery(result) and eras.upstream_version(result) is not None:
            assert isinstance(result, dict)
            out = self.cache.record_probe(msg.obj)
            self.shared.era.move(Event.PROBE_AFTER_STATELESS)
            self.shared.era.discovery = result
            out.append(Note("the handshake connection answers discovery too: both eras on one connection"))
            return out + self.shared.era.learn_mixed(True) + self.listen.sync()
        error = msg.obj.get("error")
        code = error.get("code") if isinstance(error, dict) else None
        if code == rpc.METHOD_NOT_FOUND and self.shared.snapshot.era() is None:
            out = self.cache.record_probe(msg.obj)
            return [*out, Note("server/discover: -32601 after the handshake: the server speaks only the handshake era"),
                    *self.refuse_queued_stateless()]
        return [Note(f"server/discover after the handshake: error {code!r}: this connection carries the handshake era only"),
                *self.shared.era.learn_mixed(False)]

    def probe_unanswered(self) -> list[Action]:
        """The handshake completed before the era probe's answer: handshake only, recorded as a
        -32601 so clients' probes fall back at once."""
        if self.shared.era.stage is not Stage.PROBING:
            return []
        self.shared.era.move(Event.HANDSHAKE_BEFORE_PROBE)
        error = {"code": rpc.METHOD_NOT_FOUND, "message": "lazyd: the server did not answer server/discover before its handshake"}
        self.shared.snapshot.discover.setdefault(ANY_VERSION, {"error": error})
        return [SnapshotChanged(), Note("the era probe is unanswered after the handshake: handshake era only"),
                *self.refuse_queued_stateless()]

    def era_refusal(self, msg: Message) -> bytes | None:
        """Refuse, from the cache, a request to a server set to era = "stateless" that has none."""
        if self.shared.era.setting != "stateless" or self.shared.snapshot.era() != "handshake" or self.shared.era.stateless_up is True:
            return None
        assert msg.id is not None
        return rpc.error_line(msg.id, rpc.SERVER_UNAVAILABLE, self._no_stateless_era_text())

    def _no_stateless_era_text(self) -> str:
        answer = next(iter(self.shared.snapshot.discover.values()), {})
        error = answer.get("error") if isinstance(answer, dict) else None
        said = f"{error.get('code')} {str(error.get('message', ''))[:120]}" if isinstance(error, dict) else "no DiscoverResult"
        return (f'lazyd: server {self.shared.name} is set to era = "stateless", but it does not speak the stateless '
                f'era (server/discover: {said}); set era = "auto" or "handshake" for it')

    def refuse_queued_stateless(self) -> list[Action]:
        out: list[Action] = []
        for cid, msg in self.shared.queue.take():
            line = self.refusal(msg) if msg.method is not None and eras.is_stateless_request(msg.method, msg.params) else None
            if line is not None and msg.id is not None:
                out.append(ToClient(cid, line, msg.id))
            else:
                self.shared.queue.hold(cid, msg)
        return out

    # ---- the stateless start ---------------------------------------------------------------------

    def start(self) -> list[Action]:
        """The stateless start (module docstring)."""
        self.shared.instance = None
        self.shared.phase = Phase.REFRESH
        self.starting = True
        version = eras.upstream_version(self.shared.era.discovery) or PROBE_VERSION
        asker = self.cache.start_asker(version)
        out: list[Action] = [*self.listen.sync()]
        for method in advertised(self.shared.era.discovery):
            out.extend(self.cache.fetch(method, asker, "start"))
        # Listings that woke the server join those fetches now rather than fetch again at READY.
        for cid, msg in self.shared.queue.take():
            if cid in self.shared.clients and msg.method in LISTINGS and not isinstance(msg.params.get("cursor"), str):
                out.extend(self.dispatch(cid, msg))
            else:
                self.shared.queue.hold(cid, msg)
        return out + self.maybe_ready()

    def maybe_ready(self) -> list[Action]:
        """Complete once listings and listen stream are in: no later change can go unnoticed."""
        if not self.starting or self.listen.pending is not None:
            return []
        if self.shared.listings.pending(stateless=True, why="start"):
            return []
        self.starting = False
        self.shared.phase = Phase.READY
        out: list[Action] = [Ready()]
        for cid, msg in self.shared.queue.take():
            if cid in self.shared.clients and msg.id is not None:
                out.extend(self.dispatch(cid, msg))
        return out

    def gone(self) -> list[Action]:
        """The process ended: whoever waited on a fetch gets an error; client streams stay."""
        out: list[Action] = []
        why = f"lazyd: server {self.shared.name} stopped before answering"
        for fetch in self.shared.listings.gone():
            for w in fetch.waiters:
                if w.cid in self.shared.clients:
                    line = rpc.error_line(w.client_id, rpc.SERVER_UNAVAILABLE, why)
                    out.append(ToClient(w.cid, line, w.client_id))
        self.listen.process_gone()
        self.shared.era.gone()
        self.starting = False
        return out

    # ---- stateless requests ----------------------------------------------------------------------

    def request(self, cid: ClientId, msg: Message) -> list[Action]:
        assert msg.method is not None and msg.id is not None
        method = msg.method
        out = self._remember_asker(cid, msg.params)
        if method == "server/discover":
            return out + self.cache.discover(cid, msg)
        refusal = self.refusal(msg)
        if refusal is not None:
            return [*out, ToClient(cid, refusal, msg.id), Note(f"client {cid} {method}: protocol version refused")]
        if method in eras.REMOVED_IN_STATELESS:
            return [*out, ToClient(cid, rpc.error_line(msg.id, rpc.METHOD_NOT_FOUND, "Method not found", method), msg.id)]
        if method in LISTINGS and not isinstance(msg.params.get("cursor"), str) and not eras.is_continuation(msg.params):
            return out + self.cache.listing(cid, msg)
        if method == "subscriptions/listen":
            return out + self.listen.listen(cid, msg)
        if self.shared.phase is not Phase.READY or self.shared.era.stateless_up is not True:
            return out + self.shared.queue.add(cid, msg, "needs the server")
        hidden = foreign_task(self.shared.routes, cid, msg)
        if hidden is not None:
            return out + hidden
        return out + forward(self.shared.routes, cid, msg, log_level=eras.log_level_of(msg.params))

    def _remember_asker(self, cid: ClientId, params: JsonObj) -> list[Action]:
        info, caps = eras.envelope_identity(params)
        meta = {"clientInfo": info, "clientCapabilities": caps}
        if not info or self.shared.snapshot.last_meta == meta:
            return []
        first = self.shared.snapshot.last_meta is None
        self.shared.snapshot.last_meta = meta
        # Saved with the next change saved anyway: clients taking turns must not cost a write each.
        return [SnapshotChanged()] if first else []

    def _handshake_versions(self) -> list[str]:
        versions = {e.result.get("protocolVersion") for e in self.shared.snapshot.entries.values()}
        if self.shared.instance is not None:
            versions.add(self.shared.instance.result.get("protocolVersion"))
        known = sorted(v for v in versions if isinstance(v, str))
        return known or list(eras.HANDSHAKE_VERSIONS)

    def refusal(self, msg: Message) -> bytes | None:
        """-32022 for a stateless request this server cannot take, decided without waking it."""
        assert msg.id is not None
        version = eras.request_version(msg.params)
        if self.shared.era.setting == "handshake":
            return eras.unsupported_version_line(
                msg.id, version, self._handshake_versions(),
                f'lazyd: server {self.shared.name} is set to era = "handshake" (initialize), not protocol {version}')
        down_handshake_only = self.shared.phase is Phase.DOWN and self.shared.snapshot.era() == "handshake"
        if self.shared.era.stateless_up is False or down_handshake_only:
            return eras.unsupported_version_line(
                msg.id, version, self._handshake_versions(),
                f"lazyd: server {self.shared.name} speaks only the handshake era (initialize), not protocol {version}")
        listed = eras.stateless_versions(self.cache.known_discovery())
        if listed and version not in listed:
            why = f"lazyd: server {self.shared.name} does not support protocol {version}"
            return eras.unsupported_version_line(msg.id, version, listed, why)
        return None
