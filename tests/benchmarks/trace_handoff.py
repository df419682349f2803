"""Where a small hand-off round trip's task switches and syscalls go (a measuring aid, not a test).

    python -m tests.benchmarks.trace_handoff [--calls N] [--text-bytes N] [--strace | --py-spy | --profile] [--tree DIR]

Runs the daemon under a trio instrument that counts task steps (`before_task_step`) by task
name, opens one hand-off session to the echo server, warms it, then makes `--calls` small
`tools/call` round trips and prints the steps per round trip by task, the epoll waits per round trip, and
the garbage collections (count and microseconds, by generation). With `--strace`, `strace -f -c` is attached to the daemon for the
measured calls only and its table is printed per round trip.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.benchmarks.common import ECHO, LineClient, isolated_daemon, shim_path, time_calls

# Run as the daemon: counts task steps, and dumps them when told (SIGRTMIN+1 resets, SIGRTMIN+2 dumps: the daemon uses SIGUSR1/2 itself).
DAEMON = r"""
import collections, json, os, signal, sys
import trio
import trio.abc

counts = collections.Counter()
io = collections.Counter()

import gc, time
_gc_start = [0.0]
def _gc(phase, info):
    if phase == "start":
        _gc_start[0] = time.perf_counter()
    else:
        gen = f"gc gen{info['generation']}"
        io[gen] += 1
        io[gen + " us"] += int((time.perf_counter() - _gc_start[0]) * 1e6)
gc.callbacks.append(_gc)

class Steps(trio.abc.Instrument):
    def before_task_step(self, task):
        counts[task.name.rsplit(".", 1)[-1]] += 1
    def before_io_wait(self, timeout):
        io["io_wait" if timeout > 0 else "io_poll"] += 1

OUT = os.environ["LAZYD_TRACE_OUT"]  # read now: the daemon keeps only its own environment (lazyd/host/daemonenv.py)
profiler = None
if os.environ.get("LAZYD_TRACE_PROFILE"):
    import cProfile
    profiler = cProfile.Profile()

def reset(*_):
    counts.clear(); io.clear()
    if profiler is not None:
        profiler.enable()

def dump(*_):
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(OUT + ".prof")
    with open(OUT, "w") as f:
        json.dump({"steps": counts, "io": io}, f)

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


def collapsed(path: Path) -> None:
    """Share of the daemon's on-CPU samples per frame (inclusive) and per leaf (exclusive)."""
    inclusive: dict[str, int] = {}
    leaf: dict[str, int] = {}
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = [f.split(" (")[0] + " " + f.rsplit("/", 1)[-1].split(":")[0] for f in stack.split(";")]
        total += int(count)
        for frame in set(frames):
            inclusive[frame] = inclusive.get(frame, 0) + int(count)
        leaf[frames[-1]] = leaf.get(frames[-1], 0) + int(count)
    print(f"py-spy: {total} samples on CPU")
    for title, table in (("inclusive", inclusive), ("leaf", leaf)):
        print(f"  {title}:")
        for frame, samples in sorted(table.items(), key=lambda kv: -kv[1])[:30]:
            print(f"    {100 * samples / total:5.1f}%  {frame}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--strace", action="store_true")
    parser.add_argument("--tree", type=Path, help="run the daemon of this source tree (a checkout or export)")
    parser.add_argument("--text-bytes", type=int, default=1, help="size of the echoed text (1 MiB: 1048576)")
    parser.add_argument("--profile", action="store_true", help="cProfile the daemon over the calls")
    parser.add_argument("--py-spy", action="store_true", help="sample the daemon with py-spy (collapsed stacks)")
    args = parser.parse_args()
    out = Path(tempfile.mkdtemp(prefix="lzt")) / "steps.json"
    traced = {"LAZYD_TRACE_OUT": str(out), "LAZYD_TRACE_PROFILE": "1" if args.profile else ""}
    with isolated_daemon(args.tree, python_args=["-c", DAEMON], daemon_env=traced) as env:
        pid = int(env["LAZYD_BENCH_DAEMON_PID"])
        client = LineClient([shim_path(), "--", *ECHO], {**env, "LAZYD_HANDOFF": "1"})
        client.handshake()
        time_calls(client, 300, "warm")
        time.sleep(0.5)
        tracer = None
        if args.strace:
            tracer = subprocess.Popen(["strace", "-f", "-c", "-o", str(out) + ".strace", "-p", str(pid)],
                                      stderr=subprocess.DEVNULL)
            time.sleep(1.0)
        if args.py_spy:
            tracer = subprocess.Popen(["py-spy", "record", "-r", "1000", "-f", "raw", "-o", str(out) + ".spy",
                                       "-p", str(pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1.0)
        os.kill(pid, signal.SIGRTMIN + 1)
        time.sleep(0.1)
        samples = time_calls(client, args.calls, "x" * args.text_bytes)
        os.kill(pid, signal.SIGRTMIN + 2)
        time.sleep(0.3)
        if tracer is not None:
            tracer.send_signal(signal.SIGINT)
            tracer.wait()
        client.close()
    data = json.loads(out.read_text())
    n = args.calls
    samples.sort()
    print(f"{n} calls, p50 {samples[n // 2] * 1e6:.0f} us")
    print("task steps per round trip:", f"{sum(data['steps'].values()) / n:.2f}")
    for name, count in sorted(data["steps"].items(), key=lambda kv: -kv[1]):
        if count / n >= 0.01:
            print(f"  {count / n:6.2f}  {name}")
    print("trio I/O waits and collections per round trip:", {k: round(v / n, 3) for k, v in data["io"].items()})
    if args.py_spy:
        collapsed(Path(str(out) + ".spy"))
    if args.profile:
        import pstats

        pstats.Stats(str(out) + ".prof").sort_stats("tottime").print_stats(25)
    if args.strace:
        print("syscalls per round trip (strace -f -c):")
        for line in Path(str(out) + ".strace").read_text().splitlines()[2:]:
            parts = line.split()
            if len(parts) >= 5 and parts[3].isdigit():
                print(f"  {int(parts[3]) / n:6.2f}  {parts[-1]}")


if __name__ == "__main__":
    main()
