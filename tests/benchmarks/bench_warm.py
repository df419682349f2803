"""The warm session start of the installed shim beside its interpreter's floor, in one run.

    python -m tests.benchmarks.bench_warm [--starts 40] [--venv DIR] [--no-reinstall]

The product as users install it (a venv with this checkout `pip install`-ed, not editable: an
editable install's finder slows every start of that interpreter, `python -c pass` included). In
rounds, one sample of each per round so that the machine's load falls on all of them alike:

1. `python -c pass` of the interpreter the installed `lazyd-shim` runs on;
2. the floor: that interpreter importing `_socket` (the C module the shim dials with), then one
   round trip on a Unix socket (connect, send one byte, receive one byte from a responder thread
   of this process), with the cycle collector off as the shim starts; and, for comparison, the
   same with `import msgpack` too (the wire's library, which a warm start no longer loads: its
   hello and welcome go through lazyd/protocol/smallpack.py) and with `socket` instead of `_socket`;
3. the shim's warm session start: `lazyd-shim -- <echo server>` spawned, `initialize` written,
   its answer read (from the daemon's cache: the server was started and its handshake cached
   before), with the CPU the shim's process used in all (its Python, then its waiting shell);
4. the daemon's part of it: hello to `initialize` answered by a session this process opens the
   way a shim does (scale_support.HandedOff), no Python start.

p50 and p90 of each, the ratios to `python -c pass`, the CPU each process used (wait4), and the
`-X importtime` of a warm start (its largest imports by their own time, median of 5 starts).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from tests.benchmarks.common import median, percentile
from tests.benchmarks.scale_support import (
    close_all,
    installed_venv,
    interpreter,
    open_sessions,
    raw_start,
    scale_env,
    servers,
    socket_of,
    start_daemon,
)

INIT_LINE = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                                   "clientInfo": {"name": "bench", "version": "1"}}}).encode() + b"\n"
TARGET = 1.5  # warm start against `python -c pass`


def responder(path: str) -> threading.Thread:
    """A Unix socket at `path` answering each connection's first byte with one byte."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)

    def serve() -> None:
        while True:
            conn, _ = listener.accept()
            with conn:
                if conn.recv(1):
                    conn.sendall(b"y")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def floor_code(path: str, module: str, msgpack: bool = False) -> str:
    return "import gc; gc.disable()\n" + ("import msgpack\n" if msgpack else "") + (f"import {module}\n"
            f"s = {module}.socket({module}.AF_UNIX, {module}.SOCK_STREAM)\n"
            f"s.connect({path!r}); s.sendall(b'x'); assert s.recv(1) == b'y'")


def timed(argv: list[str]) -> tuple[float, float]:
    """(seconds the process took, the CPU seconds it used)."""
    began = time.perf_counter()
    proc = subprocess.Popen(argv)
    _, status, usage = os.wait4(proc.pid, 0)
    took = time.perf_counter() - began
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0, argv
    return took, usage.ru_utime + usage.ru_stime


def warm_start(venv: Path, env: dict[str, str], server: list[str], extra: list[str] | None = None,
               stderr: int | None = subprocess.DEVNULL) -> tuple[float, float]:
    """(seconds to the `initialize` answer, CPU seconds of the shim's process in all)."""
    argv = [str(venv / "bin" / "lazyd-shim"), "--", *server]
    if extra:
        argv = [str(venv / "bin" / "python"), *extra, *argv]
    began = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(INIT_LINE)
    proc.stdin.flush()
    line = proc.stdout.readline()
    took = time.perf_counter() - began
    assert b'"result"' in line, line
    proc.stdin.close()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.stdout.close()
    return took, usage.ru_utime + usage.ru_stime


def importtime(venv: Path, env: dict[str, str], server: list[str], top: int, runs: int) -> list[str]:
    """The imports of a warm start by their own time, the median of `runs` starts under -X importtime."""
    own: dict[str, list[float]] = {}
    cumulative: dict[str, list[float]] = {}
    for _ in range(runs):
        with tempfile.TemporaryFile() as err:
            warm_start(venv, env, server, ["-X", "importtime"], stderr=err.fileno())
            err.seek(0)
            for line in err.read().decode().splitlines():
                if line.startswith("import time:") and "self [us]" not in line:
                    mine, whole, name = line[len("import time:"):].split("|")
                    own.setdefault(name.strip(), []).append(int(mine))
                    cumulative.setdefault(name.strip(), []).append(int(whole))
    rows = sorted(((median(own[name]), median(cumulative[name]), name) for name in own), reverse=True)
    total = sum(mine for mine, _, _ in rows)
    out = [f"  {mine / 1000:6.2f} ms self {whole / 1000:7.2f} ms cumulative  {name}" for mine, whole, name in rows[:top]]
    return [f"  {len(rows)} modules, {total / 1000:.1f} ms in all (median of {runs} starts; importtime's own overhead "
            "included)", *out]


def stats(samples: list[float]) -> tuple[float, float]:
    return median(samples), percentile(samples, 90)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--starts", type=int, default=40, help="rounds (one sample of each per round)")
    parser.add_argument("--venv", type=Path, default=Path(tempfile.gettempdir()) / f"lazyd-warm-venv-{os.getuid()}",
                        help="where the installed product is built")
    parser.add_argument("--no-reinstall", action="store_true", help="measure the venv as it is")
    parser.add_argument("--top", type=int, default=15, help="imports listed from -X importtime")
    args = parser.parse_args()
    venv = installed_venv(args.venv, refresh=not args.no_reinstall)
    python = str(venv / "bin" / "python")
    print(f"the shim's python {interpreter(venv)}, {os.cpu_count()} CPUs, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} at start; installed product: {venv}")
    with scale_env(venv) as env, tempfile.TemporaryDirectory() as scratch:
        path = os.path.join(scratch, "floor.sock")
        responder(path)
        daemon = start_daemon(venv, env)
        try:
            probe = servers(venv, 1)
            close_all(open_sessions(venv, env, probe, 1, batch=1))  # the server runs, its handshake cached
            time.sleep(0.5)
            names = ["python -c pass", "import socket + 1 round trip",
                     "import msgpack, _socket + 1 round trip", "floor: import _socket + 1 round trip",
                     "lazyd-shim warm start (initialize answered)",
                     "the daemon's part (hello to initialize, no Python)"]
            samples: dict[str, list[float]] = {name: [] for name in names}
            cpu: dict[str, list[float]] = {name: [] for name in names[:5]}
            codes = ["pass", floor_code(path, "socket"), floor_code(path, "_socket", msgpack=True),
                     floor_code(path, "_socket")]
            for _ in range(args.starts):
                for name, code in zip(names[:4], codes):
                    took, used = timed([python, "-c", code])
                    samples[name].append(took)
                    cpu[name].append(used)
                took, used = warm_start(venv, env, probe[0])
                samples[names[4]].append(took)
                cpu[names[4]].append(used)
                samples[names[5]].append(raw_start(socket_of(env), env, probe[0]))
            imports = importtime(venv, env, probe[0], args.top, 5)
        finally:
            daemon.terminate()
            daemon.wait(timeout=30)
    bare = median(samples[names[0]])
    print(f"{args.starts} rounds; wall p50 / p90, p50 / p50 of python -c pass; CPU p50 (the process's own, wait4);"
          " each round trip with the collector off, as the shim starts")
    for name in names:
        p50, p90 = stats(samples[name])
        spent = f"{median(cpu[name]) * 1e3:5.1f} ms CPU" if name in cpu else ""
        print(f"  {name:54} {p50 * 1e3:6.1f} / {p90 * 1e3:6.1f} ms   {p50 / bare:4.2f}x   {spent}")
    # The floor is the `_socket` one with the cycle collector off: the shim dials with `_socket`
    # (shim/dial.py), starts with the collector off (shim/lazyd-shim) and writes its hello and reads
    # its welcome without msgpack (lazyd/protocol/smallpack.py), so none of what `socket` costs beyond it,
    # the collections during the imports or msgpack's import is part of what the shim must pay.
    warm, floor = median(samples[names[4]]), median(samples[names[3]])
    print("  (the shim's CPU counts its Python and then its waiting shell, and excludes the daemon's part)")
    print(f"warm start {warm / bare:.2f}x python -c pass (target <= {TARGET}); the floor (_socket, one round trip, "
          f"collector off) is {floor / bare:.2f}x; warm start {warm / floor:.2f}x the floor, "
          f"{(warm - floor) * 1e3:.1f} ms above it")
    if floor / bare > TARGET:
        print(f"the target is below the floor: {TARGET}x python -c pass is {TARGET * bare * 1e3:.1f} ms, "
              f"the floor {floor * 1e3:.1f} ms")
    else:
        print(f"the target is above the floor: {TARGET}x python -c pass is {TARGET * bare * 1e3:.1f} ms, "
              f"the floor {floor * 1e3:.1f} ms")
    print("-X importtime of a warm start, largest own times:")
    print("\n".join(imports))
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at the end")


if __name__ == "__main__":
    main()
