"""The shared region of a hand-off session: what a shim needs to finish what the daemon held.

On a hand-off session (docs/protocol.md, "Hand-off") the daemon reads and writes the client's
stdio itself, so only the daemon knows which requests are in flight. It keeps that, and the rest of
what the shim would need if the daemon were lost, in a file both share: a memfd the shim creates,
sizes and **seals** (it can neither shrink nor grow, so the daemon's mapping of it can never fault)
and passes with its descriptors. The daemon maps it whole and closes its descriptor. The shim
reads it (never mapped, with pread) only once the daemon is gone or has dropped the session,
answers from it, and passes a fresh region, holding what the next daemon continues from, to the
next daemon. Standard library only: the shim imports it.

Layout `LAYOUT` (offsets in bytes; `MAGIC` at offset 0 names it; the hello names it too)::

    [0, 4096)              the header: MAGIC; at TORN_OFFSET one byte, 1 while an answer may
                           be partly written on the client's stdout (the shim ends it with a
                           newline); at WHOLE_OFFSET one byte, 1 while whole lines may or may not
                           have been written, none cut (the shim adds nothing: its errors follow)
    [SLOT_OFFSET, ...)     two copies of the state, each: magic, generation, payload length,
                           crc32, payload (flags, head and tail lengths, the handshake lines)
    [TABLE_OFFSET, ...)    the requests in flight: TABLE_ENTRIES entries of ENTRY_BYTES, each one
                           length byte (0: free) and the JSON text of one id (1 and "1" differ)
    [LANDING_OFFSET, ...)  two landing zones of LANDING_BYTES: the daemon reads the client's
                           stdin straight into the zone the state names (``landing``)
    [HEAD_OFFSET, ...)     two head areas of HEAD_AREA_BYTES: the start of a line read but not
                           relayed yet (``head_len`` bytes in the area the state names)
    [TAIL_OFFSET, ...)     the unwritten rest of an answer the daemon had begun to write to the
                           client when it let go of the session itself (``tail_len`` bytes)

Bookkeeping costs O(1) per message: a request enters by writing its entry (text first, then the
length byte) and leaves by zeroing its length byte, and a write of an answer is
bracketed by two stores of the torn byte (a write that may stop inside a line) or of the whole
byte (one that goes whole or not at all: lazyd/daemon/handoff/whole_write.py). Single-byte stores cannot be torn by a kill -9. The
state, which changes once per read (not per message), goes to the slot that does *not* hold the
newest valid copy, so a process killed in the middle of one leaves the other intact; the reader
takes the valid slot with the highest generation. Head and tail areas are written before the state
that counts them, and a new head goes to the area the state does not name. The file is sparse:
only the pages written cost memory, and a consumed head's pages are given back.

Nothing read from the client is ever only in the daemon's memory: the daemon's reads land in the
mapped file itself. The state names the zone the *next* read goes to; once the daemon has relayed a
read's lines and entered their ids, one state write names the other zone (whose bytes were cleared
after its own last use). A daemon killed anywhere in between leaves the read's bytes in the zone
the state names: the shim takes them as input not yet accounted for, up to the first NUL byte
(zones are zeros but for what a read put there, and no JSON text holds a raw NUL), answers the
requests among them (each once, even if the table holds it too) and keeps the rest of a line for
the next daemon.

Versions: this shim recovers a region of this layout and of the one before (lazyd/handoff/snapshot.py);
a daemon serves only this layout by hand-off (any other over frames).
"""

from __future__ import annotations

import errno
import os
import struct
import zlib

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs start-up time
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

LAYOUT = 3
MAGIC = b"LZH3"

_MIB = 1 << 20
TORN_OFFSET = 64
WHOLE_OFFSET = 65
# A byte of its own, not a value 2 of the torn byte: a shim that knows only the torn byte (any
# non-zero value: a newline) still reads this layout right.
SLOT_OFFSET = _MIB
SLOT_BYTES = _MIB
# One copy of the state: the fixed fields and the two handshake lines (each at most
# MAX_HANDSHAKE_LINE_BYTES). Untouched pages of the memfd cost nothing.
TABLE_OFFSET = SLOT_OFFSET + 2 * SLOT_BYTES
ENTRY_BYTES = 64
TABLE_ENTRIES = _MIB // ENTRY_BYTES
# 16,384 requests in flight at once; an id whose JSON text is over ENTRY_BYTES - 1 bytes, or one
# past a full table, is counted in the state's `unrecorded` instead (no client's ids are that long,
# nor that many).
LANDING_OFFSET = TABLE_OFFSET + _MIB
LANDING_BYTES = 256 * 1024
# One read of the client's stdin (a pipe gives at most what it holds, 64 KiB by default).
HEAD_OFFSET = LANDING_OFFSET + _MIB
HEAD_AREA_BYTES = 17 * _MIB
# One line at most (16 MiB, its line end, or the first bytes of an over-long line being skipped).
TAIL_OFFSET = HEAD_OFFSET + 2 * HEAD_AREA_BYTES
TAIL_BYTES = 17 * _MIB
REGION_BYTES = TAIL_OFFSET + TAIL_BYTES

MAX_HANDSHAKE_LINE_BYTES = 256 * 1024
# An initialize line above this is not recorded (no SDK writes one near it): a session whose daemon
# was lost is then resumed without its handshake.

SEALS_NEEDED = ("F_SEAL_SHRINK", "F_SEAL_GROW", "F_SEAL_SEAL")
F_SEAL_WRITE, F_SEAL_FUTURE_WRITE = 0x0008, 0x0010

_HEADER = struct.Struct("<4sQII")  # magic, generation, payload length, crc32 of generation+length+payload
_FIXED = struct.Struct("<BIIIIII")  # flags, head_len, tail_len, unrecorded, len(init), len(initialized), ids
_ID_LEN = struct.Struct("<H")

FLAG_INIT_ANSWERED = 1  # the client saw its initialize answered: worth resuming
FLAG_OUT_TORN = 2  # the previous layout's torn flag (this one has the torn byte)
FLAG_CLOSED = 4  # the daemon ended the session because the client left: nothing to answer
FLAG_DISCARDING = 8  # the head is the start of an over-long line whose rest is being skipped
FLAG_LANDING_1 = 16  # the next read lands in zone 1 (else 0)
FLAG_HEAD_AREA_1 = 32  # the head is in area 1 (else 0)


class State:
    """One copy of a hand-off session's state (see the module docstring). `inflight` is filled by
    the readers (from the table, or from the previous layout's payload); this layout's payload
    carries no ids."""

    __slots__ = ("generation", "init", "initialized", "init_answered", "inflight", "unrecorded",
                 "head_len", "discarding", "out_torn", "out_whole", "tail_len", "closed", "landing", "head_area")

    def __init__(self) -> None:
        self.generation = 0
        self.init = b""  # the client's initialize request line, as it sent it
        self.initialized = b""  # its notifications/initialized line
        self.init_answered = False
        self.inflight: list[bytes] = []  # JSON text of each request id in flight, in its own type
        self.unrecorded = 0  # requests in flight that are not in the table (ids too long, a full table)
        self.head_len = 0
        self.discarding = False
        self.out_torn = False
        self.out_whole = False  # whole lines may have just gone out: none is cut (WHOLE_OFFSET)
        self.tail_len = 0
        self.closed = False
        self.landing = 0  # the landing zone whose bytes are not accounted for yet
        self.head_area = 0

    def resume_lines(self) -> list[bytes]:
        """The handshake lines to resume a session with: only one the client saw answered."""
        if not self.init or not self.init_answered:
            return []
        return [self.init, self.initialized] if self.initialized else [self.init]

    def encode(self) -> bytes:
        """The payload of one slot."""
        init = self.init if len(self.init) <= MAX_HANDSHAKE_LINE_BYTES else b""
        initialized = self.initialized if len(self.initialized) <= MAX_HANDSHAKE_LINE_BYTES else b""
        flags = ((FLAG_INIT_ANSWERED if self.init_answered else 0) | (FLAG_CLOSED if self.closed else 0)
                 | (FLAG_DISCARDING if self.discarding else 0) | (FLAG_LANDING_1 if self.landing else 0)
                 | (FLAG_HEAD_AREA_1 if self.head_area else 0))
        fixed = _FIXED.pack(flags, self.head_len, self.tail_len, self.unrecorded, len(init), len(initialized), 0)
        return b"".join((fixed, init, initialized))

    @classmethod
    def decode(cls, payload: bytes) -> State:
        """The state in one slot's payload (ids too, as the previous layout kept them there);
        raises ValueError if it is malformed."""
        state = cls()
        try:
            flags, state.head_len, state.tail_len, state.unrecorded, n_init, n_initialized, count = \
                _FIXED.unpack_from(payload)
            at = _FIXED.size
            state.init = payload[at : at + n_init]
            at += n_init
            state.initialized = payload[at : at + n_initialized]
            at += n_initialized
            for _ in range(count):
                (size,) = _ID_LEN.unpack_from(payload, at)
                at += _ID_LEN.size
                state.inflight.append(payload[at : at + size])
                at += size
        except struct.error as exc:
            raise ValueError(f"truncated hand-off state: {exc}") from None
        if at != len(payload) or len(state.init) != n_init or len(state.initialized) != n_initialized:
            raise ValueError("malformed hand-off state")
        state.init_answered = bool(flags & FLAG_INIT_ANSWERED)
        state.out_torn = bool(flags & FLAG_OUT_TORN)
        state.closed = bool(flags & FLAG_CLOSED)
        state.discarding = bool(flags & FLAG_DISCARDING)
        state.landing = 1 if flags & FLAG_LANDING_1 else 0
        state.head_area = 1 if flags & FLAG_HEAD_AREA_1 else 0
        return state


def newest_state(read: Callable[[int, int], bytes], magic: bytes, offset: int, slot_bytes: int) -> tuple[State | None, int]:
    """The newest valid state in the two slots at `offset`, and the slot holding it ((None, 1):
    none), with `read(length, offset)` reading the region."""
    found: list[tuple[int, int, State]] = []
    for index in (0, 1):
        at = offset + index * slot_bytes
        header = read(_HEADER.size, at)
        if len(header) < _HEADER.size:
            continue
        got, generation, length, crc = _HEADER.unpack(header)
        if got != magic or length > slot_bytes - _HEADER.size:
            continue
        payload = read(length, at + _HEADER.size)
        if len(payload) != length or zlib.crc32(payload, zlib.crc32(header[4:16])) != crc:
            continue
        try:
            state = State.decode(payload)
        except ValueError:
            continue
        state.generation = generation
        found.append((generation, index, state))
    if not found:
        return None, 1
    _, index, state = max(found, key=lambda item: item[0])
    return state, index


def table_extent(fd: int) -> int:
    """How many bytes of the table of region `fd` lie before the end of its last allocated page:
    no entry was ever written past it (the pages of a memfd are allocated as they are written,
    and a swapped-out page still counts as data). The whole table where the file system cannot
    tell (no SEEK_DATA)."""
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
    """A region of this layout over `buf`: the daemon's mapping of it (an `mmap`,
    lazyd/daemon/handoff/ledger.py's `map_region`), or what the shim reads and writes with pread
    and pwrite (`read_region`). Writes alternate slots (see the module docstring)."""

    def __init__(self, buf: Any, table_bytes: int = TABLE_ENTRIES * ENTRY_BYTES) -> None:
        """`table_bytes`: how much of the table can hold an entry (`table_extent`); the rest is
        never read, as reading a mapped page the file has never had allocates it."""
        self.buf = buf
        self._table_end = min(TABLE_ENTRIES, -(-table_bytes // ENTRY_BYTES)) * ENTRY_BYTES
        current, self._slot = newest_state(lambda n, at: bytes(buf[at : at + n]), MAGIC, SLOT_OFFSET, SLOT_BYTES)
        self._generation = current.generation if current is not None else 0
        if current is not None:
            current.inflight = [text for _, text in self.entries()]
            current.out_torn = self.torn
            current.out_whole = self.whole
        self.current = current  # what the previous writer (daemon or shim) left, if anything

    # ---- the state -----------------------------------------------------------------------------

    def write(self, state: State) -> None:
        """Write `state` as the newest copy (header and payload together)."""
        payload = state.encode()
        self._generation += 1
        self._slot ^= 1
        head = struct.pack("<QI", self._generation, len(payload))
        crc = zlib.crc32(payload, zlib.crc32(head))
        at = SLOT_OFFSET + self._slot * SLOT_BYTES
        data = _HEADER.pack(MAGIC, self._generation, len(payload), crc) + payload
        self.buf[at : at + len(data)] = data
        state.generation = self._generation

    # ---- the table of requests in flight -------------------------------------------------------

    def set_id(self, entry: int, text: bytes) -> None:
        """Enter `text` (at most ENTRY_BYTES - 1 bytes) at `entry`: the text first, its length last."""
        at = TABLE_OFFSET + entry * ENTRY_BYTES
        self.buf[at + 1 : at + 1 + len(text)] = text
        self.buf[at] = len(text)
        self._table_end = max(self._table_end, (entry + 1) * ENTRY_BYTES)

    def clear_id(self, entry: int) -> None:
        self.buf[TABLE_OFFSET + entry * ENTRY_BYTES] = 0

    def entries(self) -> list[tuple[int, bytes]]:
        """The entries in use: (index, id text). The length bytes are scanned by `bytes.find`, not
        one by one in Python: a daemon adopting a thousand sessions after a crash reads each
        table a few times."""
        table = bytes(self.buf[TABLE_OFFSET : TABLE_OFFSET + self._table_end])
        sizes = table[::ENTRY_BYTES]
        marks = sizes.translate(_USED)  # 1 where an entry is in use
        used = []
        index = marks.find(1)
        while index >= 0:
            at = index * ENTRY_BYTES + 1
            used.append((index, table[at : at + sizes[index]]))
            index = marks.find(1, index + 1)
        return used

    @property
    def torn(self) -> bool:
        return bool(self.buf[TORN_OFFSET])

    @torn.setter
    def torn(self, value: bool) -> None:
        self.buf[TORN_OFFSET] = 1 if value else 0

    @property
    def whole(self) -> bool:
        return bool(self.buf[WHOLE_OFFSET])

    @whole.setter
    def whole(self, value: bool) -> None:
        self.buf[WHOLE_OFFSET] = 1 if value else 0

    # ---- input and output not accounted for ----------------------------------------------------

    def write_head(self, data: bytes | memoryview, offset: int, area: int = 0) -> None:
        """Put `data` at `offset` of head area `area` (a line's start, before the state counts it)."""
        at = head_offset(area) + offset
        self.buf[at : at + len(data)] = data

    def read_head(self, length: int, area: int = 0) -> bytes:
        at = head_offset(area)
        return bytes(self.buf[at : at + min(length, HEAD_AREA_BYTES)])

    def write_tail(self, data: bytes) -> int:
        """Put the rest of a torn answer in the tail area (what fits); returns its length."""
        data = data[:TAIL_BYTES]
        self.buf[TAIL_OFFSET : TAIL_OFFSET + len(data)] = data
        return len(data)

    def read_tail(self, length: int) -> bytes:
        return bytes(self.buf[TAIL_OFFSET : TAIL_OFFSET + min(length, TAIL_BYTES)])

    def read_landed(self, zone: int) -> bytes:
        """What a read put in landing zone `zone` and no state accounts for (up to the first NUL)."""
        at = landing_offset(zone)
        if not self.buf[at]:
            return b""  # the usual case, without copying the zone's 256 KiB
        data = bytes(self.buf[at : at + LANDING_BYTES])
        end = data.find(b"\0")
        return data if end < 0 else data[:end]

    def release_heads(self) -> None:
        """Give the pages of both head areas and the tail back (the state counts no head)."""
        import mmap

        self.buf.madvise(mmap.MADV_REMOVE, HEAD_OFFSET, REGION_BYTES - HEAD_OFFSET)


_USED = bytes([0]) + bytes([1]) * 255  # a length byte's translation: in use or not


def landing_offset(zone: int) -> int:
    return LANDING_OFFSET + zone * LANDING_BYTES


def head_offset(area: int) -> int:
    return HEAD_OFFSET + area * HEAD_AREA_BYTES


# ---- creating, checking, mapping, reading --------------------------------------------------------


def create_region() -> int:
    """A new, empty region: an anonymous memfd (close-on-exec) of REGION_BYTES, sealed against
    shrinking and growing. Raises OSError where that cannot be made (no memfd, no sealing)."""
    import fcntl

    if not (hasattr(os, "memfd_create") and hasattr(os, "MFD_ALLOW_SEALING")
            and all(hasattr(fcntl, name) for name in (*SEALS_NEEDED, "F_ADD_SEALS"))):
        raise OSError(0, "this system has no sealed memfd")
    fd: int = os.memfd_create("lazyd-handoff", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, REGION_BYTES)
        os.pwrite(fd, MAGIC, 0)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
    except OSError:
        os.close(fd)
        raise
    return fd


def region_problem(fd: int) -> str | None:
    """Why `fd` cannot be mapped as a region of this layout (None: it can). A region must be an
    anonymous file (so a peer cannot have the daemon write a named one), of REGION_BYTES, sealed
    so that it can neither shrink nor grow nor get another seal (so that no peer can make the
    daemon's mapping fault), writable, and of this layout."""
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


def read_region(fd: int) -> Region | None:
    """The region `fd` as far as the shim needs it (the header, the slots, the table's allocated
    pages; the rest is read on demand through `Region.buf`), with pread: a shim never maps one.
    None when `fd` is not a region of this layout."""
    return Region(_Sparse(fd), table_extent(fd)) if os.pread(fd, 4, 0) == MAGIC else None

class _Sparse:
    """Slices of a region read with pread, and written with pwrite: as much of a buffer as Region
    needs, for the shim, which must not map what another process might have resized."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __getitem__(self, key: slice | int) -> Any:
        if isinstance(key, int):
            return os.pread(self.fd, 1, key)[0]
        return pread_all(self.fd, key.stop - key.start, key.start)

    def __setitem__(self, key: slice | int, value: Any) -> None:
        if isinstance(key, int):
            os.pwrite(self.fd, bytes([value]), key)
        else:
            pwrite_all(self.fd, value, key.start)


def pwrite_all(fd: int, data: bytes | memoryview, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view = view[written:]
        offset += written


def pread_all(fd: int, length: int, offset: int) -> bytes:
    parts: list[bytes] = []
    while length > 0:
        chunk = os.pread(fd, min(length, _MIB), offset)
        if not chunk:
            break  # the file ends sooner: what is there is all
        parts.append(chunk)
        length -= len(chunk)
        offset += len(chunk)
    return b"".join(parts)

