"""Tests of lazyd/protocol/smallpack.py against msgpack itself, and of the shim's reply reader built on it
(shim/connect.py's `read_reply`): the bytes a shim's start writes and reads without msgpack are
the bytes msgpack would write and read, and whatever it cannot read goes to lazyd/protocol/wire.py."""

from __future__ import annotations

import socket
import struct
from typing import Any

import msgpack
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from lazyd.protocol import smallpack, wire
from lazyd.errors import WireError
from lazyd.protocol.frames import MAX_FRAME_BYTES, Hello, Line, Refusal, Welcome
from shim.connect import read_reply

# Lengths at each msgpack size boundary (fix -> 8 -> 16 -> 32-bit length fields).
EDGES = [0, 1, 15, 16, 31, 32, 255, 256, 65535, 65536]
INT_EDGES = [0, 1, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**63 - 1, 2**64 - 1,
             -1, -32, -33, -128, -129, -32768, -32769, -(2**31), -(2**31) - 1, -(2**63)]

scalars = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1), st.sampled_from(INT_EDGES),
    st.text(), st.binary(),
    st.sampled_from(EDGES).map(lambda n: "é" * (n // 2) + "x" * (n % 2)),  # byte lengths at the edges
    st.sampled_from(EDGES).map(lambda n: b"\0" * n),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=20), st.tuples(inner, inner),
                            st.dictionaries(st.text(max_size=8), inner, max_size=20)),
    max_leaves=60,
)

# What a small body holds: the same types, short enough that most maps fit in SMALL_BODY_BYTES.
small_scalars = st.one_of(
    st.none(), st.booleans(), st.sampled_from(INT_EDGES), st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.text(max_size=40), st.binary(max_size=40), st.sampled_from([31, 32, 255, 256]).map(lambda n: "x" * n),
)
small_values = st.recursive(
    small_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=17), st.dictionaries(st.text(max_size=8), inner, max_size=17)),
    max_leaves=24,
)


def packb(obj: Any) -> bytes:
    out: bytes = msgpack.packb(obj, use_bin_type=True)
    return out


def unpackb(body: bytes) -> Any:
    # lazyd/protocol/wire.py's decode options, as they bear on what a small body can hold
    return msgpack.unpackb(body, raw=False, strict_map_key=True, use_list=True, max_ext_len=0)


@settings(max_examples=400, deadline=None)
@given(values)
@example([16 * "a", 16 * [0], {str(n): n for n in range(16)}])  # the first 16-bit containers
def test_what_it_writes_is_what_msgpack_writes(obj: Any) -> None:
    assert smallpack.pack(obj) == packb(obj)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.text(max_size=8), small_values, max_size=17))
def test_a_small_map_reads_back_as_msgpack_reads_it(fields: dict[str, Any]) -> None:
    body = packb(fields)
    if len(body) > smallpack.SMALL_BODY_BYTES:
        with pytest.raises(ValueError):
            smallpack.unpack(body)  # not read here: the caller asks wire
    else:
        assert smallpack.unpack(body) == unpackb(body)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["t", "v", "d", "é"]), small_values), max_size=20))
def test_a_map_with_repeated_keys_reads_as_msgpack_reads_it_the_last_winning(pairs: list[tuple[str, Any]]) -> None:
    header = bytes((0x80 | len(pairs),)) if len(pairs) < 16 else b"\xde" + len(pairs).to_bytes(2, "big")
    body = header + b"".join(packb(key) + packb(value) for key, value in pairs)
    if len(body) > smallpack.SMALL_BODY_BYTES:
        with pytest.raises(ValueError):
            smallpack.unpack(body)
    else:
        assert smallpack.unpack(body) == unpackb(body) == dict(pairs)


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.binary(max_size=64),
                 st.tuples(st.dictionaries(st.text(max_size=4), small_values, max_size=4), st.integers(0, 63),
                           st.integers(0, 255)).map(lambda t: _flip(packb(t[0]), t[1], t[2]))))
def test_whatever_it_reads_from_any_bytes_wire_reads_alike(body: bytes) -> None:
    # The reader decides nothing on its own: a body it accepts is one the wire's bounded decoder
    # accepts too, with the same content; anything else it leaves to the wire (ValueError).
    try:
        got = smallpack.unpack(body)
    except ValueError:
        return
    wire.check_structure(body)  # raises WireError if the wire would refuse it
    assert got == unpackb(body)


def _flip(body: bytes, at: int, byte: int) -> bytes:
    if not body:
        return body
    at %= len(body)
    return body[:at] + bytes((byte,)) + body[at + 1 :]


def test_the_types_frames_do_not_carry_and_out_of_range_values_raise_as_msgpack_does() -> None:
    for bad, error in ((2**64, OverflowError), (-(2**63) - 1, OverflowError), ("\udc80", UnicodeEncodeError)):
        with pytest.raises(error):
            packb(bad)
        with pytest.raises(error):
            smallpack.pack(bad)
    for other in (1.5, {1, 2}, object(), memoryview(b"x")):
        with pytest.raises(TypeError):
            smallpack.pack(other)  # frames carry none of these; msgpack may pack some, never here


def test_floats_ext_types_and_nonstring_keys_are_left_to_the_wire() -> None:
    for body in (packb({"t": 1.5}), packb({1: "x"}), b"\x81\xa1t\xd4\x01\x00", b"\x81\xa1t\xc1", packb([1])):
        with pytest.raises(ValueError):
            smallpack.unpack(body)


def test_nesting_deeper_than_the_wire_allows_is_left_to_it() -> None:
    deep: Any = {}
    for _ in range(40):
        deep = {"d": deep}
    with pytest.raises(ValueError):
        smallpack.unpack(packb(deep))
    with pytest.raises(WireError):
        wire.check_structure(packb(deep))


def test_a_hello_is_framed_exactly_as_the_wire_frames_it() -> None:
    hello = Hello("shim", 4242, ["npx", "-y", "srv"], "/home/u", {"PATH": "/usr/bin", "X": "é" * 40}, {"linger": "5m"},
                  None, [b'{"id":1}'], [(b"RAW", b"\xff\xfe")], True, 3)
    assert smallpack.frame(hello.to_map(), MAX_FRAME_BYTES) == wire.encode(hello)


def test_a_frame_over_the_limit_is_refused_as_the_wire_refuses_it() -> None:
    with pytest.raises(ValueError, match="exceeds MAX_FRAME_BYTES"):
        smallpack.frame({"t": "hello", "blob": b"x" * 200}, 100)


# --- the shim's reply reader (shim/connect.py) ---------------------------------------------------


def reply_of(data: bytes, close: bool = True) -> tuple[object, object]:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        theirs.sendall(data)
        if close:
            theirs.shutdown(socket.SHUT_WR)
        ours.settimeout(5)
        return read_reply(ours)


def test_a_welcome_is_read_without_the_wire_and_not_a_byte_past_it() -> None:
    # What follows a hand-off welcome is the waiting shell's: the exit cue when the client left at
    # once. A read that took it with the welcome left the shell an EOF, and a needless recovery.
    ours, theirs = socket.socketpair()
    with ours, theirs:
        theirs.sendall(wire.encode(Welcome(7, "echo", 99, handoff=True)) + b"\n" + wire.encode(Line(b"{}")))
        ours.settimeout(5)
        reply, reader = read_reply(ours)
        assert reply == Welcome(7, "echo", 99, handoff=True) and reader is None
        assert ours.recv(1) == b"\n"
        assert wire.BlockingFrameReader(ours).read() == Line(b"{}")


def test_a_refusal_arriving_in_pieces_is_read_whole() -> None:
    refusal = wire.encode(Refusal("config", "config.toml: servers.x.command: expected a string"))
    ours, theirs = socket.socketpair()
    with ours, theirs:
        for at in range(0, len(refusal), 3):
            theirs.send(refusal[at : at + 3])
        ours.settimeout(5)
        reply, _ = read_reply(ours)
    assert reply == Refusal("config", "config.toml: servers.x.command: expected a string")


def test_a_frame_it_cannot_read_goes_to_the_wire_which_decides() -> None:
    big = Welcome(7, "n" * 5000, 99)  # over SMALL_BODY_BYTES: the wire reads it
    reply, reader = reply_of(wire.encode(big) + wire.encode(Line(b"{}")))
    assert reply == big
    assert isinstance(reader, wire.BlockingFrameReader) and reader.read() == Line(b"{}")
    floats = wire.encode_raw({"t": "welcome", "v": 1, "session": 1.5, "name": "x", "daemon_pid": 1})
    with pytest.raises(WireError):
        reply_of(floats)  # the wire's own verdict on a bad field, not the small reader's
    with pytest.raises(WireError, match="length 0"):
        reply_of(struct.pack(">I", 0))
    with pytest.raises(WireError, match="exceeds MAX_FRAME_BYTES"):
        reply_of(struct.pack(">I", MAX_FRAME_BYTES + 1))


def test_an_eof_between_frames_is_none_and_inside_one_is_an_error() -> None:
    assert reply_of(b"") == (None, None)
    for cut in (1, 3, 4, 10):
        with pytest.raises(WireError, match="middle of a frame"):
            reply_of(wire.encode(Welcome(7, "echo", 99))[:cut])
