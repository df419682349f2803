"""The ``lazyd-shim`` entry point: options, signals, session or fail-open, then the relay.

This runs at every client start: what only one path needs is imported on that path.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs start-up time
if TYPE_CHECKING:
    import signal
else:
    import _signal as signal  # the C module: `signal` builds enums (and imports enum) at import

from lazyd.errors import Unavailable, UsageError

from . import __version__
from .options import USAGE, Log, parse, say
from .slots import RESUME_FLAG, taken

# The client stopping us is the normal end of a session, not an error: exit quietly at once.
_QUIET_EXIT_STATUS: dict[int, int] = {signal.SIGTERM: 0, signal.SIGHUP: 0, signal.SIGINT: 128 + signal.SIGINT}


def _on_signal(signum: int, _frame: object) -> None:
    # os._exit: no teardown that could wait on the stdin thread; nothing is buffered (os.write).
    os._exit(_QUIET_EXIT_STATUS.get(signum, 128 + signum))


def main(argv: list[str] | None = None) -> int:
    """Run the shim; returns the exit status (most exits happen inside the relay, via os._exit)."""
    try:
        return _main(argv)
    except Exception as exc:  # one line, never a traceback, as the user interface
        say(f"internal error: {exc!r}")
        return 70


def _main(argv: list[str] | None) -> int:
    args = sys.argv[1:] if argv is None else argv
    region: int | None = None
    slot: int | None = None
    if args and args[0].startswith(RESUME_FLAG):
        slot = taken()  # before anything reads the environment (shim/slots.py)
        try:
            region = int(args[0][len(RESUME_FLAG) :])
        except ValueError:
            say(f"{args[0]}: not a descriptor number")
            return 2
        args = args[1:]
    try:
        opts = parse(args, os.environ)
    except UsageError as exc:
        say(str(exc))
        return 2
    if opts.show_help:
        os.write(1, USAGE.encode())
        return 0
    if opts.show_version:
        os.write(1, f"lazyd-shim {__version__}\n".encode())
        return 0
    for signum in _QUIET_EXIT_STATUS:
        signal.signal(signum, _on_signal)
    log = Log(opts)
    if region is not None:
        from . import recover

        recover.run(opts, region, args, log, slot)
    log(f"start: argv={opts.command!r} server={opts.server!r} hub={opts.hub} opts={opts.daemon_opts!r}")

    from . import connect, handoff

    offered = handoff.offer(None, log) if opts.handoff else None
    try:
        conn = connect.open_session(opts, [], log, fds=offered)
    except Unavailable as exc:  # what `offer` opened is close-on-exec: the exit or exec below closes it
        log(f"daemon unavailable: {exc}")
        if exc.user_error:  # a refused option or a file the user must fix: never hidden by a fallback
            say(str(exc))
            return 2
        if not opts.command:
            what = "--hub" if opts.hub else f"--server {opts.server}"
            say(f"daemon unavailable ({exc}); {what} cannot run without the daemon")
            return 1
        from lazyd.host import fallback_journal

        from .fallback import exec_directly

        fallback_journal.record(connect.socket_path(opts), str(exc), opts.command[0])  # for lazyctl status
        exec_directly(opts.command, str(exc))

    if offered is not None:
        handoff.close_passed(offered)
        if conn.welcome.handoff:
            handoff.wait(conn, offered[2], args, log, connect.socket_path(opts))  # the daemon serves the client now
        os.close(offered[2])
    from .relay import Relay

    status = Relay(opts, conn, log).run()
    os._exit(status)  # a fallback's server exited; the stdin thread is still blocked in a read


if __name__ == "__main__":
    sys.exit(main())
