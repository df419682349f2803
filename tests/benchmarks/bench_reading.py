"""What reading a large line costs, a revision's readers beside this tree's, in one process.

The shim's reading of a client line for its in-flight table (`lazyd.protocol.linepeek.inspect_line`),
the relay core's reading and id rewrite of a request (`parse`, `with_id`) and of a server's answer
(the large-result splice, else `parse` and `with_id`), timed with `timeit`
(best of N, thread CPU not separated): 1 MiB requests (a plain string with the id first and last,
text with escapes) and answers (a plain string, a listing whose items carry "id" keys).
docs/benchmarks.md, "One reading of a line", has the figures.

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
    """`rev`'s linepeek and jsonrpc, loaded beside this tree's, each importing `rev`'s jsonline
    (this tree's is put back after)."""
    for path in ("lazyd/protocol/linepeek.py", "lazyd/core/relay/jsonrpc.py", "lazyd/protocol/jsonline.py"):
        shown = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=REPO, capture_output=True, check=True)
        (into / Path(path).name).write_bytes(shown.stdout)
    import lazyd.protocol as protocol_package

    ours = protocol_package.jsonline
    theirs = _module("lazyd.protocol.jsonline", into / "jsonline.py")
    protocol_package.jsonline = theirs
    try:
        return _module("rev_linepeek", into / "linepeek.py"), _module("rev_jsonrpc", into / "jsonrpc.py")
    finally:
        sys.modules["lazyd.protocol.jsonline"] = protocol_package.jsonline = ours


def best_ms(call: Callable[[], object], repeat: int) -> float:
    return min(timeit.repeat(call, number=1, repeat=repeat)) * 1000


def relay_answer(rpc: Any, line: bytes) -> bytes:
    rid = rpc.large_result_id(line)
    if rid is not None:
        spliced: bytes | None = (rpc.spliced_id(line, b"%d" % rid, b"7") if hasattr(rpc, "spliced_id")
                                 else rpc.splice_result_id(line, rid, 7))
        if spliced is not None:
            return spliced
    rewritten: bytes = rpc.with_id(rpc.parse(line), 7)
    return rewritten


def relay_request(line: bytes) -> bytes:
    msg = jsonrpc.parse(line)
    assert isinstance(msg, jsonrpc.Message)
    return jsonrpc.with_id(msg, 5)


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
    print("client line, the relay core's reading and id rewrite:")
    for name, line in (("1 MiB plain string, id first", request("y" * MIB, True)),
                       ("1 MiB plain string, id last", request("y" * MIB, False))):
        print(f"  {name}: {best_ms(lambda: old_rpc.with_id(old_rpc.parse(line), 5), args.repeat):.3f}"
              f" / {best_ms(lambda: relay_request(line), args.repeat):.3f}")
    print("server answer, the relay core's reading and id rewrite:")
    for name, result in answers.items():
        line = b'{"jsonrpc":"2.0","id":41,"result":' + json.dumps(result).encode() + b"}"
        print(f"  {name} ({len(line) >> 10} KiB): {best_ms(lambda: relay_answer(old_rpc, line), args.repeat):.3f}"
              f" / {best_ms(lambda: relay_answer(jsonrpc, line), args.repeat):.3f}")


if __name__ == "__main__":
    main()
