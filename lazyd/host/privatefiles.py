"""Directories and files that only this user may reach: the runtime, state and cache dirs, and
the files lazyd keeps in them (identity key, state records, caches, wrap records and backups).

A directory someone else prepared (the predictable ``$TMPDIR/runtime-<uid>`` can be squatted) is
refused, never repaired: we only chmod what we created. A file read is checked on the opened
descriptor, so the file checked is the file read; a refusal is one line (path, problem, fix), a
StateFileError or the caller's own (the config's). ``write_private`` is the one atomic writer: readers see the old file or the new one.
Standard library only: sockpath.py's daemon records use the writer too.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Callable, Mapping
from pathlib import Path

from lazyd.errors import LazydError, SetupError, StateFileError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import TracebackType

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600  # owner read/write: these files may hold credentials copied from configs


# --- directories ----------------------------------------------------------------------------------


def ensure_private_dir(path: Path, *, what: str = "runtime dir") -> None:
    """Make sure ``path`` is a directory only we can enter, creating it and missing parents 0700.
    Its parent is checked too when it is the predictable fallback ``runtime-<uid>``. SetupError
    naming the path and the problem; an existing mode is never changed."""
    path = Path(os.path.abspath(path))
    # Named with the effective uid, as lazyd.host.paths (and platformdirs) name it.
    if path.parent.name == f"runtime-{os.geteuid()}":
        _ensure_dir(path.parent, what=what)
    _ensure_dir(path, what=what)


def _ensure_dir(path: Path, *, what: str) -> None:
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        if not path.parent.exists():
            _ensure_dir(path.parent, what=what)
        _create_private(path, what=what)
        return
    except OSError as error:
        raise SetupError(f"refusing {what} {path}: {error.strerror}") from None
    _check_private(path, info, what=what)


def _create_private(path: Path, *, what: str) -> None:
    try:
        os.mkdir(path, PRIVATE_DIR_MODE)
    except FileExistsError:
        # Someone (a racing daemon, or a squatter) made it first: judge it like any existing dir.
        _ensure_dir(path, what=what)
        return
    except OSError as error:
        raise SetupError(f"cannot create {what} {path}: {error.strerror}") from None
    # Through its own fd: the checks and the chmod (the umask may have taken bits) apply to the
    # inode we just made, even if the name were swapped in between.
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as error:
        raise SetupError(f"refusing {what} {path}: replaced right after creation ({error.strerror})") from None
    try:
        info = os.fstat(fd)
        if info.st_uid != os.getuid():
            raise SetupError(f"refusing {what} {path}: owned by uid {info.st_uid}, not {os.getuid()}")
        if stat.S_IMODE(info.st_mode) != PRIVATE_DIR_MODE:
            os.fchmod(fd, PRIVATE_DIR_MODE)
    finally:
        os.close(fd)


def _check_private(path: Path, info: os.stat_result, *, what: str) -> None:
    if stat.S_ISLNK(info.st_mode):
        raise SetupError(f"refusing {what} {path}: it is a symlink")
    if not stat.S_ISDIR(info.st_mode):
        raise SetupError(f"refusing {what} {path}: it is not a directory")
    if info.st_uid != os.getuid():
        raise SetupError(f"refusing {what} {path}: owned by uid {info.st_uid}, not {os.getuid()}")
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077:
        raise SetupError(f"refusing {what} {path}: mode {mode:04o} gives access to group/other"
                         f" (fix with: chmod 700 {path})")


# --- reading ----------------------------------------------------------------------------------------


# What a refusal tells the user after the problem, per problem ({path}: the file's path; an unlisted
# one, nothing). lazyd wrote a state file itself, so the fix is mostly to remove it; the config passes its own.
STATE_FILE_FIXES = {
    "link": ", not a file lazyd wrote; remove it",
    "kind": "; remove it",
    "owner": "; lazyd only trusts files it wrote itself: remove it",
    "mode": "; fix it with: chmod 600 {path}",
    "size": ", which no file lazyd writes is; remove it",
    "read": "; fix it with: chmod 600 {path} (or remove it)",
}


def read_private(path: str | os.PathLike[str], max_bytes: int, *, secret: bool = False,
                 error: Callable[[str], LazydError] = StateFileError,
                 fixes: Mapping[str, str] = STATE_FILE_FIXES) -> bytes | None:
    """The contents of the file at `path`, or None when there is none; `error` (one line: the path,
    the problem and its fix from `fixes`) for a symlink, a file that is not regular, not ours,
    writable by others (with `secret`, readable too), unreadable or over `max_bytes`."""

    def refused(problem: str, what: str) -> LazydError:
        return error(f"{path}: {what}{fixes.get(problem, '').format(path=path)}")

    try:
        # O_NONBLOCK: opening a FIFO planted at this path must not hang the reader.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW's answer for a symlink
            raise refused("link", "is a symbolic link") from None
        raise refused("read", f"cannot be read: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise refused("kind", "is not a regular file")
        if info.st_uid != os.geteuid():
            raise refused("owner", f"is owned by uid {info.st_uid}, not by you (uid {os.geteuid()})")
        mode = stat.S_IMODE(info.st_mode)
        if mode & 0o022 or (secret and mode & 0o044):
            what = "readable or writable" if secret else "writable"
            raise refused("mode", f"is {what} by group or others (mode {mode:04o})")
        with os.fdopen(fd, "rb", closefd=False) as file:
            data = file.read(max_bytes + 1)
    except OSError as exc:
        raise refused("read", f"cannot be read: {exc.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise refused("size", f"is larger than {max_bytes} bytes")
    return data


# --- writing ----------------------------------------------------------------------------------------


class StagedFile:
    """A new version of ``path``, written beside it; ``commit`` puts it in place, and leaving the
    ``with`` block without one removes it. Raises OSError."""

    def __init__(self, path: str | os.PathLike[str], mode: int = PRIVATE_FILE_MODE) -> None:
        self.path = Path(path)
        # Unique among concurrent writers (a daemon and a lazyctl check may write one cache file).
        self.tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
        self.fd: int | None = os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                                      mode)
        self._done = False
        self._synced = False
        try:
            if stat.S_IMODE(os.fstat(self.fd).st_mode) != mode:
                os.fchmod(self.fd, mode)  # exactly `mode`: the umask may have taken bits away
        except BaseException:
            self.__exit__(None, None, None)
            raise

    def __enter__(self) -> StagedFile:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._close()
        if not self._done:
            try:
                os.unlink(self.tmp)
            except FileNotFoundError:
                pass

    def write(self, data: bytes) -> None:
        """Write all of ``data`` (os.write may write less than asked)."""
        assert self.fd is not None
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view):]

    def sync(self) -> None:
        """fsync now, so that a check right before the rename stays close to it."""
        assert self.fd is not None
        os.fsync(self.fd)
        self._synced = True

    def commit(self, *, durable: bool = True, exclusive: bool = False) -> bool:
        """Put the new file in place (with ``durable``, file and directory synced); with
        ``exclusive`` only if ``path`` does not exist yet, else False and the existing file kept."""
        assert self.fd is not None
        if durable and not self._synced:
            os.fsync(self.fd)
        self._close()
        if exclusive:
            try:
                os.link(self.tmp, self.path)
            except FileExistsError:
                return False  # another writer won the race; its file is the one to use
            os.unlink(self.tmp)
        else:
            os.replace(self.tmp, self.path)
        self._done = True
        if durable:
            fsync_dir(self.path.parent)
        return True

    def _close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def read_json(path: str | os.PathLike[str], max_bytes: int) -> object:
    """The JSON value of a file lazyd wrote itself, or None when there is none; at most
    `max_bytes` + 1 bytes are read, so a longer file fails to parse. OSError when it cannot be
    read, ValueError when it is not JSON (too deep included): its reader starts anew."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as f:
        text = f.read(max_bytes + 1)
    try:
        return json.loads(text)
    except RecursionError as exc:
        raise ValueError("nested too deeply") from exc


def read_string_lists(path: str | os.PathLike[str], max_bytes: int, max_keys: int, max_items: int,
                      keep: Callable[[str], bool] = lambda _: True) -> dict[str, list[str]]:
    """A JSON table of string keys to lists of strings, bounded (the first `max_keys` keys, the first
    `max_items` strings `keep` accepts); empty when missing, unreadable or of another shape."""
    try:
        data = read_json(path, max_bytes)
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: [x for x in v if isinstance(x, str) and keep(x)][:max_items]
            for k, v in list(data.items())[:max_keys] if isinstance(k, str) and isinstance(v, list)}


def write_private(path: str | os.PathLike[str], data: bytes, *, mode: int = PRIVATE_FILE_MODE,
                  durable: bool = True, exclusive: bool = False) -> bool:
    """Atomically make ``path`` hold ``data`` with ``mode``; raises OSError. Without ``durable`` a
    crash may leave the old file, never a torn one; ``exclusive``: see ``StagedFile.commit``."""
    with StagedFile(path, mode) as staged:
        staged.write(data)
        return staged.commit(durable=durable, exclusive=exclusive)


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """Sync a directory's entries (a rename in it); silently skipped where the filesystem refuses."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on directories; the rename is still atomic
    finally:
        os.close(fd)
