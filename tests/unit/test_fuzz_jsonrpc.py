"""Fuzzing the JSON-RPC classifier and the id rewriting the relay does on every line (case 36).

Testing policy: hypothesis with a fixed seed and bounded example counts. Lines are built the way
hostile or sloppy peers write them: members in any order, any whitespace, ids of every JSON type,
nested objects that carry their own "id", duplicate top-level keys, keys spelled with \\u escapes,
and byte-level damage on top. Two oracles written from the rules rather than from the code:

- classification (JSON-RPC 2.0 as lazyd/core/relay/jsonrpc.py's docstring states it) is recomputed from
  the object the standard parser sees, and `parse` must agree, never raising;
- after `with_id(msg, new)` a standard parser must see exactly the original object with its id
  replaced by `new`: whatever shortcut the rewrite takes (splicing bytes instead of
  re-serialising), nothing else may change and the old id must not survive anywhere a parser
  would read it. This oracle found that a leading id followed by a duplicate "id" key was
  spliced, letting a client choose the id the server sees (regression test below).
"""

from __future__ import annotations

import json
import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from lazyd.core.relay import jsonrpc as rpc
from lazyd.core.relay.jsonrpc import Invalid, Kind, Message

_ID_VALUES: list[Any] = [0, 1, -7, 2**53, 2**70, "1", "", "id", 'a"b', "é", None, True, 1.5, [], {}]
_PAYLOADS: list[Any] = [{}, {"id": 3}, {"a": {"id": "x"}, "b": [1, {"id": None}]}, "id", [{"id": 1}], 1, None,
                        {"text": "\u00e9\u2028"}, {"deep": [[[{"k": "v"}]]]}]
_METHODS: list[Any] = ["tools/call", "ping", "notifications/cancelled", "", 5, None]


def _key(name: str, escaped: int) -> str:
    """A JSON object key: plain, or with some letters written as \\u escapes."""
    if escaped == 0:
        return json.dumps(name)
    return '"' + "".join(f"\\u{ord(c):04x}" if (escaped >> i) & 1 else c for i, c in enumerate(name)) + '"'


def build_line(members: list[tuple[str, int, Any]], spaces: list[str]) -> bytes:
    """A JSON object written member by member, so that duplicate keys and escapes survive."""
    parts = []
    for index, (name, escaped, value) in enumerate(members):
        space = spaces[index % len(spaces)] if spaces else ""
        parts.append(f"{space}{_key(name, escaped)}{space}:{space}{json.dumps(value, ensure_ascii=False)}")
    return ("{" + ",".join(parts) + "}").encode()


_members = st.lists(
    st.tuples(
        st.sampled_from(["jsonrpc", "id", "id", "method", "params", "result", "error", "other"]),
        st.sampled_from([0, 0, 0, 1, 2, 3]),  # mostly plain keys; sometimes "\\u0069d", "i\\u0064", both
        st.one_of(st.sampled_from(_ID_VALUES), st.sampled_from(_PAYLOADS), st.sampled_from(_METHODS),
                  st.just("2.0")),
    ),
    min_size=1, max_size=7,
)
_spaces = st.lists(st.sampled_from(["", " ", "\t ", "\r"]), max_size=3)  # no newline: it ends a line


def expected_kind(obj: object) -> Kind | None:
    """JSON-RPC 2.0 as lazyd applies it; None for anything that is not a message."""
    if not isinstance(obj, dict):
        return None
    if "id" in obj and not (isinstance(obj["id"], str) or type(obj["id"]) is int and -(2**63) <= obj["id"] < 2**64):
        return None  # an id is a string or an integer msgpack carries
    method = obj.get("method")
    if method is not None:
        return Kind.REQUEST if "id" in obj and isinstance(method, str) else Kind.NOTIFICATION if isinstance(method, str) else None
    if "id" in obj and ("result" in obj or "error" in obj):
        return Kind.RESPONSE
    return None


def check_line(line: bytes, new_id: rpc.JsonId) -> None:
    msg = rpc.parse(line)  # never raises, whatever the bytes
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):
        assert isinstance(msg, Invalid) and msg.reason in ("not JSON", "too deep")
        return
    kind = expected_kind(obj)
    if kind is None:
        assert isinstance(msg, Invalid), (line, msg)
        return
    assert isinstance(msg, Message), (line, msg)
    assert msg.kind is kind and msg.obj == obj
    assert msg.id == obj.get("id") and type(msg.id) is type(obj.get("id"))
    if msg.id is None:
        return
    rewritten = rpc.with_id(msg, new_id)
    assert b"\n" not in rewritten
    seen = json.loads(rewritten)
    assert seen["id"] == new_id and type(seen["id"]) is type(new_id), (line, rewritten)
    assert {k: v for k, v in seen.items() if k != "id"} == {k: v for k, v in obj.items() if k != "id"}


@settings(derandomize=True, max_examples=1500, deadline=None, database=None)
@given(_members, _spaces, st.sampled_from([77, 2**40, "relay-1", "", "1"]))
def test_the_classifier_agrees_with_the_rules_and_a_rewritten_id_is_the_only_change_a_parser_sees(
    members: list[tuple[str, int, Any]], spaces: list[str], new_id: rpc.JsonId
) -> None:
    check_line(build_line(members, spaces), new_id)


@settings(derandomize=True, max_examples=800, deadline=None, database=None)
@given(_members, _spaces, st.integers(0, 2**32))
def test_damaged_lines_are_classified_without_raising_and_rewritten_correctly(
    members: list[tuple[str, int, Any]], spaces: list[str], seed: int
) -> None:
    rng = random.Random(seed)
    line = bytearray(build_line(members, spaces))
    for _ in range(rng.randint(1, 4)):
        where = rng.randint(0, len(line))
        choice = rng.randrange(3)
        if choice == 0 and where < len(line):
            line[where] = rng.choice(b'{}[]",:\\u0 1aid')
        elif choice == 1:
            line[where:where] = rng.choice([b'"id":1,', b',"id":2', b"\\u0069", b" ", b"\xff", b"\x00"])
        elif where < len(line):
            del line[where]
    new_id: rpc.JsonId = 77 if seed % 2 else "x"
    check_line(bytes(line), new_id)


def test_a_leading_id_followed_by_a_duplicate_id_key_is_never_the_one_rewritten() -> None:
    # Regression: the leading id was spliced and the duplicate left as it was, so a JSON parser
    # (which keeps the last one) saw the client's own id instead of the relay's.
    for line in (b'{"jsonrpc":"2.0","id":2,"method":"tools/call","id":2}',
                 b'{"id":2,"method":"tools/call","\\u0069d":2}',
                 b'{"id":2,"method":"tools/call","i\\u0064":2}',
                 b'{"id":2,"result":{},"id":2}'):
        msg = rpc.parse(line)
        assert isinstance(msg, Message)
        assert json.loads(rpc.with_id(msg, 77))["id"] == 77, line


def test_the_leading_id_is_still_spliced_when_nothing_after_it_could_be_an_id() -> None:
    line = b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"x","text":"\\u00e9"}}'
    msg = rpc.parse(line)
    assert isinstance(msg, Message)
    assert rpc.with_id(msg, 77) == line.replace(b'"id":2', b'"id":77')  # byte for byte: a splice
