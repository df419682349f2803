"""Tests of lazyd/protocol/wire.py: framing, limits, validation and bombs (the socket path: test_sockpath.py).

Policy: every refusal is checked through the public decoder (FrameDecoder.feed), the way a peer's
bytes reach it. Memory claims are measured on a fresh interpreter through /proc/self/status, with
a calibration allocation proving the measurement would see a bomb that got through.
"""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import sys
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lazyd.protocol import wire
from lazyd.errors import WireError
from lazyd.protocol.frames import (
    _CLASSES, WIRE_VERSION, Ctl, ForeignHello, ForeignWelcome, Frame, Hello, Line, Progress, Refusal, Reply, Welcome,
    validate_walked,
)
from lazyd.protocol.wire import FrameDecoder
from tests.unit.wire_bombs import BOMBS

HELLO: dict[str, Any] = {
    "t": "hello",
    "v": wire.WIRE_VERSION,
    "role": "shim",
    "pid": 1234,
    "argv": ["node", "server.js", "--port", "3"],
    "cwd": "/home/user/project",
    "env": {"PATH": "/usr/bin", "HOME": "/home/user"},
    "opts": {"linger": "10m"},
    "server": None,
    "resume": [b'{"jsonrpc":"2.0","id":1,"method":"initialize"}'],
}
# The documented limits (docs/protocol.md), as numbers: test_documented_limits.py compares them with
# the constants once.
LINE_LIMIT = 16 * 1024 * 1024
FRAME_LIMIT = LINE_LIMIT + 64 * 1024
HELLO_FRAME = Hello("shim", 1234, ["node", "server.js", "--port", "3"], "/home/user/project",
                    {"PATH": "/usr/bin", "HOME": "/home/user"}, {"linger": "10m"}, None,
                    [b'{"jsonrpc":"2.0","id":1,"method":"initialize"}'])
VALID_FRAMES: list[Frame] = [
    HELLO_FRAME,
    Hello("ctl", 1234, HELLO["argv"], HELLO["cwd"], HELLO["env"], HELLO["opts"], "github", []),
    Welcome(7, "github", 99),
    Refusal("version", "restart the daemon"),
    Line(b'{"jsonrpc":"2.0","id":1,"result":{}}'),
    Line(b"{}", 1),
    Line(b"{}", "1"),
    Line(b""),
    Ctl("status", {}),
    Ctl("wake", {"name": "github", "deep": {"list": [1, 2.5, None]}}),
    Reply(True, {"servers": [{"name": "a", "pid": 3}]}, ""),
    Reply(False, None, "unknown server"),
    Progress("listings: tools/list page 2"),
    Hello("shim", 1, [], "/", {}, {}, None, [], [(b"N\xff", b"\xfe")]),
]


def frame_of(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def decode_one(data: bytes) -> Frame:
    frames = FrameDecoder().feed(data)
    assert len(frames) == 1
    return frames[0]


def refused(body_or_frame: bytes, *, raw_frame: bool = False) -> str:
    decoder = FrameDecoder()
    with pytest.raises(WireError) as info:
        decoder.feed(body_or_frame if raw_frame else frame_of(body_or_frame))
    return str(info.value)


# --- round trips and the fast path ---------------------------------------------------------------


@pytest.mark.parametrize("frame", VALID_FRAMES, ids=lambda f: f.t)
def test_every_frame_type_survives_an_encode_decode_round_trip(frame: Frame) -> None:
    assert decode_one(wire.encode(frame)) == frame


def test_a_frame_decodes_to_the_same_map_the_protocol_table_describes() -> None:
    # The typed frame is the map's fields by name: nothing renamed, nothing lost.
    assert decode_one(wire.encode_raw(HELLO)).to_map() == HELLO
    assert decode_one(wire.encode(HELLO_FRAME)) == HELLO_FRAME


@pytest.mark.parametrize("size", [0, 1, 255, 256, 65535, 65536, 1_000_000])
@pytest.mark.parametrize("done", [None, 0, 1, -1, 2**63 - 1, "1", "req-ü"])
def test_encode_line_produces_exactly_the_bytes_of_the_generic_encoder(size: int, done: int | str | None) -> None:
    data = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    frame = Line(data, done)
    assert wire.encode_line(data, done) == wire.encode_raw(frame.to_map())  # the generic encoder
    assert decode_one(wire.encode_line(data, done)) == frame


def test_a_line_of_exactly_the_maximum_size_decodes() -> None:
    data = b"a" * LINE_LIMIT
    frame = decode_one(wire.encode_line(data, "x"))
    assert isinstance(frame, Line) and frame.d == data and frame.done == "x"


def test_encoding_a_line_over_the_limit_is_a_local_value_error() -> None:
    with pytest.raises(ValueError, match="MAX_LINE_BYTES"):
        wire.encode_line(b"a" * (LINE_LIMIT + 1))
    with pytest.raises(ValueError, match="MAX_FRAME_BYTES"):
        wire.encode(Reply(True, "x" * FRAME_LIMIT))


def test_encode_line_refuses_a_bool_done_because_json_ids_are_never_bools() -> None:
    with pytest.raises(ValueError):
        wire.encode_line(b"{}", True)


def test_frames_fed_one_byte_at_a_time_come_out_whole_and_in_order() -> None:
    stream = b"".join(wire.encode(f) for f in VALID_FRAMES)
    decoder = FrameDecoder()
    out: list[Frame] = []
    for i in range(len(stream)):
        out.extend(decoder.feed(stream[i : i + 1]))
    assert out == VALID_FRAMES
    assert decoder.buffered == 0


def test_several_frames_in_one_feed_are_all_returned() -> None:
    stream = b"".join(wire.encode(f) for f in VALID_FRAMES)
    assert FrameDecoder().feed(stream) == VALID_FRAMES


# --- the length header ----------------------------------------------------------------------------


def test_a_frame_longer_than_the_limit_is_refused_from_its_header_alone() -> None:
    decoder = FrameDecoder()
    with pytest.raises(WireError, match="MAX_FRAME_BYTES"):
        decoder.feed(struct.pack(">I", FRAME_LIMIT + 1))
    assert decoder.buffered == 0


def test_a_zero_length_frame_is_refused() -> None:
    assert "length 0" in refused(struct.pack(">I", 0), raw_frame=True)


def test_a_partial_header_waits_for_more_bytes() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(b"\x00\x00") == []
    assert decoder.feed(wire.encode(VALID_FRAMES[4])[2:]) == [VALID_FRAMES[4]]


def test_the_decoder_is_poisoned_after_one_error() -> None:
    decoder = FrameDecoder()
    with pytest.raises(WireError):
        decoder.feed(frame_of(msgpack.packb({"t": "nope"})))
    with pytest.raises(WireError, match="already failed"):
        decoder.feed(wire.encode(VALID_FRAMES[4]))


# --- bodies that are not frames ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("obj", "why"),
    [
        ([1, 2], "not a map"),
        ("line", "not a map"),
        ({}, "'t'"),
        ({"t": 5}, "'t'"),
        ({"t": "bogus"}, "unknown frame type"),
        ({"t": "line"}, "lacks field 'd'"),
        ({"t": "line", "d": "text, not bin"}, "'d' must be a bin"),
        ({"t": "line", "d": b"{}", "done": 1.5}, "'done'"),
        ({"t": "line", "d": b"{}", "done": True}, "'done'"),
        ({"t": "line", "d": b"{}", "done": [1]}, "'done'"),
        ({**HELLO, "v": "1"}, "'v'"),
        ({**HELLO, "v": True}, "'v'"),
        ({**HELLO, "role": "root"}, "'role'"),
        ({**HELLO, "pid": None}, "'pid'"),
        ({**HELLO, "argv": "node server.js"}, "'argv'"),
        ({**HELLO, "argv": ["node", 3]}, "'argv'"),
        ({**HELLO, "cwd": b"/"}, "'cwd'"),
        ({**HELLO, "env": {"A": 1}}, "'env'"),
        ({**HELLO, "opts": ["linger"]}, "'opts'"),
        ({**HELLO, "server": 3}, "'server'"),
        ({k: v for k, v in HELLO.items() if k != "server"}, "lacks field 'server'"),
        ({**HELLO, "resume": ["text, not bin"]}, "'resume'"),
        ({"t": "welcome", "v": 1, "session": "7", "name": "x", "daemon_pid": 1}, "'session'"),
        ({"t": "welcome", "v": 1, "session": 7, "name": None, "daemon_pid": 1}, "'name'"),
        ({"t": "welcome", "v": 1, "session": 7, "name": "x"}, "'daemon_pid'"),
        ({"t": "refused", "v": 1, "code": 3, "message": "m"}, "'code'"),
        ({"t": "refused", "v": 1, "code": "c"}, "'message'"),
        ({"t": "ctl", "op": "status", "args": []}, "'args'"),
        ({"t": "ctl", "args": {}}, "'op'"),
        ({"t": "reply", "ok": 1, "data": None, "error": ""}, "'ok'"),
        ({"t": "reply", "ok": True, "error": 5}, "'error'"),
    ],
)
def test_a_frame_with_a_missing_or_mistyped_field_is_refused(obj: object, why: str) -> None:
    assert why in refused(msgpack.packb(obj, use_bin_type=True))


def test_a_hello_of_another_version_passes_so_the_daemon_can_answer_version_skew() -> None:
    frame = decode_one(wire.encode_raw({"t": "hello", "v": wire.WIRE_VERSION + 1, "future": [1]}))
    assert isinstance(frame, ForeignHello) and frame.v == wire.WIRE_VERSION + 1


def test_unknown_extra_fields_are_kept_for_forward_compatibility() -> None:
    frame = decode_one(wire.encode_raw({"t": "line", "d": b"{}", "x": 1}))
    assert frame.extra["x"] == 1
    assert decode_one(wire.encode(frame)) == frame  # and sent on when the frame is passed on


def test_a_welcome_of_another_version_is_read_for_its_version_only() -> None:
    frame = decode_one(wire.encode_raw({"t": "welcome", "v": wire.WIRE_VERSION + 1, "session": "new shape"}))
    assert isinstance(frame, ForeignWelcome) and frame.v == wire.WIRE_VERSION + 1


def test_optional_fields_are_sent_only_when_set_and_data_always() -> None:
    assert "env_raw" not in HELLO_FRAME.to_map()
    raw = Hello("shim", 1, [], "/", {}, {}, None, [], [(b"N", b"\xff")]).to_map()
    assert raw["env_raw"] == [[b"N", b"\xff"]]
    assert Line(b"{}").to_map() == {"t": "line", "d": b"{}"}
    assert Reply(True).to_map() == {"t": "reply", "ok": True, "data": None}
    assert Reply(False, None, "no").to_map() == {"t": "reply", "ok": False, "data": None, "error": "no"}


@pytest.mark.parametrize(
    "body",
    [
        b"\x81\x01\xa4line",  # {1: "line"}
        b"\x82\xa1t\xa4line\xc4\x01d\xc4\x02{}",  # bin key b"d"
        b"\x81\xc0\xc0",  # nil key
        msgpack.packb({"t": "ctl", "op": "x", "args": {1: 2}}),
        msgpack.packb({"t": "ctl", "op": "x", "args": {"a": {2.5: 1}}}),
        msgpack.packb({"t": "reply", "ok": True, "data": [{"a": {(1, 2): 3}}]}),
    ],
)
def test_map_keys_that_are_not_strings_are_refused_at_every_depth(body: bytes) -> None:
    assert "key" in refused(body)


@pytest.mark.parametrize(
    "ext",
    [
        b"\xd4\x01\x00",  # fixext 1
        b"\xc7\x00\x05",  # ext 8 of length 0
        msgpack.packb(msgpack.Timestamp(1, 0)),  # the timestamp extension, type -1
        msgpack.packb(msgpack.ExtType(5, b"payload")),
    ],
)
def test_ext_types_are_refused(ext: bytes) -> None:
    assert "ext" in refused(b"\x82\xa1t\xa4line\xa1d" + ext)


def test_trailing_bytes_after_the_body_are_refused() -> None:
    body = msgpack.packb({"t": "line", "d": b"{}"}, use_bin_type=True) + b"\xc0"
    assert "trailing" in refused(body)


def test_a_truncated_body_is_refused() -> None:
    body = msgpack.packb({"t": "line", "d": b"{}"}, use_bin_type=True)[:-1]
    assert "truncated" in refused(body)


def test_invalid_utf8_in_a_str_is_refused() -> None:
    refused(b"\x82\xa1t\xa4line\xa1d\xa2\xff\xfe")


def test_the_reserved_byte_c1_is_refused() -> None:
    refused(b"\x82\xa1t\xa4line\xa1d\xc1")


def test_a_container_promising_more_elements_than_bytes_remain_is_refused() -> None:
    assert "promises" in refused(b"\x82\xa1t\xa4line\xa1d\xdc\x10\x00\xc0")


def test_blocking_reader_returns_frames_then_none_at_a_clean_eof() -> None:
    left, right = socket.socketpair()
    with left, right:
        for frame in VALID_FRAMES:
            left.sendall(wire.encode(frame))
        left.shutdown(socket.SHUT_WR)
        reader = wire.BlockingFrameReader(right)
        assert [reader.read() for _ in VALID_FRAMES] == VALID_FRAMES
        assert reader.read() is None


def test_blocking_reader_reports_an_eof_in_the_middle_of_a_frame() -> None:
    left, right = socket.socketpair()
    with left, right:
        left.sendall(wire.encode(VALID_FRAMES[4])[:-1])
        left.shutdown(socket.SHUT_WR)
        with pytest.raises(WireError, match="middle of a frame"):
            wire.BlockingFrameReader(right).read()


# --- msgpack bombs (RELIABILITY.md case 33) --------------------------------------------------------


_BOMB_SCRIPT = r"""
import json, struct, sys
from lazyd.protocol import wire
from lazyd.errors import WireError

def vm_peak_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmPeak:"):
                return int(line.split()[1])
    raise RuntimeError("no VmPeak")

bombs = {k: bytes.fromhex(v) for k, v in json.load(sys.stdin).items()}
start = vm_peak_kib()
results = {}
for name, body in bombs.items():
    decoder = wire.FrameDecoder()
    try:
        decoder.feed(struct.pack(">I", len(body)) + body)
        outcome = "accepted"
    except WireError as exc:
        outcome = "WireError: " + str(exc)
    except BaseException as exc:
        outcome = type(exc).__name__ + ": " + str(exc)
    try:
        decoder.feed(b"\x00")
        poisoned = False
    except WireError:
        poisoned = True
    results[name] = {"outcome": outcome, "poisoned": poisoned}
after_bombs = vm_peak_kib()
calibration = bytearray(200 * 1024 * 1024)
after_calibration = vm_peak_kib()
print(json.dumps({"results": results, "bombs_kib": after_bombs - start,
                  "calibration_kib": after_calibration - after_bombs}))
"""


def test_msgpack_bombs_are_refused_without_allocating_more_than_50_mib() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _BOMB_SCRIPT],
        input=json.dumps({k: v.hex() for k, v in BOMBS.items()}),
        capture_output=True,
        text=True,
        check=True,
    )
    report = json.loads(proc.stdout)
    for name, result in report["results"].items():
        assert result["outcome"].startswith("WireError"), (name, result)
        assert result["poisoned"], name
    # The calibration allocation proves VmPeak would have shown a bomb that got through.
    assert report["calibration_kib"] >= 190 * 1024
    assert report["bombs_kib"] < 50 * 1024, report


def test_one_frame_may_not_hold_more_than_the_item_budget_even_in_small_containers() -> None:
    assert "elements" in refused(BOMBS["15 arrays of 10k empty maps"])


def test_a_frame_within_every_limit_still_decodes() -> None:
    env = {f"VAR_{i}": "x" * 100 for i in range(2000)}
    frame = Hello("shim", 1234, ["arg"] * 5000, HELLO["cwd"], env, HELLO["opts"], None, HELLO["resume"])
    assert decode_one(wire.encode(frame)) == frame


# --- fuzzing -------------------------------------------------------------------------------------


def feed_only_wire_errors(data: bytes) -> None:
    decoder = FrameDecoder()
    try:
        for frame in decoder.feed(data):
            assert isinstance(frame, Frame) and frame.t in _CLASSES
    except WireError:
        pass


@settings(derandomize=True, max_examples=300)
@given(st.binary(max_size=512))
def test_random_bytes_only_ever_raise_wire_error(data: bytes) -> None:
    feed_only_wire_errors(data)


@settings(derandomize=True, max_examples=300)
@given(st.binary(min_size=1, max_size=512))
def test_random_bodies_behind_a_valid_length_only_ever_raise_wire_error(body: bytes) -> None:
    feed_only_wire_errors(frame_of(body))


@settings(derandomize=True, max_examples=300)
@given(
    st.sampled_from(VALID_FRAMES),
    st.lists(st.tuples(st.integers(min_value=0), st.integers(min_value=0, max_value=255)), max_size=8),
)
def test_mutated_valid_frames_only_ever_raise_wire_error(frame: Frame, flips: list[tuple[int, int]]) -> None:
    body = bytearray(msgpack.packb(frame.to_map(), use_bin_type=True))
    for index, value in flips:
        body[index % len(body)] = value
    feed_only_wire_errors(frame_of(bytes(body)))


_VALUES = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=4), st.binary(max_size=8),
                    st.lists(st.integers(), max_size=2))


@given(st.dictionaries(st.sampled_from(["d", "done", "x"]), _VALUES))
def test_a_line_frame_is_checked_by_the_rules_line_declares(fields: dict[str, Any]) -> None:
    obj = {"t": "line", **fields}
    expected = all(ok(obj.get(name)) for name, (ok, _) in Line._fields.items()) and all(
        obj.get(name) is None or ok(obj[name]) for name, (ok, _) in Line._optional.items())
    try:
        frame = validate_walked(obj)
    except WireError:
        assert not expected
        return
    assert expected and isinstance(frame, Line)
    assert frame.to_map() == {"t": "line", "d": obj["d"], **({"done": obj["done"]} if obj.get("done") is not None else {}),
                              **({"x": obj["x"]} if "x" in obj else {})}


def test_a_welcome_of_another_version_is_not_taken_for_a_hello() -> None:
    welcome = validate_walked({"t": "welcome", "v": WIRE_VERSION + 1})
    assert isinstance(welcome, ForeignWelcome) and not isinstance(welcome, ForeignHello)
    assert repr(welcome) == f"ForeignWelcome(v={WIRE_VERSION + 1})"
