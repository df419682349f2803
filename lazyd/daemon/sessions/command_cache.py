"""Cache starts everywhere: a registration with nothing cached starts from the listings of the same
command run under another identity.

A process and its cache file are per identity (lazyd/core/sharing/identity.py), yet most servers
list the same tools in every directory and to every client. So a new runtime whose cache is empty
starts from a copy of the freshest snapshot recorded for the same resolved command, among the live
runtimes and the cache files `<state dir>/commands.json` names (keyed hashes only, no command
line), with the handshakes only older ones recorded. Its listings are served by the capability
rule (docs/relay.md): only to a client of a handshake they were recorded for; any other starts the
server, whose first start gives the identity a cache of its own.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path

from lazyd.core.cache import Snapshot
from lazyd.core.sharing.identity import Identity
from lazyd.daemon.runtime.cache_store import CacheStore
from lazyd.daemon.runtime.supervisor import ServerRuntime
from lazyd.daemon import state_files
from lazyd.host.privatefiles import read_string_lists

log = logging.getLogger("lazyd.registry")

FILE_NAME = "commands.json"
MAX_COMMANDS = 512
MAX_DIGESTS_PER_COMMAND = 16  # identities of one command: directories, clients
MAX_FILE_BYTES = 1024 * 1024


def has_content(snapshot: Snapshot) -> bool:
    """Whether a snapshot holds anything a session start could be answered from."""
    return bool(snapshot.entries or snapshot.discover or snapshot.stateless)


class CommandCaches:
    def __init__(self, state_dir: Path, store: CacheStore, secret: bytes) -> None:
        self.path = state_dir / FILE_NAME
        self.store = store
        self.secret = secret
        self.index: dict[str, list[str]] = self._load()

    def command_key(self, identity: Identity) -> str:
        material = json.dumps(list(identity.argv), ensure_ascii=True, separators=(",", ":")).encode("ascii")
        return hmac.new(self.secret, b"command\0" + material, hashlib.sha256).hexdigest()

    def note(self, identity: Identity, cache_digest: str) -> None:
        """Record that `cache_digest` caches a registration of `identity`'s command."""
        key = self.command_key(identity)
        digests = self.index.pop(key, [])
        if cache_digest in digests:
            digests.remove(cache_digest)
        digests.insert(0, cache_digest)  # the freshest first
        self.index[key] = digests[:MAX_DIGESTS_PER_COMMAND]
        while len(self.index) > MAX_COMMANDS:
            del self.index[next(iter(self.index))]
        self._save()

    def start_snapshot(self, runtimes: Mapping[str, ServerRuntime], identities: Mapping[str, Identity],
                       identity: Identity, cache_digest: str) -> Snapshot:
        """The snapshot a new runtime of `identity` starts from: its own cache file's, else the
        command's (`seed`, from the registry's live runtimes by digest, or the index); noted."""
        live = [(identities[d], r.core.snapshot) for d, r in runtimes.items() if d in identities]
        snapshot = self.seed(identity, cache_digest, self.store.load(cache_digest), live)
        self.note(identity, cache_digest)
        return snapshot

    def seed(self, identity: Identity, cache_digest: str, own: Snapshot,
             live: Iterable[tuple[Identity, Snapshot]]) -> Snapshot:
        """`own` if it holds anything, else a copy of the freshest snapshot of the same command (`live`
        runtimes first, then the index's cache files), with every handshake and stateless result that
        only older ones recorded added: listings answer only the handshake they were recorded for
        (docs/relay.md), so each handshake any identity of the command recorded is kept."""
        if has_content(own):
            return own
        candidates = [snap for other, snap in live if other.argv == identity.argv and has_content(snap)]
        for digest in self.index.get(self.command_key(identity), []):
            if digest != cache_digest:
                snap = self.store.load(digest)
                if has_content(snap):
                    candidates.append(snap)
        if not candidates:
            return own
        candidates.sort(key=lambda snap: snap.updated_at, reverse=True)
        seeded = Snapshot.from_json(candidates[0].to_json())
        for older in candidates[1:]:
            copy = Snapshot.from_json(older.to_json())
            for key, entry in copy.entries.items():
                seeded.entries.setdefault(key, entry)
            for key, cached in copy.stateless.items():
                if key not in seeded.stateless:
                    seeded.store_stateless(key, cached.result, cached.stored_at)
        log.info("a new identity of %s starts from the cache of the same command", identity.readable_name(self.secret))
        return seeded

    def _load(self) -> dict[str, list[str]]:
        return read_string_lists(self.path, MAX_FILE_BYTES, MAX_COMMANDS, MAX_DIGESTS_PER_COMMAND, _is_digest)

    def _save(self) -> None:
        state_files.save(self.path, self.index)


def _is_digest(text: str) -> bool:
    # A cache file name: hex only, so a tampered index cannot name a path elsewhere.
    return 0 < len(text) <= 128 and all(c in "0123456789abcdef" for c in text)
