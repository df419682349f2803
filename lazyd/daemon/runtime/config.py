"""What a server runtime is configured with, and the daemon's parts every runtime uses.

`RuntimeConfig` (with `lifecycle_policy`) is built by the registry. Written for a successor, what
could be a secret (command, arguments, cwd, environment, wake command) goes to `secrets`, the rest
to `to_state`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lazyd.config.load import Policy, WakePredicate
from lazyd.core import state_codec as sc
from lazyd.core.lifecycle import machine as lc
from lazyd.core.eras.choice import EraSetting
from lazyd.core.policy import ToolPolicy
from lazyd.core.relay.routing import SamplingPolicy
from lazyd.core.sharing.modes import ShareSetting
from lazyd.daemon.gate import Gate
from lazyd.daemon.heap_trim import HeapTrimmer
from lazyd.daemon.process.command import SpawnSpec
from lazyd.daemon.process.read_buffer import ReadBuffer
from lazyd.daemon.runtime.cache_store import CacheStore


@dataclass(frozen=True)
class DaemonParts:
    """The daemon's own parts every runtime uses; the registry makes them once."""

    store: CacheStore
    heap: HeapTrimmer
    reading: Gate  # closed while the daemon hands itself over (lazyd/daemon/gate.py)
    starting: Gate  # closed while the orphan sweep runs
    read_buffer: ReadBuffer
    children_changed: Callable[[], None]  # records the live children for the orphan sweep
    tool_policy: Callable[[], ToolPolicy]  # the config's in force, read at each call: reloads apply


@dataclass(frozen=True)
class RuntimeConfig:
    name: str
    digest: str
    spec: SpawnSpec
    policy: lc.LifecyclePolicy
    wake: WakePredicate | None
    sampling_policy: SamplingPolicy
    share: ShareSetting
    era: EraSetting = "auto"  # which protocol era its processes run in (lazyd/core/eras/choice.py)
    memory_max: int | None = None  # bytes of PSS its tree may stay over (lazyd/core/memory.py)

    def to_state(self) -> dict[str, Any]:
        """Everything but what could be a secret (see the module docstring)."""
        return {"name": self.name, "digest": self.digest, "sampling_policy": self.sampling_policy,
                "share": self.share, "era": self.era, "log_path": str(self.spec.log_path),
                "max_line_bytes": self.spec.max_line_bytes, "memory_max": self.memory_max,
                "policy": sc.dump(self.policy)}

    def secrets(self) -> dict[str, Any]:
        """What could be a secret: the command, its working directory and environment, the wake predicate."""
        spec = self.spec
        return {"argv": list(spec.argv), "cwd": spec.cwd, "env": dict(spec.env), "wake": sc.dump(self.wake)}

    @classmethod
    def from_state(cls, state: object, secrets: Mapping[str, Any]) -> RuntimeConfig:
        """The configuration `to_state` and `secrets` wrote; ValueError for one this code did not write."""
        c = sc.obj(state, "runtime.config")
        policy = sc.load(lc.LifecyclePolicy, c.get("policy"), "runtime.config.policy")
        spec = SpawnSpec(sc.load(tuple[str, ...], secrets.get("argv"), "secrets.argv"),
                         sc.text(secrets.get("cwd"), "secrets.cwd"),
                         sc.load(dict[str, str], secrets.get("env"), "secrets.env"),
                         Path(sc.text(c.get("log_path"), "runtime.config.log_path")),
                         sc.integer(c.get("max_line_bytes"), "runtime.config.max_line_bytes"))
        share = c.get("share")
        if share not in (True, False, "auto", "session-aware"):
            raise ValueError(f"runtime.config.share: unknown value {share!r}")
        return cls(sc.text(c.get("name"), "runtime.config.name"), sc.text(c.get("digest"), "runtime.config.digest"),
                   spec, policy, sc.load(WakePredicate | None, secrets.get("wake"), "secrets.wake"),
                   sc.load(SamplingPolicy, c.get("sampling_policy"), "runtime.config.sampling_policy"), share,
                   sc.load(EraSetting, c.get("era"), "runtime.config.era"),
                   sc.opt_integer(c.get("memory_max"), "runtime.config.memory_max"))


def lifecycle_policy(policy: Policy) -> lc.LifecyclePolicy:
    return lc.LifecyclePolicy(
        start_timeout_s=policy.start_timeout_s,
        linger_s=policy.linger_s,
        check_linger_s=policy.check_linger_s,
        idle_timeout_s=policy.idle_timeout_s or None,
        keep_alive=policy.keep_alive,
        eager=policy.start == "eager",
        wake_interval_s=policy.wake.interval_s if policy.wake else None,
        wake_timeout_s=policy.wake.timeout_s if policy.wake else 1.0,
    )
