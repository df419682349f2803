"""Starting the daemon so that it belongs to nobody's process tree, and still hearing why it failed.

Clients end their servers by closing stdin, by killing the shim's process group, or (opencode) by
killing every descendant of the process they started. An autostarted daemon must survive all
three, with its servers: it must be in none of the shim's session, process group or ancestry::

    shim ──fork──► C: setsid(), spawn D, report its pid (or the spawn's error), _exit (the shim reaps C)
                   └──► D, the daemon, reparented to init: its own session, cwd /, stdin and stdout
                        /dev/null, stderr the shim's pipe, no other descriptor, the environment given

Only a parent reads an exit status, and the shim is not D's: D tells it on its stderr, which it
keeps until it listens (``--stderr-until-ready``): its last line before it exits is ``exit N``
(lazyd/daemon/__main__.py). Between the fork and ``_exit`` C makes system calls only: it never
returns into the shim's code.
"""

from __future__ import annotations

import os
import subprocess

MAX_STDERR_BYTES = 64 * 1024  # what is read of a daemon's stderr while it starts


class Detached:
    """A daemon started by `launch`: its pid, and its stderr until it listens or exits."""

    def __init__(self, pid: int, stderr_fd: int) -> None:
        self.pid = pid
        self._fd = stderr_fd
        self.stderr = b""
        self.closed = False  # the daemon closed its stderr: it listens, or it exited

    def poll(self) -> int | None:
        """The daemon's exit status once it exited before it listened, else None (-1: it died
        without saying, a signal or a crash)."""
        while not self.closed and self._fd >= 0:
            try:
                chunk = os.read(self._fd, MAX_STDERR_BYTES)
            except BlockingIOError:
                return None
            self.closed = not chunk or len(self.stderr) >= MAX_STDERR_BYTES
            self.stderr += chunk
        lines = self.stderr.decode("utf-8", "replace").splitlines()
        if lines and lines[-1].startswith("exit ") and lines[-1][5:].lstrip("-").isdigit():
            return int(lines[-1][5:])
        return -1 if self.closed and not _alive(self.pid) else None

    def reason(self) -> str:
        """The last line the daemon wrote before its exit status, without its "lazyd: " prefix."""
        lines = [line.strip() for line in self.stderr.decode("utf-8", "replace").splitlines() if line.strip()]
        if lines and lines[-1].startswith("exit "):
            lines.pop()
        return lines[-1].removeprefix("lazyd: ")[:1000] if lines else ""

    def close(self) -> None:
        """Stop listening to the daemon's stderr."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie does not: init may be slow to reap it)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read()
    except OSError:
        return False
    return fields[fields.rindex(b")") + 2:][:1] != b"Z"


def launch(argv: list[str], env: dict[str, str]) -> Detached:
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
    with os.fdopen(status_r, "rb") as status:
        word, _, value = status.read().decode("ascii", "replace").partition(" ")
    while True:
        try:
            os.waitpid(child, 0)
            break
        except InterruptedError:
            continue
    if word != "pid":
        os.close(err_r)
        errno_text, _, message = value.partition(" ")
        if word == "error":
            raise OSError(int(errno_text), message)
        raise OSError(0, "the process that starts the daemon ended before it could")
    os.set_blocking(err_r, False)
    return Detached(int(value), err_r)


def _first_child(argv: list[str], env: dict[str, str], status_w: int, err_w: int) -> None:
    """C: a new session, the daemon spawned in it with only its stdio, its pid told, and out."""
    try:
        os.setsid()
        try:
            daemon = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err_w,
                                      close_fds=True, cwd="/", start_new_session=True, env=env)
        except OSError as exc:
            os.write(status_w, f"error {exc.errno or 0} {exc.strerror or exc}".encode("ascii", "replace"))
        else:
            os.write(status_w, f"pid {daemon.pid}".encode())
    finally:
        os._exit(0)
