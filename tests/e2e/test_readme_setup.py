"""The README's set-up command works on a fresh Debian user, exactly as written.

Testing policy: the command is read from the README (not copied here), and run by bash in a clean
environment (`env -i`) with a fresh home made from /etc/skel as `useradd -m` makes one, in a copy
of this working tree. Only what a machine's network setup needs is passed through: the CA bundle
variables, proxies, pip's index settings, and pip's cache directory (so a second run reuses the
wheels the first one downloaded). The command ends by running the daemon in the foreground; the
test then opens a new login shell of that user, as a new terminal would, and checks that
`lazyd-shim` is found on PATH and relays a real session to a server through that daemon.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import FIXTURE_SERVER, wait_until

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
SETUP_S = 600.0  # a venv and a pip install from PyPI on a loaded machine; reached only when broken
STEP_S = 60.0
PASS_THROUGH = ("SSL_CERT_FILE", "SSL_CERT_DIR", "PIP_CERT", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS",
                "http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY",
                "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_DEFAULT_TIMEOUT")
COPY_IGNORE = shutil.ignore_patterns(".git", ".venv", "node_modules", "__pycache__", ".mypy_cache", ".pytest_cache",
                                     ".hypothesis", "build", "dist", "*.egg-info")


def readme_commands() -> list[str]:
    """The fenced sh blocks of the README's "The two commands" section, in order."""
    text = (REPO / "README.md").read_text()
    section = text[text.index("## The two commands"):]
    section = section[:section.index("\n## ", 3)]
    return [block.strip() for block in re.findall(r"^```sh\n(.*?)^```", section, re.MULTILINE | re.DOTALL)]


def pip_cache_dir() -> str:
    done = subprocess.run([sys.executable, "-m", "pip", "cache", "dir"], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else ""


@pytest.fixture
def fresh_user() -> Iterator[tuple[Path, dict[str, str]]]:
    root = Path(tempfile.mkdtemp(prefix="lzr", dir="/tmp"))  # short: sun_path is 108 bytes
    home = root / "home"
    if Path("/etc/skel").is_dir():
        shutil.copytree("/etc/skel", home, symlinks=True)
    else:
        home.mkdir()
    runtime = root / "run"
    runtime.mkdir(mode=0o700)
    env = {"HOME": str(home), "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8",
           "XDG_RUNTIME_DIR": str(runtime), "USER": os.environ.get("USER", "root")}
    env.update({k: os.environ[k] for k in PASS_THROUGH if k in os.environ})
    cache = os.environ.get("PIP_CACHE_DIR") or pip_cache_dir()
    if cache:
        env["PIP_CACHE_DIR"] = cache
    try:
        yield root, env
    finally:
        for pid in processes_of(root):  # whatever is left of this user's lazyd, by pid
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(root, ignore_errors=True)


def processes_of(root: Path) -> list[int]:
    """Pids whose command line names a file under `root` (the fresh user's venv and checkout)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if str(root).encode() in f.read():
                        found.append(int(entry))
            except OSError:
                continue
    return found


def login_shell(env: dict[str, str], script: str) -> subprocess.CompletedProcess[str]:
    """`script` in a new login shell of the fresh user (a new terminal): only HOME and friends set."""
    return subprocess.run(["env", "-i", *(f"{k}={v}" for k, v in env.items()), "bash", "-l", "-c", script],
                          capture_output=True, text=True, timeout=STEP_S)


def test_the_readme_has_two_commands_and_ci_runs_exactly_the_test_command() -> None:
    setup, tests = readme_commands()
    assert setup.endswith("~/.local/bin/lazyd") and "pip install ." in setup
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert ci[-1] == tests, (ci[-1], tests)


def test_the_readme_setup_command_in_a_clean_shell_of_a_fresh_user_puts_a_working_shim_on_path(
    fresh_user: tuple[Path, dict[str, str]],
) -> None:
    root, env = fresh_user
    checkout = root / "lazyd"
    shutil.copytree(REPO, checkout, ignore=COPY_IGNORE, symlinks=True)
    setup, _ = readme_commands()
    log = open(root / "setup.log", "wb")
    proc = subprocess.Popen(["env", "-i", *(f"{k}={v}" for k, v in env.items()), "bash", "-c", setup],
                            cwd=checkout, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    socket = Path(env["XDG_RUNTIME_DIR"]) / "lazyd" / "lazyd.sock"
    try:
        wait_until(lambda: socket.exists() or proc.poll() is not None, SETUP_S, "the README's lazyd to listen")
        assert proc.poll() is None, (root / "setup.log").read_text()[-3000:]
        home = Path(env["HOME"])
        found = login_shell(env, "command -v lazyd-shim lazyctl lazyd && lazyd-shim --version")
        assert found.returncode == 0, found.stderr
        assert found.stdout.splitlines() == [str(home / ".local/bin/lazyd-shim"), str(home / ".local/bin/lazyctl"),
                                             str(home / ".local/bin/lazyd"), "lazyd-shim 0.1.0"]
        # A client's session through the shim found on PATH, relayed by the README's daemon.
        lines = [{"jsonrpc": "2.0", "id": 1, "method": "initialize",
                  "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
                 {"jsonrpc": "2.0", "method": "notifications/initialized"},
                 {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "readme"}}}]
        shim = subprocess.Popen(["env", "-i", *(f"{k}={v}" for k, v in env.items()), "bash", "-l", "-c",
                                 f"exec lazyd-shim -- python3 {FIXTURE_SERVER}"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert shim.stdin is not None and shim.stdout is not None
        watchdog = threading.Timer(STEP_S, shim.kill)  # a shim that never answers fails the test, not hangs it
        watchdog.start()
        for line in lines:
            shim.stdin.write(json.dumps(line) + "\n")
        shim.stdin.flush()
        answers = [json.loads(shim.stdout.readline()) for _ in range(2)]  # the two requests' answers
        shim.stdin.close()
        assert shim.wait(STEP_S) == 0
        watchdog.cancel()
        assert answers[1]["id"] == 2 and answers[1]["result"]["content"][0]["text"] == "readme", answers
        status = login_shell(env, "lazyctl status --json")
        assert status.returncode == 0, status.stderr
        assert [row["command"][1:] for row in json.loads(status.stdout)["servers"]] == [[str(FIXTURE_SERVER)]]
        stopped = login_shell(env, "lazyctl stop")
        assert stopped.returncode == 0, stopped.stderr
        assert proc.wait(STEP_S) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(STEP_S)
        log.close()
