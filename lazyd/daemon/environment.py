"""The daemon's own environment, made at start: the allowlist, whoever started it.

A shim starts the daemon with the allowlist of lazyd/host/daemonenv.py; a terminal or systemd
gives it whatever they had. So before it starts anything the daemon reduces `os.environ` to the
same base (`keep_own`), and its servers, predicates and successor inherit the same whoever started
it. The variables its config expands (``${VAR}``) are read from the start environment
(`StartEnvironment` records which) and kept, so a reload or a successor finds them again; they
reach only the servers whose ``env`` names them. (``/proc/<pid>/environ`` still shows the
environment at exec.)
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping

from lazyd.host import daemonenv, sockpath

log = logging.getLogger("lazyd")

MAX_NAMES_LOGGED = 40  # a terminal may have hundreds; the first few say what kind they were


class StartEnvironment(Mapping[str, str]):
    """The environment the daemon was started with, for ``${VAR}`` in its config: every name a
    config looks up is noted in `expanded`."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._environ = dict(environ)
        self.expanded: set[str] = set()

    def __getitem__(self, name: str) -> str:
        self.expanded.add(name)
        return self._environ[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._environ)

    def __len__(self) -> int:
        return len(self._environ)


def keep_own(expanded: set[str]) -> None:
    """Reduce `os.environ` to the allowlist, the daemon's own variables and `expanded`; without
    ``XDG_RUNTIME_DIR``, the user's ``/run/user/<uid>`` (lazyd/host/sockpath.py) is set as it. The
    names dropped are logged (never a value): where a named server misses a variable, the log
    says it was there and why it went."""
    kept = daemonenv.own(os.environ, sockpath.login_runtime_dir(), sorted(expanded))
    dropped = sorted(set(os.environ) - set(kept))
    os.environ.clear()
    os.environ.update(kept)
    if dropped:
        log.info("environment: %d variables not in the daemon's allowlist dropped (docs/configuration.md, "
                 "\"The daemon's environment\"): %s", len(dropped), " ".join(dropped[:MAX_NAMES_LOGGED])
                 + (" ..." if len(dropped) > MAX_NAMES_LOGGED else ""))
