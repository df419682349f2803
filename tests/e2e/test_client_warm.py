"""`lazyctl check --client X` warms what client X really sends, for the clients seen with a tee:
GitHub Copilot CLI 1.0.102, Kilo 7.7.7, Continue cn 1.5.47 and Amp (tests/servers/package.json).

Each real CLI runs offline in a private network namespace (tests/e2e/offline_run.py; nothing but
loopback is reachable) against server-everything, with a recording tee (tests/servers/stdio_recorder.py)
as its registration's command: once in front of the server directly, once in front of
`lazyd-shim`. After `lazyctl check --client X` (its probe, handshake, capabilities and environment,
from the built-in profile: no session of X was seen yet), X's first session through lazyd starts no
server and is served every listing it asks for exactly as the direct run was. Copilot declares
`sampling` and `elicitation`, for which server-everything lists 16 tools, not the 13 a check that
speaks for no client records.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import EVERYTHING_JS, SERVERS, UserEnv, everything_command, shim_command, wait_until

pytestmark = pytest.mark.e2e

NODE_MODULES = SERVERS / "node_modules"
RECORDER = SERVERS / "stdio_recorder.py"
OFFLINE = Path(__file__).with_name("offline_run.py")
CLI_TIMEOUT_S = 120.0  # a run takes 2-5 s; the bound is reached only when broken
LISTINGS = {"tools/list": "tools", "prompts/list": "prompts", "resources/list": "resources",
            "resources/templates/list": "resourceTemplates"}
REFUSING_PORT = "8555"  # inside the test's own network namespace


@dataclass(frozen=True)
class Client:
    profile: str  # `check --client`
    binary: Path
    args: tuple[str, ...]
    write_config: Callable[[UserEnv, list[str]], list[str]]  # -> extra args naming the config
    env: dict[str, str] = field(default_factory=dict)
    refuse_http: bool = False


def _json(path: Path, data: dict[str, Any]) -> list[str]:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2))
    return []


def copilot_config(user: UserEnv, argv: list[str]) -> list[str]:
    # ~/.copilot/mcp-config.json, Copilot's user config.
    return _json(Path(user.env["HOME"]) / ".copilot" / "mcp-config.json", {"mcpServers": {
        "everything": {"type": "local", "command": argv[0], "args": argv[1:], "tools": ["*"]}}})


def kilo_config(user: UserEnv, argv: list[str]) -> list[str]:
    # opencode's layout, at $XDG_CONFIG_HOME/kilo/kilo.json.
    return _json(Path(user.env["XDG_CONFIG_HOME"]) / "kilo" / "kilo.json",
                 {"mcp": {"everything": {"type": "local", "command": argv}}})


def cn_config(user: UserEnv, argv: list[str]) -> list[str]:
    # A model at a loopback port nothing listens on: `cn -p` lists its servers, then fails its call.
    path = user.root / "continue.yaml"
    path.write_text("name: test\nversion: 0.0.1\nschema: v1\nmodels:\n  - name: local\n    provider: openai\n"
                    "    model: gpt-4\n    apiBase: http://127.0.0.1:9/v1\n    apiKey: dummy\nmcpServers:\n"
                    f"  - name: everything\n    command: {json.dumps(argv[0])}\n    args: {json.dumps(argv[1:])}\n")
    return ["--config", str(path)]


def amp_config(user: UserEnv, argv: list[str]) -> list[str]:
    # Amp's flat dotted key, at $XDG_CONFIG_HOME/amp/settings.json.
    return _json(Path(user.env["XDG_CONFIG_HOME"]) / "amp" / "settings.json",
                 {"amp.mcpServers": {"everything": {"command": argv[0], "args": argv[1:]}}})


CLIENTS = {
    "copilot": Client("copilot", NODE_MODULES / ".bin" / "copilot", ("-p", "say hi", "--allow-all-tools"),
                      copilot_config, {"COPILOT_OFFLINE": "true", "COPILOT_MODEL": "gpt-4",
                                       "COPILOT_PROVIDER_BASE_URL": f"http://127.0.0.1:{REFUSING_PORT}/v1"},
                      refuse_http=True),
    "kilo": Client("kilo", NODE_MODULES / "@kilocode" / "cli-linux-x64" / "bin" / "kilo", ("mcp", "list"), kilo_config),
    "continue": Client("continue", NODE_MODULES / ".bin" / "cn", ("-p", "say hi"), cn_config),
    "amp": Client("amp", NODE_MODULES / "@ampcode" / "cli-linux-x64" / "amp", ("mcp", "doctor"), amp_config,
                  {"AMP_API_KEY": "dummy-key", "AMP_URL": "http://127.0.0.1:9"}),
}


def project(user: UserEnv) -> Path:
    path = user.root / "project"
    path.mkdir(exist_ok=True)
    return path


def env_of(user: UserEnv, client: Client) -> dict[str, str]:
    return {**user.env, "SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt", **client.env}


def run_client(user: UserEnv, client: Client, registration: list[str]) -> subprocess.CompletedProcess[str]:
    extra = client.write_config(user, registration)
    offline = ["unshare", "-n", sys.executable, str(OFFLINE)]
    offline += ["--refuse-http", REFUSING_PORT] if client.refuse_http else []
    done = subprocess.run([*offline, "--", str(client.binary), *client.args, *extra], env=env_of(user, client),
                          cwd=project(user), capture_output=True, text=True, timeout=CLI_TIMEOUT_S,
                          stdin=subprocess.DEVNULL)
    return done


def served(log: Path) -> dict[str, list[str]]:
    """What the client was answered for each listing it asked for (the last answer of each), by
    item name, from the recorder's log."""
    asked: dict[object, str] = {}
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


def lazyctl(user: UserEnv, client: Client, *args: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "lazyd.ctl.main", *args], env=env_of(user, client), cwd=project(user),
                          capture_output=True, text=True, timeout=CLI_TIMEOUT_S, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


@pytest.mark.parametrize("name", list(CLIENTS))
def test_after_a_check_with_the_clients_profile_its_first_run_starts_nothing_and_lists_what_direct_lists(
        user_env: UserEnv, name: str) -> None:
    client = CLIENTS[name]
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.fail("unshare and ip are needed to run the clients offline")
    assert client.binary.exists(), f"{client.binary} is missing: run `npm ci --prefix tests/servers`"
    server = everything_command()

    direct_log = user_env.root / "direct.jsonl"
    direct = run_client(user_env, client, [sys.executable, str(RECORDER), str(direct_log), *server])
    direct_listings = served(direct_log)
    assert "tools/list" in direct_listings, direct.stdout + direct.stderr
    wait_until(lambda: not user_env.server_pids(str(EVERYTHING_JS)), 30, "the direct run's server to exit")

    check = lazyctl(user_env, client, "check", "--client", client.profile, "--json", "--cwd", str(project(user_env)),
                    "--", *server)
    assert check["handshake"].startswith("built in, captured from"), check

    lazyd_log = user_env.root / "lazyd.jsonl"
    through = run_client(user_env, client, [sys.executable, str(RECORDER), str(lazyd_log), shim_command(), *server])
    user_env.assert_nothing_started(str(EVERYTHING_JS))
    assert served(lazyd_log) == direct_listings, through.stdout + through.stderr
    # It was the check's own registration: the check rebuilt the environment the client gives.
    (registration,) = lazyctl(user_env, client, "status", "--json")["servers"]
    if name == "copilot":
        # explain names the git setting Copilot appends as git reads it: a setting's name, and
        # a value that may be a secret.
        (explained,) = lazyctl(user_env, client, "explain", registration["name"], "--json")["registrations"]
        classes = explained["env_classes"]
        assert (classes["GIT_CONFIG_COUNT"], classes["GIT_CONFIG_KEY_0"], classes["GIT_CONFIG_VALUE_0"]) == \
            ("setting", "setting", "credential"), classes
    # From now on a check uses what the daemon learned from that session (the record comes first;
    # the built-in profile was the first guess).
    again = lazyctl(user_env, client, "check", "--client", client.profile, "--json", "--cwd", str(project(user_env)),
                    "--", *server)
    client_name = json.loads(next(r["line"] for r in map(json.loads, lazyd_log.read_text().splitlines())
                                  if '"initialize"' in r["line"]))["params"]["clientInfo"]["name"]
    assert again["handshake"] == f"learned from a {client_name} session", again
    if name == "copilot":
        assert len(direct_listings["tools/list"]) == 16  # what its sampling and elicitation add
    if name == "amp":  # Amp says what it got, too
        assert f"connected ({len(direct_listings['tools/list'])} tools" in through.stdout, through.stdout


def test_after_a_copilot_check_a_dual_era_servers_first_copilot_run_in_the_stateless_era_starts_nothing(
        user_env: UserEnv) -> None:
    # Copilot probes server/discover first and, where a server offers 2026-07-28, speaks the
    # stateless era (subscriptions/listen, then its listings, each with its capabilities in `_meta`):
    # the check probes with them, so the results it records are the ones Copilot asks for.
    client = CLIENTS["copilot"]
    server = [sys.executable, str(SERVERS / "dual_era_server.py")]
    direct_log = user_env.root / "direct.jsonl"
    run_client(user_env, client, [sys.executable, str(RECORDER), str(direct_log), *server])
    direct_listings = served(direct_log)
    assert "tools/list" in direct_listings and "subscriptions/listen" in direct_log.read_text()
    wait_until(lambda: not user_env.server_pids("dual_era_server"), 30, "the direct run's server to exit")

    check = lazyctl(user_env, client, "check", "--client", "copilot", "--json", "--cwd", str(project(user_env)),
                    "--", *server)
    assert check["discover"]["kind"] == "result", check
    lazyd_log = user_env.root / "lazyd.jsonl"
    through = run_client(user_env, client, [sys.executable, str(RECORDER), str(lazyd_log), shim_command(), *server])
    user_env.assert_nothing_started("dual_era_server")
    assert served(lazyd_log) == direct_listings, through.stdout + through.stderr
