"""Roots are a session's (lazyd/core/sharing/roots.py, lazyd/core/relay/session_roots.py) and a lazy
start settles before its first request (lazyd/core/relay/startup.py), driven as plain events."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lazyd.core.relay import jsonrpc as rpc
from lazyd.core.relay.core import Phase, SessionKey, WaitIdle
from lazyd.core.relay.session_roots import ROOTS_WAIT_S
from lazyd.core.sharing.join import Join, join
from lazyd.core.sharing.modes import SharingDecision
from lazyd.core.sharing.roots import NO_ROOTS, UNANSWERED, common_roots, parse_roots, roots_key, roots_result
from tests.unit.relay_driver import refreshing
from tests.unit.relay_driver import (
    BARE_PARAMS,
    CLIENT_PARAMS,
    INIT_RESULT,
    Driver,
    notification,
    request,
    result,
    running,
    warm_snapshot,
)

ROOTS_A = {"roots": [{"uri": "file:///home/a/project", "name": "a"}]}
ROOTS_B = {"roots": [{"uri": "file:///home/b/project", "name": "b"}]}

# ---- the pure module -----------------------------------------------------------------------------

uris = st.sampled_from(["file:///a", "file:///b", "file:///c", "file:///a/b"])
names = st.one_of(st.none(), st.sampled_from(["a", "b"]))
root_sets = st.lists(st.tuples(uris, names), max_size=4).map(tuple)


@given(root_sets, st.randoms())
def test_a_roots_key_ignores_order_and_repeats_and_nothing_else(roots: tuple[Any, ...], rnd: Any) -> None:
    shuffled = list(roots) * 2
    rnd.shuffle(shuffled)
    assert roots_key(tuple(shuffled)) == roots_key(roots)
    assert roots_key(roots) not in (NO_ROOTS, UNANSWERED)


@given(root_sets, root_sets)
def test_two_sessions_have_one_key_exactly_when_they_declared_the_same_roots(a: tuple[Any, ...], b: tuple[Any, ...]) -> None:
    assert (roots_key(a) == roots_key(b)) == (set(a) == set(b))


@given(st.lists(root_sets, min_size=1, max_size=4))
def test_the_common_roots_are_in_every_set_and_every_root_of_all_sets_is_there(sets: list[tuple[Any, ...]]) -> None:
    common = common_roots(sets)
    assert set(common) == set.intersection(*(set(s) for s in sets))
    assert len(common) == len(set(common))


def test_a_list_roots_result_reads_back_as_the_roots_it_holds_and_anything_else_as_none() -> None:
    roots = (("file:///a", "a"), ("file:///b", None))
    assert parse_roots(roots_result(roots)) == roots
    bad_results: list[object] = [None, [], {}, {"roots": {}}, {"roots": [{"name": "x"}]}, {"roots": ["file:///a"]}]
    for bad in bad_results:
        assert parse_roots(bad) is None
    assert common_roots([]) == ()


# ---- learning a session's roots ------------------------------------------------------------------


def attached(*cids: int, params: dict[int, Any] | None = None) -> Driver:
    """A warm relay whose clients went through their handshake; roots and placing left to the test."""
    d = Driver(warm_snapshot())
    d.auto_roots = False
    d.place = False
    for cid in cids:
        d.attach(cid)
    return d


def asked(out: list[Any], cid: int) -> int:
    (ask,) = [m for m in out.client(cid) if m.get("method") == "roots/list"]  # type: ignore[attr-defined]
    assert "params" not in ask
    return int(ask["id"])


def test_a_client_declaring_roots_is_asked_for_them_once_initialized_and_its_key_is_their_digest() -> None:
    d = attached(1)
    assert [a for a in d.ask(1, 0, "initialize", CLIENT_PARAMS) if isinstance(a, SessionKey)] == []
    down = asked(d.tell(1, "notifications/initialized"), 1)
    out = d.send(1, result(down, ROOTS_A))
    assert [a for a in out if isinstance(a, SessionKey)] == [SessionKey(1, roots_key(parse_roots(ROOTS_A) or ()))]
    assert out.client(1) == [] and out.server == []  # the answer is the relay's: it goes nowhere


def test_a_client_without_roots_has_its_key_at_initialize_and_is_never_asked() -> None:
    d = attached(1)
    out = d.ask(1, 0, "initialize", BARE_PARAMS)
    assert [a for a in out if isinstance(a, SessionKey)] == [SessionKey(1, NO_ROOTS)]
    assert d.tell(1, "notifications/initialized").client(1) == []


def test_a_sessions_server_requests_wait_for_its_placing_and_go_on_in_order_when_it_stays() -> None:
    d = attached(1)
    d.handshake(1)
    down = int(d.core.roots.sessions[1].asking or 0)
    held = d.ask(1, 1, "tools/call", {"name": "echo"})
    assert not held.want and held.server == [] and held.client(1) == []
    d.ask(1, 2, "tools/call", {"name": "add"})
    # Cached answers are not held: the handshake and the listings never need the server.
    assert d.ask(1, 3, "tools/list").client(1)[0]["id"] == 3
    d.send(1, result(down, ROOTS_A))
    out = d.record(d.core.release(1, now=d.clock()))
    assert out.want
    d.start()
    assert [m["params"]["name"] for m in d.pending("tools/call")] == ["echo", "add"]


def test_a_session_moved_away_takes_its_held_requests_and_leaves_nothing_at_this_process() -> None:
    d = attached(1)
    d.handshake(1)
    down = int(d.core.roots.sessions[1].asking or 0)
    d.ask(1, 1, "tools/call", {"name": "echo"})
    d.send(1, result(down, ROOTS_B))
    known, lines, actions = d.core.take(1, now=d.clock())
    assert known.key == roots_key(parse_roots(ROOTS_B) or ()) and not known.placed
    assert [rpc.parse(line).method for line in lines] == ["tools/call"]  # type: ignore[union-attr]
    assert 1 not in d.core.clients and not d.core.queue and not any(isinstance(a, SessionKey) for a in actions)
    # Another process's core adopts it, placed, with its handshake and roots: nothing is asked again.
    other = attached(7)
    out = other.record(other.core.move_in(7, CLIENT_PARAMS, known, now=other.clock()))
    assert out.client(7) == []
    assert other.send(7, lines[0]).want


def test_a_client_that_never_answers_its_roots_is_given_none_after_the_bound() -> None:
    d = attached(1)
    d.handshake(1)
    assert d.core.next_deadline() == d.clock() + ROOTS_WAIT_S
    d.clock.now += ROOTS_WAIT_S - 0.1
    assert d.record(d.core.tick(now=d.clock())) == []
    d.clock.now += 0.1
    out = d.record(d.core.tick(now=d.clock()))
    assert [a for a in out if isinstance(a, SessionKey)] == [SessionKey(1, UNANSWERED)]
    assert d.core.next_deadline() is None


def test_an_error_for_roots_list_counts_as_no_roots() -> None:
    d = attached(1)
    d.handshake(1)
    down = int(d.core.roots.sessions[1].asking or 0)
    out = d.send(1, {"jsonrpc": "2.0", "id": down, "error": {"code": -1, "message": "no"}})
    assert [a for a in out if isinstance(a, SessionKey)] == [SessionKey(1, UNANSWERED)]


# ---- what the server is answered -----------------------------------------------------------------


def test_the_server_gets_the_roots_of_the_session_it_serves_never_another_clients() -> None:
    d = running(1)
    d.roots[2] = ROOTS_B
    d.place = False
    d.attach(2)
    d.handshake(2)  # client 2's roots are learned, but it is not placed here (it would move)
    assert d.server_says(request(60, "roots/list")).server == [result(60, {"roots": [{"uri": "file:///project", "name": "project"}]})]


def test_the_servers_roots_list_waits_for_the_roots_of_the_session_being_placed() -> None:
    d = attached(1)
    d.ask(1, 0, "initialize", CLIENT_PARAMS)
    d.ask(1, 1, "tools/call", {"name": "echo"})  # held, and its roots asked (it never said initialized)
    down = int(d.core.roots.sessions[1].asking or 0)
    assert d.server_says(request(60, "roots/list")).server == []
    d.send(1, result(down, ROOTS_A))
    assert d.record(d.core.release(1, now=d.clock())).server[0] == result(60, ROOTS_A)


def test_a_process_whose_sessions_roots_differ_is_given_only_the_roots_they_share_and_told_when_they_change() -> None:
    d = running(1, 2)
    d.roots[1] = ROOTS_A
    d.tell(1, "notifications/roots/list_changed")  # client 1's roots change while it shares the process
    d.roots[2] = ROOTS_A
    d.tell(2, "notifications/roots/list_changed")
    assert d.server_says(request(60, "roots/list")).server == [result(60, ROOTS_A)]
    d.roots[2] = ROOTS_B
    out = d.tell(2, "notifications/roots/list_changed")
    assert notification("notifications/roots/list_changed") in out.server
    assert d.server_says(request(61, "roots/list")).server == [result(61, {"roots": []})]
    assert d.detach(1).server == [notification("notifications/roots/list_changed")]
    assert d.server_says(request(62, "roots/list")).server == [result(62, ROOTS_B)]


def test_sessions_without_roots_give_the_server_the_error_a_client_without_the_capability_gives() -> None:
    d = running(1, params={1: BARE_PARAMS})
    (answer,) = d.server_says(request(60, "roots/list")).server
    assert answer["error"]["code"] == rpc.METHOD_NOT_FOUND


def test_a_client_roots_list_changed_is_not_passed_on_while_its_roots_are_the_same() -> None:
    d = running(1)
    d.server_says(request(60, "roots/list"))
    assert d.tell(1, "notifications/roots/list_changed").server == []


# ---- a start settles before its first request ----------------------------------------------------


def starting() -> Driver:
    """test_relay_core's `refreshing` (client 1's call started the server, which answered the
    replayed initialize: the listings are asked), with the server's idleness left to the test."""
    d = refreshing()
    d.idle = False
    return d


def test_a_start_whose_server_asked_nothing_forwards_the_first_request_with_the_listings() -> None:
    d = starting()
    out = d.serve_listings()
    assert out.ready and [m["method"] for m in out.server] == ["tools/call"]


def test_the_first_request_waits_for_the_servers_requests_at_start_then_a_ping_then_its_idleness() -> None:
    d = starting()
    assert d.server_says(request(60, "roots/list")).server == [result(60, {"roots": [{"uri": "file:///project", "name": "project"}]})]
    out = d.serve_listings()
    assert not out.ready and [m["method"] for m in out.server] == ["ping"]
    assert d.core.phase is Phase.REFRESH
    out = d.answer("ping", {})
    assert [a for a in out if isinstance(a, WaitIdle)] == [WaitIdle()] and out.server == []
    out = d.record(d.core.server_idle(now=d.clock()))
    assert out.ready and [m["method"] for m in out.server] == ["tools/call"]
    assert d.record(d.core.server_idle(now=d.clock())) == []  # once


def test_a_request_routed_to_a_client_at_start_is_waited_for_and_an_error_to_the_ping_is_an_answer() -> None:
    d = starting()
    d.place = False
    d.attach(2)
    d.ask(2, 0, "initialize", BARE_PARAMS)
    # A server-to-client request routed to a client (none can take sampling here): refused at once.
    assert d.server_says(request(61, "sampling/createMessage", {})).server[0]["id"] == 61
    d.serve_listings()
    ping = d.one_pending("ping")
    out = d.reply_error(ping, rpc.METHOD_NOT_FOUND)
    assert any(isinstance(a, WaitIdle) for a in out)


def test_a_start_waits_for_a_sessions_roots_before_its_ping() -> None:
    d = Driver(warm_snapshot())
    d.idle = False
    d.auto_roots = False
    d.attach(1)
    d.ask(1, 0, "initialize", {**CLIENT_PARAMS, "protocolVersion": "2024-11-05"})  # a cache miss: it starts the server
    d.spawned()
    d.answer("initialize", {**INIT_RESULT, "protocolVersion": "2024-11-05"})
    assert d.server_says(request(60, "roots/list")).server == []  # its roots are not known yet
    d.serve_listings()
    assert d.pending("ping") == []
    down = asked(d.tell(1, "notifications/initialized"), 1)
    out = d.send(1, result(down, ROOTS_A))
    assert out.server[0] == result(60, ROOTS_A) and [m["method"] for m in out.server[1:]] == ["ping"]


@pytest.mark.parametrize("conflict", [False, True])
def test_a_session_whose_key_differs_from_those_on_the_registrations_process_gets_its_own(conflict: bool) -> None:
    for decision in (SharingDecision("shared", "auto: shared (known server: filesystem)", "known"),
                     SharingDecision("session-aware", "declared", "declared"),
                     SharingDecision(None, "auto: undecided", "undecided")):
        choice = join(decision, base_taken=True, waited_s=0.0, bound_s=5.0, key_conflict=conflict)
        assert (choice.join is Join.OWN) == conflict
        if conflict:
            assert choice.rule == "its own process: its roots differ from those of the sessions sharing one"
    isolated = SharingDecision("isolated", "auto: isolated (known server: playwright)", "known")
    assert join(isolated, base_taken=False, waited_s=0.0, bound_s=5.0, key_conflict=conflict).rule == isolated.rule
