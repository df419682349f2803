"""The waiting end of a hand-off (shim/handoff.py): what it offers, where it waits, and what its
last resort answers when the shim it would exec is gone.

Testing policy: real sealed regions written through the daemon's ledger, the last-resort script
run by a real interpreter in isolated mode, the client's stdout a real pipe; the offer is made on
the real descriptors of a child process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from lazyd.handoff import region as hs
from lazyd.daemon.handoff.ledger import Ledger, map_region
from lazyd.handoff.region import Region
from lazyd.linepeek import error_line
from shim import handoff
from shim.relay import LOST_CODE, LOST_MESSAGE


@pytest.fixture
def fd() -> Iterator[int]:
    region = hs.create_region()
    yield region
    os.close(region)


def call(request_id: int | str) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {}}).encode()


def test_the_error_the_waiter_writes_is_the_shim_s_lost_connection_error() -> None:
    assert b'{"jsonrpc":"2.0","id":7' + handoff.ERROR_TAIL == error_line(7, LOST_CODE, LOST_MESSAGE)


def test_with_no_shim_left_to_exec_the_waiter_s_script_answers_what_is_in_flight_itself(fd: int) -> None:
    buf = map_region(fd)
    try:
        ledger = Ledger(Region(buf))
        for request_id in (1, "1", 2):
            ledger.client_line(call(request_id))
        ledger.answered(2)
        ledger.torn(True)  # the daemon died inside an answer
    finally:
        buf.close()
    os.set_inheritable(fd, True)
    done = subprocess.run([sys.executable, "-I", "-S", "-c", handoff.orphan_script(), "/gone/python",
                           f"--resume-handoff={fd}"], pass_fds=[fd], capture_output=True, timeout=30)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split(b"\n")
    assert lines[0] == b"", "the cut answer is ended first"
    answers = [json.loads(line) for line in lines[1:] if line]
    assert [(a["id"], a["error"]["code"]) for a in answers] == [(1, LOST_CODE), ("1", LOST_CODE)]
    assert b"no longer installed" in done.stderr


OFFER = """
import os, sys
from shim import handoff
from shim.options import Log, parse
log = Log(parse(["--verbose", "--", "true"], {}))
got = handoff.offer(None, log)
print("offered" if got is not None else "not offered", file=sys.stderr)
"""


def _offer_in_child(env: dict[str, str], prelude: str = "") -> str:
    """What a shim whose stdio are pipes says when it makes its offer, with `prelude` run first."""
    done = subprocess.run([sys.executable, "-c", prelude + OFFER], env={**os.environ, **env},
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stderr.decode()


def test_stdio_pipes_are_offered_where_dash_and_a_sealed_memfd_are_there() -> None:
    assert "\noffered" in "\n" + _offer_in_child({})


def test_without_dash_the_session_is_relayed_over_frames_with_one_log_line() -> None:
    said = _offer_in_child({handoff.WAITER_ENV: "none"})
    assert said.count("no hand-off") == 1 and "no dash" in said and said.endswith("not offered\n")


@pytest.mark.parametrize("missing", ["os.memfd_create", "os.MFD_ALLOW_SEALING", "fcntl.F_ADD_SEALS"])
def test_without_a_sealed_memfd_the_session_is_relayed_over_frames_with_one_log_line(missing: str) -> None:
    module, name = missing.split(".")
    said = _offer_in_child({}, f"import {module}\ndel {module}.{name}\n")
    assert said.count("no hand-off") == 1 and "shared region" in said and said.endswith("not offered\n")


def test_each_waiter_takes_its_own_bounded_pause_before_it_runs_the_shim_again(monkeypatch: pytest.MonkeyPatch) -> None:
    # After a daemon crash every waiter wakes at once; each sleeps a random part of
    # RESUME_JITTER_S (its first argument to the script) before it execs Python. The pause is
    # printed to milliseconds, so a draw of 0.9996 reads 1.000: the bound is inclusive.
    import socket

    from shim.options import Log, parse

    execs: list[list[str]] = []

    def fake_exec(path: str, argv: list[str]) -> None:
        execs.append(argv)
        raise OSError("not here")  # so that wait() goes on to its own wait, which the closed peer ends

    monkeypatch.setattr(os, "execv", fake_exec)
    monkeypatch.setattr(handoff, "WAIT_FD", 250)  # clear of the test process's own descriptors
    log = Log(parse(["--", "true"], {}))
    for _ in range(8):
        ours, peer = socket.socketpair()
        peer.close()

        class Conn:
            sock = ours

        region = os.open("/dev/null", os.O_RDONLY)
        handoff.wait(Conn(), region, ["--", "true"], log)  # type: ignore[arg-type]
        os.close(region)
        os.close(250)
    pauses = [float(argv[4]) for argv in execs[:: len(handoff.SHELLS)]]
    assert all(0 <= p <= handoff.RESUME_JITTER_S for p in pauses) and len(set(pauses)) > 1, pauses
    assert all("sleep \"$1\"" in argv[2] for argv in execs)
