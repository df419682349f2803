"""The tool-policy gate of a runtime (lazyd/daemon/runtime/policy_gate.py) after the runtime was
taken over from a predecessor's state: it asks the clients the restored relay core knows."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from lazyd.core.cache import Snapshot
from lazyd.core.lifecycle import machine as lc
from lazyd.core.policy import ToolPolicy, compile_rule
from lazyd.core.relay.jsonrpc import JsonId
from lazyd.daemon.gate import Gate
from lazyd.daemon.heap_trim import HeapTrimmer
from lazyd.daemon.process.read_buffer import ReadBuffer
from lazyd.daemon.process.command import SpawnSpec
from lazyd.daemon.runtime.cache_store import CacheStore
from lazyd.daemon.runtime.config import DaemonParts, RuntimeConfig
from lazyd.daemon.runtime.supervisor import ServerRuntime

POLICY = ToolPolicy((compile_rule("*.delete_*", "ask"),))
INITIALIZE = json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {"elicitation": {}}, "clientInfo": {"name": "c", "version": "1"}}})


class Inbox:
    def __init__(self) -> None:
        self.cid, self.pid = 1, 0
        self.lines: list[bytes] = []

    def deliver(self, line: bytes, done: JsonId | None = None) -> None:
        self.lines.append(line)

    def close(self) -> None:
        pass


async def test_a_runtime_taken_over_asks_a_client_that_declared_elicitation_before_the_take_over(
        tmp_path: Path) -> None:
    parts = DaemonParts(CacheStore(tmp_path / "cache"), HeapTrimmer(), Gate(), Gate(), ReadBuffer(), lambda: None,
                        lambda: POLICY)
    spec = SpawnSpec(argv=(sys.executable, "-c", "pass"), cwd=str(tmp_path), env={}, log_path=tmp_path / "fs.log")
    config = RuntimeConfig("fs", "ab12", spec,
                           lc.LifecyclePolicy(), None, "refuse", False)
    before = ServerRuntime(config, Snapshot(), parts)
    before.core.attach(1, now=0.0)
    before.core.resume(1, [INITIALIZE.encode()], now=0.0)
    state = json.loads(json.dumps(before.to_state(0.0)))  # as the successor reads it
    after = ServerRuntime.from_state(state, config.secrets(), Snapshot(), parts, written_at=time.time(), child=False)
    inbox = Inbox()
    after.sessions[1] = inbox
    call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "delete_file", "arguments": {}}}
    assert after.gate.client_line(1, json.dumps(call).encode()) is None  # held while the client is asked
    [question] = [json.loads(line) for line in inbox.lines]
    assert question["method"] == "elicitation/create"
