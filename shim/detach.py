"""Starting the daemon so that it belongs to nobody's process tree, and still hearing why it failed.

Clients end their servers by closing stdin, by killing the shim's process group, or (opencode) by
killing every descendant of the process they started. An autostarted daemon must survive all
three, with its servers: it must be in none of the shim's session, process group or ancestry.
util-linux's ``setsid --fork`` gives that: its child starts a session of its own and becomes the
daemon while it exits at once, so the daemon is reparented to init. The daemon gets cwd /, stdin
and stdout /dev/null, stderr a pipe of the shim's, no other descriptor and exactly the environment
given.

Only a parent reads an exit status, and the shim is not the daemon's: the daemon tells it on its
stderr, which it keeps until it listens (``--stderr-until-ready``): its last line before it exits
is ``exit N`` (lazyd/daemon/__main__.py). Its stderr ending without that line means it listens, or
it died without saying (a signal, a crash, or setsid's own error).
"""

from __future__ import annotations

import os
import subprocess

MAX_STDERR_BYTES = 64 * 1024  # what is kept of a daemon's stderr while it starts (the end of it)
SETSIDS = ("/usr/bin/setsid", "/bin/setsid")  # util-linux's, as flock(1) is (shim/slots.py)


class Detached:
    """A daemon started by `launch`: its stderr until it listens or exits."""

    def __init__(self, stderr_fd: int) -> None:
        self._fd = stderr_fd
        self.stderr = b""
        self.closed = False  # the daemon closed its stderr: it listens, or it exited

    def poll(self) -> int | None:
        """The daemon's exit status once it exited before it listened; -1 once its stderr ended
        without one (it listens, or it died without saying); else None."""
        while not self.closed and self._fd >= 0:
            try:
                chunk = os.read(self._fd, MAX_STDERR_BYTES)
            except BlockingIOError:
                return None
            self.closed = not chunk
            self.stderr = (self.stderr + chunk)[-MAX_STDERR_BYTES:]
        lines = self.stderr.decode("utf-8", "replace").splitlines()
        if lines and lines[-1].startswith("exit ") and lines[-1][5:].lstrip("-").isdigit():
            return int(lines[-1][5:])
        return -1 if self.closed else None

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


def launch(argv: list[str], env: dict[str, str]) -> Detached:
    """Start `argv` as the daemon, detached (see the module docstring), with exactly `env` for its
    environment. Raises OSError when setsid(1) cannot be run; the daemon's own failure to start
    comes on its stderr."""
    setsid = next((path for path in SETSIDS if os.access(path, os.X_OK)), SETSIDS[0])
    err_r, err_w = os.pipe()
    try:
        # setsid exits as soon as it has forked the daemon: waited for here, never a zombie.
        subprocess.run([setsid, "--fork", *argv], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=err_w, close_fds=True, cwd="/", env=env, check=False)
    except OSError:
        os.close(err_r)
        raise
    finally:
        os.close(err_w)
    os.set_blocking(err_r, False)
    return Detached(err_r)
