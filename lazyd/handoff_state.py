"""The shared region of a hand-off session: what a shim needs to finish what the daemon held.

On a hand-off session (docs/protocol.md, "Hand-off") the daemon reads and writes the client's
pipes itself, so only the daemon knows which requests are in flight. It keeps that, and the rest of
what the shim would need if the daemon were lost, in a small file both share: a memfd the shim
creates and passes with its descriptors. The shim reads it only once the daemon is gone (or has
dropped the session), answers from it, and writes it once more before passing it to the next
daemon, which continues from it. Standard library only: the shim imports it.

Layout of the file (offsets in bytes)::

    [0, SLOT_BYTES)             slot 0  \\  two copies of the state, each: magic, generation,
    [SLOT_BYTES, 2*SLOT_BYTES)  slot 1  /  payload length, crc32, payload
    [LANDING_OFFSET, ...)       two landing zones of LANDING_BYTES: the daemon reads the client's
                                stdin straight into the zone the state names (``landing``)
    [HEAD_OFFSET, ...)          two head areas of HEAD_AREA_BYTES: the start of a line read but
                                not relayed yet, whose end was not read yet (``head_len`` bytes in
                                the area the state names, ``head_area``)
    [TAIL_OFFSET, ...)          the unwritten rest of an answer the daemon had begun to write to
                                the client when it dropped the session itself (``tail_len`` bytes)

A write of the state goes to the slot that does *not* hold the newest valid copy, so a process
killed in the middle of one (kill -9) leaves the other intact; the reader takes the valid slot with
the highest generation. The head and tail areas are written before the state that counts them, and
a new head goes to the area the state does not name, so the recorded one is never overwritten.
The file is sparse: only the pages written cost memory, and a head that has been consumed is freed
(`release`).

Nothing read from the client is ever only in the daemon's memory. The daemon's reads of the client's
stdin land in the shared file itself (it maps the landing zones), so a byte that left the pipe is
in the region the moment the read returns. The state names the zone the *next* read goes to; after
the daemon has relayed a read's lines and recorded their ids, one state write names the other zone
(whose bytes were cleared after its own last use), and the zone just read is cleared. A daemon
killed anywhere in between leaves the read's bytes in the zone the state names: the shim takes them
as input not yet accounted for, up to the first NUL byte (zones are all zeros but for what a read
put there, and no JSON text holds a raw NUL), answers the requests among them and keeps the rest of
a line for the next daemon. A request whose id the state also records (the daemon had got that far)
is answered once.

What a kill -9 can still do: answer a request twice — one the daemon answered and had not yet
retired (its id is answered a second time, with the lost-connection error, which clients ignore as
an unknown id).
"""

from __future__ import annotations

import os
import struct
import zlib

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs start-up time
if TYPE_CHECKING:
    from collections.abc import Iterable

MAGIC = b"LZH2"
LEGACY_MAGIC = b"LZH1"
# The layout before the landing zones: one head area at 2 MiB, the tail at 34 MiB, the same state
# payload. A shim that handed off under that layout recovers with this code (the waiting shell
# execs whatever shim is installed now): `migrate_legacy` moves such a region to this layout.
LEGACY_HEAD_OFFSET = 2 << 20
LEGACY_TAIL_OFFSET = 34 << 20
SLOT_BYTES = 1 << 20
# One copy of the state. Typical sessions use a few hundred bytes (the client's initialize line and
# a handful of ids); 1 MiB holds the initialize line and ~100,000 small ids. Untouched pages of the
# memfd cost nothing.
LANDING_OFFSET = 2 * SLOT_BYTES
LANDING_BYTES = 256 * 1024
# One read of the client's stdin (a pipe gives at most what it holds, 64 KiB by default).
HEAD_OFFSET = LANDING_OFFSET + (1 << 20)
HEAD_AREA_BYTES = 32 << 20
TAIL_OFFSET = HEAD_OFFSET + 2 * HEAD_AREA_BYTES
# Each area holds at most one line (16 MiB and its line end); 32 MiB leaves room for a partial line
# and whatever over-long input is being discarded.

MAX_HANDSHAKE_LINE_BYTES = 256 * 1024
# An initialize line above this is not recorded (no SDK writes one near it): a session whose daemon
# was lost is then resumed without its handshake.
MAX_ID_BYTES = 1024
# An id whose JSON text is longer is not recorded (counted in `unrecorded`): string ids that long
# are no client's habit, and one must not crowd out the others.

_HEADER = struct.Struct("<4sQII")  # magic, generation, payload length, crc32 of generation+length+payload
_FIXED = struct.Struct("<BIIIIII")  # flags, head_len, tail_len, unrecorded, len(init), len(initialized), ids
_ID_LEN = struct.Struct("<H")

FLAG_INIT_ANSWERED = 1  # the client saw its initialize answered: worth resuming
FLAG_OUT_TORN = 2  # an answer line is partly written on the client's stdout
FLAG_CLOSED = 4  # the daemon ended the session because the client left: nothing to answer
FLAG_DISCARDING = 8  # the head is the start of an over-long line whose rest is being skipped
FLAG_LANDING_1 = 16  # the next read lands in zone 1 (else 0)
FLAG_HEAD_AREA_1 = 32  # the head is in area 1 (else 0)


class State:
    """One copy of a hand-off session's state (see the module docstring)."""

    __slots__ = ("generation", "init", "initialized", "init_answered", "inflight", "unrecorded",
                 "head_len", "discarding", "out_torn", "tail_len", "closed", "landing", "head_area", "legacy")

    def __init__(self) -> None:
        self.generation = 0
        self.init = b""  # the client's initialize request line, as it sent it
        self.initialized = b""  # its notifications/initialized line
        self.init_answered = False
        self.inflight: list[bytes] = []  # JSON text of each request id in flight, in its own type
        self.unrecorded = 0  # requests in flight not in `inflight` (ids too long, a full slot)
        self.head_len = 0
        self.discarding = False
        self.out_torn = False
        self.tail_len = 0
        self.closed = False
        self.landing = 0  # the landing zone whose bytes are not accounted for yet
        self.head_area = 0
        self.legacy = False  # read from a region of the layout before the landing zones

    def resume_lines(self) -> list[bytes]:
        """The handshake lines to resume a session with: only one the client saw answered."""
        if not self.init or not self.init_answered:
            return []
        return [self.init, self.initialized] if self.initialized else [self.init]

    def encode(self) -> bytes:
        """The payload of one slot, dropping ids that do not fit (counted in `unrecorded`)."""
        init = self.init if len(self.init) <= MAX_HANDSHAKE_LINE_BYTES else b""
        initialized = self.initialized if len(self.initialized) <= MAX_HANDSHAKE_LINE_BYTES else b""
        flags = ((FLAG_INIT_ANSWERED if self.init_answered else 0) | (FLAG_OUT_TORN if self.out_torn else 0)
                 | (FLAG_CLOSED if self.closed else 0) | (FLAG_DISCARDING if self.discarding else 0)
                 | (FLAG_LANDING_1 if self.landing else 0) | (FLAG_HEAD_AREA_1 if self.head_area else 0))
        room = SLOT_BYTES - _HEADER.size - _FIXED.size - len(init) - len(initialized)
        ids: list[bytes] = []
        unrecorded = self.unrecorded
        for text in self.inflight:
            cost = _ID_LEN.size + len(text)
            if len(text) > MAX_ID_BYTES or cost > room:
                unrecorded += 1
                continue
            room -= cost
            ids.append(_ID_LEN.pack(len(text)))
            ids.append(text)
        fixed = _FIXED.pack(flags, self.head_len, self.tail_len, unrecorded, len(init), len(initialized),
                            len(ids) // 2)
        return b"".join((fixed, init, initialized, *ids))

    @classmethod
    def decode(cls, payload: bytes) -> State:
        """The state in one slot's payload; raises ValueError if it is malformed."""
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


def _slot(fd: int, index: int) -> State | None:
    """The valid state in slot `index`, or None (never written, torn, or not ours)."""
    header = os.pread(fd, _HEADER.size, index * SLOT_BYTES)
    if len(header) < _HEADER.size:
        return None
    magic, generation, length, crc = _HEADER.unpack(header)
    if magic not in (MAGIC, LEGACY_MAGIC) or length > SLOT_BYTES - _HEADER.size:
        return None
    payload = os.pread(fd, length, index * SLOT_BYTES + _HEADER.size)
    if len(payload) != length or zlib.crc32(payload, zlib.crc32(header[4:16])) != crc:
        return None
    try:
        state = State.decode(payload)
    except ValueError:
        return None
    state.generation = generation
    state.legacy = magic == LEGACY_MAGIC
    return state


def read_state(fd: int) -> tuple[State | None, int]:
    """The newest valid state in the region and the slot holding it; (None, 1) for a new region."""
    found = [(state.generation, index, state) for index in (0, 1) if (state := _slot(fd, index)) is not None]
    if not found:
        return None, 1
    _, index, state = max(found, key=lambda item: item[0])
    return state, index


class Region:
    """Writes the states of one region, alternating slots (see the module docstring)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        current, self._slot = read_state(fd)
        self._generation = current.generation if current is not None else 0
        self.current = current  # what the previous writer (daemon or shim) left, if anything

    def write(self, state: State) -> None:
        """Write `state` as the newest copy (one pwrite: header and payload together)."""
        payload = state.encode()
        self._generation += 1
        self._slot ^= 1
        head = struct.pack("<QI", self._generation, len(payload))
        crc = zlib.crc32(payload, zlib.crc32(head))
        os.pwrite(self.fd, _HEADER.pack(MAGIC, self._generation, len(payload), crc) + payload,
                  self._slot * SLOT_BYTES)
        state.generation = self._generation

    def write_head(self, data: bytes | memoryview, offset: int, area: int = 0) -> None:
        """Put `data` at `offset` of head area `area` (a line's start, before the state counts it)."""
        _pwrite_all(self.fd, data, head_offset(area) + offset)

    def read_head(self, length: int, area: int = 0) -> bytes:
        return _pread_all(self.fd, length, head_offset(area))

    def write_tail(self, parts: Iterable[bytes | memoryview]) -> int:
        """Put the rest of a torn answer in the tail area; returns its length."""
        offset = 0
        for part in parts:
            _pwrite_all(self.fd, part, TAIL_OFFSET + offset)
            offset += len(part)
        return offset

    def read_tail(self, length: int) -> bytes:
        return _pread_all(self.fd, length, TAIL_OFFSET)

    def read_landed(self, zone: int) -> bytes:
        """What a read put in landing zone `zone` and no state accounts for (up to the first NUL)."""
        data = _pread_all(self.fd, LANDING_BYTES, landing_offset(zone))
        end = data.find(b"\0")
        return data if end < 0 else data[:end]

    def clear_landed(self, zone: int, length: int) -> None:
        """Zero the first `length` bytes of landing zone `zone`, for the next read to land in."""
        if length:
            _pwrite_all(self.fd, bytes(length), landing_offset(zone))

    def release(self, keep_head: int = 0, area: int = 0) -> None:
        """Free the pages of the tail area and of the head areas past `keep_head` bytes of `area`
        (which the state still counts); the landing zones stay, for the daemon maps them."""
        os.ftruncate(self.fd, head_offset(area) + keep_head)


def migrate_legacy(region: Region, state: State) -> None:
    """Move a region of the layout before the landing zones (`state.legacy`) to this one: its head
    and tail to where this layout keeps them, the landing zones (where its head began) zeroed.
    The state is written by the caller, in this layout."""
    head = _pread_all(region.fd, state.head_len, LEGACY_HEAD_OFFSET)
    tail = _pread_all(region.fd, state.tail_len, LEGACY_TAIL_OFFSET)
    _pwrite_all(region.fd, bytes(HEAD_OFFSET - LANDING_OFFSET), LANDING_OFFSET)
    state.landing, state.head_area, state.legacy = 0, 0, False
    state.head_len = len(head)
    region.write_head(head, 0, 0)
    state.tail_len = region.write_tail([tail])


def landing_offset(zone: int) -> int:
    return LANDING_OFFSET + zone * LANDING_BYTES


def head_offset(area: int) -> int:
    return HEAD_OFFSET + area * HEAD_AREA_BYTES


def _pwrite_all(fd: int, data: bytes | memoryview, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view = view[written:]
        offset += written


def _pread_all(fd: int, length: int, offset: int) -> bytes:
    parts: list[bytes] = []
    while length > 0:
        chunk = os.pread(fd, min(length, 1 << 20), offset)
        if not chunk:
            break  # the file ends sooner: a daemon killed before its write; what is there is all
        parts.append(chunk)
        length -= len(chunk)
        offset += len(chunk)
    return b"".join(parts)


def create_region() -> int:
    """A new, empty region (an anonymous memfd, close-on-exec); raises OSError where none can be made."""
    return os.memfd_create("lazyd-handoff", os.MFD_CLOEXEC)


def is_region(fd: int) -> bool:
    """Whether `fd` may be written as a region: a regular file with no name (a memfd), so that a
    peer passing a descriptor of a named file cannot have the daemon overwrite that file."""
    import stat

    try:
        st = os.fstat(fd)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_nlink == 0
