"""The cost of an upgrade: how long calls stall while lazyd hands itself over to a new lazyd.

10 echo servers (distinct identities, one process each), one session open on each, 4 of them
streaming calls back to back. Then, several times, an upgrade (`lazyctl upgrade`, or SIGUSR2 to
the daemon, which skips lazyctl's own start-up) while the streams run. Printed per upgrade:

- **to first answer**: from the upgrade's start (lazyctl started, or the signal sent) to the
  first answer of the stalled streams, i.e. the end of the longest gap that spans the upgrade;
- **longest gap**: the longest time between two answers of one stream across the upgrade;
- the daemon's own figure: from its receiving the request to having taken everything over.

Side by side, the same streams' longest gap over as long a stretch without an upgrade (the
noise floor of this machine), so the difference is the upgrade's. Run:

    python -m tests.benchmarks.bench_upgrade [--upgrades 5] [--servers 10] [--streams 4]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time

from tests.benchmarks.common import ECHO, LineClient, isolated_daemon, median, shim_path


class Stream:
    """A session calling `echo` back to back; keeps the time of every answer."""

    def __init__(self, client: LineClient) -> None:
        self.client = client
        self.answers: list[float] = []
        self.failures = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            reply = self.client.request("tools/call", {"name": "echo", "arguments": {"text": "x"}})
            if "result" not in reply:
                self.failures += 1
            self.answers.append(time.perf_counter())


def longest_gap(answers: list[float], start: float, end: float) -> tuple[float, float]:
    """(longest gap between answers within [start, end], the time its end came)."""
    inside = [t for t in answers if start <= t <= end]
    best, best_end = 0.0, start
    for a, b in zip(inside, inside[1:]):
        if b - a > best:
            best, best_end = b - a, b
    return best, best_end


def upgrade(env: dict[str, str], how: str) -> tuple[float, dict[str, object]]:
    """Start an upgrade; (its start on perf_counter, lazyctl's report or {} for a signal)."""
    began = time.perf_counter()
    if how == "signal":
        os.kill(int(env["LAZYD_BENCH_DAEMON_PID"]), signal.SIGUSR2)
        return began, {}
    done = subprocess.run([sys.executable, "-m", "lazyd.ctl.main", "upgrade", "--json"], env=env,
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise SystemExit(f"lazyctl upgrade failed: {done.stderr.strip()}")
    report: dict[str, object] = json.loads(done.stdout)
    return began, report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--upgrades", type=int, default=5, help="upgrades of each kind")
    parser.add_argument("--servers", type=int, default=10)
    parser.add_argument("--streams", type=int, default=4, help="sessions calling back to back")
    parser.add_argument("--window", type=float, default=2.0, help="seconds watched after each upgrade")
    args = parser.parse_args()
    with isolated_daemon() as env:
        sessions = []
        for i in range(args.servers):
            client = LineClient([shim_path(), "--", *ECHO], {**env, "BENCH_SERVER": str(i)})  # own identity each
            client.handshake()
            client.request("tools/call", {"name": "echo", "arguments": {"text": "warm"}})
            sessions.append(client)
        streams = [Stream(c) for c in sessions[:args.streams]]
        for s in streams:
            s.thread.start()
        time.sleep(1.0)
        quiet_start = time.perf_counter()
        time.sleep(args.window)
        floor = max(longest_gap(s.answers, quiet_start, time.perf_counter())[0] for s in streams)
        rows = []
        for how in ("lazyctl", "signal"):
            for _ in range(args.upgrades):
                began, report = upgrade(env, how)
                time.sleep(args.window)
                gaps = [longest_gap(s.answers, began, time.perf_counter()) for s in streams]
                gap, gap_end = max(gaps)
                took = report.get("took_s")
                rows.append((how, gap_end - began, gap, took if isinstance(took, float) else None))
                time.sleep(0.5)
        for s in streams:
            s.stop.set()
        for s in streams:
            s.thread.join(timeout=10)
        failures = sum(s.failures for s in streams)
        calls = sum(len(s.answers) for s in streams)
        for client in sessions:
            client.close()
    print(f"{args.servers} servers, {args.streams} streams, {calls} calls, {failures} failed")
    print(f"longest gap without an upgrade over {args.window:g} s: {floor * 1000:.1f} ms")
    print(f"{'upgrade':8} {'to first answer':>16} {'longest gap':>12} {'daemon took':>12}")
    for how, first, gap, took in rows:
        print(f"{how:8} {first * 1000:13.1f} ms {gap * 1000:9.1f} ms "
              + (f"{took * 1000:9.1f} ms" if took is not None else f"{'-':>12}"))
    for how in ("lazyctl", "signal"):
        mine = [r for r in rows if r[0] == how]
        print(f"{how}: median to first answer {median([r[1] for r in mine]) * 1000:.1f} ms, "
              f"median longest gap {median([r[2] for r in mine]) * 1000:.1f} ms, "
              f"worst gap {max(r[2] for r in mine) * 1000:.1f} ms")


if __name__ == "__main__":
    main()
