"""The relay core's state round-trips: a core rebuilt from `to_state` behaves as the one that wrote it.

A successor daemon carries on from the state its predecessor wrote (lazyd/daemon/upgrade/state.py),
so "plain data" must mean "everything that decides behaviour". The test builds random core states
the only honest way, by driving a core with random events (clients of both eras attaching,
initializing, calling with progress tokens, subscribing, cancelling, answering the server's
requests, leaving; a server of a random kind starting, answering, asking, notifying, exiting),
then writes the state through JSON, builds a second core from it, and feeds both the same further
events: every action of both must be equal, and so must their states at the end.

The events are chosen from what the first core did (which requests are pending upstream, which
server requests a client holds), so both copies stay in lockstep exactly as long as they agree.
"""

from __future__ import annotations

import copy
import json
import random
import re
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lazyd.core.relay import jsonrpc as rpc
from lazyd.core.cache import Snapshot
from lazyd.core.eras.versions import CLIENT_CAPABILITIES_META, CLIENT_INFO_META, PROTOCOL_VERSION_META, SUBSCRIPTION_ID_META
from lazyd.core.relay.jsonrpc import JsonId, JsonObj
from lazyd.core.relay.core import Action, RelayCore, ToClient, ToServer
from tests.unit.relay_driver import (BARE_PARAMS, CLIENT_PARAMS, INIT_RESULT, NOT_FOUND, PAGES, ITEM_KEYS, Driver,
                                     running, warm_snapshot)
from tests.unit.stateless_relay_support import DISCOVERY, PV, UNSUPPORTED_INIT, known_stateless, stateless_running

EXAMPLES = 150
SERVER_KINDS = ("handshake", "dual", "stateless")
LANES = (None, "handshake", "stateless")
OPS = ("attach", "attach", "hello", "call", "call", "call", "stateless", "list", "subscribe", "level", "cancel",
       "detach", "spawn", "answer", "answer", "answer", "answer", "progress", "server_request", "server_request",
       "server_request", "client_answer", "client_answer",
       "notify", "exit", "fail", "ping", "listen", "startup", "startup", "startup", "startup", "startup")
# What the relay asks on its own at a start: answered first by "startup", so that many walks reach READY.
STARTUP = {"initialize", "server/discover", "subscriptions/listen", "logging/setLevel", "resources/subscribe", *ITEM_KEYS}


def roundtrip(core: RelayCore, snapshot: Snapshot) -> RelayCore:
    """A second core from `core`'s state, through JSON as the state file carries it."""
    text = json.dumps(core.to_state(), ensure_ascii=True, allow_nan=True)
    twin_snapshot = Snapshot.from_json(json.loads(json.dumps(snapshot.to_json())))
    return RelayCore.from_state(json.loads(text), core.name, twin_snapshot, core.sampling_policy, core.era.setting)


@dataclass
class Scene:
    """Chooses events from what the first core did; feeds each event to every core given."""

    rng: random.Random
    kind: str
    clients: list[int] = field(default_factory=list)
    next_cid: int = 1
    next_id: int = 1
    outstanding: dict[int, list[JsonId]] = field(default_factory=dict)
    upstream: dict[int, JsonObj] = field(default_factory=dict)  # relay id -> what the server was sent
    asked: list[tuple[int, JsonId, str]] = field(default_factory=list)  # server requests clients hold
    up: bool = False
    now: float = 1_000.0
    server_next: int = 500

    def record(self, actions: list[Action]) -> None:
        for action in actions:
            if isinstance(action, ToServer):
                msg = json.loads(action.line)
                if "id" in msg and "method" in msg:
                    self.upstream[msg["id"]] = msg
                elif "id" in msg:
                    pass  # an answer to a server request
            elif isinstance(action, ToClient):
                msg = json.loads(action.line)
                if "method" in msg and "id" in msg:
                    self.asked.append((action.cid, msg["id"], msg["method"]))

    def event(self, op: str) -> tuple[str, tuple[Any, ...]] | None:
        """One event, as (method of RelayCore, its arguments without `now`), or None to skip."""
        rng = self.rng
        cid = rng.choice(self.clients) if self.clients else None
        if op == "attach" and len(self.clients) < 4:
            cid = self.next_cid
            self.next_cid += 1
            self.clients.append(cid)
            self.outstanding[cid] = []
            return "attach", (cid,)
        if cid is None:
            return None
        if op == "hello":
            params = rng.choice([CLIENT_PARAMS, BARE_PARAMS, {**CLIENT_PARAMS, "protocolVersion": "2025-06-18"}])
            if rng.random() < 0.3:
                return "client_line", (cid, rpc.notification_line("notifications/initialized"))
            return "client_line", (cid, self.request(cid, "initialize", params))
        if op == "call":
            call: JsonObj = {"name": rng.choice(["echo", "add", "longRunning"]), "arguments": {"n": rng.randrange(5)}}
            if rng.random() < 0.5:
                call["_meta"] = {"progressToken": rng.choice([cid * 100 + self.next_id, f"tok{self.next_id}", 1])}
            return "client_line", (cid, self.request(cid, rng.choice(["tools/call", "prompts/get", "resources/read"]), call))
        if op == "stateless":
            params = {"_meta": {PROTOCOL_VERSION_META: PV, CLIENT_INFO_META: {"name": f"m{cid}", "version": "1"},
                                CLIENT_CAPABILITIES_META: rng.choice([{}, {"sampling": {}}])}}
            method = rng.choice(["tools/list", "server/discover", "tools/call", "prompts/list"])
            if method == "tools/call":
                params["name"] = "echo"
            return "client_line", (cid, self.request(cid, method, params))
        if op == "list":
            method = rng.choice(list(ITEM_KEYS) + ["ping"])
            return "client_line", (cid, self.request(cid, method, {} if rng.random() < 0.5 else {"cursor": "1"}))
        if op == "subscribe":
            method = rng.choice(["resources/subscribe", "resources/unsubscribe"])
            return "client_line", (cid, self.request(cid, method, {"uri": rng.choice(["file:///a", "file:///b/c"])}))
        if op == "level":
            return "client_line", (cid, self.request(cid, "logging/setLevel", {"level": rng.choice(["debug", "error", "info"])}))
        if op == "listen":
            params = {"_meta": {PROTOCOL_VERSION_META: PV, CLIENT_INFO_META: {"name": f"m{cid}", "version": "1"},
                                CLIENT_CAPABILITIES_META: {}},
                      "notifications": {"toolsListChanged": True, "resourceSubscriptions": ["file:///a"]}}
            return "client_line", (cid, self.request(cid, "subscriptions/listen", params))
        if op == "cancel" and self.outstanding[cid]:
            target = rng.choice(self.outstanding[cid])
            return "client_line", (cid, rpc.notification_line("notifications/cancelled", {"requestId": target}))
        if op == "detach":
            self.clients.remove(cid)
            return "detach", (cid,)
        if op == "client_answer" and self.asked:
            owner, down_id, method = self.asked.pop(rng.randrange(len(self.asked)))
            if owner not in self.clients:
                return None
            value: Any = {"roots": []} if method == "roots/list" else {"action": "accept"} if method == "elicitation/create" \
                else {"role": "assistant", "content": {"type": "text", "text": "hi"}, "model": "m"}
            line = rpc.result_line(down_id, value) if rng.random() < 0.8 else rpc.error_line(down_id, -1, "no")
            return "client_line", (owner, line)
        return self.server_event(op)

    def request(self, cid: int, method: str, params: JsonObj) -> bytes:
        msg_id: JsonId = self.next_id if self.rng.random() < 0.7 else f"s{self.next_id}"
        self.next_id += 1
        self.outstanding[cid].append(msg_id)
        obj = {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params}
        # Clients write JSON their own way: the relay splices ids into their bytes, which a
        # successor must keep (a compact line would re-serialise to the same bytes and hide it).
        return json.dumps(obj).encode() if self.rng.random() < 0.5 else rpc.dumps(obj)

    def server_event(self, op: str) -> tuple[str, tuple[Any, ...]] | None:
        rng = self.rng
        if op == "spawn" and not self.up:
            self.up = True
            return "spawned", ()
        if op == "fail" and not self.up:
            return "start_failed", ("command not found",)
        if not self.up:
            return None
        if op == "exit" and rng.random() < 0.3:
            self.up = False
            self.upstream.clear()
            return "exited", ("exited with status 1",)
        if op == "startup":
            starting = sorted(rid for rid, m in self.upstream.items() if m["method"] in STARTUP)
            if starting:
                return "server_line", (self.answer(self.upstream.pop(starting[0])),)
            op = "answer"
        if op == "answer" and self.upstream:
            rid = rng.choice(sorted(self.upstream))
            msg = self.upstream.pop(rid)
            return "server_line", (self.answer(msg),)
        if op == "progress":
            tokens = [m["params"]["_meta"]["progressToken"] for m in self.upstream.values()
                      if isinstance(m.get("params"), dict) and isinstance(m["params"].get("_meta"), dict)
                      and "progressToken" in m["params"]["_meta"]]
            token = rng.choice(tokens) if tokens else rng.randrange(50)
            return "server_line", (rpc.notification_line("notifications/progress", {"progressToken": token, "progress": 1}),)
        if op == "server_request":
            self.server_next += 1
            method = rng.choice(["sampling/createMessage", "roots/list", "elicitation/create", "ping"])
            params: JsonObj = {"messages": [], "maxTokens": 5} if method == "sampling/createMessage" else {}
            return "server_line", (rpc.request_line(self.server_next, method, params),)
        if op == "notify":
            method = rng.choice(["notifications/tools/list_changed", "notifications/resources/updated",
                                 "notifications/message", "notifications/prompts/list_changed"])
            params = {"uri": "file:///a"} if method.endswith("updated") else {"level": "info", "data": "x"}
            return "server_line", (rpc.notification_line(method, params),)
        if op == "ping":
            line = b"not json at all" if rng.random() < 0.3 else rpc.request_line(self.server_next + 1, "ping")
            self.server_next += 1
            return "server_line", (line,)
        return None

    def answer(self, msg: JsonObj) -> bytes:
        """What a server of this scene's kind answers to `msg`."""
        method, rid, params = msg["method"], msg["id"], msg.get("params") or {}
        rng = self.rng
        if method == "initialize":
            if self.kind == "stateless":
                return rpc.dumps({"jsonrpc": "2.0", "id": rid, "error": UNSUPPORTED_INIT})
            return rpc.result_line(rid, INIT_RESULT)
        if method == "server/discover":
            if self.kind == "handshake":
                return rpc.dumps({"jsonrpc": "2.0", "id": rid, "error": NOT_FOUND})
            return rpc.result_line(rid, DISCOVERY)
        if method == "subscriptions/listen":
            ack = {"_meta": {SUBSCRIPTION_ID_META: rid}, "notifications": params.get("notifications", {})}
            return rpc.notification_line("notifications/subscriptions/acknowledged", ack)
        if method in ITEM_KEYS:
            key = ITEM_KEYS[method]
            pages = PAGES[method]
            value: JsonObj = {key: pages[0]}
            if self.kind != "handshake":
                value.update({"resultType": "complete", "ttlMs": 60_000, "cacheScope": rng.choice(["public", "private"])})
            if "cursor" not in params and rng.random() < 0.3:
                value["nextCursor"] = "1"
            return rpc.result_line(rid, value)
        if method in ("tools/call", "prompts/get", "resources/read") and rng.random() < 0.5 and self.kind != "handshake":
            return rpc.result_line(rid, {"resultType": "input_required", "requestState": "st",
                                         "inputRequests": {"a": {"method": "roots/list", "params": {}}}})
        if rng.random() < 0.2:
            return rpc.error_line(rid, -32603, "boom")
        return rpc.result_line(rid, {"content": [{"type": "text", "text": f"r{rid}"}]})


def callbacks_pending() -> tuple[Driver, str]:
    """A handshake-era server READY with two clients: one call in flight with a progress token,
    a sampling request of the server waiting at its caller, a subscription, a log level."""
    d = running(1, 2)
    d.ask(1, "sub", "resources/subscribe", {"uri": "file:///a"})
    d.reply(d.one_pending("resources/subscribe"), {})
    d.ask(2, 3, "logging/setLevel", {"level": "debug"})
    d.ask(1, 7, "tools/call", {"name": "echo", "_meta": {"progressToken": 7}})
    d.server_says({"jsonrpc": "2.0", "id": 900, "method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 5}})
    return d, "handshake"


def input_round_pending() -> tuple[Driver, str]:
    """A stateless-only server READY, a handshake-era client bridged onto it whose call asked for
    input: the bridge holds the round and waits for the client's answer."""
    d, _ = stateless_running(1)
    d.handshake(1, 0, CLIENT_PARAMS)
    d.ask(1, "c", "tools/call", {"name": "ask", "arguments": {"a": 1}})
    d.reply(d.one_pending("tools/call"), {"resultType": "input_required", "requestState": "s1",
                                          "inputRequests": {"who": {"method": "roots/list", "params": {}}}})
    return d, "stateless"


PREFIXES = (callbacks_pending, input_round_pending)


def scene_of(d: Driver, kind: str, seed: int) -> Scene:
    """The scene that goes on from a scripted prefix: what its core has pending, as a Scene sees it."""
    scene = Scene(random.Random(seed), kind, up=True, now=d.clock.now)
    scene.clients = sorted(d.core.clients)
    scene.next_cid = max(scene.clients) + 1
    scene.outstanding = {cid: [] for cid in scene.clients}
    scene.next_id = 100
    scene.upstream = dict(d.upstream)
    for cid, down in d.core.routes.downstream:
        scene.asked.append((cid, down, d.core.routes.downstream[(cid, down)].method))
    for cid, down in d.core.bridge.input_waits:
        scene.asked.append((cid, down, "roots/list"))
    return scene


@settings(derandomize=True, max_examples=60, deadline=None)
@given(st.sampled_from(PREFIXES), st.integers(0, 2**32), st.integers(0, 10), st.integers(1, 40))
def test_pending_callbacks_input_rounds_and_tokens_survive_the_round_trip(
        prefix: Any, seed: int, before: int, after: int) -> None:
    d, kind = prefix()
    core, scene = d.core, scene_of(d, kind, seed)
    assert scene.asked, "the prefix left nothing waiting at a client"
    for _ in range(before):
        step = scene.event(scene.rng.choice(OPS))
        if step is not None:
            scene.now += 0.5
            scene.record(feed(core, step[0], step[1], scene.now))
    twin = roundtrip(core, core.snapshot)
    assert twin.to_state() == core.to_state()
    # The first further events answer what waits at a client, then anything may happen.
    ops = ["client_answer", "progress", "startup", "answer"] + [scene.rng.choice(OPS) for _ in range(after)]
    assert_twins_agree(core, twin, scene, ops)


def assert_twins_agree(core: RelayCore, twin: RelayCore, scene: Scene, ops: list[str]) -> None:
    """Feed `ops` to both cores: every event's actions equal, and their states equal at the end;
    so are the load counts the lifecycle is given after every event."""
    assert (twin.client_count(), twin.inflight_count()) == (core.client_count(), core.inflight_count())
    for op in ops:
        step = scene.event(op)
        if step is None:
            continue
        scene.now += 0.5
        expected = feed(core, step[0], step[1], scene.now)
        got = feed(twin, step[0], step[1], scene.now)
        assert got == expected, f"{step[0]}{step[1]!r}"
        assert twin.inflight_count() == core.inflight_count(), f"{step[0]}{step[1]!r}"
        scene.record(expected)
    assert twin.to_state() == core.to_state()


def feed(core: RelayCore, method: str, args: tuple[Any, ...], now: float) -> list[Action]:
    return list(getattr(core, method)(*copy.deepcopy(args), now=now))


@settings(derandomize=True, max_examples=EXAMPLES, deadline=None)
@given(st.sampled_from(SERVER_KINDS), st.sampled_from(LANES), st.integers(0, 2), st.integers(0, 2**32),
       st.integers(0, 60), st.integers(1, 60))
def test_a_core_rebuilt_from_its_state_answers_every_further_event_as_the_original(
        kind: str, lane: str | None, warmth: int, seed: int, before: int, after: int) -> None:
    snapshot = [Snapshot(), warm_snapshot(), known_stateless()][warmth]
    core = RelayCore("test", snapshot, "most-recent" if seed % 2 else "refuse")
    core.lane = lane  # type: ignore[assignment]
    scene = Scene(random.Random(seed), kind)
    for _ in range(before):
        step = scene.event(scene.rng.choice(OPS))
        if step is not None:
            scene.now += 0.5
            scene.record(feed(core, step[0], step[1], scene.now))
    twin = roundtrip(core, snapshot)
    assert twin.to_state() == core.to_state()
    assert_twins_agree(core, twin, scene, [scene.rng.choice(OPS) for _ in range(after)])
    assert twin.snapshot.to_json() == core.snapshot.to_json()


def test_the_state_is_plain_json_and_keeps_an_integer_id_apart_from_the_same_digits_as_a_string() -> None:
    core = RelayCore("test", warm_snapshot())
    core.attach(1, now=1.0)
    core.client_line(1, rpc.request_line(7, "tools/call", {"name": "echo", "_meta": {"progressToken": "7"}}), now=1.0)
    core.client_line(1, rpc.request_line("7", "tools/call", {"name": "echo", "_meta": {"progressToken": 7}}), now=1.0)
    twin = roundtrip(core, core.snapshot)
    assert [m.id for _, m in twin.queue] == [7, "7"]
    out = twin.spawned(now=2.0)
    assert any(isinstance(a, ToServer) and b'"initialize"' in a.line for a in out)


def test_a_state_with_a_field_of_the_wrong_type_is_refused_naming_the_field() -> None:
    core = RelayCore("test", warm_snapshot())
    core.attach(1, now=1.0)
    state = json.loads(json.dumps(core.to_state()))
    state["routes"]["next_id"] = "12"
    try:
        RelayCore.from_state(state, "test", Snapshot())
    except ValueError as exc:
        assert "routes.next_id" in str(exc)
    else:
        raise AssertionError("a string relay id counter was accepted")


@pytest.mark.parametrize(("path", "bad", "named"), [
    (("clients", 0, "cid"), "1", "client.cid"),
    (("clients", 0, "params"), [], "client.params"),
    (("queue", 0, 1, "id"), True, "queued message.id"),
    (("queue", 0, 1, "kind"), "shout", "queued message.kind"),
])
def test_a_record_in_the_state_with_a_field_of_the_wrong_type_is_refused_naming_the_field(
        path: tuple[str | int, ...], bad: object, named: str) -> None:
    core = RelayCore("test", warm_snapshot())
    core.attach(1, now=1.0)
    core.client_line(1, rpc.request_line(7, "tools/call", {"name": "echo"}), now=1.0)
    state = json.loads(json.dumps(core.to_state()))
    record = state
    for step in path[:-1]:
        record = record[step]
    record[path[-1]] = bad
    with pytest.raises(ValueError, match=re.escape(named)):
        RelayCore.from_state(state, "test", Snapshot())
