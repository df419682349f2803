"""Persisting one runtime's cache model (the relay core's snapshot) without blocking the loop.

On `want()` (the core's `SnapshotChanged`) the saver task writes a copy in a worker thread,
coalescing changes that come meanwhile. The era lanes of a registration share one snapshot, file
and lock, each copy taken inside it, so an older copy never lands after a newer one. `save_now`
writes what is still wanted at shutdown, synchronously.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import trio

from lazyd.core.cache import Snapshot
from lazyd.daemon.runtime.cache_store import CacheStore


class CacheSaver:
    """The save task of one runtime: `run` in its nursery, `want` after each change."""

    def __init__(self, store: CacheStore, digest: str, snapshot: Callable[[], Snapshot],
                 lock: trio.Lock) -> None:
        self._store = store
        self._digest = digest
        self._snapshot = snapshot
        self.lock = lock
        self._wanted = trio.Event()

    def want(self) -> None:
        self._wanted.set()

    async def run(self) -> None:
        while True:
            await self._wanted.wait()
            self._wanted = trio.Event()
            async with self.lock:
                snapshot = self._snapshot()
                snapshot.updated_at = time.time()
                data = Snapshot.from_json(snapshot.to_json())  # a copy: the loop may change it meanwhile
                await trio.to_thread.run_sync(self._store.save, self._digest, data)

    def save_now(self) -> None:
        if self._wanted.is_set():
            self._store.save(self._digest, self._snapshot())
