"""msgpack's bytes for the small frames of a shim's start, written and read without msgpack.

A warm session start sends one hello and reads one welcome, then execs the waiting shell and never
relays a frame; importing msgpack for those two frames would be a large part of every client
start (docs/benchmarks.md, "The hello and the welcome without msgpack"). `pack` writes exactly the
bytes `msgpack.packb(obj, use_bin_type=True)` writes for the types frames carry (nil, bools, ints,
str, bin, arrays, maps), and `unpack` reads a small body of those types as `msgpack.unpackb` with
lazyd/protocol/wire.py's options would (the last of repeated keys wins). It decides nothing about a
peer's bytes: what it cannot read (another type, a body over SMALL_BODY_BYTES, anything malformed)
raises ValueError, and the caller hands the body to lazyd/protocol/wire.py. Both directions are
checked against msgpack on generated inputs (tests/unit/test_smallpack.py). Standard library only,
and nothing imported.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs start-up time
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

SMALL_BODY_BYTES = 4096
# The largest body `unpack` reads: with each element taking a byte, no container in it can pass
# lazyd/protocol/wire.py's count limits, so what this reads is what wire's bounded decoder reads.

MAX_DEPTH = 32  # as lazyd/protocol/wire.py's MAX_DEPTH: frames nest ~4 levels

HEADER_BYTES = 4  # a frame is a 4-byte big-endian body length, then the body (lazyd/protocol/wire.py)


def pack(obj: Any) -> bytes:
    """`obj` as `msgpack.packb(obj, use_bin_type=True)` gives it, for nil, bools, ints, str,
    bytes, lists, tuples and dicts. Raises TypeError for another type, OverflowError for an int
    outside 64 bits and UnicodeEncodeError for a str that is not UTF-8 (lone surrogates), as
    msgpack does."""
    out: list[bytes] = []
    _pack(obj, out, 0)
    return b"".join(out)


def frame(fields: Mapping[str, Any], limit: int) -> bytes:
    """One length-prefixed frame of the map `fields`; ValueError for a body over `limit` bytes
    (lazyd/protocol/frames.py's MAX_FRAME_BYTES), as lazyd/protocol/wire.py's `encode` refuses one."""
    body = pack(fields)
    if len(body) > limit:
        raise ValueError(f"frame of {len(body)} bytes exceeds MAX_FRAME_BYTES ({limit})")
    return len(body).to_bytes(HEADER_BYTES, "big") + body


def _pack(obj: Any, out: list[bytes], depth: int) -> None:
    if depth > 512:  # msgpack's own bound on a structure nesting itself
        raise ValueError("recursion limit exceeded")
    kind = type(obj)
    if kind is str:
        data = obj.encode("utf-8")
        size = len(data)
        if size < 32:
            out.append(bytes((0xA0 | size,)))
        else:
            out.append(_sized(size, b"\xd9", b"\xda", b"\xdb"))
        out.append(data)
    elif obj is None:
        out.append(b"\xc0")
    elif kind is bool:
        out.append(b"\xc3" if obj else b"\xc2")
    elif kind is int:
        out.append(_int(obj))
    elif kind is bytes or kind is bytearray:
        out.append(_sized(len(obj), b"\xc4", b"\xc5", b"\xc6"))
        out.append(bytes(obj))
    elif kind is list or kind is tuple:
        size = len(obj)
        out.append(bytes((0x90 | size,)) if size < 16 else _sized(size, None, b"\xdc", b"\xdd"))
        for item in obj:
            _pack(item, out, depth + 1)
    elif kind is dict:
        size = len(obj)
        out.append(bytes((0x80 | size,)) if size < 16 else _sized(size, None, b"\xde", b"\xdf"))
        for key, value in obj.items():
            _pack(key, out, depth + 1)
            _pack(value, out, depth + 1)
    else:
        raise TypeError(f"can not serialize {kind.__name__!r} object")


def _sized(size: int, one: bytes | None, two: bytes, four: bytes) -> bytes:
    """The header of a str, bin, array or map of `size` with a length field of 1, 2 or 4 bytes."""
    if one is not None and size < 0x100:
        return one + bytes((size,))
    if size < 0x10000:
        return two + size.to_bytes(2, "big")
    if size < 0x100000000:
        return four + size.to_bytes(4, "big")
    raise ValueError(f"{size} elements or bytes exceed msgpack's 32-bit lengths")


def _int(n: int) -> bytes:
    if 0 <= n < 0x80 or -32 <= n < 0:
        return (n & 0xFF).to_bytes(1, "big")
    if n >= 0:
        for head, width in ((b"\xcc", 1), (b"\xcd", 2), (b"\xce", 4), (b"\xcf", 8)):
            if n < 1 << (8 * width):
                return head + n.to_bytes(width, "big")
    else:
        for head, width in ((b"\xd0", 1), (b"\xd1", 2), (b"\xd2", 4), (b"\xd3", 8)):
            if n >= -(1 << (8 * width - 1)):
                return head + n.to_bytes(width, "big", signed=True)
    raise OverflowError("Integer value out of range")


def unpack(body: bytes) -> dict[str, Any]:
    """The map that `body`, a whole frame body, holds; ValueError where this module cannot say."""
    if len(body) > SMALL_BODY_BYTES:
        raise ValueError("not a small body")
    reader = _Reader(body)
    obj = reader.value(0)
    if reader.pos != len(body):
        raise ValueError("trailing bytes")
    if type(obj) is not dict:
        raise ValueError("not a map")
    return obj


class _Reader:
    __slots__ = ("body", "pos")

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.pos = 0

    def take(self, count: int) -> bytes:
        end = self.pos + count
        if end > len(self.body):
            raise ValueError("truncated")
        data = self.body[self.pos : end]
        self.pos = end
        return data

    def number(self, width: int, signed: bool = False) -> int:
        return int.from_bytes(self.take(width), "big", signed=signed)

    def value(self, depth: int) -> Any:
        b = self.take(1)[0]
        if b <= 0x7F:
            return b
        if b >= 0xE0:
            return b - 0x100
        if 0xA0 <= b <= 0xBF:
            return self.take(b & 0x1F).decode("utf-8")  # UnicodeDecodeError is a ValueError
        if b <= 0x8F:
            return self.map(b & 0x0F, depth)
        if b <= 0x9F:
            return self.array(b & 0x0F, depth)
        if b == 0xC0:
            return None
        if b == 0xC2 or b == 0xC3:
            return b == 0xC3
        if 0xCC <= b <= 0xCF:
            return self.number(1 << (b - 0xCC))
        if 0xD0 <= b <= 0xD3:
            return self.number(1 << (b - 0xD0), signed=True)
        if 0xD9 <= b <= 0xDB:
            return self.take(self.number(1 << (b - 0xD9))).decode("utf-8")
        if 0xC4 <= b <= 0xC6:
            return self.take(self.number(1 << (b - 0xC4)))
        if b == 0xDC or b == 0xDD:
            return self.array(self.number(2 if b == 0xDC else 4), depth)
        if b == 0xDE or b == 0xDF:
            return self.map(self.number(2 if b == 0xDE else 4), depth)
        raise ValueError(f"type byte {b:#04x} is not read here")  # floats, ext, the reserved 0xc1

    def array(self, count: int, depth: int) -> list[Any]:
        self.nest(count, depth)
        return [self.value(depth + 1) for _ in range(count)]

    def map(self, count: int, depth: int) -> dict[str, Any]:
        self.nest(2 * count, depth)
        out: dict[str, Any] = {}
        for _ in range(count):
            key = self.value(depth + 1)
            if type(key) is not str:
                raise ValueError("a map key that is not a str")
            out[key] = self.value(depth + 1)
        return out

    def nest(self, slots: int, depth: int) -> None:
        if depth + 1 >= MAX_DEPTH:
            raise ValueError("nested too deep")
        if slots > len(self.body) - self.pos:
            raise ValueError("a container promises more elements than the body holds")
