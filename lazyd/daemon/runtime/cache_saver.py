"""Persisting one runtime's cache model (the relay core's snapshot) without blocking the loop.

The relay core says when its snapshot changed (`SnapshotChanged`); the runtime calls `want()`, and
the saver task writes a copy in a worker thread (the store fsyncs), coalescing changes that come
while a write is under way. The era lanes of one registration share one snapshot and one file,
so they share one lock: each copy is taken inside it, and an older copy never lands after a newer
one. At shutdown `save_now` writes what is still wanted, synchronously.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import trio

from lazyd.core.cache import Snapshot
from lazyd.daemon.runtime.cache_store import CacheStore

__all__ = ["CacheSaver"]


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
