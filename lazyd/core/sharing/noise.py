"""Per-run variables, learned from the sessions lazyd sees rather than listed.

A client may give every server a variable whose value is new at every run (opencode's
`OPENCODE_PID`); counted in the identity, no two runs would share a process. envrules.py lists
those seen so far; this module learns the next one. A variable is **per-run noise for a client**
when its value changed between that client's sessions of one registration often enough and its
name marks no credential or setting (a rotated token must never share with the old one): 2
different values for a bookkeeping name (`*_PID`, `*_SESSION_ID`...) or identifier-shaped values,
else 3 values in 3 sessions, new each time (a value seen again is a choice, a toggle).

What is learned applies to that client's sessions from then on, with its evidence for `lazyctl
explain`. Values never leave this object (short digests, in memory only; the persisted form holds
names and counts). Pure, and bounded: a local program can claim any client and registration.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lazyd.core.sharing.envrules import is_credential_name, is_setting_name

SHAPED_VALUES_NEEDED = 2
UNSHAPED_VALUES_NEEDED = 3
FORMAT_VERSION = 1

# Caps: a handful of clients and their registrations are real; anything beyond is noise or abuse.
MAX_CLIENTS = 32
MAX_REGISTRATIONS_PER_CLIENT = 64
MAX_NAMES_PER_REGISTRATION = 256
MAX_LEARNED_PER_CLIENT = 64
MAX_NAME_CHARS = 128

# Name endings of bookkeeping: a process id, a session, run, invocation or trace id, a nonce.
_SHAPED_NAME = re.compile(
    r"(^|_)(PID|PPID|SESSION_?ID|RUN_?ID|INVOCATION_?ID|TRACE_?ID|SPAN_?ID|REQUEST_?ID|NONCE|"
    r"INSTANCE_?ID|LAUNCH_?ID|EXECUTION_?ID|CORRELATION_?ID|START(ED)?_?(AT|TIME))$",
    re.IGNORECASE,
)
_SHAPED_VALUES = tuple(re.compile(p) for p in (
    r"\{?[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\}?",  # uuid
    r"[0-9A-HJKMNP-TV-Z]{26}",  # ULID
    r"[0-9a-fA-F]{16,128}",  # a random hex id
    r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?",  # ISO 8601 time
))


def is_shaped_name(name: str) -> bool:
    """Whether `name` reads like per-run bookkeeping (a pid, a session or run id, a nonce)."""
    return _SHAPED_NAME.search(name) is not None


def is_shaped_value(value: str) -> bool:
    """Whether `value` looks like a generated identifier or a time, not a chosen setting."""
    return any(p.fullmatch(value) for p in _SHAPED_VALUES)


def _fingerprint(value: str) -> bytes:
    # Enough to tell values apart, too short to be worth keeping as a copy of a value.
    return hashlib.blake2b(value.encode("utf-8", "surrogateescape"), digest_size=8).digest()


@dataclass(frozen=True)
class Evidence:
    """Why a variable was learned as per-run: so many values in so many sessions of a client."""

    client: str
    values: int
    sessions: int
    learned_at: float

    def describe(self) -> str:
        return f"{self.values} values in {self.sessions} sessions of {self.client}"

    def to_json(self) -> dict[str, Any]:
        return {"values": self.values, "sessions": self.sessions, "learned_at": self.learned_at}


@dataclass
class _Seen:
    """One variable in one registration of one client: what its values did."""

    sessions: int = 0
    values: list[bytes] = field(default_factory=list)  # distinct fingerprints, in order seen
    repeated: bool = False
    shaped_values: bool = True  # every value seen looked generated


@dataclass
class _Registration:
    sessions: int = 0
    names: dict[str, _Seen] = field(default_factory=dict)


class PerRunLearner:
    """Fed the variables of each session (`observe`), says which are per-run for a client."""

    def __init__(self, learned: Mapping[str, Mapping[str, Evidence]] | None = None) -> None:
        self._learned: dict[str, dict[str, Evidence]] = {c: dict(n) for c, n in (learned or {}).items()}
        self._seen: dict[str, dict[str, _Registration]] = {}

    # ---- queries -------------------------------------------------------------------------------

    def noise(self, client: str) -> frozenset[str]:
        """The names learned as per-run for `client`'s sessions."""
        return frozenset(self._learned.get(client, ()))

    def evidence(self, client: str, name: str) -> Evidence | None:
        return self._learned.get(client, {}).get(name)

    def learned(self) -> dict[str, dict[str, Evidence]]:
        """Every client's learned names with their evidence (a copy)."""
        return {c: dict(names) for c, names in self._learned.items() if names}

    # ---- learning ------------------------------------------------------------------------------

    def observe(self, client: str, registration: str, env: Mapping[str, str], now: float) -> list[str]:
        """Note one session of `registration` (an opaque key: the same for every session of one
        command line in one directory) from `client`, carrying `env`: the variables that count
        for it today. Returns the names learned by this session, sorted."""
        if not client or not registration:
            return []
        regs = self._seen.get(client)
        if regs is None:
            if len(self._seen) >= MAX_CLIENTS:
                del self._seen[next(iter(self._seen))]  # the client seen least recently first
            regs = self._seen[client] = {}
        reg = regs.pop(registration, None) or _Registration()
        regs[registration] = reg  # most recently seen last
        while len(regs) > MAX_REGISTRATIONS_PER_CLIENT:
            del regs[next(iter(regs))]
        reg.sessions += 1
        known = self._learned.get(client, {})
        new: list[str] = []
        for name, value in env.items():
            if name in known or not self._may_be_noise(name):
                continue
            seen = reg.names.get(name)
            if seen is None:
                if len(reg.names) >= MAX_NAMES_PER_REGISTRATION:
                    continue
                seen = reg.names[name] = _Seen()
            seen.sessions += 1
            print_ = _fingerprint(value)
            if print_ in seen.values:
                seen.repeated = True
            elif len(seen.values) < UNSHAPED_VALUES_NEEDED:
                seen.values.append(print_)
            seen.shaped_values = seen.shaped_values and is_shaped_value(value)
            if self._decided(name, seen):
                new.append(name)
                self._learn(client, name, Evidence(client, len(seen.values), seen.sessions, now))
        for name in new:
            for other in regs.values():
                other.names.pop(name, None)  # decided: no need to keep its fingerprints
        return sorted(new)

    @staticmethod
    def _may_be_noise(name: str) -> bool:
        return 0 < len(name) <= MAX_NAME_CHARS and not is_credential_name(name) and not is_setting_name(name)

    @staticmethod
    def _decided(name: str, seen: _Seen) -> bool:
        values = len(seen.values)
        if is_shaped_name(name) or seen.shaped_values:
            return values >= SHAPED_VALUES_NEEDED
        # No shape: a new value at every session, three times.
        return not seen.repeated and values >= UNSHAPED_VALUES_NEEDED and seen.sessions == values

    def _learn(self, client: str, name: str, evidence: Evidence) -> None:
        names = self._learned.setdefault(client, {})
        names[name] = evidence
        while len(names) > MAX_LEARNED_PER_CLIENT:
            del names[min(names, key=lambda n: names[n].learned_at)]
        while len(self._learned) > MAX_CLIENTS:
            oldest = min(self._learned, key=lambda c: max((e.learned_at for e in self._learned[c].values()), default=0.0))
            del self._learned[oldest]

    def forget(self, client: str | None = None) -> int:
        """Drop what was learned (for `client`, else for all); how many names were dropped."""
        clients = [client] if client is not None else list(self._learned)
        dropped = 0
        for c in clients:
            dropped += len(self._learned.pop(c, {}))
            self._seen.pop(c, None)
        return dropped

    # ---- persisted form: names and counts, never values ----------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {"v": FORMAT_VERSION,
                "clients": {c: {n: e.to_json() for n, e in sorted(names.items())}
                            for c, names in sorted(self._learned.items()) if names}}

    @classmethod
    def from_json(cls, data: object) -> PerRunLearner:
        """The learner a persisted form describes; what is malformed in it is skipped."""
        learned: dict[str, dict[str, Evidence]] = {}
        clients = data.get("clients") if isinstance(data, dict) and data.get("v") == FORMAT_VERSION else None
        if isinstance(clients, dict):
            for client, names in list(clients.items())[:MAX_CLIENTS]:
                if not isinstance(client, str) or not client or not isinstance(names, dict):
                    continue
                for name, ev in list(names.items())[:MAX_LEARNED_PER_CLIENT]:
                    if not (isinstance(name, str) and cls._may_be_noise(name) and isinstance(ev, dict)):
                        continue
                    values, sessions, at = ev.get("values"), ev.get("sessions"), ev.get("learned_at")
                    if (isinstance(values, int) and isinstance(sessions, int) and isinstance(at, (int, float))
                            and not isinstance(values, bool) and not isinstance(sessions, bool)):
                        learned.setdefault(client, {})[name] = Evidence(client, values, sessions, float(at))
        return cls(learned)
