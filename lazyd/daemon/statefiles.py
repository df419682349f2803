"""Reading the daemon's own state files safely: the identity key, `state.json`, the cache files.

These files are written by lazyd alone, 0600, in directories only the user can enter. Anything
else found at their names was put there by someone or something else, and is judged here before a
byte of it is used:

- a symbolic link (opened with ``O_NOFOLLOW``), something that is not a regular file, a file
  owned by another uid, or one writable by group or others: not ours, whatever it says;
- for a secret (the identity key), also a file readable by group or others;
- a file that cannot be read (``EACCES``, ``EIO``...) or is larger than its bound.

The checks look at the opened descriptor, so the file checked is the file read. Each problem is a
`StateFileError` whose text is one line: the path, what is wrong, and the fix. What a caller does
with it is the caller's rule: the identity key refuses to start the daemon (exit status 2, since
every cache name depends on it), `state.json` and a cache file are ignored with one warning and
rewritten (lazyd can rebuild both).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

__all__ = ["StateFileError", "read_private"]


class StateFileError(Exception):
    """A state file lazyd will not use; `str()` is one line naming the file, the problem and the fix."""


def read_private(path: Path, max_bytes: int, *, secret: bool = False) -> bytes | None:
    """The contents of the state file at `path`, or None when there is none.

    Raises StateFileError (see the module docstring) for a file that is not lazyd's own, cannot be
    read, or holds more than `max_bytes`. With `secret`, group or other read access is refused
    too. The descriptor is always closed.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise StateFileError(f"{path}: is a symbolic link, not a file lazyd wrote; remove it") from None
        raise StateFileError(f"{path}: cannot be read: {error.strerror}; {_fix_access(path)}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise StateFileError(f"{path}: is not a regular file; remove it")
        if info.st_uid != os.geteuid():
            raise StateFileError(f"{path}: is owned by uid {info.st_uid}, not by you (uid {os.geteuid()}); "
                                 "lazyd only trusts files it wrote itself: remove it")
        mode = stat.S_IMODE(info.st_mode)
        if mode & 0o022 or (secret and mode & 0o044):
            what = "readable or writable" if secret else "writable"
            raise StateFileError(f"{path}: is {what} by group or others (mode {mode:04o}); "
                                 f"fix it with: chmod 600 {path}")
        with os.fdopen(fd, "rb", closefd=False) as file:
            data = file.read(max_bytes + 1)
    except OSError as error:
        raise StateFileError(f"{path}: cannot be read: {error.strerror}; {_fix_access(path)}") from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise StateFileError(f"{path}: is larger than {max_bytes} bytes, which no file lazyd writes is; remove it")
    return data


def _fix_access(path: Path) -> str:
    return f"fix it with: chmod 600 {path} (or remove it)"
