"""The shared region of a hand-off session (lazyd/handoff_state.py): what a shim reads back after
its daemon is gone, whatever moment the daemon died at.

Testing policy: real memfds (the region is one), written and read by the module's own functions;
a daemon killed in the middle of a write is played by writing only a prefix of the bytes a whole
write puts there, at every possible cut.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator

import pytest

from lazyd import handoff_state as hs
from lazyd.handoff_state import Region, State, read_state


@pytest.fixture
def fd() -> Iterator[int]:
    region = hs.create_region()
    yield region
    os.close(region)


def _state(**fields: object) -> State:
    state = State()
    for name, value in fields.items():
        setattr(state, name, value)
    return state


def _fields(state: State) -> dict[str, object]:
    return {name: getattr(state, name) for name in State.__slots__ if name != "generation"}


FULL = _state(init=b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}',
              initialized=b'{"jsonrpc":"2.0","method":"notifications/initialized"}', init_answered=True,
              inflight=[b"1", b'"1"', b"-7", b'"\\u00e9t\\u00e9"'], unrecorded=2, head_len=12, discarding=True,
              out_torn=True, tail_len=5, closed=False)


def test_a_new_region_holds_no_state_and_its_first_write_goes_to_slot_0(fd: int) -> None:
    assert read_state(fd) == (None, 1)
    region = Region(fd)
    assert region.current is None
    region.write(State())
    state, slot = read_state(fd)
    assert state is not None and slot == 0 and state.generation == 1


def test_every_field_reads_back_as_it_was_written(fd: int) -> None:
    Region(fd).write(FULL)
    state, _ = read_state(fd)
    assert state is not None and _fields(state) == _fields(FULL)


def test_writes_alternate_slots_and_the_highest_generation_wins(fd: int) -> None:
    region = Region(fd)
    for n in range(1, 6):
        region.write(_state(inflight=[str(n).encode()]))
        state, slot = read_state(fd)
        assert state is not None and state.inflight == [str(n).encode()] and state.generation == n
        assert slot == (n - 1) % 2
    # A writer that comes later (the next daemon, or the shim) continues the generations.
    later = Region(fd)
    assert later.current is not None and later.current.inflight == [b"5"]
    later.write(_state(inflight=[b"6"]))
    state, _ = read_state(fd)
    assert state is not None and state.inflight == [b"6"] and state.generation == 6


def test_a_write_cut_at_any_byte_leaves_the_previous_state(fd: int) -> None:
    region = Region(fd)
    region.write(FULL)
    newer = _state(inflight=[b"99", b'"x"'], init=b"init line", head_len=3)
    # The bytes a whole write puts into the other slot, taken from a scratch region.
    scratch = hs.create_region()
    try:
        Region(scratch).write(FULL)
        Region(scratch).write(newer)
        whole = os.pread(scratch, 4096, hs.SLOT_BYTES)
    finally:
        os.close(scratch)
    whole = whole[: whole.index(b"init line") + len(b"init line") + 64]
    cuts = 0
    for cut in range(len(whole)):
        os.pwrite(fd, b"\0" * len(whole), hs.SLOT_BYTES)  # what the slot held before: nothing
        os.pwrite(fd, whole[:cut], hs.SLOT_BYTES)
        state, _ = read_state(fd)
        assert state is not None and _fields(state) == _fields(FULL), cut
        cuts += 1
    assert cuts == len(whole) > 40
    os.pwrite(fd, whole, hs.SLOT_BYTES)
    state, _ = read_state(fd)
    assert state is not None and state.inflight == [b"99", b'"x"']


def test_a_slot_with_a_flipped_byte_is_not_taken(fd: int) -> None:
    region = Region(fd)
    region.write(_state(inflight=[b"1"]))
    region.write(_state(inflight=[b"2"]))
    payload = bytearray(os.pread(fd, 64, hs.SLOT_BYTES))
    payload[30] ^= 0x40
    os.pwrite(fd, bytes(payload), hs.SLOT_BYTES)
    state, _ = read_state(fd)
    assert state is not None and state.inflight == [b"1"]


def test_ids_too_long_or_beyond_the_slot_are_counted_not_written() -> None:
    long_id = b'"' + b"x" * hs.MAX_ID_BYTES + b'"'
    state = _state(inflight=[b"1", long_id, b"2"])
    assert State.decode(state.encode()).inflight == [b"1", b"2"]
    assert State.decode(state.encode()).unrecorded == 1
    many = [str(n).encode() for n in range(200_000)]  # more than one slot holds
    decoded = State.decode(_state(inflight=many).encode())
    assert len(decoded.inflight) + decoded.unrecorded == len(many)
    assert decoded.unrecorded > 0 and len(_state(inflight=many).encode()) <= hs.SLOT_BYTES


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


def test_head_and_tail_read_back_and_release_frees_their_pages(fd: int) -> None:
    region = Region(fd)
    region.write_head(b"abc", 0)
    region.write_head(memoryview(b"defg"), 3)
    region.write_tail([b"rest of ", memoryview(b"a line\n")])
    assert region.read_head(7) == b"abcdefg"
    assert region.read_tail(15) == b"rest of a line\n"
    assert os.fstat(fd).st_size > hs.TAIL_OFFSET
    region.release(keep_head=7)
    assert os.fstat(fd).st_size == hs.HEAD_OFFSET + 7 and region.read_head(7) == b"abcdefg"
    assert region.read_tail(15) == b""


def test_only_an_anonymous_file_is_taken_for_a_region(fd: int) -> None:
    assert hs.is_region(fd)
    with tempfile.NamedTemporaryFile() as named:
        assert not hs.is_region(named.fileno())  # a named file the daemon would overwrite
    read_end, write_end = os.pipe()
    try:
        assert not hs.is_region(read_end)
    finally:
        os.close(read_end)
        os.close(write_end)
