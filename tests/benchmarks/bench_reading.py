"""What reading a large line costs, a revision's readers beside this tree's, in one process.

The shim's reading of a client line for its in-flight table (`lazyd.protocol.linepeek.inspect_line`) and
the relay core's reading and id rewrite of a server's answer (`large_result_id` and
`splice_result_id`, else `parse` and `with_id`), timed with `timeit` (best of N, thread CPU not
separated): 1 MiB requests (a plain string with the id first and last, text with escapes) and
answers (a plain string, a listing whose items carry "id" keys). docs/benchmarks.md, "One reading
of a line", has the figures.

    python -m tests.benchmarks.bench_reading --rev 65b5628
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
import timeit
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

from lazyd.protocol import linepeek
from lazyd.core.relay import jsonrpc

REPO = Path(__file__).resolve().parents[2]
MIB = 1 << 20


def _module(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def revision_readers(rev: str, into: Path) -> tuple[Any, Any]:
    """`rev`'s linepeek and jsonrpc, loaded beside this tree's (their own imports of the stdlib
    floor resolve to this tree's, except a largejson module of theirs, loaded first)."""
    for path in ("lazyd/protocol/linepeek.py", "lazyd/core/relay/jsonrpc.py", "lazyd/core/relay/largejson.py"):
        shown = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=REPO, capture_output=True)
        if shown.returncode == 0:
            (into / Path(path).name).write_bytes(shown.stdout)
    if (into / "largejson.py").exists():
        import lazyd.core.relay as relay_package

        largejson = _module("lazyd.core.relay.largejson", into / "largejson.py")
        relay_package.largejson = largejson  # type: ignore[attr-defined]
    return _module("rev_linepeek", into / "linepeek.py"), _module("rev_jsonrpc", into / "jsonrpc.py")


def best_ms(call: Callable[[], object], repeat: int) -> float:
    return min(timeit.repeat(call, number=1, repeat=repeat)) * 1000


def relay_answer(rpc: Any, line: bytes) -> bytes:
    rid = rpc.large_result_id(line)
    if rid is not None:
        spliced: bytes = rpc.splice_result_id(line, rid, 7)
        return spliced
    rewritten: bytes = rpc.with_id(rpc.parse(line), 7)
    return rewritten


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rev", required=True, help="the revision to compare this tree with")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        old_peek, old_rpc = revision_readers(args.rev, Path(tmp))

    def request(text: str, id_first: bool) -> bytes:
        members = {"name": "echo", "arguments": {"text": text}}
        obj = ({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": members} if id_first
               else {"method": "tools/call", "params": members, "jsonrpc": "2.0", "id": 7})
        return json.dumps(obj).encode()

    items = [{"id": i, "title": f"issue {i}", "body": "b" * 200} for i in range(2000)]
    answers = {
        "1 MiB plain result": {"content": [{"type": "text", "text": "y" * MIB}]},
        "listing whose items carry \"id\" keys": {"content": [{"type": "text", "text": "see items"}],
                                                   "structuredContent": {"items": items}},
    }
    print(f"ms, best of {args.repeat}: {args.rev} / this tree")
    print("client line, the shim's inspect_line:")
    for name, line in (("1 MiB plain string, id first", request("y" * MIB, True)),
                       ("1 MiB plain string, id last", request("y" * MIB, False)),
                       ("1 MiB text with escapes", request("line\n" * (MIB // 5), True))):
        print(f"  {name}: {best_ms(lambda: old_peek.inspect_line(line), args.repeat):.3f}"
              f" / {best_ms(lambda: linepeek.inspect_line(line), args.repeat):.3f}")
    print("server answer, the relay core's reading and id rewrite:")
    for name, result in answers.items():
        line = b'{"jsonrpc":"2.0","id":41,"result":' + json.dumps(result).encode() + b"}"
        print(f"  {name} ({len(line) >> 10} KiB): {best_ms(lambda: relay_answer(old_rpc, line), args.repeat):.3f}"
              f" / {best_ms(lambda: relay_answer(jsonrpc, line), args.repeat):.3f}")


if __name__ == "__main__":
    main()
