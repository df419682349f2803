"""A desk: N registrations × K sessions of each, every process's PSS summed by part, lazyd beside
direct (and mcp-mux, given its binary) in one run.

    python -m tests.benchmarks.bench_desk [--registrations 10] [--sessions 4] [--mcp-mux PATH] [--venv DIR]
                                          [--server everything|echo]

The product as users install it: a venv with this checkout `pip install`-ed, not editable
(reinstalled from the checkout at each run unless `--no-reinstall`; scale_support.installed_venv).

A registration is server-everything (npm) run in a project directory of its own, as a client
registers one server for each project; K sessions of each are K clients of it. Each
registration's command line is its own (`… index.js stdio desk-03`: the server reads its first
argument only), so that every multiplexer runs one server per registration: N different servers,
as on a desk. mcp-mux shares one server among every session of the same command and arguments
whatever their directories (v0.29.1's default identity; `MCP_MUX_DEFAULT_MODE=cwd` keys it by
directory too), so ten registrations of one command line would be one server to it and ten to
lazyd, and the figure would compare sharing rules, not the multiplexers' own costs. With
`--server echo` the registrations are the stdlib echo server of the benchmarks (echo_server.py
on the venv's Python, `--instance=N` telling them apart) instead: a small server, where the
multiplexer's own cost is a larger share of the desk. Every session
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
waiting shims, mcp-mux's shims). Figures are PSS from /proc/PID/smaps_rollup; each part's count
of processes is printed beside them, so a side that ran other than N servers shows it.
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

from tests.benchmarks.common import EVERYTHING, LineClient
from tests.benchmarks.fixed_cost import descendants, running
from tests.benchmarks.scale_support import (
    ECHO_SERVER,
    close_all,
    installed_venv,
    interpreter,
    pss_kib,
    start_daemon,
    user_env,
)

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


Registration = tuple[Path, list[str]]  # its project directory and its server's command line


def registrations(root: Path, count: int, server: str, venv: Path) -> list[Registration]:
    made = []
    for n in range(count):
        path = root / "projects" / f"p{n:02}"
        path.mkdir(parents=True)
        argv = ([*EVERYTHING, f"desk-{n:02}"] if server == "everything" else
                [str(venv / "bin" / "python"), ECHO_SERVER, f"--instance={n}"])
        made.append((path, argv))
    return made


def exercise(clients: list[LineClient]) -> None:
    """`initialize`, `tools/list` and one `tools/call` of `echo` answered in every session (the
    argument under both servers' names: server-everything's `message`, echo_server's `text`)."""
    for one in clients:
        one.handshake()
        assert "result" in one.request("tools/list")
        reply = one.request("tools/call", {"name": "echo", "arguments": {"message": "x", "text": "x"}})
        assert "result" in reply and not reply["result"].get("isError"), reply


def summed(parts: dict[str, Iterable[int]]) -> dict[str, tuple[int, int]]:
    """KiB of PSS and the count of processes, per part."""
    return {part: (sum(pss_kib(pid) for pid in pids), len(pids))
            for part, pids in ((part, set(pids)) for part, pids in parts.items())}


def direct_side(env: dict[str, str], desk: list[Registration], k: int) -> dict[str, tuple[int, int]]:
    clients = [client(argv, env, d) for d, argv in desk for _ in range(k)]
    try:
        exercise(clients)
        time.sleep(SETTLE_S)
        return summed({"servers": descendants(c.proc.pid for c in clients)})
    finally:
        close_all(clients)


def lazyd_side(venv: Path, env: dict[str, str], desk: list[Registration], k: int) -> dict[str, tuple[int, int]]:
    daemon = start_daemon(venv, env)
    shim = str(venv / "bin" / "lazyd-shim")
    try:
        clients = [client([shim, "--share", "true", "--", *argv], env, d) for d, argv in desk for _ in range(k)]
        try:
            exercise(clients)
            time.sleep(SETTLE_S)
            servers = descendants([daemon.pid]) - {daemon.pid}
            sessions = descendants(c.proc.pid for c in clients) - servers - {daemon.pid}
            return summed({"daemon": [daemon.pid], "servers": servers, "sessions": sessions})
        finally:
            close_all(clients)
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)


def mux_side(binary: Path, env: dict[str, str], root: Path, desk: list[Registration],
             k: int) -> dict[str, tuple[int, int]]:
    own = root / "bin" / "mcp-mux"  # a private copy: its processes are this run's and no one else's
    own.parent.mkdir(exist_ok=True)
    shutil.copy2(binary, own)
    (root / "tmp").mkdir(exist_ok=True)
    env = {**env, "TMPDIR": str(root / "tmp")}
    clients = [client([str(own), *argv], env, d) for d, argv in desk for _ in range(k)]
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


def mib(kib: int) -> str:
    return f"{kib / 1024:.1f}"


def cell(part: tuple[int, int] | None) -> str:
    return "-" if part is None else f"{mib(part[0])} ({part[1]})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--registrations", type=int, default=10, metavar="N")
    parser.add_argument("--sessions", type=int, default=4, metavar="K", help="sessions of each registration")
    parser.add_argument("--mcp-mux", type=Path, metavar="PATH", help="a built mcp-mux binary: measured beside")
    parser.add_argument("--venv", type=Path, default=Path(tempfile.gettempdir()) / f"lazyd-desk-venv-{os.getuid()}",
                        help="where the installed product is built")
    parser.add_argument("--no-reinstall", action="store_true", help="measure the venv as it is")
    parser.add_argument("--server", choices=("everything", "echo"), default="everything",
                        help="what each registration runs: server-everything (npm) or the stdlib echo server")
    args = parser.parse_args()
    if args.mcp_mux is not None and not os.access(args.mcp_mux, os.X_OK):
        parser.error(f"--mcp-mux {args.mcp_mux}: not an executable file")
    n, k = args.registrations, args.sessions
    venv = installed_venv(args.venv, refresh=not args.no_reinstall)
    print(f"the product's python {interpreter(venv)}, load average {_load()} at start; installed product: {venv}")
    root = Path(tempfile.mkdtemp(prefix="lzk", dir="/tmp"))
    try:
        env = user_env(root, venv)
        desk = registrations(root, n, args.server, venv)
        direct = direct_side(env, desk, k)
        lazyd = lazyd_side(venv, env, desk, k)
        other = mux_side(args.mcp_mux, env, root, desk, k) if args.mcp_mux is not None else None
    finally:
        shutil.rmtree(root, ignore_errors=True)
    sides = [("direct", direct), ("lazyd", lazyd)] + ([("mcp-mux", other)] if other is not None else [])
    served = "server-everything" if args.server == "everything" else "echo_server.py"
    print(f"desk: {n} registrations of {served} x {k} sessions (share = true); PSS in MiB (processes)")
    print(f"{'':12}" + "".join(f"{name:>16}" for name, _ in sides))
    for part in PARTS:
        print(f"{part:12}" + "".join(f"{cell(side.get(part)):>16}" for _, side in sides))
    totals = [sum(kib for kib, _ in side.values()) for _, side in sides]
    print(f"{'Σ PSS':12}" + "".join(f"{mib(total):>16}" for total in totals))
    print(f"lazyd: Σ {totals[1] / totals[0]:.2f}x of direct"
          + (f", {totals[1] / totals[2]:.2f}x of mcp-mux" if other is not None else
             "; mcp-mux: not measured (pass --mcp-mux PATH to a built mcp-mux binary)"))
    for name, side in sides:
        expected = n * k if name == "direct" else n
        if side["servers"][1] != expected:
            print(f"note: {name} ran {side['servers'][1]} server processes, not {expected}")
    own = sum(lazyd.get(part, (0, 0))[0] for part in ("daemon", "sessions"))
    print(f"lazyd's own cost (daemon + {n * k} waiting sessions): {mib(own)} MiB, "
          f"{own / (n * k) / 1024:.2f} MiB a session with the daemon spread over them")
    print(f"load average {_load()} at the end")


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    main()
