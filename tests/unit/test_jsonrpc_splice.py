"""`with_id` splices a new top-level id into the received bytes only where that is provably the
top-level id, and re-serialises otherwise; either way the result must equal a plain rewrite."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lazyd.core.relay import jsonrpc as rpc


def _rewrite(line: bytes, new_id: rpc.JsonId) -> bytes:
    msg = rpc.parse(line)
    assert isinstance(msg, rpc.Message)
    return rpc.with_id(msg, new_id)


def _expected(line: bytes, new_id: rpc.JsonId) -> Any:
    obj = json.loads(line)
    obj["id"] = new_id
    return obj


@pytest.mark.parametrize("line", [
    b'{"jsonrpc":"2.0","id":7,"result":{"id":7,"text":"x"}}',
    b'{"result":{"id":7},"jsonrpc":"2.0","id":7}',
    b'{ "jsonrpc" : "2.0" , "id" : 7 , "result" : {} }',
    b'{"id":7,"method":"tools/call","params":{"arguments":{"id":7}}}',
])
def test_the_id_is_spliced_in_both_serialiser_shapes_and_nested_ids_are_left_alone(line: bytes) -> None:
    out = _rewrite(line, 123)
    assert json.loads(out) == _expected(line, 123)
    assert len(out) == len(line) + 2  # spliced: every other byte is the received one


def test_a_string_id_becomes_an_int_and_back_without_confusing_1_and_quoted_1() -> None:
    line = b'{"jsonrpc":"2.0","id":"1","result":{"id":1}}'
    out = _rewrite(line, 5)
    assert json.loads(out) == {"jsonrpc": "2.0", "id": 5, "result": {"id": 1}}
    back = _rewrite(out, "1")
    assert json.loads(back) == json.loads(line)


def test_an_id_spelled_differently_from_our_spelling_falls_back_to_reserialising() -> None:
    line = b'{"result":{"v":1},"id":"\\u0061","jsonrpc":"2.0"}'
    assert json.loads(_rewrite(line, 9)) == {"result": {"v": 1}, "id": 9, "jsonrpc": "2.0"}


def test_a_nested_id_right_before_the_closing_brace_is_never_taken_for_the_top_level_one() -> None:
    line = b'{"id":"a","result":{"x":1,"id":"a"}}'
    assert json.loads(_rewrite(line, 2)) == {"id": 2, "result": {"x": 1, "id": "a"}}
    line = b'{"result":{"x":1,"id":3},"id" :3 }'
    assert json.loads(_rewrite(line, 4)) == {"result": {"x": 1, "id": 3}, "id": 4}


ids = st.one_of(st.integers(-(2**63), 2**64 - 1), st.text(max_size=8))  # the ids msgpack carries
values = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=5)),
                      lambda children: st.one_of(st.lists(children, max_size=3),
                                                 st.dictionaries(st.sampled_from(["id", "a", "result"]), children, max_size=3)),
                      max_leaves=10)


@settings(derandomize=True, max_examples=400)
@given(old=ids, new=ids, payload=values, id_first=st.booleans(), spaced=st.booleans())
def test_splicing_always_equals_a_plain_rewrite(old: rpc.JsonId, new: rpc.JsonId, payload: Any, id_first: bool, spaced: bool) -> None:
    members = [("jsonrpc", "2.0"), ("id", old), ("result", payload)]
    if not id_first:
        members = [members[2], members[0], members[1]]
    sep = (", ", ": ") if spaced else (",", ":")
    line = json.dumps(dict(members), separators=sep).encode()
    out = _rewrite(line, new)
    assert json.loads(out) == _expected(line, new)
    assert type(json.loads(out)["id"]) is type(new)


def test_a_large_result_in_either_sdk_shape_is_found_and_spliced_without_decoding() -> None:
    payload = "z" * (rpc.LARGE_RESULT_BYTES + 10)
    python_shape = json.dumps({"jsonrpc": "2.0", "id": 41, "result": {"text": payload}}).encode()
    ts_shape = ('{"result":{"text":"%s","id":41},"jsonrpc":"2.0","id":41}' % payload).encode()
    for line in (python_shape, ts_shape):
        assert rpc.large_result_id(line) == 41
        spliced = rpc.spliced_id(line, b"41", b'"client-7"')
        assert spliced is not None
        out = json.loads(spliced)
        assert out["id"] == "client-7" and out["result"]["text"] == payload


def test_small_lines_errors_and_notifications_are_never_taken_by_the_large_result_path() -> None:
    big = "z" * rpc.LARGE_RESULT_BYTES
    assert rpc.large_result_id(b'{"jsonrpc":"2.0","id":1,"result":{}}') is None
    assert rpc.large_result_id(json.dumps({"jsonrpc": "2.0", "id": 1, "error": {"code": 1, "message": big}}).encode()) is None
    assert rpc.large_result_id(json.dumps({"jsonrpc": "2.0", "method": "x", "params": {"id": 1, "t": big}}).encode()) is None
    nested_last = ('{"result":{"t":"%s","inner":{"jsonrpc":"2.0","id":9}}}' % big).encode()
    assert rpc.large_result_id(nested_last) is None


def test_a_large_result_holding_id_keys_is_spliced_when_no_top_level_id_follows_and_only_then() -> None:
    items = [{"id": i, "title": "t" * 40} for i in range(2000)]
    line = json.dumps({"jsonrpc": "2.0", "id": 41, "result": {"items": items}}, separators=(",", ":")).encode()
    assert rpc.large_result_id(line) == 41
    assert rpc.spliced_id(line, b"41", b'"c"') == line.replace(b'"id":41', b'"id":"c"', 1)
    # A second top-level id after the result is the one a parser keeps: never the first spliced.
    for tail in (b',"id":42}', b',"\\u0069d":42}', b',"x":1,"id":42}'):
        assert rpc.spliced_id(line[:-1] + tail, b"41", b'"c"') is None, tail


@pytest.mark.parametrize("size", [0, 4095, 4096, 70_000])
def test_a_splice_gives_the_same_bytes_whatever_the_size_of_the_line(size: int) -> None:
    # The received bytes with only the id's changed, in either shape.
    pad = "p" * size
    for line in (b'{"jsonrpc":"2.0","id":7,"method":"m","params":{"t":"%s"}}' % pad.encode(),
                 b'{"method":"m","params":{"t":"%s"},"jsonrpc":"2.0","id":7}' % pad.encode()):
        out = _rewrite(line, 123456)
        assert out == line.replace(b'"id":7', b'"id":123456')
    result = b'{"jsonrpc":"2.0","id":41,"result":{"t":"%s"}}' % pad.encode()
    assert _rewrite(result, "c") == result.replace(b'"id":41', b'"id":"c"')


@pytest.mark.parametrize("later_id", [b'"id"', b'"\\u0069d"', b'"i\\u0064"'])
def test_a_large_line_with_a_second_id_key_is_never_spliced_at_its_first(later_id: bytes) -> None:
    # A second top-level "id" (however spelled) is the one parsers keep: splicing the first
    # would let the second through. A backslash elsewhere alone must not stop the splice.
    pad = b"p" * 70_000
    smuggling = b'{"jsonrpc":"2.0","id":7,"method":"m","params":{"t":"' + pad + b'"},' + later_id + b":7}"
    out = _rewrite(smuggling, 99)
    assert json.loads(out)["id"] == 99 and out.count(b"99") == 1  # spliced, the later 7 would win
    escaped = b'{"jsonrpc":"2.0","id":7,"method":"m","params":{"t":"a\\nb' + pad + b'"}}'
    assert _rewrite(escaped, 99) == escaped.replace(b'"id":7', b'"id":99', 1)


def test_a_result_holding_id_keys_is_spliced_when_no_top_level_id_follows_and_only_then() -> None:
    items = [{"id": i, "title": "t" * 40} for i in range(2000)]
    line = json.dumps({"jsonrpc": "2.0", "id": 41, "result": {"items": items}}).encode()  # spaced: not as dumps
    assert _rewrite(line, "c") == line.replace(b'"id": 41', b'"id": "c"', 1)
    # A second top-level id after the result is the one a parser keeps: no splice of the first.
    for tail in (b',"id":42}', b',"\\u0069d":42}', b',"x":1,"id":42}', b', "x" : {"id":1} , "id" :42 }'):
        out = _rewrite(line[:-1] + tail, "c")
        assert json.loads(out)["id"] == "c" and out.count(b'"c"') == 1, tail


def test_a_second_id_is_found_behind_few_strings_or_many() -> None:
    for strings in (3, 63, 64, 65, 500):
        result = {"s": ["v" * 10] * strings, "t": "y" * 70_000}
        line = json.dumps({"jsonrpc": "2.0", "id": 41, "result": result}).encode()
        assert _rewrite(line, "c") == line.replace(b'"id": 41', b'"id": "c"', 1), strings
        out = _rewrite(line[:-1] + b',"id":42}', "c")
        assert json.loads(out)["id"] == "c" and out.count(b'"c"') == 1, strings
