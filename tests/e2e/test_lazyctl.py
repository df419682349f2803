"""lazyctl against a real daemon with real servers (issue 5): every subcommand, both output modes.

Testing policy: lazyctl runs as a real subprocess (`python -m lazyd.ctl.main`) against a real
daemon in an isolated user environment; servers are the fixture server, reached through real
shims and the official SDK client where a session is needed. "Started nothing" and "stopped" are
read from /proc. Exit statuses are the contract: 0 ok, 1 failed, 2 usage, 3 not running; every
failure is one line on stderr, and with --json one JSON document on stdout.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
from mcp.types import TextContent

from lazyd.host import procfs
from lazyd.ctl.main import main as ctl_main
from tests.conftest import FIXTURE_SERVER, Daemon, UserEnv, shim_session, start_daemon, wait_until
from tests.e2e.lazyctl_support import STEP_TIMEOUT_S, lazyctl, shim_env

pytestmark = pytest.mark.e2e

SERVER = [sys.executable, str(FIXTURE_SERVER)]
PAGE_SIZE = 3  # the fixture has 10 tools: 4 pages, so "every page" is visible in the report
SUBCOMMANDS = [("status",), ("wake", "x"), ("sleep", "x"), ("logs", "x"), ("check", "x"),
               ("explain", "x"), ("reload",), ("stop",)]


async def tool_text(session: Any, name: str, arguments: dict[str, Any]) -> str:
    """The text of a tool result's first content block (the fixture's tools all answer text)."""
    result = await session.call_tool(name, arguments)
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


def as_json(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.stdout, done.stderr
    return json.loads(done.stdout)


def failed_with(done: subprocess.CompletedProcess[str], code: int, words: str) -> None:
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    assert done.stderr.startswith("lazyctl") and done.stderr.count("\n") == 1, done.stderr
    assert words in done.stderr


def fixture_pids(user: UserEnv) -> list[int]:
    """Live fixture servers of this test's user (shims and the daemon, which name it too, excluded)."""
    return user.server_pids(str(FIXTURE_SERVER))


def write_config(user: UserEnv, text: str) -> None:
    user.config_file.parent.mkdir(parents=True, exist_ok=True)
    user.config_file.write_text(text)
    os.chmod(user.config_file, 0o600)


def named(name: str, *, env: dict[str, str] | None = None, command: list[str] = SERVER, extra: str = "") -> str:
    table = ", ".join(f'{k} = "{v}"' for k, v in (env or {}).items())
    args = ", ".join(json.dumps(a) for a in command[1:])
    return f'[servers.{name}]\ncommand = "{command[0]}"\nargs = [{args}]\nenv = {{ {table} }}\n{extra}\n'


def stderr_script(tmp_path: Path, lines: int) -> Path:
    """A server that writes numbered stderr lines, then becomes the fixture server."""
    script = tmp_path / "noisy.sh"
    script.write_text(f'#!/bin/sh\nfor i in $(seq 1 {lines}); do echo "noisy line $i" >&2; done\n'
                      f'exec "{sys.executable}" "{FIXTURE_SERVER}"\n')
    script.chmod(0o755)
    return script


# ---- not running, usage, help -------------------------------------------------------------------


def in_process(capsys: pytest.CaptureFixture[str], *words: str) -> subprocess.CompletedProcess[str]:
    """lazyctl's main() run in this process: the same code path, without an interpreter start per
    case (these tables hold forty cases; none of them needs a daemon)."""
    try:
        code = ctl_main(list(words))
    except SystemExit as exc:  # argparse's own exits: --help and usage errors
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(["lazyctl", *words], code, out, err)


@pytest.mark.parametrize("words", SUBCOMMANDS, ids=lambda w: w[0])
@pytest.mark.parametrize("mode", ["human", "json"])
def test_every_subcommand_says_lazyd_is_not_running_and_exits_3(
    user_env: UserEnv, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    words: tuple[str, ...], mode: str
) -> None:
    # `check` starts a daemon when none runs, as a shim does (test_check_autostart.py), unless
    # told not to; every other subcommand only reports.
    monkeypatch.setenv("LAZYD_NO_AUTOSTART", "1")
    done = in_process(capsys, "--socket", str(user_env.socket), *words, *(["--json"] if mode == "json" else []))
    failed_with(done, 3, "lazyd is not running")
    if mode == "json":
        assert as_json(done)["error"].startswith("lazyd is not running")
    else:
        assert done.stdout == ""


def test_lazyctl_runs_as_a_program_and_says_when_lazyd_is_not_running(user_env: UserEnv) -> None:
    failed_with(lazyctl(user_env, "status"), 3, f"lazyd is not running (no daemon listens on {user_env.socket})")


@pytest.mark.parametrize(
    ("words", "message"),
    [((), "usage"),
     (("frobnicate",), "invalid choice"),
     (("status", "--", "x"), "takes no command after `--`"),
     (("check",), "exactly one of"),
     (("check", "a", "--", "cmd"), "exactly one of"),
     (("check", "--"), "no command after `--`"),
     (("check", "x", "--initialize-json", "{bad"), "holds no initialize params"),
     (("check", "x", "--initialize-json", '{"capabilities": {}}'), "protocolVersion"),
     (("check", "x", "--initialize-json", "@/nonexistent/init.json"), "cannot read"),
     (("logs", "x", "-n", "-1"), "-n must be"),
     (("wake",), "required"),
     (("explain",), "one or two registrations"),
     (("explain", "a", "b", "c"), "one or two registrations"),
     (("systemd", "enable"), "invalid choice")],
)
def test_bad_usage_is_one_line_on_stderr_and_exit_2(
    capsys: pytest.CaptureFixture[str], words: tuple[str, ...], message: str
) -> None:
    done = in_process(capsys, "--socket", "/nonexistent/lazyd.sock", *words)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert message in done.stderr
    if words:
        assert done.stderr.count("\n") == 1, done.stderr


@pytest.mark.parametrize("words", [(), *((w[0],) for w in SUBCOMMANDS), ("systemd",)], ids=lambda w: w[0] if w else "lazyctl")
def test_every_subcommand_has_help(capsys: pytest.CaptureFixture[str], words: tuple[str, ...]) -> None:
    done = in_process(capsys, *words, "--help")
    assert done.returncode == 0
    assert done.stdout.startswith(f"usage: lazyctl {' '.join(words)}".rstrip())
    assert "--json" in done.stdout or not words


# ---- status, wake, sleep -------------------------------------------------------------------------


async def test_status_shows_a_running_server_with_clients_memory_and_tools_then_a_summary(user_env: UserEnv) -> None:
    write_config(user_env, named("idle"))
    start_daemon(user_env)
    with trio.fail_after(STEP_TIMEOUT_S):
        async with shim_session(user_env, SERVER) as session:
            pid = int(await tool_text(session, "pid", {}))
            done = await trio.to_thread.run_sync(lazyctl, user_env, "status", "--json")
            human = await trio.to_thread.run_sync(lazyctl, user_env, "status")
    assert done.returncode == 0, done.stderr
    rows = {row["name"]: row for row in as_json(done)["servers"]}
    assert set(rows) >= {"idle"} and len(rows) == 2
    (name,) = set(rows) - {"idle"}
    row = rows[name]
    assert (row["state"], row["pid"], row["clients"], row["listings"]["tools"]) == ("running", pid, 1, 10)
    assert row["processes"] == 1 and row["memory_bytes"] > 1024 * 1024
    assert rows["idle"]["state"] == "sleeping" and rows["idle"]["memory_bytes"] is None
    lines = human.stdout.splitlines()
    assert human.returncode == 0 and lines[0].startswith("lazyd running (pid ")
    assert lines[1].split()[:2] == ["NAME", "STATE"] and "LAST ERROR" in lines[1]
    # Columns are two or more spaces apart; a cell ("15.1 MiB") may hold a single space.
    ours = re.split(r"\s{2,}", next(line for line in lines if line.startswith(name)))
    assert ours[1:4] == ["running", str(pid), "handshake"] and ours[5] == "1" and ours[6].endswith("MiB") and ours[9] == "10"
    assert lines[-1].startswith("2 servers: 1 running, 1 sleeping, 0 failed; memory ") and "MiB" in lines[-1]


def test_status_of_named_servers_only_and_of_an_unknown_name(daemon: Daemon) -> None:
    user = daemon.user
    only = lazyctl(user, "status", "--json")
    assert only.returncode == 0 and as_json(only)["servers"] == []
    assert "no servers registered yet" in lazyctl(user, "status").stdout
    for mode in ([], ["--json"]):
        failed_with(lazyctl(user, "status", "ghost", *mode), 1, "no server named 'ghost'")


def test_wake_starts_a_named_server_and_sleep_stops_its_whole_process_group(user_env: UserEnv) -> None:
    write_config(user_env, named("kids", env={"FIXTURE_GRANDCHILDREN": "2"}))
    start_daemon(user_env)
    woken = lazyctl(user_env, "wake", "kids")
    assert woken.returncode == 0, woken.stderr
    pid = int(woken.stdout.split("(pid ")[1].rstrip(")\n"))
    assert woken.stdout == f"kids running (pid {pid})\n"
    status = as_json(lazyctl(user_env, "status", "kids", "--json"))["servers"][0]
    assert status["pid"] == pid and status["processes"] == 3  # the server and its two grandchildren
    assert len(_group_members(pid)) == 3
    again = lazyctl(user_env, "wake", "kids", "--json")
    assert again.returncode == 0 and as_json(again)["pid"] == pid  # already running: nothing new
    slept = lazyctl(user_env, "sleep", "kids", "--json")
    assert slept.returncode == 0 and as_json(slept)["state"] == "sleeping"
    assert _group_members(pid) == []  # sleep answers once the ladder is done, grandchildren included
    assert lazyctl(user_env, "sleep", "kids").stdout == "kids sleeping\n"


def _group_members(pgid: int) -> list[int]:
    return procfs.group_members(pgid)


def test_wake_of_a_server_that_cannot_start_exits_1_with_the_reason(user_env: UserEnv) -> None:
    write_config(user_env, named("crashy", env={"FIXTURE_CRASH_ON_START": "7"})
                 + named("missing", command=["/nonexistent/server"]))
    start_daemon(user_env)
    failed_with(lazyctl(user_env, "wake", "crashy"), 1, "crashy did not start: exited with status 7")
    done = lazyctl(user_env, "wake", "missing", "--json")
    failed_with(done, 1, "cannot execute")
    assert as_json(done)["data"]["state"] == "failed"
    unknown = lazyctl(user_env, "wake", "ghost")
    failed_with(unknown, 1, "no server named 'ghost' (known: crashy, missing)")
    assert fixture_pids(user_env) == []


async def test_sleep_then_a_request_wakes_the_server(user_env: UserEnv) -> None:
    start_daemon(user_env)
    with trio.fail_after(STEP_TIMEOUT_S):
        async with shim_session(user_env, SERVER) as session:
            first = int(await tool_text(session, "pid", {}))
            name = as_json(await trio.to_thread.run_sync(lazyctl, user_env, "status", "--json"))["servers"][0]["name"]
            slept = await trio.to_thread.run_sync(lazyctl, user_env, "sleep", name)
            assert slept.stdout == f"{name} sleeping\n", slept.stderr
            assert first not in fixture_pids(user_env)
            second = int(await tool_text(session, "pid", {}))
            assert second != first and second in fixture_pids(user_env)


# ---- logs ----------------------------------------------------------------------------------------


def test_logs_prints_the_last_lines_in_both_modes_and_follows_new_ones(user_env: UserEnv, tmp_path: Path) -> None:
    write_config(user_env, named("noisy", command=[str(stderr_script(tmp_path, 20))]))
    start_daemon(user_env)
    assert lazyctl(user_env, "wake", "noisy").returncode == 0
    log_path = user_env.state_dir / "logs" / "noisy.log"
    wait_until(lambda: log_path.exists() and "noisy line 20" in log_path.read_text(), STEP_TIMEOUT_S, "stderr in the log")
    human = lazyctl(user_env, "logs", "noisy", "-n", "3")
    assert human.returncode == 0
    assert [line.split(" ", 1)[1] for line in human.stdout.splitlines()] == [f"noisy line {i}" for i in (18, 19, 20)]
    data = as_json(lazyctl(user_env, "logs", "noisy", "-n", "2", "--json"))
    assert data["path"] == str(log_path) and [line.split(" ", 1)[1] for line in data["lines"]] == ["noisy line 19", "noisy line 20"]
    # Ctrl-C as in a terminal: a test run started as a background job of a non-interactive shell
    # inherits SIGINT ignored, and a follower that inherits that rightly ignores Ctrl-C too.
    follower = subprocess.Popen([sys.executable, "-m", "lazyd.ctl.main", "logs", "noisy", "-f", "-n", "0"],
                                env=user_env.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        # Following from the end: what the daemon writes next (the exit note of a sleep) shows up.
        wait_until(lambda: _reads_file(follower.pid, log_path), STEP_TIMEOUT_S, "the follower to open the log")
        assert lazyctl(user_env, "sleep", "noisy").returncode == 0
        line = _read_line(follower, STEP_TIMEOUT_S)
        assert "[lazyd]" in line and "noisy line" not in line
    finally:
        follower.send_signal(signal.SIGINT)
        assert follower.wait(timeout=STEP_TIMEOUT_S) == 0  # Ctrl-C ends a follow normally
        assert follower.stderr is not None and follower.stderr.read() == ""
    failed_with(lazyctl(user_env, "logs", "ghost"), 1, "no server named 'ghost'")


def _reads_file(pid: int, path: Path) -> bool:
    try:
        return any(os.readlink(f"/proc/{pid}/fd/{fd}") == str(path) for fd in os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return False


def _read_line(proc: subprocess.Popen[str], timeout_s: float) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    assert ready, "the follower printed nothing"
    return proc.stdout.readline()


# ---- check ---------------------------------------------------------------------------------------


async def test_check_warms_the_cache_so_the_first_session_starts_no_server(user_env: UserEnv) -> None:
    start_daemon(user_env)
    env = shim_env(user_env, {"FIXTURE_PAGE_SIZE": str(PAGE_SIZE)})
    done = lazyctl(user_env, "check", "--json", "--", *SERVER, env=env)
    assert done.returncode == 0, done.stderr
    report = as_json(done)
    assert report["protocol_version"] == "2025-11-25" and report["server_info"]["name"] == "fixture"
    assert report["discover"] == {"kind": "method-not-found"}
    assert report["listings"]["tools"] == {"count": 10, "pages": 4}
    assert report["listings"]["prompts"]["count"] >= 1 and report["listings"]["resources"]["count"] >= 1
    assert Path(report["cache_path"]).is_file()
    assert fixture_pids(user_env) == []  # the check's own process is stopped
    with trio.fail_after(STEP_TIMEOUT_S):
        async with shim_session(user_env, SERVER, env={"FIXTURE_PAGE_SIZE": str(PAGE_SIZE)}) as session:
            tools = await session.list_tools()
            assert len(tools.tools) == 10
            assert fixture_pids(user_env) == []  # handshake and listing came from the check's cache
            row = as_json(await trio.to_thread.run_sync(lazyctl, user_env, "status", "--json"))["servers"][0]
    assert (row["name"], row["state"], row["clients"]) == (report["name"], "sleeping", 1)
    human = lazyctl(user_env, "check", report["name"])
    assert human.returncode == 0, human.stderr
    assert human.stdout.startswith(f"checked {report['name']} in ")
    assert "  tools              10 in 4 pages" in human.stdout.splitlines()


def test_check_of_a_named_server_with_captured_initialize_params(user_env: UserEnv, tmp_path: Path) -> None:
    write_config(user_env, named("time"))
    start_daemon(user_env)
    captured = tmp_path / "session.jsonl"
    params = {"protocolVersion": "2025-06-18", "capabilities": {"roots": {}}, "clientInfo": {"name": "cap", "version": "9"}}
    captured.write_text(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}) + "\n"
                        + json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n")
    done = lazyctl(user_env, "check", "--server", "time", "--initialize-json", f"@{captured}", "--json")
    assert done.returncode == 0, done.stderr
    report = as_json(done)
    assert (report["name"], report["requested_version"], report["protocol_version"]) == ("time", "2025-06-18", "2025-06-18")
    cache = json.loads(Path(report["cache_path"]).read_text())
    assert [entry["params"] for entry in cache["entries"].values()] == [params]


def test_a_failed_check_leaves_the_previous_cache_untouched_and_exits_1_with_the_reason(user_env: UserEnv, tmp_path: Path) -> None:
    start_daemon(user_env)
    script = tmp_path / "server.sh"
    # Same registration (same command, cwd and environment), behaviour switched by a file.
    script.write_text(f'#!/bin/sh\nif [ -e "$0.fail" ]; then echo "fixture: refusing to start" >&2; exit 3; fi\n'
                      f'exec "{sys.executable}" "{FIXTURE_SERVER}"\n')
    script.chmod(0o755)
    good = lazyctl(user_env, "check", "--json", "--", str(script))
    assert good.returncode == 0, good.stderr
    cache = Path(as_json(good)["cache_path"])
    before = cache.read_bytes(), cache.stat().st_mtime_ns
    Path(f"{script}.fail").touch()
    for mode in ([], ["--json"]):
        bad = lazyctl(user_env, "check", *mode, "--", str(script))
        failed_with(bad, 1, "exited with status 3; stderr: fixture: refusing to start")
    assert (cache.read_bytes(), cache.stat().st_mtime_ns) == before
    failed_with(lazyctl(user_env, "check", "--", "/nonexistent/server"), 1, "cannot execute '/nonexistent/server'")
    failed_with(lazyctl(user_env, "check", "ghost"), 1, "no server named 'ghost'")


def test_a_check_that_hangs_fails_at_the_start_timeout(user_env: UserEnv) -> None:
    write_config(user_env, '[defaults]\nstart_timeout = "500ms"\n'
                 + named("hangs", env={"FIXTURE_HANG_ON_INITIALIZE": "1"}))
    start_daemon(user_env)
    failed_with(lazyctl(user_env, "check", "hangs"), 1, "no complete handshake and listings within start_timeout (500ms)")
    assert fixture_pids(user_env) == []


UNREADABLE_SERVER = """\
import json, sys
for line in sys.stdin:
    request = json.loads(line)
    if "id" in request:  # an answer too large to be read in passing, cut short or nested too deep
        answer = '{"jsonrpc":"2.0","id":%s,"result":{"text":"%s","more":' % (json.dumps(request["id"]), "x" * 70000)
        print(answer + ('[' * 5000 + ']' * 5000 + '}}' if sys.argv[1] == "deep" else ''), flush=True)
"""


@pytest.mark.parametrize(("shape", "reason"), [("cut", "not JSON"), ("deep", "too deep")])
def test_a_check_whose_server_answers_lines_lazyd_cannot_read_fails_saying_so(
        user_env: UserEnv, tmp_path: Path, shape: str, reason: str) -> None:
    script = tmp_path / "unreadable_server.py"
    script.write_text(UNREADABLE_SERVER)
    start_daemon(user_env)
    done = lazyctl(user_env, "check", "--start-timeout", "2s", "--", sys.executable, str(script), shape)
    # Rather than the timeout alone: the answers came, and could not be read.
    failed_with(done, 1, f"within start_timeout (2s); the server wrote ")
    assert f"lines lazyd could not read ({reason})" in done.stderr, done.stderr


# ---- explain, reload, stop -------------------------------------------------------------------------


def test_explain_names_variables_never_values_and_says_why_two_registrations_differ(daemon: Daemon) -> None:
    user = daemon.user
    secret, other = "hunter2-secret", "other-secret"
    checked = lazyctl(user, "check", "--json", "--", *SERVER, env={"API_TOKEN": secret})
    assert checked.returncode == 0, checked.stderr
    name = as_json(checked)["name"]
    same = lazyctl(user, "explain", "--", *SERVER, env={"API_TOKEN": secret, "TMUX": "/tmp/tmux-1,2,3"})
    assert same.returncode == 0, same.stderr
    assert f"shares the process of {name}" in same.stdout
    ignored = next(line for line in same.stdout.splitlines() if line.startswith("  ignored"))
    assert "TMUX" in ignored
    differ = lazyctl(user, "explain", name, "--", *SERVER, env={"API_TOKEN": other})
    assert differ.returncode == 0
    assert "do not share a process" in differ.stdout and "env API_TOKEN differs (credential, values hidden)" in differ.stdout
    data = as_json(lazyctl(user, "explain", name, "--json", "--", *SERVER, env={"API_TOKEN": other}))
    assert data["differences"] == ["env API_TOKEN differs (credential, values hidden)"] and data["same_identity"] is False
    assert data["registrations"][0]["registered_as"] == name and "API_TOKEN" in data["registrations"][0]["env_names"]
    assert data["registrations"][1]["env_classes"]["API_TOKEN"] == "credential"
    twice = as_json(lazyctl(user, "explain", name, name, "--json"))
    assert twice["same_identity"] is True
    for done in (same, differ):
        assert secret not in done.stdout and other not in done.stdout
    failed_with(lazyctl(user, "explain", "ghost"), 1, "no server named 'ghost'")


def test_reload_reports_what_changed_and_refuses_a_bad_config(user_env: UserEnv) -> None:
    write_config(user_env, named("alpha"))
    start_daemon(user_env)
    write_config(user_env, named("alpha") + named("beta"))
    done = lazyctl(user_env, "reload")
    assert (done.returncode, done.stdout) == (0, "config reloaded: added beta\n"), done.stderr
    assert as_json(lazyctl(user_env, "reload", "--json"))["unchanged"] == ["alpha", "beta"]
    write_config(user_env, named("alpha") + "lingr = 5\n")
    failed_with(lazyctl(user_env, "reload"), 1, "the old config stays in force")
    names = [row["name"] for row in as_json(lazyctl(user_env, "status", "--json"))["servers"]]
    assert names == ["alpha", "beta"]


@pytest.mark.parametrize("mode", ["human", "json"])
def test_stop_stops_the_daemon_and_returns_once_its_pid_is_gone(daemon: Daemon, mode: str) -> None:
    pid = daemon.proc.pid
    done = lazyctl(daemon.user, "stop", *(["--json"] if mode == "json" else []))
    assert done.returncode == 0, done.stderr
    if mode == "json":
        assert as_json(done) == {"pid": pid, "stopped": True}
    else:
        assert done.stdout == f"lazyd (pid {pid}) stopped\n"
    # Exited already (a zombie until we reap it here): poll() reaps without waiting.
    assert daemon.proc.poll() == 0
    failed_with(lazyctl(daemon.user, "status"), 3, "lazyd is not running")


def test_status_says_what_sets_same_command_servers_apart_and_explain_takes_its_names(daemon: Daemon, tmp_path: Path) -> None:
    user = daemon.user
    secret = "planted-status-secret"
    other_dir = tmp_path / "elsewhere"
    other_dir.mkdir()
    for env, cwd in (({"API_TOKEN": secret}, None), ({"API_TOKEN": "another"}, None), ({"API_TOKEN": secret}, other_dir)):
        args = ["check", "--json"] + (["--cwd", str(cwd)] if cwd else []) + ["--", *SERVER]
        assert lazyctl(user, *args, env=env).returncode == 0
    rows = as_json(lazyctl(user, "status", "--json"))["servers"]
    assert len(rows) == 3 and all(r["differs_by"] for r in rows)
    here = [r for r in rows if r["cwd"] == os.getcwd()]
    assert len(here) == 2 and all("API_TOKEN" in r["differs_by"] for r in here)
    text = lazyctl(user, "status").stdout
    assert "same command, different identities" in text and f"cwd {other_dir}" in text
    assert "env differs: API_TOKEN" in text and secret not in text
    a, b = here[0]["name"], here[1]["name"]
    explained = lazyctl(user, "explain", a, b)
    assert explained.returncode == 0 and "env API_TOKEN differs (credential, values hidden)" in explained.stdout
    assert secret not in explained.stdout
