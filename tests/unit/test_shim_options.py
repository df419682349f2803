"""Tests of the shim's command line: options from flags and environment, command splitting, errors.

Most cases call ``options.parse`` directly (it is pure: argv and an env mapping in, Options or
UsageError out); a few run the real console entry in a subprocess to check the user-visible
contract: exactly one ``lazyd-shim: ...`` line on stderr, exit status 2, and nothing started.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# The source package `shim` is what gets installed as `lazyd_shim`; importing it by its source
# name lets mypy check this file (the install-time alias is invisible to it). The subprocess tests
# below run the installed entry point.
from shim import options
from lazyd.config.durations import parse_duration
from lazyd.config.load import policy_with_options
from lazyd.config.model import Policy
from lazyd.errors import ConfigError, UsageError
from shim.options import parse

# flag, env var, a valid value, the key it is sent under in the hello's opts
DAEMON_OPTIONS = [
    ("--linger", "LAZYD_LINGER", "10m", "linger"),
    ("--idle-timeout", "LAZYD_IDLE_TIMEOUT", "30s", "idle_timeout"),
    ("--start-timeout", "LAZYD_START_TIMEOUT", "500ms", "start_timeout"),
    ("--share", "LAZYD_SHARE", "off", "share"),
    ("--wake-command", "LAZYD_WAKE_COMMAND", '["pgrep", "-x", "code"]', "wake_command"),
    ("--wake-interval", "LAZYD_WAKE_INTERVAL", "1h", "wake_interval"),
    ("--wake-timeout", "LAZYD_WAKE_TIMEOUT", "2s", "wake_timeout"),
    ("--era", "LAZYD_ERA", "stateless", "era"),
    ("--check-linger", "LAZYD_CHECK_LINGER", "1m30s", "check_linger"),
    ("--identity-env", "LAZYD_IDENTITY_ENV", "API_KEY,REGION_*", "identity_env"),
    ("--per-session-env", "LAZYD_PER_SESSION_ENV", "TERM_SESSION_ID", "per_session_env"),
    ("--memory-max", "LAZYD_MEMORY_MAX", "512MiB", "memory_max"),
]


def parse_error(argv: list[str], env: dict[str, str] | None = None) -> str:
    with pytest.raises(UsageError) as info:
        parse(argv, env or {})
    return str(info.value)


@pytest.mark.parametrize(("flag", "var", "value", "key"), DAEMON_OPTIONS)
def test_each_daemon_option_is_taken_from_its_flag_as_written(flag: str, var: str, value: str, key: str) -> None:
    assert parse([flag, value, "node"], {}).daemon_opts == {key: value}
    assert parse([f"{flag}={value}", "node"], {}).daemon_opts == {key: value}


@pytest.mark.parametrize(("flag", "var", "value", "key"), DAEMON_OPTIONS)
def test_each_daemon_option_is_taken_from_its_environment_variable(flag: str, var: str, value: str, key: str) -> None:
    assert parse(["node"], {var: value}).daemon_opts == {key: value}


@pytest.mark.parametrize(("flag", "var", "value", "key"), DAEMON_OPTIONS)
def test_a_flag_beats_its_environment_variable(flag: str, var: str, value: str, key: str) -> None:
    env_value = "garbage that would not validate"
    assert parse([flag, value, "node"], {var: env_value}).daemon_opts == {key: value}


def test_only_options_the_user_set_are_sent_and_empty_variables_count_as_unset() -> None:
    assert parse(["node"], {"LAZYD_LINGER": "", "LAZYD_SHARE": ""}).daemon_opts == {}


def test_the_shims_own_options_come_from_flags_and_environment() -> None:
    opts = parse(["--socket", "/run/x.sock", "--log-file=/tmp/l", "--verbose", "--no-autostart", "node"], {})
    assert (opts.socket, opts.log_file, opts.verbose, opts.autostart) == ("/run/x.sock", "/tmp/l", True, False)
    env = {"LAZYD_SOCKET": "/e.sock", "LAZYD_LOG_FILE": "/e.log", "LAZYD_VERBOSE": "yes", "LAZYD_NO_AUTOSTART": "1"}
    opts = parse(["node"], env)
    assert (opts.socket, opts.log_file, opts.verbose, opts.autostart) == ("/e.sock", "/e.log", True, False)
    opts = parse(["node"], {})
    assert (opts.socket, opts.log_file, opts.verbose, opts.autostart) == (None, None, False, True)


def test_boolean_flags_accept_an_explicit_value_that_beats_the_environment() -> None:
    opts = parse(["--verbose=false", "--no-autostart=off", "node"], {"LAZYD_VERBOSE": "1", "LAZYD_NO_AUTOSTART": "1"})
    assert (opts.verbose, opts.autostart) == (False, True)


def test_the_hand_off_is_on_unless_a_flag_or_lazyd_handoff_turns_it_off_and_the_flag_wins() -> None:
    assert parse(["node"], {}).handoff is True
    assert parse(["--handoff=0", "node"], {}).handoff is False
    assert parse(["node"], {"LAZYD_HANDOFF": "0"}).handoff is False
    assert parse(["--handoff", "node"], {"LAZYD_HANDOFF": "0"}).handoff is True
    assert parse(["--handoff=no", "node"], {"LAZYD_HANDOFF": "1"}).handoff is False
    with pytest.raises(UsageError, match="LAZYD_HANDOFF"):
        parse(["node"], {"LAZYD_HANDOFF": "sometimes"})


def test_server_comes_from_flag_or_environment_and_makes_the_command_optional() -> None:
    assert parse(["--server", "github"], {}).server == "github"
    opts = parse([], {"LAZYD_SERVER": "github"})
    assert (opts.server, opts.command) == ("github", [])
    assert parse(["--server=a"], {"LAZYD_SERVER": "b"}).server == "a"


@pytest.mark.parametrize("value", ["0", "1ms", "500ms", "30s", "10m", "1h", "86400s", "5", "1.5s", "1m30s"])
def test_durations_in_the_documented_forms_are_accepted(value: str) -> None:
    assert parse(["--linger", value, "node"], {}).daemon_opts == {"linger": value}


@pytest.mark.parametrize("value", ["", "5x", "m", "-1s", "30s1m", "10 s", "ten s", "1H", "٣s", "1e3s"])
def test_malformed_durations_are_refused_naming_the_option_in_the_daemon_s_words(value: str) -> None:
    with pytest.raises(ValueError) as daemon:
        parse_duration(value)
    assert parse_error(["--linger", value, "node"]) == f"--linger: {daemon.value}"
    assert parse_error(["node"], {"LAZYD_IDLE_TIMEOUT": value or "x"}).startswith("LAZYD_IDLE_TIMEOUT: ")


@pytest.mark.parametrize("value", ["true", "false", "1", "0", "yes", "no", "on", "off", "TRUE", "Off"])
def test_booleans_in_the_documented_forms_are_accepted(value: str) -> None:
    assert parse(["--share", value, "node"], {}).daemon_opts == {"share": value}


@pytest.mark.parametrize("value", ["maybe", "2", "y", "enabled"])
def test_malformed_booleans_are_refused_and_a_share_value_in_the_daemon_s_words(value: str) -> None:
    with pytest.raises(ConfigError) as daemon:
        policy_with_options(Policy(), {"share": value})
    assert f"option {parse_error(['--share', value, 'node'])}" == str(daemon.value)
    assert parse_error(["node"], {"LAZYD_VERBOSE": value}) == f"LAZYD_VERBOSE: {value!r} is not a boolean (use true or false; also yes/no, on/off, 1/0)"


@pytest.mark.parametrize("value", ["Auto", "legacy", "2026-07-28", ""])
def test_an_era_other_than_auto_handshake_or_stateless_is_refused_by_name(value: str) -> None:
    assert parse_error(["--era", value, "node"]) == f"--era: invalid era {value!r} (use auto, handshake or stateless)"


@pytest.mark.parametrize("value", ["auto", "AUTO", " auto "])
def test_share_also_takes_auto(value: str) -> None:
    assert parse(["--share", value, "node"], {}).daemon_opts == {"share": value}


@pytest.mark.parametrize("flag", ["--wake-interval", "--wake-timeout", "--start-timeout"])
def test_a_start_timeout_or_a_wake_predicate_s_time_of_zero_is_refused_as_the_daemon_refuses_it(flag: str) -> None:
    argv = ["--wake-command", '["w"]', flag, "0", "node"]
    error = parse_error(argv)
    assert error.startswith(f"{flag}: must be longer than 0")
    daemon = {"wake_command": '["w"]', flag[2:].replace("-", "_"): "0"}
    with pytest.raises(ConfigError) as refused:
        policy_with_options(Policy(), daemon)
    assert str(refused.value) == f"option {error}"


@pytest.mark.parametrize("value", ["pgrep", "[]", '[""]', '["a", 1]', '{"argv": ["a"]}', "[unquoted]"])
def test_a_wake_command_must_be_a_json_list_of_strings(value: str) -> None:
    assert "invalid JSON argv" in parse_error(["--wake-command", value, "node"])


@pytest.mark.parametrize("value", ["512MiB", "1.5 GiB", "2G", "800000000", "off", "0", "0.5", "0.1B", "1iB", "GiB", "-1G"])
def test_the_shim_takes_a_memory_max_exactly_when_the_daemon_does(value: str) -> None:
    try:
        policy_with_options(Policy(), {"memory_max": value})
        daemon_takes_it = True
    except ConfigError:
        daemon_takes_it = False
    try:
        parse(["--memory-max", value, "node"], {})
        shim_takes_it = True
    except UsageError:
        shim_takes_it = False
    assert shim_takes_it == daemon_takes_it


def test_the_first_non_option_starts_the_command_and_keeps_the_rest_verbatim() -> None:
    opts = parse(["--linger", "1m", "node", "server.js", "--port", "3", "--linger", "x", "--"], {})
    assert opts.command == ["node", "server.js", "--port", "3", "--linger", "x", "--"]
    assert opts.daemon_opts == {"linger": "1m"}


def test_options_and_the_double_dash_are_both_optional() -> None:
    assert parse(["/usr/bin/server"], {}).command == ["/usr/bin/server"]
    assert parse(["--", "--weird-server-name", "-x"], {}).command == ["--weird-server-name", "-x"]
    assert parse(["--share=yes", "--", "node"], {}).command == ["node"]


def test_the_helps_mcp_add_lines_run_the_servers_command_line_with_no_second_double_dash() -> None:
    # What a client stores from `X mcp add NAME -- lazyd-shim CMD ARGS` is the shim with CMD ARGS;
    # Amp stores only what follows the last `--`, so the help must not put one after the shim.
    lines = [line for line in options.USAGE.splitlines() if " mcp add NAME -- lazyd-shim " in line]
    assert {line.split()[0] for line in lines} == {"claude", "amp"}
    for line in lines:
        stored = line.split(" -- ", 1)[1].split("  ")[0].split()
        assert stored[0] == "lazyd-shim" and "--" not in stored
        assert parse(stored[1:], {}).command == ["npx", "-y", "some-server"]
    assert "keeps only what follows the last `--`" in " ".join(options.USAGE.split())


def test_help_and_version_need_no_command() -> None:
    assert parse(["--help"], {}).show_help and parse(["-h"], {}).show_help
    assert parse(["--version"], {}).show_version
    # even with a broken environment: asking for help must work
    assert parse(["--help"], {"LAZYD_LINGER": "bad"}).show_help


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        ([], {}, "missing COMMAND"),
        (["--linger", "1m"], {}, "missing COMMAND"),
        (["--linger"], {}, "option --linger needs a value"),
        (["--bogus", "node"], {}, "unknown option '--bogus'"),
        (["--bogus=1", "node"], {}, "unknown option '--bogus'"),
        (["-x", "node"], {}, "unknown option '-x'"),
        (["--version=2"], {}, "option --version takes no value"),
        (["--socket=", "node"], {}, "--socket: empty value"),
        (["--server", "", "node"], {}, "--server: empty value"),
        (["--socket", "/" + "s" * 120, "node"], {}, "longer than 107 bytes"),
        (["", "arg"], {}, "COMMAND is an empty string"),
    ],
)
def test_bad_input_is_a_usage_error_with_a_one_line_reason(argv: list[str], env: dict[str, str], expected: str) -> None:
    message = parse_error(argv, env)
    assert expected in message
    assert "\n" not in message


def run_shim(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    # The installed console script when it exists, else the same entry point through -m.
    script = Path(sys.executable).with_name("lazyd-shim")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "lazyd_shim.main"]
    return subprocess.run(
        command + argv, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=30
    )


@pytest.mark.parametrize(
    ("argv", "env_extra"),
    [
        (["--linger", "soon", "node"], {}),
        (["--frobnicate", "node"], {}),
        ([], {}),
        (["node"], {"LAZYD_SHARE": "perhaps"}),
        (["--era", "modern", "node"], {}),
        (["node"], {"LAZYD_ERA": "legacy"}),
    ],
)
def test_the_real_entry_point_prints_one_line_and_exits_2_before_connecting(
    tmp_path: Path, argv: list[str], env_extra: dict[str, str]
) -> None:
    socket_dir = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAZYD_")}
    env.update(env_extra, LAZYD_SOCKET=str(socket_dir / "lazyd.sock"))
    proc = run_shim(argv, env)
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("lazyd-shim: "), proc.stderr
    assert proc.stdout == ""
    assert not socket_dir.exists()  # nothing was started or created


def test_the_real_entry_point_prints_help_and_version_on_stdout() -> None:
    env = dict(os.environ)
    help_run = run_shim(["--help"], env)
    assert help_run.returncode == 0 and help_run.stdout.startswith("usage: lazyd-shim")
    for flag, var, _, _ in DAEMON_OPTIONS:
        assert flag in help_run.stdout and var in help_run.stdout
    version_run = run_shim(["--version"], env)
    assert version_run.returncode == 0 and version_run.stdout.startswith("lazyd-shim 0.")


def test_the_log_goes_to_the_log_file_and_never_to_stderr_without_verbose(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    log_path = tmp_path / "shim.log"
    opts = parse(["--log-file", str(log_path), "node"], {})
    log = options.Log(opts)
    log("connect attempt")
    assert "connect attempt" in log_path.read_text()
    assert log_path.stat().st_mode & 0o777 == 0o600
    quiet = options.Log(parse(["node"], {}))
    quiet("not shown")
    assert capfd.readouterr().err == ""
