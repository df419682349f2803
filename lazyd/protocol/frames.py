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
        self.env_raw = env_raw if env_raw is not None else []
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


def _is_str_list(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _is_str_map(value: object) -> bool:
    return isinstance(value, dict) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    )


def _bad(frame: dict[str, Any], name: str, expected: str) -> WireError:
    if name not in frame:
        return WireError(f"{frame['t']!r} frame lacks field {name!r}")
    return WireError(f"{frame['t']!r} frame field {name!r} must be {expected}, not {type(frame[name]).__name__}")


def _require(frame: dict[str, Any], name: str, ok: bool, expected: str) -> None:
    if not ok:
        raise _bad(frame, name, expected)


def _extra(f: dict[str, Any], known: frozenset[str]) -> Mapping[str, Any] | None:
    # The common case, no unknown field, costs one set comparison and no allocation.
    if f.keys() <= known:
        return None
    return {k: v for k, v in f.items() if k not in known}



def _check_hello(f: dict[str, Any]) -> AnyFrame:
    _require(f, "v", _is_int(f.get("v")), "an int")
    if f["v"] != WIRE_VERSION:
        # Another version's hello may carry other fields: let the daemon read `v` and answer
        # `refused`/"version" instead of failing with a misleading field error.
        return ForeignHello(f["v"], _extra(f, ForeignHello._known))
    _require(f, "role", f.get("role") in ("shim", "ctl"), '"shim" or "ctl"')
    _require(f, "pid", _is_int(f.get("pid")), "an int")
    _require(f, "argv", _is_str_list(f.get("argv")), "a list of str")
    _require(f, "cwd", isinstance(f.get("cwd"), str), "a str")
    _require(f, "env", _is_str_map(f.get("env")), "a map of str to str")
    _require(f, "opts", _is_str_map(f.get("opts")), "a map of str to str")
    _require(f, "server", "server" in f and (f["server"] is None or isinstance(f["server"], str)),
             "a str or nil")  # fmt: skip
    resume = f.get("resume")
    _require(f, "resume", isinstance(resume, list) and all(isinstance(r, bytes) for r in resume),
             "a list of bin")  # fmt: skip
    raw: list[tuple[bytes, bytes]] = []
    if "env_raw" in f:
        # Optional: the variables that are not UTF-8, as [name, value] pairs of bytes.
        pairs = f["env_raw"]
        _require(f, "env_raw", isinstance(pairs, list) and all(
            isinstance(p, list) and len(p) == 2 and all(isinstance(b, bytes) for b in p) for p in pairs),
            "a list of [bin, bin] pairs")  # fmt: skip
        raw = [(name, value) for name, value in pairs]
    _require(f, "handoff", f.get("handoff") is None or isinstance(f["handoff"], bool), "a bool")
    layout = f.get("layout")
    _require(f, "layout", layout is None or (isinstance(layout, int) and not isinstance(layout, bool)), "an int")
    _require(f, "reclaim", f.get("reclaim") is None or isinstance(f["reclaim"], bool), "a bool")
    return Hello(f["role"], f["pid"], f["argv"], f["cwd"], f["env"], f["opts"], f["server"], f["resume"],
                 raw, f.get("handoff"), layout, f.get("reclaim"), _extra(f, Hello._known))


def _check_welcome(f: dict[str, Any]) -> AnyFrame:
    _require(f, "v", _is_int(f.get("v")), "an int")
    if f["v"] != WIRE_VERSION:
        return ForeignWelcome(f["v"], _extra(f, ForeignWelcome._known))  # the shim reports the skew itself
    _require(f, "session", _is_int(f.get("session")), "an int")
    _require(f, "name", isinstance(f.get("name"), str), "a str")
    _require(f, "daemon_pid", _is_int(f.get("daemon_pid")), "an int")
    _require(f, "handoff", f.get("handoff") is None or isinstance(f["handoff"], bool), "a bool")
    return Welcome(f["session"], f["name"], f["daemon_pid"], f.get("handoff"), _extra(f, Welcome._known))


def _check_refused(f: dict[str, Any]) -> AnyFrame:
    # Stable across versions: a refusal must stay readable by a peer of any version.
    _require(f, "v", _is_int(f.get("v")), "an int")
    _require(f, "code", isinstance(f.get("code"), str), "a str")
    _require(f, "message", isinstance(f.get("message"), str), "a str")
    return Refusal(f["code"], f["message"], f["v"], _extra(f, Refusal._known))


def _check_line(f: dict[str, Any]) -> AnyFrame:
    # The hot path (every JSON-RPC message is one): the same checks as the others, fewer calls.
    d = f.get("d")
    if not isinstance(d, bytes):
        raise _bad(f, "d", "a bin")
    if len(d) > MAX_LINE_BYTES:
        raise WireError(f"line of {len(d)} bytes exceeds MAX_LINE_BYTES ({MAX_LINE_BYTES})")
    done = f.get("done")
    if done is not None and not (_is_int(done) or isinstance(done, str)):
        raise WireError(f"'line' frame field 'done' must be an int or str, not {type(done).__name__}")
    return Line(d, done, None if f.keys() <= Line._known else _extra(f, Line._known))


def _check_ctl(f: dict[str, Any]) -> AnyFrame:
    _require(f, "op", isinstance(f.get("op"), str), "a str")
    _require(f, "args", isinstance(f.get("args"), dict), "a map")
    return Ctl(f["op"], f["args"], _extra(f, Ctl._known))


def _check_reply(f: dict[str, Any]) -> AnyFrame:
    _require(f, "ok", isinstance(f.get("ok"), bool), "a bool")
    error = f.get("error")
    if error is not None and not isinstance(error, str):
        raise WireError(f"'reply' frame field 'error' must be a str, not {type(error).__name__}")
    return Reply(f["ok"], f.get("data"), error, _extra(f, Reply._known))


def _check_progress(f: dict[str, Any]) -> AnyFrame:
    _require(f, "step", isinstance(f.get("step"), str), "a str")
    return Progress(f["step"], _extra(f, Progress._known))


_CHECKS: dict[str, Callable[[dict[str, Any]], AnyFrame]] = {
    "hello": _check_hello,
    "welcome": _check_welcome,
    "refused": _check_refused,
    "line": _check_line,
    "ctl": _check_ctl,
    "reply": _check_reply,
    "progress": _check_progress,  # daemon -> lazyctl, before a reply, when the ctl asked for it
}
FRAME_TYPES: frozenset[str] = frozenset(_CHECKS)


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
    check = _CHECKS.get(t)
    if check is None:
        raise WireError(f"unknown frame type {t[:40]!r}")
    return check(obj)
