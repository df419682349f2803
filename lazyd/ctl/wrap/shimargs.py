"""How a registration runs through ``lazyd-shim``: which executable, which arguments, which settings.

The rules: docs/wrapping.md, "What each command does". The shim's own parser is imported, not
imitated, so the two never disagree. The shim is found next to ``sys.executable`` before PATH: PATH
entries such as pyenv's ``shims/`` are bash trampolines that slow every start.
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from lazyd.errors import UsageError, WrapError

SHIM_NAME = "lazyd-shim"
FOREIGN_RELAYS = ("mcp-lazy",)  # basename prefixes of other lazy relays: wrapping one would chain two

SETTING_PREFIX = "LAZYD_"
IDENTITY_ENV = "LAZYD_IDENTITY_ENV"  # wrap sets it to the names of the registration's own env
# Settings that would make the shim ignore the registration's command.
_REFUSED_SETTINGS = {
    "LAZYD_SERVER": "LAZYD_SERVER would make the shim ignore the registration's command; "
    "name servers in lazyd's config.toml instead",
    "LAZYD_HUB": "LAZYD_HUB would make the shim serve the hub instead of the registration's command",
    "LAZYD_HUB_SERVERS": "LAZYD_HUB_SERVERS applies to a hub registration (lazyd-shim --hub)",
}


def _shim_options() -> object:
    # Dynamically: the shim is its own top-level package, which the type checker cannot see.
    try:
        return importlib.import_module("lazyd_shim.options")
    except ImportError as exc:
        raise WrapError(f"cannot load lazyd-shim's option parser ({exc}); reinstall lazyd") from None


def _shim_parse(argv: Sequence[str], env: Mapping[str, str]) -> Any:
    """The shim's options for `argv` and `env`; ValueError with the shim's message if it refuses them."""
    options = _shim_options()
    usage_error: type[Exception] = getattr(options, "UsageError")
    try:
        return getattr(options, "parse")(list(argv), dict(env))
    except usage_error as exc:
        raise ValueError(str(exc)) from None


def known_settings() -> list[str]:
    """The shim's environment settings a registration may carry: the variables its help names."""
    usage = str(getattr(_shim_options(), "USAGE"))
    return [name for name in dict.fromkeys(re.findall(r"\bLAZYD_[A-Z_]+", usage)) if name not in _REFUSED_SETTINGS]


def daemon_option(args: Sequence[str], env: Mapping[str, str], key: str) -> str | None:
    """The value the shim run with `args` and `env` would send for option `key` (``start_timeout``...);
    None if it is not set or the shim would refuse it."""
    try:
        value = _shim_parse(args, env).daemon_opts.get(key)
    except ValueError:
        return None
    return None if value is None else str(value)


def find_shim(environ: Mapping[str, str]) -> str:
    """The absolute path of the installed ``lazyd-shim``; raise WrapError if there is none."""
    beside = os.path.join(os.path.dirname(os.path.abspath(sys.executable)), SHIM_NAME)
    if os.path.isfile(beside) and os.access(beside, os.X_OK):
        return beside
    found = shutil.which(SHIM_NAME, path=environ.get("PATH", os.defpath))
    if found is None:
        raise WrapError(f"cannot find {SHIM_NAME} next to {sys.executable} or on PATH; pass --shim PATH")
    return os.path.abspath(found)


def check_shim_path(path: str) -> str:
    """Validate a ``--shim`` value: an absolute path to an executable file, or a bare command name
    the client will look up on its own PATH. Raises UsageError."""
    if not path:
        raise UsageError("--shim: empty path")
    if "/" not in path:
        return path
    if not os.path.isabs(path):
        raise UsageError(f"--shim {path}: use an absolute path (clients start servers from other directories)")
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise UsageError(f"--shim {path}: no executable file there")
    return path


def parse_env_pairs(pairs: Iterable[str]) -> dict[str, str]:
    """``--env NAME=VALUE`` words as settings, validated as the shim will; UsageError naming the
    setting, never its value (values may be private; the shim's own messages quote them)."""
    settings: dict[str, str] = {}
    for pair in pairs:
        name, has_value, value = pair.partition("=")
        if not has_value or not name:
            raise UsageError(f"--env {name or pair[:20]!r}: expected NAME=VALUE")
        if name in _REFUSED_SETTINGS:
            raise UsageError(f"--env {name}: {_REFUSED_SETTINGS[name]}")
        known = known_settings()
        if name not in known:
            raise UsageError(f"--env {name}: not a lazyd-shim setting (known: {', '.join(known)})")
        if not value:
            raise UsageError(f"--env {name}: empty value (the shim treats an empty variable as unset)")
        try:
            _shim_parse(["true"], {name: value})
        except ValueError:
            raise UsageError(f"--env {name}: lazyd-shim would refuse this value (see lazyd-shim --help)") from None
        settings[name] = value
    return settings


def is_shim(command: str, known: Iterable[str]) -> bool:
    """Whether ``command`` runs lazyd-shim: one of the ``known`` paths, or a name starting with lazyd-shim."""
    return command in set(known) or os.path.basename(command).lower().startswith(SHIM_NAME)


def foreign_relay(command: str) -> str | None:
    """The name of another lazy relay that ``command`` runs, or None."""
    base = os.path.basename(command).lower()
    return next((name for name in FOREIGN_RELAYS if base.startswith(name)), None)


def wrapped_args(command: str, args: Sequence[str]) -> tuple[str, ...]:
    """The shim's args that run ``command args...`` (``--`` only when the command looks like an option)."""
    prefix = ("--",) if command.startswith("-") else ()
    return (*prefix, command, *args)


def command_index(args: Sequence[str]) -> int:
    """Where the server's command starts in a wrapped registration's args (after the shim's options);
    ValueError, fit for a user, if the shim would not run a command from them."""
    opts = _shim_parse(args, {})
    if opts.show_help or opts.show_version:
        raise ValueError("the shim's args ask for --help or --version, not a server")
    if not opts.command:
        raise ValueError(f"the shim runs the named server {opts.server!r}, not a command")
    return len(args) - len(opts.command)
