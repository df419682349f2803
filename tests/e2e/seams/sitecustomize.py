"""Test seams: a daemon or a shim that misbehaves on cue, without a seam in the product.

Not part of lazyd: lazyd and the shim read no test variable. A test that wants a seam starts its
process with this directory on PYTHONPATH (`SEAMS_PATH`, `seam_env()` in faults_support.py) and
one of the variables below; Python imports this module at start-up, and it wraps the product's
own functions before they run. Each variable is popped at once, so nothing the process starts
inherits it (and a daemon never hands PYTHONPATH on: lazyd/host/daemonenv.py).

In a daemon:

- ``LAZYD_TEST_HANDOFF_KILL=POINT:TEXT``: the daemon SIGKILLs itself at POINT of the first client
  input or answer holding TEXT:
  ``read`` (a read of the client's stdin is in the region and nothing of it is relayed),
  ``relayed`` (its lines are relayed and not yet recorded), ``answer`` (an answer's write into the
  client's stdout went through only in part), ``written`` (a write into the client's stdout that
  carried it went through, whole or in part);
- ``LAZYD_TEST_DEADLINE_S=SECONDS``: the hello timeout, the frame deadline and the control send
  deadline (lazyd/daemon/connections/listener.py) are all SECONDS, so that tests need not wait
  for the real ones;
- ``LAZYD_TEST_UPGRADE_FAULT=KIND``: an upgrade hands its successor a state it cannot inherit:
  ``version=N`` (the state says version N), ``corrupt`` (a byte of the body changed after its
  checksum), ``fd`` (a server's descriptor named but not inherited).

In a shim:

- ``LAZYD_TEST_SHELLS=PATH[:PATH...]``: the shells it may run its waiting program with, to play a
  machine whose shell cannot be run;
- ``LAZYD_TEST_DAEMON_ARGV=JSON``: autostart runs this argv instead of ``python -m lazyd.daemon``
  (the shim's own flags after it), so that a test can put a fake daemon in its place.
"""

from __future__ import annotations

import json
import os
import signal
from typing import Any


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _handoff_kill(point: str, text: bytes) -> None:
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


def _deadlines(seconds: float) -> None:
    from lazyd.daemon.connections import listener

    listener.HELLO_TIMEOUT_S = listener.FRAME_DEADLINE_S = listener.CONTROL_SEND_DEADLINE_S = seconds


def _upgrade_fault(kind: str) -> None:
    from lazyd.daemon.sessions import registry
    from lazyd.daemon.upgrade import handover, state
    from lazyd.host.privatefiles import write_private

    if kind.startswith("version=") or kind == "corrupt":
        version = int(kind.partition("=")[2]) if kind != "corrupt" else state.STATE_VERSION

        def write_state(path: Any, body: dict[str, Any]) -> None:
            data = state.encode_state(body, version)
            if kind == "corrupt":
                data = data[:-2] + bytes([data[-2] ^ 0x01]) + data[-1:]
            write_private(path, data, durable=False)

        setattr(handover, "write_state", write_state)  # its own name for state.write_state
    elif kind == "fd":
        lost: list[int] = []
        to_state = registry.Registry.to_state

        def _to_state(self: Any, *args: Any, **kwargs: Any) -> Any:
            body, secrets, fds = to_state(self, *args, **kwargs)
            lost[:] = fds[:1]
            return body, secrets, fds

        registry.Registry.to_state = _to_state  # type: ignore[method-assign]
        execve = os.execve

        def _execve(path: Any, argv: Any, env: Any) -> None:
            for fd in lost:  # named in the envelope, yet closed by the exec
                os.set_inheritable(fd, False)
            execve(path, argv, env)

        setattr(os, "execve", _execve)


def _daemon_argv(argv: list[str]) -> None:
    import importlib

    dial = importlib.import_module("lazyd_shim.dial")  # the installed name of shim/
    product = dial.daemon_argv

    def daemon_argv(path: str, explicit: bool) -> list[str]:
        # The product's command is `python -m lazyd.daemon` and the shim's flags: keep the flags.
        flags: list[str] = product(path, explicit)[3:]
        return argv + flags

    setattr(dial, "daemon_argv", daemon_argv)


_kill = os.environ.pop("LAZYD_TEST_HANDOFF_KILL", "")
if ":" in _kill:
    _point, _text = _kill.split(":", 1)
    _handoff_kill(_point, _text.encode())
_deadline = os.environ.pop("LAZYD_TEST_DEADLINE_S", "")
if _deadline:
    _deadlines(float(_deadline))
_fault = os.environ.pop("LAZYD_TEST_UPGRADE_FAULT", "")
if _fault:
    _upgrade_fault(_fault)
_argv = os.environ.pop("LAZYD_TEST_DAEMON_ARGV", "")
if _argv:
    _daemon_argv(json.loads(_argv))

# In a shim, LAZYD_TEST_SHELLS=PATH[:PATH...]: the shells a shim may run its waiting program with
# (lazyd_shim/handoff.py's SHELLS), to play a machine whose shell cannot be run.
_SHELLS = os.environ.pop("LAZYD_TEST_SHELLS", None)
if _SHELLS is not None:
    import importlib

    setattr(importlib.import_module("lazyd_shim.handoff"), "SHELLS", tuple(p for p in _SHELLS.split(":") if p))
