"""The config as lazyd holds it: frozen dataclasses.

`Config` is the whole file (`Config()` is what a missing file means); `ServerConfig` a named
server; `Policy` how one server is started and stopped; `WakePredicate` a wake predicate. The
file's parser, lazyd/config/load.py, is what checks their values and re-exports these names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Literal

from lazyd.config.known import packaged
from lazyd.core.sharing.envrules import PER_SESSION_ENV
from lazyd.core.sharing.known_servers import KnownServers
from lazyd.core.policy import ToolPolicy
from lazyd.core.pressure import PressureSettings


@dataclass(frozen=True)
class WakePredicate:
    """A command run every `interval_s`; exit 0 starts the server, 1 keeps it asleep."""

    argv: tuple[str, ...]
    interval_s: float = 5.0
    timeout_s: float = 1.0


@dataclass(frozen=True)
class Policy:
    """How one server is started and stopped; every duration in seconds."""

    start_timeout_s: float = 60.0
    linger_s: float = 600.0
    # The linger of a start only listings came for (a health check's): lazyd/core/lifecycle/usage.py.
    check_linger_s: float = 30.0
    idle_timeout_s: float | None = None
    keep_alive: bool = False
    start: Literal["lazy", "eager"] = "lazy"
    # True, False, "session-aware" (one process, each request carrying its session's id), or
    # "auto": decided per registration (lazyd/core/sharing/modes.py).
    share: bool | Literal["auto", "session-aware"] = "auto"
    wake: WakePredicate | None = None
    era: Literal["auto", "handshake", "stateless"] = "auto"
    # Bytes of PSS the server's process tree may stay over before it is restarted (lazyd/core/memory.py).
    memory_max: int | None = None


@dataclass(frozen=True)
class ServerConfig:
    """A named server: `lazyd-shim --server NAME` runs it, and the daemon knows it at boot."""

    name: str
    command: str
    args: tuple[str, ...]
    env: Mapping[str, str]
    cwd: str | None
    policy: Policy
    # What the hub shows for the server, in the user's words. Not compared: editing it is no
    # reason for a reload to restart the server.
    description: str | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Config:
    """The whole file; `Config()` is what a missing file means."""

    defaults: Policy = field(default_factory=Policy)
    servers: Mapping[str, ServerConfig] = field(default_factory=lambda: MappingProxyType({}))
    extra_per_session_env: frozenset[str] = frozenset()
    # `identity_env`: variables (names or patterns) that count in every identity, even where the
    # built-in rule would ignore them (lazyd/core/sharing/envrules.py).
    identity_env: frozenset[str] = frozenset()
    sampling_policy: Literal["refuse", "most-recent"] = "refuse"
    source: Path | None = None
    # `[policy]`: which tools run, ask the user first, or are refused (lazyd/core/policy.py).
    tool_policy: ToolPolicy = field(default_factory=ToolPolicy)
    # How popular servers are shared under share = "auto": the packaged table with the user's
    # `[known_servers]` on top (lazyd/config/known.py, lazyd/core/sharing/known_servers.py).
    known_servers: KnownServers = field(default_factory=packaged)
    # `[pressure]`: idle servers put to sleep while the machine runs short (lazyd/core/pressure.py).
    pressure: PressureSettings = field(default_factory=PressureSettings)

    @property
    def per_session_env(self) -> frozenset[str]:
        """The built-in per-session variables plus the user's `per_session_env`."""
        return PER_SESSION_ENV | self.extra_per_session_env

