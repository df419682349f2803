"""The lazyd wire protocol: frames between the shim, lazyctl and the daemon (docs/protocol.md).

This module owns the byte format and nothing else: encoding frames, decoding them from untrusted
bytes with bounded memory into the typed frames of lazyd/protocol/frames.py (which checks each frame
type's fields), and two blocking helpers for the clients that do not use trio (the shim and
lazyctl). It imports only the standard library and msgpack, because the shim imports it on every
client start. Where the socket is: lazyd/host/sockpath.py.

Errors (lazyd/errors.py)::

    WireError        the peer sent something that is not a valid frame ("remote protocol error");
                     the connection must be closed and its decoder dropped. Whatever msgpack
                     raises on a peer's bytes becomes a WireError here, and nowhere else.
    ValueError       our own caller tried to encode something the protocol cannot carry
                     (a line or frame over the limits); a local bug, never the peer's fault.

Decoding is defensive in three steps, each bounding what the next may cost:

1. the 4-byte length header is checked before any of the body is kept (0 or more than
   ``MAX_FRAME_BYTES`` is refused);
2. the body's msgpack headers are walked without building any object: nesting depth, element
   counts (each element needs at least one byte, so a header may not promise more elements than
   bytes remain), string-only map keys and the absence of ext types are all checked here, so a
   21-byte nest of ``array32`` headers or a megabyte of empty maps is refused before msgpack
   allocates anything;
3. only then ``msgpack.unpackb`` builds the objects, itself configured with the same limits, and
   the result is checked field by field against the frame table and made a typed frame.
"""

from __future__ import annotations

import struct
from collections import deque

import msgpack

from lazyd.errors import WireError
from lazyd.protocol.frames import MAX_FRAME_BYTES as MAX_FRAME_BYTES  # a frame's body at most, re-exported likewise
from lazyd.protocol.frames import MAX_LINE_BYTES as MAX_LINE_BYTES  # the frames' limit, re-exported for byte-level callers
from lazyd.protocol.frames import WIRE_VERSION as WIRE_VERSION  # ditto: every hello and welcome carries it
from lazyd.protocol.frames import AnyFrame, Frame, Line
from lazyd.protocol.frames import validate_walked as validate_walked  # found by this name at each call (the fuzz counts them)

# Not `from typing import TYPE_CHECKING`: the shim imports this module on every client start and
# typing costs milliseconds there; mypy treats any name TYPE_CHECKING as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket  # annotations only: the shim dials with _socket (shim/dial.py)
    from collections.abc import Mapping
    from typing import Any


MAX_CONTAINER_LEN: int = 10_000
# Per array or map. The largest legitimate containers are a hello's env (~200 variables) and argv
# (a few hundred words); 10,000 leaves 50x headroom while one container stays well under 1 MiB.

MAX_ITEMS_PER_FRAME: int = 100_000
# Elements (map keys and values counted separately) in all containers of one frame together. Every
# element becomes a Python object of ~50-100 bytes, so one frame can build at most ~10 MiB of them.

MAX_DEPTH: int = 32
# Frames nest at most ~4 levels (hello -> env -> value; reply -> data -> ...); 32 leaves room for
# structured `reply.data` while keeping the header walk and msgpack's own stack shallow.

_HEADER = struct.Struct(">I")
HEADER_BYTES: int = _HEADER.size

_RECV_BYTES = 256 * 1024
# One recv() of a blocking reader: a maximal frame takes ~64 calls, small frames take one.


# --- encoding -----------------------------------------------------------------------------------


def encode(frame: Frame) -> bytes:
    """Return ``frame`` as one length-prefixed msgpack frame.

    Raises ValueError if the body would exceed MAX_FRAME_BYTES and TypeError if it holds a value
    msgpack cannot carry: both are bugs of the caller, not protocol errors of a peer.
    """
    if type(frame) is Line and not frame.extra:
        return encode_line(frame.d, frame.done)
    return encode_raw(frame.to_map())


def encode_raw(frame: Mapping[str, Any]) -> bytes:
    """Return the map ``frame`` as one frame, as it stands: no field is checked. For what no typed
    frame carries (a test's malformed frame); raises ValueError and TypeError as ``encode``."""
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
    """Return a ``line`` frame carrying ``data`` (one JSON-RPC line without its newline).

    ``done`` is the client's original request id this line finally answers (daemon → shim only);
    None leaves the field out. Raises ValueError for a line over MAX_LINE_BYTES or a bool id.
    """
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
    """Walk the msgpack headers of ``body`` without building objects; raise WireError if unsafe.

    Refuses: a top level that is not a map, nesting deeper than MAX_DEPTH, a container longer than
    MAX_CONTAINER_LEN or promising more elements than bytes remain, more than MAX_ITEMS_PER_FRAME
    elements in all, a map key that is not a str, ext types, the reserved byte 0xc1, truncation and
    trailing bytes. The walk visits each header once and skips str/bin payloads by length, so its
    cost is bounded by MAX_ITEMS_PER_FRAME whatever the body size.
    """
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


def _refuse_ext(code: int, data: bytes) -> object:
    raise WireError(f"msgpack ext type {code} is not allowed")


def decode_body(body: bytes) -> AnyFrame:
    """Decode and validate one frame body (the bytes after the length header); raises WireError."""
    check_structure(body)
    try:
        obj = msgpack.unpackb(
            body,
            raw=False,
            strict_map_key=True,
            use_list=True,
            ext_hook=_refuse_ext,
            max_str_len=MAX_FRAME_BYTES,
            max_bin_len=MAX_LINE_BYTES,
            max_array_len=MAX_CONTAINER_LEN,
            max_map_len=MAX_CONTAINER_LEN,
            max_ext_len=0,
        )
    except WireError:
        raise
    except Exception as exc:  # msgpack raises ValueError, FormatError, StackError, UnicodeError...
        raise WireError(f"undecodable frame body: {exc}") from None
    if not isinstance(obj, dict):  # the walk refuses a body that is not a map: a bug if reached
        raise WireError(f"frame is a {type(obj).__name__}, not a map")
    return validate_walked(obj)


class FrameDecoder:
    """Bytes in, validated frames out, with at most one frame's body buffered.

    After the first WireError the decoder is poisoned: every later ``feed`` raises WireError too,
    so a connection can never resynchronise on attacker-chosen bytes.
    """

    def __init__(self) -> None:
        self._buf = bytearray()
        self._need: int | None = None  # body length of the frame being received, once known
        self._error: WireError | None = None

    def feed(self, data: bytes, limit: int | None = None) -> list[AnyFrame]:
        """Add received bytes; return the frames they complete (possibly none).

        With ``limit``, at most that many frames are decoded and returned; complete frames beyond
        it stay buffered as bytes (a decoded frame costs ~20 times its wire size) until a later
        call, which may pass ``b""`` to drain them.
        """
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
        """Bytes received but not yet returned as frames (0 between frames)."""
        return len(self._buf) + (HEADER_BYTES if self._need is not None else 0)

    def unconsumed(self) -> bytes:
        """The bytes received and not yet returned as frames, exactly as they came: fed to a new
        decoder (a successor daemon's, lazyd/daemon/upgrade/connection_state.py), they give the same frames."""
        head = _HEADER.pack(self._need) if self._need is not None else b""
        return head + bytes(self._buf)


# --- blocking helpers (shim, lazyctl) -----------------------------------------------------------


def send_frame(sock: socket.socket, frame: Frame) -> None:
    """Encode and send one frame on a blocking socket. OSError means the connection is gone."""
    sock.sendall(encode(frame))


class BlockingFrameReader:
    """Read frames from a blocking socket. Honours the socket's timeout (raises TimeoutError)."""

    def __init__(self, sock: socket.socket, received: bytes = b"") -> None:
        """`received`: bytes already read from `sock` (after a frame lazyd/protocol/smallpack.py read),
        which come first."""
        self._sock = sock
        self._decoder = FrameDecoder()
        self._ready: deque[AnyFrame] = deque(self._decoder.feed(received) if received else ())

    def read(self) -> AnyFrame | None:
        """Return the next frame, or None at a clean EOF between frames.

        Raises WireError for a bad frame or an EOF in the middle of one, OSError from the socket.
        """
        while not self._ready:
            data = self._sock.recv(_RECV_BYTES)
            if not data:
                if self._decoder.buffered:
                    raise WireError("connection closed in the middle of a frame")
                return None
            self._ready.extend(self._decoder.feed(data))
        return self._ready.popleft()
