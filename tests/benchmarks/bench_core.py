"""The relay core alone: microseconds per small round trip through `RelayCore`, no process, no socket.

    python -m tests.benchmarks.bench_core [--calls N] [--runs N] [--tree PATH]... [--rev REV]...

What is timed is the core's own work for one `tools/call` from a client and its answer from the
server (`client_line` with the request, then `server_line` with the result), with one client, and
with 10 clients whose calls are interleaved (all ten sent, then answered in reverse order). The
harness's own work (building lines, reading the relay id) is outside the timed calls.

Each tree is measured in an interpreter of its own with that tree first on `sys.path`, so the core
of another checkout (`--tree PATH`) or of a revision of this repository (`--rev REV`, exported with
`git archive`) prints side by side with this one in the same run, e.g. `--rev main --tree .`. With
neither, this checkout is measured. A tree whose events take no `now` (an older core) is driven
without it.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
CLIENTS = 10
_RELAY_ID = re.compile(rb'"id":(\d+)')
PARAMS = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}
RESULT = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}}, "serverInfo": {"name": "echo", "version": "1"}}


def _ready_core(clients: int) -> tuple[Any, dict[str, float]]:
    """A RelayCore whose server is READY with `clients` clients through their handshake."""
    from lazyd.core.relay import jsonrpc as rpc
    from lazyd.core.cache import Snapshot
    from lazyd.core.relay.core import RelayCore, ToServer

    core = RelayCore("bench", Snapshot())
    kw: dict[str, Any] = {"now": 1_000.0} if "now" in inspect.signature(core.client_line).parameters else {}

    def server_requests(actions: list[Any]) -> list[dict[str, Any]]:
        sent = [json.loads(a.line) for a in actions if isinstance(a, ToServer)]
        return [m for m in sent if "method" in m and "id" in m]

    pending: list[dict[str, Any]] = []
    for cid in range(1, clients + 1):
        core.attach(cid, **kw)
        pending += server_requests(core.client_line(cid, rpc.request_line(0, "initialize", PARAMS), **kw))
        core.client_line(cid, rpc.notification_line("notifications/initialized"), **kw)
        if hasattr(core, "release"):  # placed as the daemon does on its SessionKey (session_roots.py)
            core.release(cid, **kw)
    pending += server_requests(core.spawned(**kw))
    while pending:
        msg = pending.pop(0)
        value: object = RESULT if msg["method"] == "initialize" else {"tools": [{"name": "echo", "inputSchema": {}}]}
        if msg["method"] not in ("initialize", "tools/list"):
            value = {}
        pending += server_requests(core.server_line(rpc.result_line(msg["id"], value), **kw))
    assert core.phase.value == "ready", core.phase
    return core, kw


def _call(msg_id: int) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": "tools/call",
                       "params": {"name": "echo", "arguments": {"text": "hello"}}}, separators=(",", ":")).encode()


def _answer(relay_id: int) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": relay_id, "result": {"content": [{"type": "text", "text": "hello"}]}},
                      separators=(",", ":")).encode()


def _relay_id(actions: list[Any]) -> int:
    for action in actions:
        line = getattr(action, "line", b"")
        if type(action).__name__ == "ToServer":
            found = _RELAY_ID.search(line)
            assert found is not None
            return int(found.group(1))
    raise AssertionError(f"no request went upstream: {actions}")


def time_one_client(calls: int) -> float:
    """µs of core time per round trip, one client."""
    core, kw = _ready_core(1)
    spent = 0.0
    for n in range(1, calls + 1):
        request = _call(n)
        start = time.perf_counter()
        sent = core.client_line(1, request, **kw)
        spent += time.perf_counter() - start
        answer = _answer(_relay_id(sent))
        start = time.perf_counter()
        back = core.server_line(answer, **kw)
        spent += time.perf_counter() - start
        assert any(getattr(a, "done", None) == n for a in back), back
    return spent / calls * 1e6


def time_interleaved(calls: int) -> float:
    """µs of core time per round trip, CLIENTS clients with their calls interleaved."""
    core, kw = _ready_core(CLIENTS)
    spent = 0.0
    rounds = max(1, calls // CLIENTS)
    for n in range(1, rounds + 1):
        relay_ids = []
        for cid in range(1, CLIENTS + 1):
            request = _call(n)
            start = time.perf_counter()
            sent = core.client_line(cid, request, **kw)
            spent += time.perf_counter() - start
            relay_ids.append(_relay_id(sent))
        for relay_id in reversed(relay_ids):
            answer = _answer(relay_id)
            start = time.perf_counter()
            core.server_line(answer, **kw)
            spent += time.perf_counter() - start
    assert core.inflight_count() == 0
    return spent / (rounds * CLIENTS) * 1e6


def worker(calls: int, runs: int) -> None:
    import lazyd

    one = [time_one_client(calls) for _ in range(runs)]
    many = [time_interleaved(calls) for _ in range(runs)]
    print(json.dumps({"lazyd": os.path.dirname(lazyd.__file__), "one": one, "interleaved": many}))


def measure(tree: Path, calls: int, runs: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    # This file's worker, whatever the tree holds (an older checkout has no benchmark, or another
    # one): only `lazyd` comes from the tree under measurement.
    code = f"import runpy; runpy.run_path({str(Path(__file__).resolve())!r})['worker']({calls}, {runs})"
    proc = subprocess.run([sys.executable, "-c", code], cwd=tree, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{tree}: the benchmark failed:\n{proc.stderr}")
    figures: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    if Path(figures["lazyd"]).resolve() != (tree / "lazyd").resolve():
        raise SystemExit(f"{tree}: measured the lazyd at {figures['lazyd']} instead of this tree's")
    return figures


def export(rev: str, into: Path) -> Path:
    """The tree of `rev` of this repository."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=20_000, help="round trips per run")
    parser.add_argument("--runs", type=int, default=5, help="runs per figure (median and best are printed)")
    parser.add_argument("--tree", dest="targets", action="append", default=[], type=lambda v: ("tree", v),
                        help="a checkout to measure")
    parser.add_argument("--rev", dest="targets", action="append", type=lambda v: ("rev", v),
                        help="a revision of this repository to measure")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-core-") as tmp:
        trees = [(value, Path(value).resolve() if kind == "tree" else export(value, Path(tmp) / f"rev{i}"))
                 for i, (kind, value) in enumerate(args.targets)] or [(".", REPO)]
        results = [(label, measure(tree, args.calls, args.runs)) for label, tree in trees]
    width = max(14, *(len(label) for label, _ in results))
    print(f"relay core alone: µs of core time per tools/call round trip ({args.calls} calls, {args.runs} runs)")
    print(f"{'':<44}" + "".join(f"{label:>{width}}" for label, _ in results))
    for key, title in (("one", "one client, median"), ("one", "one client, best"),
                       ("interleaved", f"{CLIENTS} clients interleaved, median"),
                       ("interleaved", f"{CLIENTS} clients interleaved, best")):
        pick = statistics.median if title.endswith("median") else min
        print(f"{title:<44}" + "".join(f"{pick(figures[key]):>{width}.2f}" for _, figures in results))


if __name__ == "__main__":
    main()
