"""What a hand-off session's shim makes of client input the daemon read and had not accounted for
(lazyd/handoff/region.py: a read goes into the region, after the head): the daemon's side
(`Ledger.input`, `Ledger.accounted`) and the shim's (`request_ids_in`, `recover.answer`).

Testing policy: a real sealed memfd region, the daemon's mapping of it and the shim's reader; the
client's stdout is a real pipe. No processes, no trio.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from lazyd.handoff import region as hs
from lazyd.daemon.handoff import session as handoff
from lazyd.daemon.handoff.ledger import Ledger
from lazyd.daemon.upgrade.inherited import close_fds
from lazyd.protocol.frames import Hello
from lazyd.handoff.region import Region, map_region, read_region
from lazyd.protocol.linepeek import ID_SCAN_BYTES, inspect_line, request_ids_in
from shim import recover
from shim.options import Log, parse
from shim.stdout import Stdout

MAX = 1000  # a small line limit, to reach the over-long cases with small inputs


def call(request_id: int | str, text: str = "") -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {"t": text}}).encode()


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


def test_a_big_request_s_id_is_read_in_either_sdk_s_shape() -> None:
    text = "z" * 70_000
    python_sdk = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"t": text}}).encode()
    typescript_sdk = json.dumps({"method": "tools/call", "params": {"t": text}, "jsonrpc": "2.0", "id": "s-8"}).encode()
    assert [r for _, r in inspect_line(python_sdk).requests] == [7]
    assert [r for _, r in inspect_line(typescript_sdk).requests] == ["s-8"]
    # An id nested in the last member is not the request's.
    nested = json.dumps({"method": "tools/call", "params": {"t": text, "id": 9}, "jsonrpc": "2.0", "id": 10}).encode()
    assert [r for _, r in inspect_line(nested).requests] == [10]
    notification = json.dumps({"method": "notifications/x", "params": {"t": text, "id": 9}}).encode()
    assert inspect_line(notification).requests == []
    # Cut short of its end, its id cannot be read from the tail (and it is no JSON either).
    assert inspect_line(typescript_sdk[:-20]).requests == []


def test_garbage_and_blank_lines_hold_no_request() -> None:
    assert request_ids_in(b"", False, b"not json\n\n   \n[1,2]\n", MAX) == ([], b"", False)


# ---- the daemon's side ------------------------------------------------------------------------


def test_a_read_after_the_head_is_found_by_the_shim_until_one_state_write_accounts_for_it(
        fd: int, mapped: Region) -> None:
    ledger = Ledger(mapped)
    ledger.input()[:5] = call(4)[:5]  # what a read of the client's stdin does
    ledger.accounted(5, bytearray(call(4)[:5]), False)
    read = call(4)[5:] + b"\n" + call(5)[:3]
    ledger.input()[: len(read)] = read
    # Before it is accounted for, the shim finds the bytes after the head the region names.
    found = read_region(fd)
    assert found is not None and found.current is not None
    assert found.unaccounted(found.current) == read
    ledger.client_line(call(4))
    ledger.accounted(len(read), bytearray(call(5)[:3]), False)
    found = read_region(fd)
    assert found is not None and found.current is not None
    assert found.current.inflight == [b"4"] and found.unaccounted(found.current) == b""
    assert found.read_head(found.current.head_len, found.current.head_area) == call(5)[:3]


# ---- the shim's side --------------------------------------------------------------------------


def _recovered(fd: int) -> tuple[list[bytes], hs.State, bytes]:
    """What the shim's recovery writes on the client's stdout (a real pipe), line by line, and what
    it carries to the next daemon (the state and the head)."""
    read_end, write_end = os.pipe()
    try:
        log = Log(parse(["--", "true"], {}))  # logs nowhere
        carried, head = recover.answer(read_region(fd), Stdout(log, write_end), log)
        os.close(write_end)
        out = b""
        while chunk := os.read(read_end, 65536):
            out += chunk
    finally:
        os.close(read_end)
    return out.splitlines(), carried, head


def _answers(fd: int) -> tuple[list[dict[str, object]], hs.State, bytes]:
    lines, carried, head = _recovered(fd)
    return [json.loads(line) for line in lines], carried, head


def test_the_shim_answers_a_request_read_and_not_recorded_once_and_keeps_the_rest_for_the_next_daemon(
        fd: int, mapped: Region) -> None:
    ledger = Ledger(mapped)
    ledger.client_line(call(1))  # recorded: in flight
    ledger.input()[:8] = call(2)[:8]
    ledger.accounted(8, bytearray(call(2)[:8]), False)  # the start of the next line, recorded as the head
    # The daemon read the rest of line 2, line 3 and the start of line 4, recorded line 2 (its
    # entry is in the table) and was killed before the read was accounted for.
    read = call(2)[8:] + b"\n" + call(3) + b"\n" + call(4)[:20]
    ledger.input()[: len(read)] = read
    ledger.client_line(call(2))
    answers, carried, head = _answers(fd)
    assert [a["id"] for a in answers] == [1, 2, 3]
    assert all(a["error"]["code"] == -32603 for a in answers)  # type: ignore[index]
    assert head == call(4)[:20] and carried.head_len == 20 and not carried.inflight
    # The next daemon continues from a fresh region holding that: the head is its buffer.
    log = Log(parse(["--", "true"], {}))
    fresh = recover.fresh_region(carried, head, log)
    assert fresh is not None
    try:
        assert hs.region_problem(fresh) is None
        buf = map_region(fresh)
        try:
            next_daemon = Ledger(Region(buf))
            assert next_daemon.region.read_head(next_daemon.state.head_len) == call(4)[:20]
            assert next_daemon.inflight == 0 and next_daemon.region.unaccounted(next_daemon.state) == b""
        finally:
            buf.close()
    finally:
        os.close(fresh)


def test_a_region_of_another_layout_is_read_as_nothing_to_answer() -> None:
    # A daemon of another layout serves the session over frames (below): a region the shim finds
    # in another layout was never written by a daemon it handed off to.
    fd = os.memfd_create("other", os.MFD_CLOEXEC)
    try:
        os.ftruncate(fd, hs.REGION_BYTES)
        os.pwrite(fd, b"LZH2", 0)
        assert read_region(fd) is None
        lines, carried, kept = _recovered(fd)
        assert lines == [] and kept == b"" and carried.resume_lines() == []
    finally:
        os.close(fd)


def test_the_daemon_serves_a_region_it_cannot_map_safely_or_of_another_layout_over_frames(fd: int) -> None:
    unsealed = os.memfd_create("peer", os.MFD_CLOEXEC)
    os.ftruncate(unsealed, hs.REGION_BYTES)
    os.pwrite(unsealed, hs.MAGIC, 0)
    read_end, write_end = os.pipe()

    def ends() -> list[int]:
        return [os.open(f"/proc/self/fd/{read_end}", os.O_RDONLY | os.O_NONBLOCK),
                os.open(f"/proc/self/fd/{write_end}", os.O_WRONLY | os.O_NONBLOCK)]

    try:
        hello = Hello("shim", os.getpid(), ["true"], "/", {}, {}, None, [], handoff=True, layout=hs.LAYOUT)
        passed = [*ends(), os.dup(unsealed)]
        assert handoff.take(hello, passed) is None and len(passed) == 3  # left to the caller to close
        close_fds(passed)
        older = Hello("shim", os.getpid(), ["true"], "/", {}, {}, None, [], handoff=True, layout=hs.LAYOUT - 1)
        passed = [*ends(), os.dup(fd)]
        assert handoff.take(older, passed) is None and len(passed) == 3
        close_fds(passed)
        # A sealed region of this layout, named by the hello, is taken.
        taken = handoff.take(hello, [*ends(), os.dup(fd)])
        assert taken is not None
        os.close(taken[1])
        for end in (taken[0].in_fd, taken[0].out_fd):
            os.close(end)
    finally:
        for end in (read_end, write_end, unsealed):
            os.close(end)


def test_a_region_the_shim_cannot_map_is_nothing_to_answer_and_a_fresh_one_leaves_the_session_on_frames(
        fd: int, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # The shim maps its region to recover it: a mapping refused (no memory, the map count) must
    # not end the shim, which then answers what it can and relays over frames.
    def refused(fd: int) -> Any:
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr(hs, "map_region", refused)
    assert hs.read_region(fd) is None
    log_file = tmp_path / "shim.log"
    log = Log(parse(["--log-file", str(log_file), "--", "true"], {}))
    assert recover.fresh_region(hs.State(), b"", log) is None
    assert "no hand-off: cannot map the shared region" in log_file.read_text()
