"""Getting a session with the daemon: socket path, connect, autostart, hello.

``open_session`` returns a connected, welcomed ``Connection`` or raises ``Unavailable`` with a
short reason (shown as ``daemon unavailable (<reason>)``). With no daemon where this environment
points, one recorded under HOME is looked for; then, when allowed, one is started
(shim/dial.py). Every wait is bounded, and by the caller's deadline when one is given.
"""

from __future__ import annotations

import _socket
import os
import struct
import time

from lazyd.protocol import smallpack
from lazyd.host import sockpath
from lazyd.errors import NoDaemon, Unavailable, WireError
from lazyd.protocol.frames import MAX_FRAME_BYTES, WIRE_VERSION, ForeignWelcome, Hello, Refusal, Welcome, validate_walked

from .dial import BUSY_WAIT_S, budget, connect_once, start_daemon

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs start-up time
if TYPE_CHECKING:
    import socket
    from collections.abc import Callable

    from lazyd.protocol import wire
    from lazyd.protocol.frames import AnyFrame

    from .options import Log, Options

HELLO_WAIT_S = 10.0  # the daemon may be busy loading its cache from disk


class Connection:
    """A welcomed session: the socket, the welcome, the hello frame it answered, and the frame reader
    for what follows (made when first asked for: a shim that hands off never reads another frame,
    and lazyd/protocol/wire.py loads msgpack)."""

    def __init__(self, sock: socket.socket, welcome: Welcome, hello_frame: bytes,
                 reader: wire.BlockingFrameReader | None) -> None:
        self.sock = sock
        self.welcome = welcome
        self.hello_frame = hello_frame
        self._reader = reader

    @property
    def reader(self) -> wire.BlockingFrameReader:
        if self._reader is None:
            from lazyd.protocol import wire

            self._reader = wire.BlockingFrameReader(self.sock)
        return self._reader


def socket_path(opts: Options) -> str:
    """The socket to use: --socket / LAZYD_SOCKET, else the default for this environment."""
    return opts.socket if opts.socket is not None else sockpath.default_socket_path(os.environ)


def build_hello(opts: Options, resume: list[bytes]) -> Hello:
    """The hello frame for this shim (see docs/protocol.md)."""
    try:
        cwd = os.getcwd()
    except OSError:
        cwd = os.environ.get("PWD", "/")  # the cwd was removed under us; the client's view is next best
    env: dict[str, str] = {}
    raw: list[tuple[bytes, bytes]] = []
    for name, value in os.environb.items():
        try:
            env[name.decode("utf-8")] = value.decode("utf-8")
        except UnicodeDecodeError:
            raw.append((name, value))  # passed as bytes: the server still gets it exactly
    return Hello("shim", os.getpid(), list(opts.command), cwd, env, dict(opts.daemon_opts), opts.server,
                 list(resume), raw)


def open_session(opts: Options, resume: list[bytes], log: Log, deadline: float | None = None,
                 fds: list[int] | None = None) -> Connection:
    """Connect (autostarting the daemon if allowed), say hello, and return the welcomed connection.

    ``deadline`` (time.monotonic()) caps every wait. With ``fds`` the hello offers a hand-off
    (shim/handoff.py); the welcome's ``handoff`` says whether the daemon took it. Raises
    Unavailable, the socket closed.
    """
    hello = build_hello(opts, resume)
    if fds:
        from lazyd.handoff.region import LAYOUT

        hello.handoff, hello.layout = True, LAYOUT
    try:
        frame = smallpack.frame(hello.to_map(), MAX_FRAME_BYTES)  # what wire.encode gives, without msgpack
    except (UnicodeError, ValueError, TypeError) as exc:
        # Surrogate-escaped (non UTF-8) argv or environment, or a hello over the frame limit.
        raise Unavailable(f"cannot describe this command to the daemon: {exc}", final=True) from None
    path = socket_path(opts)
    started = time.monotonic()
    sock = connect_or_start(path, opts.socket is not None, opts.autostart, log, deadline)
    try:
        sock.settimeout(budget(HELLO_WAIT_S, deadline))
        try:
            sent = 0
            if fds:  # on the hello's first bytes
                rights = struct.pack(f"{len(fds)}i", *fds)
                sent = sock.sendmsg([frame], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, rights)])
            sock.sendall(memoryview(frame)[sent:])
        except (BrokenPipeError, ConnectionResetError):
            pass  # a daemon that refused at once has closed by now: its refusal says why, below
        reply, reader = read_reply(sock)
        sock.settimeout(None)
        welcome = _welcome(reply)
    except Unavailable:
        sock.close()
        raise
    except TimeoutError:
        sock.close()
        raise Unavailable("the daemon did not answer the hello in time") from None
    except (OSError, WireError) as exc:
        sock.close()
        raise Unavailable(f"the daemon broke the connection during the hello: {exc}") from None
    log(f"session {welcome.session} ({welcome.name}) with daemon pid {welcome.daemon_pid} "
        f"in {(time.monotonic() - started) * 1000:.1f}ms")  # fmt: skip
    return Connection(sock, welcome, frame, reader)


def _welcome(reply: AnyFrame | None) -> Welcome:
    """The daemon's answer to the hello as a welcome; Unavailable saying why it is not one."""
    if reply is None:
        raise Unavailable("the daemon closed the connection during the hello")
    if isinstance(reply, Refusal):
        if reply.code == "options":  # the user's mistake, like every other bad option: exit 2
            raise Unavailable(reply.message, user_error=True)
        if reply.code == "config":  # a daemon waiting for its config to be fixed (config_wait.py)
            raise Unavailable(f"lazyd cannot start: {reply.message}", user_error=True)
        raise Unavailable(f"refused by the daemon: {reply.message} [{reply.code}]", final=True)
    if isinstance(reply, ForeignWelcome):
        raise Unavailable(f"the daemon speaks wire version {reply.v}, this shim {WIRE_VERSION}; "
                          "restart the daemon (lazyctl stop)", final=True)
    if not isinstance(reply, Welcome):
        raise Unavailable(f"the daemon answered the hello with a {reply.t!r} frame", final=True)
    return reply


def read_reply(sock: socket.socket) -> tuple[AnyFrame | None, wire.BlockingFrameReader | None]:
    """The daemon's answer to the hello (None at a clean EOF), and the frame reader that holds what
    was received after it, if one had to be made.

    A small frame is read by lazyd/protocol/smallpack.py and not a byte past it: on the hand-off
    path what the daemon sends next is the waiting program's exit cue. Any other frame goes to
    lazyd/protocol/wire.py's reader. Raises WireError and OSError as that reader does."""
    head = _received_exactly(sock, smallpack.HEADER_BYTES, b"")
    if not head:
        return None, None
    data = head
    size = int.from_bytes(head, "big") if len(head) == smallpack.HEADER_BYTES else 0
    if 0 < size <= smallpack.SMALL_BODY_BYTES:
        data = _received_exactly(sock, size, head)
        if len(data) == len(head) + size:
            try:
                return validate_walked(smallpack.unpack(data[len(head) :])), None
            except ValueError:
                pass
    from lazyd.protocol import wire

    reader = wire.BlockingFrameReader(sock, data)
    return reader.read(), reader


def _received_exactly(sock: socket.socket, count: int, before: bytes) -> bytes:
    """`before` and then `count` more bytes from `sock`, fewer only at EOF."""
    data = before
    while len(data) < len(before) + count:
        chunk = sock.recv(len(before) + count - len(data))
        if not chunk:
            break
        data += chunk
    return data


def connect_or_start(path: str, explicit: bool, autostart: bool, log: Callable[[str], None],
                     deadline: float | None) -> socket.socket:
    """A connected socket to the daemon at `path`, started first when none listens and `autostart`
    allows; `explicit`: the path was chosen (--socket, LAZYD_SOCKET), so the daemon is told it.
    Raises Unavailable. Also what `lazyctl check` uses to start the daemon."""
    try:
        return connect_once(path, time.monotonic() + budget(BUSY_WAIT_S, deadline))
    except NoDaemon as exc:
        reason = str(exc)
    if not explicit:  # the client may have dropped XDG_RUNTIME_DIR (Codex does): records under HOME
        found = _discovered(path, log, deadline)
        if found is not None:
            return found
    if not autostart:
        raise Unavailable(f"no daemon at {path}: {reason}; autostart is off")
    log(f"no daemon at {path} ({reason}); autostarting")
    return start_daemon(path, explicit, log, deadline)


def _discovered(path: str, log: Callable[[str], None], deadline: float | None) -> socket.socket | None:
    for pid, other in sockpath.discovered_daemons(os.environ):
        if other == path:
            continue
        try:
            sock = connect_once(other, time.monotonic() + budget(BUSY_WAIT_S, deadline))
        except (NoDaemon, Unavailable):
            continue
        log(f"found daemon pid {pid} at {other} through its record under HOME")
        return sock
    return None

