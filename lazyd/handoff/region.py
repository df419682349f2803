"""The shared region of a hand-off session: what a recovering shim needs to answer for a lost daemon.

What it holds and why is in docs/protocol.md ("Hand-off"); the areas, from offset 0: MAGIC, the
torn byte and the state byte, two slots of the state, the table of ids in flight, two head areas.
Standard library only: the shim imports it.

Each write is ordered so that a kill -9 between two stores leaves a region read right: what a
single byte makes valid is written before that byte (a single byte is not torn). An id enters by
its text, then its length byte. The state goes to the slot the state byte does not name, then
the byte names it, after the head or tail it counts. The client's stdin is read into the head
area the state names, right after the head; beyond the head that area is zero but for such a
read, so a lost daemon's area holds, up to the first NUL after the head (no JSON text has one),
input nobody accounted for. Any other head (a new line's start, the kept start of an over-long
line) and the tail go to the other area, which is scratch until the state names it.
"""

from __future__ import annotations

import errno
import os
import struct
import sys

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs start-up time
if TYPE_CHECKING:
    import mmap
    from typing import Any

LAYOUT = 5
MAGIC = b"LZH5"
MEMFD_NAME = "lazyd-handoff"  # as /proc/PID/fd shows it: "/memfd:lazyd-handoff (deleted)"
HELLO_MEMFD = "lazyd-hello"  # the memfd a waiter keeps its hello in (shim/handoff.py's hello_memfd)

_MIB = 1 << 20
TORN_OFFSET = 64
STATE_OFFSET = 65  # the slot holding the state, plus one (0: no state yet)
SLOT_OFFSET = _MIB
SLOT_BYTES = _MIB
TABLE_OFFSET = SLOT_OFFSET + 2 * SLOT_BYTES
ENTRY_BYTES = 64
TABLE_ENTRIES = _MIB // ENTRY_BYTES
# An id whose JSON text is over ENTRY_BYTES - 1 bytes, or one past a full table, is not recorded:
# no client's ids are that long, nor that many at once.
READ_BYTES = 256 * 1024  # the most one read of the client's stdin takes
HEAD_OFFSET = TABLE_OFFSET + _MIB
HEAD_AREA_BYTES = 17 * _MIB  # one line at most (16 MiB and its line end), and a read after it
REGION_BYTES = HEAD_OFFSET + 2 * HEAD_AREA_BYTES

MAX_HANDSHAKE_LINE_BYTES = 256 * 1024  # a longer initialize (no SDK writes one) is not resumed

F_SEAL_WRITE, F_SEAL_FUTURE_WRITE = 0x0008, 0x0010

_LENGTH = struct.Struct("<I")  # a slot: the payload's length, then the payload
_FIXED = struct.Struct("<BIIII")  # flags, head_len, tail_len, len(init), len(initialized)
_FLAGS = (1, 2, 4, 8)  # the bits of init_answered, closed, discarding and head_area


class State:
    """One copy of a session's state; `inflight` and `out_torn` are read beside it, from the region."""

    __slots__ = ("init", "initialized", "init_answered", "inflight", "head_len", "discarding",
                 "out_torn", "tail_len", "closed", "head_area")

    def __init__(self) -> None:
        self.init = b""  # the client's initialize request line, as it sent it
        self.initialized = b""  # its notifications/initialized line
        self.init_answered = False  # the client saw its initialize answered: worth resuming
        self.inflight: list[bytes] = []  # JSON text of each request id in the table
        self.head_len = 0
        self.discarding = False  # the head starts an over-long line whose rest is being skipped
        self.out_torn = False
        self.tail_len = 0
        self.closed = False  # the daemon ended the session because the client left: nothing to answer
        self.head_area = 0  # the area holding the head, and the next read after it

    def resume_lines(self) -> list[bytes]:
        """The handshake lines to resume a session with: only one the client saw answered."""
        if not self.init or not self.init_answered:
            return []
        return [self.init, self.initialized] if self.initialized else [self.init]

    def encode(self) -> bytes:
        """The payload of one slot."""
        init = self.init if len(self.init) <= MAX_HANDSHAKE_LINE_BYTES else b""
        initialized = self.initialized if len(self.initialized) <= MAX_HANDSHAKE_LINE_BYTES else b""
        values = (self.init_answered, self.closed, self.discarding, self.head_area)
        flags = sum(bit for bit, value in zip(_FLAGS, values) if value)
        return _FIXED.pack(flags, self.head_len, self.tail_len, len(init), len(initialized)) + init + initialized

    @classmethod
    def decode(cls, payload: bytes) -> State:
        """The state in one slot's payload; raises ValueError if it is malformed."""
        state = cls()
        if len(payload) < _FIXED.size:
            raise ValueError("truncated hand-off state")
        flags, state.head_len, state.tail_len, n_init, n_initialized = _FIXED.unpack_from(payload)
        if _FIXED.size + n_init + n_initialized != len(payload):
            raise ValueError("malformed hand-off state")
        if state.head_len > HEAD_AREA_BYTES - READ_BYTES or state.tail_len > HEAD_AREA_BYTES:
            raise ValueError("hand-off state with a head or tail past its area")  # read by offset: never trusted
        state.init = payload[_FIXED.size : _FIXED.size + n_init]
        state.initialized = payload[_FIXED.size + n_init :]
        state.init_answered, state.closed, state.discarding, head_area = (bool(flags & bit) for bit in _FLAGS)
        state.head_area = int(head_area)
        return state


def table_extent(fd: int) -> int:
    """How many bytes of the table of region `fd` lie before the end of its last allocated page:
    no entry was ever written past it, and reading a mapped page the file never had allocates it.
    The whole table where the file system cannot tell (no SEEK_DATA)."""
    end = TABLE_OFFSET + TABLE_ENTRIES * ENTRY_BYTES
    extent, at = 0, TABLE_OFFSET
    try:
        while at < end:
            data = os.lseek(fd, at, os.SEEK_DATA)
            if data >= end:
                break
            at = os.lseek(fd, data, os.SEEK_HOLE)
            extent = min(at, end) - TABLE_OFFSET
    except OSError as exc:
        if exc.errno != errno.ENXIO:  # ENXIO: no data from `at` on
            return end - TABLE_OFFSET
    return extent


class Region:
    """A region over `buf`, a mapping of it (`map_region`). `table_bytes`: how much of the table
    can hold an entry (`table_extent`); the rest is never read."""

    def __init__(self, buf: Any, table_bytes: int = TABLE_ENTRIES * ENTRY_BYTES) -> None:
        self.buf = buf
        self._table_end = min(TABLE_ENTRIES, -(-table_bytes // ENTRY_BYTES)) * ENTRY_BYTES
        named = buf[STATE_OFFSET]
        self._slot = named - 1 if named in (1, 2) else 1  # where the state is; the next write goes to the other
        self.current = self._read_slot(self._slot) if named in (1, 2) else None  # what the last writer left
        if self.current is not None:
            self.current.inflight = [text for _, text in self.entries()]
            self.current.out_torn = self.torn

    def _read_slot(self, index: int) -> State | None:
        at = SLOT_OFFSET + index * SLOT_BYTES
        (length,) = _LENGTH.unpack(self.buf[at : at + _LENGTH.size])
        at += _LENGTH.size
        try:
            return State.decode(bytes(self.buf[at : at + min(length, SLOT_BYTES - _LENGTH.size)]))
        except ValueError:
            return None

    def write(self, state: State) -> None:
        """Write `state` into the slot not holding the current one, then name that slot."""
        payload = state.encode()
        self._slot ^= 1
        at = SLOT_OFFSET + self._slot * SLOT_BYTES
        self.buf[at : at + _LENGTH.size + len(payload)] = _LENGTH.pack(len(payload)) + payload
        self.buf[STATE_OFFSET] = self._slot + 1

    def set_id(self, entry: int, text: bytes) -> None:
        """Enter `text` (at most ENTRY_BYTES - 1 bytes) at `entry`: the text first, its length last."""
        at = TABLE_OFFSET + entry * ENTRY_BYTES
        self.buf[at + 1 : at + 1 + len(text)] = text
        self.buf[at] = len(text)
        self._table_end = max(self._table_end, (entry + 1) * ENTRY_BYTES)

    def clear_id(self, entry: int) -> None:
        self.buf[TABLE_OFFSET + entry * ENTRY_BYTES] = 0

    def entries(self) -> list[tuple[int, bytes]]:
        """The entries in use: (index, id text)."""
        table = bytes(self.buf[TABLE_OFFSET : TABLE_OFFSET + self._table_end])
        return [(at // ENTRY_BYTES, table[at + 1 : at + 1 + table[at]])
                for at in range(0, len(table), ENTRY_BYTES) if table[at]]

    @property
    def torn(self) -> bool:
        return bool(self.buf[TORN_OFFSET])

    @torn.setter
    def torn(self, value: bool) -> None:
        self.buf[TORN_OFFSET] = 1 if value else 0

    def write_head(self, data: bytes | bytearray | memoryview, offset: int, area: int = 0) -> None:
        """Put `data` at `offset` of head area `area` (a line's start, before the state counts it)."""
        at = head_offset(area) + offset
        self.buf[at : at + len(data)] = data

    def read_head(self, length: int, area: int = 0) -> bytes:
        at = head_offset(area)
        return bytes(self.buf[at : at + min(length, HEAD_AREA_BYTES)])

    def unaccounted(self, state: State) -> bytes:
        """What a read put after the head `state` counts and no state accounts for (up to the first NUL)."""
        at = head_offset(state.head_area) + state.head_len
        if not self.buf[at]:
            return b""  # the usual case, without copying the area
        data = bytes(self.buf[at : at + READ_BYTES])
        end = data.find(b"\0")
        return data if end < 0 else data[:end]

    def release(self, area: int) -> None:
        """Give the pages of head area `area` back: it reads as zeros again."""
        import mmap

        self.buf.madvise(mmap.MADV_REMOVE, head_offset(area), HEAD_AREA_BYTES)


def head_offset(area: int) -> int:
    return HEAD_OFFSET + area * HEAD_AREA_BYTES


def create_region() -> int:
    """A new, empty region: an anonymous memfd (close-on-exec) of REGION_BYTES, sealed against
    shrinking and growing. Raises OSError where that cannot be made (no memfd, no sealing)."""
    import fcntl

    try:
        add_seals, seals = fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL
        fd: int = os.memfd_create(MEMFD_NAME, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    except AttributeError:
        raise OSError(0, "this system has no sealed memfd") from None
    try:
        os.ftruncate(fd, REGION_BYTES)
        os.pwrite(fd, MAGIC, 0)
        fcntl.fcntl(fd, add_seals, seals)
    except OSError:
        os.close(fd)
        raise
    return fd


def region_problem(fd: int) -> str | None:
    """Why `fd` cannot be mapped as a region of this layout (None: it can). A region must be an
    anonymous file (so a peer cannot have the daemon write a named one) of REGION_BYTES, sealed so
    that it can neither shrink nor grow nor get another seal (so that no peer can make a mapping of
    it fault), writable, and of this layout."""
    import fcntl
    import stat

    try:
        st = os.fstat(fd)
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
        magic = os.pread(fd, 4, 0)
    except (OSError, AttributeError) as exc:
        return f"it cannot be inspected ({getattr(exc, 'strerror', None) or exc})"
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 0:
        return "it is not an anonymous file"
    if magic != MAGIC:
        return f"its layout is {magic!r}, not {MAGIC!r}"
    needed = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL
    if seals & needed != needed or seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE):
        return "it is not sealed against shrinking and growing"
    if st.st_size != REGION_BYTES:
        return f"it holds {st.st_size} bytes, not {REGION_BYTES}"
    return None


def map_region(fd: int) -> mmap.mmap:
    """The region `fd` (one whose `region_problem` is None: its seals keep its size, so the mapping
    never faults), mapped whole and shared; before Python 3.13 the mapping keeps a duplicate of the
    descriptor. `mmap` is imported here: a shim's start creates a region and never maps one."""
    import mmap

    untracked: dict[str, Any] = {"trackfd": False} if sys.version_info >= (3, 13) else {}
    return mmap.mmap(fd, REGION_BYTES, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, **untracked)


def unmap(mapped: mmap.mmap) -> None:
    """Unmap a region; one whose view something still holds is unmapped when the last view goes."""
    try:
        mapped.close()
    except BufferError:
        pass


def read_region(fd: int) -> Region | None:
    """The region `fd` as the shim reads it, mapped (`Region.buf`; `unmap` it when done); None when
    `fd` is not a sealed region of this layout (a daemon of another layout wrote it) or cannot be
    mapped."""
    if region_problem(fd) is not None:
        return None
    try:
        return Region(map_region(fd), table_extent(fd))
    except OSError:
        return None
