"""Plain data in and out: the checked readers and the writers the parts' `to_state` use.

The relay core's parts write their state as JSON-ready values for a successor daemon
(lazyd/daemon/upgrade/state.py) to carry on exactly where it stopped. JSON-RPC ids keep their type
(`1` is not `"1"`); maps with keys that are not strings are lists of `[key..., value]` rows in the
map's order (a queue's order is behaviour); a message keeps its received bytes (the relay splices
ids into them), written as `surrogateescape` text. Reading checks every type and raises
`ValueError` naming the field: a state this code did not write is refused whole.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from lazyd.core.eras.asker import Asker
from lazyd.core.relay.jsonrpc import JsonId, JsonObj, Kind, Message, valid_id

T = TypeVar("T")


def obj(value: object, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{what}: expected an object")
    return value


def items(value: object, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError(f"{what}: expected a list")
    return value


def text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what}: expected a string")
    return value


def opt_text(value: object, what: str) -> str | None:
    return None if value is None else text(value, what)


def integer(value: object, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{what}: expected an integer")
    return value


def opt_integer(value: object, what: str) -> int | None:
    return None if value is None else integer(value, what)


def number(value: object, what: str) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise ValueError(f"{what}: expected a number")
    return float(value)


def opt_number(value: object, what: str) -> float | None:
    return None if value is None else number(value, what)


def flag(value: object, what: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{what}: expected true or false")
    return value


def opt_json_obj(value: object, what: str) -> JsonObj | None:
    return None if value is None else obj(value, what)


def json_id(value: object, what: str) -> JsonId:
    if not valid_id(value):
        raise ValueError(f"{what}: expected a JSON-RPC id (a string or an integer)")
    assert isinstance(value, (int, str))
    return value


def opt_json_id(value: object, what: str) -> JsonId | None:
    return None if value is None else json_id(value, what)


def enum_value(kind: Callable[[Any], T], value: object, what: str) -> T:
    try:
        return kind(value)
    except ValueError:
        raise ValueError(f"{what}: unknown value {value!r}") from None


def raw_text(data: bytes) -> str:
    """Bytes as text that round-trips exactly (see the module docstring)."""
    return data.decode("utf-8", "surrogateescape")


def raw_bytes(value: object, what: str) -> bytes:
    return text(value, what).encode("utf-8", "surrogateescape")


def message_state(msg: Message) -> JsonObj:
    return {"kind": msg.kind.value, "obj": msg.obj, "id": msg.id, "method": msg.method, "raw": raw_text(msg.raw)}


def message_from(value: object, what: str) -> Message:
    state = obj(value, what)
    return Message(enum_value(Kind, state.get("kind"), f"{what}.kind"), obj(state.get("obj"), f"{what}.obj"),
                   opt_json_id(state.get("id"), f"{what}.id"), opt_text(state.get("method"), f"{what}.method"),
                   raw_bytes(state.get("raw"), f"{what}.raw"))


def asker_state(asker: Asker | None) -> JsonObj | None:
    if asker is None:
        return None
    return {"version": asker.version, "client_info": asker.client_info, "capabilities": asker.capabilities,
            "log_level": asker.log_level}


def asker_from(value: object, what: str) -> Asker | None:
    if value is None:
        return None
    state = obj(value, what)
    return Asker(text(state.get("version"), f"{what}.version"), obj(state.get("client_info"), f"{what}.client_info"),
                 obj(state.get("capabilities"), f"{what}.capabilities"),
                 opt_text(state.get("log_level"), f"{what}.log_level"))
