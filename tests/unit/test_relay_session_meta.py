"""Session ids in `_meta` (lazyd/core/relay/session_meta.py): one process of a session-aware server,
every request of a session carrying that session's id; nothing else changes."""

from __future__ import annotations

import copy
from typing import Any

from lazyd.core import state_codec as sc
from lazyd.core.relay.core import RelayCore, ToServer
from lazyd.core.relay.routing import Routes
from lazyd.core.relay.session_meta import LAZYD_SESSION_KEY, MUX_SESSION_KEY
from lazyd.core.cache import Snapshot
from tests.unit.relay_driver import CLIENT_PARAMS, INIT_RESULT, NOT_FOUND, Driver, running, warm_snapshot

AWARE_RESULT: dict[str, Any] = {**INIT_RESULT, "capabilities": {**INIT_RESULT["capabilities"],
                                                                 "x-mux": {"sharing": "session-aware"}}}


def aware(*cids: int) -> Driver:
    """A running relay whose server declared session-aware, clients `cids` attached with the ids
    the daemon gave them."""
    driver = Driver(warm_snapshot(init_result=AWARE_RESULT))
    for cid in cids:
        driver.record(driver.core.attach(cid, now=driver.clock(), session_id=f"sess_{cid:08x}"))
        driver.handshake(cid)
    driver.start(init_result=AWARE_RESULT)
    return driver


def meta_of(msg: dict[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = msg["params"]["_meta"]
    return meta


def test_every_request_of_a_session_carries_its_own_id_under_both_keys() -> None:
    d = aware(1, 2)
    (a,) = d.ask(1, 7, "tools/call", {"name": "think", "arguments": {}}).server
    (b,) = d.ask(2, 7, "tools/call", {"name": "think", "arguments": {}}).server
    assert (meta_of(a)[MUX_SESSION_KEY], meta_of(a)[LAZYD_SESSION_KEY]) == ("sess_00000001", "sess_00000001")
    assert (meta_of(b)[MUX_SESSION_KEY], meta_of(b)[LAZYD_SESSION_KEY]) == ("sess_00000002", "sess_00000002")
    assert a["id"] != b["id"] and a["params"]["name"] == "think"
    # Answers come back to their own client under its own id, untouched.
    out = d.reply(a, {"content": []})
    assert out.client(1) == [{"jsonrpc": "2.0", "id": 7, "result": {"content": []}}] and not out.client(2)


def test_a_clients_own_meta_is_kept_its_progress_token_still_relayed_and_a_forged_id_overwritten() -> None:
    d = aware(1)
    params = {"name": "x", "_meta": {"progressToken": "p1", "custom": 1, MUX_SESSION_KEY: "sess_someone",
                                     LAZYD_SESSION_KEY: "sess_someone"}}
    (sent,) = d.ask(1, 3, "tools/call", params).server
    assert meta_of(sent) == {"progressToken": sent["id"], "custom": 1, MUX_SESSION_KEY: "sess_00000001",
                             LAZYD_SESSION_KEY: "sess_00000001"}
    out = d.server_says({"jsonrpc": "2.0", "method": "notifications/progress",
                         "params": {"progressToken": sent["id"], "progress": 1}})
    assert out.client(1)[0]["params"]["progressToken"] == "p1"


def test_a_request_without_params_gets_params_holding_only_the_id() -> None:
    d = aware(1)
    (sent,) = d.ask(1, 4, "ping-like/custom").server
    assert sent["params"] == {"_meta": {MUX_SESSION_KEY: "sess_00000001", LAZYD_SESSION_KEY: "sess_00000001"}}


def test_notifications_and_the_relays_own_requests_carry_no_session_id() -> None:
    d = aware(1)
    told = d.tell(1, "notifications/custom/thing").server
    assert told and all("_meta" not in (m.get("params") or {}) for m in told)
    (call,) = d.ask(1, 5, "tools/call", {"name": "slow"}).server
    cancel = d.tell(1, "notifications/cancelled", {"requestId": 5}).server
    assert cancel == [{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": call["id"]}}]
    restart = d.exited()
    assert not restart.server
    d.ask(1, 6, "tools/call", {"name": "again"})
    start = d.spawned()
    (init,) = start.server
    assert init["method"] == "initialize" and "_meta" not in init["params"]
    listings = d.answer("initialize", AWARE_RESULT).server
    assert [m for m in listings if m.get("method") == "tools/list"] and all(
        MUX_SESSION_KEY not in (m.get("params") or {}).get("_meta", {}) for m in listings)


def test_a_server_that_declares_nothing_gets_the_requests_byte_for_byte_but_the_id() -> None:
    d = running(1)
    line = b'{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}'
    out = d.send(1, line)
    (sent,) = [a.line for a in out if isinstance(a, ToServer)]
    assert sent == line.replace(b'"id":9', f'"id":{d.sent_to_server[-1]["id"]}'.encode())


def test_share_session_aware_sends_ids_to_a_server_that_declares_nothing() -> None:
    core = RelayCore("t", warm_snapshot(), session_aware=True)
    d = Driver()
    d.core = core
    d.attach(1)
    d.handshake(1)
    d.ask(1, 1, "tools/call", {"name": "echo"})
    d.start()
    (sent,) = [m for m in d.sent_to_server if m.get("method") == "tools/call"]
    assert meta_of(sent)[MUX_SESSION_KEY] == "sess_00000001"  # the id made from the client number


def test_a_declaration_learned_at_the_first_start_applies_to_the_requests_queued_for_it() -> None:
    # Nothing cached but that the server is handshake-era: the start's own initialize declares it.
    d = Driver(Snapshot(discover={"*": {"error": NOT_FOUND}}))
    d.attach(1)
    d.ask(1, 1, "initialize", CLIENT_PARAMS)
    d.ask(1, 2, "tools/call", {"name": "echo"})
    d.spawned()
    assert d.answer("initialize", AWARE_RESULT).client(1)[0]["result"] == AWARE_RESULT
    d.tell(1, "notifications/initialized")
    d.serve_listings()
    (sent,) = [m for m in d.sent_to_server if m.get("method") == "tools/call"]
    assert meta_of(sent)[LAZYD_SESSION_KEY] == "sess_00000001"


def test_a_live_handshake_without_the_declaration_turns_ids_off_again() -> None:
    d = aware(1)
    d.exited()
    d.ask(1, 2, "tools/call", {"name": "echo"})
    d.spawned()
    d.answer("initialize", INIT_RESULT)  # this process does not declare it
    d.serve_listings()
    (sent,) = [m for m in d.sent_to_server if m.get("method") == "tools/call"]
    assert "_meta" not in sent["params"]


def test_ids_survive_a_hand_over_and_a_state_written_before_ids_existed_turns_them_off() -> None:
    d = aware(1, 2)
    state = d.core.to_state()
    again = RelayCore.from_state(copy.deepcopy(state), "t", d.core.snapshot)
    assert again.routes.sessions == {1: "sess_00000001", 2: "sess_00000002"} and again.routes.session_meta
    old = copy.deepcopy(state["routes"])
    for key in ("sessions", "session_meta", "session_forced"):
        del old[key]
    legacy = sc.load(Routes, old, "routes")
    assert (legacy.sessions, legacy.session_meta, legacy.session_forced) == ({}, False, False)


def test_a_session_that_leaves_takes_its_id_with_it() -> None:
    d = aware(1, 2)
    d.detach(1)
    assert d.core.routes.sessions == {2: "sess_00000002"}
