"""A desk: N registrations × K sessions of each, every process's PSS summed by part, lazyd beside
direct (and mcp-mux, given its binary) in one run.

    python -m tests.benchmarks.bench_desk [--registrations 10] [--sessions 4] [--mcp-mux PATH]

A registration is server-everything (npm) run in a project directory of its own, as a client
registers one server for each project; K sessions of each are K clients of it. Every session
has had `initialize`, `tools/list` and one `tools/call` answered, then the desk is left idle a
second and measured. The registrations are configured shareable (`--share true`): the figure is
lazyd's own cost, not the sharing guess's (docs/configuration.md, "Sharing").

Each side runs alone, one after the other (PSS divides a page among the processes that map it,
so two sides up at once would share node's pages and lower each other's figures):

- direct: each session's client runs the server itself: N×K servers;
- lazyd: each client runs `lazyd-shim --share true -- server`; the daemon (started by the
  benchmark, as systemd or the first shim would) runs one server per registration;
- mcp-mux (with `--mcp-mux PATH`, a built binary): each client runs `mcp-mux server`, whose
  first shim starts its daemon (tests/benchmarks/fixed_cost.py has how it is driven).

Parts: the daemon, the servers (the daemon's descendants; direct: every server), the sessions'
own processes (what each client runs, and its descendants, less the daemon's tree: lazyd's
waiting shims, mcp-mux's shims). Figures are PSS from /proc/PID/smaps_rollup.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from tests.benchmarks.common import EVERYTHING, LineClient, shim_path
from tests.benchmarks.fixed_cost import descendants, exercise, running
from tests.benchmarks.scale_support import close_all, pss_kib, user_env

SETTLE_S = 1.0  # after the last call: lazyd's shims become waiting processes
PARTS = ("daemon", "servers", "sessions")


def client(argv: list[str], env: dict[str, str], cwd: Path) -> LineClient:
    """A raw line client that runs `argv` in the project directory `cwd`."""
    made = LineClient.__new__(LineClient)
    made.proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL)
    assert made.proc.stdin is not None and made.proc.stdout is not None
    made.stdin, made.stdout, made._next = made.proc.stdin, made.proc.stdout, 1
    return made


def projects(root: Path, count: int) -> list[Path]:
    dirs = [root / "projects" / f"p{n:02}" for n in range(count)]
    for path in dirs:
        path.mkdir(parents=True)
    return dirs


def summed(parts: dict[str, Iterable[int]]) -> dict[str, int]:
    """KiB of PSS per part."""
    return {part: sum(pss_kib(pid) for pid in pids) for part, pids in parts.items()}


def direct_side(env: dict[str, str], dirs: list[Path], k: int) -> dict[str, int]:
    clients = [client(EVERYTHING, env, d) for d in dirs for _ in range(k)]
    try:
        exercise(clients)
        time.sleep(SETTLE_S)
        return summed({"servers": descendants(c.proc.pid for c in clients)})
    finally:
        close_all(clients)


def lazyd_side(env: dict[str, str], dirs: list[Path], k: int) -> tuple[dict[str, int], int]:
    """By part, and how many server processes the daemon ran."""
    daemon = subprocess.Popen([str(Path(shim_path()).with_name("lazyd"))], env=env, stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    sock = Path(env["XDG_RUNTIME_DIR"]) / "lazyd" / "lazyd.sock"
    deadline = time.monotonic() + 30
    while not sock.exists():
        if time.monotonic() > deadline or daemon.poll() is not None:
            raise SystemExit("the daemon did not start")
        time.sleep(0.02)
    try:
        clients = [client([shim_path(), "--share", "true", "--", *EVERYTHING], env, d) for d in dirs for _ in range(k)]
        try:
            exercise(clients)
            time.sleep(SETTLE_S)
            servers = descendants([daemon.pid]) - {daemon.pid}
            leaders = [pid for pid in servers if _ppid(pid) == daemon.pid]
            sessions = descendants(c.proc.pid for c in clients) - servers - {daemon.pid}
            return summed({"daemon": [daemon.pid], "servers": servers, "sessions": sessions}), len(leaders)
        finally:
            close_all(clients)
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)


def mux_side(binary: Path, env: dict[str, str], root: Path, dirs: list[Path], k: int) -> dict[str, int]:
    own = root / "bin" / "mcp-mux"  # a private copy: its processes are this run's and no one else's
    own.parent.mkdir(exist_ok=True)
    shutil.copy2(binary, own)
    (root / "tmp").mkdir(exist_ok=True)
    env = {**env, "TMPDIR": str(root / "tmp")}
    clients = [client([str(own), *EVERYTHING], env, d) for d in dirs for _ in range(k)]
    try:
        exercise(clients)
        time.sleep(SETTLE_S)
        shims = {c.proc.pid for c in clients}
        daemons = running(own) - shims
        if not daemons:
            raise SystemExit("mcp-mux: no daemon process of the binary is running; is it mcp-mux?")
        servers = descendants(daemons) - daemons - shims
        return summed({"daemon": daemons, "servers": servers, "sessions": descendants(shims) - descendants(daemons)})
    finally:
        close_all(clients)
        subprocess.run([str(own), "stop"], env=env, capture_output=True, timeout=60)
        for pid in running(own):
            os.kill(pid, signal.SIGKILL)


def _ppid(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def mib(kib: int) -> str:
    return f"{kib / 1024:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--registrations", type=int, default=10, metavar="N")
    parser.add_argument("--sessions", type=int, default=4, metavar="K", help="sessions of each registration")
    parser.add_argument("--mcp-mux", type=Path, metavar="PATH", help="a built mcp-mux binary: measured beside")
    args = parser.parse_args()
    if args.mcp_mux is not None and not os.access(args.mcp_mux, os.X_OK):
        parser.error(f"--mcp-mux {args.mcp_mux}: not an executable file")
    n, k = args.registrations, args.sessions
    root = Path(tempfile.mkdtemp(prefix="lzk", dir="/tmp"))
    try:
        env = user_env(root, Path(shim_path()).parent.parent)
        dirs = projects(root, n)
        direct = direct_side(env, dirs, k)
        lazyd, servers = lazyd_side(env, dirs, k)
        other = mux_side(args.mcp_mux, env, root, dirs, k) if args.mcp_mux is not None else None
    finally:
        shutil.rmtree(root, ignore_errors=True)
    sides = [("direct", direct), ("lazyd", lazyd)] + ([("mcp-mux", other)] if other is not None else [])
    print(f"desk: {n} registrations of server-everything x {k} sessions (share = true); PSS in MiB")
    print(f"{'':28}" + "".join(f"{name:>12}" for name, _ in sides))
    for part in PARTS:
        print(f"{part:28}" + "".join(f"{mib(side.get(part, 0)):>12}" for _, side in sides))
    totals = [sum(side.values()) for _, side in sides]
    print(f"{'Σ PSS':28}" + "".join(f"{mib(total):>12}" for total in totals))
    print(f"lazyd: {servers} server processes for {n * k} sessions; Σ {totals[1] / totals[0]:.2f}x of direct"
          + (f", {totals[1] / totals[2]:.2f}x of mcp-mux" if other is not None else
             "; mcp-mux: not measured (pass --mcp-mux PATH to a built mcp-mux binary)"))
    own = lazyd.get("daemon", 0) + lazyd.get("sessions", 0)
    print(f"lazyd's own cost (daemon + {n * k} waiting sessions): {mib(own)} MiB, "
          f"{own / (n * k) / 1024:.2f} MiB a session with the daemon spread over them")


if __name__ == "__main__":
    main()
