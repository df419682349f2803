"""What watching memory costs and how fast it catches a leak, in one run.

    python -m tests.benchmarks.bench_memory [--servers 30] [--idle 30] [--top 20]

1. The idle daemon's CPU with `--servers` running servers (keep_alive, the stdlib echo server),
   each with a `memory_max` (so every sample reads their trees), beside the same servers without
   one (only the pressure file is read) and beside direct (no daemon: nothing to spend).
2. `lazyctl top`'s own cost while it is open on those servers: its process's CPU, and what the
   daemon spends more than idle (a status a second, which reads each tree's PSS).
3. A server leaking 50 MiB/s (the fixture server's FIXTURE_LEAK_MIB_S) with `memory_max = 200MiB`
   and a client attached: the time from its tree's PSS crossing the limit (polled here every
   20 ms from /proc) to its process being gone, against the documented bound (two samples,
   SAMPLE_INTERVAL_S apart, plus the stop ladder's first step), and the PSS it reached; twice,
   the second restart after the first.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path
from typing import Any

from lazyd.core.memory import OVER_SAMPLES, SAMPLE_INTERVAL_S
from tests.benchmarks.common import ECHO, FIXTURE, LineClient, cpu_seconds, isolated_daemon, shim_path

LEAK_MIB_S = 50
LEAK_LIMIT_MIB = 200


def ctl(env: dict[str, str], *args: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "lazyd.ctl.main", *args, "--json"], env=env, capture_output=True,
                          text=True, timeout=120)
    if done.returncode != 0:
        raise SystemExit(f"lazyctl {' '.join(args)}: {done.stderr.strip()}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def configure(env: dict[str, str], tables: str) -> None:
    path = Path(env["XDG_CONFIG_HOME"]) / "lazyd" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(tables)
    path.chmod(0o600)
    ctl(env, "reload")


def echo_servers(count: int, memory_max: str | None) -> str:
    limit = f'memory_max = "{memory_max}"\n' if memory_max else ""
    return "".join(f"[servers.echo{n:02}]\ncommand = {json.dumps(ECHO[0])}\nargs = {json.dumps(ECHO[1:])}\n"
                   f"keep_alive = true\n{limit}\n" for n in range(count))


def wait_running(env: dict[str, str], count: int) -> None:
    deadline = time.monotonic() + 120
    while sum(r["state"] == "running" for r in ctl(env, "status")["servers"]) < count:
        if time.monotonic() > deadline:
            raise SystemExit("the servers did not all start")
        time.sleep(0.5)


def core_pct(pid: int, seconds: float) -> float:
    before = cpu_seconds(pid)
    time.sleep(seconds)
    return 100.0 * (cpu_seconds(pid) - before) / seconds


def idle_cpu(env: dict[str, str], daemon: int, count: int, idle_s: float) -> None:
    rows = []
    for label, limit in (("memory_max on every server", "1GiB"), ("no memory_max", None)):
        configure(env, echo_servers(count, limit))
        wait_running(env, count)
        time.sleep(SAMPLE_INTERVAL_S)  # past the reload's own work
        rows.append((label, core_pct(daemon, idle_s)))
    print(f"1. idle daemon CPU, {count} servers running, over {idle_s:.0f} s (sampling every {SAMPLE_INTERVAL_S:g} s):")
    print(f"   {'direct (no daemon)':40} {0.0:6.3f} % of a core")
    for label, pct in rows:
        print(f"   {'lazyd, ' + label:40} {pct:6.3f} % of a core")


def top_cost(env: dict[str, str], daemon: int, count: int, seconds: float) -> None:
    configure(env, echo_servers(count, "1GiB"))
    wait_running(env, count)
    idle = core_pct(daemon, seconds / 2)
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 80, 0, 0))
    top = subprocess.Popen([sys.executable, "-m", "lazyd.ctl.main", "top"], stdin=slave, stdout=slave, stderr=slave,
                           env={**env, "TERM": "xterm-256color"}, start_new_session=True)
    os.set_blocking(master, False)
    try:
        time.sleep(2)  # its start (imports, the first status) is not its cost while open
        top_before, daemon_before, started = cpu_seconds(top.pid), cpu_seconds(daemon), time.monotonic()
        while time.monotonic() < started + seconds:
            try:
                os.read(master, 65536)  # a terminal reads what it is sent
            except BlockingIOError:
                pass
            time.sleep(0.1)
        took = time.monotonic() - started
        top_pct = 100.0 * (cpu_seconds(top.pid) - top_before) / took
        daemon_pct = 100.0 * (cpu_seconds(daemon) - daemon_before) / took
    finally:
        os.write(master, b"q")
        top.wait(timeout=10)
        os.close(master)
        os.close(slave)
    print(f"2. lazyctl top open {seconds:.0f} s on {count} servers (a frame a second):")
    print(f"   {'its own process':40} {top_pct:6.3f} % of a core")
    print(f"   {'the daemon while it is open':40} {daemon_pct:6.3f} % of a core (idle: {idle:.3f} %)")


def pss_mib(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def leak(env: dict[str, str]) -> None:
    configure(env, f"[servers.leaky]\ncommand = {json.dumps(FIXTURE[0])}\nargs = {json.dumps(FIXTURE[1:])}\n"
                   f'env = {{ FIXTURE_LEAK_MIB_S = "{LEAK_MIB_S}" }}\nmemory_max = "{LEAK_LIMIT_MIB}MiB"\n')
    client = LineClient([shim_path(), "--server", "leaky"], env)  # attached: each restart goes on
    bound = OVER_SAMPLES * SAMPLE_INTERVAL_S
    print(f"3. a leak of {LEAK_MIB_S} MiB/s, memory_max {LEAK_LIMIT_MIB} MiB (bound: {OVER_SAMPLES} samples "
          f"{SAMPLE_INTERVAL_S:g} s apart = {bound:g} s after it crosses, plus the ladder's stdin close):")
    try:
        client.handshake()
        seen: set[int] = set()
        for attempt in (1, 2):
            client.request("tools/call", {"name": "pid", "arguments": {}})  # starts it (again)
            pid = next(r["pid"] for r in ctl(env, "status", "leaky")["servers"] if r["name"] == "leaky")
            if pid in seen:
                raise SystemExit("the same process answered after a restart")
            seen.add(pid)
            crossed = peak = None
            while True:
                size = pss_mib(pid)
                if size is None:
                    break
                peak = size
                if crossed is None and size > LEAK_LIMIT_MIB:
                    crossed = time.monotonic()
                time.sleep(0.02)
            gone = time.monotonic()
            if crossed is None:
                raise SystemExit("the process ended before it crossed the limit")
            print(f"   restart {attempt}: gone {gone - crossed:.2f} s after crossing {LEAK_LIMIT_MIB} MiB "
                  f"(bound {bound:g} s); its PSS reached {peak:.0f} MiB")
        last = ctl(env, "status", "leaky")["servers"][0]["last_error"]
        print(f"   status: {last}")
    finally:
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--servers", type=int, default=30)
    parser.add_argument("--idle", type=float, default=30.0, help="seconds each idle figure is read over")
    parser.add_argument("--top", type=float, default=20.0, help="seconds lazyctl top is measured open")
    args = parser.parse_args()
    with isolated_daemon() as env:
        daemon = int(env["LAZYD_BENCH_DAEMON_PID"])
        idle_cpu(env, daemon, args.servers, args.idle)
        top_cost(env, daemon, args.servers, args.top)
        leak(env)


if __name__ == "__main__":
    main()
