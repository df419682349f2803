"""Fuzzing the frame decoder with streams of valid, mutated and random frames (RELIABILITY case 36).

Testing policy: hypothesis with a fixed seed (`derandomize=True`) and bounded example counts, so
CI runs the same inputs every time and stays fast. Each example is a stream of frames (valid
frames of every type, the same frames with bytes flipped, inserted or cut, random bodies, random
msgpack maps, bad lengths, bare garbage), fed to one `FrameDecoder` in random chunks. The oracle
is a plain reference reader that walks the whole stream at once with `decode_body`; the decoder
must agree with it exactly, whatever the chunking and whether frames are taken all at once or
in limited batches (as the daemon takes them): the same frames in the same order, a
`WireError` where the reference fails (and only a `WireError`, never another exception type),
poisoned afterwards, and the same count of bytes left over from an unfinished frame. Every frame
it accepts is a well-formed frame of the protocol table. The outer test counts the frames fed, so
"10,000 frames" is a checked fact, not an estimate.
"""

from __future__ import annotations

import random
import struct
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lazyd.protocol import wire
from lazyd.errors import WireError
from lazyd.protocol.frames import _CLASSES, AnyFrame, Line, validate_walked
from lazyd.protocol.wire import FrameDecoder

FRAMES_PER_STREAM = 25
STREAMS = 400  # x 25 frames = the 10,000 frames of case 36
MIN_FRAMES_FED = 10_000

_text = st.text(max_size=12)
_ids = st.one_of(st.integers(-(2**63), 2**64 - 1), _text)
_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), st.floats(allow_nan=False),
                     _text, st.binary(max_size=16))
_values = st.recursive(_scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(_text, inner, max_size=4)), max_leaves=12)
_str_map = st.dictionaries(_text, _text, max_size=4)

_valid_frames = st.one_of(
    st.fixed_dictionaries({"t": st.just("hello"), "v": st.just(wire.WIRE_VERSION), "role": st.sampled_from(["shim", "ctl"]),
                           "pid": st.integers(0, 2**31), "argv": st.lists(_text, max_size=4), "cwd": _text,
                           "env": _str_map, "opts": _str_map, "server": st.none() | _text,
                           "resume": st.lists(st.binary(max_size=32), max_size=2)},
                           optional={"handoff": st.booleans(), "layout": st.integers(0, 9), "reclaim": st.booleans()}),
    st.fixed_dictionaries({"t": st.just("hello"), "v": st.integers(-5, 5).filter(lambda v: v != wire.WIRE_VERSION)}),
    st.fixed_dictionaries({"t": st.just("welcome"), "v": st.just(wire.WIRE_VERSION), "session": st.integers(0, 2**31),
                           "name": _text, "daemon_pid": st.integers(0, 2**31)}, optional={"handoff": st.booleans()}),
    st.fixed_dictionaries({"t": st.just("refused"), "v": st.integers(0, 9), "code": _text, "message": _text}),
    st.fixed_dictionaries({"t": st.just("line"), "d": st.binary(max_size=64)}, optional={"done": _ids}),
    st.fixed_dictionaries({"t": st.just("ctl"), "op": _text, "args": st.dictionaries(_text, _values, max_size=3)}),
    st.fixed_dictionaries({"t": st.just("reply"), "ok": st.booleans(), "data": _values}, optional={"error": _text}),
)


# Values whose maps may have keys of any type, which the protocol refuses at every depth.
_wild_values = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(_text | st.integers(-3, 3) | st.binary(max_size=2), inner, max_size=3)),
    max_leaves=8)
_FIELDS = ["t", "v", "role", "pid", "argv", "cwd", "env", "opts", "server", "resume", "session", "name",
           "daemon_pid", "code", "message", "d", "done", "op", "args", "ok", "data", "error", "handoff", "layout",
           "reclaim"]
# Maps that are not frames of the table: unknown `t`, missing fields, stray keys.
_any_maps = st.dictionaries(st.sampled_from(_FIELDS) | _text, _wild_values | st.sampled_from(sorted(_CLASSES)),
                            max_size=5)


def _replace_field(frame: dict[str, Any], pick: int, value: object) -> dict[str, Any]:
    if not frame:
        return {"t": value}
    key = sorted(frame)[pick % len(frame)]
    return {**frame, key: value}


# Values of every type a field could wrongly hold, nested non-str keys included.
_WRONG: list[object] = [None, True, False, 0, -1, 2**64 - 1, 1.5, "", "x", b"", b"x", [], ["x", 1], {}, {"k": "v"},
                        {1: "v"}, {b"k": "v"}, [{2: 3}], {"k": {b"k": 1}}, [[{3: 4}]]]
# A valid frame with one field replaced by a value of any type (mostly the wrong one).
_mistyped = st.builds(_replace_field, _valid_frames, st.integers(0, 20), _wild_values)


def _framed(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def _mutated(body: bytes, rng: random.Random) -> bytes:
    data = bytearray(body)
    for _ in range(rng.randint(1, 6)):
        where = rng.randint(0, len(data))
        kind = rng.randint(0, 2)
        if kind == 0 and where < len(data):
            data[where] = rng.randint(0, 255)
        elif kind == 1:
            data.insert(where, rng.randint(0, 255))
        elif where < len(data):
            del data[where]
    return bytes(data)


def mistyped_bodies(frames: list[dict[str, Any]], rng: random.Random) -> list[bytes]:
    """Every field of every frame, once, given a value of a random (mostly wrong) type."""
    return [msgpack.packb({**f, key: rng.choice(_WRONG)}, use_bin_type=True) for f in frames for key in f]


def stream_items(frames: list[dict[str, Any]], seed: int) -> list[bytes]:
    """FRAMES_PER_STREAM wire items built from a few drawn frames and a seed.

    Drawing every item through hypothesis costs ~1 ms each; deriving most of them from a seed keeps
    10,000 frames within a few seconds while hypothesis still chooses (and shrinks) the frames,
    the seed and the chunking.
    """
    rng = random.Random(seed)
    bodies = [msgpack.packb(f, use_bin_type=True) for f in frames]
    mistyped = mistyped_bodies(frames, rng) or bodies
    # Streams range from clean to hostile, so that long runs of good frames are decoded too.
    damage = rng.random() ** 2
    items = []
    for _ in range(FRAMES_PER_STREAM):
        kind = rng.randrange(12)
        body = rng.choice(bodies)
        if rng.random() >= damage:
            items.append(_framed(body))  # as drawn (valid, or one of the drawn non-frames)
        elif kind < 5:
            items.append(_framed(mistyped.pop(rng.randrange(len(mistyped))) if len(mistyped) > 1 else mistyped[0]))
        elif kind < 8:
            items.append(_framed(_mutated(body, rng)))  # flipped, inserted, cut bytes
        elif kind < 10:
            items.append(_framed(rng.randbytes(rng.randint(1, 64))))  # a random body
        elif kind == 10:
            items.append(struct.pack(">I", rng.choice([0, wire.MAX_FRAME_BYTES + 1, 2**32 - 1])))
        else:
            items.append(rng.randbytes(rng.randint(1, 8)))  # garbage that desynchronises the framing
    return items


def reference(stream: bytes) -> tuple[list[AnyFrame], bool, int]:
    """(frames, failed, bytes left over) of reading `stream` in one go, frame by frame."""
    frames: list[AnyFrame] = []
    pos = 0
    while True:
        left = len(stream) - pos
        if left < wire.HEADER_BYTES:
            return frames, False, left
        (length,) = struct.unpack_from(">I", stream, pos)
        if length == 0 or length > wire.MAX_FRAME_BYTES:
            return frames, True, 0
        if left - wire.HEADER_BYTES < length:
            return frames, False, left
        start = pos + wire.HEADER_BYTES
        try:
            frames.append(wire.decode_body(stream[start : start + length]))
        except WireError:
            return frames, True, 0
        pos = start + length


def packed(frames: list[AnyFrame]) -> list[bytes]:
    """Frames as canonical msgpack, for comparisons (a mutated float may be NaN, and NaN != NaN)."""
    return [msgpack.packb(f.to_map(), use_bin_type=True) for f in frames]


# ---- the frame table of docs/protocol.md, written out independently of lazyd/protocol/wire.py -------------


def _int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _strs(v: object) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _str_map_ok(v: object) -> bool:
    return isinstance(v, dict) and all(isinstance(k, str) and isinstance(x, str) for k, x in v.items())


def _in_table(f: dict[str, Any]) -> bool:
    t, v = f.get("t"), f.get("v")
    if t == "hello":
        return _int(v) and (v != wire.WIRE_VERSION or (
            f.get("role") in ("shim", "ctl") and _int(f.get("pid")) and _strs(f.get("argv"))
            and isinstance(f.get("cwd"), str) and _str_map_ok(f.get("env")) and _str_map_ok(f.get("opts"))
            and "server" in f and (f["server"] is None or isinstance(f["server"], str))
            and isinstance(f.get("resume"), list) and all(isinstance(r, bytes) for r in f["resume"])
            and (f.get("handoff") is None or isinstance(f["handoff"], bool))
            and (f.get("layout") is None or _int(f["layout"]))
            and (f.get("reclaim") is None or isinstance(f["reclaim"], bool))))
    if t == "welcome":
        return _int(v) and (v != wire.WIRE_VERSION or (
            _int(f.get("session")) and isinstance(f.get("name"), str) and _int(f.get("daemon_pid"))
            and (f.get("handoff") is None or isinstance(f["handoff"], bool))))
    if t == "refused":
        return _int(v) and isinstance(f.get("code"), str) and isinstance(f.get("message"), str)
    if t == "line":
        done = f.get("done")
        return (isinstance(f.get("d"), bytes) and len(f["d"]) <= wire.MAX_LINE_BYTES
                and (done is None or _int(done) or isinstance(done, str)))
    if t == "ctl":
        return isinstance(f.get("op"), str) and isinstance(f.get("args"), dict)
    if t == "reply":
        return isinstance(f.get("ok"), bool) and (f.get("error") is None or isinstance(f["error"], str))
    return False


def _shape_ok(value: object, depth: int = 1) -> bool:
    # Every map key at every depth is a str, and nothing nests deeper than MAX_DEPTH.
    if depth > wire.MAX_DEPTH:
        return False
    if isinstance(value, dict):
        return all(isinstance(k, str) for k in value) and all(_shape_ok(x, depth + 1) for x in value.values())
    if isinstance(value, list):
        return all(_shape_ok(x, depth + 1) for x in value)
    return True


def spec_accepts(body: bytes) -> bool:
    """Whether the protocol's text says `body` is a frame (small bodies: the size limits are not
    what this oracle is about, the bombs have their own tests)."""
    try:
        obj = msgpack.unpackb(body, raw=False, strict_map_key=False, ext_hook=_no_ext,
                              max_array_len=wire.MAX_CONTAINER_LEN, max_map_len=wire.MAX_CONTAINER_LEN)
    except Exception:
        return False  # not msgpack, invalid UTF-8, trailing bytes, an ext type
    return isinstance(obj, dict) and _shape_ok(obj) and _in_table(obj)


def _no_ext(code: int, data: bytes) -> object:
    raise ValueError("ext")


def assert_well_formed(frame: AnyFrame) -> None:
    assert frame.t in _CLASSES
    assert packed([validate_walked(frame.to_map())]) == packed([frame])  # its map is a valid frame
    again = wire.decode_body(wire.encode(frame)[wire.HEADER_BYTES:])  # it can be sent on as it is
    assert packed([again]) == packed([frame])


def check_bodies(items: list[bytes]) -> None:
    """Each framed item is accepted by `decode_body` exactly when the frame table says so."""
    for item in items:
        if len(item) <= wire.HEADER_BYTES or struct.unpack_from(">I", item)[0] != len(item) - wire.HEADER_BYTES:
            continue  # a bad length or bare garbage: the stream check covers those
        body = item[wire.HEADER_BYTES:]
        try:
            wire.decode_body(body)
            accepted = True
        except WireError:
            accepted = False
        assert accepted == spec_accepts(body), (accepted, body)


def feed_all(decoder: FrameDecoder, data: bytes, limit: int | None) -> list[AnyFrame]:
    """Feed `data`; with a limit, take the frames in batches the way the daemon does."""
    frames = decoder.feed(data, limit)
    if limit is not None:
        assert len(frames) <= limit
        while batch := decoder.feed(b"", limit):
            assert len(batch) <= limit
            frames.extend(batch)
    return frames


def check_stream(items: list[bytes], cuts: list[int], limit: int | None = None) -> None:
    stream = b"".join(items)
    bounds = sorted({0, len(stream), *(c % (len(stream) + 1) for c in cuts)})
    decoder = FrameDecoder()
    got: list[AnyFrame] = []
    failed_at: int | None = None
    failed_by = len(stream)
    for start, end in zip(bounds, bounds[1:]):
        try:
            got.extend(feed_all(decoder, stream[start:end], limit))
        except WireError:
            failed_at, failed_by = start, end
            break
    expected, fails, left = reference(stream)
    for frame in got:
        assert_well_formed(frame)
    if failed_at is None:
        assert not fails and packed(got) == packed(expected) and decoder.buffered == left
        return
    assert reference(stream[:failed_by])[1], "the decoder failed where the reference did not (yet)"
    # Frames completed earlier in the failing chunk are not returned: everything before it is.
    assert packed(got) == packed(reference(stream[:failed_at])[0])
    try:
        decoder.feed(wire.encode(Line(b"")))  # a valid frame: refused all the same
    except WireError:
        return
    raise AssertionError("a decoder that failed once accepted more bytes")


def test_ten_thousand_random_and_mutated_frames_only_ever_raise_wire_error_and_match_the_reference() -> None:
    fed = 0

    @settings(derandomize=True, max_examples=STREAMS, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.lists(_valid_frames | _mistyped | _any_maps, min_size=1, max_size=4), st.integers(0, 2**32),
           st.lists(st.integers(0, 2**20), max_size=12), st.none() | st.integers(1, 4))
    def run(frames: list[dict[str, Any]], seed: int, cuts: list[int], limit: int | None) -> None:
        nonlocal fed
        items = stream_items(frames, seed)
        fed += len(items)
        check_bodies(items + [_framed(b) for b in mistyped_bodies(frames, random.Random(~seed))])
        check_stream(items, cuts, limit)

    run()
    assert fed >= MIN_FRAMES_FED


# ---- random bytes behind valid headers: the fuzz reaches the body decoder ----------------------
#
# Random bytes alone almost never make a valid header (four bytes naming a length from 1 to
# MAX_FRAME_BYTES that the rest of the example then fills): a fuzz of bare random bytes stops at
# the length check in every example and says nothing of `decode_body`. Here each example is a
# stream of segments, most of them a valid header followed by exactly that many fuzzed body
# bytes (random bytes, random bytes behind a msgpack map header, a valid frame with bytes
# changed), some bare random bytes. The stream goes through the decoder (which stops at its first
# bad body) and each framed body through `decode_body` alone, against the frame table; the test
# counts how far decoding got, so "the bodies were decoded" is a checked fact.

RANDOM_STREAMS = 300
_MAP_HEADERS = [bytes([0x80 | n]) for n in range(1, 8)] + [b"\xde\x00\x02"]  # fixmap 1-7, map16


def _random_segment(rng: random.Random, frames: list[bytes]) -> bytes:
    kind = rng.randrange(12)
    if kind == 0:
        return rng.randbytes(rng.randint(1, 16))  # bare bytes: a header only by chance
    if kind < 4:
        body = rng.randbytes(rng.randint(1, 96))
    elif kind < 6:
        body = rng.choice(_MAP_HEADERS) + rng.randbytes(rng.randint(0, 96))
    elif kind < 8:
        body = _mutated(rng.choice(frames), rng)
    elif kind < 10:
        changed = bytearray(rng.choice(frames))  # one byte changed: mostly still msgpack
        changed[rng.randrange(len(changed))] = rng.randrange(256)
        body = bytes(changed)
    else:
        # A well-formed msgpack map of random keys and values: past the structure walk, for
        # the frame table to judge.
        keys = rng.sample(_FIELDS, rng.randint(1, 4))
        body = msgpack.packb({k: rng.choice(_WRONG + [rng.randbytes(4), "line", "hello"]) for k in keys},
                             use_bin_type=True)
    return _framed(body) if body else b""


class _Reached:
    """How far the decoder went with each body: `decode_body`, past its structure walk, the table."""

    def __init__(self) -> None:
        self.bodies = self.structured = self.validated = 0


def test_random_bytes_behind_valid_headers_reach_decode_body_and_only_ever_raise_wire_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reached = _Reached()
    real_decode, real_structure, real_validate = wire.decode_body, wire.check_structure, wire.validate_walked

    def decode_body(body: bytes) -> Any:
        reached.bodies += 1
        return real_decode(body)

    def check_structure(body: bytes) -> None:
        real_structure(body)
        reached.structured += 1

    def validate_walked(obj: dict[str, Any]) -> Any:
        reached.validated += 1
        return real_validate(obj)

    # The decoder and decode_body find these by their module-level names.
    monkeypatch.setattr(wire, "decode_body", decode_body)
    monkeypatch.setattr(wire, "check_structure", check_structure)
    monkeypatch.setattr(wire, "validate_walked", validate_walked)
    examples = examples_reaching_bodies = 0
    frames = [msgpack.packb(f, use_bin_type=True) for f in (
        {"t": "line", "d": b'{"jsonrpc":"2.0","id":1,"method":"ping"}', "done": 1},
        {"t": "ctl", "op": "status", "args": {"names": ["a"]}},
        {"t": "reply", "ok": True, "data": {"pid": 1}},
        {"t": "refused", "v": 1, "code": "options", "message": "no"},
    )]

    @settings(derandomize=True, max_examples=RANDOM_STREAMS, deadline=None, database=None)
    @given(st.integers(0, 2**32), st.integers(1, 12), st.lists(st.integers(0, 2**12), max_size=6))
    def run(seed: int, segments: int, cuts: list[int]) -> None:
        nonlocal examples, examples_reaching_bodies
        rng = random.Random(seed)
        # The first segment is always a framed body, so every example reaches decode_body.
        items = [_framed(rng.randbytes(rng.randint(1, 64)))]
        items += [_random_segment(rng, frames) for _ in range(segments - 1)]
        before = reached.bodies
        check_stream(items, cuts)  # only WireError, the reference's frames, poisoned after
        examples += 1
        examples_reaching_bodies += reached.bodies > before
        # A stream stops at its first bad body; each body alone must also be judged as the
        # frame table says, which is what takes the fuzz past the first.
        check_bodies(items)

    run()
    assert examples == RANDOM_STREAMS
    assert examples_reaching_bodies == RANDOM_STREAMS, (examples_reaching_bodies, RANDOM_STREAMS)
    # Bodies got past the structure walk into msgpack and the frame table, not only to the walk.
    assert reached.structured >= reached.bodies // 10, vars(reached)
    assert reached.validated >= reached.bodies // 20, vars(reached)
