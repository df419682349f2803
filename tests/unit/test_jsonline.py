"""A line as every reader reads it (lazyd/protocol/jsonline.py): `json.loads`'s object or refusal,
repeated keys (the last wins), the nesting bound, the ids taken; and the top-level members of an
object as the JSON scanner reads them (`members`), for a line cut off or an id to splice.

Testing policy: hypothesis (derandomized, bounded) over objects with repeated keys, escaped and
non-ASCII text, written compactly or with spaces, and over lines broken one byte at a time; each
verdict is checked against `json.loads` of the same bytes."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lazyd.core.relay import jsonrpc as rpc
from lazyd.protocol.jsonline import MAX_NESTING_DEPTH, NOT_JSON, TOO_DEEP, members, read

LONG = "y" * 4096


def request(text: str, **extra: Any) -> bytes:
    obj = {"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "echo", "arguments": {"text": text}}, "id": 7}
    obj.update(extra)
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass")


def loads(line: bytes) -> Any:
    """`read`'s value for a line it takes; ValueError for one it refuses (as `json.loads` raises)."""
    value, refused = read(line)
    if refused is not None:
        raise ValueError(refused)
    return value


def same_verdict(line: bytes) -> None:
    try:
        expected: Any = json.loads(line)
    except RecursionError:
        assert read(line) == (None, TOO_DEEP)
        return
    except ValueError:
        assert read(line) == (None, NOT_JSON)
        return
    value, refused = read(line)
    assert value == expected and refused in (None, TOO_DEEP)


@pytest.mark.parametrize("line", [
    request(LONG + "\x01" + LONG).replace(b"\\u0001", b"\x01"),  # a raw control character
    request(LONG + "\t").replace(b"\\t", b"\t"),
    request(LONG).replace(b"yyyy", b"yy\xffy", 1),  # not UTF-8
    request(LONG).replace(b'"text":"', b'"text":', 1),  # the quotation marks no longer pair
    request(LONG).replace(b'"name"', b"name", 1),  # a bare word outside the strings
    request(LONG)[:-1],  # the object never closes
])
def test_a_line_json_loads_refuses_is_refused_with_its_error_and_parse_answers_it_with_a_parse_error(line: bytes) -> None:
    with pytest.raises(ValueError):
        json.loads(line)
    with pytest.raises(ValueError):
        loads(line)
    found = rpc.parse(line)
    assert isinstance(found, rpc.Invalid) and found.reason == "not JSON"


@pytest.mark.parametrize("request_id", [LONG, 1.5, None, True, -1, "7"])
def test_odd_ids_on_a_large_line_get_the_verdict_they_get_on_a_small_one(request_id: object) -> None:
    large = request(LONG * 20, id=request_id)
    small = request("x", id=request_id)
    for line in (large, small):
        same_verdict(line)
    got_large, got_small = rpc.parse(large), rpc.parse(small)
    assert type(got_large) is type(got_small)
    if isinstance(got_large, rpc.Message) and isinstance(got_small, rpc.Message):
        assert got_large.id == got_small.id and got_large.kind is got_small.kind
        assert rpc.with_id(got_large, 99).startswith(rpc.with_id(got_small, 99)[:20])
    else:
        assert isinstance(got_large, rpc.Invalid) and isinstance(got_small, rpc.Invalid)
        assert (got_large.reply, got_large.reason) == (got_small.reply, got_small.reason)


def test_a_large_line_nested_too_deep_is_refused_as_before() -> None:
    deep: Any = LONG
    for _ in range(rpc.MAX_NESTING_DEPTH + 5):
        deep = [deep]
    line = request(LONG * 20, params={"deep": deep})
    found = rpc.parse(line)
    assert isinstance(found, rpc.Invalid) and found.reason == "too deep"


_text = st.one_of(st.just(LONG), st.text(max_size=8))
_values = st.recursive(st.one_of(_text, st.integers(), st.booleans(), st.none(), st.floats(allow_nan=False)),
                       lambda inner: st.one_of(st.lists(inner, max_size=3),
                                               st.dictionaries(st.text(max_size=4), inner, max_size=3)),
                       max_leaves=6)


@settings(derandomize=True, max_examples=150, deadline=None)
@given(st.dictionaries(st.one_of(st.text(max_size=4), st.just(LONG)), _values, min_size=1, max_size=4),
       st.booleans())
def test_any_object_parses_as_json_loads_parses_it(obj: dict[str, Any], spaced: bool) -> None:
    line = json.dumps(obj, ensure_ascii=False, separators=(", ", ": ") if spaced else (",", ":")).encode()
    same_verdict(line)


@settings(derandomize=True, max_examples=150, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from([b"\x00", b"\x1f", b'"', b"\\", b"}", b"\xc3", b"\xed\xa0\x80", b" "]))
def test_a_large_line_broken_by_one_byte_anywhere_gets_json_loads_verdict(at: int, byte: bytes) -> None:
    line = request(LONG + "é" + LONG, extra={"k": [1, "v", {"w": None}]})
    at = at % len(line)
    same_verdict(line[:at] + byte + line[at + 1:])



_keys = st.sampled_from(["id", "a", "\u0069d", "result"])


@settings(derandomize=True, max_examples=200, deadline=None)
@given(st.lists(st.tuples(_keys, _values), min_size=1, max_size=6), st.booleans())
def test_repeated_keys_read_as_json_loads_reads_them_the_last_winning(
        members: list[tuple[str, Any]], spaced: bool) -> None:
    colon, comma = (": ", ", ") if spaced else (":", ",")
    line = ("{" + comma.join(f'"{k}"{colon}{json.dumps(v, ensure_ascii=False)}' for k, v in members) + "}").encode(
        "utf-8", "surrogatepass")
    same_verdict(line)


@pytest.mark.parametrize("depth", [MAX_NESTING_DEPTH - 1, MAX_NESTING_DEPTH, 1000, 100_000])
def test_nesting_past_the_bound_is_too_deep_whether_or_not_the_parser_could_finish(depth: int) -> None:
    # The object around counts as a level.
    for pad in (b"", b'"' + b"p" * 70_000 + b'",'):
        line = b'{"p":' + pad[:-1] + b',"q":' if pad else b'{"q":'
        line += b"[" * depth + b"]" * depth + b"}"
        value, refused = read(line)
        if depth + 1 > MAX_NESTING_DEPTH:
            assert refused == TOO_DEEP
        else:
            assert refused is None and value == json.loads(line)


@settings(derandomize=True, max_examples=300, deadline=None)
@given(st.one_of(st.integers(-(2**70), 2**70), st.sampled_from([2**64 - 1, 2**64, -(2**63), -(2**63) - 1])))
def test_an_integer_is_taken_as_an_id_exactly_when_the_wire_carries_it_back_as_done(value: int) -> None:
    from lazyd.protocol import wire
    from lazyd.protocol.jsonline import valid_id

    try:
        wire.encode_line(b"{}", value)
        carried = True
    except ValueError:
        carried = False
    assert valid_id(value) is carried


def _object_text(pairs: list[tuple[str, Any]], spaced: bool) -> str:
    colon, comma = (": ", ", ") if spaced else (":", ",")
    return "{" + comma.join(f"{json.dumps(k)}{colon}{json.dumps(v)}" for k, v in pairs) + "}"


@settings(derandomize=True, max_examples=200, deadline=None)
@given(st.lists(st.tuples(_keys, _values), max_size=6), st.booleans())
def test_the_members_of_an_object_are_what_json_loads_reads_in_order_the_last_of_a_key_winning(
        pairs: list[tuple[str, Any]], spaced: bool) -> None:
    text = _object_text(pairs, spaced)
    found = list(members(text, 1))
    assert [(k, v) for k, v, _ in found] == [(k, json.loads(json.dumps(v))) for k, v in pairs]
    assert dict((k, v) for k, v, _ in found) == json.loads(text)
    assert text[found[-1][2] if found else 1:].strip() == "}"


@settings(derandomize=True, max_examples=200, deadline=None)
@given(st.lists(st.tuples(_keys, _values), min_size=1, max_size=6), st.integers(0, 400))
def test_a_cut_object_gives_only_members_it_holds_whole(pairs: list[tuple[str, Any]], cut: int) -> None:
    text = _object_text(pairs, False)
    whole = [(k, v) for k, v, _ in members(text, 1)]
    cut_off = [(k, v) for k, v, _ in members(text[: cut % len(text)], 1)]
    assert cut_off == whole[: len(cut_off)]


@pytest.mark.parametrize("line, request_id", [
    (b'{"jsonrpc":"2.0","id":18446744073709551615,"method":"m"}', 2**64 - 1),
    (b'{"jsonrpc":"2.0","id":-9223372036854775808,"method":"m"}', -(2**63)),
    (b'{"jsonrpc":"2.0","id":-0,"method":"m"}', 0),
    (b'{"jsonrpc":"2.0","id":1,"method":"m"}', 1),
    (b'{"jsonrpc":"2.0","id":"1","method":"m"}', "1"),
])
def test_an_id_comes_back_exactly_as_the_client_wrote_it_after_the_relay_s_own(line: bytes, request_id: object) -> None:
    msg = rpc.parse(line)
    assert isinstance(msg, rpc.Message) and msg.id == request_id and type(msg.id) is type(request_id)
    relayed = rpc.parse(rpc.with_id(msg, 5))
    assert isinstance(relayed, rpc.Message) and relayed.id == 5
    back = rpc.with_id(relayed, request_id)  # type: ignore[arg-type]
    assert json.loads(back) == json.loads(line) and type(json.loads(back)["id"]) is type(request_id)


@pytest.mark.parametrize("line", [b'{"jsonrpc":"2.0","id":18446744073709551616,"method":"m"}',
                                  b'{"jsonrpc":"2.0","id":1.0,"method":"m"}', b'{"jsonrpc":"2.0","id":1e0,"method":"m"}'])
def test_an_id_beyond_the_wire_or_a_fraction_is_refused_rather_than_rounded(line: bytes) -> None:
    found = rpc.parse(line)
    assert isinstance(found, rpc.Invalid) and found.reason == "bad id"
