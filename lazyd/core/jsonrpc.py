"""Classify one JSON-RPC line and build the few lines the relay writes itself.

The relay treats message payloads as opaque: it parses a line once (the stdlib's C parser is the
cheapest way to find the top-level `id`, `method` and the handful of fields it rewrites), reads the
envelope, and re-serialises only when it changes something. Everything else in the object is carried
through untouched.

Rules from JSON-RPC 2.0 and the MCP stdio transport (PROTOCOL.md §2-§3):
- request = `method` + `id`; notification = `method` without `id`; response = `id` + `result` or
  `error` without `method`.
- Ids are strings or integers and are returned exactly as received: `1` and `"1"` are different ids.
  An id that is null, a boolean or a float makes the message invalid (-32600).
- A line that is not JSON gets -32700 with a null id; valid JSON that is not a message gets -32600.
- Batches (a JSON array, 2025-03-26 only) are refused with -32600: no client we know of sends them
  over stdio and answering a batch needs an array reply, which would couple every path to them.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from typing import Any

JsonId = int | str
JsonObj = dict[str, Any]

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
# lazyd's own server-side errors, in the range JSON-RPC reserves for implementation-defined errors.
SERVER_UNAVAILABLE = -32000

_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


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

    @property
    def params(self) -> JsonObj:
        params = self.obj.get("params")
        return params if isinstance(params, dict) else {}


@dataclass(slots=True)
class Invalid:
    """A line that is not a valid message, with the error reply it deserves (None: drop silently)."""

    reply: bytes | None
    reason: str


def dumps(obj: Any) -> bytes:
    """Compact UTF-8 JSON, one line (JSON escapes every control character, so no raw newline)."""
    return _ENCODER.encode(obj).encode("utf-8")


def valid_id(value: object) -> bool:
    # bool is a subclass of int in Python: exclude it explicitly.
    return (isinstance(value, int) and not isinstance(value, bool)) or isinstance(value, str)


def parse(line: bytes) -> Message | Invalid:
    """Classify one line. Never raises for any input."""
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):
        return Invalid(error_line(None, PARSE_ERROR, "Parse error: the line is not JSON"), "not JSON")
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
    if method is not None:
        if not isinstance(method, str):
            reply = error_line(msg_id if has_id else None, INVALID_REQUEST, "Invalid Request: method must be a string")
            return Invalid(reply, "bad method")
        return Message(Kind.REQUEST if has_id else Kind.NOTIFICATION, obj, msg_id if has_id else None, method)
    if has_id and ("result" in obj or "error" in obj):
        return Message(Kind.RESPONSE, obj, msg_id, None)
    # An object with neither method nor result/error cannot be answered meaningfully if it has no id.
    return Invalid(
        error_line(msg_id if has_id else None, INVALID_REQUEST, "Invalid Request: no method, result or error"),
        "not a message",
    )


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
