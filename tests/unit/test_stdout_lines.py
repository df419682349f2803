"""A server's stdout cut into lines (lazyd/daemon/process/stdout_lines.py), fed byte by byte and in chunks."""

from __future__ import annotations

import pytest

from lazyd.daemon.process.stdout_lines import StdoutLines
from lazyd.errors import LineTooLong


def drain(lines: StdoutLines) -> list[bytes]:
    out = []
    while (line := lines.next_line()) is not None:
        out.append(line)
    return out


@pytest.mark.parametrize("chunk", [1, 2, 7, 1000])
def test_lines_come_out_whole_without_newlines_and_blank_ones_are_dropped_however_the_bytes_arrive(chunk: int) -> None:
    data = b'{"a":1}\n\n  \n{"b":2}\r\n{"c":'
    lines = StdoutLines(limit=100)
    got = []
    for i in range(0, len(data), chunk):
        lines.feed(data[i:i + chunk])
        got += drain(lines)
    assert got == [b'{"a":1}', b'{"b":2}\r']
    lines.end()
    assert drain(lines) == [b'{"c":'] and lines.ended and lines.error is None


def test_a_blank_last_line_without_newline_is_dropped_at_the_end() -> None:
    lines = StdoutLines(limit=10)
    lines.feed(b"x\n   ")
    lines.end()
    assert drain(lines) == [b"x"]


def test_a_line_at_the_limit_passes_and_one_byte_more_fails_for_good_after_the_lines_before_it() -> None:
    lines = StdoutLines(limit=5)
    lines.feed(b"12345\nok\n123456\nlater\n")
    assert drain(lines) == [b"12345", b"ok"]
    assert isinstance(lines.error, LineTooLong) and "longer than 5 bytes" in str(lines.error)
    lines.feed(b"more\n")
    assert drain(lines) == []


def test_an_overlong_line_fails_as_soon_as_the_buffer_passes_the_limit_without_a_newline() -> None:
    lines = StdoutLines(limit=8)
    lines.feed(b"12345678")
    assert lines.error is None
    lines.feed(b"9")
    assert lines.error is not None and drain(lines) == []


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([b"a", b"bb", b"\n", b" ", b"\r", b"x" * 40]), max_size=60),
       st.lists(st.integers(1, 50), min_size=1, max_size=20), st.integers(1, 60))
def test_lines_fed_as_the_first_bytes_of_a_larger_buffer_are_the_lines_fed_as_bytes(
        parts: list[bytes], cuts: list[int], limit: int) -> None:
    # The stdout reader feeds the first `end` bytes of a shared buffer holding older bytes past
    # them; that must cut exactly as feeding those bytes alone, however the stream is split.
    data = b"".join(parts)
    plain, shared = StdoutLines(limit), StdoutLines(limit)
    got_plain: list[bytes] = []
    got_shared: list[bytes] = []
    pos, i = 0, 0
    while pos < len(data):
        chunk = data[pos:pos + cuts[i % len(cuts)]]
        pos, i = pos + len(chunk), i + 1
        plain.feed(chunk)
        shared.feed(bytearray(chunk + b"\nstale\n" * 3), len(chunk))
        got_plain += drain(plain)
        got_shared += drain(shared)
        assert (plain.error is None) == (shared.error is None)
    plain.end()
    shared.end()
    assert got_plain + drain(plain) == got_shared + drain(shared)


def test_reads_into_the_shared_buffer_come_out_whole_after_its_pages_were_given_back() -> None:
    import os

    from lazyd.daemon.process.read_buffer import ReadBuffer

    read_buffer = ReadBuffer()
    read_end, write_end = os.pipe()
    try:
        for payload in (b"first line\n", b"x" * 5000 + b"\n", b"last\n"):
            os.write(write_end, payload)
            buffer, count = read_buffer.read_into(read_end, 64 * 1024)
            lines = StdoutLines(limit=10_000)
            lines.feed(buffer, count)
            assert drain(lines) == [payload[:-1]]
            read_buffer.release()
    finally:
        os.close(read_end)
        os.close(write_end)


@pytest.mark.parametrize("taken", [0, 1, 2])
def test_what_was_fed_and_not_handed_out_gives_a_new_buffer_the_same_lines_then_the_same_partial_line(taken: int) -> None:
    # An upgrade: the predecessor's buffer hands over its bytes, the successor's buffer goes on.
    old = StdoutLines(limit=100)
    old.feed(b'{"a":1}\n{"b":2}\n{"c":')
    handed_out = [old.next_line() for _ in range(taken)]
    new = StdoutLines(limit=100)
    new.feed(old.leftover())
    new.feed(b'3}\n')
    assert handed_out + drain(new) == [b'{"a":1}', b'{"b":2}', b'{"c":3}']
