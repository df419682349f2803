"""The shim's command line and environment: parsing, validation, and the diagnostics sink.

Every option can also come from a ``LAZYD_*`` variable (an empty one counts as unset); a flag beats
its variable. The first argument that is not an option starts COMMAND, so ``lazyd-shim node
server.js --port 3`` passes ``--port 3`` to the server. Everything is checked here, before anything
connects: a bad input raises UsageError, which ``main`` prints as one line with exit status 2. The
daemon's options are passed on as the strings the user wrote, and only those the user set (the
daemon owns the defaults). Hand-written rather than argparse, which is slow to import.
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

MAX_SUN_PATH_BYTES = 107  # sun_path holds 108 bytes with the terminating NUL on Linux


# Options forwarded to the daemon in the hello's `opts`, under the flag's name with `_`.
_DURATIONS = ("--linger", "--check-linger", "--idle-timeout", "--start-timeout", "--wake-interval", "--wake-timeout")
_DAEMON_OPTS = (*_DURATIONS, "--share", "--wake-command", "--identity-env", "--per-session-env", "--era", "--memory-max")
_SHIM_VALUES = ("--socket", "--log-file", "--server", "--servers")
_SHIM_FLAGS = ("--verbose", "--no-autostart", "--hub", "--handoff")
# The durations the daemon refuses as 0 (lazyd/config/load.py), with its words.
_POSITIVE = {"--start-timeout": "must be longer than 0 (it bounds how long a start may take)",
             "--wake-interval": "must be longer than 0", "--wake-timeout": "must be longer than 0"}


def _checked(flag: str, value: str) -> str:
    """`value` as it is kept for `flag`; ValueError saying what is wrong with it. A daemon option's
    rule is the daemon's own where it lives in the stdlib-only lazyd.config modules, with its
    message; they are imported only when an option is set: they compile regular expressions."""
    if flag in _SHIM_VALUES and not value:
        raise ValueError("empty value")
    if flag in _DURATIONS:
        from lazyd.config.durations import parse_duration

        if parse_duration(value) <= 0 and flag in _POSITIVE:
            raise ValueError(_POSITIVE[flag])
    elif flag == "--memory-max":
        from lazyd.config.sizes import parse_limit

        parse_limit(value)
    elif flag in ("--identity-env", "--per-session-env"):
        from lazyd.config.envnames import parse_names

        parse_names(value)
    elif flag == "--share":
        from lazyd.config.durations import parse_share

        parse_share(value)
    elif flag == "--era" and value not in ("auto", "handshake", "stateless"):
        raise ValueError(f"invalid era {value!r} (use auto, handshake or stateless)")
    elif flag == "--wake-command":
        import json

        try:
            argv = json.loads(value)
        except ValueError:
            raise ValueError(f"invalid JSON argv {value!r} (use e.g. '[\"pgrep\", \"-x\", \"code\"]')") from None
        if not (isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv) and argv[0]):
            raise ValueError(f"invalid JSON argv {value!r}: it must be a non-empty list of strings")
    elif flag == "--socket" and len(os.fsencode(value)) > MAX_SUN_PATH_BYTES:
        raise ValueError(f"socket path longer than {MAX_SUN_PATH_BYTES} bytes")
    elif flag == "--servers":
        names = [n.strip() for n in value.split(",")]
        if not all(names):
            raise ValueError(f"{value!r} is not a comma-separated list of server names")
        return ",".join(names)
    return value


def env_var(flag: str) -> str:
    """The variable that sets `flag` when the flag is not given."""
    return "LAZYD_HUB_SERVERS" if flag == "--servers" else "LAZYD_" + flag[2:].upper().replace("-", "_")


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
        self.handoff = True  # pass stdin/stdout to the daemon after the hello (shim/handoff.py)
        self.show_help = False
        self.show_version = False


def parse(argv: list[str], env: Mapping[str, str]) -> Options:
    """Parse the shim's arguments (without the program name) and environment.

    Raises UsageError for an unknown option, a missing or bad value, or a missing command.
    """
    flags: dict[str, str] = {}
    command: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg == "--" or not arg.startswith("-") or arg == "-":
            command = argv[i:] if arg == "--" else argv[i - 1 :]
            break
        name, has_value, value = arg.partition("=")
        if arg == "-h" or name in ("--version", "--help"):
            if has_value:
                raise UsageError(f"option {name} takes no value")
            flags["--help" if arg == "-h" else name] = "true"
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
    given: dict[str, str] = {}  # flag -> its checked value
    switches: dict[str, bool] = {}
    source: dict[str, str] = {}  # flag -> where it was set, named in errors so the user knows what to fix
    for flag in (*_DAEMON_OPTS, *_SHIM_VALUES, *_SHIM_FLAGS):
        if flag in flags:
            source[flag], value = flag, flags[flag]
        elif env.get(env_var(flag)):
            source[flag], value = env_var(flag), env[env_var(flag)]
        else:
            continue
        try:
            if flag in _SHIM_FLAGS:
                from lazyd.config.durations import parse_bool

                switches[flag] = parse_bool(value)
            else:
                given[flag] = _checked(flag, value)
        except ValueError as exc:
            raise UsageError(f"{source[flag]}: {exc}") from None
    opts.daemon_opts = {flag[2:].replace("-", "_"): given[flag] for flag in _DAEMON_OPTS if flag in given}
    opts.verbose, opts.hub = switches.get("--verbose", False), switches.get("--hub", False)
    opts.autostart = not switches.get("--no-autostart", False)
    opts.handoff = switches.get("--handoff", True)
    opts.socket, opts.log_file, opts.server = given.get("--socket"), given.get("--log-file"), given.get("--server")
    if "--servers" in given:
        if not opts.hub:
            raise UsageError(f"{source['--servers']} needs --hub")
        opts.daemon_opts["servers"] = given["--servers"]
    if opts.hub:
        # The hello of a hub session names no server: opts {"hub": "true"} (docs/protocol.md).
        if command or opts.server is not None:
            raise UsageError("--hub serves every server; it takes no COMMAND and no --server")
        configured = sorted(k for k in opts.daemon_opts if k != "servers")
        if configured:
            raise UsageError(f"--{configured[0].replace('_', '-')} configures one server; it does not apply to --hub")
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

    def clear_of(self, places: tuple[int, ...]) -> None:
        """Move the log file's descriptor off `places`, which the caller is about to fill."""
        if self._fd is not None and self._fd > 2 and self._fd in places:
            import fcntl

            self._fd = fcntl.fcntl(self._fd, fcntl.F_DUPFD_CLOEXEC, max(places) + 1)

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
