"""Two daemons' hand-off path side by side in one run: another source tree's against this one's.

    python -m tests.benchmarks.ab_handoff --rev REV [--calls N] [--big-calls N] [--big-bytes N] [--blocks N]
        [--socketpairs]

The daemon of `--rev` (a revision of this repository, exported with `git archive`) and the daemon
of this tree run at once, each with one hand-off session to the echo server from its own tree's
shim (so that a change of the region's layout is compared hand-off to hand-off), beside a direct
connection. Blocks alternate direct, A, B, B, A, direct, so machine noise hits both daemons alike
(a change of a few per cent in a figure drowns in the noise between separate runs on a shared
machine). Printed per side: small `tools/call` p50 and p99, the added p50, daemon CPU per round
trip from /proc, and the 1 MiB echo throughput (`--big-bytes` echoes another size: 512 KiB, say,
whose answer the client's widened pipe takes whole, where 1 MiB's answer is over it and goes in parts),
and each daemon's resident memory (PSS and RSS, /proc/PID/smaps_rollup) right after the big calls
and once the heap trimmer's quiet spell has passed (lazyd/daemon/heap_trim.py).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tarfile
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from tests.benchmarks.bench_handoff import spread
from tests.benchmarks.common import (
    ECHO,
    REPO,
    LineClient,
    isolated_daemon,
    median,
    percentile,
    shim_path,
    time_calls,
)


def cpu_seconds(pid: int) -> float:
    """CPU time of all a process's threads, in ns steps (/proc/PID/task/*/schedstat), not ticks."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total / 1e9


def minor_faults(pid: int) -> int:
    """Minor page faults of a process so far (/proc/PID/stat, field 10)."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[7])


def memory_mib(pid: int) -> str:
    """PSS and RSS of a process, in MiB."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:])
    return f"{int(fields['Pss'].split()[0]) / 1024:.1f} / {int(fields['Rss'].split()[0]) / 1024:.1f}"


def export(rev: str, into: Path) -> Path:
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev], check=True, capture_output=True).stdout
    tar = into / "tree.tar"
    tar.write_bytes(archive)
    with tarfile.open(tar) as t:
        t.extractall(into / "tree", filter="data")
    return into / "tree"


def tree_shim(tree: Path) -> tuple[list[str], dict[str, str]]:
    """The command and environment of `tree`'s own shim: a daemon of another region layout than
    this tree's shim would serve it over frames, not by hand-off."""
    site = tree.parent / "site"
    site.mkdir()
    (site / "lazyd").symlink_to(tree / "lazyd")
    (site / "lazyd_shim").symlink_to(tree / "shim")
    (site / "lazyd-shim").write_bytes((tree / "shim" / "lazyd-shim").read_bytes())
    return [sys.executable, str(site / "lazyd-shim")], {"PYTHONPATH": str(site)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rev", required=True, help="the revision to compare this tree with (A)")
    parser.add_argument("--calls", type=int, default=8000, help="small round trips per side")
    parser.add_argument("--big-calls", type=int, default=40, help="1 MiB echo round trips per side")
    parser.add_argument("--big-bytes", type=int, default=1024 * 1024, help="bytes of text echoed by the big calls")
    parser.add_argument("--blocks", type=int, default=5)
    parser.add_argument("--socketpairs", action="store_true",
                        help="every client's stdin and stdout are Unix socketpairs (as Node gives), not pipes")
    args = parser.parse_args()
    sides = (args.rev, "this tree")
    order = ("direct", sides[0], sides[1], sides[1], sides[0], "direct")
    with tempfile.TemporaryDirectory(prefix="lzab") as tmp, ExitStack() as stack:
        old = export(args.rev, Path(tmp))
        envs = [stack.enter_context(isolated_daemon(old)), stack.enter_context(isolated_daemon())]
        pids = {side: int(env["LAZYD_BENCH_DAEMON_PID"]) for side, env in zip(sides, envs)}
        clients = {"direct": LineClient(ECHO, envs[1], socketpairs=args.socketpairs)}
        old_shim, old_env = tree_shim(old)
        clients[sides[0]] = LineClient([*old_shim, "--", *ECHO], {**envs[0], **old_env, "LAZYD_HANDOFF": "1"},
                                       socketpairs=args.socketpairs)
        clients[sides[1]] = LineClient([shim_path(), "--", *ECHO], {**envs[1], "LAZYD_HANDOFF": "1"},
                                       socketpairs=args.socketpairs)
        for client in clients.values():
            client.handshake()
            time_calls(client, 200, "warm")
        names = ("direct", *sides)
        p50: dict[str, list[float]] = {s: [] for s in names}
        p99: dict[str, list[float]] = {s: [] for s in names}
        cpu: dict[str, list[float]] = {s: [] for s in names}
        mib: dict[str, list[float]] = {s: [] for s in names}
        big_cpu: dict[str, list[float]] = {s: [] for s in names}
        faults: dict[str, list[float]] = {s: [] for s in names}
        per_block = max(1, args.calls // (args.blocks * 2))
        per_big = max(1, args.big_calls // (args.blocks * 2))
        big = "y" * args.big_bytes
        for _ in range(args.blocks):
            for side in order:
                pid = pids.get(side, clients[side].proc.pid)
                before = cpu_seconds(pid)
                samples = time_calls(clients[side], per_block, "x")
                cpu[side].append((cpu_seconds(pid) - before) / per_block)
                p50[side].append(median(samples))
                p99[side].append(percentile(samples, 99))
        for _ in range(args.blocks):
            for side in order:
                pid = pids.get(side, clients[side].proc.pid)
                before, faulted = cpu_seconds(pid), minor_faults(pid)
                samples = time_calls(clients[side], per_big, big)
                big_cpu[side].append((cpu_seconds(pid) - before) / per_big)
                faults[side].append((minor_faults(pid) - faulted) / per_big)
                mib[side].append(2 * len(samples) * args.big_bytes / (1 << 20) / sum(samples))
        after_big = {side: memory_mib(pids[side]) for side in sides}
        time.sleep(4)  # past the heap trimmer's quiet spell (2 s)
        after_quiet = {side: memory_mib(pids[side]) for side in sides}
        for client in clients.values():
            client.close()
    print(f"{'hand-off, median of blocks [min..max]':44} " + " ".join(f"{s[:24]:>24}" for s in names))
    print(f"{'round trip p50':44} " + " ".join(f"{spread(p50[s], 1e6, 'us'):>24}" for s in names))
    print(f"{'round trip p99':44} " + " ".join(f"{spread(p99[s], 1e6, 'us'):>24}" for s in names))
    added = {s: [a - d for a, d in zip(p50[s], p50["direct"])] for s in sides}
    print(f"{'added p50':44} {'':>24} " + " ".join(f"{spread(added[s], 1e6, 'us'):>24}" for s in sides))
    ratio = {s: [a / d for a, d in zip(p99[s], p99["direct"])] for s in sides}
    print(f"{'p99 / direct p99':44} {'':>24} " + " ".join(f"{spread(ratio[s], 1, 'x'):>24}" for s in sides))
    print(f"{'CPU per round trip (direct: server; daemon)':44} "
          + " ".join(f"{spread(cpu[s], 1e6, 'us'):>24}" for s in names))
    label = f"{args.big_bytes / (1 << 20):g} MiB echo"
    print(f"{label + ', MiB/s both ways':44} " + " ".join(f"{spread(mib[s], 1, ''):>24}" for s in names))
    print(f"{label + ', CPU per round trip':44} " + " ".join(f"{spread(big_cpu[s], 1e3, 'ms'):>24}" for s in names))
    print(f"{label + ', minor faults per round trip':44} " + " ".join(f"{spread(faults[s], 1, ''):>24}" for s in names))
    print(f"{'daemon PSS / RSS MiB, after the big calls':44} {'':>24} " + " ".join(f"{after_big[s]:>24}" for s in sides))
    print(f"{'the same, 4 s later':44} {'':>24} " + " ".join(f"{after_quiet[s]:>24}" for s in sides))
    big_ratio = {s: [a / d for a, d in zip(mib[s], mib["direct"])] for s in sides}
    print(f"{label + ', ratio to direct':44} {'':>24} " + " ".join(f"{spread(big_ratio[s], 1, 'x'):>24}" for s in sides))


if __name__ == "__main__":
    main()
