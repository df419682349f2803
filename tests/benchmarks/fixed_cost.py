"""bench_scale's row 8, the fixed cost: 4 clients of server-everything (`--everything-clients`),
each of which has had `initialize`, `tools/list` and one `tools/call` answered, direct, through
lazyd and (given the binary) through mcp-mux, one side after the other in the same run, each
alone on the machine.

Every side is summed over the same set of processes: the clients' own processes (direct: the
servers; lazyd: the waiters; mcp-mux: its shims), every descendant of them, and the
multiplexer's daemon with its descendants (lazyd's daemon is started by the benchmark; mcp-mux's
is started by its first shim and found as a process of the binary). Two sums are printed: Σ RSS
(the issue's figure: a page mapped by two processes counts twice) and Σ PSS (each page divided
among the processes that map it, so a page shared within a side counts once; pages shared with a
process outside the side, such as this benchmark's own interpreter, are partly counted to it).

Beside them, the floor the design card sets (Python and trio): lazyd's Σ RSS with its daemon
replaced by a bare interpreter of the product's Python that has imported trio, its RSS read while
lazyd's side is up (the same server and waiting processes added to it). No daemon on trio holds less.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from tests.benchmarks.common import EVERYTHING, LineClient, children_by_parent, rss_kib
from tests.benchmarks.scale_support import close_all, pss_kib, row, shim_client, start_daemon, user_env

CLIENTS = 4  # the figure; more show where the per-client costs overtake the fixed ones
SETTLE_S = 1.0  # after the last call: lazyd's shims exec their waiters
FLOOR = "import sys, trio; sys.stdout.write('ready\\n'); sys.stdout.flush(); sys.stdin.read()"


@dataclass
class Side:
    """What one side holds, in KiB, by part (daemon, server, client processes)."""

    rss: dict[str, int] = field(default_factory=dict)
    pss: dict[str, int] = field(default_factory=dict)

    def add(self, part: str, pids: Iterable[int]) -> None:
        for pid in pids:
            self.rss[part] = self.rss.get(part, 0) + rss_kib(pid)
            self.pss[part] = self.pss.get(part, 0) + pss_kib(pid)

    def total(self, kind: str) -> int:
        return sum((self.rss if kind == "rss" else self.pss).values())


def floor_kib(venv: Path) -> int:
    """VmRSS of a bare interpreter of the product's Python that has imported trio, read while it
    waits (as the daemon's is, not its peak)."""
    proc = subprocess.Popen([str(venv / "bin" / "python"), "-c", FLOOR],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        if proc.stdout.readline() != b"ready\n":
            raise RuntimeError("the floor's interpreter did not import trio")
        return rss_kib(proc.pid)
    finally:
        proc.stdin.close()
        proc.wait(timeout=10)
        proc.stdout.close()


def descendants(roots: Iterable[int]) -> set[int]:
    """The roots and every process below them, each once (mcp-mux's daemon is its first shim's
    child: summing each shim's tree would count it twice)."""
    children, seen = children_by_parent(), set()
    stack = list(roots)
    while stack:
        pid = stack.pop()
        if pid not in seen:
            seen.add(pid)
            stack.extend(children.get(pid, []))
    return seen


def running(binary: Path) -> set[int]:
    """Processes whose executable is `binary` (a private copy, so only this run's)."""
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.readlink(f"/proc/{entry}/exe") == str(binary):
                    found.add(int(entry))
            except OSError:
                continue
    return found


def exercise(clients: list[LineClient]) -> None:
    for client in clients:
        client.handshake()
        assert "result" in client.request("tools/list")
        reply = client.request("tools/call", {"name": "echo", "arguments": {"message": "x"}})
        assert "result" in reply, reply


def direct_side(env: dict[str, str], count: int) -> Side:
    clients = [LineClient(EVERYTHING, env) for _ in range(count)]
    try:
        exercise(clients)
        time.sleep(SETTLE_S)
        side = Side()
        side.add("server", descendants(c.proc.pid for c in clients))  # the clients' processes are the servers
        return side
    finally:
        close_all(clients)


def lazyd_side(venv: Path, env: dict[str, str], count: int) -> tuple[Side, int]:
    """lazyd's side, and the floor's interpreter (KiB) read while it is up."""
    daemon = start_daemon(venv, env)
    try:
        clients = [shim_client(venv, env, EVERYTHING) for _ in range(count)]
        try:
            exercise(clients)
            time.sleep(SETTLE_S)
            side = Side()
            side.add("daemon", [daemon.pid])
            side.add("server", descendants([daemon.pid]) - {daemon.pid})
            side.add("clients", descendants(c.proc.pid for c in clients))
            return side, floor_kib(venv)
        finally:
            close_all(clients)
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)


def mux_side(binary: Path, env: dict[str, str], root: Path, count: int) -> Side:
    """mcp-mux as its README runs it: `mcp-mux <server command>` per client, whose first shim
    starts the shared daemon (`mcp-mux daemon`), in a private TMPDIR (where its sockets live)."""
    own = root / "bin" / "mcp-mux"  # a private copy: its processes are this run's and no one else's
    own.parent.mkdir()
    shutil.copy2(binary, own)
    (root / "tmp").mkdir()
    env = {**env, "TMPDIR": str(root / "tmp")}
    clients = [LineClient([str(own), *EVERYTHING], env) for _ in range(count)]
    try:
        exercise(clients)
        time.sleep(SETTLE_S)
        shims = {c.proc.pid for c in clients}
        daemons = running(own) - shims
        if not daemons:
            raise SystemExit("mcp-mux: no daemon process of the binary is running; is it mcp-mux?")
        side = Side()
        side.add("daemon", daemons)
        side.add("server", descendants(daemons) - daemons - shims)
        side.add("clients", descendants(shims) - descendants(daemons))
        return side
    finally:
        close_all(clients)
        subprocess.run([str(own), "stop"], env=env, capture_output=True, timeout=60)
        for pid in running(own):  # whatever `stop` left
            os.kill(pid, signal.SIGKILL)


def mib(kib: int) -> str:
    return f"{kib / 1024:.1f} MiB"


def parts(side: Side) -> str:
    return " / ".join(f"{side.rss[p] / 1024:.1f}" if p in side.rss else "-" for p in ("daemon", "server", "clients"))


def fixed_cost(venv: Path, mux: Path | None, count: int = CLIENTS) -> None:
    root = Path(tempfile.mkdtemp(prefix="lzf", dir="/tmp"))
    try:
        env = user_env(root, venv)
        direct = direct_side(env, count)
        lazyd, floor = lazyd_side(venv, env, count)
        other = mux_side(mux, env, root, count) if mux is not None else None
    finally:
        shutil.rmtree(root, ignore_errors=True)
    row("", "direct", "lazyd", f"{'mcp-mux' if other else '':>18}")
    for kind, label in (("rss", "Σ RSS"), ("pss", "Σ PSS")):
        d, z = direct.total(kind), lazyd.total(kind)
        beside = f"{mib(other.total(kind)):>18}  lazyd {z / other.total(kind):.2f}x of mcp-mux; " if other else ""
        row(f"{count} clients of server-everything: {label}", mib(d), mib(z), f"{beside}{z / d:.2f}x of direct")
    row("  RSS of daemon / server / clients' processes, MiB", parts(direct), parts(lazyd),
        f"{parts(other):>18}" if other else "")
    floored = floor + lazyd.rss.get("server", 0) + lazyd.rss.get("clients", 0)
    beside = f"{'':>18}  {floored / other.total('rss'):.2f}x of mcp-mux; " if other else ""
    row("the floor: Σ RSS with a bare interpreter + trio as daemon", "-", mib(floored),
        f"{beside}lazyd {lazyd.total('rss') / floored:.2f}x of it")
    row("  RSS of that interpreter / server / clients' processes, MiB", "-",
        f"{floor / 1024:.1f} / {lazyd.rss.get('server', 0) / 1024:.1f} / {lazyd.rss.get('clients', 0) / 1024:.1f}")
    if other is None:
        print("mcp-mux: not measured (pass --mcp-mux PATH to a built mcp-mux binary)")

