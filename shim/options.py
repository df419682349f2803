"""The shim's command line and environment: parsing, validation, and the diagnostics sink.

``lazyd-shim [OPTIONS] [--] COMMAND [ARGS...]``. Every option can also come from a ``LAZYD_*``
environment variable; a flag beats its variable. The first argument that is not an option starts
COMMAND, so ``lazyd-shim node server.js --port 3`` passes ``--port 3`` to the server (and clients
that check that the first argument is an existing file can be given the server's path directly).

Everything is validated here, before anything connects or starts: a bad input raises UsageError,
which ``main`` prints as one ``lazyd-shim: <problem>`` line with exit status 2. Durations and
booleans are checked but passed on to the daemon as the strings the user wrote, and only the
options the user set are passed at all (the daemon owns the defaults).

Hand-written rather than argparse: the shim runs at every client start and argparse (with gettext
and re) costs several milliseconds to import.
"""

from __future__ import annotations

import os
import time

from lazyd.errors import UsageError

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs start-up time
if TYPE_CHECKING:
    from collections.abc import Mapping

USAGE = """\
usage: lazyd-shim [OPTIONS] [--] COMMAND [ARGS...]
       lazyd-shim [OPTIONS] --server NAME
       lazyd-shim [OPTIONS] --hub [--servers NAME,NAME...]

Run an MCP server through the lazyd daemon: the client talks to this process on stdio, the daemon
starts the real server when it is first needed and shares it between clients. If the daemon cannot
be reached, the server is run directly instead; an option the daemon refuses, or a config or state
file it cannot start with, ends the shim with that one line and exit status 2.

The first argument that is not an option starts COMMAND; everything after it goes to the server.
Every option can also be set with the environment variable shown; the flag wins.

Register it with a client's own command, the server's command line after the shim:
  claude mcp add NAME -- lazyd-shim npx -y some-server     (codex, copilot and kilo alike)
  amp mcp add NAME -- lazyd-shim npx -y some-server
No second `--` is needed (only before a COMMAND that begins with -), and Amp must not get one: it
keeps only what follows the last `--`, so the shim would be dropped. `lazyctl wrap --client C --all`
rewrites the registrations a client already has; `lazyctl wrap-status` finds ones without the shim.

options:
  --linger D           keep the server up D after its last client left     LAZYD_LINGER
  --check-linger D     the same for a start only listings came for (a      LAZYD_CHECK_LINGER
                       health check); default 30s
  --idle-timeout D     stop the server after D without requests            LAZYD_IDLE_TIMEOUT
  --start-timeout D    bound on starting the server and its handshake      LAZYD_START_TIMEOUT
  --share MODE         auto (default: decided per server), true (one      LAZYD_SHARE
                       process for all), false (one each), session-aware
                       (one process, each request with its session's id)
  --wake-command JSON  argv (a JSON list) of a wake predicate              LAZYD_WAKE_COMMAND
  --wake-interval D    how often the wake predicate runs                   LAZYD_WAKE_INTERVAL
  --wake-timeout D     bound on one run of the wake predicate              LAZYD_WAKE_TIMEOUT
  --identity-env A,B   variables that always count in this registration's  LAZYD_IDENTITY_ENV
                       identity (lazyctl wrap records the declared ones)
  --per-session-env A,B  variables that never count (names or patterns)  LAZYD_PER_SESSION_ENV
  --era ERA            protocol era of the server's processes: auto        LAZYD_ERA
                       (each client's own), handshake or stateless
  --memory-max SIZE    restart the server when its process tree stays      LAZYD_MEMORY_MAX
                       over SIZE of memory (PSS): 512MiB, 1GiB; off
  --server NAME        use a server named in the daemon's config.toml      LAZYD_SERVER
  --hub                serve every server the daemon knows through a few   LAZYD_HUB
                       meta-tools (search, schema, call); see docs/hub.md
  --servers A,B        with --hub: only these servers                      LAZYD_HUB_SERVERS
  --socket PATH        the daemon's socket                                 LAZYD_SOCKET
  --no-autostart       never start the daemon; run the server directly     LAZYD_NO_AUTOSTART
  --handoff[=BOOL]     hand stdin/stdout to the daemon after the hello     LAZYD_HANDOFF
                       instead of relaying every line: on unless =0 (see
                       docs/protocol.md)
  --log-file PATH      append the shim's own diagnostics to PATH           LAZYD_LOG_FILE
  --verbose            diagnostics on stderr (or in --log-file)            LAZYD_VERBOSE
  -h, --help           show this help and exit
  --version            show the version and exit

D is a duration: 0, 500ms, 30s, 10m or 1h. BOOL is true/false, 1/0, yes/no or on/off.
"""


MAX_SUN_PATH_BYTES = 107
# sun_path holds 108 bytes including the terminating NUL on Linux; a longer path cannot be bound.


# Options forwarded to the daemon in the hello's `opts`: flag -> (opts key, env var, checker).
def _check_duration(value: str) -> None:
    # The daemon's own rule (lazyd.config.durations, on the stdlib-only floor), so a value the config
    # file accepts, such as "1m30s", is never refused by the shim. Imported only when an option
    # needs it: it compiles regular expressions, and most shim starts set no option at all.
    from lazyd.config.durations import parse_duration

    try:
        parse_duration(value)
    except ValueError:
        raise ValueError(f"invalid duration {value!r} (use e.g. 0, 500ms, 30s, 10m, 1h or 1m30s)") from None


def parse_bool(value: str) -> bool:
    """Return the truth of a BOOL string (the daemon's rule); raise ValueError for anything else."""
    from lazyd.config.durations import parse_bool as _core_parse_bool  # when an option is set (above)

    try:
        return _core_parse_bool(value)
    except ValueError:
        raise ValueError(f"invalid boolean {value!r} (use true/false, 1/0, yes/no or on/off)") from None


def _check_share(value: str) -> None:
    if value.strip().lower() not in ("auto", "session-aware"):
        try:
            parse_bool(value)
        except ValueError:
            raise ValueError(f"invalid value {value!r} (use auto, true, false or session-aware)") from None


def _check_era(value: str) -> None:
    # The daemon's rule (config.py, lazyd/core/eras/choice.py), checked here so a typo exits 2 at once.
    if value not in ("auto", "handshake", "stateless"):
        raise ValueError(f"invalid era {value!r} (use auto, handshake or stateless)")


def _check_size(value: str) -> None:
    # The daemon's rule (lazyd/core/memory.py parse_size) in short, so a typo exits 2 at once;
    # the daemon checks the value again.
    import re

    if value.strip().lower() not in ("off", "none", "0") and not re.fullmatch(
            r"\s*\d+(\.\d+)?\s*([KMGT](i?B)?|B)?\s*", value, re.IGNORECASE):
        raise ValueError(f"invalid size {value!r} (use e.g. 512MiB, 1GiB, 2G or off)")


def _check_argv_json(value: str) -> None:
    import json

    try:
        argv = json.loads(value)
    except ValueError:
        raise ValueError(f"invalid JSON argv {value!r} (use e.g. '[\"pgrep\", \"-x\", \"code\"]')") from None
    if not (isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv) and argv[0]):
        raise ValueError(f"invalid JSON argv {value!r}: it must be a non-empty list of strings")


def _check_names(value: str) -> None:
    from lazyd.config.envnames import parse_names  # when the option is set: it compiles a regular expression

    parse_names(value)


_DAEMON_OPTS = {
    "--linger": ("linger", "LAZYD_LINGER", _check_duration),
    "--check-linger": ("check_linger", "LAZYD_CHECK_LINGER", _check_duration),
    "--idle-timeout": ("idle_timeout", "LAZYD_IDLE_TIMEOUT", _check_duration),
    "--start-timeout": ("start_timeout", "LAZYD_START_TIMEOUT", _check_duration),
    "--share": ("share", "LAZYD_SHARE", _check_share),
    "--wake-command": ("wake_command", "LAZYD_WAKE_COMMAND", _check_argv_json),
    "--wake-interval": ("wake_interval", "LAZYD_WAKE_INTERVAL", _check_duration),
    "--wake-timeout": ("wake_timeout", "LAZYD_WAKE_TIMEOUT", _check_duration),
    "--identity-env": ("identity_env", "LAZYD_IDENTITY_ENV", _check_names),
    "--per-session-env": ("per_session_env", "LAZYD_PER_SESSION_ENV", _check_names),
    "--era": ("era", "LAZYD_ERA", _check_era),
    "--memory-max": ("memory_max", "LAZYD_MEMORY_MAX", _check_size),
}
# Options that the shim itself uses: flag -> env var.
_SHIM_VALUES = {"--socket": "LAZYD_SOCKET", "--log-file": "LAZYD_LOG_FILE", "--server": "LAZYD_SERVER",
                "--servers": "LAZYD_HUB_SERVERS"}
_SHIM_FLAGS = {"--verbose": "LAZYD_VERBOSE", "--no-autostart": "LAZYD_NO_AUTOSTART", "--hub": "LAZYD_HUB",
               "--handoff": "LAZYD_HANDOFF"}


HANDOFF_DEFAULT = True
# The hand-off (shim/handoff.py): one hop per message, and a shell waits instead of a Python
# relay. The frame path serves what cannot be handed off (a terminal, a file) and
# --handoff=0 / LAZYD_HANDOFF=0; every fault test runs on both (tests/e2e/shim_paths.py).


class Options:
    """The validated result of parsing; plain attributes, no behaviour."""

    def __init__(self) -> None:
        self.command: list[str] = []
        self.daemon_opts: dict[str, str] = {}  # only what the user set, as written
        self.server: str | None = None
        self.hub = False  # --hub: the daemon's own MCP server over all its servers (docs/hub.md)
        self.socket: str | None = None  # set only when given by --socket or LAZYD_SOCKET
        self.log_file: str | None = None
        self.verbose = False
        self.autostart = True
        self.handoff = HANDOFF_DEFAULT  # pass stdin/stdout to the daemon after the hello (docs/protocol.md)
        self.show_help = False
        self.show_version = False


def parse(argv: list[str], env: Mapping[str, str]) -> Options:
    """Parse the shim's arguments (without the program name) and environment.

    Raises UsageError for an unknown option, a missing or bad value, or a missing command. An
    empty environment variable counts as unset.
    """
    flags: dict[str, str] = {}
    command: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg == "--":
            command = argv[i:]
            break
        if not arg.startswith("-") or arg == "-":
            command = argv[i - 1 :]
            break
        if arg in ("-h", "--help"):
            flags["--help"] = "true"
            continue
        name, has_value, value = arg.partition("=")
        if name in ("--version", "--help"):
            if has_value:
                raise UsageError(f"option {name} takes no value")
            flags[name] = "true"
        elif name in _DAEMON_OPTS or name in _SHIM_VALUES:
            if not has_value:
                if i >= len(argv):
                    raise UsageError(f"option {name} needs a value")
                value = argv[i]
                i += 1
            flags[name] = value
        elif name in _SHIM_FLAGS:
            flags[name] = value if has_value else "true"
        else:
            raise UsageError(f"unknown option {name!r} (see lazyd-shim --help)")

    opts = Options()
    opts.show_help = "--help" in flags
    opts.show_version = "--version" in flags
    if opts.show_help or opts.show_version:
        return opts

    def pick(flag: str, var: str) -> tuple[str, str] | None:
        # The source is named in errors so the user knows where to fix the value.
        if flag in flags:
            return flags[flag], flag
        value = env.get(var, "")
        return (value, var) if value else None

    for flag, (key, var, check) in _DAEMON_OPTS.items():
        chosen = pick(flag, var)
        if chosen is not None:
            try:
                check(chosen[0])
            except ValueError as exc:
                raise UsageError(f"{chosen[1]}: {exc}") from None
            opts.daemon_opts[key] = chosen[0]
    for flag, var in _SHIM_FLAGS.items():
        chosen = pick(flag, var)
        if chosen is not None:
            try:
                on = parse_bool(chosen[0])
            except ValueError as exc:
                raise UsageError(f"{chosen[1]}: {exc}") from None
            if flag == "--verbose":
                opts.verbose = on
            elif flag == "--hub":
                opts.hub = on
            elif flag == "--handoff":
                opts.handoff = on
            else:
                opts.autostart = not on
    for flag, var in _SHIM_VALUES.items():
        chosen = pick(flag, var)
        if chosen is None:
            continue
        if not chosen[0]:
            raise UsageError(f"{chosen[1]}: empty value")
        if flag == "--socket":
            if len(os.fsencode(chosen[0])) > MAX_SUN_PATH_BYTES:
                raise UsageError(f"{chosen[1]}: socket path longer than {MAX_SUN_PATH_BYTES} bytes")
            opts.socket = chosen[0]
        elif flag == "--log-file":
            opts.log_file = chosen[0]
        elif flag == "--servers":
            if not opts.hub:
                raise UsageError(f"{chosen[1]} needs --hub")
            names = [n.strip() for n in chosen[0].split(",")]
            if not all(names):
                raise UsageError(f"{chosen[1]}: {chosen[0]!r} is not a comma-separated list of server names")
            opts.daemon_opts["servers"] = ",".join(names)
        else:
            opts.server = chosen[0]
    if opts.hub:
        # The hello of a hub session names no server: opts {"hub": "true"} (docs/protocol.md).
        if command or opts.server is not None:
            raise UsageError("--hub serves every server; it takes no COMMAND and no --server")
        given = sorted(k for k in opts.daemon_opts if k != "servers")
        if given:
            raise UsageError(f"--{given[0].replace('_', '-')} configures one server; it does not apply to --hub")
        opts.daemon_opts["hub"] = "true"
        return opts
    if not command and opts.server is None:
        raise UsageError("missing COMMAND to run (or --server NAME); see lazyd-shim --help")
    if command and not command[0]:
        raise UsageError("COMMAND is an empty string")
    opts.command = command
    return opts


class Log:
    """The shim's own diagnostics: connect, autostart and fallback decisions with timings.

    Never payloads. Goes to the log file when one is set (appended with one write per message, so
    several shims can share a file), else to stderr when verbose, else nowhere.
    """

    def __init__(self, opts: Options) -> None:
        self._start = time.monotonic()
        self._fd: int | None = None
        if opts.log_file is not None:
            try:
                self._fd = os.open(opts.log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            except OSError as exc:
                say(f"cannot open log file {opts.log_file}: {exc.strerror}; logging to stderr")
                self._fd = 2
        elif opts.verbose:
            self._fd = 2
        self.enabled = self._fd is not None

    def __call__(self, message: str) -> None:
        if self._fd is None:
            return
        elapsed_ms = (time.monotonic() - self._start) * 1000
        line = f"lazyd-shim[{os.getpid()}] +{elapsed_ms:.1f}ms {message}\n"
        try:
            os.write(self._fd, line.encode("utf-8", "replace"))
        except OSError:
            pass  # diagnostics must never take the relay down


def say(message: str) -> None:
    """Write one ``lazyd-shim: <message>`` line to stderr, ignoring a closed stderr."""
    try:
        os.write(2, f"lazyd-shim: {message}\n".encode("utf-8", "replace"))
    except OSError:
        pass
