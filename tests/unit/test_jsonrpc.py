"""jsonrpc.parse classifies every line without raising, and what it accepts can be re-serialised.

The relay re-serialises any message it rewrites, so "parse accepted it" must imply "dumps can write
it": a line that parses but cannot be written back would raise inside the relay core.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from lazyd.core.relay import jsonrpc as rpc
from lazyd.core.relay.jsonrpc import Invalid, Kind, Message


def parsed(line: bytes) -> Message:
    msg = rpc.parse(line)
    assert isinstance(msg, Message), msg
    return msg


def refused(line: bytes) -> tuple[Invalid, Any]:
    msg = rpc.parse(line)
    assert isinstance(msg, Invalid), msg
    assert msg.reply is not None
    return msg, json.loads(msg.reply)


def test_a_method_with_an_id_is_a_request() -> None:
    msg = parsed(b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo"}}')
    assert (msg.kind, msg.id, msg.method, msg.params) == (Kind.REQUEST, 7, "tools/call", {"name": "echo"})


def test_a_method_without_an_id_is_a_notification() -> None:
    msg = parsed(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
    assert (msg.kind, msg.id, msg.method) == (Kind.NOTIFICATION, None, "notifications/initialized")


def test_an_id_with_a_result_or_an_error_and_no_method_is_a_response() -> None:
    ok = parsed(b'{"jsonrpc":"2.0","id":"a","result":{}}')
    failed = parsed(b'{"jsonrpc":"2.0","id":3,"error":{"code":-32601,"message":"no"}}')
    assert (ok.kind, ok.id, ok.method) == (Kind.RESPONSE, "a", None)
    assert (failed.kind, failed.id) == (Kind.RESPONSE, 3)


def test_params_that_are_not_an_object_read_as_empty_without_being_lost() -> None:
    msg = parsed(b'{"jsonrpc":"2.0","id":1,"method":"m","params":[1,2]}')
    assert msg.params == {}
    assert msg.obj["params"] == [1, 2]


def test_integer_id_1_and_string_id_1_stay_distinct_and_keep_their_type() -> None:
    as_int = parsed(b'{"jsonrpc":"2.0","id":1,"method":"ping"}')
    as_str = parsed(b'{"jsonrpc":"2.0","id":"1","method":"ping"}')
    assert as_int.id is not None and as_str.id is not None
    assert as_int.id != as_str.id
    assert (type(as_int.id), type(as_str.id)) == (int, str)
    assert rpc.result_line(as_int.id, {}) == b'{"jsonrpc":"2.0","id":1,"result":{}}'
    assert rpc.result_line(as_str.id, {}) == b'{"jsonrpc":"2.0","id":"1","result":{}}'


def test_ids_are_returned_byte_for_byte_up_to_what_msgpack_carries_and_unicode_strings() -> None:
    for edge in (2**64 - 1, -(2**63)):
        assert parsed(f'{{"jsonrpc":"2.0","id":{edge},"method":"m"}}'.encode()).id == edge
        assert rpc.error_line(edge, -1, "x").startswith(f'{{"jsonrpc":"2.0","id":{edge},'.encode())
    text_id = parsed('{"jsonrpc":"2.0","id":"ü-1","method":"m"}'.encode()).id
    assert text_id is not None
    assert rpc.result_line(text_id, None) == '{"jsonrpc":"2.0","id":"ü-1","result":null}'.encode()


def test_an_integer_id_beyond_what_msgpack_carries_is_an_invalid_request_answered_with_a_null_id() -> None:
    # The wire carries a client's id back to the shim (`done`): one it cannot carry is no id.
    for raw in (b"18446744073709551616", b"100000000000000000000", b"-9223372036854775809"):
        invalid, reply = refused(b'{"jsonrpc":"2.0","id":' + raw + b',"method":"ping"}')
        assert reply["id"] is None and reply["error"]["code"] == rpc.INVALID_REQUEST, raw
        assert invalid.reason == "bad id" and invalid.id is None


def test_null_bool_and_float_ids_are_invalid_requests_answered_with_a_null_id() -> None:
    for raw in (b"null", b"true", b"false", b"1.0", b"1e3", b"[1]", b'{"a":1}'):
        invalid, reply = refused(b'{"jsonrpc":"2.0","id":' + raw + b',"method":"ping"}')
        assert reply["id"] is None and reply["error"]["code"] == rpc.INVALID_REQUEST, raw
        assert invalid.reason == "bad id"


def test_a_line_that_is_not_json_gets_a_parse_error_with_a_null_id() -> None:
    for junk in (b"hello", b"{", b"", b"\xff\xfe{}", b'{"id":1,}'):
        invalid, reply = refused(junk)
        assert reply == {"jsonrpc": "2.0", "id": None, "error": {"code": rpc.PARSE_ERROR, "message": reply["error"]["message"]}}
        assert "not JSON" in reply["error"]["message"]


def test_a_batch_is_refused_as_an_invalid_request() -> None:
    invalid, reply = refused(b'[{"jsonrpc":"2.0","id":1,"method":"ping"}]')
    assert reply["id"] is None and reply["error"]["code"] == rpc.INVALID_REQUEST
    assert "batch" in reply["error"]["message"]


def test_json_that_is_not_an_object_is_an_invalid_request() -> None:
    for raw in (b"3", b'"ping"', b"null"):
        _, reply = refused(raw)
        assert reply["error"]["code"] == rpc.INVALID_REQUEST


def test_a_method_that_is_not_a_string_is_refused_under_the_request_id() -> None:
    invalid, reply = refused(b'{"jsonrpc":"2.0","id":"q","method":5}')
    assert reply["id"] == "q" and reply["error"]["code"] == rpc.INVALID_REQUEST
    assert invalid.id == "q"


def test_an_object_with_neither_method_nor_result_is_refused_under_its_id() -> None:
    _, reply = refused(b'{"jsonrpc":"2.0","id":4}')
    assert reply["id"] == 4 and reply["error"]["code"] == rpc.INVALID_REQUEST


def test_a_message_carrying_nan_or_infinity_is_relayed_as_received_instead_of_failing_to_serialise() -> None:
    # Python peers write these literals (json.dumps allows them by default): a relay must carry
    # them, not raise while re-serialising a rewritten message.
    msg = parsed(b'{"jsonrpc":"2.0","id":1,"result":{"x":NaN,"y":Infinity,"z":-Infinity}}')
    assert rpc.dumps(msg.obj) == b'{"jsonrpc":"2.0","id":1,"result":{"x":NaN,"y":Infinity,"z":-Infinity}}'


def test_a_lone_surrogate_escape_survives_re_serialisation_as_the_same_escape() -> None:
    # JavaScript peers emit these when they cut a string inside a surrogate pair.
    msg = parsed(b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"s":"a\\ud800b","t":"\xc3\xbc"}}')
    out = rpc.dumps(msg.obj)
    assert b"\\ud800" in out
    assert json.loads(out) == msg.obj


def test_a_line_nested_deeper_than_the_limit_is_a_parse_error_under_a_null_id() -> None:
    # Under a null id whatever the depth: a line too deep for the parser to finish has no id to
    # read, and one just past the limit must get the same answer, from every reader.
    depth = rpc.MAX_NESTING_DEPTH
    for levels in (depth, 1000, 100_000):
        too_deep = b'{"jsonrpc":"2.0","id":9,"method":"m","params":' + b"[" * levels + b"]" * levels + b"}"
        invalid, reply = refused(too_deep)
        assert reply["id"] is None and reply["error"]["code"] == rpc.PARSE_ERROR
        assert invalid.id is None and invalid.reason == "too deep"
    # One level less is a message, and it can be written back.
    ok = b'{"jsonrpc":"2.0","id":9,"method":"m","params":' + b"[" * (depth - 1) + b"]" * (depth - 1) + b"}"
    assert rpc.dumps(parsed(ok).obj) == ok


def test_many_shallow_containers_are_not_mistaken_for_deep_nesting() -> None:
    wide = b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":[' + b",".join([b"[{}]"] * 5000) + b"]}}"
    assert parsed(wide).kind is Kind.REQUEST


def test_the_builders_write_one_line_of_compact_json() -> None:
    assert rpc.request_line(1, "ping") == b'{"jsonrpc":"2.0","id":1,"method":"ping"}'
    assert rpc.notification_line("n", {"a": "x\ny"}) == b'{"jsonrpc":"2.0","method":"n","params":{"a":"x\\ny"}}'
    assert rpc.error_line(None, -32000, "m", {"d": 1}) == b'{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"m","data":{"d":1}}}'


# ---- property tests ----------------------------------------------------------------------------------


def _nested(depth: int, wrap: Any) -> Any:
    value: Any = None
    for _ in range(depth):
        value = wrap(value)
    return value


# Field values chosen for the ways they have broken parsers and re-serialisers: wrong id types,
# non-finite numbers, lone surrogates, control characters, nesting around the limit, big ints.
_FIELDS: dict[str, list[Any]] = {
    "jsonrpc": ["2.0", "1.0", 2],
    "id": [None, True, False, 0, 1, -1, 2**70, 1.5, float("inf"), "1", "", "\ud800", [], {}],
    "method": ["ping", "tools/call", "", 5, None, ["x"], {"a": 1}],
    "params": [
        None, True, 0, -0.0, float("nan"), float("-inf"), 2**64, "x", "a\ud800", "é\u2028", "\n\x00", [], {},
        {"a": {"b": [1, {"c": None}]}}, _nested(250, lambda v: [v]), _nested(300, lambda v: {"k": v}), [1] * 300,
    ],
}
_FIELDS["result"] = _FIELDS["error"] = _FIELDS["params"]


def _envelope(picks: tuple[int, ...]) -> bytes:
    # An index past the end of a field's list leaves that field out.
    obj = {name: values[i] for (name, values), i in zip(_FIELDS.items(), picks) if i < len(values)}
    return json.dumps(obj, ensure_ascii=False).encode("utf-8", "surrogatepass")


def _splice(parts: tuple[bytes, int, bytes]) -> bytes:
    data, position, junk = parts
    position %= len(data) + 1
    return data[:position] + junk + data[position + len(junk) :]


_envelopes = st.tuples(*(st.integers(0, len(values)) for values in _FIELDS.values())).map(_envelope)
_lines = st.one_of(
    st.binary(max_size=64),
    _envelopes,
    st.tuples(_envelopes, st.integers(0, 400), st.binary(min_size=1, max_size=3)).map(_splice),
)


@settings(derandomize=True, max_examples=500, deadline=None)
@given(_lines)
def test_parse_never_raises_and_whatever_it_accepts_can_be_written_back(data: bytes) -> None:
    msg = rpc.parse(data)
    if isinstance(msg, Invalid):
        if msg.reply is not None:
            reply = json.loads(msg.reply)
            assert reply["error"]["code"] in (rpc.PARSE_ERROR, rpc.INVALID_REQUEST)
            assert reply["id"] == msg.id
        return
    assert msg.id is None or rpc.valid_id(msg.id)
    assert msg.kind is (Kind.RESPONSE if msg.method is None else Kind.REQUEST if msg.id is not None else Kind.NOTIFICATION)
    written = rpc.dumps(msg.obj)
    assert b"\n" not in written
    again = rpc.parse(written)
    assert isinstance(again, Message) and again.id == msg.id and type(again.id) is type(msg.id)


def test_a_large_line_nested_too_deep_is_refused_as_a_small_one_is() -> None:
    # Lines past a few KiB count their brackets with finds that stop past the limit, not with
    # bytes.count: the same lines must be refused, the padding placed before and after.
    depth, pad = rpc.MAX_NESTING_DEPTH, b'"' + b"p" * 70_000 + b'"'
    # The top-level object and "params" are two levels: `depth - 1` arrays more is one too many.
    for nested in (b"[" * (depth - 1) + b"]" * (depth - 1), b"[" * (depth - 2) + pad + b"]" * (depth - 2)):
        line = b'{"jsonrpc":"2.0","id":9,"method":"m","params":{"p":' + pad + b',"q":' + nested + b"}}"
        too_deep = nested.startswith(b"[" * (depth - 1))
        if too_deep:
            invalid, reply = refused(line)
            assert reply["id"] is None and invalid.reason == "too deep"
        else:
            assert parsed(line).kind is Kind.REQUEST
    wide = b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"p":' + pad + b',"a":[' + b",".join([b"[{}]"] * 5000) + b"]}}"
    assert parsed(wide).kind is Kind.REQUEST
