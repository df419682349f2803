"""The least a trio relay can do: move bytes between a client and the server it runs, nothing else.

    python -m tests.benchmarks.trio_pump -- SERVER ARGV...

No parsing, no ids, no lines, no cache: two tasks, each waiting for its pipe to be readable and
writing what it read on to the other side, the way the daemon's hand-off path waits and writes. What
this adds to a direct connection is the floor of any relay built on trio in CPython: bench_floor
prints it beside lazyd's figures.
"""

from __future__ import annotations

import os
import subprocess
import sys

import trio

CHUNK = 256 * 1024


async def pump(src: int, dst: int) -> None:
    while True:
        try:
            data = os.read(src, CHUNK)
        except BlockingIOError:
            await trio.lowlevel.wait_readable(src)
            continue
        if not data:
            os.close(dst)
            return
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(dst, view):]
            except BlockingIOError:
                await trio.lowlevel.wait_writable(dst)


async def main(argv: list[str]) -> None:
    server = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert server.stdin is not None and server.stdout is not None
    ends = [os.dup(0), os.dup(1), server.stdin.fileno(), server.stdout.fileno()]
    for fd in ends:
        os.set_blocking(fd, False)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(pump, ends[0], ends[2])
        nursery.start_soon(pump, ends[3], ends[1])
    server.wait()


if __name__ == "__main__":
    args = sys.argv[1:]
    trio.run(main, args[1:] if args[:1] == ["--"] else args)
