"""Running the real server without the daemon ("fail open").

At start, before anything was read from stdin, ``exec_directly`` replaces the shim with the server,
as if lazyd were not installed. After the daemon was lost mid-session and could not be had back,
``start`` runs the server as a child, replays the client's ``initialize`` (dropping its
answer: the client had one long ago) and ``notifications/initialized``, then copies bytes both
ways. The child stays in the shim's process group, with its environment and stderr.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess

from .options import say

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs start-up time
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import NoReturn

    from lazyd.protocol.linepeek import IdKey

STOP_GRACE_S = 0.5  # a failed server's time to exit on EOF before SIGTERM

_READ_BYTES = 64 * 1024


def _cannot_run(command: list[str], exc: OSError) -> int:
    say(f"cannot run {command[0]}: {exc.strerror or exc}")
    return 127 if isinstance(exc, FileNotFoundError) else 126


def exec_directly(command: list[str], reason: str) -> NoReturn:
    """Say why on stderr, then become ``command``. Exits 127/126 if it cannot be run."""
    say(f"daemon unavailable ({reason}); running the server directly")
    for signum in (signal.SIGPIPE, signal.SIGXFSZ):  # Python ignores them; exec would pass that on
        signal.signal(signum, signal.SIG_DFL)
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        os._exit(_cannot_run(command, exc))


def start(command: list[str], reason: str, replay: list[bytes], init_key: IdKey | None,
          forward: Callable[[bytes], None]) -> DirectServer | int:
    """Say why on stderr, then run ``command`` as a child with the client's handshake `replay`ed
    (initialize, then initialized), dropping the answer to the first, the request `init_key`;
    other server lines go to ``forward``. Returns the child, or the exit status to end with."""
    say(f"daemon unavailable ({reason}); running the server directly")
    try:
        child = DirectServer(command)
    except OSError as exc:
        return _cannot_run(command, exc)
    problem = child.replay(replay, init_key, forward) if replay else None
    if problem is not None:
        say(f"the directly run server failed: {problem}")
        child.finish(STOP_GRACE_S)
        return 1
    return child


class DirectServer:
    """The real server as a child process with piped stdin/stdout."""

    def __init__(self, command: list[str]) -> None:
        """Start ``command``; raises OSError if it cannot be started."""
        self._proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True)
        stdin, stdout = self._proc.stdin, self._proc.stdout
        assert isinstance(stdin, io.BufferedWriter) and isinstance(stdout, io.BufferedReader)
        self._stdin = stdin
        self._stdout = stdout
        self.pid = self._proc.pid

    def write_line(self, line: bytes) -> None:
        """Send one line to the server; raises OSError (BrokenPipeError) once it is gone."""
        self._stdin.write(line + b"\n")
        self._stdin.flush()

    def replay(self, lines: list[bytes], init_key: IdKey | None, forward: Callable[[bytes], None]) -> str | None:
        """See `start`; returns why the server did not take the handshake, None once it did. A
        server that never answers holds the session as it would hold its client run directly."""
        from lazyd.protocol.jsonline import read
        from lazyd.protocol.linepeek import id_key

        try:
            self.write_line(lines[0])
            while line := self._stdout.readline():
                message, refused = read(line.rstrip(b"\r\n"))
                answer = refused is None and isinstance(message, dict) and "method" not in message
                if answer and id_key(message.get("id")) == init_key:
                    for rest in lines[1:]:
                        self.write_line(rest)
                    return None
                forward(line)
        except OSError as exc:
            return f"the server stopped reading: {exc.strerror or exc}"
        return "the server exited before answering the replayed initialize"

    def pump(self, forward_raw: Callable[[bytes], None]) -> int:
        """Copy the server's stdout to ``forward_raw`` until it closes; return its exit status."""
        while chunk := self._stdout.read1(_READ_BYTES):
            forward_raw(chunk)
        status = self._proc.wait()
        return 128 - status if status < 0 else status  # 128 + n for death by signal n, as a shell says

    def finish(self, wait_s: float) -> None:
        """Close the server's stdin and give it `wait_s` to answer what it read and exit, as it
        would run without lazyd; then SIGTERM it."""
        try:
            self._stdin.close()
        except OSError:
            pass
        try:
            self._proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            self._proc.terminate()
