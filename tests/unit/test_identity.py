"""Registration identity (lazyd/core/sharing/identity.py).

The rule under test: sessions that differ only in per-session variables share a server; any
other difference (a token, an argument, the cwd, the resolved command, share = false) never
does; and nothing derived from an identity for display or file names reveals an env value.

`which` is the core's injected PATH lookup; the tests pass a table standing for a file system.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import string
from collections.abc import Iterable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lazyd.core.sharing.envrules import PER_SESSION_ENV
from lazyd.core.sharing.identity import (
    MIN_SECRET_BYTES,
    Identity,
    counted_for_learning,
    explain_difference,
    identity_for,
    same_without,
)

SECRET = b"s" * 32
TOKEN = "ghp_SECRETTOKENVALUE1234567890"
BINARIES = {"npx": "/usr/bin/npx", "uvx": "/home/u/.local/bin/uvx", "python3": "/usr/bin/python3",
            "node": "/usr/bin/node", "docker": "/usr/bin/docker"}


def which(command: str, path: str | None) -> str | None:
    """Finds BINARIES on the default PATH, and `npx` under /opt on a PATH that starts there."""
    if path is not None and path.startswith("/opt/node/bin") and command == "npx":
        return "/opt/node/bin/npx"
    return BINARIES.get(command)


BASE_ENV = {"HOME": "/home/u", "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "GITHUB_TOKEN": TOKEN,
            "DISPLAY": ":0"}

TERMINAL_A = {
    **BASE_ENV, "TERM_SESSION_ID": "w0t0p0:AAAA", "ITERM_SESSION_ID": "w0t0p0", "WINDOWID": "111",
    "TMUX": "/tmp/tmux-1000/default,1,0", "TMUX_PANE": "%1", "SHLVL": "2", "_": "/usr/bin/claude",
    "OLDPWD": "/home/u", "PWD": "/home/u/src", "SSH_AUTH_SOCK": "/tmp/ssh-a/agent.1",
    "SSH_AGENT_PID": "100", "COLUMNS": "80", "LINES": "24", "KITTY_WINDOW_ID": "1",
    "TERM_PROGRAM_VERSION": "3.4", "INVOCATION_ID": "aaaa", "JOURNAL_STREAM": "8:1",
    "CLAUDE_CODE_SSE_PORT": "4001", "VSCODE_IPC_HOOK_CLI": "/run/user/1000/vscode-a.sock",
    "VSCODE_GIT_IPC_HANDLE": "/run/user/1000/vscode-git-a.sock", "CURSOR_TRACE_ID": "trace-a",
    "LAZYD_LINGER": "30m", "TERM": "xterm-256color",
}
TERMINAL_B = {
    **BASE_ENV, "TERM_SESSION_ID": "w1t0p0:BBBB", "ITERM_SESSION_ID": "w1t0p0", "WINDOWID": "222",
    "TMUX_PANE": "%7", "SHLVL": "1", "_": "/usr/local/bin/claude", "PWD": "/home/u/src",
    "SSH_AUTH_SOCK": "/tmp/ssh-b/agent.2", "COLUMNS": "200", "LINES": "60", "KITTY_PID": "4242",
    "WEZTERM_PANE": "3", "CLAUDE_CODE_SSE_PORT": "4017", "VSCODE_IPC_HOOK_CLI": "/run/x.sock",
    "STY": "1234.pts-0", "GPG_TTY": "/dev/pts/3", "TERM": "xterm-kitty",
}

NPX_ARGV = ["npx", "-y", "@modelcontextprotocol/server-github"]


def ident(argv: list[str] | None = None, cwd: str = "/home/u/src",
          env: dict[str, str] | None = None, ignore: Iterable[str] = PER_SESSION_ENV,
          instance: str = "") -> Identity:
    return identity_for(argv or NPX_ARGV, cwd, BASE_ENV if env is None else env, which=which,
                        ignore=ignore, instance=instance)


# ---- sharing ---------------------------------------------------------------------------------


def test_two_terminals_differing_only_in_per_session_variables_share_one_identity() -> None:
    a, b = ident(env=TERMINAL_A), ident(env=TERMINAL_B)
    assert a == b
    assert a.key_material() == b.key_material()
    assert a.digest(SECRET) == b.digest(SECRET)
    assert a.readable_name(SECRET) == b.readable_name(SECRET)
    assert explain_difference(a, b) == []


# The built-in per-session variables docs/configuration.md promises ("The built-in per-session
# variables"), written out by group rather than read from PER_SESSION_ENV: a name dropped from the
# code's list fails its case here.
DOCUMENTED_PER_SESSION = [
    # terminal emulators
    "TERM", "COLORTERM", "TERM_PROGRAM", "TERM_PROGRAM_VERSION", "TERM_SESSION_ID", "LC_TERMINAL",
    "LC_TERMINAL_VERSION", "COLUMNS", "LINES", "WINDOWID", "VTE_VERSION", "GNOME_TERMINAL_SCREEN",
    "GNOME_TERMINAL_SERVICE", "TILIX_ID", "TERMINATOR_UUID", "WT_SESSION", "WT_PROFILE_ID",
    "__INTELLIJ_COMMAND_HISTFILE__", "SECURITYSESSIONID",
    # desktop launches
    "XDG_ACTIVATION_TOKEN", "DESKTOP_STARTUP_ID", "GIO_LAUNCHED_DESKTOP_FILE", "GIO_LAUNCHED_DESKTOP_FILE_PID",
    # multiplexers
    "TMUX", "TMUX_PANE", "STY", "WINDOW", "ZELLIJ", "ZELLIJ_SESSION_NAME", "ZELLIJ_PANE_ID",
    # shell bookkeeping
    "PWD", "OLDPWD", "_", "SHLVL", "STARSHIP_SESSION_KEY", "DIRENV_DIR", "DIRENV_FILE", "DIRENV_DIFF",
    "DIRENV_WATCHES",
    # ssh and agents
    "SSH_AUTH_SOCK", "SSH_AGENT_PID", "SSH_CLIENT", "SSH_CONNECTION", "SSH_TTY", "GPG_TTY",
    # service manager and login
    "INVOCATION_ID", "JOURNAL_STREAM", "SYSTEMD_EXEC_PID", "MANAGERPID", "XDG_SESSION_ID", "XPC_SERVICE_NAME",
    # editors
    "CURSOR_TRACE_ID", "NVIM", "NVIM_LISTEN_ADDRESS",
    # Claude Code
    "CLAUDECODE", "CLAUDE_PROJECT_DIR", "AI_AGENT", "COREPACK_ENABLE_AUTO_PIN", "NoDefaultCurrentDirectoryInExePath",
    # Gemini CLI
    "GEMINI_CLI",
]
# One name under each documented pattern (`VSCODE_*`, `CLAUDE_CODE_*`, ...), as the clients set them.
DOCUMENTED_PATTERN_NAMES = [
    "VSCODE_IPC_HOOK", "VSCODE_IPC_HOOK_CLI", "VSCODE_PID", "VSCODE_GIT_ASKPASS_MAIN",
    "LAZYD_LINGER", "LAZYD_SHARE", "ITERM_PROFILE", "KITTY_PUBLIC_KEY", "WEZTERM_UNIX_SOCKET",
    "ALACRITTY_SOCKET", "GHOSTTY_RESOURCES_DIR", "KONSOLE_DBUS_WINDOW", "CLAUDE_CODE_SESSION_ID",
    "CLAUDE_CODE_ENTRYPOINT", "GEMINI_CLI_IDE_WORKSPACE_PATH", "GEMINI_CLI_IDE_SERVER_PORT",
]


@pytest.mark.parametrize("name", DOCUMENTED_PER_SESSION)
def test_each_documented_per_session_variable_is_left_out_of_the_identity(name: str) -> None:
    assert ident(env={**BASE_ENV, name: "one"}) == ident(env={**BASE_ENV, name: "two"}) == ident()


@pytest.mark.parametrize("name", DOCUMENTED_PATTERN_NAMES)
def test_variables_matching_a_per_session_pattern_are_left_out(name: str) -> None:
    assert ident(env={**BASE_ENV, name: "x"}) == ident()


@pytest.mark.parametrize(
    "name",
    ["DISPLAY", "WAYLAND_DISPLAY", "XAUTHORITY", "DBUS_SESSION_BUS_ADDRESS", "GIT_ASKPASS",
     "HOME", "LANG", "GITHUB_TOKEN", "NODE_OPTIONS", "VIRTUAL_ENV", "ELECTRON_RUN_AS_NODE",
     "term", "MY_VSCODE_THING", "XLAZYD_X"],
)
def test_variables_that_can_change_a_servers_behaviour_are_part_of_the_identity(name: str) -> None:
    assert ident(env={**BASE_ENV, name: "one"}) != ident(env={**BASE_ENV, name: "two"})


def test_users_can_extend_the_per_session_list_with_names_and_patterns() -> None:
    ignore = PER_SESSION_ENV | {"MY_TERMINAL_ID", "MYCO_SESSION_*"}
    a = ident(env={**BASE_ENV, "MY_TERMINAL_ID": "1", "MYCO_SESSION_X": "a"}, ignore=ignore)
    b = ident(env={**BASE_ENV, "MY_TERMINAL_ID": "2", "MYCO_SESSION_X": "b"}, ignore=ignore)
    assert a == b
    assert ident(env={**BASE_ENV, "MY_TERMINAL_ID": "1"}) != ident(env={**BASE_ENV, "MY_TERMINAL_ID": "2"})


def test_an_empty_ignore_list_makes_every_variable_count() -> None:
    assert ident(env={**BASE_ENV, "SHLVL": "1"}, ignore=()) != ident(env={**BASE_ENV, "SHLVL": "2"}, ignore=())


def test_the_environment_is_kept_sorted_so_insertion_order_does_not_matter() -> None:
    forward = ident(env=dict(sorted(BASE_ENV.items())))
    backward = ident(env=dict(sorted(BASE_ENV.items(), reverse=True)))
    assert forward == backward
    assert [name for name, _ in forward.env] == sorted(BASE_ENV)


# ---- never sharing ---------------------------------------------------------------------------


def test_a_different_token_gives_a_different_digest_that_does_not_contain_the_token() -> None:
    a = ident(env={**BASE_ENV, "GITHUB_TOKEN": TOKEN})
    b = ident(env={**BASE_ENV, "GITHUB_TOKEN": TOKEN + "X"})
    assert a.digest(SECRET) != b.digest(SECRET)
    assert a.readable_name(SECRET) != b.readable_name(SECRET)
    for shown in (a.digest(SECRET), b.digest(SECRET), a.readable_name(SECRET), b.readable_name(SECRET),
                  *explain_difference(a, b)):
        assert TOKEN not in shown
        assert TOKEN[:8] not in shown


@pytest.mark.parametrize(
    ("args_a", "args_b"),
    [
        (["1"], ['"1"']),
        (["a b"], ["a", "b"]),
        (["a", "b"], ["b", "a"]),
        (["--port=1"], ["--port", "1"]),
        ([], [""]),
        (["x"], ["x", ""]),
        (['a", "b'], ["a", "b"]),
    ],
)
def test_arguments_that_look_alike_are_still_different_identities(
    args_a: list[str], args_b: list[str]
) -> None:
    a, b = ident(["npx", *args_a]), ident(["npx", *args_b])
    assert a != b
    assert a.key_material() != b.key_material()
    assert a.digest(SECRET) != b.digest(SECRET)


def test_a_different_cwd_is_a_different_identity() -> None:
    a, b = ident(cwd="/home/u/a"), ident(cwd="/home/u/b")
    assert a.digest(SECRET) != b.digest(SECRET)
    assert explain_difference(a, b) == ["cwd differs: /home/u/a vs /home/u/b"]


def test_spellings_of_the_same_cwd_are_one_identity() -> None:
    assert ident(cwd="/home/u/src/") == ident(cwd="/home/u/./src") == ident(cwd="/home/u/x/../src")


def test_the_same_name_resolved_through_different_paths_is_a_different_identity() -> None:
    a = ident(env={**BASE_ENV, "PATH": "/opt/node/bin:/usr/bin"})
    b = ident(env={**BASE_ENV, "PATH": "/usr/bin:/bin"})
    assert a.argv[0] == "/opt/node/bin/npx"
    assert b.argv[0] == "/usr/bin/npx"
    assert "command differs: /opt/node/bin/npx vs /usr/bin/npx" in explain_difference(a, b)


def test_share_false_gives_each_session_its_own_identity() -> None:
    a, b = ident(instance="session-1"), ident(instance="session-2")
    assert a.digest(SECRET) != b.digest(SECRET)
    assert explain_difference(a, b) == ["share = false"]
    assert explain_difference(a, ident()) == ["share = false"]


# ---- command resolution ----------------------------------------------------------------------


def test_a_bare_command_is_resolved_with_the_registrations_own_path() -> None:
    seen: list[tuple[str, str | None]] = []

    def recording_which(command: str, path: str | None) -> str | None:
        seen.append((command, path))
        return "/usr/bin/npx"

    identity = identity_for(NPX_ARGV, "/w", {"PATH": "/a:/b"}, which=recording_which)
    assert identity.argv == ("/usr/bin/npx", "-y", "@modelcontextprotocol/server-github")
    assert seen[0] == ("npx", "/a:/b")


def test_without_a_path_in_the_registration_the_lookup_gets_none() -> None:
    seen: list[str | None] = []

    def recording_which(command: str, path: str | None) -> str | None:
        seen.append(path)
        return None

    identity_for(["npx"], "/w", {}, which=recording_which)
    assert seen == [None]


def test_an_unresolvable_command_keeps_its_given_name() -> None:
    assert ident(["no-such-server", "--x"]).argv == ("no-such-server", "--x")


def test_a_relative_command_is_resolved_against_the_cwd_without_a_path_lookup() -> None:
    def refusing_which(command: str, path: str | None) -> str | None:
        raise AssertionError("a path with a slash is not looked up in PATH")

    identity = identity_for(["./bin/server", "x"], "/home/u/proj", {}, which=refusing_which)
    assert identity.argv == ("/home/u/proj/bin/server", "x")
    absolute = identity_for(["/opt/s/../s/srv"], "/home/u/proj", {}, which=refusing_which)
    assert absolute.argv == ("/opt/s/srv",)


def test_a_relative_lookup_result_is_anchored_at_the_cwd() -> None:
    identity = identity_for(["srv"], "/home/u/proj", {"PATH": "bin"}, which=lambda c, p: "bin/srv")
    assert identity.argv == ("/home/u/proj/bin/srv",)


@pytest.mark.parametrize("argv", [[], [""], ("",)])
def test_an_empty_command_is_refused(argv: list[str]) -> None:
    with pytest.raises(ValueError, match="needs a command"):
        identity_for(argv, "/w", {}, which=which)


@pytest.mark.parametrize("cwd", ["", "relative/dir", "~/src"])
def test_a_cwd_that_is_not_absolute_is_refused(cwd: str) -> None:
    with pytest.raises(ValueError, match="absolute"):
        identity_for(["npx"], cwd, {}, which=which)


# ---- digest and key material -----------------------------------------------------------------


def test_the_digest_is_an_hmac_sha256_of_the_key_material_under_the_secret() -> None:
    identity = ident()
    expected = hmac.new(SECRET, identity.key_material(), hashlib.sha256).hexdigest()
    assert identity.digest(SECRET) == expected
    assert re.fullmatch(r"[0-9a-f]{64}", expected)


def test_the_digest_depends_on_the_per_user_secret() -> None:
    assert ident().digest(b"a" * 32) != ident().digest(b"b" * 32)


@pytest.mark.parametrize("secret", [b"", b"short", b"x" * (MIN_SECRET_BYTES - 1)])
def test_a_secret_too_short_to_hide_tokens_is_refused(secret: bytes) -> None:
    with pytest.raises(ValueError, match="at least"):
        ident().digest(secret)
    with pytest.raises(ValueError, match="at least"):
        ident().readable_name(secret)


def test_key_material_keeps_env_names_and_values_apart() -> None:
    a = Identity(argv=("x",), cwd="/", env=(("A", "B=C"),))
    b = Identity(argv=("x",), cwd="/", env=(("A=B", "C"),))
    assert a.key_material() != b.key_material()


def test_key_material_is_defined_for_undecodable_environment_bytes() -> None:
    # os.environ carries bytes that are not UTF-8 as lone surrogates.
    identity = Identity(argv=("x",), cwd="/", env=(("A", "caf\udce9"),))
    assert identity.key_material().isascii()
    assert identity.digest(SECRET) != Identity(argv=("x",), cwd="/", env=(("A", "caf\udce8"),)).digest(SECRET)


def test_the_digest_of_an_identity_is_stable_across_runs() -> None:
    # A changed encoding would orphan every cache file; bump the format version on purpose.
    identity = Identity(argv=("/usr/bin/npx", "-y", "pkg"), cwd="/home/u", env=(("A", "1"),))
    assert identity.key_material() == (
        b'{"argv":["/usr/bin/npx","-y","pkg"],"cwd":"/home/u","env":[["A","1"]],"instance":"","v":1}'
    )


# ---- readable names --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "base"),
    [
        (["npx", "-y", "@modelcontextprotocol/server-everything"], "server-everything"),
        (["python3", "/x/fixture_server.py"], "fixture_server"),
        (["uvx", "mcp-server-time"], "mcp-server-time"),
        (["npx", "-y", "@modelcontextprotocol/server-everything@2025.1.14"], "server-everything"),
        (["uvx", "mcp-server-fetch==1.2"], "mcp-server-fetch"),
        (["uv", "tool", "run", "--from", "git+https://x/y.git", "mcp-x"], "mcp-x"),
        (["uvx", "--from", "git+https://github.com/o/tools.git", "tool-a"], "tool-a"),
        (["pipx", "run", "mcp-server-git"], "mcp-server-git"),
        (["python3.11", "-m", "mcp_server_time", "--local-timezone", "UTC"], "mcp_server_time"),
        (["python", "-c", "print(1)"], "python"),
        (["node", "/p/github-server/dist/index.js"], "github-server"),
        # A script in node_modules is named after its package (its file name says nothing).
        (["node", "/u/node_modules/task-master-ai/dist/mcp-server.js"], "task-master-ai"),
        (["node", "/u/node_modules/@cyanheads/git-mcp-server/dist/index.js"], "git-mcp-server"),
        (["/u/node_modules/task-master-ai/dist/mcp-server.js"], "task-master-ai"),
        (["/u/node_modules/.bin/task-master-ai"], "task-master-ai"),
        (["node", "--require", "hook.js", "srv.mjs"], "srv"),
        (["bun", "run", "server.ts"], "server"),
        (["bunx", "@scope/thing@latest"], "thing"),
        (["pnpm", "dlx", "@a/b@2"], "b"),
        (["yarn", "dlx", "some-mcp"], "some-mcp"),
        (["deno", "run", "-A", "jsr:@scope/pkg@1.0"], "pkg"),
        (["docker", "run", "-i", "--rm", "-e", "GITHUB_TOKEN", "ghcr.io/github/github-mcp-server:latest"],
         "github-mcp-server"),
        (["docker", "run", "-i", "--rm", "mcp/time@sha256:abc"], "time"),
        (["npx"], "npx"),
        (["/usr/local/bin/mcp-server-git", "--repo", "."], "mcp-server-git"),
        (["/opt/acme-mcp/bin/server"], "acme-mcp"),
        (["./run.sh"], "run"),
    ],
)
def test_readable_names_come_from_the_package_or_script_a_command_runs(argv: list[str], base: str) -> None:
    identity = ident(argv)
    name = identity.readable_name(SECRET)
    assert name == f"{base}-{identity.digest(SECRET)[:6]}"


def test_a_readable_name_never_shows_a_token_passed_as_an_argument() -> None:
    name = ident(["docker", "run", "-e", f"TOKEN={TOKEN}", "img"]).readable_name(SECRET)
    assert TOKEN not in name
    assert name.startswith("img-")


@settings(max_examples=300, derandomize=True)
@given(st.lists(st.text(min_size=1), min_size=1, max_size=5))
def test_a_readable_name_is_always_safe_as_a_file_name(argv: list[str]) -> None:
    name = Identity(argv=tuple(argv), cwd="/", env=()).readable_name(SECRET)
    assert re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9._-]*-[0-9a-f]{6}", name)
    assert len(name) <= 40 + 7


@settings(max_examples=200, derandomize=True)
@given(st.dictionaries(st.sampled_from(DOCUMENTED_PER_SESSION + DOCUMENTED_PATTERN_NAMES),
                       st.text(alphabet=string.printable)))
def test_any_values_of_per_session_variables_leave_the_digest_unchanged(extra: dict[str, str]) -> None:
    assert ident(env={**BASE_ENV, **extra}).digest(SECRET) == ident().digest(SECRET)


# ---- explanations ----------------------------------------------------------------------------


def test_equal_identities_have_nothing_to_explain() -> None:
    assert explain_difference(ident(), ident()) == []


def test_each_kind_of_difference_gets_its_own_reason_in_a_fixed_order() -> None:
    a = identity_for(["npx", "-y", "pkg-a"], "/a", {"PATH": "/usr/bin", "GITHUB_TOKEN": "one",
                                                    "FOO": "x"}, which=which)
    b = identity_for(["uvx", "-y", "pkg-b"], "/b", {"PATH": "/usr/bin", "GITHUB_TOKEN": "two",
                                                    "BAR": "y"}, which=which, instance="s1")
    assert explain_difference(a, b) == [
        "command differs: /usr/bin/npx vs /home/u/.local/bin/uvx",
        "args differ (argument 2)",
        "cwd differs: /a vs /b",
        "env BAR only in one (other)",
        "env FOO only in one (other)",
        "env GITHUB_TOKEN differs (credential, values hidden)",
        "share = false",
    ]


def test_a_different_number_of_arguments_is_explained_by_the_counts() -> None:
    assert explain_difference(ident(["npx", "a"]), ident(["npx", "a", "b"])) == [
        "args differ (1 vs 2 arguments)"
    ]


def test_explanations_never_print_env_values_or_argument_values() -> None:
    a = ident(["npx", "--token", "argsecret-1"], env={**BASE_ENV, "API_KEY": "envsecret-1"})
    b = ident(["npx", "--token", "argsecret-2"], env={**BASE_ENV, "API_KEY": "envsecret-2",
                                                       "EXTRA": "envsecret-3"})
    text = "\n".join(explain_difference(a, b))
    assert "args differ" in text and "env API_KEY differs (credential, values hidden)" in text
    assert "env EXTRA only in one" in text
    assert "secret" not in text


# ---- search paths count by what they resolve -------------------------------------------------


def codex_like_which(command: str, path: str | None) -> str | None:
    """A file system where /usr/bin holds python3, node and npx, /opt/node22/bin another node, and
    Codex's own directories hold only its helpers (rg, apply_patch)."""
    for directory in (path or "/usr/bin").split(":"):
        if (directory, command) in {("/usr/bin", "python3"), ("/usr/bin", "node"), ("/usr/bin", "npx"),
                                    ("/opt/node22/bin", "node"), ("/opt/codex/vendor/codex-path", "rg")}:
            return f"{directory}/{command}"
    return None


def test_a_directory_a_client_prepends_to_path_does_not_split_when_it_changes_nothing_that_runs() -> None:
    # Codex 0.171 puts its vendor directory first, and a new random arg0 directory on some runs.
    shell = identity_for(["python3", "server.py"], "/w", {"PATH": "/usr/bin:/bin"}, which=codex_like_which)
    codex = identity_for(["python3", "server.py"], "/w",
                         {"PATH": "/home/u/.codex/tmp/arg0-linux/codex-arg0Xa1b2c:/opt/codex/vendor/codex-path:/usr/bin:/bin"},
                         which=codex_like_which)
    again = identity_for(["python3", "server.py"], "/w",
                         {"PATH": "/home/u/.codex/tmp/arg0-linux/codex-arg0Zz9y8x:/opt/codex/vendor/codex-path:/usr/bin:/bin"},
                         which=codex_like_which)
    assert shell == codex == again
    assert shell.digest(SECRET) == again.digest(SECRET)
    assert explain_difference(shell, codex) == []


def test_a_path_that_resolves_the_command_elsewhere_is_another_identity() -> None:
    a = identity_for(["node", "server.js"], "/w", {"PATH": "/usr/bin"}, which=codex_like_which)
    b = identity_for(["node", "server.js"], "/w", {"PATH": "/opt/node22/bin:/usr/bin"}, which=codex_like_which)
    assert a != b
    assert explain_difference(a, b) == ["command differs: /usr/bin/node vs /opt/node22/bin/node"]


def test_a_path_that_changes_the_interpreter_a_launcher_runs_is_another_identity() -> None:
    # npx is found in /usr/bin either way, but the node it runs its package with is not.
    a = identity_for(["npx", "-y", "pkg"], "/w", {"PATH": "/usr/bin"}, which=codex_like_which)
    b = identity_for(["npx", "-y", "pkg"], "/w", {"PATH": "/opt/node22/bin:/usr/bin"}, which=codex_like_which)
    assert a.argv == b.argv == ("/usr/bin/npx", "-y", "pkg")
    assert a != b
    assert explain_difference(a, b) == ["env PATH resolves differently: node is /usr/bin/node vs /opt/node22/bin/node"]


def test_a_path_that_changes_the_interpreter_of_an_env_shebang_script_is_another_identity() -> None:
    def shebang(path: str) -> str | None:
        return "node" if path == "/srv/mcp/server.js" else None

    a = identity_for(["/srv/mcp/server.js"], "/w", {"PATH": "/usr/bin"}, which=codex_like_which, interpreter=shebang)
    b = identity_for(["/srv/mcp/server.js"], "/w", {"PATH": "/opt/node22/bin:/usr/bin"}, which=codex_like_which,
                     interpreter=shebang)
    c = identity_for(["/srv/mcp/server.js"], "/w", {"PATH": "/opt/codex/vendor/codex-path:/usr/bin"},
                     which=codex_like_which, interpreter=shebang)
    assert a != b and a == c


def test_a_path_the_registration_declares_or_the_user_forces_counts_by_value() -> None:
    a = {"PATH": "/opt/codex/vendor/codex-path:/usr/bin"}
    b = {"PATH": "/usr/bin"}
    assert identity_for(["python3"], "/w", a, which=codex_like_which) == identity_for(["python3"], "/w", b, which=codex_like_which)
    assert (identity_for(["python3"], "/w", a, which=codex_like_which, declared=["PATH"])
            != identity_for(["python3"], "/w", b, which=codex_like_which, declared=["PATH"]))
    assert (identity_for(["python3"], "/w", a, which=codex_like_which, force=["PA*"])
            != identity_for(["python3"], "/w", b, which=codex_like_which, force=["PA*"]))


def test_a_registration_without_any_path_is_not_one_with_a_path_since_its_server_finds_nothing_on_it() -> None:
    assert (identity_for(["/usr/bin/python3", "s.py"], "/w", {}, which=codex_like_which)
            != identity_for(["/usr/bin/python3", "s.py"], "/w", {"PATH": "/usr/bin"}, which=codex_like_which))


# ---- what the per-run learner sees, and the duplicates it exposes ---------------------------------


def test_the_learner_is_offered_only_variables_that_count_for_no_stated_reason() -> None:
    env = {"PATH": "/usr/bin", "OPENCODE_PID": "8110", "API_TOKEN": "t", "MINE": "declared", "FORCED_X": "f",
           "TERM": "xterm", "AGENT": "1"}
    identity = identity_for(["python3", "s.py"], "/w", env, which=codex_like_which, declared=["MINE"], force=["FORCED_*"])
    # PATH counts by what it resolves, MINE is declared, FORCED_X forced, TERM per-session.
    assert counted_for_learning(identity, env) == {"OPENCODE_PID": "8110", "API_TOKEN": "t", "AGENT": "1"}


def test_a_runtime_that_differs_only_by_a_learned_variable_is_a_duplicate_and_the_identity_itself_is_not() -> None:
    first_run = identity_for(["python3", "s.py"], "/w", {"OPENCODE_PID": "8110", "AGENT": "1"}, which=codex_like_which)
    learned = identity_for(["python3", "s.py"], "/w", {"OPENCODE_PID": "8235", "AGENT": "1"}, which=codex_like_which,
                           ignore=("OPENCODE_PID",))
    elsewhere = identity_for(["python3", "s.py"], "/x", {"OPENCODE_PID": "8110", "AGENT": "1"}, which=codex_like_which)
    other_agent = identity_for(["python3", "s.py"], "/w", {"OPENCODE_PID": "8110", "AGENT": "2"}, which=codex_like_which)
    assert same_without(first_run, learned, {"OPENCODE_PID"})
    assert not same_without(learned, learned, {"OPENCODE_PID"})
    assert not same_without(elsewhere, learned, {"OPENCODE_PID"})
    assert not same_without(other_agent, learned, {"OPENCODE_PID"})


def test_the_documented_table_of_per_session_variables_is_the_codes_list() -> None:
    text = (Path(__file__).parents[2] / "docs" / "configuration.md").read_text()
    table = text.split("### The built-in per-session variables", 1)[1].split("Deliberately **not** ignored", 1)[0]
    rows = [line.split("|")[2] for line in table.splitlines() if line.startswith("| ") and "`" in line]
    documented = {name for row in rows for name in re.findall(r"`([^`]+)`", row)}
    assert documented == PER_SESSION_ENV
    assert {*DOCUMENTED_PER_SESSION} < documented  # the literal cases above are the table's
