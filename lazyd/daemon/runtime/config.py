"""What a server runtime is configured with, the gate every client line passes first, and the
children it records.

`RuntimeConfig` is built by the registry from the config file or a shim's hello
(lazyd/daemon/sessions/registry.py), its lifecycle policy by `lifecycle_policy`; `LineGate` is what the
runtime asks before its relay core sees a client line (the tool policy:
lazyd/daemon/runtime/policy_gate.py); `child_records` are a runtime's live children as the orphan sweep
records them (lazyd/daemon/orphans.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from lazyd.config.load import Policy, WakePredicate
from lazyd.core.lifecycle import machine as lc
from lazyd.core.eras.policy import EraSetting
from lazyd.core.relay.jsonrpc import JsonId
from lazyd.core.relay.routing import SamplingPolicy
from lazyd.core.sharing.modes import ShareSetting
from lazyd.daemon import orphans
from lazyd.daemon.process.command import SpawnSpec

__all__ = ["LineGate", "RuntimeConfig", "lifecycle_policy", "child_records", "ChildSource"]


class LineGate(Protocol):
    """Sees each client line before the relay core: the tool policy (lazyd/daemon/runtime/policy_gate.py)."""

    def client_line(self, cid: int, line: bytes) -> bytes | None: ...  # None: answered or held
    def to_client(self, cid: int, line: bytes, done: JsonId) -> bytes: ...  # a final answer
    def detach(self, cid: int) -> None: ...


@dataclass(frozen=True)
class RuntimeConfig:
    name: str
    digest: str
    spec: SpawnSpec
    policy: lc.LifecyclePolicy
    wake: WakePredicate | None
    sampling_policy: SamplingPolicy
    share: ShareSetting
    era: EraSetting = "auto"  # which protocol era its processes run in (lazyd/core/eras/policy.py)


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


class _Proc(Protocol):
    pid: int
    start_time_ticks: int
    pgid: int


class ChildSource(Protocol):
    """What `child_records` reads of a runtime (lazyd/daemon/runtime/supervisor.py)."""

    name: str
    predicate_child: tuple[int, int] | None

    @property
    def proc(self) -> _Proc | None: ...


def child_records(runtime: ChildSource) -> list[orphans.ChildRecord]:
    """The live children of one runtime (its server and a running wake predicate, each the
    leader of its own session) for the orphan sweep of a successor daemon."""
    records: list[orphans.ChildRecord] = []
    proc = runtime.proc
    if proc is not None:
        records.append(orphans.ChildRecord(runtime.name, proc.pid, proc.start_time_ticks, proc.pgid))
    if runtime.predicate_child is not None:
        pid, ticks = runtime.predicate_child
        records.append(orphans.ChildRecord(f"{runtime.name} (wake predicate)", pid, ticks, pid))
    return records
