"""The C library's heap while large lines pass (lazyd/host/heapkeep.py): kept from a spell's first large
line, given back once none came for a quiet spell. The C library's side in a process of its own
(its settings are per process); the shim's spell with real threads and a short quiet spell."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest

from lazyd.host.heapkeep import LARGE_BYTES, HeapSpell


# Run in a process of its own (the C library's settings are per process): three 8 MiB lines
# allocated and freed, as a spell of large lines does, and the heap the C library holds after.
_SPELL = r"""
import ctypes, json, sys
from lazyd.host.heapkeep import keep_freed, trim

class Info(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
told = keep_freed(True) if sys.argv[1] == "keep" else None
lines = [bytes(8 << 20) for _ in range(3)]
del lines
kept = libc.mallinfo2().fordblks
ended = keep_freed(False) if told else None
trim()
print(json.dumps({"told": told, "ended": ended, "kept": kept, "after": libc.mallinfo2().fordblks}))
"""


def spell(mode: str) -> dict[str, int]:
    done = subprocess.run([sys.executable, "-c", _SPELL, mode], capture_output=True, text=True, timeout=60, check=True)
    result: dict[str, int] = json.loads(done.stdout)
    return result


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt and mallinfo2")
def test_a_kept_heap_holds_what_large_lines_freed_until_the_spell_ends_and_the_trim_gives_it_back() -> None:
    default, kept = spell("default"), spell("keep")
    assert default["kept"] < 1 << 20  # by default each freed line went back to the system at once
    assert kept["told"] and kept["ended"]
    assert kept["kept"] >= 24 << 20  # kept: the next lines of the spell reuse those pages
    assert kept["after"] < 1 << 20  # the spell's end gave them back


# The quiet spell here, in seconds (the product's is QUIET_S): far above any pause a loaded
# machine puts between two of the lines below.
QUIET = 1.0


class Recorded:
    def __init__(self) -> None:
        self.events: list[str] = []
        self.ended = threading.Event()

    def keep(self, keep: bool) -> None:
        self.events.append(f"keep {keep}")

    def end(self) -> None:
        self.events.append("trim")
        self.ended.set()


def test_a_shims_spell_keeps_the_heap_from_its_first_large_line_and_ends_once_a_quiet_spell_passed() -> None:
    seen = Recorded()
    spell = HeapSpell(seen.keep, seen.end, quiet_s=QUIET)
    spell.note(LARGE_BYTES - 1)
    assert seen.events == []  # small lines leave the C library as it is
    for _ in range(5):  # large lines keep coming, each within the quiet spell of the last
        last = time.monotonic()
        spell.note(LARGE_BYTES)
        time.sleep(QUIET / 20)  # the lines' pace: the spell must go on meanwhile
        assert seen.events == ["keep True"]
    assert seen.ended.wait(10)
    assert time.monotonic() - last >= QUIET  # not before a quiet spell after the last
    assert seen.events == ["keep True", "keep False", "trim"]
    seen.ended.clear()
    spell.note(4 * LARGE_BYTES)  # a later spell gets its own keep and trim
    assert seen.ended.wait(10)
    assert seen.events == ["keep True", "keep False", "trim", "keep True", "keep False", "trim"]


def test_large_lines_from_two_threads_at_once_make_one_spell() -> None:
    seen = Recorded()
    spell = HeapSpell(seen.keep, seen.end, quiet_s=QUIET)

    def lines() -> None:
        for _ in range(200):
            spell.note(LARGE_BYTES)

    threads = [threading.Thread(target=lines) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert seen.events == ["keep True"]  # told once, whichever thread came first
    assert seen.ended.wait(10)
    assert seen.events == ["keep True", "keep False", "trim"]
