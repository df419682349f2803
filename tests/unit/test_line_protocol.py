"""The one line protocol every reader of a client's stdin uses (lazyd/linepeek.py, LineSplitter):
the shim's relay on the frame path, the daemon on a hand-off session, and the shim recovering one
from the region's head and landing zone.

Testing policy: hypothesis (derandomized, bounded) over inputs of JSON lines, blank lines, "\\r\\n"
ends, lines just under, at and over a small limit and garbage, cut into random chunks; the
splitter is checked against a plain reference written from the rules, whatever the chunking, and
the recovery's reading against the same lines. The relay's and the daemon's readers are the
splitter itself; their own tests (e2e) drive them end to end.
"""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from lazyd.linepeek import ID_SCAN_BYTES, LineSplitter, request_ids_in, too_long_request

MAX = 60  # a small line limit, so that random inputs reach the over-long rule


def reference(text: bytes, max_line: int) -> list[tuple[bytes, bool]]:
    """The rules, written out plainly: split at "\\n", drop one "\\r" before it, skip blank lines,
    a line over `max_line` is too long (kept to its first ID_SCAN_BYTES); a last line without its
    newline counts."""
    out = []
    for line in text.split(b"\n"):
        if line.endswith(b"\r"):
            line = line[:-1]
        if len(line) > max_line:
            out.append((line[:ID_SCAN_BYTES], True))
        elif line.strip(b" \t\r\n\x0b\x0c"):
            out.append((line, False))
    return out


def _request(n: int, pad: int, crlf: bool) -> bytes:
    body = json.dumps({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {"p": "x" * pad}}).encode()
    return body + (b"\r\n" if crlf else b"\n")


_piece = st.one_of(
    st.builds(_request, st.integers(0, 99), st.integers(0, 40), st.booleans()),
    st.sampled_from([b"\n", b"\r\n", b"   \n", b"not json\n", b"\r\r\n", b"\n\n"]),
    st.binary(max_size=MAX * 2),
    st.builds(lambda n: b"y" * n + b"\n", st.sampled_from([MAX - 1, MAX, MAX + 1, MAX + 2])),
)


@st.composite
def chunked(draw: st.DrawFn) -> tuple[bytes, list[bytes]]:
    text = b"".join(draw(st.lists(_piece, max_size=12)))
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=6)))
    bounds = [0, *cuts, len(text)]
    return text, [text[a:b] for a, b in zip(bounds, bounds[1:])]


@settings(derandomize=True, max_examples=250, deadline=None)
@given(chunked())
def test_the_splitter_cuts_lines_by_the_rules_and_counts_their_ends_whatever_the_chunks(case: tuple[bytes, list[bytes]]) -> None:
    text, chunks = case
    splitter = LineSplitter(MAX)
    got = []
    for chunk in chunks:
        got.extend(splitter.feed(chunk))
        # What a reader sizes its next read by: the line ends of this chunk, counted as cut.
        assert splitter.newlines == chunk.count(b"\n")
    got.extend(splitter.finish())
    assert got == reference(text, MAX)


@settings(derandomize=True, max_examples=200, deadline=None)
@given(chunked(), st.integers(0, 1000))
def test_the_recovery_finds_the_requests_of_the_lines_a_read_completes_as_the_daemon_cut_them(
        case: tuple[bytes, list[bytes]], at: int) -> None:
    # The daemon had fed the input up to `at` (its head is what was left unfinished) and read the
    # rest into the landing zone when it died: the shim finds exactly the requests of the lines
    # that rest completes, and keeps the same unfinished start.
    text, _ = case
    at = min(at, len(text))
    daemon = LineSplitter(MAX)
    daemon.feed(text[:at])
    ids, rest, discarding = request_ids_in(bytes(daemon.buffer), daemon.discarding, text[at:], MAX)
    expected = []
    for line, too_long in daemon.feed(text[at:]):
        if too_long:
            found = too_long_request(line)
            if found is not None:
                expected.append(json.dumps(found).encode())
        else:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if isinstance(message, dict) and isinstance(message.get("method"), str) and "id" in message:
                expected.append(json.dumps(message["id"]).encode())
    assert ids == expected
    assert (rest, discarding) == (bytes(daemon.buffer), daemon.discarding)


def test_a_line_one_byte_over_the_limit_is_too_long_with_or_without_its_carriage_return() -> None:
    # The shim's relay and the daemon once disagreed here: the daemon allowed one byte more
    # (room for a "\r" it then did not count), the relay did not.
    over = b"y" * (MAX + 1)
    assert LineSplitter(MAX).feed(over + b"\n") == [(over, True)]
    assert LineSplitter(MAX).feed(over + b"\r\n") == [(over, True)]
    at = b"y" * MAX
    assert LineSplitter(MAX).feed(at + b"\r\n") == [(at, False)]
