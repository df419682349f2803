"""`python -m lazyd.daemon` and the `lazyd` command: the daemon.

`run` counts a start that systemd handed kept sessions before anything else is imported
(lazyd/daemon/crash_loop.py): a daemon that cannot import its own modules must still let them go.
"""

import os


def run() -> None:
    from lazyd.daemon import crash_loop

    crash_loop.count_start(os.environ)
    from lazyd.daemon.main import main

    main()


if __name__ == "__main__":
    run()
