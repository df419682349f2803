"""A hand-off session's ledger (lazyd/daemon/handoff/ledger.py): the region always says what the
shim must answer, with nothing the client already has and nothing missing.

Testing policy: a real sealed memfd region, mapped as the daemon maps it, read back with the reader
the shim uses after every step; no processes, no trio.
"""

from __future__ import annotations

import json
import os
import tracemalloc
from collections.abc import Callable

from lazyd.handoff import region as hs
from lazyd.daemon.handoff.ledger import Ledger
from lazyd.handoff.region import Region, State, map_region, read_region
from lazyd.protocol.frames import MAX_LINE_BYTES
from lazyd.protocol.linepeek import LineSplitter

INIT = b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25"}}'
INITIALIZED = b'{"jsonrpc":"2.0","method":"notifications/initialized"}'


def call(request_id: int | str) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {}}).encode()


def cancel(request_id: int | str) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "method": "notifications/cancelled",
                       "params": {"requestId": request_id}}).encode()


def on_disk(fd: int) -> State:
    region = read_region(fd)
    assert region is not None and region.current is not None
    return region.current


def head_on_disk(fd: int) -> bytes:
    region = read_region(fd)
    assert region is not None and region.current is not None
    return region.read_head(region.current.head_len, region.current.head_area)


def read(ledger: Ledger, lines: LineSplitter, data: bytes) -> None:
    """What the session's reader does with one read of the client's stdin: into the region, each
    whole line entered (and relayed), then the read accounted for."""
    view = ledger.input()
    view[: len(data)] = data
    for line, _ in lines.feed(bytes(view[: len(data)])):
        ledger.client_line(line)
    ledger.accounted(len(data), lines.buffer, lines.discarding)


def test_a_request_is_in_flight_from_its_line_until_its_answer_is_written(fd: int, mapped: Region) -> None:
    ledger = Ledger(mapped)
    ledger.client_line(call(1))
    ledger.client_line(call("1"))
    assert sorted(on_disk(fd).inflight) == [b'"1"', b"1"]
    ledger.answered(1)
    assert on_disk(fd).inflight == [b'"1"'], "1 and \"1\" are different ids"
    ledger.answered("1")
    assert on_disk(fd).inflight == []


def test_a_cancelled_request_leaves_the_table_and_notifications_never_enter_it(fd: int, mapped: Region) -> None:
    ledger = Ledger(mapped)
    ledger.client_line(call(5))
    ledger.client_line(b'{"jsonrpc":"2.0","method":"notifications/progress","params":{}}')
    ledger.client_line(b"not json at all")
    assert on_disk(fd).inflight == [b"5"]
    ledger.client_line(cancel(5))
    assert on_disk(fd).inflight == []


def test_the_handshake_is_recorded_and_resumable_once_its_answer_was_written(fd: int, mapped: Region) -> None:
    ledger = Ledger(mapped)
    ledger.client_line(INIT)
    assert on_disk(fd).resume_lines() == [], "an unanswered initialize is not worth resuming"
    ledger.answered(0)
    ledger.client_line(INITIALIZED)
    state = on_disk(fd)
    assert state.resume_lines() == [INIT, INITIALIZED] and state.inflight == []


def test_a_daemon_continuing_a_session_keeps_its_handshake_and_unrelayed_head(fd: int, mapped: Region) -> None:
    first = Ledger(mapped)
    first.client_line(INIT)
    first.answered(0)
    first.client_line(INITIALIZED)
    read(first, LineSplitter(MAX_LINE_BYTES), b'{"jsonrpc":"2.0","id":9,')
    second = Ledger(Region(mapped.buf))
    assert second.state.resume_lines() == [INIT, INITIALIZED]
    assert second.region.read_head(second.state.head_len) == b'{"jsonrpc":"2.0","id":9,'
    second.client_line(call(3))
    assert on_disk(fd).resume_lines() == [INIT, INITIALIZED] and on_disk(fd).inflight == [b"3"]


def test_a_read_s_ids_enter_the_table_before_the_one_state_write_that_accounts_for_it(fd: int, mapped: Region) -> None:
    ledger = Ledger(mapped)
    writes: list[tuple[int, list[bytes]]] = []
    real_write = mapped.write

    def counted(state: State) -> None:
        writes.append((state.head_len, sorted(on_disk(fd).inflight)))
        real_write(state)

    mapped.write = counted  # type: ignore[method-assign]
    read(ledger, LineSplitter(MAX_LINE_BYTES), b"".join(call(n) + b"\n" for n in range(2, 12)) + b"partial")
    assert writes == [(7, sorted(str(n).encode() for n in range(2, 12)))]
    assert head_on_disk(fd) == b"partial" and hs.Region(mapped.buf).unaccounted(on_disk(fd)) == b""


def test_a_partial_line_grows_in_place_and_a_new_line_s_start_goes_to_the_other_area(fd: int, mapped: Region) -> None:
    ledger, lines = Ledger(mapped), LineSplitter(MAX_LINE_BYTES)
    read(ledger, lines, b"abc")
    read(ledger, lines, b"def")
    state = on_disk(fd)
    assert (state.head_len, state.head_area) == (6, 0) and head_on_disk(fd) == b"abcdef"
    read(ledger, lines, b"\nXY")  # the line completes and is relayed; a new one starts
    state = on_disk(fd)
    assert (state.head_len, state.head_area) == (2, 1) and head_on_disk(fd) == b"XY"
    assert mapped.read_head(9, 0) == bytes(9)  # the area left is zero again, for a later read


def test_a_new_line_s_start_never_overwrites_the_head_the_state_still_names(fd: int, mapped: Region) -> None:
    # Were the new bytes written over the recorded head, a daemon killed before the state write
    # would leave a head that is the new line's start followed by the old line's rest.
    ledger, lines = Ledger(mapped), LineSplitter(MAX_LINE_BYTES)
    read(ledger, lines, b"old line start")
    seen: list[tuple[bytes, bool, bytes]] = []  # (the head the state names, written into its area, what)
    real_write_head = mapped.write_head

    def spy(data: bytes | bytearray | memoryview, offset: int, area: int = 0) -> None:
        seen.append((head_on_disk(fd), area == on_disk(fd).head_area, bytes(data)))
        real_write_head(data, offset, area)

    mapped.write_head = spy  # type: ignore[method-assign]
    read(ledger, lines, b"\nnew")
    # The new start into the other area; the old area zeroed only once the state names the new one.
    assert seen == [(b"old line start", False, b"new"), (b"new", False, bytes(len(b"old line start\nnew")))]
    assert head_on_disk(fd) == b"new"


def test_a_large_consumed_line_s_pages_are_given_back_once_the_large_lines_are_over(fd: int, mapped: Region) -> None:
    releases: list[Callable[[], None]] = []
    ledger, lines = Ledger(mapped, releases.append), LineSplitter(MAX_LINE_BYTES)
    for _ in range(32):
        read(ledger, lines, b"x" * hs.READ_BYTES)
    read(ledger, lines, b"\n")
    read(ledger, lines, call(1) + b"\n")  # more lines before the quiet spell: asked once
    # Kept while large lines may follow: the next one writes into pages already there.
    assert len(releases) == 1 and os.fstat(fd).st_blocks * 512 >= 2 << 20
    releases.pop()()  # the heap trimmer's quiet spell (lazyd/daemon/heap_trim.py)
    assert os.fstat(fd).st_blocks * 512 < 1 << 20 and on_disk(fd).head_len == 0
    assert os.fstat(fd).st_size == hs.REGION_BYTES  # sealed: given back, never truncated


def test_a_late_release_keeps_a_line_start_held_again_and_a_tail_for_the_shim(fd: int, mapped: Region) -> None:
    releases: list[Callable[[], None]] = []
    ledger, lines = Ledger(mapped, releases.append), LineSplitter(MAX_LINE_BYTES)
    for _ in range(32):
        read(ledger, lines, b"x" * hs.READ_BYTES)
    read(ledger, lines, b"\nnext line's start")
    ledger.close(client_left=False, tail=b"the rest of an answer\n")
    releases.pop()()
    state = on_disk(fd)
    assert head_on_disk(fd) == b"next line's start"
    assert mapped.read_head(state.tail_len, state.head_area ^ 1) == b"the rest of an answer\n"


def test_a_message_costs_one_table_entry_whatever_else_is_in_flight(fd: int, mapped: Region) -> None:
    # O(1) bookkeeping: a request's line and its answer each touch one entry of the table and
    # write no state, with ten thousand others in flight as with none.
    ledger = Ledger(mapped)
    ledger.client_line(call(0))
    writes: list[int] = []
    real_write = mapped.write

    def counted(state: State) -> None:
        writes.append(1)
        real_write(state)

    mapped.write = counted  # type: ignore[method-assign]
    for n in range(1, 10_001):
        ledger.client_line(call(n))
    ledger.answered(5000)
    assert writes == [] and ledger.inflight == 10_000
    state = on_disk(fd)
    assert len(state.inflight) == 10_000 and b"5000" not in state.inflight and b"10000" in state.inflight
    for n in range(10_001):
        ledger.answered(n)
    assert writes == [] and on_disk(fd).inflight == []


def test_an_id_too_long_for_an_entry_is_in_flight_in_the_ledger_alone_until_answered(
        fd: int, mapped: Region) -> None:
    ledger = Ledger(mapped)
    long_id = "x" * hs.ENTRY_BYTES
    ledger.client_line(call(long_id))
    ledger.client_line(call(1))
    assert on_disk(fd).inflight == [b"1"] and ledger.inflight == 2
    ledger.answered(long_id)
    assert ledger.inflight == 1


def test_past_a_full_table_an_id_is_in_the_ledger_alone_and_an_answered_one_frees_its_entry_for_the_next(
        fd: int, mapped: Region) -> None:
    ledger = Ledger(mapped)
    for n in range(hs.TABLE_ENTRIES + 1):
        ledger.client_line(call(n))
    state = on_disk(fd)
    assert len(state.inflight) == hs.TABLE_ENTRIES and ledger.inflight == hs.TABLE_ENTRIES + 1
    ledger.answered(7)
    ledger.client_line(call("next"))
    state = on_disk(fd)
    assert b'"next"' in state.inflight and b"7" not in state.inflight


def test_a_continued_session_never_hands_out_an_entry_its_predecessor_still_uses(fd: int, mapped: Region) -> None:
    first = Ledger(mapped)
    for n in range(3):
        first.client_line(call(n))
    first.answered(0)  # entry 0 free again; entries 1 and 2 still name ids 1 and 2
    second = Ledger(Region(mapped.buf))
    for n in range(10, 14):
        second.client_line(call(n))
    assert sorted(on_disk(fd).inflight) == sorted([b"1", b"2", b"10", b"11", b"12", b"13"])


def test_an_idle_ledger_costs_kilobytes_not_a_list_of_every_free_entry(fd: int, mapped: Region) -> None:
    # A daemon holds a thousand of these; a list of all free entries cost each ~0.6 MiB.
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        ledger = Ledger(mapped)
        ledger.client_line(call(1))
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 64 * 1024, grown


def test_a_mapped_region_costs_the_daemon_bytes_not_a_library_of_its_own(fd: int) -> None:
    # Each mapping once loaded libc and typed its functions for itself: 6.4 KiB that every
    # hand-off session kept while it lived (docs/benchmarks.md). Now they share one.
    fds = [hs.create_region() for _ in range(4)]
    first = map_region(fd)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        mappings = [map_region(each) for each in fds]
        grown = (tracemalloc.get_traced_memory()[0] - before) / len(fds)
    finally:
        tracemalloc.stop()
        for each in fds:
            os.close(each)
    assert grown < 2048, grown
    for mapping in (first, *mappings):
        mapping.close()


def test_a_daemon_continuing_from_the_region_finds_what_is_in_flight_in_the_table(fd: int, mapped: Region) -> None:
    # As after an upgrade: the successor maps the same region and carries on.
    first = Ledger(mapped)
    for n in range(5):
        first.client_line(call(n))
    first.answered(2)
    second = Ledger(Region(mapped.buf))
    assert second.inflight == 4
    second.client_line(call(9))
    second.answered(0)
    assert sorted(on_disk(fd).inflight) == [b"1", b"3", b"4", b"9"]


def test_closing_records_why_and_the_rest_of_a_torn_line(fd: int, mapped: Region) -> None:
    ledger = Ledger(mapped)
    ledger.client_line(call(4))
    ledger.close(client_left=False, tail=b'rest"}}\n')
    state = on_disk(fd)
    assert not state.closed and state.tail_len == 8 and ledger.region.read_head(8, state.head_area ^ 1) == b'rest"}}\n'
    ledger.close(client_left=True)
    assert on_disk(fd).closed


def test_a_daemon_continuing_a_region_reads_only_the_table_pages_it_has_and_still_finds_later_entries(
        fd: int) -> None:
    # Reading a page the memfd never had allocates it: a whole-table read cost every session a
    # daemon continued or reclaimed 1 MiB of shared memory.
    earlier = map_region(fd)
    first = Ledger(Region(earlier))
    first.client_line(call(3))
    first.client_line(call(4))
    earlier.close()
    blocks = os.fstat(fd).st_blocks
    buf = map_region(fd)
    try:
        second = Ledger(Region(buf, hs.table_extent(fd)))
        assert second.inflight == 2
        assert os.fstat(fd).st_blocks - blocks <= 8  # a page or so of the state: not 2,048 blocks
        for n in range(100, 300):  # past the pages the table had when it was mapped
            second.client_line(call(n))
        second.answered(3)
        assert Region(buf, hs.table_extent(fd)).entries() == Region(buf).entries()
        assert len(second.region.entries()) == 201
    finally:
        buf.close()


def test_the_table_extent_of_a_region_ends_at_its_last_allocated_page(fd: int) -> None:
    assert hs.table_extent(fd) == 0
    os.pwrite(fd, b"\x01" + b"7", hs.TABLE_OFFSET + 70 * hs.ENTRY_BYTES)
    assert hs.table_extent(fd) == 2 * 4096
    os.pwrite(fd, b"\x01" + b"8", hs.TABLE_OFFSET + 5000 * hs.ENTRY_BYTES)
    assert 5001 * hs.ENTRY_BYTES <= hs.table_extent(fd) < 5001 * hs.ENTRY_BYTES + 4096
