"""Where the daemon's socket is: ``LAZYD_SOCKET``, else a private per-user runtime directory.

The shim, lazyctl and the daemon all resolve it here, so they can never disagree. Standard
library only, and no platformdirs (whose rule ``runtime_dir`` follows, see test_sockpath.py): the
shim imports this on every client start.
"""

from __future__ import annotations

import os
import stat

# Not `from typing import TYPE_CHECKING`: the shim imports this module on every client start and
# typing costs milliseconds there; mypy treats any name TYPE_CHECKING as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

_SOCKET_TAIL = ("lazyd", "lazyd.sock")


def default_socket_path(env: Mapping[str, str]) -> str:
    """Return the socket path for ``env``: ``LAZYD_SOCKET``, else ``<runtime dir>/lazyd/lazyd.sock``.

    The runtime dir is chosen exactly as ``platformdirs.user_runtime_dir()`` (>= 4.14) chooses it on
    Linux, without importing platformdirs (the shim must start fast): ``$XDG_RUNTIME_DIR`` when it
    is absolute and private (missing, or a real directory of ours with mode 0700 under a trusted
    chain of parents), else ``/run/user/<uid>`` when that passes the same check and exists, else
    ``<tmp>/runtime-<uid>``. The result is not validated for use: whoever creates or connects must
    still check ownership and modes (the tmp fallback is a predictable name others can squat).
    """
    explicit = env.get("LAZYD_SOCKET", "")
    if explicit:
        return explicit
    return os.path.join(runtime_dir(env), *_SOCKET_TAIL)


def runtime_dir(env: Mapping[str, str]) -> str:
    """The per-user runtime directory (see `default_socket_path`); the daemon's paths use it too,
    so the shim and the daemon can never disagree on where the socket is."""
    xdg = env.get("XDG_RUNTIME_DIR", "")
    if xdg.startswith("/") and _private_dir_ok(xdg, missing_ok=True):
        return xdg
    return login_runtime_dir(env) or os.path.join(_temp_dir(env), f"runtime-{os.geteuid()}")


def login_runtime_dir(env: Mapping[str, str]) -> str | None:
    """``/run/user/<uid>`` when `env` has no usable ``XDG_RUNTIME_DIR`` and that directory is the
    user's as systemd-logind makes it (ours, 0700, under root-owned parents): the runtime dir a
    client that passes its servers no ``XDG_RUNTIME_DIR`` (Auggie, Codex) leaves a shim to find.
    A daemon such a shim starts is given it as ``XDG_RUNTIME_DIR`` (lazyd/host/daemonenv.py), so that
    it and its servers see the session's runtime dir as a terminal does. None otherwise."""
    xdg = env.get("XDG_RUNTIME_DIR", "")
    if xdg.startswith("/") and _private_dir_ok(xdg, missing_ok=True):
        return None
    run_user = f"/run/user/{os.geteuid()}"
    return run_user if _private_dir_ok(run_user, missing_ok=False) else None


def _private_dir_ok(path: str, *, missing_ok: bool) -> bool:
    # platformdirs' "private" runtime check: the dir itself is ours, 0700, not a symlink, and every
    # directory above it is owned by root or us and not writable by others (unless sticky).
    norm = os.path.normpath(path)
    if not _trusted_parents(os.path.dirname(norm), missing_ok=missing_ok):
        return False
    try:
        st = os.lstat(norm)
    except FileNotFoundError:
        return missing_ok
    except OSError:
        return False
    return (
        stat.S_ISDIR(st.st_mode)
        and st.st_uid == os.geteuid()
        and st.st_mode & 0o777 == 0o700
    )


_MAX_SYMLINKS = 40


def _trusted_parents(path: str, *, missing_ok: bool) -> bool:
    trusted = {0, os.geteuid()}
    pending = [p for p in path.split("/") if p][::-1]
    current = "/"
    links = 0
    while pending:
        entry = os.path.join(current, pending.pop())
        try:
            st = os.lstat(entry)
        except FileNotFoundError:
            return missing_ok
        except OSError:
            return False
        if st.st_uid not in trusted:
            return False
        if stat.S_ISLNK(st.st_mode):
            links += 1
            if links > _MAX_SYMLINKS:
                return False
            target = os.readlink(entry)
            if target.startswith("/"):
                current = "/"
            pending.extend([p for p in target.split("/") if p][::-1])
            continue
        if not stat.S_ISDIR(st.st_mode):
            return False
        if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
            return False
        current = entry
    return True


def _temp_dir(env: Mapping[str, str]) -> str:
    # tempfile.gettempdir()'s choice restricted to absolute candidates, as platformdirs does:
    # the first of $TMPDIR, $TEMP, $TMP, /tmp, /var/tmp, /usr/tmp that we can create files in.
    candidates = [env.get(name, "") for name in ("TMPDIR", "TEMP", "TMP")]
    candidates += ["/tmp", "/var/tmp", "/usr/tmp"]
    for candidate in candidates:
        if candidate.startswith("/") and os.path.isdir(candidate) and os.access(candidate, os.W_OK | os.X_OK):
            return os.path.abspath(candidate)
    return "/tmp"


# ---- discovery: the daemons of this user, whatever environment a client passes --------------------
# A client may start its shims without XDG_RUNTIME_DIR (Codex CLI passes a handful of variables),
# so a shim can compute another socket path than the user's shell. Every daemon therefore records
# where it listens in one place derived from HOME alone, which every client passes:
# ~/.local/state/lazyd/daemons/<pid>.json. A shim that finds no daemon at its own path looks there
# before starting one, and lazyctl reports the daemons it did not connect to.

DISCOVERY_TAIL = (".local", "state", "lazyd", "daemons")
_MAX_RECORD_BYTES = 4096


def discovery_dir(env: Mapping[str, str]) -> str | None:
    """Where daemons record their sockets: ``$HOME/.local/state/lazyd/daemons`` (HOME only, on
    purpose: XDG_STATE_HOME is one of the variables clients drop). None without an absolute HOME."""
    home = env.get("HOME", "")
    return os.path.join(home, *DISCOVERY_TAIL) if home.startswith("/") else None


def discovered_daemons(env: Mapping[str, str]) -> list[tuple[int, str]]:
    """(pid, socket path) of every live daemon recorded for this user, oldest pid first.

    Only a private directory of ours is read, and only regular files of ours in it (no symlink is
    followed): a record is a hint, the connection's peer uid is checked before any hello all the
    same. A record whose pid is gone is skipped (its daemon was killed before it could remove it).
    """
    directory = discovery_dir(env)
    if directory is None or not _private_dir_ok(directory, missing_ok=False):
        return []
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    found: list[tuple[int, str]] = []
    for name in names:
        pid_text = name.removesuffix(".json")
        if not pid_text.isdigit() or not name.endswith(".json"):
            continue
        record = _read_record(os.path.join(directory, name))
        if record is None or record[0] != int(pid_text) or not _alive(record[0]):
            continue
        found.append(record)
    return sorted(found)


def _read_record(path: str) -> tuple[int, str] | None:
    import json

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            return None
        data = json.loads(os.read(fd, _MAX_RECORD_BYTES))
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    pid, sock = (data.get("pid"), data.get("socket")) if isinstance(data, dict) else (None, None)
    if isinstance(pid, int) and not isinstance(pid, bool) and isinstance(sock, str) and sock.startswith("/"):
        return pid, sock
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False  # another user's process reusing the pid: not our daemon
    return True


def record_daemon(env: Mapping[str, str], pid: int, socket: str) -> str | None:
    """Record that daemon `pid` listens on `socket`; the record's path, or None if it could not be
    written (discovery is a convenience: a daemon runs without it)."""
    import json

    # Only the daemon writes records: the shim never pays for importing the writer.
    from lazyd.host.privatefiles import write_private

    directory = discovery_dir(env)
    if directory is None:
        return None
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        if not _private_dir_ok(directory, missing_ok=False):
            return None
        path = os.path.join(directory, f"{pid}.json")
        write_private(path, json.dumps({"pid": pid, "socket": socket}).encode(), durable=False)
        return path
    except OSError:
        return None
