"""The one line protocol every reader of a client's stdin uses (lazyd/protocol/linepeek.py, LineSplitter):
the shim's relay on the frame path, the daemon on a hand-off session, and the shim recovering one
from the region's head and the read after it.

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

from lazyd.protocol.linepeek import ID_SCAN_BYTES, LineSplitter, request_ids_in, too_long_answer, too_long_request

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
    # rest into the region after its head when it died: the shim finds exactly the requests of the lines
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


def test_an_over_long_line_stays_too_long_when_the_start_kept_of_it_is_shorter_than_the_limit() -> None:
    # The real limit (16 MiB) is far above the ID_SCAN_BYTES kept of an over-long line: only the
    # splitter's own state says that start belongs to a line too long, at its newline or at EOF.
    limit = ID_SCAN_BYTES + 10
    over = b"y" * (limit + 2)  # past the room kept for a "\r"
    for ending, at_eof in ((b"\n", False), (b"\r\n", False), (b"", True)):
        splitter = LineSplitter(limit)
        got = splitter.feed(over[:100]) + splitter.feed(over[100:] + ending)
        got += splitter.finish() if at_eof else []
        assert got == [(over[:ID_SCAN_BYTES], True)], ending


# ---- the ids of a line: the relay core's parse and the stdlib floor's peek agree ------------------

_ids = st.one_of(st.integers(-3, 3), st.sampled_from(["1", "a", "", None, True, 1.5, [1], {"x": 1}]))
_methods = st.sampled_from(["initialize", "notifications/initialized", "notifications/cancelled", "tools/call",
                            "ping", 5, None])


@st.composite
def client_lines(draw: st.DrawFn) -> bytes:
    """Small client lines of every shape the relay meets: requests, notifications (cancellations
    with good and bad request ids), responses, objects with neither, batches, non-objects, garbage."""
    shape = draw(st.sampled_from(["object", "batch", "scalar", "garbage"]))
    if shape == "garbage":
        return draw(st.sampled_from([b"not json", b"{", b"\xff\xfe", b"[1,", b'{"id":1,"method":"x"']))

    def message() -> dict[str, object]:
        m: dict[str, object] = {"jsonrpc": "2.0"}
        if draw(st.booleans()):
            m["id"] = draw(_ids)
        method = draw(_methods)
        if method is not None:
            m["method"] = method
        if method == "notifications/cancelled" or draw(st.booleans()):
            m["params"] = draw(st.sampled_from([{"requestId": 3}, {"requestId": "3"}, {"requestId": None},
                                                {"requestId": False}, {}, [], "p"]))
        if draw(st.booleans()):
            m[draw(st.sampled_from(["result", "error"]))] = {}
        return m

    if shape == "scalar":
        return json.dumps(draw(st.sampled_from([1, "s", None, True]))).encode()
    if shape == "batch":
        return json.dumps([message() for _ in range(draw(st.integers(0, 3)))]).encode()
    return json.dumps(message()).encode()


@settings(derandomize=True, max_examples=400, deadline=None)
@given(client_lines())
def test_the_ledger_reads_the_same_ids_from_the_relays_parse_as_the_shim_peeks(line: bytes) -> None:
    from lazyd.core.relay import jsonrpc as rpc
    from lazyd.daemon.handoff.ledger import line_info
    from lazyd.protocol.linepeek import inspect_line

    ours, peeked = line_info(rpc.parse(line)), inspect_line(line)
    assert (ours.requests, ours.cancelled, ours.kind) == (peeked.requests, peeked.cancelled, peeked.kind)


def test_a_batch_holds_no_request_in_flight_since_the_relay_refuses_it_whole() -> None:
    from lazyd.core.relay import jsonrpc as rpc

    batch = b'[{"jsonrpc":"2.0","id":1,"method":"tools/call"},{"jsonrpc":"2.0","id":"b","method":"ping"}]'
    refused = rpc.parse(batch)
    assert isinstance(refused, rpc.Invalid) and refused.id is None  # one error, under a null id
    from lazyd.protocol.linepeek import inspect_line

    assert inspect_line(batch).requests == []


def test_a_request_refused_for_its_depth_holds_nothing_in_flight_for_any_reader() -> None:
    from lazyd.core.relay import jsonrpc as rpc
    from lazyd.daemon.handoff.ledger import line_info
    from lazyd.protocol.linepeek import inspect_line

    for depth in (rpc.MAX_NESTING_DEPTH + 1, 1000, 100_000):
        deep = b'{"jsonrpc":"2.0","id":9,"method":"tools/call","params":' + b"[" * depth + b"]" * depth + b"}"
        refused = rpc.parse(deep)
        assert isinstance(refused, rpc.Invalid) and refused.id is None
        assert line_info(refused).requests == [] and inspect_line(deep).requests == []


def test_an_over_long_request_is_answered_with_invalid_request_under_its_id_and_a_line_with_no_request_id_is_dropped() -> None:
    """The over-long rule, one function for the shim's relay and the daemon's hand-off session."""
    big = ID_SCAN_BYTES * 2
    request = b'{"jsonrpc":"2.0","id":"big","method":"tools/call","params":{"blob":"' + b"x" * big + b'"}}'
    answer = too_long_answer(request[:ID_SCAN_BYTES], MAX)
    assert answer is not None and b"\n" not in answer
    assert json.loads(answer) == {"jsonrpc": "2.0", "id": "big",
                                  "error": {"code": -32600, "message": f"lazyd: line too long (more than {MAX} bytes)"}}
    notification = b'{"jsonrpc":"2.0","method":"notifications/message","params":{"id":7,"blob":"' + b"x" * big
    assert too_long_answer(notification[:ID_SCAN_BYTES], MAX) is None
    assert too_long_answer(b'{"jsonrpc":"2.0","id":null,"method":"ping","params":{"blob":"xxxx', MAX) is None
