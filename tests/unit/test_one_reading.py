"""Every reader of a JSON-RPC line agrees with `json.loads` or refuses the line, in both directions.

Client to server: the shim's reading for its in-flight table (lazyd/protocol/linepeek.py `inspect_line`), the
over-long rule's reading of a line's start (`too_long_request`), the relay core's parse and its id
rewrite (lazyd/core/relay/jsonrpc.py `parse`, `with_id`). Server to client: the large-result
splice (`large_result_id`, `spliced_id`) and the parse and rewrite of any answer.

Testing policy: hypothesis (derandomized, bounded) over lines written member by member, so that
keys repeat ("id" twice, "method" twice, "id" spelled with escapes), ids take every JSON type (big
integers, fractions, exponents, null, booleans, strings with escapes), members come in any order,
and bulk (a long string, a nested "id", nesting past the bound) sits anywhere, small lines and
lines over the 64 KiB where the large-result splice takes over. The expected reading is written here
from `json.loads` and the rules (docs/relay.md, "Bad input"): the last of repeated keys wins, an
id is a string or an integer from -2^63 to 2^64-1, nesting past 256 levels is refused.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from lazyd.core.relay import jsonrpc as rpc
from lazyd.protocol.linepeek import ID_SCAN_BYTES, inspect_line, too_long_request

BOUND = 256
BIG = 70 * 1024  # over the 64 KiB of the large-result splice and the over-long rule's scan
REFUSED = "refused"  # not JSON, too deep, or an id that is no id: -32600/-32700 under a null id


def depth(value: Any) -> int:
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def is_id(value: Any) -> bool:
    return isinstance(value, str) or (type(value) is int and -(2**63) <= value <= 2**64 - 1)


def expected(line: bytes) -> Any:
    """json.loads' object for a line every reader must take, else REFUSED."""
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):
        return REFUSED
    if not isinstance(obj, dict) or depth(obj) > BOUND or ("id" in obj and not is_id(obj["id"])):
        return REFUSED
    return obj


def written(members: list[tuple[str, Any]], spaced: bool) -> bytes:
    colon, comma = (" : ", " , ") if spaced else (":", ",")
    return ("{" + comma.join(f"{key}{colon}{value}" for key, value in members) + "}").encode()


_id_keys = st.sampled_from(['"id"', '"id"', '"\\u0069d"', '"i\\u0064"'])
_ids = st.one_of(
    st.integers(-(2**63), 2**64 - 1).map(str),
    st.sampled_from(["18446744073709551616", "100000000000000000000", "-9223372036854775809", "1.0", "1e3", "-0",
                     "null", "true", '"1"', '"\\"x"', '"\\u00e9"', "[1]", '{"id":1}']),
    st.text(max_size=6).map(json.dumps),
)


@st.composite
def bulk(draw: st.DrawFn) -> str:
    """A params or result value: small, a long plain string, a nested "id", or nested deep."""
    kind = draw(st.sampled_from(["small", "long", "nested id", "many strings", "deep", "deep and long"]))
    size = draw(st.sampled_from([10, BIG]))
    if kind == "small":
        return json.dumps({"t": "x" * 10})
    if kind == "long":
        return json.dumps({"t": "y" * size})
    if kind == "many strings":
        return json.dumps({"s": ["v" * 8] * draw(st.sampled_from([40, 100])), "t": "y" * size})
    if kind == "nested id":
        return json.dumps({"t": "y" * size, "id": draw(st.integers(0, 9)), "more": [{"id": "n"}]})
    levels = draw(st.sampled_from([BOUND - 2, BOUND, 1500]))
    inner = json.dumps("y" * size) if kind == "deep and long" else "0"
    return "[" * levels + inner + "]" * levels


@st.composite
def client_lines(draw: st.DrawFn) -> bytes:
    members: list[tuple[str, Any]] = []
    for _ in range(draw(st.integers(1, 6))):
        what = draw(st.sampled_from(["id", "id", "method", "params", "jsonrpc"]))
        if what == "id":
            members.append((draw(_id_keys), draw(_ids)))
        elif what == "method":
            members.append(('"method"', json.dumps(draw(st.sampled_from(["tools/call", "ping", "initialize"])))))
        elif what == "params":
            members.append(('"params"', draw(bulk())))
        else:
            members.append(('"jsonrpc"', '"2.0"'))
    return written(members, draw(st.booleans()))


@settings(derandomize=True, max_examples=600, deadline=None, database=None)
@given(client_lines())
def test_a_client_line_is_in_flight_under_the_id_json_reads_or_refused_under_a_null_id_by_every_reader(
        line: bytes) -> None:
    obj = expected(line)
    request = obj != REFUSED and isinstance(obj.get("method"), str) and "id" in obj
    peeked = [request_id for _, request_id in inspect_line(line).requests]
    assert peeked == ([obj["id"]] if request else []), line[:300]
    assert all(type(p) is type(obj["id"]) for p in peeked)

    msg = rpc.parse(line)
    if obj == REFUSED:
        assert isinstance(msg, rpc.Invalid) and msg.reply is not None and json.loads(msg.reply)["id"] is None
        return
    if not isinstance(msg, rpc.Message):
        return  # valid JSON but no message (no method, a bad method): no id in flight either
    assert msg.id == obj.get("id") and type(msg.id) is type(obj.get("id"))
    if msg.id is not None:
        seen = json.loads(rpc.with_id(msg, 77))
        assert seen == {**obj, "id": 77}

    if len(line) <= ID_SCAN_BYTES and request:
        # The over-long rule, given the whole line, reads the same id.
        found = too_long_request(line)
        assert found == obj["id"] and type(found) is type(obj["id"]), line[:300]


@st.composite
def server_lines(draw: st.DrawFn) -> bytes:
    """Answers as the SDKs write them (jsonrpc, id, result; or result, jsonrpc, id), with a
    second id before or after, or the id spelled otherwise."""
    relay_id = draw(st.integers(0, 10**6))
    other = draw(_ids)
    result = draw(bulk())
    shape = draw(st.sampled_from(["python", "typescript"]))
    members = ([('"jsonrpc"', '"2.0"'), ('"id"', str(relay_id)), ('"result"', result)] if shape == "python"
               else [('"result"', result), ('"jsonrpc"', '"2.0"'), ('"id"', str(relay_id))])
    extra = draw(st.sampled_from(["none", "before", "after", "middle"]))
    key = draw(_id_keys)
    if extra == "before":
        members.insert(0, (key, other))
    elif extra == "after":
        members.append((key, other))
    elif extra == "middle":
        members.insert(len(members) - 1, (key, other))
    return written(members, draw(st.booleans()) and extra != "none")


@settings(derandomize=True, max_examples=600, deadline=None, database=None)
@given(server_lines())
def test_a_server_answer_reaches_its_client_under_the_id_json_reads_and_only_its_client_s_id(line: bytes) -> None:
    obj = expected(line)
    rid = rpc.large_result_id(line)
    spliced = rpc.spliced_id(line, b"%d" % rid, b'"client-1"') if rid is not None else None
    if spliced is not None:
        # The splice is made only where json.loads reads the same id, and the client then reads
        # its own id and nothing else changed. (A large result is not judged further: one a
        # parser refuses, or nested past the bound, goes on as the server wrote it, as it would
        # reach the client directly.)
        try:
            loaded = json.loads(line)
        except (ValueError, RecursionError):
            loaded = None
        if loaded is not None:
            assert rid == loaded["id"], line[:300]
            assert json.loads(spliced) == {**loaded, "id": "client-1"}
    msg = rpc.parse(line)
    if obj == REFUSED:
        assert isinstance(msg, rpc.Invalid)
        return
    assert isinstance(msg, rpc.Message) and msg.kind is rpc.Kind.RESPONSE
    assert msg.id == obj["id"] and type(msg.id) is type(obj["id"])
    assert json.loads(rpc.with_id(msg, "client-1")) == {**obj, "id": "client-1"}
