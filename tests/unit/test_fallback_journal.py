"""The fallback journal (lazyd/host/fallback_journal.py): what shims that ran their server directly leave for
`lazyctl status`, counted since the daemon started.

Testing policy: real files in tmp_path; the clock is the journal's own `at` field, set by writing
lines directly where a test needs an old one.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from lazyd.host import fallback_journal


def test_fallbacks_since_the_daemon_started_are_counted_by_kind_with_the_last_reason(tmp_path: Path) -> None:
    sock = str(tmp_path / "lazyd.sock")
    journal = Path(fallback_journal.journal_path(sock))
    started = time.time()
    fallback_journal.record(sock, "refused by the daemon: before this daemon [busy]", "node")
    with open(journal, "a") as f:  # as a daemon of an hour ago saw it
        f.write(json.dumps({"at": started - 3600, "kind": "refused", "reason": "before this daemon"}) + "\n")
    recorded = time.time()  # the line above was stamped at or before this
    while (started := time.time()) <= recorded:  # the clock moves on: that line is older than this daemon
        time.sleep(0.001)
    fallback_journal.record(sock, "refused by the daemon: near its descriptor limit [busy]", "/usr/bin/node")
    fallback_journal.record(sock, "refused by the daemon: 900 connections open [busy]", "node")
    fallback_journal.record(sock, "the daemon at /x is too busy to accept a connection", "node")
    with open(journal, "ab") as f:
        f.write(b"not json\n")
    counts = fallback_journal.since(sock, started)
    assert counts["refused"]["count"] == 2
    assert counts["refused"]["last_reason"] == "refused by the daemon: 900 connections open [busy]"
    assert counts["unreachable"]["count"] == 1
    assert os.stat(journal).st_mode & 0o777 == 0o600  # made by the shim: private


def test_the_journal_is_bounded_and_one_older_generation_still_counts(tmp_path: Path) -> None:
    sock = str(tmp_path / "lazyd.sock")
    journal = Path(fallback_journal.journal_path(sock))
    started = time.time()
    with open(journal, "w") as f:
        line = json.dumps({"at": started + 1, "kind": "unreachable", "reason": "x" * 200})
        while f.tell() <= fallback_journal.MAX_JOURNAL_BYTES:
            f.write(line + "\n")
    before = fallback_journal.since(sock, started)["unreachable"]["count"]
    fallback_journal.record(sock, "no daemon", "node")  # moves the full file aside first
    fallback_journal.record(sock, "no daemon", "node")
    assert journal.stat().st_size < 1000
    assert fallback_journal.since(sock, started)["unreachable"]["count"] == before + 2


def test_a_shim_with_no_runtime_dir_records_nothing_and_does_not_fail(tmp_path: Path) -> None:
    fallback_journal.record(str(tmp_path / "missing" / "lazyd.sock"), "no daemon", "node")
    assert fallback_journal.since(str(tmp_path / "missing" / "lazyd.sock"), 0) == {}
