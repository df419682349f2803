"""Which inherited variables split an identity (lazyd/core/sharing/envrules.py, through identity_for), and
what each client gives a server (lazyd/core/sharing/client_profiles.py).

The environments are the ones seen with the real clients: Claude Code 2.1.332 adds its session
variables to the user's, Gemini CLI 0.61.0 strips tokens and CA bundles, Codex keeps a handful.
"""

from __future__ import annotations

import pytest

from lazyd.core.sharing.client_profiles import PROFILES, codex_environment, gemini_environment, profile_for_client_info
from lazyd.core.sharing.envrules import PER_SESSION_ENV, classify, counts
from lazyd.envnames import parse_names
from lazyd.core.sharing.identity import explain_difference, identity_for

SHELL = {"HOME": "/home/u", "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "USER": "u", "SHELL": "/bin/bash",
         "GITHUB_TOKEN": "ghp_planted-secret-value", "SSL_CERT_FILE": "/etc/ssl/ca.pem",
         "NODE_EXTRA_CA_CERTS": "/etc/ssl/ca.pem", "HTTPS_PROXY": "http://proxy:3128",
         "AWS_PROFILE": "work", "XDG_RUNTIME_DIR": "/run/user/1000", "TERM": "xterm-256color"}
# What Claude Code 2.1.332 added to a stdio server's environment in one `claude mcp list` run.
CLAUDE_RUN = {"AI_AGENT": "claude-code_2-1-332_harness", "CLAUDECODE": "1",
              "CLAUDE_CODE_CHILD_NOTES_DIR": "/tmp/claude-0/-p/0b1c", "CLAUDE_CODE_ENTRYPOINT": "sdk-cli",
              "CLAUDE_CODE_LAUNCHED_BY_SESSION_IDS": "0b1c", "CLAUDE_CODE_SESSION_ID": "0b1c",
              "CLAUDE_PROJECT_DIR": "/home/u/p", "COREPACK_ENABLE_AUTO_PIN": "0",
              "NoDefaultCurrentDirectoryInExePath": "1", "OLDPWD": "/home/u"}
NPM_RUN = {"npm_lifecycle_event": "npx", "npm_package_name": "x", "npm_config_user_agent": "npm/10",
           "npm_config_local_prefix": "/home/u/p", "INIT_CWD": "/home/u/p", "NODE": "/usr/bin/node",
           "npm_execpath": "/usr/lib/npm"}


def which(command: str, path: str | None) -> str | None:
    return {"npx": "/usr/bin/npx"}.get(command)


def ident(env: dict[str, str], **kwargs: object) -> object:
    return identity_for(["npx", "-y", "server"], "/home/u/p", env, which=which, **kwargs)  # type: ignore[arg-type]


def claude_run(session: str) -> dict[str, str]:
    return {**SHELL, **CLAUDE_RUN, "CLAUDE_CODE_SESSION_ID": session, "CLAUDE_CODE_LAUNCHED_BY_SESSION_IDS": session,
            "CLAUDE_CODE_CHILD_NOTES_DIR": f"/tmp/claude-0/-p/{session}"}


def test_three_claude_code_runs_and_the_users_shell_have_one_identity() -> None:
    runs = [ident(claude_run(s)) for s in ("0b1c", "77aa", "e3f0")]
    assert runs[0] == runs[1] == runs[2] == ident(SHELL)


def test_gemini_cli_markers_and_npm_launcher_context_never_split() -> None:
    assert ident({**SHELL, "GEMINI_CLI": "1", "GEMINI_CLI_NO_RELAUNCH": "true", **NPM_RUN}) == ident(SHELL)


@pytest.mark.parametrize("name", ["GITHUB_TOKEN", "SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS", "HTTPS_PROXY",
                                  "AWS_PROFILE", "HOME", "XDG_RUNTIME_DIR", "SOME_UNKNOWN_SETTING"])
def test_credentials_settings_and_unknown_variables_split_by_value_and_by_presence(name: str) -> None:
    changed = {**SHELL, name: "another value"}
    absent = {k: v for k, v in {**SHELL, name: "x"}.items() if k != name}
    assert ident(changed) != ident({**SHELL, name: "x"})
    assert ident(absent) != ident({**SHELL, name: "x"})


def test_a_credential_in_npm_launcher_context_still_counts() -> None:
    token = "npm_config__authToken"
    assert counts(token, ignore=PER_SESSION_ENV) and not counts("npm_package_name", ignore=PER_SESSION_ENV)
    assert ident({**SHELL, token: "a"}) != ident({**SHELL, token: "b"})
    assert ident({**SHELL, "npm_config_registry": "https://a"}) != ident({**SHELL, "npm_config_registry": "https://b"})


def test_declared_and_forced_variables_count_even_when_they_are_per_session_noise() -> None:
    a, b = {**SHELL, "TERM": "dumb"}, {**SHELL, "TERM": "xterm"}
    assert ident(a) == ident(b)
    assert ident(a, declared=["TERM"]) != ident(b, declared=["TERM"])
    assert ident(a, force=["TER*"]) != ident(b, force=["TER*"])


def test_user_per_session_names_never_count_but_a_declared_one_still_does() -> None:
    a, b = {**SHELL, "MY_ID": "1"}, {**SHELL, "MY_ID": "2"}
    ignore = (*PER_SESSION_ENV, "MY_*")
    assert ident(a, ignore=ignore) == ident(b, ignore=ignore)
    assert ident(a, ignore=ignore, declared=["MY_ID"]) != ident(b, ignore=ignore, declared=["MY_ID"])


def test_explanations_name_each_variables_class_and_never_a_value() -> None:
    a = ident({**SHELL, "DECL": "planted-1"}, declared=["DECL"])
    b = ident({**{k: v for k, v in SHELL.items() if k != "SSL_CERT_FILE"}, "GITHUB_TOKEN": "planted-2",
               "DECL": "planted-3", "ODD": "planted-4"}, declared=["DECL"])
    reasons = explain_difference(a, b)  # type: ignore[arg-type]
    assert reasons == ["env DECL differs (declared, values hidden)", "env GITHUB_TOKEN differs (credential, values hidden)",
                       "env ODD only in one (other)", "env SSL_CERT_FILE only in one (setting)"]
    assert "planted" not in "".join(reasons) and "ghp_" not in "".join(reasons)


@pytest.mark.parametrize(("name", "kind"), [("GITHUB_TOKEN", "credential"), ("OPENAI_API_KEY", "credential"),
                                            ("DATABASE_URL", "credential"), ("SSL_CERT_FILE", "setting"),
                                            ("KUBECONFIG", "setting"), ("AWS_REGION", "setting"),
                                            ("https_proxy", "setting"), ("FAVOURITE_COLOUR", "other")])
def test_variables_are_classed_by_their_names(name: str, kind: str) -> None:
    assert classify(name) == kind


@pytest.mark.parametrize("text", ["", "A,,B", "A=1", "A B", " , "])
def test_a_list_of_names_with_an_empty_or_malformed_entry_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a variable name"):
        parse_names(text)


def test_a_list_of_names_keeps_patterns_and_drops_repeats() -> None:
    assert parse_names("A, B_*,A") == ("A", "B_*")


# ---- what each client gives a stdio server -------------------------------------------------------


def test_gemini_strips_inherited_tokens_and_ca_bundles_but_keeps_declared_ones_and_adds_its_marker() -> None:
    env = gemini_environment({**SHELL, "GEMINI_CLI_IDE_PORT": "1", "GIT_CONFIG_GLOBAL": "/g",
                              "PLAIN": "ghp_" + "a" * 36}, {"GITHUB_TOKEN": "declared", "NODE_OPTIONS": "-r x"})
    assert "SSL_CERT_FILE" not in env and "NODE_EXTRA_CA_CERTS" not in env
    assert env["GITHUB_TOKEN"] == "declared" and "NODE_OPTIONS" not in env
    assert env["GEMINI_CLI"] == "1" and env["GEMINI_CLI_IDE_PORT"] == "1" and env["GIT_CONFIG_GLOBAL"] == "/g"
    assert "PLAIN" not in env  # a value that looks like a GitHub token goes, whatever its name
    assert env["HTTPS_PROXY"] == SHELL["HTTPS_PROXY"] and env["PATH"] == SHELL["PATH"]


def test_gemini_in_github_actions_passes_only_its_always_allowed_variables() -> None:
    env = gemini_environment({**SHELL, "GITHUB_SHA": "abc"}, {})
    assert set(env) == {"GEMINI_CLI", "HOME", "PATH", "LANG", "USER", "SHELL", "TERM"}


def test_codex_passes_only_its_allow_list_its_ca_bundles_and_the_registrations_env() -> None:
    env = codex_environment({**SHELL, "TZ": "UTC"}, {"API_KEY": "k"})
    assert env == {"HOME": "/home/u", "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "USER": "u",
                   "SHELL": "/bin/bash", "TERM": "xterm-256color", "TZ": "UTC", "API_KEY": "k",
                   "SSL_CERT_FILE": "/etc/ssl/ca.pem", "NODE_EXTRA_CA_CERTS": "/etc/ssl/ca.pem"}
    assert "XDG_RUNTIME_DIR" not in env


def test_codex_passes_the_names_a_registration_lists_in_env_vars() -> None:
    env = codex_environment({**SHELL, "AWS_PROFILE": "work"}, {}, ("AWS_PROFILE", "NOT_SET_HERE"))
    assert env["AWS_PROFILE"] == "work" and "NOT_SET_HERE" not in env and "GITHUB_TOKEN" not in env


def test_a_gemini_session_and_a_gemini_check_from_the_shell_have_one_identity() -> None:
    session = {**gemini_environment(SHELL, {}), "GEMINI_CLI_NO_RELAUNCH": "true"}
    assert ident(session) == ident(PROFILES["gemini"].environment(SHELL, {}, ()))
    assert ident(session) != ident(SHELL)  # the shell has the token and CA bundles Gemini drops


def test_sessions_are_attributed_to_their_client_by_the_name_they_give() -> None:
    assert profile_for_client_info("claude-code") is PROFILES["claude"]
    assert profile_for_client_info("gemini-cli-mcp-client") is PROFILES["gemini"]
    assert profile_for_client_info("mcp") is None
