"""The daemon's side of learned identities: what it keeps on disk, how it names a client, how a
new identity finds the cache of its command, and how it reads a script's interpreter.

Real files in a temporary state dir and real processes for the parent's name; no daemon."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

from lazyd.core.cache import HandshakeEntry, Snapshot
from lazyd.core.sharing.identity import identity_for
from lazyd.daemon.runtime.cache_store import CacheStore
from lazyd.daemon.connections.client_process import client_process
from lazyd.daemon.sessions.command_cache import CommandCaches
from lazyd.core.sharing.client_profiles import PROFILES
from lazyd.daemon.control.client_env import client_environment, learned_profile
from lazyd.daemon.sessions.learned_env import LearnedEnv, SessionClient
from lazyd.daemon.sessions.shebang import interpreter_of

SECRET = b"k" * 32


def ident(cwd: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return identity_for(["/usr/bin/node", "/srv/everything.js", "stdio"], cwd, env or {}, which=lambda c, p: None)


# ---- learned_env.json ----------------------------------------------------------------------------


def test_a_learned_variable_survives_a_restart_and_the_file_is_private_and_holds_no_value(tmp_path: Path) -> None:
    learned = LearnedEnv(tmp_path)
    learned.note_session(1, SessionClient("opencode"), ["HOME"])
    learned.note_line(1, {"protocolVersion": "x", "clientInfo": {"name": "opencode"}}, last=False)
    assert learned.observe("opencode", "reg", {"OPENCODE_PID": "4242-planted"}) == []
    assert learned.observe("opencode", "reg", {"OPENCODE_PID": "4343-planted"}) == ["OPENCODE_PID"]
    path = tmp_path / "learned_env.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert b"planted" not in path.read_bytes()
    again = LearnedEnv(tmp_path)
    assert again.noise("opencode") == frozenset({"OPENCODE_PID"})
    assert [(n, e.describe()) for n, e in again.learned()] == [("OPENCODE_PID", "2 values in 2 sessions of opencode")]


def test_a_sessions_names_are_recorded_under_the_client_its_initialize_names(tmp_path: Path) -> None:
    learned = LearnedEnv(tmp_path)
    learned.note_session(7, SessionClient("codex", frozenset({"HOME", "PATH", "SSL_CERT_FILE", "GITHUB_TOKEN"})),
                         ["HOME", "PATH", "SSL_CERT_FILE"])
    learned.note_line(7, {"protocolVersion": "2025-06-18", "clientInfo": {"name": "codex-mcp-client"}}, last=False)
    found = LearnedEnv(tmp_path).client_record(["codex-mcp-client"])
    assert found is not None
    name, record = found
    assert name == "codex-mcp-client" and record["process"] == "codex"
    assert record["env_names"] == ["HOME", "PATH", "SSL_CERT_FILE"]
    assert record["dropped"] == ["GITHUB_TOKEN"] and record["added"] == []


def test_a_client_is_filed_under_its_client_info_name_never_its_process_name(tmp_path: Path) -> None:
    # Copilot CLI's native binary names its process "MainThread"; another program may too.
    learned = LearnedEnv(tmp_path)
    first = SessionClient("MainThread", guess=learned.guess("MainThread"), registration="reg",
                          counted={"COPILOT_RUN_ID": "6f1c9a52-0d4e-4c1e-9a57-3d1f2b7c8e90"})
    assert first.guess == ""  # no client seen from that process name yet: nothing learned at the hello
    learned.note_session(1, first, ["COPILOT_RUN_ID"])
    learned.note_line(1, {"protocolVersion": "x", "clientInfo": {"name": "copilot-cli"}}, last=False)
    # The next hello of a "MainThread" is guessed to be copilot-cli, and learned from as such.
    assert learned.guess("MainThread") == "copilot-cli"
    assert learned.observe(learned.guess("MainThread"), "reg",
                           {"COPILOT_RUN_ID": "0a7e4c1d-5b2f-4e8a-8c3d-9f6b1e2a4d70"}) == ["COPILOT_RUN_ID"]
    again = LearnedEnv(tmp_path)
    assert set(again.per_run.learned()) == {"copilot-cli"} and set(again.clients) == {"copilot-cli"}
    assert again.noise("MainThread") == {"COPILOT_RUN_ID"}
    assert [(n, e.describe()) for n, e in again.learned()] == [
        ("COPILOT_RUN_ID", "2 values in 2 sessions of copilot-cli")]
    assert "MainThread" not in json.dumps(json.loads((tmp_path / "learned_env.json").read_text())["per_run"])


def test_a_session_that_sends_no_initialize_records_nothing(tmp_path: Path) -> None:
    learned = LearnedEnv(tmp_path)
    learned.note_session(3, SessionClient("codex"), ["HOME"])
    learned.note_line(3, None, last=True)
    learned.note_line(3, {"protocolVersion": "x", "clientInfo": {"name": "late"}}, last=False)
    assert learned.clients == {} and not (tmp_path / "learned_env.json").exists()


def test_a_corrupt_or_foreign_file_is_learned_anew(tmp_path: Path) -> None:
    (tmp_path / "learned_env.json").write_text("{not json")
    assert LearnedEnv(tmp_path).learned() == []
    (tmp_path / "learned_env.json").write_text(json.dumps({"v": 9, "per_run": {}, "clients": {}}))
    assert LearnedEnv(tmp_path).clients == {}


# ---- the cache of the same command ---------------------------------------------------------------


def cached() -> Snapshot:
    snap = Snapshot()
    snap.entries["2025-11-25|x"] = HandshakeEntry({"protocolVersion": "2025-11-25"}, {"protocolVersion": "2025-11-25"})
    snap.updated_at = 10.0
    return snap


def test_a_new_identity_of_a_command_starts_from_a_copy_of_a_live_runtimes_snapshot(tmp_path: Path) -> None:
    caches = CommandCaches(tmp_path, CacheStore(tmp_path / "cache"), SECRET)
    there, here = ident("/project/a"), ident("/project/b")
    source = cached()
    seeded = caches.seed(here, "d-b", Snapshot(), [(there, source)])
    assert seeded.entries.keys() == source.entries.keys() and seeded is not source
    other_command = identity_for(["/usr/bin/python3", "x.py"], "/project/b", {}, which=lambda c, p: None)
    assert caches.seed(other_command, "d-c", Snapshot(), [(there, source)]).entries == {}


def test_a_new_identity_starts_with_every_handshake_its_command_recorded_the_freshest_winning(tmp_path: Path) -> None:
    store = CacheStore(tmp_path / "cache")
    caches = CommandCaches(tmp_path, store, SECRET)
    # A file of a Copilot check elsewhere, older than a live Claude Code session's snapshot.
    checked, copilot = ident("/project/checked"), cached()
    copilot.entries = {"2025-11-25|copilot": HandshakeEntry({"protocolVersion": "2025-11-25"}, {"v": "copilot"})}
    copilot.entries["2025-11-25|both"] = HandshakeEntry({"protocolVersion": "2025-11-25"}, {"v": "old"})
    copilot.updated_at = 5.0
    store.save(checked.digest(SECRET), copilot)
    caches.note(checked, checked.digest(SECRET))
    claude = cached()
    claude.entries = {"2025-11-25|claude": HandshakeEntry({"protocolVersion": "2025-11-25"}, {"v": "claude"}),
                      "2025-11-25|both": HandshakeEntry({"protocolVersion": "2025-11-25"}, {"v": "new"})}
    seeded = caches.seed(ident("/project/new"), "d-new", Snapshot(), [(ident("/project/live"), claude)])
    assert {k: e.result["v"] for k, e in seeded.entries.items()} == {
        "2025-11-25|claude": "claude", "2025-11-25|both": "new", "2025-11-25|copilot": "copilot"}
    assert seeded.updated_at == claude.updated_at and claude.entries.keys() == {"2025-11-25|claude", "2025-11-25|both"}


def test_an_identity_with_a_cache_of_its_own_keeps_it(tmp_path: Path) -> None:
    caches = CommandCaches(tmp_path, CacheStore(tmp_path / "cache"), SECRET)
    own = cached()
    assert caches.seed(ident("/b"), "d-b", own, [(ident("/a"), cached())]) is own


def test_after_a_restart_the_index_finds_the_command_s_cache_file(tmp_path: Path) -> None:
    store = CacheStore(tmp_path / "cache")
    (tmp_path / "cache").mkdir()
    checked = ident("/home/u/project", {"GITHUB_TOKEN": "planted-value"})
    digest = checked.digest(SECRET)
    store.save(digest, cached())
    CommandCaches(tmp_path, store, SECRET).note(checked, digest)
    index = (tmp_path / "commands.json").read_bytes()
    assert b"planted" not in index and b"everything" not in index and b"/home/u" not in index
    assert stat.S_IMODE((tmp_path / "commands.json").stat().st_mode) == 0o600
    seeded = CommandCaches(tmp_path, store, SECRET).seed(ident("/elsewhere"), "d-x", Snapshot(), [])
    assert list(seeded.entries) == ["2025-11-25|x"]


def test_a_tampered_index_cannot_name_a_file_outside_the_cache(tmp_path: Path) -> None:
    key = CommandCaches(tmp_path, CacheStore(tmp_path / "cache"), SECRET).command_key(ident("/a"))
    (tmp_path / "commands.json").write_text(json.dumps({key: ["../../etc/passwd", "ab12"]}))
    assert CommandCaches(tmp_path, CacheStore(tmp_path / "cache"), SECRET).index == {key: ["ab12"]}


# ---- which client a shim comes from ----------------------------------------------------------------


def test_the_client_is_the_shims_parent_with_shells_and_wrappers_skipped(tmp_path: Path) -> None:
    # python (the "client") runs sh -c, which runs env, which runs the "shim" (sleep).
    script = tmp_path / "client.py"
    script.write_text("import subprocess, sys\n"
                      "p = subprocess.Popen(['sh', '-c', 'env sleep 30; true'])\n"
                      "print(p.pid, flush=True)\n"
                      "p.wait()\n")
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    started: list[int] = []
    try:
        assert proc.stdout is not None
        sh_pid = int(proc.stdout.readline())
        for _ in range(200):
            children = Path(f"/proc/{sh_pid}/task/{sh_pid}/children").read_text().split()
            if children and Path(f"/proc/{children[0]}/comm").read_text().strip() == "sleep":
                break
            os.sched_yield()
        (shim,) = children
        started.append(int(shim))
        assert client_process(int(shim))[0] == Path(f"/proc/{proc.pid}/comm").read_text().strip()
    finally:
        for pid in started:
            os.kill(pid, signal.SIGKILL)
        proc.kill()
        proc.wait()


def test_a_shim_that_is_gone_has_no_client_name() -> None:
    assert client_process(2 ** 22 + 12345) == ("", None)  # above pid_max: no such process


# ---- a script's interpreter ------------------------------------------------------------------------


def test_an_env_shebang_names_the_interpreter_path_finds(tmp_path: Path) -> None:
    cases = {"a": b"#!/usr/bin/env node\n", "b": b"#!/usr/bin/env -S node --no-warnings\n",
             "c": b"#!/usr/bin/node\n", "d": b"\x7fELF\x02\x01", "e": b"#!/usr/bin/env FOO=1 python3 -u\n",
             "f": b"#!/usr/bin/env ../x\n"}
    for name, head in cases.items():
        (tmp_path / name).write_bytes(head + b"console.log(1)\n")
    assert [interpreter_of(str(tmp_path / n)) for n in "abcdef"] == ["node", "node", None, None, "python3", None]
    assert interpreter_of(str(tmp_path / "missing")) is None
    assert interpreter_of(str(tmp_path)) is None


# ---- the environment a check rebuilds for a client ------------------------------------------------

SHELL = {"HOME": "/home/u", "PATH": "/usr/bin", "GITHUB_TOKEN": "t", "SSL_CERT_FILE": "/ca.pem",
         "NEW_SINCE": "x", "AWS_PROFILE": "w"}


def seen(tmp_path: Path, client_name: str, process: str, own: set[str] | None, carried: list[str]) -> LearnedEnv:
    learned = LearnedEnv(tmp_path)
    learned.note_session(1, SessionClient(process, frozenset(own) if own is not None else None), carried)
    learned.note_line(1, {"protocolVersion": "2025-06-18", "clientInfo": {"name": client_name}}, last=False)
    return learned


def test_without_a_session_seen_a_check_uses_the_profiles_rule(tmp_path: Path) -> None:
    env, process = client_environment(LearnedEnv(tmp_path), PROFILES["codex"], SHELL, {"API": "k"}, ())
    assert env == {"HOME": "/home/u", "PATH": "/usr/bin", "SSL_CERT_FILE": "/ca.pem", "API": "k"} and process == ""


def test_a_filtering_client_seen_passes_what_it_carried_and_its_env_vars(tmp_path: Path) -> None:
    learned = seen(tmp_path, "codex-mcp-client", "codex", {"HOME", "PATH", "GITHUB_TOKEN", "SSL_CERT_FILE"},
                   ["HOME", "PATH", "SSL_CERT_FILE"])
    env, process = client_environment(learned, PROFILES["codex"], SHELL, {}, ("AWS_PROFILE",))
    # NEW_SINCE was never met: Codex's rule (an allow-list) withholds it.
    assert env == {"HOME": "/home/u", "PATH": "/usr/bin", "SSL_CERT_FILE": "/ca.pem", "AWS_PROFILE": "w"}
    assert process == "codex"


def test_a_client_that_withheld_nothing_passes_a_variable_added_to_the_shell_since(tmp_path: Path) -> None:
    learned = seen(tmp_path, "claude-code", "claude", {"HOME", "PATH", "GITHUB_TOKEN"},
                   ["HOME", "PATH", "GITHUB_TOKEN", "CLAUDECODE"])
    env, _ = client_environment(learned, PROFILES["claude"], SHELL, {}, ())
    assert env == SHELL


def test_a_client_whose_own_environment_was_unreadable_passes_only_what_it_carried(tmp_path: Path) -> None:
    learned = seen(tmp_path, "claude-code", "claude", None, ["HOME", "PATH"])
    env, _ = client_environment(learned, PROFILES["claude"], SHELL, {}, ())
    assert env == {"HOME": "/home/u", "PATH": "/usr/bin"}


def test_a_client_with_no_profile_is_known_by_its_client_name_or_its_process(tmp_path: Path) -> None:
    learned = seen(tmp_path, "acme-agent-mcp", "acme-agent", {"HOME", "PATH"}, ["HOME", "PATH", "ACME_RUN_ID"])
    by_process = learned_profile(learned, "acme-agent")
    assert by_process is not None and by_process.client_names == ("acme-agent-mcp",)
    by_client_name = learned_profile(learned, "acme-agent-mcp")
    assert by_client_name is not None and by_client_name.client_names == ("acme-agent-mcp",)
    assert learned_profile(learned, "nobody") is None
    env, process = client_environment(learned, by_process, SHELL, {}, ())
    assert env == SHELL and process == "acme-agent"


def test_the_markers_a_client_adds_come_back_with_the_value_its_release_sets(tmp_path: Path) -> None:
    learned = seen(tmp_path, "opencode", "opencode", {"HOME", "PATH"},
                   ["HOME", "PATH", "OPENCODE", "AGENT", "OPENCODE_PID"])
    env, process = client_environment(learned, PROFILES["opencode"], {"HOME": "/home/u", "PATH": "/usr/bin"}, {}, ())
    # OPENCODE_PID has no value to rebuild: it is learned as per-run, so it does not count anyway.
    assert env == {"HOME": "/home/u", "PATH": "/usr/bin", "OPENCODE": "1", "AGENT": "1"} and process == "opencode"


# ---- a session's identity, decided once -----------------------------------------------------------


class _CountingRegistry:
    """What per_run.learn uses of the registry: the real identity rule, with its calls counted."""

    def __init__(self, state_dir: Path) -> None:
        self.secret, self.learned, self.calls = SECRET, LearnedEnv(state_dir), 0

    def identity_of(self, argv, cwd, env, *, force=(), ignore=(), undecodable=None, client=""):  # type: ignore[no-untyped-def]
        from lazyd.daemon.sessions.unnamed_identity import unnamed_identity
        from lazyd.config.load import Config

        self.calls += 1
        return unnamed_identity(Config(), argv, cwd, env, force=force,
                                ignore=(*ignore, *sorted(self.learned.noise(client))), undecodable=undecodable)


def test_learning_hands_back_the_identity_it_decided_unless_what_it_learned_changes_it(tmp_path: Path) -> None:
    from lazyd.daemon.sessions import per_run

    registry = _CountingRegistry(tmp_path)
    argv = ["/usr/bin/node", "/srv/everything.js"]
    shim = subprocess.Popen(["sleep", "30"])  # its client: this test's process, whatever ran the tests
    try:
        client, decided = per_run.learn(registry, shim.pid, argv, "/", {"RUN_ID": "1"},  # type: ignore[arg-type]
                                        force=(), ignore=())
        assert client.process, "the test process must be nameable for anything to be learned"
        assert decided is not None and registry.calls == 1  # the caller takes it: decided once per session start
        assert ("RUN_ID", "1") in decided[0].env and decided[1] is None
        # Its initialize names the client: what the session taught is filed under that name.
        registry.learned.note_session(1, client, ["RUN_ID"])
        registry.learned.note_line(1, {"protocolVersion": "x", "clientInfo": {"name": "sdk-client"}}, last=False)
        client, decided = per_run.learn(registry, shim.pid, argv, "/", {"RUN_ID": "2"},  # type: ignore[arg-type]
                                        force=(), ignore=())
        assert decided is None  # RUN_ID was just learned as per-run: the identity must be decided again
        assert client.guess == "sdk-client" and registry.learned.noise(client.process) == {"RUN_ID"}
        assert set(registry.learned.per_run.learned()) == {"sdk-client"}
    finally:
        shim.kill()
        shim.wait()


def test_a_copilot_session_seen_rebuilds_its_appended_git_setting_from_the_shell(tmp_path: Path) -> None:
    from lazyd.core.sharing.client_profiles import copilot_environment
    shell = {**SHELL, "COPILOT_OFFLINE": "true", "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "user.name",
             "GIT_CONFIG_VALUE_0": "me"}
    carried = {**copilot_environment(shell, {}), "COPILOT_AGENT_SESSION_ID": "s1", "COPILOT_CLI_BINARY_VERSION": "1.0.102"}
    learned = seen(tmp_path, "copilot-cli", "copilot", set(shell), sorted(carried))
    env, process = client_environment(learned, PROFILES["copilot"], shell, {}, ())
    # Names only were recorded: the values the client changes or adds (GIT_CONFIG_COUNT one
    # higher, its git setting) come from its release's rule applied to the shell; its own
    # bookkeeping has no value to rebuild and does not count.
    assert env == copilot_environment(shell, {}) and process == "copilot"
    assert env["GIT_CONFIG_COUNT"] == "2" and env["GIT_CONFIG_KEY_1"] == "safe.bareRepository"
    assert "COPILOT_OFFLINE" not in env
