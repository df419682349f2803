"""Every limit the docs state a number for: the sentence is in the docs, and the code's constant is
that number. One table, so that a constant changed without its docs, or docs changed without the
code, fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lazyd.protocol import wire
from lazyd.config.load import MAX_CONFIG_BYTES, MAX_DESCRIPTION_CHARS
from lazyd.core.cache import MAX_STATELESS_ENTRIES
from lazyd.core.hub.routes import MAX_CALLS_IN_FLIGHT
from lazyd.core.relay.listings import MAX_LISTING_PAGES
from lazyd.daemon.connections.listener import FRAMES_PER_BATCH
from lazyd.daemon.process import command, stderr_log
from lazyd.daemon.process.stdin import MAX_SERVER_BACKLOG_BYTES, MAX_SERVER_BACKLOG_LINES, MAX_WAITING_REQUESTS
from lazyd.daemon.runtime.outbox import (
    CLIENT_PAUSE_BYTES,
    CLIENT_PAUSE_FRAMES,
    MAX_CLIENT_BACKLOG_BYTES,
    MAX_CLIENT_BACKLOG_FRAMES,
)

DOCS = Path(__file__).parents[2] / "docs"
KIB = 1024
MIB = 1024 * KIB

# (doc, the sentence stating the number, the code's constant, the documented number)
LIMITS = [
    ("protocol.md", "`MAX_FRAME_BYTES` (16 MiB + 64 KiB)", wire.MAX_FRAME_BYTES, 16 * MIB + 64 * KIB),
    ("protocol.md", "`MAX_LINE_BYTES` = 16 MiB", wire.MAX_LINE_BYTES, 16 * MIB),
    ("reliability.md", "frames of at most 16 MiB + 64 KiB", wire.MAX_FRAME_BYTES, 16 * MIB + 64 * KIB),
    ("reliability.md", "at most 64 frames decoded ahead per connection", FRAMES_PER_BATCH, 64),
    ("relay.md", "A server line over 16 MiB", command.MAX_LINE_BYTES, 16 * MIB),
    ("reliability.md", "trips the 16 MiB line limit", command.MAX_LINE_BYTES, 16 * MIB),
    ("reliability.md", "once 16 MiB (or 1,024 frames) of answers wait for it", CLIENT_PAUSE_BYTES, 16 * MIB),
    ("reliability.md", "once 16 MiB (or 1,024 frames) of answers wait for it", CLIENT_PAUSE_FRAMES, 1_024),
    ("reliability.md", "once 64 MiB (or 32,768 frames) wait in its outbox", MAX_CLIENT_BACKLOG_BYTES, 64 * MIB),
    ("reliability.md", "once 64 MiB (or 32,768 frames) wait in its outbox", MAX_CLIENT_BACKLOG_FRAMES, 32_768),
    ("reliability.md", "once 32 MiB wait for a server's stdin", MAX_SERVER_BACKLOG_BYTES, 32 * MIB),
    ("reliability.md", "(or 10,000 requests wait for its start)", MAX_WAITING_REQUESTS, 10_000),
    ("reliability.md", "Past 10,000 queued lines the server is still treated as stuck", MAX_SERVER_BACKLOG_LINES,
     10_000),
    ("configuration.md", "larger than 1 MiB, or not UTF-8", MAX_CONFIG_BYTES, 1 * MIB),
    ("hub.md", "up to 1,000 characters", MAX_DESCRIPTION_CHARS, 1_000),
    ("hub.md", "at most 64 calls may be in flight per hub session", MAX_CALLS_IN_FLIGHT, 64),
    ("lazyctl.md", "rotated to `NAME.log.1` at 1 MiB", stderr_log.MAX_LOG_BYTES, 1 * MIB),
    ("architecture.md", "at most 1000 pages", MAX_LISTING_PAGES, 1000),
    ("protocol-eras.md", "At most 256 stateless results are kept per server", MAX_STATELESS_ENTRIES, 256),
]


def doc_text(name: str) -> str:
    return re.sub(r"\s+", " ", (DOCS / name).read_text())  # a sentence may wrap anywhere


@pytest.mark.parametrize(("doc", "sentence", "constant", "documented"), LIMITS, ids=lambda v: str(v)[:40])
def test_each_documented_limit_is_stated_in_the_docs_and_is_the_codes_constant(
        doc: str, sentence: str, constant: int, documented: int) -> None:
    assert sentence in doc_text(doc), f"docs/{doc} no longer says {sentence!r}"
    assert constant == documented, f"docs/{doc} says {sentence!r}: the code's constant is {constant}"
