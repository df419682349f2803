"""`python -m lazyd.daemon` and the `lazyd` command: the daemon.

`run` counts a start that systemd handed kept sessions before anything else is imported
(lazyd/daemon/crash_loop.py): a daemon that cannot import its own modules must still let them go.
With ``--stderr-until-ready`` its last line on stderr is ``exit N``: the shim that started it is
not its parent (shim/dial.py). Once the daemon listens, stderr is /dev/null and the line goes
nowhere.
"""

import os
import sys


def run() -> None:
    from lazyd.daemon import crash_loop

    crash_loop.count_start(os.environ)
    try:
        from lazyd.daemon.main import main

        main()
    except SystemExit as exc:
        if "--stderr-until-ready" in sys.argv[1:]:
            code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
            try:
                print(f"exit {code}", file=sys.stderr, flush=True)
            except OSError:
                pass  # the shim stopped reading
        raise


if __name__ == "__main__":
    run()
