"""A server whose stdin backs up slows down the clients feeding it; the daemon does not buffer
what they send (supervisor.MAX_SERVER_BACKLOG_BYTES, lazyd/daemon/connections/listener.py's reader waits for room)."""

from __future__ import annotations

import threading

from tests.conftest import UserEnv, start_daemon
from tests.e2e.faults_support import RawShim, peak_rss_kib, reset_peak_rss, text_of, tool_call

MIB = 1024 * 1024
SENT_MIB = 160  # well past the 32 MiB backlog bound, so buffering it all would show
STALL_S = 6


def test_a_server_that_stops_reading_stdin_slows_its_clients_instead_of_growing_the_daemon(user_env: UserEnv) -> None:
    daemon = start_daemon(user_env)
    shim = RawShim(user_env)
    try:
        shim.initialize()
        shim.send(tool_call(1, "pid"))
        shim.read()
        reset_peak_rss(daemon.proc.pid)
        before = peak_rss_kib(daemon.proc.pid)
        shim.send(tool_call(2, "stall", {"seconds": STALL_S}))
        assert text_of(shim.read()) == "stalling"
        payload = "y" * MIB
        def write_all() -> None:
            for i in range(SENT_MIB):
                shim.send(tool_call(100 + i, "echo", {"text": payload}))

        # From a thread: once backpressure reaches the shim, writing to its stdin blocks.
        writer = threading.Thread(target=write_all)
        writer.start()
        answered = {}
        for _ in range(SENT_MIB):
            reply = shim.read(timeout_s=120)
            answered[reply["id"]] = len(text_of(reply))
        writer.join()
        assert answered == {100 + i: MIB for i in range(SENT_MIB)}
        grown_mib = (peak_rss_kib(daemon.proc.pid) - before) / 1024
        assert grown_mib < 110, f"the daemon grew by {grown_mib:.0f} MiB while {SENT_MIB} MiB waited for a stalled server"
    finally:
        shim.close()
