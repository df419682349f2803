"""The daemon's environment (lazyd/host/daemonenv.py) and what a config expands (lazyd/daemon/environment.py)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from lazyd.host import daemonenv
from lazyd.config.load import parse_config_text
from lazyd.daemon.environment import StartEnvironment

SESSION = {
    "HOME": "/home/u", "USER": "u", "LOGNAME": "u", "SHELL": "/bin/zsh", "PATH": "/usr/bin:/bin",
    "TMPDIR": "/tmp/u", "LANG": "fr_FR.UTF-8", "LANGUAGE": "fr", "LC_TIME": "C", "LC_ALL": "C.UTF-8",
    "TZ": "Europe/Paris", "XDG_RUNTIME_DIR": "/run/user/1000", "XDG_CONFIG_HOME": "/home/u/.config",
    "XDG_CACHE_HOME": "/home/u/.cache", "XDG_DATA_HOME": "/home/u/.local/share",
    "XDG_STATE_HOME": "/home/u/.local/state", "XDG_CONFIG_DIRS": "/etc/xdg", "XDG_DATA_DIRS": "/usr/share",
    "DBUS_SESSION_BUS_ADDRESS": "unix:path=/run/user/1000/bus", "DISPLAY": ":0", "WAYLAND_DISPLAY": "wayland-0",
    "XAUTHORITY": "/home/u/.Xauthority",
}
A_CLIENTS_OWN = {
    "GITHUB_TOKEN": "ghp_x", "OPENAI_API_KEY": "sk-x", "HTTPS_PROXY": "http://evil:3128",
    "NODE_EXTRA_CA_CERTS": "/repo/ca.pem", "SSL_CERT_FILE": "/repo/ca.pem", "PYTHONPATH": "/repo",
    "NODE_OPTIONS": "--require=/repo/x.js", "LD_PRELOAD": "/repo/x.so", "CLAUDE_CODE_SESSION_ID": "1",
    "TERM": "xterm", "PWD": "/repo", "LAZYD_SHARE": "true", "XDG_SESSION_ID": "3", "LC": "not a locale",
    "LAZYD_SOCKET": "/x.sock", "NOTIFY_SOCKET": "/run/n", "LISTEN_FDS": "1",
}


def test_the_base_is_the_session_variables_and_nothing_a_client_adds() -> None:
    assert daemonenv.base({**SESSION, **A_CLIENTS_OWN}) == SESSION


def test_the_daemons_own_environment_adds_its_own_variables_and_the_expanded_ones_that_are_set() -> None:
    env = {**SESSION, **A_CLIENTS_OWN}
    own = daemonenv.own(env, None, ["GITHUB_TOKEN", "NOT_SET"])
    assert own == {**SESSION, "LAZYD_SOCKET": "/x.sock", "NOTIFY_SOCKET": "/run/n", "LISTEN_FDS": "1",
                   "GITHUB_TOKEN": "ghp_x"}


def test_a_runtime_dir_found_without_xdg_runtime_dir_is_given_and_never_replaces_one() -> None:
    without = {k: v for k, v in SESSION.items() if k != "XDG_RUNTIME_DIR"}
    assert daemonenv.base(without, "/run/user/1000")["XDG_RUNTIME_DIR"] == "/run/user/1000"
    assert "XDG_RUNTIME_DIR" not in daemonenv.base(without)
    assert daemonenv.base({**SESSION, "XDG_RUNTIME_DIR": "/elsewhere"}, "/run/user/1000")["XDG_RUNTIME_DIR"] == "/elsewhere"


@given(st.dictionaries(st.text(st.sampled_from("ABCDEFGHIJKLMNOPQRSTUVWXYZ_"), min_size=1, max_size=12),
                       st.text(max_size=8), max_size=30))
def test_whatever_a_client_passes_the_base_holds_only_allowlisted_names_with_their_values(env: dict[str, str]) -> None:
    base = daemonenv.base(env)
    assert all(daemonenv.is_base(name) and env[name] == value for name, value in base.items())
    assert {name for name in env if daemonenv.is_base(name)} == set(base)


def test_the_names_a_config_expands_are_noted_and_only_those() -> None:
    start = StartEnvironment({**SESSION, **A_CLIENTS_OWN})
    text = ('[servers.gh]\ncommand = "npx"\nenv = { GITHUB_TOKEN = "${GITHUB_TOKEN}", A = "$$literal" }\n'
            'cwd = "~/src"\n')
    config = parse_config_text(text, start, Path("/home/u/.config/lazyd/config.toml"))
    assert config.servers["gh"].env == {"GITHUB_TOKEN": "ghp_x", "A": "$literal"}
    assert start.expanded - {"HOME"} == {"GITHUB_TOKEN"}
