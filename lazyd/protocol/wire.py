"""The lazyd wire protocol: frames between the shim, lazyctl and the daemon (docs/protocol.md).

The byte format and nothing else: encoding frames, decoding untrusted bytes with bounded memory
into the typed frames of lazyd/protocol/frames.py, and blocking helpers for the shim and lazyctl.
Standard library and msgpack only: the shim imports it at every start.

Errors: ``WireError`` when the peer sent something that is not a valid frame (close the
connection; whatever msgpack raises on a peer's bytes becomes one here and nowhere else);
``ValueError`` when our own caller tried to encode what the protocol cannot carry.

Decoding bounds each step's cost before the next: the 4-byte length is judged before any body is
kept; the body's msgpack headers are walked without building an object (depth, counts that no more
bytes could hold, str-only keys, no ext types), so a tiny nest of ``array32`` headers is refused
before msgpack allocates; only then ``msgpack.unpackb`` runs, with the same limits.
"""

from __future__ import annotations

import struct
from collections import deque

import msgpack

from lazyd.errors import WireError
# The frames' limits and version, re-exported for byte-level callers; validate_walked is found by
# this name at each call (the fuzz counts the calls).
from lazyd.protocol.frames import MAX_FRAME_BYTES as MAX_FRAME_BYTES
from lazyd.protocol.frames import MAX_LINE_BYTES as MAX_LINE_BYTES
from lazyd.protocol.frames import WIRE_VERSION as WIRE_VERSION
from lazyd.protocol.frames import AnyFrame, Frame, Line
from lazyd.protocol.frames import validate_walked as validate_walked

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the shim start-up time
if TYPE_CHECKING:
    import socket  # annotations only: the shim dials with _socket (shim/dial.py)
    from collections.abc import Mapping
    from typing import Any


MAX_CONTAINER_LEN: int = 10_000  # per array or map: far above a hello's env or argv, far below a MiB
MAX_ITEMS_PER_FRAME: int = 100_000  # elements of all containers of a frame: bounds the objects one frame builds
MAX_DEPTH: int = 32  # frames nest a few levels; room for a structured `reply.data`, a shallow walk

_HEADER = struct.Struct(">I")
HEADER_BYTES: int = _HEADER.size

_RECV_BYTES = 256 * 1024  # one recv() of a blocking reader


# --- encoding -----------------------------------------------------------------------------------


def encode(frame: Frame) -> bytes:
    """``frame`` as one length-prefixed msgpack frame; ValueError over MAX_FRAME_BYTES, TypeError for
    a value msgpack cannot carry: bugs of the caller, not a peer's protocol errors."""
    if type(frame) is Line and not frame.extra:
        return encode_line(frame.d, frame.done)
    return encode_raw(frame.to_map())


def encode_raw(frame: Mapping[str, Any]) -> bytes:
    """The map ``frame`` as one frame, no field checked (a test's malformed frame); errors as ``encode``."""
    body: bytes = msgpack.packb(frame, use_bin_type=True)
    if len(body) > MAX_FRAME_BYTES:
        raise ValueError(f"frame of {len(body)} bytes exceeds MAX_FRAME_BYTES ({MAX_FRAME_BYTES})")
    return _HEADER.pack(len(body)) + body


# Pre-packed pieces of {"t": "line", "d": <bin>[, "done": <id>]}: lines are the hot path, and this
# builds the frame with a single copy of the payload instead of msgpack's buffer-then-copy.
_LINE_MAP2 = b"\x82" + msgpack.packb("t") + msgpack.packb("line") + msgpack.packb("d")
_LINE_MAP3 = b"\x83" + msgpack.packb("t") + msgpack.packb("line") + msgpack.packb("d")
_DONE_KEY = msgpack.packb("done")


def encode_line(data: bytes, done: int | str | None = None) -> bytes:
    """A ``line`` frame carrying ``data`` (one JSON-RPC line without its newline) and ``done`` (see
    frames.Line); ValueError for a line over MAX_LINE_BYTES or a bool id."""
    size = len(data)
    if size > MAX_LINE_BYTES:
        raise ValueError(f"line of {size} bytes exceeds MAX_LINE_BYTES ({MAX_LINE_BYTES})")
    if size < 0x100:
        bin_header = b"\xc4" + bytes((size,))
    elif size < 0x10000:
        bin_header = b"\xc5" + size.to_bytes(2, "big")
    else:
        bin_header = b"\xc6" + size.to_bytes(4, "big")
    if done is None:
        prefix = _LINE_MAP2 + bin_header
        suffix = b""
    else:
        if isinstance(done, bool) or not isinstance(done, (int, str)):
            raise ValueError(f"done must be an int or str id, not {type(done).__name__}")
        prefix = _LINE_MAP3 + bin_header
        try:
            suffix = _DONE_KEY + msgpack.packb(done, use_bin_type=True)
        except OverflowError:
            raise ValueError(f"done id {done} does not fit in 64 bits") from None
    body_len = len(prefix) + size + len(suffix)
    return b"".join((_HEADER.pack(body_len), prefix, data, suffix))


# --- structural pre-check -------------------------------------------------------------------------

# Scalars whose encoded size follows from the type byte alone: nil, bools, floats, ints.
_FIXED_PAYLOAD = {
    0xC0: 0, 0xC2: 0, 0xC3: 0, 0xCA: 4, 0xCB: 8,
    0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8, 0xD0: 1, 0xD1: 2, 0xD2: 4, 0xD3: 8,
}  # fmt: skip
# str/bin with an explicit length field: type byte -> width of that field.
_SIZED_PAYLOAD = {0xC4: 1, 0xC5: 2, 0xC6: 4, 0xD9: 1, 0xDA: 2, 0xDB: 4}
# Containers with an explicit count: type byte -> (width of the count, slots per counted entry).
_SIZED_CONTAINER = {0xDC: (2, 1), 0xDD: (4, 1), 0xDE: (2, 2), 0xDF: (4, 2)}


def _is_str_header(b: int) -> bool:
    return 0xA0 <= b <= 0xBF or 0xD9 <= b <= 0xDB


def check_structure(body: bytes) -> None:
    """Walk the msgpack headers of ``body`` without building objects; WireError for a top level that
    is not a map, a limit passed, a count more than the bytes left could hold, a key that is not a
    str, ext types, 0xc1, truncation or trailing bytes. Payloads are skipped by length, so the cost
    is bounded by MAX_ITEMS_PER_FRAME whatever the body size."""
    end = len(body)
    if end == 0:
        raise WireError("empty frame body")
    first = body[0]
    if not (0x80 <= first <= 0x8F or first in (0xDE, 0xDF)):
        raise WireError("frame body is not a map")
    # Open containers, innermost last: slots still to read, and whether it is a map.
    remaining: list[int] = []
    is_map: list[bool] = []
    items = 0
    pos = 0
    map_slots = False
    while True:
        if pos >= end:
            raise WireError("frame body is truncated")
        b = body[pos]
        pos += 1
        if is_map and is_map[-1] and remaining[-1] % 2 == 0 and not _is_str_header(b):
            raise WireError("map key is not a string")
        count = -1
        if b <= 0x7F or b >= 0xE0:
            pass
        elif b <= 0x8F:
            count, map_slots = (b & 0x0F) * 2, True
        elif b <= 0x9F:
            count, map_slots = b & 0x0F, False
        elif b <= 0xBF:
            pos += b & 0x1F
        elif b in _FIXED_PAYLOAD:
            pos += _FIXED_PAYLOAD[b]
        elif b in _SIZED_PAYLOAD:
            width = _SIZED_PAYLOAD[b]
            if pos + width > end:
                raise WireError("frame body is truncated")
            pos += width + int.from_bytes(body[pos : pos + width], "big")
        elif b in _SIZED_CONTAINER:
            width, per_entry = _SIZED_CONTAINER[b]
            if pos + width > end:
                raise WireError("frame body is truncated")
            entries = int.from_bytes(body[pos : pos + width], "big")
            pos += width
            if entries > MAX_CONTAINER_LEN:
                raise WireError(f"container of {entries} entries exceeds {MAX_CONTAINER_LEN}")
            count, map_slots = entries * per_entry, per_entry == 2
        elif b == 0xC1:
            raise WireError("reserved msgpack byte 0xc1")
        else:
            raise WireError("msgpack ext types are not allowed")
        if pos > end:
            raise WireError("frame body is truncated")
        if count > 0:
            if count > end - pos:
                raise WireError("container promises more elements than the frame holds")
            items += count
            if items > MAX_ITEMS_PER_FRAME:
                raise WireError(f"frame holds more than {MAX_ITEMS_PER_FRAME} elements")
            if len(remaining) >= MAX_DEPTH:
                raise WireError(f"frame nests deeper than {MAX_DEPTH} levels")
            if remaining:
                remaining[-1] -= 1
            remaining.append(count)
            is_map.append(map_slots)
            continue
        # A scalar or an empty container fills one slot of its parent; close finished parents.
        if not remaining:
            break  # only an empty top-level map gets here
        remaining[-1] -= 1
        while remaining and remaining[-1] == 0:
            remaining.pop()
            is_map.pop()
        if not remaining:
            break
    if pos != end:
        raise WireError(f"{end - pos} trailing bytes after the frame body")


# --- decoding -----------------------------------------------------------------------------------


def decode_body(body: bytes) -> AnyFrame:
    """Decode and validate one frame body (the bytes after the length header); raises WireError."""
    check_structure(body)
    try:
        obj = msgpack.unpackb(body, raw=False, strict_map_key=True, use_list=True,
                              max_str_len=MAX_FRAME_BYTES, max_bin_len=MAX_LINE_BYTES, max_ext_len=0,
                              max_array_len=MAX_CONTAINER_LEN, max_map_len=MAX_CONTAINER_LEN)
    except Exception as exc:  # msgpack raises ValueError, FormatError, StackError, UnicodeError...
        raise WireError(f"undecodable frame body: {exc}") from None
    return validate_walked(obj)  # a map: the walk refused anything else


class FrameDecoder:
    """Bytes in, validated frames out, with at most one frame's body buffered. After the first
    WireError every ``feed`` raises too: a connection never resynchronises on a peer's bytes."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._need: int | None = None  # body length of the frame being received, once known
        self._error: WireError | None = None

    def feed(self, data: bytes, limit: int | None = None) -> list[AnyFrame]:
        """Add received bytes; return the frames they complete. With ``limit``, frames beyond it stay
        buffered as bytes (smaller than decoded) until a later call, which may pass ``b""``."""
        if self._error is not None:
            raise WireError(f"decoder already failed: {self._error}")
        try:
            return self._feed(data, limit)
        except WireError as exc:
            self._error = exc
            self._buf = bytearray()
            raise

    def _feed(self, data: bytes, limit: int | None) -> list[AnyFrame]:
        have = len(self._buf)
        if self._need is None and have < HEADER_BYTES <= have + len(data):
            # A header completed by this read is judged before the read is copied in, so an
            # oversize frame costs no buffer at all.
            self._check_length(_HEADER.unpack(bytes(self._buf) + data[: HEADER_BYTES - have])[0])
        self._buf += data
        frames: list[AnyFrame] = []
        while limit is None or len(frames) < limit:
            if self._need is None:
                if len(self._buf) < HEADER_BYTES:
                    return frames
                (length,) = _HEADER.unpack_from(self._buf)
                self._check_length(length)
                del self._buf[:HEADER_BYTES]
                self._need = length
            if len(self._buf) < self._need:
                return frames
            with memoryview(self._buf) as view:  # one copy: a bytearray slice would be a second
                body = bytes(view[: self._need])
            del self._buf[: self._need]
            self._need = None
            frames.append(decode_body(body))
        return frames

    @staticmethod
    def _check_length(length: int) -> None:
        if length == 0:
            raise WireError("frame of length 0")
        if length > MAX_FRAME_BYTES:
            raise WireError(f"frame of {length} bytes exceeds MAX_FRAME_BYTES ({MAX_FRAME_BYTES})")

    @property
    def buffered(self) -> int:
        return len(self._buf) + (HEADER_BYTES if self._need is not None else 0)

    def unconsumed(self) -> bytes:
        """The bytes not yet returned as frames, as they came: a new decoder fed them (a successor
        daemon's, lazyd/daemon/upgrade/connection_state.py) gives the same frames."""
        head = _HEADER.pack(self._need) if self._need is not None else b""
        return head + bytes(self._buf)


# --- blocking helpers (shim, lazyctl) -----------------------------------------------------------


class BlockingFrameReader:
    """Read frames from a blocking socket, after `received` (bytes read already, lazyd/protocol/smallpack.py);
    honours the socket's timeout (TimeoutError)."""

    def __init__(self, sock: socket.socket, received: bytes = b"") -> None:
        self._sock = sock
        self._decoder = FrameDecoder()
        self._ready: deque[AnyFrame] = deque(self._decoder.feed(received) if received else ())

    def read(self) -> AnyFrame | None:
        """The next frame, or None at a clean EOF between frames; WireError for a bad frame or an EOF
        inside one, OSError from the socket."""
        while not self._ready:
            data = self._sock.recv(_RECV_BYTES)
            if not data:
                if self._decoder.buffered:
                    raise WireError("connection closed in the middle of a frame")
                return None
            self._ready.extend(self._decoder.feed(data))
        return self._ready.popleft()
