"""The cache files under the user cache dir (each holds one registration's cache model, a
`Snapshot`: lazyd/core/cache.py), and the per-user key that names them.

A file's name is an HMAC of the registration identity under a random per-user key (0600, in the
state dir): it reveals nothing of the environment it came from and cannot be guessed by another
user. Writes are atomic and durable; a file that cannot be read is ignored and rebuilt.
"""

from __future__ import annotations

import contextlib
import json
import logging
import secrets
from pathlib import Path

from lazyd.core.relay import jsonrpc as rpc
from lazyd.core.cache import Snapshot
from lazyd.errors import StateFileError
from lazyd.host.privatefiles import read_private, write_private

log = logging.getLogger("lazyd.store")

SECRET_BYTES = 32  # 256-bit HMAC key: as strong as the SHA-256 it keys
MAX_KEY_FILE_BYTES = 4096  # read this much of a key file, so a wrong one is reported with its size
# A snapshot larger than this is not a cache we wrote: refuse to parse it rather than balloon memory.
MAX_SNAPSHOT_BYTES = 64 * 1024 * 1024


def load_or_create_secret(state_dir: Path) -> bytes:
    """The per-user identity key; created on first use. Raises StateFileError for a key that is not
    lazyd's own (lazyd.host.privatefiles) or not 32 bytes: every cache file name derives from it, so
    a daemon must not start with a key it cannot trust, nor silently replace one."""
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = state_dir / "identity.key"
    key = read_private(path, MAX_KEY_FILE_BYTES, secret=True)
    if key is None:
        # Exclusive: if another daemon won the race, its key is the one to use (read back below).
        write_private(path, secrets.token_bytes(SECRET_BYTES), exclusive=True)
        return load_or_create_secret(state_dir)
    if len(key) != SECRET_BYTES:
        raise StateFileError(f"{path}: is not a lazyd identity key ({len(key)} bytes, expected {SECRET_BYTES}); "
                             "remove it and lazyd makes a new one (cached handshakes and listings are then "
                             "fetched again)")
    return key


class CacheStore:
    def __init__(self, cache_dir: Path) -> None:
        self.cache_dir = cache_dir

    def path_for(self, digest: str) -> Path:
        return self.cache_dir / f"{digest}.json"

    def load(self, digest: str) -> Snapshot:
        """The snapshot cached for `digest`; an empty one, with one warning logged, for a file
        that is missing, not lazyd's own, unreadable or corrupt (the live server rebuilds it)."""
        path = self.path_for(digest)
        try:
            data = read_private(path, MAX_SNAPSHOT_BYTES)
        except StateFileError as exc:
            log.warning("ignoring a cache file: %s; it will be rebuilt", exc)
            return Snapshot()
        if data is None:
            return Snapshot()
        try:
            return Snapshot.from_json(json.loads(data))
        except (ValueError, RecursionError) as exc:
            log.warning("ignoring a cache file: %s: is not a lazyd cache (%s); it will be rebuilt", path,
                        str(exc)[:120] or type(exc).__name__)
            return Snapshot()

    def save(self, digest: str, snapshot: Snapshot) -> None:
        """Atomically replace the snapshot file. Errors are logged: a cache is never worth a crash."""
        try:
            self.cache_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            # rpc.dumps, not json.dumps: it survives lone surrogates and NaN that peers do send.
            # The writer's temporary names are unique per writer: the runtime's saver thread and
            # `lazyctl check` may save at once.
            write_private(self.path_for(digest), rpc.dumps(snapshot.to_json()))
        except OSError as exc:
            log.error("cannot write cache %s: %s", digest[:12], exc)

    def remove(self, digest: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path_for(digest).unlink()
