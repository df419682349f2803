"""The frames of the lazyd wire protocol as typed objects (docs/protocol.md, "Frames").

A frame is decoded once, at the wire boundary: lazyd/protocol/wire.py unpacks the bytes and
``validate_frame`` checks the map field by field and builds one of these, so everything above
reads ``hello.opts`` and a frame of the wrong type is a type error. A hello or welcome of another
wire version becomes ``ForeignHello``/``ForeignWelcome`` (only ``v`` read), so the skew can be named.
Fields a frame does not know are kept in ``extra`` and sent on again; an absent optional field
reads as its default and is left out when encoded.

Plain classes with ``__slots__``, not dataclasses: the shim imports this module at every start,
where dataclasses (with inspect) cost start-up time. Standard library only.
"""

from __future__ import annotations

from lazyd.errors import WireError

# Not `from typing import TYPE_CHECKING`: the shim imports this at every start; mypy treats any
# name TYPE_CHECKING as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any, ClassVar, TypeAlias

__all__ = ["WIRE_VERSION", "MAX_LINE_BYTES", "MAX_FRAME_BYTES", "FRAME_TYPES", "Frame", "Hello",
           "ForeignHello", "Welcome", "ForeignWelcome", "Refusal", "Line", "Ctl", "Reply", "Progress", "AnyFrame",
           "validate_frame"]

WIRE_VERSION: int = 1  # bumped on any incompatible change; another version is `refused`/"version"
MAX_LINE_BYTES: int = 16 * 1024 * 1024  # above the TypeScript SDK's 10 MiB line limit: a real peer's line fits
MAX_FRAME_BYTES: int = MAX_LINE_BYTES + 64 * 1024  # a body: one maximal line and the frame's own fields

# Shared and read-only, so that it stays empty. types.MappingProxyType, as `types` itself defines
# it: importing `types` costs the shim start-up time (docs/benchmarks.md, "Earlier passes").
_NO_EXTRA: Mapping[str, Any] = type(type.__dict__)({})


class Frame:
    """What every frame has: its type ``t`` and the fields this version does not know."""

    __slots__ = ("extra",)
    t: ClassVar[str] = ""
    _fields: ClassVar[tuple[str, ...]] = ()  # always encoded, in this order (None as nil)
    _optional: ClassVar[tuple[str, ...]] = ()  # encoded only when set (not None, not empty)
    _known: ClassVar[frozenset[str]] = frozenset({"t"})  # every key this version reads

    def __init_subclass__(cls) -> None:
        cls._known = frozenset({"t", *cls._fields, *cls._optional})

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
        names = self._fields + self._optional
        return all(getattr(self, n) == getattr(other, n) for n in names) and dict(self.extra) == dict(other.extra)

    __hash__ = None  # type: ignore[assignment]  # frames hold lists and maps: not hashable

    def __repr__(self) -> str:
        fields = ", ".join(f"{n}={getattr(self, n)!r}" for n in self._fields + self._optional)
        more = f", extra={dict(self.extra)!r}" if self.extra else ""
        return f"{type(self).__name__}({fields}{more})"


class Hello(Frame):
    """A client's first frame, of this wire version: open a session (shim) or a control connection."""

    __slots__ = ("role", "pid", "argv", "cwd", "env", "opts", "server", "resume", "env_raw", "handoff", "layout",
                 "reclaim")
    t = "hello"
    _fields = ("v", "role", "pid", "argv", "cwd", "env", "opts", "server", "resume")
    _optional = ("env_raw", "handoff", "layout", "reclaim")
    v: ClassVar[int] = WIRE_VERSION

    def __init__(self, role: str, pid: int, argv: list[str], cwd: str, env: dict[str, str],
                 opts: dict[str, str], server: str | None, resume: list[bytes],
                 env_raw: list[tuple[bytes, bytes]] | None = None, handoff: bool | None = None,
                 layout: int | None = None, reclaim: bool | None = None, extra: Mapping[str, Any] | None = None) -> None:
        super().__init__(extra)
        self.role = role  # "shim" or "ctl"
        self.pid = pid
        self.argv = argv  # the server command; empty for a named server, a hub or lazyctl
        self.cwd = cwd
        self.env = env  # the variables that are UTF-8
        self.opts = opts  # registration options as the user spelled them (docs/protocol.md)
        self.server = server  # a named server, or None
        self.resume = resume  # client lines already answered, recorded again after a reconnect
        # The variables that are not UTF-8, (name, value) as bytes: the server still gets them exactly.
        self.env_raw = [(name, value) for name, value in env_raw] if env_raw else []
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

    def to_map(self) -> dict[str, Any]:
        out = super().to_map()
        if self.env_raw:
            out["env_raw"] = [list(pair) for pair in self.env_raw]  # decoded as lists: compare equal
        return out


class ForeignHello(Frame):
    """A hello of another wire version: only its ``v`` is read, to answer ``refused``/"version"."""

    __slots__ = ("v",)
    t = "hello"
    _fields = ("v",)

    def __init__(self, v: int, extra: Mapping[str, Any] | None = None) -> None:
        super().__init__(extra)
        self.v = v


class Welcome(Frame):
    """The daemon accepted a hello of this wire version."""

    __slots__ = ("session", "name", "daemon_pid", "handoff")
    t = "welcome"
    _fields = ("v", "session", "name", "daemon_pid")
    _optional = ("handoff",)
    v: ClassVar[int] = WIRE_VERSION

    def __init__(self, session: int, name: str, daemon_pid: int, handoff: bool | None = None,
                 extra: Mapping[str, Any] | None = None) -> None:
        super().__init__(extra)
        self.session = session  # 0 on a control connection
        self.name = name  # the server's readable name, "hub" or "control"
        self.daemon_pid = daemon_pid
        self.handoff = handoff  # True: the daemon took the client's descriptors that came with the hello


class ForeignWelcome(Frame):
    """A welcome of another wire version: the shim compares versions itself and reports the skew."""

    __slots__ = ("v",)
    t = "welcome"
    _fields = ("v",)

    def __init__(self, v: int, extra: Mapping[str, Any] | None = None) -> None:
        super().__init__(extra)
        self.v = v


class Refusal(Frame):
    """The daemon refuses a hello and closes; readable by a peer of any wire version."""

    __slots__ = ("v", "code", "message")
    t = "refused"
    _fields = ("v", "code", "message")

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
    _fields = ("d",)
    _optional = ("done",)

    def __init__(self, d: bytes, done: int | str | None = None, extra: Mapping[str, Any] | None = None) -> None:
        # Frame.__init__'s one line, inlined: lines are the hot path, and a call costs more than it.
        self.extra = extra or _NO_EXTRA
        self.d = d
        self.done = done


class Ctl(Frame):
    """A control request from lazyctl (docs/lazyctl.md, "Control API")."""

    __slots__ = ("op", "args")
    t = "ctl"
    _fields = ("op", "args")

    def __init__(self, op: str, args: dict[str, Any], extra: Mapping[str, Any] | None = None) -> None:
        super().__init__(extra)
        self.op = op
        self.args = args


class Reply(Frame):
    """The answer to one ``ctl``: ``data`` on success, ``error`` (one line) on failure."""

    __slots__ = ("ok", "data", "error")
    t = "reply"
    _fields = ("ok", "data")  # data always, even as nil: older lazyctls read it unguarded
    _optional = ("error",)

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
    _fields = ("step",)

    def __init__(self, step: str, extra: Mapping[str, Any] | None = None) -> None:
        super().__init__(extra)
        self.step = step


AnyFrame: TypeAlias = "Hello | ForeignHello | Welcome | ForeignWelcome | Refusal | Line | Ctl | Reply | Progress"


# --- validation: a decoded map in, a typed frame out ---------------------------------------------


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_str(value: object) -> bool:
    return isinstance(value, str)


def _is_str_map(value: object) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())


def _optional(test: Callable[[object], bool]) -> Callable[[object], bool]:
    return lambda value: value is None or value is _ABSENT or test(value)


_ABSENT = object()  # a required field's test fails on it: the error then says the field is missing
_INT = (_is_int, "an int")
_STR = (_is_str, "a str")
_STR_MAP = (_is_str_map, "a map of str to str")
_OPT_BOOL = (_optional(lambda v: isinstance(v, bool)), "a bool")

# Per frame type: its class and, in the order of its constructor's arguments, each field's test and
# what an error says it must be. `line` is checked by hand (_check_line): it is the hot path.
_TABLE: dict[str, tuple[type[Any], dict[str, tuple[Callable[[object], bool], str]]]] = {
    "hello": (Hello, {
        "role": (lambda v: v in ("shim", "ctl"), '"shim" or "ctl"'), "pid": _INT,
        "argv": (lambda v: isinstance(v, list) and all(isinstance(a, str) for a in v), "a list of str"),
        "cwd": _STR, "env": _STR_MAP, "opts": _STR_MAP,
        "server": (lambda v: v is None or isinstance(v, str), "a str or nil"),
        "resume": (lambda v: isinstance(v, list) and all(isinstance(r, bytes) for r in v), "a list of bin"),
        "env_raw": (_optional(lambda v: isinstance(v, list) and all(
            isinstance(p, list) and len(p) == 2 and all(isinstance(b, bytes) for b in p) for p in v)),
            "a list of [bin, bin] pairs"),
        "handoff": _OPT_BOOL, "layout": (_optional(_is_int), "an int"), "reclaim": _OPT_BOOL}),
    "welcome": (Welcome, {"session": _INT, "name": _STR, "daemon_pid": _INT, "handoff": _OPT_BOOL}),
    # Stable across versions: a refusal must stay readable by a peer of any version.
    "refused": (Refusal, {"code": _STR, "message": _STR, "v": _INT}),
    "ctl": (Ctl, {"op": _STR, "args": (lambda v: isinstance(v, dict), "a map")}),
    "reply": (Reply, {"ok": (lambda v: isinstance(v, bool), "a bool"), "data": (lambda v: True, ""),
                      "error": (_optional(_is_str), "a str")}),
    "progress": (Progress, {"step": _STR}),  # daemon -> lazyctl, before a reply, when the ctl asked for it
}
FRAME_TYPES: frozenset[str] = frozenset({*_TABLE, "line"})


def _bad(frame: dict[str, Any], name: str, expected: str) -> WireError:
    if name not in frame:
        return WireError(f"{frame['t']!r} frame lacks field {name!r}")
    return WireError(f"{frame['t']!r} frame field {name!r} must be {expected}, not {type(frame[name]).__name__}")


def _extra(f: dict[str, Any], known: frozenset[str]) -> Mapping[str, Any] | None:
    # The common case, no unknown field, costs one set comparison and no allocation.
    if f.keys() <= known:
        return None
    return {k: v for k, v in f.items() if k not in known}


def _check_line(f: dict[str, Any]) -> AnyFrame:
    # The hot path (every JSON-RPC message is one): the same checks as the table's, fewer calls.
    d = f.get("d")
    if not isinstance(d, bytes):
        raise _bad(f, "d", "a bin")
    if len(d) > MAX_LINE_BYTES:
        raise WireError(f"line of {len(d)} bytes exceeds MAX_LINE_BYTES ({MAX_LINE_BYTES})")
    done = f.get("done")
    if done is not None and not (_is_int(done) or isinstance(done, str)):
        raise _bad(f, "done", "an int or str")
    return Line(d, done, None if f.keys() <= Line._known else _extra(f, Line._known))


def validate_frame(obj: object) -> AnyFrame:
    """``obj`` as a typed frame if it is a map with str keys, a known ``t`` and well-typed fields
    (unknown ones kept in ``extra``); WireError otherwise."""
    if not isinstance(obj, dict):
        raise WireError(f"frame is a {type(obj).__name__}, not a map")
    if not all(isinstance(k, str) for k in obj):
        raise WireError("frame has a key that is not a str")
    return validate_walked(obj)


def validate_walked(obj: dict[str, Any]) -> AnyFrame:
    """``validate_frame`` for a map whose keys wire.py's header walk already found to be str."""
    t = obj.get("t")
    if not isinstance(t, str):
        raise WireError("frame lacks a str field 't'")
    if t == "line":
        return _check_line(obj)
    if t not in _TABLE:
        raise WireError(f"unknown frame type {t[:40]!r}")
    if t in ("hello", "welcome"):
        if not _is_int(obj.get("v")):
            raise _bad(obj, "v", "an int")
        if obj["v"] != WIRE_VERSION:
            # Another version's frame may carry other fields: read only `v`, so that the daemon can
            # answer `refused`/"version" and the shim report the skew, not a misleading field error.
            foreign = ForeignHello if t == "hello" else ForeignWelcome
            return foreign(obj["v"], _extra(obj, foreign._known))
    cls, checks = _TABLE[t]
    for name, (ok, expected) in checks.items():
        if not ok(obj.get(name, _ABSENT)):
            raise _bad(obj, name, expected)
    frame: AnyFrame = cls(*(obj.get(name) for name in checks), extra=_extra(obj, cls._known))
    return frame
