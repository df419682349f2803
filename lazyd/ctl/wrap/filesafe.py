"""Safe file handling for config edits: private state dirs, the wrap lock, backups, checked replace.

docs/wrapping.md, "Safety". Clients do not take the wrap lock: the pre-replace check is what guards
against their writes, optimistically.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from lazyd.errors import WrapError
from lazyd.host.privatefiles import PRIVATE_FILE_MODE, StagedFile, ensure_private_dir, write_private

LOCK_NAME = "wrap.lock"
BACKUPS_DIR_NAME = "backups"
MAX_CONFIG_BYTES = 64 * 1024 * 1024  # ~/.claude.json grows with per-project history: room for the largest


def ensure_state_dirs(state_dir: Path) -> None:
    """Create or validate ``state_dir`` and its ``registrations``/``backups`` (0700, ours); SetupError."""
    for path in (state_dir, state_dir / "registrations", state_dir / BACKUPS_DIR_NAME):
        ensure_private_dir(path, what="lazyd state dir")


@contextmanager
def wrap_lock(state_dir: Path) -> Iterator[None]:
    """The exclusive lock among lazyctl processes, held for the block."""
    path = state_dir / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, PRIVATE_FILE_MODE)
    except OSError as exc:
        raise WrapError(f"cannot open the wrap lock {path}: {exc.strerror}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"lazyctl: waiting for another lazyctl that holds {path}", file=sys.stderr)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the only descriptor releases the flock


@dataclass(frozen=True)
class Snapshot:
    """A config file as read: its resolved path, bytes, and the metadata a replace must keep."""

    path: Path
    data: bytes
    device: int
    inode: int
    mode: int
    uid: int
    gid: int


def read_snapshot(path: Path) -> Snapshot:
    """Read ``path`` (following symlinks to the real file). Raises WrapError for anything that
    cannot be replaced safely: missing, not a regular file, too large, another user's, hard-linked."""
    real = Path(os.path.realpath(path))
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise WrapError(f"{path} does not exist") from None
    except OSError as exc:
        raise WrapError(f"cannot open {path}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise WrapError(f"{path} is not a regular file")
        if info.st_size > MAX_CONFIG_BYTES:
            raise WrapError(f"{path} is larger than {MAX_CONFIG_BYTES // (1024 * 1024)} MiB; refusing to edit it")
        if info.st_uid != os.geteuid():
            raise WrapError(f"{path} belongs to another user; refusing to replace it")
        if info.st_nlink > 1:
            raise WrapError(f"{path} has {info.st_nlink} hard links; replacing it would split them")
        data = f.read(MAX_CONFIG_BYTES + 1)
    return Snapshot(real, data, info.st_dev, info.st_ino, stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid)


def backup(snapshot: Snapshot, state_dir: Path) -> Path:
    """Copy the snapshot's bytes to ``<state dir>/backups/`` (0600); return the backup's path."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    directory = state_dir / BACKUPS_DIR_NAME
    for attempt in range(100):
        # Without the leading dot of names like .claude.json: a backup should be seen, not hidden.
        target = directory / f"{snapshot.path.name.lstrip('.')}.{stamp}.{os.getpid()}.{attempt}.bak"
        try:
            if write_private(target, snapshot.data, exclusive=True):  # never over an older backup
                return target
        except OSError as exc:
            raise WrapError(f"cannot create a backup in {directory}: {exc.strerror}") from None
    raise WrapError(f"cannot create a backup in {directory}: too many backups this second")


def still_unchanged(snapshot: Snapshot) -> str | None:
    """None if the file still matches the snapshot, else what changed (for the error message)."""
    try:
        info = os.lstat(snapshot.path)
    except OSError as exc:
        return f"it can no longer be read ({exc.strerror})"
    if (info.st_dev, info.st_ino) != (snapshot.device, snapshot.inode):
        return "it was replaced by another file"
    if stat.S_IMODE(info.st_mode) != snapshot.mode or (info.st_uid, info.st_gid) != (snapshot.uid, snapshot.gid):
        return "its permissions or owner changed"
    try:
        with open(snapshot.path, "rb") as f:
            current = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        return f"it can no longer be read ({exc.strerror})"
    if current != snapshot.data:
        return "its contents changed"
    return None


def replace_checked(snapshot: Snapshot, data: bytes, before_replace: Callable[[], None] | None = None) -> None:
    """Replace the snapshot's file with ``data``, keeping its mode (and group where allowed);
    ``before_replace`` runs between staging and the final check (a test seam). WrapError if the
    file changed since the snapshot or for I/O: either way the original is untouched."""
    path = snapshot.path
    try:
        staged = StagedFile(path, snapshot.mode)  # the target's mode, not 0600: it is the user's file
    except OSError as exc:
        raise WrapError(f"cannot write next to {path}: {exc.strerror}") from None
    with staged:
        try:
            staged.write(data)
            assert staged.fd is not None
            if snapshot.gid != os.getegid():
                try:
                    os.fchown(staged.fd, -1, snapshot.gid)
                except PermissionError:
                    pass  # not a member of that group: the check below reports the difference
            staged.sync()  # before the check: nothing slow may stand between it and the rename
            if before_replace is not None:
                before_replace()
            changed = still_unchanged(snapshot)
            if changed is not None:
                raise WrapError(f"{path} changed while lazyctl was editing it ({changed}); nothing was written")
            if os.fstat(staged.fd).st_gid != snapshot.gid:
                raise WrapError(f"cannot keep the group of {path}; nothing was written")
            staged.commit()
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise WrapError(f"no space left to rewrite {path}; nothing was written") from None
            raise WrapError(f"cannot replace {path}: {exc.strerror}") from None
