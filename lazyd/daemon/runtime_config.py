"""What a server runtime is configured with, and the gate every client line passes first.

`RuntimeConfig` is built by the registry from the config file or a shim's hello
(lazyd/daemon/registry.py); `LineGate` is what the runtime asks before its relay core sees a
client line (the tool policy: lazyd/daemon/policy_gate.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from lazyd.config import WakePredicate
from lazyd.core import lifecycle as lc
from lazyd.core.era_policy import EraSetting
from lazyd.core.jsonrpc import JsonId
from lazyd.core.routing import SamplingPolicy
from lazyd.core.sharing import ShareSetting
from lazyd.daemon.command import SpawnSpec

__all__ = ["LineGate", "RuntimeConfig"]


class LineGate(Protocol):
    """Sees each client line before the relay core: the tool policy (lazyd/daemon/policy_gate.py)."""

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
    era: EraSetting = "auto"  # which protocol era its processes run in (lazyd/core/era_policy.py)
