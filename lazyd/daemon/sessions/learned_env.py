"""What the daemon learns about clients' environments from their sessions, kept across restarts.

Names only, never values, in `<state dir>/learned_env.json` (0600, written when something is new):

- **per-run variables** (lazyd/core/sharing/noise.py) per client (`clientInfo.name`), applied to
  its sessions. The hello comes before `initialize`, so there the client is guessed from its
  process name (lazyd/daemon/connections/client_process.py), never filed under it (any program may
  call itself `MainThread`): a session whose process name guesses nothing is learned at its
  `initialize`.
- **each client's environment**: the variable names its sessions carry, its process name, and
  which of its own variables it withheld from the server or added. `lazyctl check --client X`
  rebuilds from it the environment X really gives a server, so a check warms the identity X's
  sessions get; the built-in profiles (lazyd/core/sharing/client_profiles.py) are the guess until
  then.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from lazyd.core.sharing.noise import Evidence, PerRunLearner
from lazyd.daemon import state_files

log = logging.getLogger("lazyd.learned")

FILE_NAME = "learned_env.json"
FORMAT_VERSION = 1
MAX_FILE_BYTES = 4 * 1024 * 1024
MAX_CLIENTS = 64  # clientInfo names kept
MAX_NAMES = 1024  # variable names kept per client
MAX_PENDING = 256  # sessions between their hello and their initialize
MAX_NAME_CHARS = 200


@dataclass(frozen=True)
class SessionClient:
    """The client of a session as its hello shows it: its process name, the names of the
    variables that process itself was started with (None when /proc did not say), the client its
    process name guesses ("" when none), and what the session teaches the per-run learner (its
    registration and counted variables; empty when there was nothing to learn from)."""

    process: str
    own_names: frozenset[str] | None = None
    guess: str = ""
    registration: str = ""
    counted: Mapping[str, str] = field(default_factory=dict)


class LearnedEnv:
    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / FILE_NAME
        data = self._load()
        self.per_run = PerRunLearner.from_json(data.get("per_run"))
        self.clients: dict[str, dict[str, Any]] = _clients(data.get("clients"))
        self._pending: dict[int, tuple[SessionClient, frozenset[str]]] = {}

    # ---- per-run variables ---------------------------------------------------------------------

    def guess(self, process: str) -> str:
        """The client a session of process `process` most likely is, before its initialize says:
        the clientInfo name last seen from a process of that name; "" when none was."""
        if not process:
            return ""
        seen = [(float(r["seen_at"]), name) for name, r in self.clients.items() if r["process"] == process]
        return max(seen)[1] if seen else ""

    def noise(self, process: str) -> frozenset[str]:
        """The per-run variables of the client process `process` guesses (`guess`)."""
        client = self.guess(process)
        return self.per_run.noise(client) if client else frozenset()

    def observe(self, client: str, registration: str, counted: Mapping[str, str]) -> list[str]:
        """Feed one session of `client` (a clientInfo name) to the learner; the names it made
        per-run (saved at once)."""
        new = self.per_run.observe(client, registration, counted, now=time.time())
        for name in new:
            evidence = self.per_run.evidence(client, name)
            log.info("learned %s as a per-run variable of %s (%s): not part of the identity from now on",
                     name, client, evidence.describe() if evidence else "")
        if new:
            self._save()
        return new

    def learned(self) -> list[tuple[str, Evidence]]:
        """(name, evidence) of every learned per-run variable, by client then name."""
        return [(name, ev) for client, names in sorted(self.per_run.learned().items())
                for name, ev in sorted(names.items())]

    # ---- clients' environments -----------------------------------------------------------------

    def note_session(self, cid: int, client: SessionClient, names: Iterable[str]) -> None:
        """A session's variable names, held until its initialize says which client it is."""
        self._pending[cid] = (client, frozenset(n for n in names if len(n) <= MAX_NAME_CHARS))
        while len(self._pending) > MAX_PENDING:
            del self._pending[next(iter(self._pending))]

    def note_client(self, cid: int, client_name: str) -> None:
        """Session `cid` sent its initialize as `client_name`: record its names under it."""
        pending = self._pending.pop(cid, None)
        if pending is None or not client_name or len(client_name) > MAX_NAME_CHARS:
            return
        client, names = pending
        if client.registration and client.guess != client_name:
            # Not learned from at its hello (no client guessed, or another one): now, by its name.
            self.observe(client_name, client.registration, client.counted)
        process = client.process
        known = self.clients.get(client_name)
        record: dict[str, Any] = {"process": process, "env_names": sorted(names)[:MAX_NAMES], "seen_at": time.time()}
        if client.own_names is not None:
            # Which of its own variables the client withheld, and which it added (names only).
            record["dropped"] = sorted(client.own_names - names)[:MAX_NAMES]
            record["added"] = sorted(names - client.own_names)[:MAX_NAMES]
        self.clients.pop(client_name, None)
        self.clients[client_name] = record
        while len(self.clients) > MAX_CLIENTS:
            del self.clients[min(self.clients, key=lambda k: float(self.clients[k]["seen_at"]))]
        if known is None or {k: v for k, v in known.items() if k != "seen_at"} != {k: v for k, v in record.items() if k != "seen_at"}:
            log.info("learned the environment of client %r (%d variables, runs as %r)", client_name,
                     len(names), process or "?")
            self._save()

    def note_line(self, cid: int, initialize: Mapping[str, Any] | None, last: bool) -> None:
        """One of session `cid`'s first lines: its initialize params if it was one; `last` when
        no more of its lines will be looked at (no initialize came: nothing to record)."""
        info = initialize.get("clientInfo") if initialize is not None else None
        if isinstance(info, dict) and isinstance(info.get("name"), str):
            self.note_client(cid, info["name"])
        elif last or initialize is not None:
            self._pending.pop(cid, None)

    def client_record(self, client_names: Iterable[str]) -> tuple[str, dict[str, Any]] | None:
        """The freshest record among `client_names` (a profile's clientInfo names), with its name."""
        found = [(name, self.clients[name]) for name in client_names if name in self.clients]
        return max(found, key=lambda f: float(f[1]["seen_at"])) if found else None

    # ---- file ----------------------------------------------------------------------------------

    def _load(self) -> dict[str, Any]:
        data = state_files.load(self.path, MAX_FILE_BYTES, "clients' environments")
        return data if isinstance(data, dict) and data.get("v") == FORMAT_VERSION else {}

    def _save(self) -> None:
        state_files.save(self.path, {"v": FORMAT_VERSION, "per_run": self.per_run.to_json(), "clients": self.clients},
                           sort_keys=True)


def _clients(data: object) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    if not isinstance(data, dict):
        return out
    for name, record in list(data.items())[:MAX_CLIENTS]:
        if not (isinstance(name, str) and isinstance(record, dict)):
            continue
        process, names, seen = record.get("process"), record.get("env_names"), record.get("seen_at")
        if (isinstance(process, str) and isinstance(names, list) and all(isinstance(n, str) for n in names)
                and isinstance(seen, (int, float))):
            out[name] = {"process": process, "env_names": names[:MAX_NAMES], "seen_at": float(seen)}
            for key in ("dropped", "added"):
                listed = record.get(key)
                if isinstance(listed, list) and all(isinstance(n, str) for n in listed):
                    out[name][key] = listed[:MAX_NAMES]
    return out
