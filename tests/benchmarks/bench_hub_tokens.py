"""Issue 9's figures: what tool definitions cost a model's context, registered directly vs through the hub.

    python -m tests.benchmarks.bench_hub_tokens

For each set of real servers (server-everything, mcp-server-time, the fixture server, and all
three together) this prints the size of what a client puts in the model's context for them:

- directly: every server's `tools/list` (the tools array as compact JSON: names, descriptions,
  input schemas) plus its `instructions`, each server registered on its own;
- through the hub: the hub's own `tools/list` (six meta-tools) plus its `instructions`, whatever
  the number of servers behind it.

Tokens are approximated as bytes / 4 (a common rule of thumb for English and JSON with
BPE tokenizers; real counts vary by model by roughly +-25 %). The hub is not free: a model that
uses a tool through it first reads a search answer and a schema answer, so the script also
prints what one such lookup costs, and the saving is shown negative where the hub costs more
(a server with few small tools).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.benchmarks.common import EVERYTHING, FIXTURE, INIT_PARAMS, LineClient, isolated_daemon, shim_path

BYTES_PER_TOKEN = 4  # rule of thumb; see the module docstring
TIME = [sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"]
SERVERS = {"everything": EVERYTHING, "time": TIME, "fixture": FIXTURE}
SETS = [["everything"], ["time"], ["fixture"], ["everything", "time", "fixture"]]
# One realistic lookup per server: what a model searches for, then the schema it reads.
LOOKUPS = {"everything": ("add two numbers", "get-sum"), "time": ("convert timezone", "convert_time"),
           "fixture": ("echo text", "echo")}


def compact(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def context_bytes(init: dict[str, Any], tools: list[Any]) -> int:
    """What a client shows the model for one registration: its tool definitions and instructions."""
    instructions = init.get("instructions")
    return compact(tools) + (len(instructions.encode()) if isinstance(instructions, str) else 0)


def direct_bytes(argv: list[str], env: dict[str, str]) -> int:
    client = LineClient(argv, env)
    try:
        init = client.request("initialize", INIT_PARAMS)["result"]
        client.send("notifications/initialized", notify=True)
        tools = client.request("tools/list")["result"]["tools"]
        return context_bytes(init, tools)
    finally:
        client.close()


def meta_call(client: LineClient, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    reply = client.request("tools/call", {"name": name, "arguments": arguments})
    result: dict[str, Any] = reply["result"]
    if result.get("isError"):
        raise SystemExit(f"hub {name} failed: {result['content'][0]['text']}")
    return result


def write_config(env: dict[str, str]) -> None:
    path = Path(env["XDG_CONFIG_HOME"]) / "lazyd" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = []
    for name, argv in SERVERS.items():
        lines += [f"[servers.{name}]", f"command = {json.dumps(argv[0])}", f"args = {json.dumps(argv[1:])}", ""]
    # The hub's wake_server and sleep_server ask the user by default; this client cannot be asked.
    lines += ["[policy]", 'rules = { "lazyd.*" = "allow" }', ""]
    path.write_text("\n".join(lines))
    path.chmod(0o600)
    done = subprocess.run([sys.executable, "-m", "lazyd.ctl.main", "reload"], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"lazyctl reload failed: {done.stderr.strip()}")


def hub_figures(env: dict[str, str], names: list[str]) -> tuple[int, dict[str, int]]:
    """(context bytes of a hub limited to `names`, bytes of one lookup per server)."""
    client = LineClient([shim_path(), "--hub", "--servers", ",".join(names)], env)
    try:
        init = client.request("initialize", INIT_PARAMS)["result"]
        client.send("notifications/initialized", notify=True)
        tools = client.request("tools/list")["result"]["tools"]
        lookups = {}
        for name in names:
            query, tool = LOOKUPS[name]
            found = meta_call(client, "search_tools", {"query": query, "limit": 5})
            schema = meta_call(client, "get_tool_schema", {"server": name, "tool": tool})
            lookups[name] = compact(found["content"]) + compact(schema["content"])
        return context_bytes(init, tools), lookups
    finally:
        client.close()


def warm(env: dict[str, str]) -> None:
    """Start every server once through the hub (fills their caches), then put them to sleep."""
    client = LineClient([shim_path(), "--hub"], env)
    try:
        client.handshake()
        for name in SERVERS:
            meta_call(client, "wake_server", {"server": name})
            meta_call(client, "sleep_server", {"server": name})
    finally:
        client.close()


def tokens(size: int) -> int:
    return round(size / BYTES_PER_TOKEN)


def main() -> None:
    with isolated_daemon() as env:
        env = {**env, "LANG": "C.UTF-8"}
        os.environ.setdefault("LANG", "C.UTF-8")
        write_config(env)
        warm(env)
        direct = {name: direct_bytes(argv, env) for name, argv in SERVERS.items()}
        print(f"{'servers':<28} {'direct':>16} {'hub':>16} {'saving':>16}   one lookup via hub")
        for names in SETS:
            hub, lookups = hub_figures(env, names)
            plain = sum(direct[n] for n in names)
            saving = plain - hub
            lookup = round(sum(lookups.values()) / len(lookups))
            print(f"{' + '.join(names):<28} {plain:>7} B {tokens(plain):>5} t {hub:>7} B {tokens(hub):>5} t "
                  f"{saving:>+7} B {tokens(saving):>+5} t   ~{lookup} B ~{tokens(lookup)} t")
        print(f"\ntokens ~ bytes / {BYTES_PER_TOKEN}. 'direct' = tools/list + instructions of each server; "
              "'hub' = the hub's own (constant);")
        print("'one lookup' = a search_tools answer plus a get_tool_schema answer, paid each time the model "
              "looks a tool up.")


if __name__ == "__main__":
    main()
