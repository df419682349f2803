"""The frames of the lazyd wire protocol as typed objects (docs/protocol.md, "Frames").

A frame is decoded once, at the wire boundary: lazyd/protocol/wire.py unpacks the bytes and
``validate_walked`` checks the map with the tests each frame class declares for its fields and
builds one of these, so everything above reads ``hello.opts`` and a frame of the wrong type is a
type error. A hello or welcome of another wire version becomes ``ForeignHello``/``ForeignWelcome``
(only ``v`` read), so the skew can be named. Fields a frame does not know are kept in ``extra``
and sent on again; an absent optional field reads as its default and is left out when encoded.

Plain classes with ``__slots__``, not dataclasses: the shim imports this module at every start,
where dataclasses (with inspect) cost start-up time. Standard library only.
"""

from __future__ import annotations

from lazyd.errors import WireError

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the shim start-up time
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any, ClassVar, TypeAlias

    # A field's test of a decoded value, and what an error says the value must be.
    Check: TypeAlias = tuple[Callable[[object], bool], str]

WIRE_VERSION: int = 1  # bumped on any incompatible change; another version is `refused`/"version"
MAX_LINE_BYTES: int = 16 * 1024 * 1024  # above the TypeScript SDK's 10 MiB line limit: a real peer's line fits
MAX_FRAME_BYTES: int = MAX_LINE_BYTES + 64 * 1024  # a body: one maximal line and the frame's own fields

# Shared and read-only, so that it stays empty. types.MappingProxyType, as `types` itself defines
# it: importing `types` costs the shim start-up time (docs/benchmarks.md, "Earlier passes").
_NO_EXTRA: Mapping[str, Any] = type(type.__dict__)({})


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_str_map(value: object) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())


_INT: Check = (_is_int, "an int")
_STR: Check = (lambda v: isinstance(v, str), "a str")
_BOOL: Check = (lambda v: isinstance(v, bool), "a bool")
_STR_MAP: Check = (_is_str_map, "a map of str to str")


class Frame:
    """What every frame has: its type ``t`` and the fields this version does not know."""

    __slots__ = ("extra",)
    t: ClassVar[str] = ""
    # Each field's check, in the order it is encoded. `_fields` are always encoded (None as nil)
    # and, but for one whose check passes anything, must be present; `_optional` ones may be
    # absent or nil, and are encoded only when set (not None, not empty).
    _fields: ClassVar[dict[str, Check]] = {}
    _optional: ClassVar[dict[str, Check]] = {}
    _names: ClassVar[tuple[str, ...]] = ()  # the fields a frame stores: the constructor's keywords
    _known: ClassVar[frozenset[str]] = frozenset({"t"})  # every key this version reads

    def __init_subclass__(cls) -> None:
        fields = (*cls._fields, *cls._optional)
        # The `v` of a hello or welcome is its class's: a frame of another version is a Foreign one.
        slots = {name for klass in cls.__mro__ for name in getattr(klass, "__slots__", ())}
        cls._names = tuple(name for name in fields if name in slots)
        cls._known = frozenset({"t", *fields})

    def __init__(self, extra: Mapping[str, Any] | None = None) -> None:
        self.extra: Mapping[str, Any] = extra or _NO_EXTRA

    def to_map(self) -> dict[str, Any]:
        """The frame as the map that goes on the wire: ``t``, its fields, then ``extra``."""
        out: dict[str, Any] = {"t": self.t}
        for name in self._fields:
            out[name] = getattr(self, name)
        for name in self._optional:
            value = getattr(self, name)
            if value is not None and value != []:
                out[name] = value
        out.update(self.extra)
        return out

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Frame) or type(other) is not type(self):
            return NotImplemented
        return self.to_map() == other.to_map()

    __hash__ = None  # type: ignore[assignment]  # frames hold lists and maps: not hashable

    def __repr__(self) -> str:
        fields = ", ".join(f"{n}={getattr(self, n)!r}" for n in self._names)
        more = f", extra={dict(self.extra)!r}" if self.extra else ""
        return f"{type(self).__name__}({fields}{more})"


class Hello(Frame):
    """A client's first frame, of this wire version: open a session (shim) or a control connection."""

    __slots__ = ("role", "pid", "argv", "cwd", "env", "opts", "server", "resume", "env_raw", "handoff", "layout",
                 "reclaim")
    t = "hello"
    v: ClassVar[int] = WIRE_VERSION
    _fields = {
        "v": _INT, "role": (lambda v: v in ("shim", "ctl"), '"shim" or "ctl"'), "pid": _INT,
        "argv": (lambda v: isinstance(v, list) and all(isinstance(a, str) for a in v), "a list of str"),
        "cwd": _STR, "env": _STR_MAP, "opts": _STR_MAP,
        "server": (lambda v: v is None or isinstance(v, str), "a str or nil"),
        "resume": (lambda v: isinstance(v, list) and all(isinstance(r, bytes) for r in v), "a list of bin")}
    _optional = {
        "env_raw": (lambda v: isinstance(v, list) and all(
            isinstance(p, list) and len(p) == 2 and all(isinstance(b, bytes) for b in p) for p in v),
            "a list of [bin, bin] pairs"),
        "handoff": _BOOL, "layout": _INT, "reclaim": _BOOL}

    def __init__(self, role: str, pid: int, argv: list[str], cwd: str, env: dict[str, str],
                 opts: dict[str, str], server: str | None, resume: list[bytes],
                 env_raw: Sequence[Sequence[bytes]] | None = None, handoff: bool | None = None,
                 layout: int | None = None, reclaim: bool | None = None,
                 extra: Mapping[str, Any] | None = None) -> None:
        super().__init__(extra)
        self.role = role  # "shim" or "ctl"
        self.pid = pid
        self.argv = argv  # the server command; empty for a named server, a hub or lazyctl
        self.cwd = cwd
        self.env = env  # the variables that are UTF-8
        self.opts = opts  # registration options as the user spelled them (docs/protocol.md)
        self.server = server  # a named server, or None
        self.resume = resume  # client lines already answered, recorded again after a reconnect
        # The variables that are not UTF-8, (name, value) as bytes: the server still gets them
        # exactly. Lists, as msgpack decodes them, so that a frame sent and read compares equal.
        self.env_raw = [[name, value] for name, value in env_raw] if env_raw else []
        # True: the client's stdin, stdout and a shared region travel with this frame (SCM_RIGHTS),
        # for the daemon to serve the client's pipes itself (docs/protocol.md, "Hand-off").
        self.handoff = handoff
        # With `handoff` or `reclaim`: the layout version of the region (lazyd/handoff/region.py),
        # which the shim's recovery reads it by; a daemon that writes another does not take it.
        self.layout = layout
        # True instead of `handoff`: the region comes as a lost daemon left it, in the hello a shim
        # keeps in a data memfd for a daemon systemd restarts, which takes the session back from
        # its fd store (docs/protocol.md, "Reclaiming"). Offered on a connection, it is refused.
        self.reclaim = reclaim


class Foreign(Frame):
    """A hello or welcome of another wire version: only its ``v`` is read."""

    __slots__ = ("v",)
    _fields = {"v": _INT}

    def __init__(self, v: int, extra: Mapping[str, Any] | None = None) -> None:
        super().__init__(extra)
        self.v = v


class ForeignHello(Foreign):
    """A hello of another wire version: the daemon answers ``refused``/"version"."""

    __slots__ = ()
    t = "hello"


class Welcome(Frame):
    """The daemon accepted a hello of this wire version."""

    __slots__ = ("session", "name", "daemon_pid", "handoff")
    t = "welcome"
    v: ClassVar[int] = WIRE_VERSION
    _fields = {"v": _INT, "session": _INT, "name": _STR, "daemon_pid": _INT}
    _optional = {"handoff": _BOOL}

    def __init__(self, session: int, name: str, daemon_pid: int, handoff: bool | None = None,
                 extra: Mapping[str, Any] | None = None) -> None:
        super().__init__(extra)
        self.session = session  # 0 on a control connection
        self.name = name  # the server's readable name, "hub" or "control"
        self.daemon_pid = daemon_pid
        self.handoff = handoff  # True: the daemon took the client's descriptors that came with the hello


class ForeignWelcome(Foreign):
    """A welcome of another wire version: the shim compares versions itself and reports the skew."""

    __slots__ = ()
    t = "welcome"


class Refusal(Frame):
    """The daemon refuses a hello and closes; readable by a peer of any wire version."""

    __slots__ = ("v", "code", "message")
    t = "refused"
    _fields = {"v": _INT, "code": _STR, "message": _STR}

    def __init__(self, code: str, message: str, v: int = WIRE_VERSION,
                 extra: Mapping[str, Any] | None = None) -> None:
        super().__init__(extra)
        self.v = v
        self.code = code  # "version", "options", "unknown-server"...
        self.message = message


class Line(Frame):
    """One JSON-RPC message, without its newline; ``done`` (daemon → shim only) is the client's
    original id of the request this line finally answers."""

    __slots__ = ("d", "done")
    t = "line"
    _fields = {"d": (lambda v: isinstance(v, bytes), "a bin")}  # no longer than MAX_LINE_BYTES: wire's limit
    _optional = {"done": (lambda v: _is_int(v) or isinstance(v, str), "an int or str")}

    def __init__(self, d: bytes, done: int | str | None = None, extra: Mapping[str, Any] | None = None) -> None:
        super().__init__(extra)
        self.d = d
        self.done = done


class Ctl(Frame):
    """A control request from lazyctl (docs/lazyctl.md, "Control API")."""

    __slots__ = ("op", "args")
    t = "ctl"
    _fields = {"op": _STR, "args": (lambda v: isinstance(v, dict), "a map")}

    def __init__(self, op: str, args: dict[str, Any], extra: Mapping[str, Any] | None = None) -> None:
        super().__init__(extra)
        self.op = op
        self.args = args


class Reply(Frame):
    """The answer to one ``ctl``: ``data`` on success, ``error`` (one line) on failure."""

    __slots__ = ("ok", "data", "error")
    t = "reply"
    # data always, even as nil: older lazyctls read it unguarded
    _fields = {"ok": _BOOL, "data": (lambda v: True, "")}
    _optional = {"error": _STR}

    def __init__(self, ok: bool, data: Any = None, error: str | None = None,
                 extra: Mapping[str, Any] | None = None) -> None:
        super().__init__(extra)
        self.ok = ok
        self.data = data
        self.error = error


class Progress(Frame):
    """What a long control op is doing now (daemon → lazyctl, before its ``reply``)."""

    __slots__ = ("step",)
    t = "progress"
    _fields = {"step": _STR}

    def __init__(self, step: str, extra: Mapping[str, Any] | None = None) -> None:
        super().__init__(extra)
        self.step = step


AnyFrame: TypeAlias = "Hello | ForeignHello | Welcome | ForeignWelcome | Refusal | Line | Ctl | Reply | Progress"

_CLASSES: dict[str, type[Any]] = {cls.t: cls for cls in (Hello, Welcome, Refusal, Line, Ctl, Reply, Progress)}
_ABSENT = object()  # a required field's check fails on it: the error then says the field is missing


def _bad(frame: dict[str, Any], name: str, expected: str) -> WireError:
    if name not in frame:
        return WireError(f"{frame['t']!r} frame lacks field {name!r}")
    return WireError(f"{frame['t']!r} frame field {name!r} must be {expected}, not {type(frame[name]).__name__}")


def _extra(f: dict[str, Any], known: frozenset[str]) -> Mapping[str, Any] | None:
    # The common case, no unknown field, costs one set comparison and no allocation.
    if f.keys() <= known:
        return None
    return {k: v for k, v in f.items() if k not in known}


def validate_walked(obj: dict[str, Any]) -> AnyFrame:
    """``obj``, a decoded map whose keys are str (wire.py's header walk or smallpack checked them),
    as a typed frame if it has a known ``t`` and well-typed fields (unknown ones kept in ``extra``);
    WireError otherwise."""
    t = obj.get("t")
    if not isinstance(t, str):
        raise WireError("frame lacks a str field 't'")
    if t == "line":  # every JSON-RPC message on the frame path: Line's checks below, without the loops
        d, done = obj.get("d"), obj.get("done")
        if not isinstance(d, bytes):
            raise _bad(obj, "d", "a bin")
        if done is not None and not (_is_int(done) or isinstance(done, str)):
            raise _bad(obj, "done", "an int or str")
        return Line(d, done, _extra(obj, Line._known))
    cls = _CLASSES.get(t)
    if cls is None:
        raise WireError(f"unknown frame type {t[:40]!r}")
    if (cls is Hello or cls is Welcome) and _is_int(obj.get("v")) and obj["v"] != WIRE_VERSION:
        # Another version's frame may carry other fields: read only `v`, so that the daemon can
        # answer `refused`/"version" and the shim report the skew, not a misleading field error.
        foreign = ForeignHello if cls is Hello else ForeignWelcome
        return foreign(obj["v"], _extra(obj, foreign._known))
    for name, (ok, expected) in cls._fields.items():
        if not ok(obj.get(name, _ABSENT)):
            raise _bad(obj, name, expected)
    for name, (ok, expected) in cls._optional.items():
        if obj.get(name) is not None and not ok(obj[name]):
            raise _bad(obj, name, expected)
    frame: AnyFrame = cls(**{name: obj.get(name) for name in cls._names}, extra=_extra(obj, cls._known))
    return frame
