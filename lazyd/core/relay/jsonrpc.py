"""Classify one JSON-RPC line and build the few lines the relay writes itself.

The relay parses a line once (lazyd/protocol/jsonline.py), reads the envelope, and writes the
line anew only when it changes something other than the id, which it splices into the received
bytes (`with_id`). Everything else in the object is carried through untouched.

Rules from JSON-RPC 2.0 and the MCP stdio transport:
- request = `method` + `id`; notification = `method` without `id`; response = `id` + `result` or
  `error` without `method`.
- A line is what `json.loads` makes of it (the last of repeated keys wins), nesting bounded.
- Ids are strings or integers and are returned exactly as received: `1` and `"1"` are different ids.
  An id that is null, a boolean, a fraction or an integer beyond what msgpack carries (-2^63 to
  2^64-1) makes the message invalid (-32600, under a null id).
- A line that is not JSON, or nests deeper than the bound, gets -32700 with a null id; valid JSON
  that is not a message gets -32600.
- Batches (a JSON array, 2025-03-26 only) are refused with -32600: no client we know of sends them
  over stdio and answering a batch needs an array reply, which would couple every path to them.
- Whatever `parse` accepts, `dumps` can write back, so a line it cannot write is refused here
  rather than raise later: nesting is bounded, and `NaN`/`Infinity` (which Python peers emit) and
  lone surrogate escapes (which JavaScript peers emit) are carried as received.
"""

from __future__ import annotations

import enum
import json
import re
from dataclasses import dataclass
from typing import Any

from lazyd.protocol import jsonline
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
        reply = error_line(None, INVALID_REQUEST, "Invalid Request: JSON-RPC batches are not supported")
        return Invalid(reply, "batch")
    if not isinstance(obj, dict):
        return Invalid(error_line(None, INVALID_REQUEST, "Invalid Request: not an object"), "not an object")
    method = obj.get("method")
    has_id = "id" in obj
    msg_id = obj.get("id")
    if has_id and not valid_id(msg_id):
        reply = error_line(None, INVALID_REQUEST, "Invalid Request: id must be a string or an integer")
        return Invalid(reply, "bad id")
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
# before the closing one. One pattern for every id: a pattern built per id would be compiled anew
# for each request.
_ID_FIRST = re.compile(rb'\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"id"\s*:\s*')
_AFTER_VALUE = re.compile(rb"\s*[,}]")
_ID_LAST = re.compile(rb',\s*"id"\s*:\s*(-?[0-9][0-9.eE+-]*|"(?:[^"\\]|\\.)*")\s*\}\s*\Z')
_TAIL_BYTES = 256
_FEW_QUOTES = 64


def _no_id_key_after(line: bytes, at: int) -> bool:
    """Whether no key spelled "id" follows `at` in the top-level object of `line`. Parsers keep
    the last of repeated keys, so a leading id is the id only when no other follows: splicing the
    first of two would let a client smuggle an id of its choice past the relay."""
    # One-byte finds (memchr) from quotation mark to quotation mark while few follow (a long plain
    # string's); a multi-byte find walks a megabyte many times slower. With no backslash, no key is
    # escaped.
    quote = line.find(b'"', at)
    for _ in range(_FEW_QUOTES):
        if quote < 0:
            if line.find(b"\\", at) < 0:
                return True
            break
        if line.startswith(b'id"', quote + 1):
            break
        quote = line.find(b'"', quote + 1)
    # A possible "id" key (nested ones too, or escaped): the JSON scanner reads the top-level members.
    text = line[at:].decode("utf-8", "surrogatepass")
    last = 0
    for key, _, last in jsonline.members(text, 0):
        if key == "id":
            return False
    return text[last:].strip(" \t\r\n") == "}"


def with_id(msg: Message, new_id: JsonId) -> bytes:
    """The message's line with its top-level id replaced by `new_id`: spliced into the received
    bytes where `spliced_id` can (no large payload encoded again), else the object re-serialised."""
    spliced = spliced_id(msg.raw, dumps(msg.id), dumps(new_id)) if msg.raw else None
    if spliced is not None:
        return spliced
    msg.obj["id"] = new_id
    return dumps(msg.obj)


def spliced_id(line: bytes, old: bytes, new: bytes) -> bytes | None:
    """`line` with its top-level id, spelled `old`, spelled `new` instead, when the id stands in
    one of the two shapes above and is the only top-level one; else None."""
    first = _ID_FIRST.match(line)
    after = first.end() + len(old) if first is not None else 0
    if (first is not None and line.startswith(old, first.end()) and _AFTER_VALUE.match(line, after)
            and _no_id_key_after(line, after)):
        return _spliced(line, first.end(), new, after)
    last = _ID_LAST.search(line, max(0, len(line) - _TAIL_BYTES))
    if last is not None and last.group(1) == old:
        return _spliced(line, last.start(1), new, last.end(1))
    return None


LARGE_RESULT_BYTES = 64 * 1024
# A result as the two SDKs write it: the id (an integer: relay ids always are) before "result" at
# the start, or "result" first and the id last.
_RESULT_FIRST = re.compile(rb'\s*\{\s*"jsonrpc"\s*:\s*"2\.0"\s*,\s*"id"\s*:\s*([0-9]+)\s*,\s*"result"\s*:')
_RESULT_OPENS = re.compile(rb'\s*\{\s*"result"\s*:')
_ID_CLOSES = re.compile(rb',\s*"jsonrpc"\s*:\s*"2\.0"\s*,\s*"id"\s*:\s*([0-9]+)\s*\}\s*\Z')


def large_result_id(line: bytes) -> int | None:
    """The relay id a large line shaped as the SDKs write a successful response carries, found
    without parsing the line (a megabyte's parse costs more than all else the relay does with it);
    None for any other line. Its answer is put back by `spliced_id`, which judges whether that id
    is the only top-level one. A line that is not JSON past the matched parts goes on as the server
    wrote it, as it would on a direct connection."""
    if len(line) < LARGE_RESULT_BYTES:
        return None
    found = _RESULT_FIRST.match(line)
    if found is None and _RESULT_OPENS.match(line):
        found = _ID_CLOSES.search(line, len(line) - _TAIL_BYTES)
    return int(found.group(1)) if found is not None else None


def _spliced(line: bytes, start: int, new: bytes, end: int) -> bytes:
    """`line` with `line[start:end]` replaced by `new`, copied once (slices added up are three copies)."""
    view = memoryview(line)
    return b"".join((view[:start], new, view[end:]))


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
