"""The heap is kept while large lines come and trimmed once after each spell of them, never while they
keep coming (lazyd/daemon/heap_trim.py). trio's autojump clock: the quiet spell is checked exactly, without waiting."""

from __future__ import annotations

import trio
import trio.testing

from lazyd.daemon.heap_trim import LARGE_BYTES, QUIET_S, HeapTrimmer


async def test_one_trim_follows_a_quiet_spell_after_large_lines_and_small_lines_never_cause_one(
        autojump_clock: trio.testing.MockClock) -> None:
    trims: list[float] = []
    trimmer = HeapTrimmer(lambda: trims.append(trio.current_time()))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trimmer.run)
        for _ in range(100):
            trimmer.note(LARGE_BYTES - 1)
        await trio.sleep(10 * QUIET_S)  # the quiet spell under test, in virtual time (autojump clock)
        assert trims == []
        start = trio.current_time()
        trimmer.note(LARGE_BYTES)
        trimmer.note(4 * LARGE_BYTES)
        await trio.sleep(10 * QUIET_S)  # virtual time (autojump clock), as above
        assert trims == [start + QUIET_S]
        nursery.cancel_scope.cancel()


async def test_large_lines_that_keep_coming_put_the_trim_off_until_they_stop(
        autojump_clock: trio.testing.MockClock) -> None:
    trims: list[float] = []
    trimmer = HeapTrimmer(lambda: trims.append(trio.current_time()))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trimmer.run)
        for _ in range(10):  # a large line every half spell: the burst goes on
            trimmer.note(LARGE_BYTES)
            await trio.sleep(QUIET_S / 2)  # the burst's pace, in virtual time (autojump clock)
        assert trims == []
        last = trio.current_time() - QUIET_S / 2
        await trio.sleep(10 * QUIET_S)  # virtual time (autojump clock), as above
        assert len(trims) == 1 and last + QUIET_S <= trims[0] <= last + 2 * QUIET_S
        trimmer.note(LARGE_BYTES)  # a later spell gets its own trim
        await trio.sleep(10 * QUIET_S)  # virtual time (autojump clock), as above
        assert len(trims) == 2
        nursery.cancel_scope.cancel()


async def test_what_large_lines_left_behind_is_given_back_once_at_the_trim_and_not_before(
        autojump_clock: trio.testing.MockClock) -> None:
    events: list[str] = []
    trimmer = HeapTrimmer(lambda: events.append("trim"))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trimmer.run)
        trimmer.note(LARGE_BYTES)
        trimmer.later(lambda: events.append("release"))
        await trio.sleep(QUIET_S / 2)  # within the spell, in virtual time (autojump clock)
        trimmer.note(LARGE_BYTES)  # the burst goes on: the release waits with the trim
        await trio.sleep(QUIET_S / 2)  # virtual time (autojump clock), as above
        assert events == []
        await trio.sleep(10 * QUIET_S)  # virtual time (autojump clock), as above
        assert events == ["release", "trim"]
        trimmer.note(LARGE_BYTES)  # the next spell's trim does not run the release again
        await trio.sleep(10 * QUIET_S)  # virtual time (autojump clock), as above
        assert events == ["release", "trim", "trim"]
        nursery.cancel_scope.cancel()


async def test_a_release_asked_for_alone_waits_a_quiet_spell_as_a_large_line_would(
        autojump_clock: trio.testing.MockClock) -> None:
    events: list[tuple[str, float]] = []
    trimmer = HeapTrimmer(lambda: events.append(("trim", trio.current_time())))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trimmer.run)
        start = trio.current_time()
        trimmer.later(lambda: events.append(("narrow", trio.current_time())))  # a pipe widened
        await trio.sleep(10 * QUIET_S)  # virtual time (autojump clock)
        assert events == [("narrow", start + QUIET_S), ("trim", start + QUIET_S)]
        nursery.cancel_scope.cancel()


async def test_a_spell_of_large_lines_has_the_heap_kept_from_its_start_until_its_trim(
        autojump_clock: trio.testing.MockClock) -> None:
    events: list[str] = []
    trimmer = HeapTrimmer(lambda: events.append("trim"), lambda keep: events.append(f"keep {keep}"))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trimmer.run)
        trimmer.note(LARGE_BYTES - 1)
        await trio.sleep(10 * QUIET_S)  # virtual time (autojump clock)
        assert events == []  # small lines leave the C library as it is
        trimmer.note(LARGE_BYTES)
        await trio.sleep(QUIET_S / 2)  # virtual time (autojump clock), as above
        trimmer.note(LARGE_BYTES)
        assert events == ["keep True"]  # once per spell
        await trio.sleep(10 * QUIET_S)  # virtual time (autojump clock), as above
        assert events == ["keep True", "keep False", "trim"]
        trimmer.note(LARGE_BYTES)  # the next spell keeps again
        await trio.sleep(10 * QUIET_S)  # virtual time (autojump clock), as above
        assert events == ["keep True", "keep False", "trim", "keep True", "keep False", "trim"]
        nursery.cancel_scope.cancel()
