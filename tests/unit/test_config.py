"""The config file and shim options (lazyd/config/load.py).

Policy for these tests: every refusal is checked for its whole shape, exactly one line that
names the file, the key path and the problem, because that line is the entire user interface of a
bad config. File trust is tested on real files with real modes and owners.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from lazyd.config.load import (
    Config,
    Policy,
    ServerConfig,
    WakePredicate,
    load_config,
    parse_config_text,
    policy_with_options,
)
from lazyd.errors import ConfigError
from lazyd.core.sharing.envrules import PER_SESSION_ENV

SOURCE = Path("/home/u/.config/lazyd/config.toml")
ENVIRON = {"HOME": "/home/u", "GITHUB_TOKEN": "ghp_abc", "EMPTY": ""}
DOCS = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"

MINIMAL_SERVER = '[servers.s]\ncommand = "srv"\n'


def parse(text: str, environ: dict[str, str] | None = None) -> Config:
    return parse_config_text(text, ENVIRON if environ is None else environ, SOURCE)


def refusal(text: str, environ: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as caught:
        parse(text, environ)
    message = str(caught.value)
    assert "\n" not in message and "\r" not in message
    return message


# ---- the documented example ------------------------------------------------------------------


def docs_example() -> str:
    text = DOCS.read_text()
    start = text.index("```toml\n", text.index("## A full example")) + len("```toml\n")
    return text[start:text.index("\n```", start)]


def test_the_full_example_in_the_docs_parses_to_the_documented_values() -> None:
    config = parse(docs_example())
    assert config.defaults == Policy(start_timeout_s=60.0, linger_s=600.0, idle_timeout_s=None,
                                     keep_alive=False, start="lazy", share="auto", wake=None)
    assert config.extra_per_session_env == frozenset({"MY_TERMINAL_ID"})
    assert config.sampling_policy == "refuse"
    assert config.source == SOURCE
    github = config.servers["github"]
    assert github == ServerConfig(
        name="github", command="npx", args=("-y", "@modelcontextprotocol/server-github"),
        env={"GITHUB_TOKEN": "ghp_abc"}, cwd="/home/u/src",
        policy=Policy(linger_s=1800.0, wake=WakePredicate(("/usr/local/bin/needs-work",), 5.0, 1.0)),
    )
    time = config.servers["time"]
    assert time.policy.start == "eager" and time.policy.keep_alive
    assert list(config.servers) == ["github", "time"]


def test_the_docs_mention_every_key_and_every_per_session_variable() -> None:
    text = DOCS.read_text()
    keys = ["start_timeout", "linger", "check_linger", "--check-linger", "idle_timeout", "keep_alive", "start", "share", "wake",
            "per_session_env", "sampling_policy", "command", "args", "env", "cwd", "interval",
            "timeout", "--linger", "--idle-timeout", "--start-timeout", "--share", "--wake-command",
            "--wake-interval", "--wake-timeout", "era", "--era"]
    for word in [*keys, *PER_SESSION_ENV]:
        assert f"`{word}`" in text, word


# ---- values ----------------------------------------------------------------------------------


def test_an_empty_file_is_the_built_in_defaults() -> None:
    config = parse("")
    assert config == Config(source=SOURCE)
    assert config.defaults == Policy()
    assert Policy() == Policy(start_timeout_s=60.0, linger_s=600.0, idle_timeout_s=None,
                              keep_alive=False, start="lazy", share="auto", wake=None)


def test_durations_may_be_strings_or_bare_numbers_of_seconds() -> None:
    config = parse('[defaults]\nlinger = 30\nstart_timeout = 2.5\nidle_timeout = "1h30m"\n')
    assert (config.defaults.linger_s, config.defaults.start_timeout_s) == (30.0, 2.5)
    assert config.defaults.idle_timeout_s == 5400.0


@pytest.mark.parametrize("value", ['"0"', "0", '"0s"', "0.0"])
def test_an_idle_timeout_of_zero_means_off(value: str) -> None:
    assert parse(f"[defaults]\nidle_timeout = {value}\n").defaults.idle_timeout_s is None


def test_a_linger_of_zero_is_allowed() -> None:
    assert parse('[defaults]\nlinger = "0"\n').defaults.linger_s == 0.0


def test_check_linger_is_30_s_by_default_and_set_like_linger_in_defaults_servers_and_shim_options() -> None:
    assert Policy().check_linger_s == 30.0
    config = parse('[defaults]\ncheck_linger = "10s"\n[servers.a]\ncommand = "a"\n'
                   '[servers.b]\ncommand = "b"\ncheck_linger = 0\n')
    assert config.defaults.check_linger_s == 10.0
    assert (config.servers["a"].policy.check_linger_s, config.servers["b"].policy.check_linger_s) == (10.0, 0.0)
    assert policy_with_options(config.defaults, {"check_linger": "2s"}).check_linger_s == 2.0


def test_a_bad_check_linger_in_the_file_is_one_line_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"defaults\.check_linger: 'soon' is not a duration"):
        parse('[defaults]\ncheck_linger = "soon"\n')


def test_servers_inherit_defaults_and_override_them_key_by_key() -> None:
    config = parse('[defaults]\nlinger = "1m"\nshare = false\nstart = "eager"\n'
                   '[servers.a]\ncommand = "a"\n[servers.b]\ncommand = "b"\nlinger = "2m"\n')
    assert config.servers["a"].policy == Policy(linger_s=60.0, share=False, start="eager")
    assert config.servers["b"].policy == Policy(linger_s=120.0, share=False, start="eager")


def test_a_servers_keep_alive_turns_off_an_idle_timeout_inherited_from_defaults() -> None:
    config = parse('[defaults]\nidle_timeout = "5m"\n[servers.s]\ncommand = "s"\nkeep_alive = true\n')
    assert config.servers["s"].policy.keep_alive is True
    assert config.servers["s"].policy.idle_timeout_s is None


def test_a_servers_idle_timeout_turns_off_a_keep_alive_inherited_from_defaults() -> None:
    config = parse('[defaults]\nkeep_alive = true\n[servers.s]\ncommand = "s"\nidle_timeout = "5m"\n')
    assert config.servers["s"].policy.keep_alive is False
    assert config.servers["s"].policy.idle_timeout_s == 300.0


def test_keep_alive_with_an_idle_timeout_of_zero_is_no_conflict() -> None:
    assert parse('[defaults]\nkeep_alive = true\nidle_timeout = "0"\n').defaults.keep_alive


def test_a_wake_predicate_in_defaults_is_inherited_and_false_opts_out() -> None:
    config = parse('[defaults]\nwake = { command = ["w"] }\n'
                   '[servers.a]\ncommand = "a"\n[servers.b]\ncommand = "b"\nwake = false\n')
    assert config.servers["a"].policy.wake == WakePredicate(("w",), interval_s=5.0, timeout_s=1.0)
    assert config.servers["b"].policy.wake is None


def test_env_values_expand_variables_from_the_daemon_environment() -> None:
    config = parse('[servers.s]\ncommand = "s"\n[servers.s.env]\n'
                   'A = "${GITHUB_TOKEN}"\nB = "pa$$word"\nC = "$HOME-${EMPTY}-$"\nD = "$${GITHUB_TOKEN}"\n')
    assert dict(config.servers["s"].env) == {"A": "ghp_abc", "B": "pa$word", "C": "$HOME--$",
                                             "D": "${GITHUB_TOKEN}"}


def test_an_expanded_value_is_not_expanded_again() -> None:
    config = parse('[servers.s]\ncommand = "s"\nenv = { A = "${X}" }\n', {"X": "${GITHUB_TOKEN}"})
    assert config.servers["s"].env["A"] == "${GITHUB_TOKEN}"


def test_args_and_command_are_taken_literally() -> None:
    server = parse('[servers.s]\ncommand = "$HOME/srv"\nargs = ["${GITHUB_TOKEN}", "a b", ""]\n').servers["s"]
    assert (server.command, server.args) == ("$HOME/srv", ("${GITHUB_TOKEN}", "a b", ""))


@pytest.mark.parametrize(("cwd", "expected"), [("~", "/home/u"), ("~/src/", "/home/u/src"),
                                               ("/srv//x/../y", "/srv/y")])
def test_cwd_expands_home_and_is_normalised(cwd: str, expected: str) -> None:
    assert parse(f'[servers.s]\ncommand = "s"\ncwd = "{cwd}"\n').servers["s"].cwd == expected


def test_a_server_without_cwd_leaves_it_to_the_daemon() -> None:
    assert parse(MINIMAL_SERVER).servers["s"].cwd is None


def test_per_session_env_extends_the_built_in_list() -> None:
    config = parse('[defaults]\nper_session_env = ["MY_TERMINAL_ID", "MYCO_*"]\n')
    assert config.extra_per_session_env == frozenset({"MY_TERMINAL_ID", "MYCO_*"})
    assert config.per_session_env == PER_SESSION_ENV | {"MY_TERMINAL_ID", "MYCO_*"}
    assert Config().per_session_env == PER_SESSION_ENV


def test_sampling_policy_most_recent_is_accepted() -> None:
    assert parse('[defaults]\nsampling_policy = "most-recent"\n').sampling_policy == "most-recent"


def test_server_names_with_dots_and_dashes_are_accepted() -> None:
    config = parse('[servers."my.server-2_x"]\ncommand = "s"\n')
    assert config.servers["my.server-2_x"].name == "my.server-2_x"


def test_the_parsed_config_cannot_be_modified() -> None:
    config = parse('[servers.s]\ncommand = "s"\nenv = { A = "1" }\n')
    with pytest.raises(TypeError):
        config.servers["t"] = config.servers["s"]  # type: ignore[index]
    with pytest.raises(TypeError):
        config.servers["s"].env["A"] = "2"  # type: ignore[index]


# ---- refusals: one line naming file, key and problem -----------------------------------------


@pytest.mark.parametrize(
    ("text", "key", "problem"),
    [
        # unknown keys, with the allowed ones listed
        ("lingr = 1\n", "lingr", "unknown key; allowed here: defaults, servers"),
        ("[defaults]\nlingr = 1\n", "defaults.lingr", "did you mean 'linger'?"),
        (MINIMAL_SERVER + "lnger = 1\n", "servers.s.lnger",
         "allowed here: command, args, env, cwd, description, start_timeout, linger"),
        (MINIMAL_SERVER + "wake = { command = ['w'], intervall = '1s' }\n", "servers.s.wake.intervall",
         "did you mean 'interval'?"),
        (MINIMAL_SERVER + "per_session_env = []\n", "servers.s.per_session_env", "unknown key"),
        # wrong types
        ("defaults = 1\n", "defaults", "expected a table, got an integer"),
        ("servers = []\n", "servers", "expected a table, got an array"),
        ("[servers]\ns = 1\n", "servers.s", "expected a table, got an integer"),
        ("[defaults]\nlinger = true\n", "defaults.linger", "expected a duration such as \"30s\", got a boolean"),
        ("[defaults]\nlinger = [1]\n", "defaults.linger", "got an array"),
        ("[defaults]\nlinger = 1979-05-27\n", "defaults.linger", "got a date or time"),
        ("[defaults]\nshare = \"yes\"\n", "defaults.share", 'expected true, false, "auto" or "session-aware", got \'yes\''),
        ("[defaults]\nshare = 1\n", "defaults.share", 'expected true, false, "auto" or "session-aware", got an integer'),
        ("[defaults]\nkeep_alive = 1\n", "defaults.keep_alive", "expected true or false, got an integer"),
        ("[defaults]\nstart = 1\n", "defaults.start", "an integer is not one of: lazy, eager"),
        ("[defaults]\nstart = \"fast\"\n", "defaults.start", "'fast' is not one of: lazy, eager"),
        ("[defaults]\nera = \"modern\"\n", "defaults.era", "'modern' is not one of: auto, handshake, stateless"),
        (MINIMAL_SERVER + "era = true\n", "servers.s.era", "a boolean is not one of: auto, handshake, stateless"),
        ("[defaults]\nsampling_policy = \"random\"\n", "defaults.sampling_policy",
         "'random' is not one of: refuse, most-recent"),
        ("[defaults]\nper_session_env = \"X\"\n", "defaults.per_session_env", "expected an array of strings"),
        ("[defaults]\nper_session_env = [1]\n", "defaults.per_session_env", "expected a string, got an integer"),
        ("[defaults]\nidentity_env = [\"MY TOKEN\"]\n", "defaults.identity_env",
         "'MY TOKEN' is not a variable name or pattern"),
        ("[defaults]\nper_session_env = [\"A=B\"]\n", "defaults.per_session_env", "is not a variable name"),
        ("[defaults]\nper_session_env = [\"\"]\n", "defaults.per_session_env", "is not a variable name"),
        ("[servers.s]\ncommand = 5\n", "servers.s.command", "expected a string, got an integer"),
        (MINIMAL_SERVER + "args = \"-y pkg\"\n", "servers.s.args", "expected an array of strings, got a string"),
        (MINIMAL_SERVER + "args = [\"a\", 1]\n", "servers.s.args", "expected a string, got an integer"),
        (MINIMAL_SERVER + "env = \"A=1\"\n", "servers.s.env", "expected a table, got a string"),
        (MINIMAL_SERVER + "env = { PORT = 8080 }\n", "servers.s.env.PORT", "expected a string, got an integer"),
        (MINIMAL_SERVER + "cwd = 1\n", "servers.s.cwd", "expected a string, got an integer"),
        (MINIMAL_SERVER + "wake = \"w\"\n", "servers.s.wake", "expected a table such as"),
        (MINIMAL_SERVER + "wake = true\n", "servers.s.wake", "got a boolean"),
        (MINIMAL_SERVER + "wake = { command = \"w\" }\n", "servers.s.wake.command", "expected an array"),
        # bad durations
        ("[servers.github]\ncommand = \"npx\"\nlinger = \"10x\"\n", "servers.github.linger",
         "'10x' is not a duration (use 500ms, 30s, 10m, 1h or 0)"),
        ("[defaults]\nstart_timeout = \"0\"\n", "defaults.start_timeout", "must be longer than 0"),
        ("[defaults]\nidle_timeout = -5\n", "defaults.idle_timeout", "it must be finite and not negative"),
        ("[defaults]\nlinger = nan\n", "defaults.linger", "it must be finite and not negative"),
        ("[defaults]\nlinger = inf\n", "defaults.linger", "it must be finite and not negative"),
        ("[defaults]\nlinger = \"-1m\"\n", "defaults.linger", "is negative"),
        (MINIMAL_SERVER + "wake = { command = ['w'], interval = '0' }\n", "servers.s.wake.interval",
         "must be longer than 0"),
        (MINIMAL_SERVER + "wake = { command = ['w'], timeout = 'soon' }\n", "servers.s.wake.timeout",
         "'soon' is not a duration"),
        # keep_alive together with idle_timeout
        ("[defaults]\nkeep_alive = true\nidle_timeout = \"5m\"\n", "defaults.keep_alive",
         "cannot be combined with idle_timeout"),
        (MINIMAL_SERVER + "keep_alive = true\nidle_timeout = 60\n", "servers.s.keep_alive",
         "cannot be combined with idle_timeout"),
        # commands
        ("[servers.s]\nargs = []\n", "servers.s.command", "is missing; every server needs a command"),
        ("[servers.s]\ncommand = \"\"\n", "servers.s.command", "is empty"),
        ("[servers.s]\ncommand = \"  \"\n", "servers.s.command", "is empty"),
        ("[servers.s]\ncommand = \"a\\u0000b\"\n", "servers.s.command", "contains a NUL character"),
        (MINIMAL_SERVER + "args = [\"a\\u0000\"]\n", "servers.s.args", "contains a NUL character"),
        (MINIMAL_SERVER + "wake = { interval = '1s' }\n", "servers.s.wake.command", "is missing"),
        (MINIMAL_SERVER + "wake = { command = [] }\n", "servers.s.wake.command", "must not be empty"),
        (MINIMAL_SERVER + "wake = { command = [''] }\n", "servers.s.wake.command", "starts with an empty string"),
        # server names
        ("[servers.\"my server\"]\ncommand = \"s\"\n", 'servers."my server"', "is not a valid server name"),
        ("[servers.\"a/b\"]\ncommand = \"s\"\n", 'servers."a/b"', "is not a valid server name"),
        ("[servers.\"..\"]\ncommand = \"s\"\n", 'servers.".."', "is not a valid server name"),
        ("[servers.\"\"]\ncommand = \"s\"\n", 'servers.""', "is not a valid server name"),
        ("[servers.\"café\"]\ncommand = \"s\"\n", 'servers."caf\\u00e9"', "is not a valid server name"),
        ("[servers.\"a\\nb\"]\ncommand = \"s\"\n", 'servers."a\\nb"', "is not a valid server name"),
        # env expansion
        (MINIMAL_SERVER + "env = { T = \"${NOPE}\" }\n", "servers.s.env.T",
         "${NOPE} is not set in lazyd's environment"),
        (MINIMAL_SERVER + "env = { T = \"${HOME\" }\n", "servers.s.env.T", "unterminated '${'"),
        (MINIMAL_SERVER + "env = { T = \"${HOME:-x}\" }\n", "servers.s.env.T", "is not a variable reference"),
        (MINIMAL_SERVER + "env = { T = \"${}\" }\n", "servers.s.env.T", "is not a variable reference"),
        (MINIMAL_SERVER + "env = { \"A=B\" = \"1\" }\n", 'servers.s.env."A=B"',
         "is not a valid environment variable name"),
        # cwd
        (MINIMAL_SERVER + "cwd = \"src\"\n", "servers.s.cwd", "must be an absolute path or start with ~/"),
        (MINIMAL_SERVER + "cwd = \"~root/x\"\n", "servers.s.cwd", "~user is not expanded"),
    ],
)
def test_a_bad_config_is_refused_with_one_line_naming_file_key_and_problem(
    text: str, key: str, problem: str
) -> None:
    message = refusal(text)
    assert message.startswith(f"{SOURCE}: {key}: "), message
    assert problem in message, message


def test_a_dotted_server_name_is_quoted_in_the_key_path() -> None:
    message = refusal('[servers."my.server"]\ncommand = "s"\nlinger = "x"\n')
    assert message.startswith(f'{SOURCE}: servers."my.server".linger: ')


def test_a_tilde_cwd_without_home_is_refused() -> None:
    message = refusal(MINIMAL_SERVER + 'cwd = "~/x"\n', environ={})
    assert message == f"{SOURCE}: servers.s.cwd: starts with ~ but HOME is not set"


@pytest.mark.parametrize(
    ("text", "line"),
    [("a = 1\nb = [1,\nc=", 3), ("[servers.s]\ncommand = \"s\"\ncommand = \"t\"\n", 3),
     ("[defaults]\nlinger = \"10m\n", 2), ("x = \n", 1), ("[servers\n", 1)],
)
def test_invalid_toml_is_refused_with_its_line_number(text: str, line: int) -> None:
    message = refusal(text)
    assert re.fullmatch(rf"{re.escape(str(SOURCE))}: line {line}: \S.*", message), message
    assert " at line " not in message


def test_text_without_a_file_is_named_config_toml_in_errors() -> None:
    with pytest.raises(ConfigError, match=r"^config\.toml: defaults\.linger: "):
        parse_config_text('[defaults]\nlinger = "x"\n', {}, None)


def test_a_config_error_is_one_line_even_when_the_files_path_holds_line_breaks() -> None:
    odd = Path("/home/u/odd\ndir\r/config.toml")
    for text in ('[defaults]\nlinger = "x"\n', "[defaults\n"):  # a bad value, then TOML the parser refuses
        with pytest.raises(ConfigError) as caught:
            parse_config_text(text, ENVIRON, odd)
        assert str(caught.value).startswith("/home/u/odd\\ndir\\r/config.toml: ")
        assert "\n" not in str(caught.value) and "\r" not in str(caught.value)


# ---- the file: trust, kind, size -------------------------------------------------------------


def write_config(path: Path, text: str, mode: int = 0o600) -> Path:
    path.write_text(text)
    os.chmod(path, mode)
    return path


def test_a_missing_file_gives_the_defaults_with_no_source(tmp_path: Path) -> None:
    assert load_config(tmp_path / "config.toml", ENVIRON) == Config(source=None)
    assert load_config(tmp_path / "no-dir" / "config.toml", ENVIRON) == Config(source=None)


def test_a_private_file_is_read_and_named_as_the_source(tmp_path: Path) -> None:
    path = write_config(tmp_path / "config.toml", '[servers.s]\ncommand = "s"\nenv = { T = "${GITHUB_TOKEN}" }\n')
    config = load_config(path, ENVIRON)
    assert config.source == path
    assert config.servers["s"].env["T"] == "ghp_abc"


@pytest.mark.parametrize("mode", [0o644, 0o400, 0o700])
def test_a_file_only_its_owner_can_write_is_accepted(tmp_path: Path, mode: int) -> None:
    path = write_config(tmp_path / "config.toml", MINIMAL_SERVER, mode)
    assert list(load_config(path, ENVIRON).servers) == ["s"]


@pytest.mark.parametrize("mode", [0o664, 0o620, 0o602, 0o666])
def test_a_file_writable_by_group_or_others_is_refused(tmp_path: Path, mode: int) -> None:
    path = write_config(tmp_path / "config.toml", MINIMAL_SERVER, mode)
    with pytest.raises(ConfigError) as caught:
        load_config(path, ENVIRON)
    assert str(caught.value) == (
        f"{path}: is writable by group or others (mode {mode:04o}); lazyd runs the commands it "
        f"names, so fix it with: chmod go-w {path}"
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="changing a file's owner needs root")
def test_a_file_owned_by_another_uid_is_refused(tmp_path: Path) -> None:
    path = write_config(tmp_path / "config.toml", MINIMAL_SERVER)
    os.chown(path, 65534, -1)
    with pytest.raises(ConfigError) as caught:
        load_config(path, ENVIRON)
    message = str(caught.value)
    assert message.startswith(f"{path}: is owned by uid 65534, not by you (uid {os.geteuid()})")
    assert "\n" not in message


def test_a_symlink_is_refused_even_to_a_good_file(tmp_path: Path) -> None:
    target = write_config(tmp_path / "real.toml", MINIMAL_SERVER)
    link = tmp_path / "config.toml"
    link.symlink_to(target)
    with pytest.raises(ConfigError, match=r"is a symbolic link"):
        load_config(link, ENVIRON)


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    os.mkfifo(path, 0o600)
    with pytest.raises(ConfigError, match=r": is not a regular file$"):
        load_config(path, ENVIRON)


def test_a_directory_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.mkdir(mode=0o700)
    with pytest.raises(ConfigError, match=r": is not a regular file$"):
        load_config(path, ENVIRON)


def test_a_file_larger_than_the_limit_is_refused(tmp_path: Path) -> None:
    path = write_config(tmp_path / "config.toml", "#" * (1024 * 1024 + 1))  # docs/configuration.md: larger than 1 MiB
    with pytest.raises(ConfigError, match="is larger than"):
        load_config(path, ENVIRON)


def test_a_file_at_the_limit_is_read(tmp_path: Path) -> None:
    path = write_config(tmp_path / "config.toml", "#" * 1024 * 1024)
    assert load_config(path, ENVIRON) == Config(source=path)


def test_a_file_that_is_not_utf8_is_refused_with_the_offset(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_bytes(b"# caf\xe9\n")
    os.chmod(path, 0o600)
    with pytest.raises(ConfigError, match=r"is not UTF-8 text \(bad byte at offset 5\)$"):
        load_config(path, ENVIRON)


def test_errors_inside_a_real_file_name_that_file(tmp_path: Path) -> None:
    path = write_config(tmp_path / "config.toml", '[servers.github]\ncommand = "npx"\nlinger = "10x"\n')
    with pytest.raises(ConfigError) as caught:
        load_config(path, ENVIRON)
    assert str(caught.value) == (
        f"{path}: servers.github.linger: '10x' is not a duration (use 500ms, 30s, 10m, 1h or 0)"
    )


# ---- shim options ----------------------------------------------------------------------------


def test_no_options_leave_the_policy_as_it_was() -> None:
    base = Policy(linger_s=5.0, wake=WakePredicate(("w",)))
    assert policy_with_options(base, {}) == base


def test_every_option_is_applied_from_its_text() -> None:
    policy = policy_with_options(Policy(), {
        "linger": "30m", "idle_timeout": "1h", "start_timeout": "90", "share": "no",
        "wake_command": '["/usr/local/bin/needs-work", "--quiet"]', "wake_interval": "10s",
        "wake_timeout": "500ms",
    })
    assert policy == Policy(
        start_timeout_s=90.0, linger_s=1800.0, idle_timeout_s=3600.0, share=False,
        wake=WakePredicate(("/usr/local/bin/needs-work", "--quiet"), interval_s=10.0, timeout_s=0.5),
    )


def test_the_era_is_auto_unless_the_file_or_an_option_sets_it_and_an_option_is_the_most_specific() -> None:
    assert Policy().era == "auto"
    config = parse('[defaults]\nera = "handshake"\n\n[servers.a]\ncommand = "a"\n\n'
                   '[servers.b]\ncommand = "b"\nera = "stateless"\n')
    assert (config.defaults.era, config.servers["a"].policy.era, config.servers["b"].policy.era) == (
        "handshake", "handshake", "stateless")
    assert policy_with_options(config.defaults, {"era": "auto"}).era == "auto"
    with pytest.raises(ConfigError, match=r"option --era: 'new' is not one of: auto, handshake, stateless"):
        policy_with_options(Policy(), {"era": "new"})


def test_an_idle_timeout_option_overrides_keep_alive_from_the_config() -> None:
    policy = policy_with_options(Policy(keep_alive=True), {"idle_timeout": "5m"})
    assert (policy.keep_alive, policy.idle_timeout_s) == (False, 300.0)
    kept = policy_with_options(Policy(keep_alive=True), {"idle_timeout": "0"})
    assert (kept.keep_alive, kept.idle_timeout_s) == (True, None)


def test_wake_timing_options_adjust_the_configured_predicate() -> None:
    base = Policy(wake=WakePredicate(("w", "x"), interval_s=5.0, timeout_s=1.0))
    assert policy_with_options(base, {"wake_interval": "1m"}).wake == WakePredicate(("w", "x"), 60.0, 1.0)
    assert policy_with_options(base, {"wake_command": '["v"]'}).wake == WakePredicate(("v",), 5.0, 1.0)


@pytest.mark.parametrize(
    ("opts", "message"),
    [
        ({"linger": "10x"}, "option --linger: '10x' is not a duration (use 500ms, 30s, 10m, 1h or 0)"),
        ({"check_linger": "-5s"}, "option --check-linger: '-5s' is negative; a duration cannot be"),
        ({"idle_timeout": "-1s"}, "option --idle-timeout: '-1s' is negative; a duration cannot be"),
        ({"start_timeout": "0"}, "option --start-timeout: must be longer than 0 (it bounds how long a start may take)"),
        ({"share": "maybe"}, "option --share: 'maybe' is not a boolean (use true or false; also yes/no, on/off, 1/0), auto or session-aware"),
        ({"lingr": "1m"}, "option --lingr: unknown option; allowed: linger, check_linger, idle_timeout, start_timeout, "
                          "share, wake_command, wake_interval, wake_timeout, era, memory_max"),
        ({"keep_alive": "true"}, "option --keep-alive: unknown option; allowed: linger, check_linger, idle_timeout, "
                                 "start_timeout, share, wake_command, wake_interval, wake_timeout, era, memory_max"),
        ({"linger": 5}, "option --linger: expected text, got an integer"),
        ({"wake_command": "/bin/true"}, 'option --wake-command: is not a JSON array of strings, such as '
                                        '["/usr/local/bin/needs-work"]'),
        ({"wake_command": '"/bin/true"'}, "option --wake-command: expected an array of strings, got a string"),
        ({"wake_command": "[]"}, "option --wake-command: must not be empty"),
        ({"wake_command": '["/bin/true", 1]'}, "option --wake-command: expected a string, got an integer"),
        ({"wake_command": '[""]'}, "option --wake-command: starts with an empty string"),
        ({"wake_interval": "5s"}, "option --wake-interval: needs --wake-command (or a wake predicate in config.toml)"),
        ({"wake_timeout": "5s"}, "option --wake-timeout: needs --wake-command (or a wake predicate in config.toml)"),
        ({"wake_command": '["w"]', "wake_interval": "0"}, "option --wake-interval: must be longer than 0"),
        ({"wake_command": '["w"]', "wake_timeout": "x"}, "option --wake-timeout: 'x' is not a duration (use 500ms, "
                                                         "30s, 10m, 1h or 0)"),
    ],
)
def test_a_bad_option_is_refused_with_one_line_naming_the_option(opts: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        policy_with_options(Policy(), opts)
    assert str(caught.value) == message


def test_a_named_servers_description_is_one_line_of_words_and_not_part_of_its_definition() -> None:
    text = MINIMAL_SERVER + 'description = """GitHub issues and pull requests\n   of the acme org."""\n'
    server = parse(text).servers["s"]
    assert server.description == "GitHub issues and pull requests of the acme org."
    # A reload compares definitions to decide restarts: a new description is no reason for one.
    assert server == parse(MINIMAL_SERVER + 'description = "other words"\n').servers["s"]
    assert parse(MINIMAL_SERVER + 'description = "  "\n').servers["s"].description is None
    assert "servers.s.description: is 1001 characters long" in refusal(MINIMAL_SERVER + f'description = "{"x" * 1001}"\n')
    assert "servers.s.description: expected a string, got an integer" in refusal(MINIMAL_SERVER + "description = 3\n")
