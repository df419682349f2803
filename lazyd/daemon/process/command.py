"""What a server process is to run, with which environment, and how it ended.

`SpawnSpec` (argv, cwd, environment, log file, stdout line limit); `resolve_command`, the file
execvp would run, found before any fork so "not found" is a readable `SpawnError`; `child_env`, the
environment without systemd's per-service variables (a server that speaks sd_notify must not talk
to our supervisor); `ExitInfo`, how it ended in one line. The process itself is
lazyd/daemon/process/child.py.
"""

from __future__ import annotations

import errno
import os
import signal
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from lazyd.errors import SpawnError

MAX_LINE_BYTES = 16 * 1024 * 1024
"""Default stdout line limit: the wire's MAX_LINE_BYTES, above the TypeScript SDK's 10 MiB."""



@dataclass(frozen=True)
class SpawnSpec:
    """What to run: argv[0] is resolved against env's PATH, relative to cwd."""

    argv: tuple[str, ...]
    cwd: str
    env: Mapping[str, str]
    log_path: Path
    max_line_bytes: int = MAX_LINE_BYTES


@dataclass(frozen=True)
class ExitInfo:
    """How a server process ended, for status output and JSON-RPC errors."""

    returncode: int | None
    """The exit status, or None if it was killed by a signal or is unknown."""
    signal: int | None
    """The number of the signal that killed it, if one did."""
    stderr_tail: tuple[str, ...] = field(default=())
    """The last lines of its stderr, oldest first."""

    def describe(self, tail_lines: int = 3) -> str:
        """A one-line summary: "exited with status 1; stderr: ..." or "killed by SIGKILL"."""
        if self.signal is not None:
            try:
                name = signal.Signals(self.signal).name
            except ValueError:
                name = f"signal {self.signal}"
            text = f"killed by {name}"
        elif self.returncode is not None:
            text = f"exited with status {self.returncode}"
        else:
            text = "exit status unknown"
        shown = [line.strip() for line in self.stderr_tail if line.strip()][-tail_lines:]
        if shown and tail_lines > 0:
            text += "; stderr: " + " | ".join(shown)
        return text

    @classmethod
    def from_returncode(cls, rc: int | None, tail: tuple[str, ...]) -> ExitInfo:
        """Map a Popen-style code (negative = killed by that signal) to an ExitInfo."""
        if rc is not None and rc < 0:
            return cls(returncode=None, signal=-rc, stderr_tail=tail)
        return cls(returncode=rc, signal=None, stderr_tail=tail)


def _is_executable_file(path: str) -> bool:
    try:
        st = os.stat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and os.access(path, os.X_OK)


def resolve_command(name: str, cwd: str, path_var: str | None) -> str:
    """Find the file execvp would run for `name`, as an absolute path, or raise SpawnError: a name
    with a slash as is, else each PATH entry (empty: cwd); a match not executable is EACCES."""
    if not name:
        raise SpawnError(errno.ENOENT, "cannot execute an empty command name")
    if "/" in name:
        candidates = [os.path.join(cwd, name)]
    else:
        dirs = (path_var if path_var is not None else os.defpath).split(os.pathsep)
        candidates = [os.path.join(cwd, d, name) for d in dirs]
    denied = False
    for candidate in candidates:
        if _is_executable_file(candidate):
            return os.path.abspath(candidate)
        denied = denied or os.path.exists(candidate)
    err = errno.EACCES if denied else errno.ENOENT
    raise SpawnError(err, f"cannot execute '{name}': {os.strerror(err)}")


def executable_for(spec: SpawnSpec) -> str:
    """The file to execute for `spec`, its argv and working directory checked; or SpawnError."""
    if not spec.argv:
        raise SpawnError(errno.ENOENT, "cannot execute an empty command")
    if not os.path.isdir(spec.cwd):
        err = errno.ENOTDIR if os.path.exists(spec.cwd) else errno.ENOENT
        raise SpawnError(err, f"cannot use working directory '{spec.cwd}': {os.strerror(err)}")
    return resolve_command(spec.argv[0], spec.cwd, spec.env.get("PATH"))
