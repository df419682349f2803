"""The floor of one Python hop: the smallest relay between a client and the echo server.

    python -m tests.benchmarks.floor_relay [--calls N] [--blocks N]

Three sides against tests/benchmarks/echo_server.py, blocks alternating as in the other
benchmarks: **direct**; **trio** (a relay process whose two tasks each wait for readiness,
read and write the bytes on: `trio.lowlevel.wait_readable`, `os.read`, `os.write`, nothing
else); **epoll** (the same relay as one bare `select.epoll` loop). What a relay that parses,
routes and keeps books (lazyd's daemon) adds is measured against these two, not against zero.
Printed: round trip p50 and the added p50, and the relay's CPU per round trip (from /proc).
"""

from __future__ import annotations

import argparse
import os
import select
import subprocess
import sys

from tests.benchmarks.bench_handoff import spread
from tests.benchmarks.common import ECHO, LineClient, cpu_seconds, median, time_calls


def relay_trio(server: list[str]) -> None:
    import trio

    proc = subprocess.Popen(server, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None

    async def pump(src: int, dst: int) -> None:
        os.set_blocking(src, False)
        while True:
            await trio.lowlevel.wait_readable(src)
            data = os.read(src, 1 << 20)
            if not data:
                return
            os.write(dst, data)

    async def main() -> None:
        assert proc.stdin is not None and proc.stdout is not None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(pump, 0, proc.stdin.fileno())
            nursery.start_soon(pump, proc.stdout.fileno(), 1)

    trio.run(main)


def relay_epoll(server: list[str]) -> None:
    proc = subprocess.Popen(server, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    route = {0: proc.stdin.fileno(), proc.stdout.fileno(): 1}
    poller = select.epoll()
    for fd in route:
        os.set_blocking(fd, False)
        poller.register(fd, select.EPOLLIN)
    while True:
        for fd, _ in poller.poll():
            data = os.read(fd, 1 << 20)
            if not data:
                return
            os.write(route[fd], data)


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--relay":
        {"trio": relay_trio, "epoll": relay_epoll}[sys.argv[2]](sys.argv[3:])
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=12000, help="small tools/call round trips per side")
    parser.add_argument("--blocks", type=int, default=5)
    args = parser.parse_args()
    sides = ("direct", "trio", "epoll")
    order = ("direct", "trio", "epoll", "epoll", "trio", "direct")
    me = [sys.executable, "-m", "tests.benchmarks.floor_relay", "--relay"]
    clients = {side: LineClient(ECHO if side == "direct" else [*me, side, *ECHO], dict(os.environ)) for side in sides}
    for client in clients.values():
        client.handshake()
        time_calls(client, 300, "warm")
    p50: dict[str, list[float]] = {s: [] for s in sides}
    cpu: dict[str, list[float]] = {s: [] for s in sides}
    per_block = max(1, args.calls // (args.blocks * 2))
    for _ in range(args.blocks):
        for side in order:
            pid = clients[side].proc.pid  # the relay (direct: the server)
            before = cpu_seconds(pid)
            samples = time_calls(clients[side], per_block, "x")
            cpu[side].append((cpu_seconds(pid) - before) / per_block)
            p50[side].append(median(samples))
    for client in clients.values():
        client.close()
    print(f"python {sys.version.split()[0]}, load average {os.getloadavg()[0]:.2f} at the end")
    print(f"{'median of blocks [min..max]':40} " + " ".join(f"{s:>24}" for s in sides))
    print(f"{'round trip p50':40} " + " ".join(f"{spread(p50[s], 1e6, 'us'):>24}" for s in sides))
    added = {s: [a - d for a, d in zip(p50[s], p50["direct"])] for s in sides[1:]}
    print(f"{'added p50':40} {'':>24} " + " ".join(f"{spread(added[s], 1e6, 'us'):>24}" for s in sides[1:]))
    print(f"{'CPU per round trip (the relay; server)':40} " + " ".join(f"{spread(cpu[s], 1e6, 'us'):>24}" for s in sides))


if __name__ == "__main__":
    main()
