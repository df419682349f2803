"""The errors of wrapping, and whose fault each is (the CLI maps them to exit statuses).

::

    WrapError            an operation could not be done (bad file, refused registration, I/O);
    │                    nothing was written. Exit status 1.
    ├── ConflictError    the file changed between our read and our replace; the write was
    │                    abandoned, the backup kept and the registration records rolled back.
    BadUsage             the command line asks for something impossible (unknown client, a bad
                         --env pair, --project for a client without projects). Exit status 2.

Every message is one line meant for a user: it names the file or server and the problem, never a
value from the config (values may be secrets).
"""

from __future__ import annotations


class WrapError(Exception):
    """An operation failed and nothing was written; the message is one readable line."""


class ConflictError(WrapError):
    """The file changed under us between read and replace; the edit was abandoned."""


class BadUsage(Exception):
    """The request itself is wrong (exit status 2); the message is one readable line."""
