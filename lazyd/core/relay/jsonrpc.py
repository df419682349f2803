"""Classify one JSON-RPC line and build the few lines the relay writes itself.

The relay treats message payloads as opaque: it parses a line once (the stdlib's C parser is the
cheapest way to find the top-level `id`, `method` and the handful of fields it rewrites), reads the
envelope, and re-serialises only when it changes something. Everything else in the object is carried
through untouched.

Rules from JSON-RPC 2.0 and the MCP stdio transport:
- request = `method` + `id`; notification = `method` without `id`; response = `id` + `result` or
  `error` without `method`.
- A line is read by lazyd/protocol/jsonline.py, as every reader in lazyd reads one: what `json.loads` makes
  of it (the last of repeated keys wins), nesting bounded.
- Ids are strings or integers and are returned exactly as received: `1` and `"1"` are different ids.
  An id that is null, a boolean, a fraction or an integer beyond what msgpack carries (-2^63 to
  2^64-1) makes the message invalid (-32600, under a null id).
- A line that is not JSON, or nests deeper than the bound, gets -32700 with a null id; valid JSON
  that is not a message gets -32600.
- Batches (a JSON array, 2025-03-26 only) are refused with -32600: no client we know of sends them
  over stdio and answering a batch needs an array reply, which would couple every path to them.
- Whatever `parse` accepts, `dumps` can write back: the relay re-serialises every message it
  rewrites, so a line it cannot write must be refused here rather than raise later. That is why
  nesting is bounded (lazyd/protocol/jsonline.py), and why `NaN`/`Infinity` (which Python peers emit) and lone surrogate escapes
  (which JavaScript peers emit) are carried as received.
"""

from __future__ import annotations

import enum
import json
import re
from dataclasses import dataclass
from typing import Any

from lazyd.protocol import jsonline
from lazyd.protocol.jsonline import LARGE_LINE_BYTES as LARGE_LINE_BYTES
from lazyd.protocol.jsonline import MAX_NESTING_DEPTH as MAX_NESTING_DEPTH
from lazyd.protocol.jsonline import valid_id as valid_id

JsonId = int | str
JsonObj = dict[str, Any]

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
# lazyd's own server-side errors, in the range JSON-RPC reserves for implementation-defined errors.
SERVER_UNAVAILABLE = -32000

# allow_nan: the relay never creates a non-finite number itself; it carries the ones a peer sent.
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=True)
# For the rare object holding a lone surrogate, which UTF-8 cannot carry but a \uXXXX escape can.
_ASCII_ENCODER = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"), allow_nan=True)


class Kind(enum.Enum):
    REQUEST = "request"
    NOTIFICATION = "notification"
    RESPONSE = "response"


@dataclass(slots=True)
class Message:
    """One parsed message. `obj` is the whole decoded object; the relay mutates it only to rewrite."""

    kind: Kind
    obj: JsonObj
    id: JsonId | None
    method: str | None
    raw: bytes = b""  # the line as received, for rewrites that splice instead of re-serialising

    @property
    def params(self) -> JsonObj:
        params = self.obj.get("params")
        return params if isinstance(params, dict) else {}


@dataclass(slots=True)
class Invalid:
    """A line that is not a valid message, with the error reply it deserves (None: drop silently)."""

    reply: bytes | None
    reason: str
    id: JsonId | None = None  # the id the reply answers, when the line had a usable one
    # A response nested too deep to relay: the relay id it answers, when the parser could finish
    # it, so that its request still gets an answer (an error) rather than none.
    deep_response_id: int | None = None


def dumps(obj: Any) -> bytes:
    """Compact UTF-8 JSON, one line (JSON escapes every control character, so no raw newline)."""
    try:
        return _ENCODER.encode(obj).encode("utf-8")
    except UnicodeEncodeError:
        return _ASCII_ENCODER.encode(obj).encode("ascii")


def id_bytes(value: JsonId) -> bytes:
    """An id as `dumps` spells it, without the encoder for an integer (the relay's own ids, and
    most clients'): two of these per relayed message, where the encoder's call costs more than
    the splice it serves."""
    if type(value) is int:
        return b"%d" % value
    return dumps(value)


def parse(line: bytes) -> Message | Invalid:
    """Classify one line. Never raises for any input."""
    obj, refused = jsonline.read(line)
    if refused == jsonline.TOO_DEEP:
        reply = error_line(None, PARSE_ERROR, f"Parse error: nested deeper than {MAX_NESTING_DEPTH} levels")
        deep = obj.get("id") if isinstance(obj, dict) and "method" not in obj else None
        return Invalid(reply, refused, deep_response_id=deep if type(deep) is int else None)
    if refused is not None:
        return Invalid(error_line(None, PARSE_ERROR, "Parse error: the line is not JSON"), refused)
    if isinstance(obj, list):
        return Invalid(
            error_line(None, INVALID_REQUEST, "Invalid Request: JSON-RPC batches are not supported"),
            "batch",
        )
    if not isinstance(obj, dict):
        return Invalid(error_line(None, INVALID_REQUEST, "Invalid Request: not an object"), "not an object")
    method = obj.get("method")
    has_id = "id" in obj
    msg_id = obj.get("id")
    if has_id and not valid_id(msg_id):
        return Invalid(
            error_line(None, INVALID_REQUEST, "Invalid Request: id must be a string or an integer"),
            "bad id",
        )
    reply_id = msg_id if has_id else None
    if method is not None and not isinstance(method, str):
        reply = error_line(reply_id, INVALID_REQUEST, "Invalid Request: method must be a string")
        return Invalid(reply, "bad method", reply_id)
    if method is not None:
        kind = Kind.REQUEST if has_id else Kind.NOTIFICATION
    elif has_id and ("result" in obj or "error" in obj):
        kind = Kind.RESPONSE
    else:
        # An object with neither method nor result/error cannot be answered meaningfully if it has no id.
        reply = error_line(reply_id, INVALID_REQUEST, "Invalid Request: no method, result or error")
        return Invalid(reply, "not a message", reply_id)
    return Message(kind, obj, reply_id, method if isinstance(method, str) else None, line)


# The two places real serialisers put a top-level id: first (after an optional "jsonrpc" member,
# as the python SDK writes) or last (as the TypeScript SDK writes). Matching only these shapes is
# what makes a splice safe: a nested "id" can be neither right after the opening brace nor right
# before the closing one.
_ID_FIRST = re.compile(rb'\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"id"\s*:\s*')
_AFTER_VALUE = re.compile(rb"\s*[,}]")
_ID_SPELLINGS = (b'"id"', b"\\u0069", b"\\u0064")
_TAIL_BYTES = 256
# The id as the last member: one pattern for every id (a pattern built per id missed re's cache
# with each new id and cost a regex compile, ~100 us, per relayed request). The value is any JSON
# number or string; with_id splices only when it is spelled exactly as we would spell the id.
_ID_LAST = re.compile(rb',\s*"id"\s*:\s*(-?[0-9][0-9.eE+-]*|"(?:[^"\\]|\\.)*")\s*\}\s*\Z')


def _no_id_key_after(line: bytes, at: int) -> bool:
    """Whether no key spelled "id" can follow `at` in `line`. Parsers keep the last of repeated
    keys, so a leading id is the id only when no other key spelled "id" follows ("i" and "d" may
    also be written \\u0069 and \\u0064): splicing the first of two would let a client smuggle an
    id of its choice past the relay, or show a client a relay id it never sent. A nested "id"
    counts too (telling it apart takes a parse): such a line is rewritten from its parse."""
    # Each key starts with a quotation mark: where few follow (a long plain string's), one-byte
    # finds (memchr) visit each; where many do, one find of the spelling walks the rest (a
    # multi-byte find runs at a fraction of memchr's speed).
    quote = line.find(b'"', at)
    for _ in range(_FEW_QUOTES):
        if quote < 0:
            break
        if line.startswith(b'id"', quote + 1):
            return False
        quote = line.find(b'"', quote + 1)
    else:
        if line.find(b'"id"', quote) >= 0:
            return False
    # The escaped spellings need a backslash: one memchr finds whether there is any.
    return line.find(b"\\", at) < 0 or all(line.find(spelling, at) < 0 for spelling in _ID_SPELLINGS[1:])


_FEW_QUOTES = 64


def with_id(msg: Message, new_id: JsonId) -> bytes:
    """The message's line with its top-level id replaced by `new_id`.

    The id is spliced into the received bytes when it stands in one of the two shapes above and
    is spelled as we would spell it; otherwise the object is re-serialised. A splice keeps a
    large payload from being encoded again on the relay's hot path (it halves the relay's cost of
    a 1 MiB result).
    """
    line, old = msg.raw, id_bytes(msg.id) if msg.id is not None else b"null"
    new = id_bytes(new_id)
    if line:
        first = _ID_FIRST.match(line)
        after = first.end() + len(old) if first is not None else 0
        if (first is not None and line.startswith(old, first.end()) and _AFTER_VALUE.match(line, after)
                and _no_id_key_after(line, after)):
            return _spliced(line, first.end(), new, after)
        tail_start = max(0, len(line) - _TAIL_BYTES)
        last = _ID_LAST.search(line, tail_start)
        if last is not None and last.group(1) == old:
            return _spliced(line, last.start(1), new, last.end(1))
    msg.obj["id"] = new_id
    return dumps(msg.obj)


# A result as the two SDKs write it: the id (an integer: relay ids always are) before "result"
# at the start, or "result" first and the id last. Anything else is parsed in full.
_RESULT_FIRST = re.compile(rb'\s*\{\s*"jsonrpc"\s*:\s*"2\.0"\s*,\s*"id"\s*:\s*([0-9]+)\s*,\s*"result"\s*:')
_RESULT_OPENS = re.compile(rb'\s*\{\s*"result"\s*:')
_ID_CLOSES = re.compile(rb',\s*"jsonrpc"\s*:\s*"2\.0"\s*,\s*"id"\s*:\s*([0-9]+)\s*\}\s*\Z')


def large_result_id(line: bytes) -> int | None:
    """The relay id of a large line that is plainly a successful response, without parsing it.

    Decoding a megabyte of result only to find its id costs more than everything else the relay
    does with it; the shapes matched here are exactly what the python and TypeScript SDKs write,
    with the id at the top level by construction (right after the opening brace, or right before
    the closing one). The leading id is taken only when no other key spelled "id" follows it
    (`_no_id_key_after`: a parser keeps the last); the closing one is the last by construction. A
    line that is not valid JSON past the matched parts is passed on as the server wrote it, as a
    direct connection would have.
    """
    if len(line) < LARGE_LINE_BYTES:
        return None
    first = _RESULT_FIRST.match(line)
    if first is not None:
        if _no_id_key_after(line, first.end(1)) or _result_is_last(line, first.end()):
            return int(first.group(1))
        return None
    if _RESULT_OPENS.match(line):
        last = _ID_CLOSES.search(line, len(line) - _TAIL_BYTES)
        if last is not None:
            return int(last.group(1))
    return None


def _result_is_last(line: bytes, start: int) -> bool:
    """Whether the result whose value starts at `start` ends the object: then its members are the
    three `_RESULT_FIRST` matched, and the id before the result is the only one, whatever "id"
    keys the result holds. Read by the JSON scanner from `start` (one parse of the result, no
    object written anew), for a result a key spelled "id" follows (a listing of items with ids)."""
    try:
        # As json.loads reads bytes; the matched start is ASCII, so its offset is the text's too.
        text = line.decode("utf-8", "surrogatepass")
        spaces = _SPACES.match(text, start)
        assert spaces is not None  # "*": it always matches
        _, end = _DECODER.raw_decode(text, spaces.end())
    except (ValueError, RecursionError):  # not JSON (UnicodeDecodeError is a ValueError), or too deep
        return False
    return text[end:].strip(" \t\r\n") == "}"


_DECODER = json.JSONDecoder()
_SPACES = re.compile(r"[ \t\r\n]*")


def splice_result_id(line: bytes, relay_id: int, client_id: JsonId) -> bytes:
    """`line` (matched by `large_result_id`) with the relay id replaced by the client's id."""
    old, new = str(relay_id).encode(), id_bytes(client_id)
    first = _RESULT_FIRST.match(line)
    if first is not None:
        assert first.group(1) == old
        return _spliced(line, first.start(1), new, first.end(1))
    last = _ID_CLOSES.search(line, len(line) - _TAIL_BYTES)
    assert last is not None and last.group(1) == old
    return _spliced(line, last.start(1), new, last.end(1))


def _spliced(line: bytes, start: int, new: bytes, end: int) -> bytes:
    """`line` with `line[start:end]` replaced by `new`. A large line is copied once: slicing the
    two sides and adding them up made three fresh copies, each a megabyte of page faults for a
    large result (~0.8 ms against ~25 us); a small one is quicker sliced."""
    if len(line) < _JOIN_ABOVE_BYTES:
        return line[:start] + new + line[end:]
    view = memoryview(line)
    return b"".join((view[:start], new, view[end:]))


_JOIN_ABOVE_BYTES = 4096


def error_obj(msg_id: JsonId | None, code: int, message: str, data: Any = None) -> JsonObj:
    error: JsonObj = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": msg_id, "error": error}


def error_line(msg_id: JsonId | None, code: int, message: str, data: Any = None) -> bytes:
    return dumps(error_obj(msg_id, code, message, data))


def result_line(msg_id: JsonId, result: Any) -> bytes:
    return dumps({"jsonrpc": "2.0", "id": msg_id, "result": result})


def request_line(msg_id: JsonId, method: str, params: JsonObj | None = None) -> bytes:
    obj: JsonObj = {"jsonrpc": "2.0", "id": msg_id, "method": method}
    if params is not None:
        obj["params"] = params
    return dumps(obj)


def notification_line(method: str, params: JsonObj | None = None) -> bytes:
    obj: JsonObj = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        obj["params"] = params
    return dumps(obj)
