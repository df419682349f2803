"""Every error lazyd raises on purpose, in one tree (the shape of httpx's exceptions).

::

    LazydError                the root: str() is one line fit for a user, never a traceback
    ├── UsageError            a bad flag, option value or command line (exit 2, never worked around)
    ├── ConfigError           config.toml, or a registration option, that lazyd refuses (exit 2)
    ├── StateFileError        a file in lazyd's state or cache dir that is not lazyd's own
    ├── SetupError            an unsafe or unusable environment: the daemon exits 1, a shim runs
    │                         the server directly
    ├── AlreadyRunning        another live daemon holds the instance lock or the socket (exit 0)
    ├── WireError             bytes that are not a valid frame: that connection is closed
    ├── SlowPeer              a frame that did not finish within its deadline: likewise
    ├── LineTooLong           a server wrote a stdout line over its limit
    ├── Refused               a hello the daemon will not serve (``code`` for the ``refused`` frame)
    ├── SpawnError            a server's command cannot be started; ``errno`` says why
    ├── InheritError          a successor cannot take over what was handed over: it restarts
    ├── Unavailable           the shim cannot have the daemon (``final``, ``user_error``)
    ├── NoDaemon              nobody listens on the socket path: the shim may start one
    ├── CtlError              a lazyctl operation failed (``exit_code`` 1)
    │   └── DaemonNotRunning  nothing listens on the socket (exit 3, as systemctl's)
    ├── WrapError             lazyctl wrap could not edit a config; nothing was written
    └── JsonSyntaxError       a client config that is not JSON of its dialect (also a ValueError)

Low-level errors become these at one boundary each, so nothing above it sees an OSError, a msgpack
exception or a library's RuntimeError: lazyd/protocol/wire.py (msgpack's errors on a peer's bytes),
lazyd/host/paths.py (platformdirs' missing home), lazyd/daemon/connections/listener.py (a broken
stream ends the connection quietly, a bad or slow frame with one warning), lazyd/daemon/process/child.py
(exec failures), shim/connect.py (connect and hello failures become Unavailable), lazyd/ctl/client.py
(the control socket's failures become CtlError).
The message is one line naming the file, flag or server and the fix, never a possible secret. A
local bug stays ValueError/TypeError, so it is never caught as the user's or the peer's. This
module imports nothing: every floor, the shim and the core included, may import it.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: the shim imports this module at every start
if TYPE_CHECKING:
    from typing import Any


class LazydError(Exception):
    """The root of every error lazyd raises on purpose; ``str()`` is one line for a user."""


class UsageError(LazydError):
    """A bad flag, option value or missing command; the message is one line without a prefix."""


class ConfigError(LazydError):
    """A config file or shim option that lazyd refuses; ``str()`` is one line fit for a user."""

    def __init__(self, message: str) -> None:
        # One line is the contract: a stray newline would split a log record or a status line.
        super().__init__(message.replace("\r", "\\r").replace("\n", "\\n"))


class StateFileError(LazydError):
    """A state file lazyd will not use; ``str()`` is one line naming the file, the problem and the fix."""


class SetupError(LazydError):
    """The environment is unsafe or unusable; the message is one line for the operator."""


class AlreadyRunning(LazydError):
    """Another live daemon holds the instance lock or answers on the socket."""


class WireError(LazydError):
    """The peer sent bytes that are not a valid frame. Close the connection; never reuse the decoder."""


class SlowPeer(LazydError):
    """The peer started a frame and did not finish it within the frame deadline."""


class LineTooLong(LazydError):
    """The child wrote a stdout line longer than the spec's max_line_bytes."""


class Refused(LazydError):
    """A hello the daemon will not serve; ``code`` goes into the ``refused`` frame."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class SpawnError(LazydError):
    """The command cannot be executed: not found, not executable, bad format, or bad cwd."""

    def __init__(self, err: int, message: str) -> None:
        super().__init__(message)
        self.errno = err
        self.message = message


class InheritError(LazydError):
    """What a predecessor daemon handed over cannot be taken over (lazyd/daemon/upgrade/inherit.py)."""


class Unavailable(LazydError):
    """The daemon cannot be had; ``final``: retrying is pointless; ``user_error``: the user must
    fix something, and the shim exits 2 instead of running the server directly."""

    def __init__(self, reason: str, *, final: bool = False, user_error: bool = False) -> None:
        super().__init__(reason)
        self.final = final or user_error
        self.user_error = user_error


class NoDaemon(LazydError):
    """ECONNREFUSED or ENOENT: nobody listens on the socket path."""


class CtlError(LazydError):
    """An operation failed; ``message`` is one line, ``data`` what the daemon sent along (if any)."""

    exit_code = 1  # lazyctl's EXIT_FAILED

    def __init__(self, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.data = data


class DaemonNotRunning(CtlError):
    """Nothing listens on the socket (and, unless autostart was asked for, nothing was started)."""

    exit_code = 3  # the LSB status code systemctl uses for "not running"


class WrapError(LazydError):
    """An operation failed and nothing was written; the message is one readable line."""


class JsonSyntaxError(LazydError, ValueError):
    """The text is not a JSON document of the expected dialect; the message names line and column."""
