"""Plain data in and out: the checked readers and the writers the parts' `to_state` use.

The relay core's parts write their state as JSON-ready values for a successor daemon
(lazyd/daemon/upgrade/state.py) to carry on exactly where it stopped. JSON-RPC ids keep their type
(`1` is not `"1"`); maps with keys that are not strings are lists of `[key..., value]` rows in the
map's order (a queue's order is behaviour); a message keeps its received bytes (the relay splices
ids into them), written as `surrogateescape` text. Reading checks every type and raises
`ValueError` naming the field: a state this code did not write is refused whole. A dataclass is
written by `dump` (or `row`) and read by `load`, each field by its declared type.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields, is_dataclass
from enum import Enum
from types import UnionType
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

from lazyd.core.relay.jsonrpc import JsonId, JsonObj, valid_id

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


def dump(value: Any) -> Any:
    """A dataclass as an object of its fields, recursively; an enum as its value, bytes as `raw_text`."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, bytes):
        return raw_text(value)
    if isinstance(value, (list, tuple)):
        return [dump(v) for v in value]
    if is_dataclass(value):
        return {name: dump(getattr(value, name)) for name, _ in _fields_of(type(value))}
    return value


# Written as they are (the standby state is rewritten as things change: these go first). A dict
# field holds JSON (a message, a client's params) and is not walked.
_PLAIN = (str, int, float, type(None), dict)


def row(value: Any) -> list[Any]:
    """A dataclass as the list of its fields in order (a compact form `load` also reads)."""
    return [dump(getattr(value, name)) for name, _ in _fields_of(type(value))]


def load(kind: Any, value: object, what: str) -> Any:
    """What `dump` or `row` wrote, checked against `kind` (a field's type) all the way down."""
    args = get_args(kind)
    origin = get_origin(kind)
    if origin in (Union, UnionType):
        if value is None and type(None) in args:
            return None
        kinds = [a for a in args if a is not type(None)]
        if set(kinds) == {int, str}:
            return json_id(value, what)
        (kind,) = kinds
        return load(kind, value, what)
    if isinstance(kind, type) and is_dataclass(kind) and isinstance(value, list):
        names = [f.name for f in fields(kind)]
        if len(value) != len(names):
            raise ValueError(f"{what}: expected {len(names)} items")
        return load(kind, dict(zip(names, value)), what)
    if isinstance(kind, type) and is_dataclass(kind):
        state = obj(value, what)
        return kind(**{name: load(hint, state.get(name), f"{what}.{name}") for name, hint in _fields_of(kind)})
    if isinstance(kind, type) and issubclass(kind, Enum):
        return enum_value(kind, value, what)
    if origin is list:
        return [load(args[0], v, what) for v in items(value, what)]
    if origin is tuple and args[-1] is Ellipsis:
        return tuple(load(args[0], v, what) for v in items(value, what))
    if origin is tuple:
        row = items(value, what)
        if len(row) != len(args):
            raise ValueError(f"{what}: expected {len(args)} items")
        return tuple(load(a, v, what) for a, v in zip(args, row))
    if origin is Literal:
        if value not in args:
            raise ValueError(f"{what}: unknown value {value!r}")
        return value
    if origin is dict and args[1] in (Any, object):
        return obj(value, what)
    if origin is dict:
        return {text(k, what): load(args[1], v, what) for k, v in obj(value, what).items()}
    return _SCALARS[kind](value, what)


def _fields_of(kind: Any) -> tuple[tuple[str, Any], ...]:
    """A dataclass's fields and their types, resolved once (a state holds many records of a kind)."""
    known = _FIELDS.get(kind)
    if known is None:
        hints = get_type_hints(kind)
        known = _FIELDS[kind] = tuple((f.name, hints[f.name]) for f in fields(kind))
    return known


_FIELDS: dict[type, tuple[tuple[str, Any], ...]] = {}


def _as_is(value: object, what: str) -> object:
    return value


_SCALARS: dict[Any, Callable[[object, str], Any]] = {
    str: text, int: integer, float: number, bool: flag, bytes: raw_bytes, Any: _as_is, object: _as_is}
