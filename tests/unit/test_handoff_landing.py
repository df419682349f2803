"""What a hand-off session's shim makes of client input the daemon read and had not accounted for
(lazyd/handoff_state.py, "Nothing read from the client is ever only in the daemon's memory"): the
daemon's side (`Landing`, `Ledger.landed`) and the shim's (`request_ids_in`, `recover.answer`).

Testing policy: a real memfd region, the daemon's mapping of it and the shim's reader; the client's
stdout is a real pipe. No processes, no trio.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from collections.abc import Iterator
from typing import Any

import pytest

from lazyd import handoff_state as hs
from lazyd.daemon import handoff
from lazyd.daemon.handoff_ledger import Landing, Ledger
from lazyd.frames import Hello
from lazyd.handoff_state import Region, read_state
from lazyd.linepeek import BIG_LINE_BYTES, ID_SCAN_BYTES, inspect_line, request_ids_in
from shim import recover
from shim.options import Log, parse
from shim.stdout import Stdout

MAX = 1000  # a small line limit, to reach the over-long cases with small inputs


def call(request_id: int | str, text: str = "") -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {"t": text}}).encode()


@pytest.fixture
def fd() -> Iterator[int]:
    region = hs.create_region()
    yield region
    os.close(region)


# ---- request_ids_in (pure) -------------------------------------------------------------------


def test_the_requests_of_the_lines_a_read_completes_are_found_with_their_json_type() -> None:
    data = call(1) + b"\n" + call("1") + b"\r\n" + b'{"jsonrpc":"2.0","method":"notifications/x"}\n' + call(3)[:10]
    ids, rest, discarding = request_ids_in(b"", False, data, MAX)
    assert ids == [b"1", b'"1"'] and rest == call(3)[:10] and not discarding


def test_a_read_that_completes_the_head_counts_the_head_s_request() -> None:
    line = call(9)
    ids, rest, _ = request_ids_in(line[:12], False, line[12:] + b"\n", MAX)
    assert ids == [b"9"] and rest == b""


def test_an_over_long_line_is_read_by_its_first_bytes_as_the_daemon_reads_it() -> None:
    long = call(5, "x" * (2 * MAX))
    ids, rest, discarding = request_ids_in(b"", False, long + b"\n" + long[:50], MAX)
    assert ids == [b"5"] and rest == long[:50] and not discarding
    # Still unfinished, its start is kept to ID_SCAN_BYTES and marked discarding.
    ids, rest, discarding = request_ids_in(b"", False, long, MAX)
    assert ids == [] and rest == long[:ID_SCAN_BYTES] and discarding
    # The head of a line already being discarded: its end closes it, and only its start counts.
    ids, rest, discarding = request_ids_in(long[:60], True, b'more"}}\n' + call(6) + b"\n", MAX)
    assert ids == [b"5", b"6"] and rest == b"" and not discarding


def test_a_big_request_s_id_is_read_from_its_ends_in_either_sdk_s_shape_without_parsing_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    real_loads = json.loads

    def small_only(text: str | bytes, **kwargs: Any) -> Any:
        assert len(text) < 1000, "a big line was parsed in full"
        return real_loads(text, **kwargs)

    text = "z" * (BIG_LINE_BYTES + 10)
    python_sdk = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"t": text}}).encode()
    typescript_sdk = json.dumps({"method": "tools/call", "params": {"t": text}, "jsonrpc": "2.0", "id": "s-8"}).encode()
    with monkeypatch.context() as patched:
        patched.setattr(json, "loads", small_only)  # the module linepeek calls
        assert [r for _, r in inspect_line(python_sdk).requests] == [7]
        assert [r for _, r in inspect_line(typescript_sdk).requests] == ["s-8"]
    # An id nested in the last member is not the request's: the line is parsed in full instead.
    nested = json.dumps({"method": "tools/call", "params": {"t": text, "id": 9}, "jsonrpc": "2.0", "id": 10}).encode()
    assert [r for _, r in inspect_line(nested).requests] == [10]
    notification = json.dumps({"method": "notifications/x", "params": {"t": text, "id": 9}}).encode()
    assert inspect_line(notification).requests == []
    # Cut short of its end, its id cannot be read from the tail (and it is no JSON either).
    assert inspect_line(typescript_sdk[:-20]).requests == []


def test_garbage_and_blank_lines_hold_no_request() -> None:
    assert request_ids_in(b"", False, b"not json\n\n   \n[1,2]\n", MAX) == ([], b"", False)


# ---- the daemon's side ------------------------------------------------------------------------


def test_a_read_lands_in_the_zone_the_state_names_and_is_accounted_for_by_one_state_write(fd: int) -> None:
    ledger, landing = Ledger(Region(fd)), Landing(fd)
    try:
        zone = ledger.state.landing
        line = call(4) + b"\n"
        landing.zones[zone][: len(line)] = line  # what a read of the client's stdin does
        # Before it is accounted for, the shim finds the bytes in the zone the region names.
        assert Region(fd).read_landed(zone) == line and landing.pending(zone) == len(line)
        ledger.hold()
        ledger.client_line(line[:-1])
        ledger.landed()
        ledger.release()
        landing.clear(zone, len(line))
        state, _ = read_state(fd)
        assert state is not None and state.landing == zone ^ 1 and state.inflight == [b"4"]
        assert Region(fd).read_landed(zone) == b"" and Region(fd).read_landed(zone ^ 1) == b""
    finally:
        landing.close()


def test_a_full_read_leaves_the_zone_zeroed_once_cleared(fd: int) -> None:
    landing = Landing(fd)
    try:
        landing.zones[1][:] = b"y" * hs.LANDING_BYTES
        landing.clear(1, hs.LANDING_BYTES)
        assert landing.pending(1) == 0 and Region(fd).read_landed(1) == b""
    finally:
        landing.close()


# ---- the shim's side --------------------------------------------------------------------------


def _recovered(fd: int) -> tuple[list[bytes], Region]:
    """What the shim's recovery writes on the client's stdout (a real pipe), line by line, and the
    region as it leaves it."""
    read_end, write_end = os.pipe()
    try:
        region = Region(fd)
        assert region.current is not None
        log = Log(parse(["--", "true"], {}))  # logs nowhere
        recover.answer(region.current, region, Stdout(log, write_end), log)
        os.close(write_end)
        out = b""
        while chunk := os.read(read_end, 65536):
            out += chunk
    finally:
        os.close(read_end)
    return out.splitlines(), Region(fd)


def _answers(fd: int) -> tuple[list[dict[str, object]], Region]:
    lines, region = _recovered(fd)
    return [json.loads(line) for line in lines], region


def _nothing_pending(fd: int, zone: int) -> bool:
    """Whether a daemon continuing from the region finds no unaccounted read in `zone`."""
    landing = Landing(fd)
    try:
        return landing.pending(zone) == 0
    finally:
        landing.close()


def _write_legacy_state(fd: int, state: hs.State, generation: int) -> None:
    """`state` written as a region of the layout before the landing zones holds it (slot 0)."""
    payload = state.encode()
    header = struct.pack("<QI", generation, len(payload))
    os.pwrite(fd, struct.pack("<4sQII", hs.LEGACY_MAGIC, generation, len(payload),
                              zlib.crc32(payload, zlib.crc32(header))) + payload, 0)


def test_the_shim_answers_a_request_read_and_not_recorded_once_and_keeps_the_rest_for_the_next_daemon(
        fd: int) -> None:
    ledger, landing = Ledger(Region(fd)), Landing(fd)
    ledger.client_line(call(1))  # recorded: in flight
    ledger.head(bytearray(call(2)[:8]), False)  # the start of the next line, recorded as the head
    # The daemon read the rest of line 2, line 3 and the start of line 4, recorded line 2 (a
    # flush in the middle of a read) and was killed before the state named the other zone.
    read = call(2)[8:] + b"\n" + call(3) + b"\n" + call(4)[:20]
    landing.zones[ledger.state.landing][: len(read)] = read
    ledger.client_line(call(2))
    landing.close()
    answers, region = _answers(fd)
    assert [a["id"] for a in answers] == [1, 2, 3]
    assert all(a["error"]["code"] == -32603 for a in answers)  # type: ignore[index]
    state = region.current
    assert state is not None and state.inflight == [] and region.read_landed(state.landing) == b""
    assert region.read_head(state.head_len, state.head_area) == call(4)[:20]
    # The next daemon continues from there: the head is its buffer, nothing is pending.
    assert _nothing_pending(fd, state.landing)


def test_a_region_of_the_layout_before_the_landing_zones_is_recovered_and_moved_to_this_one(fd: int) -> None:
    # A shim that handed off under the earlier layout recovers with this code: its state is read,
    # what was in flight answered, the torn answer finished from the old tail, and the head kept
    # for the next daemon where this layout keeps it, the landing zones (where it began) zeroed.
    state = hs.State()
    state.inflight, state.out_torn = [b"3", b'"x"'], True
    head, tail = call(4)[:30], b'rest of an answer"}}\n'
    state.head_len, state.tail_len = len(head), len(tail)
    _write_legacy_state(fd, state, 5)
    os.pwrite(fd, head, hs.LEGACY_HEAD_OFFSET)
    os.pwrite(fd, tail, hs.LEGACY_TAIL_OFFSET)
    legacy = Region(fd).current
    assert legacy is not None and legacy.legacy
    lines, region = _recovered(fd)
    assert lines[0] == tail.rstrip(b"\n")  # the torn answer's rest, first
    assert [json.loads(line)["id"] for line in lines[1:]] == [3, "x"]
    moved = region.current
    assert moved is not None and not moved.legacy and moved.inflight == []
    assert region.read_head(moved.head_len, moved.head_area) == head
    assert region.read_landed(0) == b"" and region.read_landed(1) == b""
    assert _nothing_pending(fd, moved.landing)  # for the next daemon


def test_the_daemon_serves_a_region_of_the_earlier_layout_over_frames_not_by_hand_off(fd: int) -> None:
    _write_legacy_state(fd, hs.State(), 1)
    hello = Hello("shim", os.getpid(), ["true"], "/", {}, {}, None, [], handoff=True)
    read_end, write_end = os.pipe()
    try:
        ends = [os.open(f"/proc/self/fd/{read_end}", os.O_RDONLY | os.O_NONBLOCK),
                os.open(f"/proc/self/fd/{write_end}", os.O_WRONLY | os.O_NONBLOCK)]
        passed = [*ends, os.dup(fd)]
        assert handoff.take(hello, passed) is None and passed == []  # every descriptor closed
        # The same region once in this layout is taken.
        Region(fd).write(hs.State())
        ends = [os.open(f"/proc/self/fd/{read_end}", os.O_RDONLY | os.O_NONBLOCK),
                os.open(f"/proc/self/fd/{write_end}", os.O_WRONLY | os.O_NONBLOCK)]
        taken = handoff.take(hello, [*ends, os.dup(fd)])
        assert taken is not None
        os.close(taken[1])
        for end in ends:
            os.close(end)
    finally:
        os.close(read_end)
        os.close(write_end)
