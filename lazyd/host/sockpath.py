"""Where the daemon's socket is: ``LAZYD_SOCKET``, else a private per-user runtime directory.

The shim, lazyctl and the daemon all resolve it here, so they never disagree. No platformdirs
(whose rule ``runtime_dir`` follows, see test_sockpath.py): the shim imports this at every start.
"""

from __future__ import annotations

import os
import stat

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the shim start-up time
if TYPE_CHECKING:
    from collections.abc import Mapping

_SOCKET_TAIL = ("lazyd", "lazyd.sock")


def default_socket_path(env: Mapping[str, str]) -> str:
    """The socket path for ``env``: ``LAZYD_SOCKET``, else ``<runtime dir>/lazyd/lazyd.sock``. Not
    validated for use: whoever creates or connects still checks ownership and modes."""
    explicit = env.get("LAZYD_SOCKET", "")
    if explicit:
        return explicit
    return os.path.join(runtime_dir(env), *_SOCKET_TAIL)


def runtime_dir(env: Mapping[str, str]) -> str:
    """The per-user runtime directory, as ``platformdirs.user_runtime_dir()`` (>= 4.14) chooses it on
    Linux: ``$XDG_RUNTIME_DIR`` when absolute and private (missing, or ours, 0700, under trusted
    parents), else ``/run/user/<uid>`` when it exists and passes that check, else
    ``<tmp>/runtime-<uid>`` (a predictable name others can squat)."""
    xdg = env.get("XDG_RUNTIME_DIR", "")
    if xdg.startswith("/") and _private_dir_ok(xdg, missing_ok=True):
        return xdg
    return login_runtime_dir() or os.path.join(_temp_dir(env), f"runtime-{os.geteuid()}")


def login_runtime_dir() -> str | None:
    """``/run/user/<uid>`` when logind made it private for us, else None. A shim whose client passes
    no ``XDG_RUNTIME_DIR`` (Auggie, Codex) gives it to the daemon it starts as that variable
    (lazyd/host/daemonenv.py), as a terminal would."""
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
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and st.st_mode & 0o777 == 0o700


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


# Discovery: a client may start its shims without XDG_RUNTIME_DIR, so a shim can compute another
# socket path than the user's shell. Every daemon records where it listens under HOME alone, which
# every client passes; a shim that finds no daemon at its own path looks there before starting
# one, and lazyctl reports the daemons it did not connect to.

DISCOVERY_TAIL = (".local", "state", "lazyd", "daemons")
_MAX_RECORD_BYTES = 4096


def discovery_dir(env: Mapping[str, str]) -> str | None:
    """``$HOME/.local/state/lazyd/daemons`` (not XDG_STATE_HOME: clients drop it); None without HOME."""
    home = env.get("HOME", "")
    return os.path.join(home, *DISCOVERY_TAIL) if home.startswith("/") else None


def discovered_daemons(env: Mapping[str, str]) -> list[tuple[int, str]]:
    """(pid, socket path) of every live daemon recorded for this user, oldest pid first. Only our
    own files in our private directory are read; a record is a hint (the peer uid is checked at
    connect all the same), and one whose pid is gone is skipped."""
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

    # Only on the way to a daemon elsewhere: a warm start never imports the trusted reader.
    from lazyd.errors import StateFileError
    from lazyd.host.privatefiles import read_private

    try:
        data = json.loads(read_private(path, _MAX_RECORD_BYTES) or b"null")
    except (StateFileError, ValueError):
        return None
    pid, sock = (data.get("pid"), data.get("socket")) if isinstance(data, dict) else (None, None)
    if isinstance(pid, int) and not isinstance(pid, bool) and isinstance(sock, str) and sock.startswith("/"):
        return pid, sock
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):  # gone, or another user's process reusing the pid
        return False
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
