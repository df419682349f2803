"""The identity of an unnamed registration (a shim's command line), as the daemon judges it.

lazyd/core/sharing/identity.py owns the rule; this is where the daemon feeds it: the config's lists, the
registration's own names, a real PATH lookup and `#!` reader, and the checks of what the daemon
cannot judge (a working directory it cannot enter, variables that are not UTF-8), which make such a
registration private rather than shared by accident.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping

from lazyd.config.load import Config
from lazyd.core.sharing.identity import Identity, identity_for
from lazyd.daemon.sessions.shebang import interpreter_of


def which(command: str, path: str | None) -> str | None:
    return shutil.which(command, path=path)


def unnamed_identity(config: Config, argv: list[str], cwd: str, env: Mapping[str, str], *,
                     force: tuple[str, ...] = (), ignore: tuple[str, ...] = (),
                     undecodable: list[str] | None = None) -> tuple[Identity, str | None]:
    """The identity, and why it must stay private (None: it may share)."""
    # The registration's own names (lazyctl wrap records the variables it declares) are
    # "declared"; patterns among them and config.toml's identity_env are "forced".
    declared = [n for n in force if not any(c in n for c in "*?[")]
    patterns = [n for n in force if n not in declared]
    identity = identity_for(argv, cwd, env, ignore=(*config.per_session_env, *ignore), which=which,
                            force=(*config.identity_env, *patterns), declared=declared,
                            interpreter=interpreter_of)
    problem = None
    if not os.path.isdir(cwd) or not os.access(cwd, os.X_OK):
        problem = f"its working directory {cwd} cannot be entered"
    elif undecodable:
        names = ", ".join(n.encode("utf-8", "surrogateescape").decode("utf-8", "replace") for n in undecodable)
        problem = f"its environment is not UTF-8 ({names})"
    return identity, problem
