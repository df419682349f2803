"""Plain data in and out: the checked readers and the writers the parts' `to_state` use.

The relay core's parts write their state as JSON-ready values for a successor daemon
(lazyd/daemon/upgrade/state.py) to carry on exactly where it stopped: `dump` writes a value by its
declared type and `load` reads it back checked against that type, a dataclass field by field. JSON-RPC
ids keep their type (`1` is not `"1"`); a map whose keys are not strings is a list of rows in the
map's order (a queue's order is behaviour), each the key's items then the value's (a tuple's
items, else the value); a message keeps its received bytes (the relay splices ids into them),
written as `surrogateescape` text. Reading raises `ValueError` naming the field: a state this code
did not write is refused whole.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import MISSING, fields, is_dataclass
from enum import Enum
from functools import cache
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


def raw_bytes(value: object, what: str) -> bytes:
    return text(value, what).encode("utf-8", "surrogateescape")


def dump(value: Any, kind: Any = None) -> Any:
    """`value` as plain data, by `kind` (its declared type) where one is given: a dataclass as an
    object of its fields, each by its type; a map whose keys are not strings as rows; a set sorted;
    an enum as its value, bytes as `surrogateescape` text."""
    if isinstance(value, _PLAIN):
        return value
    known = _FIELDS.get(type(value))
    if known is not None or is_dataclass(value):
        return {name: field if isinstance(field := getattr(value, name), _PLAIN) else dump(field, hint)
                for name, hint in known or _fields_of(type(value))}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    if get_origin(kind) in (Union, UnionType):
        kind = next(a for a in get_args(kind) if a is not type(None))  # `value` is not None
    args = get_args(kind)
    if isinstance(value, dict):
        if not args or args[1] in (Any, object):
            return value  # JSON (a message, a client's params): written as it is
        if args[0] is str:
            return {k: dump(v, args[1]) for k, v in value.items()}
        key_kinds, value_kinds = _tuple_kinds(args[0]), _tuple_kinds(args[1])
        return [[*_items(k, args[0], key_kinds), *_items(v, args[1], value_kinds)] for k, v in value.items()]
    if isinstance(value, (set, frozenset)):
        return sorted(dump(v, args[0] if args else None) for v in value)
    if isinstance(value, (list, tuple)):
        if args == (Any,):
            return value  # JSON items (a listing's): written as they are
        kinds = _tuple_kinds(kind) or [args[0] if args else None] * len(value)
        return [dump(v, k) for v, k in zip(value, kinds)]
    return value


# Written as they are: most fields are these, and the standby state is rewritten as things change.
_PLAIN = (str, int, float, type(None))


def _items(value: Any, kind: Any, kinds: list[Any] | None) -> list[Any]:
    """A row's part for one key or value: a tuple's items (`kinds`: their types), else the value."""
    if kinds:
        return [v if isinstance(v, _PLAIN) else dump(v, k) for v, k in zip(value, kinds)]
    return [value if isinstance(value, _PLAIN) else dump(value, kind)]


def _tuple_kinds(kind: Any) -> list[Any] | None:
    """The item types of a fixed-length tuple type (a NamedTuple's fields too), else None."""
    if isinstance(kind, type) and issubclass(kind, tuple):
        return _named_kinds(kind)
    args = get_args(kind)
    return list(args) if get_origin(kind) is tuple and args and args[-1] is not Ellipsis else None


@cache
def _named_kinds(kind: type) -> list[Any]:
    """A NamedTuple's field types, resolved once (a state holds many rows of one)."""
    return list(get_type_hints(kind).values())


def dump_attrs(owner: object, kinds: Mapping[str, Any], now: float = 0.0) -> JsonObj:
    """The attributes of `owner` that `kinds` names, each by its type, written under its name
    without a leading underscore: a part's state. `AT` marks a monotonic time, written as seconds
    from `now` (the clocks of two processes differ)."""
    out: JsonObj = {}
    for name, kind in kinds.items():
        value = getattr(owner, name)
        out[name.lstrip("_")] = (None if value is None else value - now) if kind is AT else dump(value, kind)
    return out


def load_attrs(owner: object, kinds: Mapping[str, Any], value: object, what: str, now: float = 0.0) -> None:
    """Set the attributes of `owner` from what `dump_attrs` wrote, a time moved to this clock's
    `now`; a key absent (a predecessor did not write it) leaves its attribute as it is."""
    state = obj(value, what)
    for name, kind in kinds.items():
        key = name.lstrip("_")
        if key in state and kind is AT:
            offset = opt_number(state[key], f"{what}.{key}")
            setattr(owner, name, None if offset is None else now + offset)
        elif key in state:
            setattr(owner, name, load(kind, state[key], f"{what}.{key}"))


# A monotonic time (float | None) in the kinds of `dump_attrs` and `load_attrs`.
AT = object()


def load(kind: Any, value: object, what: str) -> Any:
    """What `dump` wrote, checked against `kind` (a field's type) all the way down. A
    dataclass field absent from the object takes its default: a field added later reads as that
    from a state written before it."""
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
    if isinstance(kind, type) and is_dataclass(kind):
        state = obj(value, what)
        return kind(**{name: load(hint, state.get(name), f"{what}.{name}") for name, hint in _fields_of(kind)
                       if name in state or name not in _DEFAULTED[kind]})
    if isinstance(kind, type) and issubclass(kind, Enum):
        return enum_value(kind, value, what)
    positions = _tuple_kinds(kind)
    if positions is not None:
        got = items(value, what)
        if len(got) != len(positions):
            raise ValueError(f"{what}: expected {len(positions)} items")
        loaded = [load(k, v, what) for k, v in zip(positions, got)]
        return kind(*loaded) if isinstance(kind, type) else tuple(loaded)
    if origin in (list, tuple, set, frozenset):
        if args[0] in (Any, object):
            return items(value, what)
        return origin(load(args[0], v, what) for v in items(value, what))
    if origin is Literal:
        if value not in args:
            raise ValueError(f"{what}: unknown value {value!r}")
        return value
    if origin is dict and args[1] in (Any, object):
        return obj(value, what)
    if origin is dict and args[0] is str:
        return {text(k, what): load(args[1], v, what) for k, v in obj(value, what).items()}
    if origin is dict:
        return dict(_row_entry(args, r, what) for r in items(value, what))
    return _SCALARS[kind](value, what)


def _row_entry(args: tuple[Any, Any], value: object, what: str) -> tuple[Any, Any]:
    """One row of a map whose keys are not strings (see `dump`): its key and its value."""
    key_kinds, value_kinds = _tuple_kinds(args[0]), _tuple_kinds(args[1])
    width = len(key_kinds) if key_kinds else 1
    got = items(value, what)
    if len(got) != width + (len(value_kinds) if value_kinds else 1):
        raise ValueError(f"{what}: a row of the wrong length")
    key = load(args[0], got[:width] if key_kinds else got[0], what)
    return key, load(args[1], got[width:] if value_kinds else got[width], what)


def _fields_of(kind: Any) -> tuple[tuple[str, Any], ...]:
    """A dataclass's fields and their types, resolved once (a state holds many records of a kind).
    A field its constructor does not take is derived from the others, not state."""
    known = _FIELDS.get(kind)
    if known is None:
        hints = get_type_hints(kind)
        kept = [f for f in fields(kind) if f.init]
        known = _FIELDS[kind] = tuple((f.name, hints[f.name]) for f in kept)
        _DEFAULTED[kind] = frozenset(f.name for f in kept
                                     if f.default is not MISSING or f.default_factory is not MISSING)
    return known


_FIELDS: dict[type, tuple[tuple[str, Any], ...]] = {}
_DEFAULTED: dict[type, frozenset[str]] = {}


def _as_is(value: object, what: str) -> object:
    return value


_SCALARS: dict[Any, Callable[[object, str], Any]] = {
    str: text, int: integer, float: number, bool: flag, bytes: raw_bytes, Any: _as_is, object: _as_is}
