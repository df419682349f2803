"""Test seams for a daemon that must die at an exact moment (tests/e2e/test_faults_daemon.py).

Not part of lazyd: a test that wants one starts its daemon (or shim) with this directory on PYTHONPATH
(`SEAMS_PATH`) and `LAZYD_TEST_HANDOFF_KILL=POINT:TEXT`; Python imports this module at start-up
and wraps the daemon's own functions, so the production modules carry no seam. The daemon
SIGKILLs itself at POINT of the first client input or answer holding TEXT:

- ``read``: a read of the client's stdin is in the region and nothing of it is relayed;
- ``relayed``: its lines are relayed and not yet recorded;
- ``answer``: an answer's write into the client's stdout went through only in part;
- ``written``: a write into the client's stdout that carried it went through, whole or in part.
"""

from __future__ import annotations

import os
import signal
from typing import Any

_SPEC = os.environ.pop("LAZYD_TEST_HANDOFF_KILL", "")  # popped: nothing the daemon starts inherits it


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _install(point: str, text: bytes) -> None:
    from lazyd.daemon.handoff import session as handoff
    from lazyd.daemon.handoff import outbox as handoff_outbox

    if point in ("read", "relayed"):
        take = handoff.HandoffSession._take

        def _take(self: Any, data: bytes) -> None:
            if point == "read" and text in data:
                _die()
            take(self, data)
            if point == "relayed" and text in data:
                _die()

        handoff.HandoffSession._take = _take  # type: ignore[method-assign]
    elif point in ("answer", "written"):
        write = handoff_outbox.ClientEnds.write

        def _write(self: Any, parts: list[bytes | memoryview]) -> int:
            written = write(self, parts)
            whole_too = point == "written"
            if (0 < written < sum(len(part) for part in parts) or (whole_too and written)) \
                    and any(text in bytes(part) for part in parts):
                _die()
            return written

        handoff_outbox.ClientEnds.write = _write  # type: ignore[method-assign]


if ":" in _SPEC:
    _point, _text = _SPEC.split(":", 1)
    _install(_point, _text.encode())


# LAZYD_TEST_SHELLS=PATH[:PATH...]: the shells a shim may run its waiting program with
# (lazyd_shim/handoff.py's SHELLS), to play a machine whose shell cannot be run.
_SHELLS = os.environ.pop("LAZYD_TEST_SHELLS", None)
if _SHELLS is not None:
    import importlib

    setattr(importlib.import_module("lazyd_shim.handoff"), "SHELLS", tuple(p for p in _SHELLS.split(":") if p))
