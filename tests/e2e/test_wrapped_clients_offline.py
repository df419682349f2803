"""GitHub Copilot CLI 1.0.102, Kilo 7.7.7, Continue's cn 1.5.47 and Amp, each with its registration
at its default file as the client itself wrote it (its own `mcp add`; cn has none: its YAML by
hand), wrapped by `lazyctl wrap --client X --check`: the first run starts no server and is served
every listing it asks for exactly as a direct run was, three runs leave at most one server process
(the daemon's child) for the one registration, and unwrap gives the file's bytes back.

Each CLI runs offline in a private network namespace with only loopback (offline_run.py), the
way each can run without an account or a model:

- `copilot -p` with COPILOT_OFFLINE=true and COPILOT_PROVIDER_BASE_URL on a loopback endpoint that
  answers 400 (refused at once; a refused connection is retried for half a minute). It starts its
  MCP servers and lists their tools before it asks the model.
- `kilo mcp list` starts every local server and lists its tools.
- `cn -p` with a model at a loopback port where nothing listens: cn loads its MCP servers, lists
  them, then fails to reach the model.
- `amp mcp doctor` with a dummy AMP_API_KEY and a loopback AMP_URL connects each server and says
  how many tools it has. Amp is also given a registration through its own `amp mcp add NAME --
  lazyd-shim CMD ARGS`, and the one it stores when given a second `--` (Amp keeps what follows the
  last `--`, so the shim is dropped): wrap-status says so.

What a client was served is read from a recording tee (tests/servers/stdio_recorder.py) on the
client's side: in front of the server in the direct run's registration (written by hand at the
default file, then replaced by the client's own), and in front of lazyd-shim once wrapped (the
wrap's `--shim` is a script that runs the tee, then the shim). The server is server-everything,
which lists by the client's capabilities (16 tools to Copilot, which declares `sampling` and
`elicitation`; 13 to a client without them), so a check that spoke for another client would be
caught. One home per client across its steps: Kilo's first run in a fresh home is slow.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import EVERYTHING_JS, SERVERS, UserEnv, everything_command, shim_command, start_daemon, wait_until
from tests.e2e.offline_run import MODEL_URL, REFUSING_URL, offline
from tests.e2e.real_clients_support import cli, project, run, status

pytestmark = pytest.mark.e2e

RUNS = 3
RECORDER = SERVERS / "stdio_recorder.py"
LISTINGS = {"tools/list": "tools", "prompts/list": "prompts", "resources/list": "resources",
            "resources/templates/list": "resourceTemplates"}
SERVER_EXIT_WAIT_S = 30.0


# ---- the clients ---------------------------------------------------------------------------------


def _json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")


def copilot_file(user: UserEnv, argv: list[str] | None = None) -> Path:
    path = Path(user.env["HOME"]) / ".copilot" / "mcp-config.json"
    if argv is not None:
        _json(path, {"mcpServers": {"everything": {"type": "local", "command": argv[0], "args": argv[1:],
                                                   "tools": ["*"]}}})
    return path


def kilo_file(user: UserEnv, argv: list[str] | None = None) -> Path:
    # opencode's layout, where `kilo mcp add` writes it in a fresh home.
    path = Path(user.env["XDG_CONFIG_HOME"]) / "kilo" / "kilo.jsonc"
    if argv is not None:
        _json(path, {"mcp": {"everything": {"type": "local", "command": argv}}})
    return path


CONTINUE_CONFIG = """\
# cn's ~/.continue/config.yaml
name: Offline Assistant
version: 1.0.0
schema: v1
models:
  - name: nowhere
    provider: openai
    model: gpt-4o
    apiBase: {url}
    apiKey: dummy   # nothing listens there
mcpServers:
  - name: everything
    command: {command}
    args:
{args}
"""


def continue_file(user: UserEnv, argv: list[str] | None = None) -> Path:
    path = Path(user.env["HOME"]) / ".continue" / "config.yaml"
    if argv is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        args = "".join(f"      - {json.dumps(arg)}\n" for arg in argv[1:])
        path.write_text(CONTINUE_CONFIG.format(url=REFUSING_URL, command=json.dumps(argv[0]), args=args.rstrip("\n")))
    return path


def amp_file(user: UserEnv, argv: list[str] | None = None) -> Path:
    # Amp's flat dotted key.
    path = Path(user.env["XDG_CONFIG_HOME"]) / "amp" / "settings.json"
    if argv is not None:
        _json(path, {"amp.mcpServers": {"everything": {"command": argv[0], "args": argv[1:]}}})
    return path


@dataclass(frozen=True)
class Client:
    name: str  # `--client`
    words: tuple[str, ...]  # a run, after the CLI
    config: Callable[[UserEnv, list[str] | None], Path]  # its default file; with an argv, written by hand
    mcp_add: bool  # whether it registers a server through its own `mcp add NAME -- CMD ARGS`
    env: Mapping[str, str] = field(default_factory=dict)
    model_log: bool = False  # runs beside offline_run's refusing model endpoint


CLIENTS = {client.name: client for client in (
    Client("copilot", ("-p", "What time is it?", "--allow-all-tools", "--disable-client-telemetry", "--no-auto-update"),
           copilot_file, True, {"COPILOT_OFFLINE": "true", "COPILOT_PROVIDER_BASE_URL": MODEL_URL,
                                "COPILOT_MODEL": "gpt-4o"}, model_log=True),
    Client("kilo", ("mcp", "list"), kilo_file, True),
    Client("continue", ("-p", "What time is it?"), continue_file, False),
    Client("amp", ("mcp", "doctor"), amp_file, True, {"AMP_API_KEY": "dummy", "AMP_URL": REFUSING_URL.rsplit("/", 1)[0]}),
)}
CLI_NAME = {"continue": "cn"}


def run_client(user: UserEnv, client: Client, *words: str) -> str:
    """One run of the client offline (its run's words, or `words`); its output."""
    model_log = user.root / "model.log" if client.model_log else None
    argv = [*cli(CLI_NAME.get(client.name, client.name)), *(words or client.words)]
    done = run(user, offline(argv, model_log), **client.env)
    return done.stdout + done.stderr


def lazyctl(user: UserEnv, client: Client, *args: str) -> dict[str, Any]:
    """`lazyctl ARGS --json` in the client's environment (a check rebuilds from it what the client
    gives a server), from the project the client runs in."""
    done = run(user, [sys.executable, "-m", "lazyd.ctl.main", args[0], "--json", *args[1:]], **client.env)
    assert done.returncode == 0, done.stdout + done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


# ---- what a client was served --------------------------------------------------------------------


def served(log: Path) -> dict[str, list[str]]:
    """What the client was answered for each listing it asked for (the last answer of each), by
    item name, from the recorder's log."""
    asked: dict[str, str] = {}
    out: dict[str, list[str]] = {}
    for row in map(json.loads, log.read_text().splitlines()):
        msg = json.loads(row["line"])
        if row["to"] == "server" and msg.get("method") in LISTINGS and "id" in msg:
            asked[json.dumps(msg["id"])] = msg["method"]
        elif row["to"] == "client" and json.dumps(msg.get("id")) in asked and "result" in msg:
            method = asked.pop(json.dumps(msg["id"]))
            out[method] = sorted(item.get("name") or item.get("uriTemplate") or item.get("uri")
                                 for item in msg["result"][LISTINGS[method]])
    return out


def client_name(log: Path) -> str:
    """The clientInfo.name of the first initialize in a recorder's log."""
    line = next(r["line"] for r in map(json.loads, log.read_text().splitlines()) if '"initialize"' in r["line"])
    name: str = json.loads(line)["params"]["clientInfo"]["name"]
    return name


def recorded(log: Path, server: list[str]) -> list[str]:
    return [sys.executable, str(RECORDER), str(log), *server]


def recording_shim(user: UserEnv, log: Path) -> Path:
    """An executable that runs lazyd-shim behind the recorder (a `--shim` for wrap: the client
    starts it as it would start the shim). Python, not a shell, so the environment passes as is."""
    path = user.root / "bin" / "lazyd-shim-recorded"
    path.parent.mkdir(exist_ok=True)
    argv = [sys.executable, str(RECORDER), str(log), shim_command()]
    path.write_text(f"#!{sys.executable}\nimport os, sys\nargv = {argv!r}\nos.execv(argv[0], argv + sys.argv[1:])\n")
    path.chmod(0o755)
    return path


def direct_listings(user: UserEnv, client: Client, server: list[str], needle: str) -> dict[str, list[str]]:
    """What a direct run of the client is served (its registration by hand at the default file,
    the recorder in front of the server); the file is gone again after it."""
    log = user.root / "direct.jsonl"
    config = client.config(user, recorded(log, server))
    out = run_client(user, client)
    listings = served(log)
    assert "tools/list" in listings, out
    wait_until(lambda: not user.server_pids(needle), SERVER_EXIT_WAIT_S, "the direct run's server to exit")
    config.unlink()
    return listings


# ---- the tests -----------------------------------------------------------------------------------


def copilot_log(user: UserEnv) -> str:
    """The end of Copilot's log of its last run (when it is Copilot), for a failure's message."""
    logs = sorted((Path(user.env["HOME"]) / ".copilot" / "logs").glob("*.log"), key=lambda p: p.stat().st_mtime)
    return "".join(logs[-1].read_text(errors="replace").splitlines(keepends=True)[-30:]) if logs else ""


def handed_off(user: UserEnv) -> int:
    """Sessions the daemon took over from a shim (one line each in its log)."""
    return (user.state_dir / "lazyd.log").read_text(errors="replace").count("handed off the client's")


def parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


@pytest.mark.parametrize("name", list(CLIENTS))
def test_wrapped_with_check_at_its_default_file_the_first_run_starts_nothing_and_lists_what_direct_lists(
        user_env: UserEnv, name: str) -> None:
    client = CLIENTS[name]
    daemon = start_daemon(user_env)
    server = everything_command()
    direct = direct_listings(user_env, client, server, str(EVERYTHING_JS))

    # The registration as the client writes it.
    config = client.config(user_env, None if client.mcp_add else server)
    if client.mcp_add:
        run_client(user_env, client, "mcp", "add", "everything", "--", *server)
    original = config.read_bytes()
    assert str(EVERYTHING_JS).encode() in original

    log = user_env.root / "through.jsonl"
    shim = recording_shim(user_env, log)
    wrapped = lazyctl(user_env, client, "wrap", "--client", name, "--all", "--check", "--shim", str(shim),
                      "--env", "LAZYD_CHECK_LINGER=10m")
    assert [(r["server"], r["action"]) for r in wrapped["results"]] == [("everything", "wrapped")], wrapped
    assert [c["ok"] for c in wrapped["checks"]] == [True], wrapped["checks"]

    for number in range(1, RUNS + 1):
        out = run_client(user_env, client)
        if number == 1:
            user_env.assert_nothing_started(str(EVERYTHING_JS))  # sleeping, and no process
        assert served(log) == direct, out + copilot_log(user_env)
        if name == "amp":  # Amp says what it got, too
            assert f"everything (user settings): connected ({len(direct['tools/list'])} tools" in out, out
        assert handed_off(user_env) == number  # each run was a session of the daemon
        pids = user_env.server_pids(str(EVERYTHING_JS))
        assert len(pids) <= 1 and all(parent(pid) == daemon.proc.pid for pid in pids), pids
        log.rename(log.with_name(f"run{number}.jsonl"))
    assert len(status(user_env)) == 1  # the check's registration is the client's: one server
    if name == "copilot":
        assert len(direct["tools/list"]) == 16  # what its sampling and elicitation add
        # explain names the git setting Copilot appends as git reads it: a setting's name, and a
        # value that may be a secret.
        (row,) = status(user_env)
        (explained,) = lazyctl(user_env, client, "explain", row["name"])["registrations"]
        classes = explained["env_classes"]
        assert (classes["GIT_CONFIG_COUNT"], classes["GIT_CONFIG_KEY_0"], classes["GIT_CONFIG_VALUE_0"]) == \
            ("setting", "setting", "credential"), classes
    # From now on a check uses what the daemon learned from the client's sessions (the record
    # comes first; the built-in profile was the first guess).
    again = lazyctl(user_env, client, "check", "--client", name, "--cwd", str(project(user_env)), "--", *server)
    assert again["handshake"] == f"learned from a {client_name(user_env.root / 'run1.jsonl')} session", again

    # Kilo's first run in a home adds `"permission": {"bash": "allow"}` to its config: the direct
    # run's, so the file `kilo mcp add` wrote stays as it wrote it.
    lazyctl(user_env, client, "unwrap", "--client", name, "--all")
    assert config.read_bytes() == original

    if name == "amp":
        amp_registers_through_its_own_mcp_add(user_env, client, server)


def amp_registers_through_its_own_mcp_add(user: UserEnv, client: Client, server: list[str]) -> None:
    """`amp mcp add NAME -- lazyd-shim CMD ARGS` keeps the shim; with the shim's `--` Amp keeps
    only what follows it, so the server would run directly: wrap-status says so."""
    lazyctl(user, client, "wrap", "--client", "amp", "--all")  # the twin wrap-status names
    other = user.root / "project" / "other-settings.json"
    amp = ("--settings-file", str(other), "mcp", "add")
    run_client(user, client, *amp, "clock", "--", "lazyd-shim", *server)
    run_client(user, client, *amp, "dropped", "--", "lazyd-shim", "--", *server)
    stored = json.loads(other.read_text())["amp.mcpServers"]
    assert (stored["clock"]["command"], stored["dropped"]["command"]) == ("lazyd-shim", server[0]), stored
    rows = {row["server"]: row for row in
            lazyctl(user, client, "wrap-status", "--client", "amp", "--file", str(other))["servers"]}
    assert rows["clock"]["wrapped"] and not rows["clock"]["without_shim"]
    assert rows["dropped"]["without_shim"] and not rows["dropped"]["wrapped"]
    assert "registered without lazyd-shim, though Amp's everything" in rows["dropped"]["note"]


def test_after_a_copilot_check_a_dual_era_servers_first_copilot_run_in_the_stateless_era_starts_nothing(
        user_env: UserEnv) -> None:
    # Copilot probes server/discover first and, where a server offers 2026-07-28, speaks the
    # stateless era (subscriptions/listen, then its listings, each with its capabilities in `_meta`):
    # the check probes with them, so the results it records are the ones Copilot asks for.
    client = CLIENTS["copilot"]
    server = [sys.executable, str(SERVERS / "dual_era_server.py")]
    direct = direct_listings(user_env, client, server, "dual_era_server")
    assert "subscriptions/listen" in (user_env.root / "direct.jsonl").read_text()

    check = lazyctl(user_env, client, "check", "--client", "copilot", "--cwd", str(project(user_env)), "--", *server)
    assert check["discover"]["kind"] == "result", check
    log = user_env.root / "through.jsonl"
    client.config(user_env, recorded(log, [shim_command(), *server]))
    out = run_client(user_env, client)
    user_env.assert_nothing_started("dual_era_server")
    assert served(log) == direct, out

