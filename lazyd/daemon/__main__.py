"""`python -m lazyd.daemon`: the daemon, as the `lazyd` command runs it."""

from lazyd.daemon.main import main

main()
