"""The shim's frame path: client stdio <-> daemon frames, the in-flight table, and recovery.

The **stdin thread** is the only reader of stdin: it splits lines (lazyd/protocol/linepeek.py),
learns their request ids and hands each line to the current destination (the daemon socket or a
directly run server). The **main thread** is the only reader of the daemon socket (or the server's
stdout) and runs recovery when the daemon is lost.

- A request enters the in-flight table *before* it is sent, under the send lock, so it is either
  answered by the daemon (its ``done`` retires it) or here with an error. Ids keep their JSON type.
- ``send_lock`` serialises writes to the destination and changes of destination; ``state_lock``
  guards the tables and is never held across I/O (lock order: send_lock, then state_lock). The
  stdin thread touches them only holding both: the main thread holding ``send_lock`` has them alone.
- When the daemon is lost, every request in flight is answered with a -32603 error; the shim then
  reconnects for up to RECONNECT_WAIT_S, resuming the client's answered handshake. Recovery holds
  ``send_lock`` until there is a destination again, so what the client sends meanwhile waits in
  its stdin pipe. If that fails, the server is run directly.
- At the client's EOF what it asked before is still answered (as a server run directly does) until
  nothing is in flight, its stdout closes, or EOF_WAIT_S pass; then the shim exits 0.
"""

from __future__ import annotations

import gc
import json
import os
import select
import socket
import threading

from lazyd.errors import WireError
from lazyd.handoff.recovery import error_line
from lazyd.handoff.region import State
from lazyd.protocol import wire
from lazyd.protocol.frames import Line
from lazyd.protocol.linepeek import EOF_WAIT_S, LineSplitter, id_key, inspect_line, too_long_answer

from . import connect
from .options import say
from .stdout import Stdout

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs start-up time
if TYPE_CHECKING:
    from lazyd.protocol.linepeek import IdKey, JsonId
    from .fallback import DirectServer
    from .options import Log, Options

READ_BYTES = 64 * 1024  # one read of the client's stdin (a pipe holds 64 KiB by default)


def _shutdown(sock: socket.socket) -> None:
    # Wakes a thread blocked on the socket; the fd itself is closed by its owner.
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class Relay:
    """One client session: owns the stdin thread, the socket, the tables and recovery."""

    def __init__(self, opts: Options, conn: connect.Connection | None, log: Log, handshake: State | None = None,
                 head: bytes = b"") -> None:
        """`handshake` and `head`: what a session taken back from a hand-off (shim/recover.py)
        carries on, the client's handshake and the start of a line the daemon read and did not relay."""
        gc.enable()  # off while the shim started (the lazyd-shim script); this process now lives long
        self._opts = opts
        self._log = log
        self._out = Stdout(log)
        self._send_lock = threading.Lock()
        self._state_lock = threading.Lock()
        # The destination (a directly run server once there is one), changed holding send_lock:
        self._conn: connect.Connection | None = conn
        self._child: DirectServer | None = None
        # Guarded by state_lock:
        self._inflight: dict[IdKey, JsonId] = {}
        self._handshake = handshake or State()  # the client's initialize and initialized lines
        requests = inspect_line(self._handshake.init).requests if self._handshake.init else []
        self._init_key: IdKey | None = requests[0][0] if requests else None
        self._leaving = False  # the client closed stdin; the shim exits once what it asked is answered
        self._drained_r, self._drained_w = os.pipe2(os.O_CLOEXEC)  # written once nothing is in flight
        self._head = head

    def run(self, failure: str | None = None) -> int:
        """Relay until the client leaves (the process exits from the stdin thread) or, after a
        fallback, until the directly run server exits; return the exit status in that case. With
        `failure` (why no daemon came back for a hand-off session), run the server directly at once."""
        if failure is not None:
            self._send_lock.acquire()  # lines read meanwhile wait for the server
        threading.Thread(target=self._stdin_loop, name="stdin", daemon=True).start()
        while failure is None:
            conn = self._conn
            assert conn is not None
            try:
                frame = conn.reader.read()
                reason = "the daemon closed the connection"
            except WireError as exc:
                frame, reason = None, f"bad frame from the daemon: {exc}"
            except OSError as exc:
                frame, reason = None, f"connection error: {exc.strerror or exc}"
            if frame is None:
                failure = self._recover(conn, reason)
            elif not isinstance(frame, Line):
                self._log(f"ignored an unexpected {frame.t!r} frame from the daemon")
            else:
                self._out.write_line(frame.d)
                if frame.done is not None:
                    self._retire(frame.done)
        return self._run_direct(failure)

    def _retire(self, done: JsonId) -> None:
        key = id_key(done)
        if key is None:
            return
        with self._state_lock:
            self._inflight.pop(key, None)
            if key == self._init_key:
                self._handshake.init_answered = True
            if self._leaving and not self._inflight:
                os.write(self._drained_w, b"x")  # the stdin thread ends the process

    def _recover(self, conn: connect.Connection, reason: str) -> str | None:
        """Answer what was in flight, then reconnect. Returns None on success,
        else why it failed, with ``send_lock`` still held for `_run_direct`."""
        from .handoff import reconnect

        self._log(f"daemon lost: {reason}")
        _shutdown(conn.sock)
        self._send_lock.acquire()
        conn.sock.close()
        resume = self._handshake.resume_lines()
        lost = list(self._inflight.values())
        self._inflight.clear()
        if lost:
            self._out.write(b"".join(error_line(json.dumps(request_id).encode()) + b"\n" for request_id in lost))
            self._log(f"answered {len(lost)} in-flight request(s) with an error")
        if self._leaving:
            self._out.exit_between_lines(0)  # the client closed stdin: nothing more can be owed
        new = reconnect(self._opts, resume, self._log, None)
        if isinstance(new, str):
            return new
        self._conn = new
        self._send_lock.release()
        self._log(f"reconnected; resumed {len(resume)} handshake line(s)")
        return None

    def _run_direct(self, reason: str) -> int:
        """Run the server as a child for the rest of the session; returns its exit status. Called
        with ``send_lock`` held and nothing in flight: the stdin thread's lines wait for the server."""
        from . import fallback

        command = self._opts.command
        if not command:
            what = "--hub" if self._opts.hub else f"--server {self._opts.server}"  # no command to run
            say(f"daemon unavailable ({reason}); {what} cannot run without it")
            return 1
        child = fallback.start(command, reason, self._handshake.resume_lines(), self._init_key, self._out.write)
        if isinstance(child, int):
            return child
        self._log(f"running {command[0]} directly as pid {child.pid}")
        self._child = child
        self._send_lock.release()
        return child.pump(self._out.write)

    def _stdin_loop(self) -> None:
        try:
            self._read_stdin()
        except BaseException as exc:  # a bug here would otherwise leave the client hanging silently
            say(f"internal error in the stdin relay: {exc!r}")
            os._exit(70)

    def _read_stdin(self) -> None:
        lines = LineSplitter(wire.MAX_LINE_BYTES, self._head, self._handshake.discarding)  # lazyd/protocol/linepeek.py
        self._head = b""
        while True:
            try:
                chunk = os.read(0, READ_BYTES)
            except BlockingIOError:  # the client gave us a non-blocking pipe
                select.select([0], [], [])
                continue
            except OSError:
                chunk = b""
            for line, too_long in lines.feed(chunk) if chunk else lines.finish():
                if too_long:
                    self._too_long(line)
                else:
                    self._client_line(line)
            if not chunk:
                self._client_eof()
                return  # the directly run server is finishing; the main thread's pump ends the shim

    def _too_long(self, prefix: bytes) -> None:
        answer = too_long_answer(prefix, wire.MAX_LINE_BYTES)
        if answer is not None:
            self._out.write_line(answer)
            self._log(f"answered a request line over {wire.MAX_LINE_BYTES} bytes with -32600")
        else:
            self._log(f"dropped a line over {wire.MAX_LINE_BYTES} bytes that has no readable request id")

    def _client_line(self, line: bytes) -> None:
        info = inspect_line(line)
        with self._send_lock:
            with self._state_lock:
                if info.kind == "initialize":
                    self._handshake.init, self._init_key = line, info.requests[0][0]
                    self._handshake.init_answered = False
                elif info.kind == "initialized":
                    self._handshake.initialized = line
                if self._child is None:
                    for key, request_id in info.requests:
                        self._inflight[key] = request_id
                for key in info.cancelled:
                    self._inflight.pop(key, None)
                conn, child = self._conn, self._child
            if child is not None:
                try:
                    child.write_line(line)
                except OSError:
                    pass  # the server exited; the main thread's pump sees it and ends the shim
            elif conn is not None:
                try:
                    conn.sock.sendall(wire.encode_line(line))
                except OSError:
                    _shutdown(conn.sock)  # the main thread's read fails and runs recovery

    def _client_eof(self) -> None:
        with self._send_lock:  # no line of the client's is half sent
            with self._state_lock:
                self._leaving = True
                child = self._child
                owed = len(self._inflight) if child is None else 0
        if child is not None:
            # Run directly, the server itself sees the EOF (as it would without lazyd) and
            # answers what it read; the main thread's pump ends the shim when it exits.
            self._log("client closed stdin; closing the server's stdin")
            child.finish(EOF_WAIT_S)
            return
        if owed:
            self._log(f"client closed stdin; waiting for the answers to {owed} request(s)")
            self._out.wait_closed(self._drained_r, EOF_WAIT_S)
        self._log("client closed stdin; exiting")
        # Exiting closes the socket: the daemon cancels upstream what is still in flight.
        self._out.exit_between_lines(0)
