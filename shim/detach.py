"""Starting the daemon so that it belongs to nobody's process tree, and still hearing why it failed.

Clients end their servers by closing stdin, by killing the shim's process group, or (opencode) by
killing every descendant of the process they started. An autostarted daemon must survive all
three, with its servers: it must be in none of the shim's session, process group or ancestry::

    shim ──fork──► C: setsid(), fork, _exit at once (the shim reaps it)
                   └──► W, the watcher, reparented to init: nothing of the shim's left but two pipes
                        └──► D, the daemon: its own session, cwd /, stdin and stdout /dev/null,
                             stderr the shim's pipe, no other descriptor, the environment given

Only a parent reads an exit status, and the shim needs the daemon's (0: another daemon runs, 2: a
file the user must fix, else it cannot start). W writes ``pid N`` on the status pipe once D
exists, then ``exit N`` if D exits, and exits itself once the shim closes its end or after
``WATCH_BOUND_S``; D is then nobody's descendant. Between the forks and ``_exit`` the children
make system calls only: they never return into the shim's code.
"""

from __future__ import annotations

import os
import select
import subprocess

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs start-up time
if TYPE_CHECKING:
    from typing import BinaryIO

WATCH_BOUND_S = 30.0  # the longest a watcher outlives a shim that never closed its end
WATCH_POLL_MS = 20  # how often a watcher without pidfd_open looks for the daemon's exit


class Detached:
    """A daemon started by `launch`: its pid, its exit status as the watcher reports it, and the
    read end of its stderr pipe (the parts of `subprocess.Popen` the autostart reads)."""

    def __init__(self, status_fd: int, stderr: BinaryIO) -> None:
        self.pid = 0
        self.stderr: BinaryIO | None = stderr
        self.returncode: int | None = None  # Popen's convention: -N for signal N
        self.error: tuple[int, str] | None = None  # the spawn's errno and message
        self._status_fd = status_fd
        self._pending = b""

    def _read(self, block_s: float) -> None:
        """Take the watcher's complete report lines; waits up to `block_s` for the first."""
        ready, _, _ = select.select([self._status_fd], [], [], block_s)
        while ready:
            try:
                chunk = os.read(self._status_fd, 512)
            except BlockingIOError:
                break
            if not chunk:
                break
            *lines, self._pending = (self._pending + chunk).split(b"\n")
            for line in lines:
                word, _, value = line.decode("ascii", "replace").partition(" ")
                if word == "pid":
                    self.pid = int(value)
                elif word == "exit":
                    self.returncode = int(value)
                elif word == "error":
                    errno_text, _, message = value.partition(" ")
                    self.error = int(errno_text), message
            ready, _, _ = select.select([self._status_fd], [], [], 0.0 if self.pid or self.error else block_s)

    def poll(self) -> int | None:
        """The daemon's exit status once it exited while the shim listened, else None."""
        if self.returncode is None and self._status_fd >= 0:
            self._read(0.0)
        return self.returncode

    def close(self) -> None:
        """Stop listening: the watcher exits, and the daemon is nobody's child any more."""
        if self._status_fd >= 0:
            os.close(self._status_fd)
            self._status_fd = -1


def launch(argv: list[str], ready_wait_s: float, env: dict[str, str]) -> Detached:
    """Start `argv` as the daemon, detached (see the module docstring), with exactly `env` for its
    environment. Raises OSError when it cannot be started (the spawn's error: ENOENT, EACCES...)."""
    status_r, status_w = os.pipe()  # both non-inheritable: the daemon gets neither
    err_r, err_w = os.pipe()
    try:
        child = os.fork()
    except OSError:
        for fd in (status_r, status_w, err_r, err_w):
            os.close(fd)
        raise
    if child == 0:
        _first_child(argv, env, status_w, err_w)  # never returns
    os.close(status_w)
    os.close(err_w)
    _reap(child)
    stderr = os.fdopen(err_r, "rb", buffering=0)
    detached = Detached(status_r, stderr)
    detached._read(ready_wait_s)
    if not detached.pid:
        detached.close()
        stderr.close()
        if detached.error is not None:
            raise OSError(*detached.error)
        raise OSError(0, "the process that starts the daemon ended before it could")
    return detached


def _reap(pid: int) -> None:
    while True:
        try:
            os.waitpid(pid, 0)
            return
        except InterruptedError:
            continue
        except ChildProcessError:
            return


def _first_child(argv: list[str], env: dict[str, str], status_w: int, err_w: int) -> None:
    """C: a new session, then the watcher in a child of its own, and out at once."""
    code = 1
    try:
        os.setsid()
        if os.fork() == 0:
            _watcher(argv, env, status_w, err_w)
        code = 0
    finally:
        os._exit(code)


def _watcher(argv: list[str], env: dict[str, str], status_w: int, err_w: int) -> None:
    """W: spawn the daemon, report its pid and (if it exits while the shim listens) its status."""
    try:
        _only_these_fds(status_w, err_w)
        os.chdir("/")
        try:
            daemon = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err_w,
                                      close_fds=True, cwd="/", start_new_session=True, env=env)
        except OSError as exc:
            _say(status_w, f"error {exc.errno or 0} {exc.strerror or exc}")
            return
        os.close(err_w)  # the daemon's copy is the only writer: EOF when it is done with it
        _say(status_w, f"pid {daemon.pid}")
        status = _wait(daemon, status_w)
        if status is not None:
            _say(status_w, f"exit {status}")
    finally:
        os._exit(0)


def _only_these_fds(*keep: int) -> None:
    """Close every descriptor of the shim's in the watcher (the client's pipes, the spawn lock's
    flock, the daemon socket), and put /dev/null on 0, 1 and 2."""
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        if fd not in keep:
            os.dup2(devnull, fd)
    try:
        open_fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        open_fds = list(range(3, 1024))
    for fd in open_fds:
        if fd > 2 and fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


def _wait(daemon: subprocess.Popen[bytes], status_w: int) -> int | None:
    """The daemon's exit status if it exits before the shim closes its end (None: it did not)."""
    poller = select.poll()
    poller.register(status_w, 0)  # POLLERR/POLLHUP come anyway: the shim closed its end
    pidfd = -1
    try:
        pidfd = os.pidfd_open(daemon.pid)
        poller.register(pidfd, select.POLLIN)
    except (AttributeError, OSError):
        pass  # an old kernel or a sandbox: look for the exit every WATCH_POLL_MS instead
    waited_ms = 0
    timeout = -1 if pidfd >= 0 else WATCH_POLL_MS
    bound_ms = int(WATCH_BOUND_S * 1000)
    while waited_ms < bound_ms:
        events = poller.poll(timeout if timeout >= 0 else bound_ms - waited_ms)
        status = daemon.poll()
        if status is not None:
            return status
        if any(fd == status_w for fd, _ in events):
            return None
        waited_ms += timeout if timeout >= 0 else bound_ms
    return None


def _say(fd: int, line: str) -> None:
    try:
        os.write(fd, line.encode("ascii", "replace") + b"\n")
    except OSError:
        pass  # the shim stopped listening
