"""One client pipelining many calls, and what another session's round trips see meanwhile.

    python -m tests.benchmarks.bench_pipelined [--calls N] [--runs N] [--daemon-tree DIR] [--steps | --profile]

A client writes `--calls` (10,000) `tools/call`s of the echo server without waiting, then reads
their answers; meanwhile a second client, of another server (so the two share the daemon and
nothing else), makes one round trip after another. Printed for the frame path and the hand-off
path side by side, in one daemon: the second client's round trips during the flood (p50, p99,
max), the daemon's CPU for the flood, and the flood's wall time. On the hand-off path every
message changes the session's record of what is in flight; this is what that record costs when
10,000 requests are in it at once.

With `--steps` the daemon runs under a trio instrument that times every task step, and each flood
prints where the daemon's time went: per task, its steps, their total and the longest, and the
scheduler's rounds (the time from one epoll to the next, which is what another session's message
waits for at most once per hop). With `--profile` it runs under cProfile too, and each flood prints
its top functions (cProfile slows the daemon: read its shares, not its times).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

from tests.benchmarks.common import ECHO, LineClient, cpu_seconds, isolated_daemon, percentile, shim_path

SIDES = ("frames", "hand-off")

# Run as the daemon with --steps: times task steps and scheduler rounds; SIGRTMIN+1 starts a
# measurement, SIGRTMIN+2 writes it to LAZYD_BENCH_STEPS_OUT (the daemon uses SIGUSR1/2 itself).
STEPS_DAEMON = r"""
import json, os, signal, sys, time
import trio, trio.abc

perf = time.perf_counter
steps, rounds = {}, []
OUT = os.environ["LAZYD_BENCH_STEPS_OUT"]  # read now: the daemon keeps only its own environment (lazyd/host/daemonenv.py)
profiler = None
if os.environ.get("LAZYD_BENCH_PROFILE"):
    import cProfile
    profiler = cProfile.Profile()

class Steps(trio.abc.Instrument):
    began = round_began = None
    def before_task_step(self, task):
        self.began = perf()
    def after_task_step(self, task):
        took = perf() - self.began
        code = getattr(task.coro, "cr_code", None)
        name = getattr(code, "co_qualname", None) or task.name
        entry = steps.setdefault(name, [0, 0.0, 0.0, 0])
        entry[0] += 1; entry[1] += took; entry[2] = max(entry[2], took); entry[3] += took > 0.005
    def after_io_wait(self, timeout):
        self.round_began = perf()
    def before_io_wait(self, timeout):
        if self.round_began is not None:
            rounds.append(perf() - self.round_began)

def reset(*_):
    steps.clear(); rounds.clear()
    if profiler is not None:
        profiler.clear(); profiler.enable()

def dump(*_):
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(OUT + ".prof")
    with open(OUT, "w") as f:
        json.dump({"steps": steps, "rounds": rounds}, f)

signal.signal(signal.SIGRTMIN + 1, reset)
signal.signal(signal.SIGRTMIN + 2, dump)
real_run = trio.run
def run(*args, **kwargs):
    kwargs.setdefault("instruments", []).append(Steps())
    return real_run(*args, **kwargs)
trio.run = run
sys.argv = ["lazyd"]
from lazyd.daemon.main import main
main()
"""


def client(side: str, env: dict[str, str], server: list[str]) -> LineClient:
    return LineClient([shim_path(), "--", *server], {**env, "LAZYD_HANDOFF": "1" if side == "hand-off" else "0"})


def flood(side: str, env: dict[str, str], calls: int, steps_out: Path | None = None) -> dict[str, float]:
    daemon = int(env["LAZYD_BENCH_DAEMON_PID"])
    pipeliner = client(side, env, ECHO)
    other = client(side, env, [*ECHO, "other"])  # another registration: another process
    for c in (pipeliner, other):
        c.handshake()
        c.request("tools/list")
    other.request("tools/call", {"name": "echo", "arguments": {"text": "warm"}})  # its server runs
    pipeliner.request("tools/call", {"name": "echo", "arguments": {"text": "warm"}})
    lines = b"".join(b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo",'
                     b'"arguments":{"text":"pipelined %d"}}}\n' % (n, n) for n in range(1000, 1000 + calls))
    done = threading.Event()

    def read_all() -> None:
        for _ in range(calls):
            pipeliner.stdout.readline()
        done.set()

    reader = threading.Thread(target=read_all)
    if steps_out is not None:
        os.kill(daemon, signal.SIGRTMIN + 1)
        time.sleep(0.1)
    cpu, began = cpu_seconds(daemon), time.perf_counter()
    reader.start()
    writer = threading.Thread(target=lambda: (pipeliner.stdin.write(lines), pipeliner.stdin.flush()))
    writer.start()
    samples: list[float] = []
    while not done.is_set():
        start = time.perf_counter()
        reply = other.request("tools/call", {"name": "echo", "arguments": {"text": "meanwhile"}})
        samples.append(time.perf_counter() - start)
        assert "result" in reply, reply
    wall = time.perf_counter() - began
    cpu = cpu_seconds(daemon) - cpu
    if steps_out is not None:
        os.kill(daemon, signal.SIGRTMIN + 2)
        time.sleep(0.3)
        print_steps(side, steps_out)
    writer.join()
    reader.join()
    pipeliner.close()
    other.close()
    return {"p50": percentile(samples, 50), "p99": percentile(samples, 99), "max": max(samples),
            "round trips": len(samples), "cpu": cpu, "wall": wall}


def print_steps(side: str, out: Path) -> None:
    data = json.loads(out.read_text())
    rounds = sorted(data["rounds"])
    print(f"{side}: {len(rounds)} scheduler rounds, {sum(rounds):.2f} s; p50 {percentile(rounds, 50) * 1e3:.2f} ms, "
          f"p99 {percentile(rounds, 99) * 1e3:.2f} ms, max {rounds[-1] * 1e3:.1f} ms, "
          f"{sum(1 for r in rounds if r > 0.005)} over 5 ms")
    print(f"  {'task':58} {'steps':>7} {'total s':>8} {'mean ms':>8} {'max ms':>7} {'>5 ms':>6}")
    for name, (count, total, longest, long) in sorted(data["steps"].items(), key=lambda kv: -kv[1][1])[:10]:
        print(f"  {name[-58:]:58} {count:7d} {total:8.2f} {total / count * 1e3:8.3f} {longest * 1e3:7.1f} {long:6d}")
    profile = Path(str(out) + ".prof")
    if profile.exists():
        import pstats

        pstats.Stats(str(profile)).sort_stats("tottime").print_stats(20)
        profile.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=10_000, help="calls the first client pipelines")
    parser.add_argument("--runs", type=int, default=3, help="floods per side (frames, hand-off, hand-off, frames, ...)")
    parser.add_argument("--daemon-tree", type=Path, help="run the daemon of this source tree instead")
    parser.add_argument("--steps", action="store_true", help="time the daemon's task steps in each flood")
    parser.add_argument("--profile", action="store_true", help="with --steps: cProfile the daemon in each flood")
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, load average {os.getloadavg()[0]:.2f} at start, {args.calls} calls")
    results: dict[str, list[dict[str, float]]] = {side: [] for side in SIDES}
    steps_out = Path(tempfile.mkdtemp(prefix="lzp")) / "steps.json" if args.steps or args.profile else None
    daemon_args = ["-c", STEPS_DAEMON] if steps_out is not None else None
    daemon_env = {"LAZYD_BENCH_STEPS_OUT": str(steps_out), "LAZYD_BENCH_PROFILE": "1" if args.profile else ""}
    with isolated_daemon(args.daemon_tree, python_args=daemon_args, daemon_env=daemon_env) as env:
        for run in range(args.runs):
            for side in (SIDES if run % 2 == 0 else SIDES[::-1]):
                results[side].append(flood(side, env, args.calls, steps_out))
    print(f"{'':44} " + " ".join(f"{side:>22}" for side in SIDES))
    rows = [("other session's round trip p50, ms", "p50", 1000), ("other session's round trip p99, ms", "p99", 1000),
            ("other session's round trip max, ms", "max", 1000), ("daemon CPU for the flood, s", "cpu", 1),
            ("flood wall time, s", "wall", 1)]
    for label, key, scale in rows:
        cells = []
        for side in SIDES:
            values = sorted(r[key] * scale for r in results[side])
            cells.append(f"{values[len(values) // 2]:.1f} [{values[0]:.1f}..{values[-1]:.1f}]")
        print(f"{label:44} " + " ".join(f"{cell:>22}" for cell in cells))
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
