"""Megabyte lines through a real daemon on a hand-off session: what they cost the daemon in fresh
memory, counted (page faults from /proc), not timed (docs/benchmarks.md, "The 1 MiB echo, fifth
pass")."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from tests.conftest import FIXTURE_SERVER, Daemon, UserEnv, shim_command

pytestmark = pytest.mark.e2e

FIXTURE = [sys.executable, str(FIXTURE_SERVER)]
BIG = "y" * (1 << 20)
PAGES_PER_MIB = (1 << 20) // 4096


def minor_faults(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as f:
        return int(f.read().rsplit(b")", 1)[1].split()[7])


class LineClient:
    """A client writing its lines itself, as the benchmarks' does (no SDK in between)."""

    def __init__(self, user: UserEnv, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen([shim_command(), "--", *FIXTURE], env={**user.env, **(env or {})},
                                     stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.next_id = 1

    def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin and self.proc.stdout
        request = {"jsonrpc": "2.0", "method": method, "params": params, "id": self.next_id}
        self.proc.stdin.write(json.dumps(request).encode() + b"\n")
        self.proc.stdin.flush()
        reply: dict[str, Any] = json.loads(self.proc.stdout.readline())
        assert reply["id"] == self.next_id, reply
        self.next_id += 1
        return reply

    def echo(self, text: str) -> None:
        reply = self.call("tools/call", {"name": "echo", "arguments": {"text": text}})
        assert reply["result"]["content"][0]["text"] == text

    def close(self) -> None:
        assert self.proc.stdin
        self.proc.stdin.close()
        assert self.proc.wait(timeout=20) == 0


def faults_per_echo(client: LineClient, pid: int) -> float:
    """Minor page faults of process `pid` per 1 MiB echo of `client`, past the spell's first
    echoes (the buffers, pipes and region pages it keeps)."""
    client.call("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                               "clientInfo": {"name": "large", "version": "1"}})
    for _ in range(3):
        client.echo(BIG)
    before = minor_faults(pid)
    for _ in range(10):
        client.echo(BIG)
    return (minor_faults(pid) - before) / 10


def test_a_spell_of_megabyte_echoes_costs_the_daemon_no_fresh_pages_after_its_first_ones(
        user_env: UserEnv, daemon: Daemon) -> None:
    client = LineClient(user_env)
    try:
        # Each round trip carries 2 MiB through the daemon, some 6 MiB of buffers on the way;
        # given back and faulted in again each time, that was 500-600 fresh pages per round trip
        # (kept, 0-15: the bound leaves room for a loaded machine's odd slow round trip).
        per_round_trip = faults_per_echo(client, daemon.proc.pid)
        assert per_round_trip < PAGES_PER_MIB / 2, per_round_trip
    finally:
        client.close()
