"""Two shims' frame path side by side in one run: another source tree's against this one's.

    python -m tests.benchmarks.ab_frames --rev REV [--big-calls N] [--blocks N] [--big-bytes N]

One daemon (this tree's) and the echo server; a direct connection, a frame-path session
(`LAZYD_HANDOFF=0`) whose shim is the one of `--rev` (a revision of this repository, exported with
`git archive`, run by this interpreter with that tree first on its path), and one whose shim is
this tree's. Blocks alternate direct, A, B, B, A, direct, so machine noise hits both shims alike.
Printed per side: the 1 MiB echo throughput (both ways) and its ratio to direct, and the shim's CPU
per round trip from /proc (the daemon's is the same code for both).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from tests.benchmarks.ab_handoff import cpu_seconds, export
from tests.benchmarks.common import ECHO, LineClient, isolated_daemon, median, shim_path, time_calls

SHIM_OF_TREE = """import gc, sys
gc.disable()
sys.path.insert(0, sys.argv.pop(1))
from shim.main import main
sys.exit(main())
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rev", required=True, help="the revision whose shim to compare with this tree's (A)")
    parser.add_argument("--big-calls", type=int, default=60, help="echo round trips per side")
    parser.add_argument("--big-bytes", type=int, default=1024 * 1024, help="bytes of text each echo carries")
    parser.add_argument("--blocks", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, isolated_daemon() as env:
        tree = export(args.rev, Path(tmp))
        runner = Path(tmp) / "shim_of_tree.py"
        runner.write_text(SHIM_OF_TREE)
        frames = {**env, "LAZYD_HANDOFF": "0"}
        clients = {
            "direct": LineClient(ECHO, env),
            "A": LineClient([sys.executable, str(runner), str(tree), "--", *ECHO], frames),
            "B": LineClient([shim_path(), "--", *ECHO], frames),
        }
        for client in clients.values():
            client.handshake()
        text = "y" * args.big_bytes
        per_block = max(1, args.big_calls // (args.blocks * 2))
        seconds: dict[str, list[float]] = {side: [] for side in clients}
        cpu: dict[str, list[float]] = {side: [] for side in clients}
        for _ in range(args.blocks):
            for side in ("direct", "A", "B", "B", "A", "direct"):
                pid = clients[side].proc.pid
                before = cpu_seconds(pid)
                samples = time_calls(clients[side], per_block, text)
                cpu[side].append((cpu_seconds(pid) - before) / per_block)
                seconds[side].extend(samples)
        for client in clients.values():
            client.close()
    mib = 2 * args.big_bytes / (1 << 20)
    rate = {side: mib / median(samples) for side, samples in seconds.items()}
    print(f"{args.big_bytes >> 10} KiB echo, median of {len(seconds['B'])} round trips per side "
          f"(A: the shim of {args.rev}, B: this tree's)")
    for side in ("direct", "A", "B"):
        ratio = f", {rate[side] / rate['direct']:.2f}x direct" if side != "direct" else ""
        who = "server" if side == "direct" else "shim"
        print(f"  {side:6}: {rate[side]:6.1f} MiB/s both ways{ratio}; "
              f"{who} CPU {median(cpu[side]) * 1000:.2f} ms per round trip")


if __name__ == "__main__":
    main()
