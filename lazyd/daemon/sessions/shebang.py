"""The interpreter a script names through `env` on its first line, for the identity.

`#!/usr/bin/env node` runs whatever `node` PATH finds, so such a script's PATH counts by that
(lazyd/core/sharing/identity.py); `#!/usr/bin/node` names its interpreter outright and PATH cannot change it.
"""

from __future__ import annotations

import os

MAX_LINE_BYTES = 256  # the kernel reads at most 256 bytes of a #! line (BINPRM_BUF_SIZE)


def interpreter_of(path: str) -> str | None:
    """NAME from a `#!/usr/bin/env [-S] NAME ...` first line of `path`; None for anything else
    (a binary, an absolute interpreter, a file that cannot be read)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        head = os.read(fd, MAX_LINE_BYTES)
    except OSError:
        return None
    finally:
        os.close(fd)
    if not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").split()
    if not words or os.path.basename(words[0]) != "env":
        return None
    names = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
    return names[0] if names and "/" not in names[0] else None
