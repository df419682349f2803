"""Every error lazyd raises on purpose, in one tree (the shape of httpx's exceptions).

::

    LazydError                the root: str() is one line fit for a user, never a traceback
    ├── UserError             the user must fix something; lazyd never works around it (no
    │   │                     fail-open), and a command exits with status 2
    │   ├── UsageError        a bad flag, option value or command line (lazyd-shim, lazyctl,
    │   │                     lazyctl wrap)
    │   ├── ConfigError       config.toml, or a registration option, that lazyd refuses
    │   ├── StateFileError    a file in lazyd's state or cache dir that is not lazyd's own
    │   └── HubOptionError    a hub hello with a command, a server name or a server's option
    ├── SetupError            the environment is unsafe or unusable (runtime dir, socket path,
    │                         home): the daemon exits 1 and a shim runs the server directly
    ├── AlreadyRunning        another live daemon holds the instance lock or the socket (exit 0)
    ├── ProtocolError         a peer broke the protocol: its connection is closed, nothing else
    │   ├── WireError         bytes that are not a valid frame (lazyd/protocol/wire.py)
    │   ├── SlowPeer          a frame that started and did not finish within its deadline
    │   └── LineTooLong       a server wrote a stdout line over its limit
    ├── Refused               the daemon will not serve a hello; ``code`` and ``message`` go into
    │   │                     the ``refused`` frame
    │   └── NotReclaimed      a lost daemon's session it leaves to the shim's own recovery
    ├── SpawnError            a server's command cannot be started (not found, not executable,
    │                         bad working directory); ``errno`` says which
    ├── LifecycleError        an event no lifecycle state can absorb: a bug of the caller
    ├── AdoptionError         a daemon cannot take over what its predecessor handed over (a state
    │                         file of another version, corrupt or missing; a server gone): it
    │                         falls back to stopping and restarting, and says why
    ├── Unavailable           the shim cannot have the daemon; ``final``: retrying is pointless,
    │                         ``user_error``: exit 2 instead of running the server directly
    ├── NoDaemon              nobody listens on the socket path (ECONNREFUSED, ENOENT): the shim
    │                         may start one
    ├── ReplayFailed          a server the shim runs directly failed its replayed initialize
    ├── CtlError              a lazyctl operation failed (exit status ``exit_code``, 1)
    │   └── DaemonNotRunning  nothing listens on the socket (exit status 3, as systemctl's)
    ├── WrapError             lazyctl wrap could not edit a config; nothing was written (exit 1)
    │   └── ConflictError     the file changed between lazyctl's read and its replace
    └── JsonSyntaxError       a client config that is not JSON of its dialect (also a ValueError);
                              lazyctl wrap turns it into a WrapError naming the file

Where low-level errors become these (each at one boundary, so nothing above it sees an OSError,
a msgpack exception or a RuntimeError of a library):

- lazyd/protocol/wire.py: anything msgpack raises on a peer's bytes becomes WireError;
- lazyd/host/paths.py: platformdirs' RuntimeError for a missing home becomes SetupError;
- lazyd/daemon/connections/listener.py: a broken or closed stream ends the connection quietly, a
  ProtocolError ends it with one warning, anything else is logged as a bug;
- lazyd/daemon/process/child.py: exec failures (ENOENT, EACCES, ENOEXEC, a bad cwd) become SpawnError;
- shim/connect.py: OSError and WireError during connect and hello become Unavailable;
- lazyd/ctl/client.py: OSError, timeouts and WireError on the control socket become CtlError.

Rules: the message is one line (callers print it after a prefix, and log records must not split);
it names the file, flag or server and the fix, never a value that could be a secret. Errors that
are a local bug (encoding a frame over the limits) stay ValueError/TypeError: they are not the
user's or the peer's, and must not be caught as if they were. This module imports nothing: every
floor of lazyd, the shim and the pure core included, may import it.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: the shim imports this module at every start
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "LazydError", "UserError", "UsageError", "ConfigError", "StateFileError", "HubOptionError",
    "SetupError", "AlreadyRunning", "ProtocolError", "WireError", "SlowPeer", "LineTooLong",
    "Refused", "NotReclaimed", "SpawnError", "LifecycleError", "AdoptionError", "Unavailable", "NoDaemon", "ReplayFailed", "CtlError",
    "DaemonNotRunning", "WrapError", "ConflictError", "JsonSyntaxError",
]


class LazydError(Exception):
    """The root of every error lazyd raises on purpose; ``str()`` is one line for a user."""


# --- the user must fix something ------------------------------------------------------------------


class UserError(LazydError):
    """Something only the user can fix; never worked around by running a server directly."""


class UsageError(UserError):
    """A bad flag, option value or missing command; the message is one line without a prefix."""


class ConfigError(UserError):
    """A config file or shim option that lazyd refuses; ``str()`` is one line fit for a user."""

    def __init__(self, message: str) -> None:
        # One line is the contract: a stray newline would split a log record or a status line.
        super().__init__(message.replace("\r", "\\r").replace("\n", "\\n"))


class StateFileError(UserError):
    """A state file lazyd will not use; ``str()`` is one line naming the file, the problem and the fix."""


class HubOptionError(UserError):
    """A hub hello the daemon refuses; ``str()`` is one line for the ``refused`` frame."""


# --- the daemon's environment ---------------------------------------------------------------------


class SetupError(LazydError):
    """The environment is unsafe or unusable; the message is one line for the operator."""


class AlreadyRunning(LazydError):
    """Another live daemon holds the instance lock or answers on the socket."""


# --- peers that break the protocol ----------------------------------------------------------------


class ProtocolError(LazydError):
    """A peer (a shim, lazyctl, a server) broke the protocol; only its connection pays for it."""


class WireError(ProtocolError):
    """The peer sent bytes that are not a valid frame. Close the connection; never reuse the decoder."""


class SlowPeer(ProtocolError):
    """The peer started a frame and did not finish it within the frame deadline."""


class LineTooLong(ProtocolError):
    """The child wrote a stdout line longer than the spec's max_line_bytes."""


# --- the daemon's answers and its servers ---------------------------------------------------------


class Refused(LazydError):
    """A hello the daemon will not serve; ``code`` goes into the ``refused`` frame."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class NotReclaimed(Refused):
    """A reclaiming hello whose session the daemon does not take back itself
    (lazyd/handoff/recovery.py): refused with code ``reclaim``; the shim's recovery takes it."""

    def __init__(self, message: str) -> None:
        super().__init__("reclaim", message)


class SpawnError(LazydError):
    """The command cannot be executed: not found, not executable, bad format, or bad cwd."""

    def __init__(self, err: int, message: str) -> None:
        super().__init__(message)
        self.errno = err
        self.message = message


class LifecycleError(LazydError):
    """A caller bug no state can absorb (time going backwards, a negative count, a bad policy)."""


class AdoptionError(LazydError):
    """What a predecessor daemon handed over cannot be taken over (lazyd/daemon/upgrade/inherit.py)."""


# --- the shim -------------------------------------------------------------------------------------


class Unavailable(LazydError):
    """The daemon cannot be had; ``str()`` is the reason. ``final`` means retrying is pointless;
    ``user_error`` that the user must fix something (a refused option, a bad config file): the
    shim then exits 2 instead of running the server directly."""

    def __init__(self, reason: str, *, final: bool = False, user_error: bool = False) -> None:
        super().__init__(reason)
        self.final = final or user_error
        self.user_error = user_error


class NoDaemon(LazydError):
    """ECONNREFUSED or ENOENT: nobody listens on the socket path."""


class ReplayFailed(LazydError):
    """The directly run server exited or stalled before answering the replayed initialize."""


# --- lazyctl --------------------------------------------------------------------------------------


class CtlError(LazydError):
    """An operation failed; ``message`` is one line, ``data`` what the daemon sent along (if any)."""

    exit_code = 1  # lazyctl's EXIT_FAILED

    def __init__(self, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.data = data


class DaemonNotRunning(CtlError):
    """Nothing listens on the socket (and, unless autostart was asked for, nothing was started)."""

    exit_code = 3  # lazyctl's EXIT_NOT_RUNNING: the LSB status code systemctl uses for "not running"


class WrapError(LazydError):
    """An operation failed and nothing was written; the message is one readable line."""


class ConflictError(WrapError):
    """The file changed under us between read and replace; the edit was abandoned."""


class JsonSyntaxError(LazydError, ValueError):
    """The text is not a JSON document of the expected dialect; the message names line and column."""
