"""Which inherited variables split an identity (lazyd/core/sharing/envrules.py, through identity_for), and
what each client gives a server (lazyd/core/sharing/client_profiles.py).

The environments are the ones seen with the real clients: Claude Code 2.1.332 adds its session
variables to the user's, Gemini CLI 0.61.0 strips tokens and CA bundles, Codex keeps a handful.
"""

from __future__ import annotations

import pytest

from lazyd.core.sharing.client_profiles import (
    PROFILES,
    amp_environment,
    codex_environment,
    continue_environment,
    copilot_environment,
    gemini_environment,
    kilo_environment,
)
from lazyd.core.sharing.envrules import PER_SESSION_ENV, classify, counts
from lazyd.config.envnames import parse_names
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


@pytest.mark.parametrize(("name", "kind"), [("GIT_CONFIG_COUNT", "setting"), ("GIT_CONFIG_KEY_0", "setting"),
                                            ("GIT_CONFIG_KEY_12", "setting"), ("GIT_CONFIG_VALUE_0", "credential"),
                                            ("GIT_CONFIG_PARAMETERS", "credential"), ("GIT_CONFIG_GLOBAL", "setting")])
def test_git_settings_from_the_environment_are_named_as_git_reads_them(name: str, kind: str) -> None:
    # git reads GIT_CONFIG_KEY_n as a setting's name (`safe.bareRepository`) and GIT_CONFIG_VALUE_n
    # as that setting's value, which may be a token (`http.extraHeader: Authorization: ...`).
    assert classify(name) == kind


def test_a_git_settings_value_is_never_learned_as_noise_and_its_name_is_no_credential() -> None:
    from lazyd.core.sharing.envrules import is_credential_name, is_setting_name
    assert not is_credential_name("GIT_CONFIG_KEY_0") and is_setting_name("GIT_CONFIG_KEY_0")
    assert is_credential_name("GIT_CONFIG_VALUE_0")


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


# What Copilot CLI 1.0.102, Kilo 7.7.7, cn 1.5.47 and Amp gave a stdio server (a tee's record of
# its environment, the shell's being SHELL plus the names below).
COPILOT_RUN = {"COPILOT_AGENT_SESSION_ID": "d8beecc6-24cc-4447-aa81-a0fa796e1111",
               "COPILOT_CLI_BINARY_VERSION": "1.0.102",
               "COPILOT_CLI_RESOLVED_DIST_DIR": "/home/u/.cache/copilot/pkg/linux-x64/1.0.102",
               "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "safe.bareRepository", "GIT_CONFIG_VALUE_0": "explicit",
               "PYTHONUNBUFFERED": "1"}
KILO_RUN = {"AGENT": "1", "OPENCODE": "1", "KILO": "1", "KILOCODE_FEATURE": "cli", "KILOCODE_VERSION": "7.7.7",
            "KILO_PROCESS_ROLE": "main", "KILO_PID": "14751", "KILO_RUN_ID": "468b4350-95a6-4b4c-8558-dd8459f43dcd"}


def test_a_copilot_session_and_a_copilot_check_from_the_shell_have_one_identity() -> None:
    shell = {k: v for k, v in SHELL.items() if k != "GITHUB_TOKEN"}  # Copilot keeps GITHUB_TOKEN
    env = copilot_environment(shell, {})
    assert {k: env[k] for k in COPILOT_RUN if k in env} == {k: v for k, v in COPILOT_RUN.items()
                                                              if not k.startswith(("COPILOT_AGENT", "COPILOT_CLI"))}
    assert ident({**shell, **COPILOT_RUN}) == ident(PROFILES["copilot"].environment(SHELL, {}, ()))
    assert ident({**shell, **COPILOT_RUN}) == ident({**shell, **COPILOT_RUN, "COPILOT_AGENT_SESSION_ID": "other"})
    upgraded = {**COPILOT_RUN, "COPILOT_CLI_BINARY_VERSION": "1.0.103",
                "COPILOT_CLI_RESOLVED_DIST_DIR": "/home/u/.cache/copilot/pkg/linux-x64/1.0.103"}
    assert ident({**shell, **COPILOT_RUN}) == ident({**shell, **upgraded})


def test_copilot_keeps_its_provider_settings_and_sign_in_tokens_from_servers_but_not_gh_token() -> None:
    env = copilot_environment({**SHELL, "COPILOT_OFFLINE": "true", "COPILOT_PROVIDER_BASE_URL": "http://127.0.0.1:1",
                               "COPILOT_PROVIDER_API_KEY": "k", "COPILOT_MODEL": "gpt-4", "GH_TOKEN": "g"},
                              {"GITHUB_TOKEN": "declared"})
    assert not {"COPILOT_OFFLINE", "COPILOT_PROVIDER_BASE_URL", "COPILOT_PROVIDER_API_KEY"} & set(env)
    assert env["GITHUB_TOKEN"] == "declared" and env["GH_TOKEN"] == "g" and env["COPILOT_MODEL"] == "gpt-4"


def test_copilot_appends_its_git_setting_after_the_users_and_keeps_their_pythonunbuffered() -> None:
    env = copilot_environment({**SHELL, "XDG_CACHE_HOME": "/c", "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "user.name",
                               "GIT_CONFIG_VALUE_0": "me", "PYTHONUNBUFFERED": "0"}, {})
    assert (env["GIT_CONFIG_COUNT"], env["GIT_CONFIG_KEY_0"], env["GIT_CONFIG_KEY_1"], env["GIT_CONFIG_VALUE_1"]) == \
        ("2", "user.name", "safe.bareRepository", "explicit")
    assert env["PYTHONUNBUFFERED"] == "0"


def test_kilo_sessions_of_two_runs_and_a_kilo_check_have_one_identity() -> None:
    second = {**KILO_RUN, "KILO_PID": "20001", "KILO_RUN_ID": "0f00"}
    assert ident({**SHELL, **KILO_RUN}) == ident({**SHELL, **second})
    assert ident({**SHELL, **KILO_RUN}) == ident(kilo_environment(SHELL, {}))


def test_cn_drops_inherited_variables_with_an_empty_value_but_not_declared_ones() -> None:
    env = continue_environment({**SHELL, "NODE_OPTIONS": "", "EMPTY": ""}, {"DECLARED_EMPTY": ""})
    assert "NODE_OPTIONS" not in env and "EMPTY" not in env and env["DECLARED_EMPTY"] == ""
    assert env["GITHUB_TOKEN"] == SHELL["GITHUB_TOKEN"]


def test_amp_withholds_its_own_key_and_sets_aws_vault_prompt_over_the_registrations() -> None:
    env = amp_environment({**SHELL, "AMP_API_KEY": "k", "AMP_URL": "http://127.0.0.1:9"}, {"AWS_VAULT_PROMPT": "terminal"})
    assert "AMP_API_KEY" not in env and env["AMP_URL"] == "http://127.0.0.1:9"
    assert env["AWS_VAULT_PROMPT"] == "stdout" and env["GITHUB_TOKEN"] == SHELL["GITHUB_TOKEN"]


@pytest.mark.parametrize(("client_name", "profile", "version", "caps"), [
    ("copilot-cli", "copilot", "2025-11-25", {"sampling": {}, "elicitation": {"form": {}, "url": {}}}),
    ("kilo", "kilo", "2025-11-25", {"roots": {}}),
    ("continue-cli-client", "continue", "2025-11-25", {}),
    ("amp-mcp-client", "amp", "2025-11-25", {}),
])
def test_the_new_clients_handshakes_are_built_in_as_captured(client_name: str, profile: str, version: str,
                                                             caps: dict[str, object]) -> None:
    found = PROFILES[profile]
    assert client_name in found.client_names and found.builtin is not None
    assert found.builtin["protocolVersion"] == version and found.builtin["capabilities"] == caps
    assert found.builtin["clientInfo"]["name"] == client_name
