"""Progress on long work: `check`, `wrap --check`, `reapply --check` and `wake` show a live status
line on a terminal, and nothing extra without one or with `--json`.

lazyctl runs with stdout and stderr on a pseudo-terminal (the pty module), as in a user's shell,
or on pipes, as in a script. The fixture server pages its listings (FIXTURE_PAGE_SIZE) and waits
before each page (FIXTURE_LISTING_DELAY_S), so the daemon has several steps to report while a
check runs. The status line is rewritten in place with "\\r" and an erase-line sequence, and
erased before the real output: the tests read the raw bytes to see both.
"""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time

import pytest

from tests.conftest import FIXTURE_SERVER, UserEnv, start_daemon
from tests.e2e.supervision_support import server_table, write_config
from tests.e2e.wrap_support import claude_config

pytestmark = pytest.mark.e2e

STEP_S = 60.0
ERASE = "\r\x1b[K"
SLOW = {"FIXTURE_PAGE_SIZE": "3", "FIXTURE_LISTING_DELAY_S": "0.3"}


def on_terminal(user: UserEnv, *words: str) -> tuple[int, str]:
    """lazyctl with stdout and stderr on one pseudo-terminal; (exit status, all it wrote)."""
    controller, terminal = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "lazyd.ctl.main", *words], env=user.env, cwd=user.root,
                            stdin=subprocess.DEVNULL, stdout=terminal, stderr=terminal)
    os.close(terminal)
    chunks = []
    deadline = time.monotonic() + STEP_S
    while time.monotonic() < deadline:
        ready, _, _ = select.select([controller], [], [], 0.5)
        if ready:
            try:
                data = os.read(controller, 65536)
            except OSError:  # EIO: every writer closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    os.close(controller)
    return proc.wait(STEP_S), b"".join(chunks).decode(errors="replace")


def on_pipes(user: UserEnv, *words: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lazyd.ctl.main", *words], env=user.env, cwd=user.root,
                          capture_output=True, text=True, timeout=STEP_S)


def status_lines(output: str) -> list[str]:
    """The texts the live line showed, in order (each redraw starts with the erase sequence)."""
    return [part.split("\r")[0].split("\n")[0] for part in output.split(ERASE)[1:] if part.strip()]


@pytest.fixture
def slow_server(user_env: UserEnv) -> UserEnv:
    write_config(user_env, server_table("slow", env=SLOW))
    start_daemon(user_env)
    return user_env


def test_check_on_a_terminal_shows_each_step_then_erases_the_line_before_the_report(slow_server: UserEnv) -> None:
    status, output = on_terminal(slow_server, "check", "slow")
    assert status == 0, output
    shown = status_lines(output)
    steps = [line.split(": ", 1)[1].rsplit(" (", 1)[0] for line in shown if line.startswith("checking slow: ")]
    assert steps[0] in ("connecting to lazyd", "starting the server"), shown
    assert any(step.startswith("handshake (pid ") for step in steps), shown
    assert "listings: tools/list page 2" in steps and "listings: tools/list page 4" in steps, shown
    assert steps[-1] == "stopping the server", shown
    assert all(line.endswith("s)") for line in shown if line.startswith("checking slow")), shown  # elapsed
    # The report itself starts on a clean line: the status line was erased just before it.
    report = output.rsplit(ERASE, 1)[1]
    assert report.lstrip("\r\n").startswith("checked slow in "), output


def test_check_without_a_terminal_or_with_json_writes_nothing_extra(slow_server: UserEnv) -> None:
    piped = on_pipes(slow_server, "check", "slow")
    assert piped.returncode == 0 and piped.stderr == ""
    assert "\r" not in piped.stdout and "\x1b" not in piped.stdout
    assert piped.stdout.startswith("checked slow in ")
    status, output = on_terminal(slow_server, "check", "slow", "--json")
    assert status == 0 and ERASE not in output and "\x1b" not in output
    assert json.loads(output)["name"] == "slow"


def test_wake_on_a_terminal_shows_its_step_and_nothing_without_one(slow_server: UserEnv) -> None:
    status, output = on_terminal(slow_server, "wake", "slow")
    assert status == 0, output
    shown = status_lines(output)
    assert any(line.startswith("waking slow: handshake and listings (pid ") for line in shown), shown
    assert output.rsplit(ERASE, 1)[1].strip().startswith("slow running (pid ")
    on_pipes(slow_server, "sleep", "slow")
    piped = on_pipes(slow_server, "wake", "slow")
    assert piped.returncode == 0 and piped.stderr == "" and piped.stdout.startswith("slow running (pid ")


@pytest.mark.parametrize("subcommand", ["wrap", "reapply"])
def test_wrap_and_reapply_check_show_which_registration_is_checked(user_env: UserEnv, subcommand: str) -> None:
    path = claude_config(user_env)
    config = json.loads(path.read_text())
    config["mcpServers"]["fixture"]["env"].update(SLOW)
    path.write_text(json.dumps(config))
    start_daemon(user_env)
    if subcommand == "reapply":
        assert on_pipes(user_env, "wrap", "--client", "claude", "--all").returncode == 0
    status, output = on_terminal(user_env, subcommand, "--client", "claude", "--all", "--check")
    assert status == 0, output
    shown = status_lines(output)
    assert any(line.startswith("checking fixture (1 of 1): listings: tools/list page ") for line in shown), shown
    assert "check fixture: ok" in output.rsplit(ERASE, 1)[1]
    piped = on_pipes(user_env, subcommand, "--client", "claude", "--all", "--check")
    assert "\x1b" not in piped.stdout + piped.stderr
