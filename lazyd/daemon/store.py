"""Snapshot files under the user cache dir, and the per-user key that names them.

File names are an HMAC of the registration identity under a random per-user key kept in the state
dir (mode 0600), so a file name reveals nothing about the environment (tokens) it was derived from
and cannot be guessed by another user. Writes are atomic (temporary file in the same directory,
fsync, rename); a file that cannot be read or parsed is ignored and rebuilt from the live server.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
from pathlib import Path

from lazyd.core import jsonrpc as rpc
from lazyd.core.cache import Snapshot

log = logging.getLogger("lazyd.store")

SECRET_BYTES = 32  # 256-bit HMAC key: as strong as the SHA-256 it keys
# A snapshot larger than this is not a cache we wrote: refuse to parse it rather than balloon memory.
MAX_SNAPSHOT_BYTES = 64 * 1024 * 1024


def _open_private(path: Path, flags: int) -> int:
    return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)


def load_or_create_secret(state_dir: Path) -> bytes:
    """The per-user identity key; created on first use."""
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = state_dir / "identity.key"
    try:
        fd = _open_private(path, os.O_RDONLY)
    except FileNotFoundError:
        key = secrets.token_bytes(SECRET_BYTES)
        tmp = path.with_name(f".identity.key.{os.getpid()}")
        fd = _open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            os.write(fd, key)
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            # link() fails if another daemon won the race: then its key is the one to use.
            os.link(tmp, path)
        except FileExistsError:
            pass
        finally:
            os.unlink(tmp)
        return load_or_create_secret(state_dir)
    try:
        key = os.read(fd, SECRET_BYTES + 1)
    finally:
        os.close(fd)
    if len(key) != SECRET_BYTES:
        raise ValueError(f"{path} is not a lazyd identity key (remove it to create a new one)")
    return key


class SnapshotStore:
    def __init__(self, cache_dir: Path) -> None:
        self.cache_dir = cache_dir

    def path_for(self, digest: str) -> Path:
        return self.cache_dir / f"{digest}.json"

    def load(self, digest: str) -> Snapshot:
        path = self.path_for(digest)
        try:
            fd = _open_private(path, os.O_RDONLY)
        except FileNotFoundError:
            return Snapshot()
        except OSError as exc:
            log.warning("cache %s unreadable (%s); starting empty", path.name, exc.strerror)
            return Snapshot()
        try:
            with os.fdopen(fd, "rb") as f:
                data = f.read(MAX_SNAPSHOT_BYTES + 1)
            if len(data) > MAX_SNAPSHOT_BYTES:
                raise ValueError("file too large")
            return Snapshot.from_json(json.loads(data))
        except (ValueError, OSError, RecursionError) as exc:
            log.warning("cache %s is corrupt (%s); ignoring it, it will be rebuilt", path.name, exc)
            return Snapshot()

    def save(self, digest: str, snapshot: Snapshot) -> None:
        """Atomically replace the snapshot file. Errors are logged: a cache is never worth a crash."""
        try:
            self.cache_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            path = self.path_for(digest)
            # Unique per writer: the runtime's saver thread and `lazyctl check` may save at once.
            tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
            # rpc.dumps, not json.dumps: it survives lone surrogates and NaN that peers do send.
            data = rpc.dumps(snapshot.to_json())
            fd = _open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except OSError as exc:
            log.error("cannot write cache %s: %s", digest[:12], exc)

    def remove(self, digest: str) -> None:
        try:
            self.path_for(digest).unlink()
        except FileNotFoundError:
            pass
