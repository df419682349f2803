"""The shared region of a hand-off session (lazyd/handoff/region.py): what a shim reads back after
its daemon is gone, whatever moment the daemon died at, and what no peer can do to the daemon's
mapping of it.

Testing policy: real sealed memfds (the region is one), written through the daemon's mapping and
read back through the shim's own; a daemon killed in the middle of a write is played by
writing only a prefix of the bytes a whole write puts there, at every possible cut.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

from lazyd.handoff import region as hs
from lazyd.handoff.region import Region, State, map_region, read_region


@pytest.fixture
def buf(fd: int) -> Iterator[Any]:
    mapped = map_region(fd)
    yield mapped
    mapped.close()


def read_state(fd: int) -> tuple[State | None, int]:
    """The newest state as the shim reads it, and the slot it is in."""
    region = read_region(fd)
    assert region is not None
    return region.current, region._slot


def _state(**fields: object) -> State:
    state = State()
    for name, value in fields.items():
        setattr(state, name, value)
    return state


def _fields(state: State) -> dict[str, object]:
    return {name: getattr(state, name) for name in State.__slots__ if name not in ("inflight", "out_torn")}


FULL = _state(init=b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}',
              initialized=b'{"jsonrpc":"2.0","method":"notifications/initialized"}', init_answered=True,
              head_len=12, discarding=True, tail_len=5, closed=False, head_area=1)


def test_a_new_region_holds_no_state_and_its_first_write_goes_to_slot_0(fd: int, buf: Any) -> None:
    assert read_state(fd) == (None, 1)
    region = Region(buf)
    assert region.current is None
    region.write(State())
    state, slot = read_state(fd)
    assert state is not None and slot == 0 and buf[hs.STATE_OFFSET] == 1


def test_every_field_reads_back_as_it_was_written(fd: int, buf: Any) -> None:
    Region(buf).write(FULL)
    state, _ = read_state(fd)
    assert state is not None and _fields(state) == _fields(FULL)


def test_writes_alternate_slots_and_the_state_byte_names_the_last_one_written(fd: int, buf: Any) -> None:
    region = Region(buf)
    for n in range(1, 6):
        region.write(_state(head_len=n))
        state, slot = read_state(fd)
        assert state is not None and state.head_len == n
        assert slot == (n - 1) % 2 and buf[hs.STATE_OFFSET] == slot + 1
    # A writer that comes later (the next daemon) writes into the slot not named.
    later = Region(buf)
    assert later.current is not None and later.current.head_len == 5
    later.write(_state(head_len=6))
    state, slot = read_state(fd)
    assert state is not None and state.head_len == 6 and slot == 1


def test_a_write_cut_at_any_byte_or_before_the_state_byte_leaves_the_previous_state(fd: int, buf: Any) -> None:
    region = Region(buf)
    region.write(FULL)
    newer = _state(init=b"init line", head_len=3)
    # The bytes a whole write puts into the other slot, taken from a scratch region.
    scratch = bytearray(hs.TABLE_OFFSET)
    Region(scratch).write(FULL)
    Region(scratch).write(newer)
    other = hs.SLOT_OFFSET + hs.SLOT_BYTES
    whole = bytes(scratch[other : other + 4096])
    whole = whole[: whole.index(b"init line") + len(b"init line")]  # the payload ends with it
    cuts = 0
    for cut in range(len(whole) + 1):  # the whole slot too: the state byte does not name it yet
        buf[other : other + len(whole)] = bytes(len(whole))  # what the slot held before: nothing
        buf[other : other + cut] = whole[:cut]
        state, _ = read_state(fd)
        assert state is not None and _fields(state) == _fields(FULL), cut
        cuts += 1
    assert cuts == len(whole) + 1 > 30
    buf[hs.STATE_OFFSET] = 2
    state, _ = read_state(fd)
    assert state is not None and state.init == b"init line"


def test_an_id_enters_and_leaves_the_table_by_its_own_entry_and_a_half_written_one_is_not_in_flight(
        fd: int, buf: Any) -> None:
    region = Region(buf)
    region.write(State())
    region.set_id(0, b"1")
    region.set_id(7, b'"1"')
    region.set_id(hs.TABLE_ENTRIES - 1, b'"' + b"x" * (hs.ENTRY_BYTES - 3) + b'"')
    shim = read_region(fd)
    assert shim is not None and shim.current is not None
    assert shim.current.inflight == [b"1", b'"1"', b'"' + b"x" * (hs.ENTRY_BYTES - 3) + b'"']
    region.clear_id(0)
    # An entry whose text is written and whose length byte is not yet (a kill in between) is free.
    at = hs.TABLE_OFFSET + 9 * hs.ENTRY_BYTES
    buf[at + 1 : at + 3] = b"42"
    shim = read_region(fd)
    assert shim is not None and shim.current is not None and shim.current.inflight[:1] == [b'"1"']
    assert len(shim.current.inflight) == 2


def test_the_torn_byte_is_read_as_the_state_s_torn_flag(fd: int, buf: Any) -> None:
    region = Region(buf)
    region.write(State())
    region.torn = True
    shim = read_region(fd)
    assert shim is not None and shim.current is not None and shim.current.out_torn
    region.torn = False
    shim = read_region(fd)
    assert shim is not None and shim.current is not None and not shim.current.out_torn


def test_a_handshake_line_over_its_bound_is_not_recorded_and_nothing_is_resumed() -> None:
    big = _state(init=b"i" * (hs.MAX_HANDSHAKE_LINE_BYTES + 1), init_answered=True)
    decoded = State.decode(big.encode())
    assert decoded.init == b"" and decoded.resume_lines() == []


def test_only_an_answered_initialize_is_resumed_with_its_initialized_line() -> None:
    assert _state(init=b"I", initialized=b"N").resume_lines() == []
    assert _state(init=b"I", initialized=b"N", init_answered=True).resume_lines() == [b"I", b"N"]
    assert _state(init=b"I", init_answered=True).resume_lines() == [b"I"]


def test_malformed_payloads_are_refused() -> None:
    good = FULL.encode()
    for bad in (good[:-1], good + b"x", good[:5], b""):
        with pytest.raises(ValueError):
            State.decode(bad)
    for field, value in (("head_len", hs.HEAD_AREA_BYTES - hs.READ_BYTES + 1), ("tail_len", hs.HEAD_AREA_BYTES + 1)):
        past = State()
        setattr(past, field, value)  # read by offset into the head areas: a shim must not trust it
        with pytest.raises(ValueError):
            State.decode(past.encode())


def test_heads_read_back_and_a_released_area_gives_its_pages_back_and_only_its_own(fd: int, buf: Any) -> None:
    region = Region(buf)
    region.write_head(b"abc", 0)
    region.write_head(memoryview(b"defg"), 3)
    assert region.read_head(7) == b"abcdefg"
    region.write_head(b"y" * (2 << 20), 0, 1)
    before = os.fstat(fd).st_blocks
    region.release(1)
    assert os.fstat(fd).st_blocks <= before - (2 << 20) // 512  # the 2 MiB head's pages are gone
    assert region.read_head(7, 1) == bytes(7) and os.fstat(fd).st_size == hs.REGION_BYTES
    assert region.read_head(7) == b"abcdefg"


def test_input_after_the_head_is_read_up_to_its_first_nul_and_none_is_read_without_copying(fd: int, buf: Any) -> None:
    region = Region(buf)
    state = _state(head_len=3, head_area=1)
    region.write_head(b"abc" + b"de\nf", 0, 1)
    assert region.unaccounted(state) == b"de\nf"
    assert region.unaccounted(_state(head_len=7, head_area=1)) == b""
    assert region.unaccounted(_state(head_len=3)) == b""


def test_a_region_can_neither_shrink_nor_grow_so_a_peer_cannot_make_the_daemon_s_mapping_fault(fd: int) -> None:
    assert hs.region_problem(fd) is None
    peer = os.open(f"/proc/self/fd/{fd}", os.O_RDWR)  # as any process of the user can open it
    try:
        for size in (0, hs.TABLE_OFFSET, hs.REGION_BYTES + 4096):
            with pytest.raises(PermissionError):
                os.ftruncate(peer, size)
        with pytest.raises(PermissionError):
            fcntl.fcntl(peer, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE)  # nor be sealed further
    finally:
        os.close(peer)
    assert os.fstat(fd).st_size == hs.REGION_BYTES


def test_only_a_sealed_anonymous_file_of_this_layout_and_size_is_taken_for_a_region(fd: int) -> None:
    assert hs.region_problem(fd) is None
    unsealed = os.memfd_create("peer", os.MFD_CLOEXEC)
    sealed_small = os.memfd_create("peer", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(unsealed, hs.REGION_BYTES)
        os.pwrite(unsealed, hs.MAGIC, 0)
        assert "not sealed" in (hs.region_problem(unsealed) or "")
        os.ftruncate(sealed_small, 4096)
        os.pwrite(sealed_small, hs.MAGIC, 0)
        fcntl.fcntl(sealed_small, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
        assert "bytes" in (hs.region_problem(sealed_small) or "")
    finally:
        os.close(unsealed)
        os.close(sealed_small)
    with tempfile.NamedTemporaryFile() as named:
        assert hs.region_problem(named.fileno()) is not None  # a named file the daemon would overwrite
    read_end, write_end = os.pipe()
    try:
        assert hs.region_problem(read_end) is not None
    finally:
        os.close(read_end)
        os.close(write_end)


def test_where_no_sealed_memfd_can_be_made_creating_a_region_is_an_os_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(os, "memfd_create")
    with pytest.raises(OSError):
        hs.create_region()
    assert mmap  # (imported for the mapping's type only)
