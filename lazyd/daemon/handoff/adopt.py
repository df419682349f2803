"""Adoption: the daemon takes back, in place, a hand-off session whose previous daemon was lost.

After a `kill -9` every waiting shell wakes at once. Its quick resumer (shim/quick.py, a few ms of
an interpreter without site or msgpack) offers this daemon the client's stdin, stdout and the
region *as the lost daemon left it*, with a pre-encoded hello whose `adopt` names the region's
layout (docs/protocol.md, "Adoption"). The daemon then does what the shim's own recovery does
(lazyd/handoff/recovery.py decides it for both), on the same region, since the waiting shell
cannot receive a new one, and answers `ADOPTED`, fixed bytes the resumer compares.

`convert` writes the recovery's record into the region; the answers themselves go out through the
session's outbox, so that the outbox's rules hold for them: an error's id leaves the table only
once its whole line is in the client's stdout, and the torn byte stays set until the newline that
ends a cut line is written. In what order, so that a `kill -9` of this daemon at any instant
leaves a region the next recovery (quick or full) handles, and the client a stream of whole lines:

1. ids in lines found in the landing zone enter the table (text first, length byte last), the
   table's own stay: killed here, the next recovery finds both, and answers each id once;
2. the zone the next read lands in is cleared of what the lost daemon had accounted for and not
   yet cleared, and the head, extended by the landed input, goes to the head area the state does
   not name;
3. one state write names that zone and head (the landed bytes are now accounted for: their ids
   are in the table, the rest of their line in the head); then the landed zone is cleared;
4. the session's outbox writes the newline ending a cut line, then one error per id, each retired
   once written. Killed in between, the next recovery writes what is still owed: at worst an id
   answered twice, or a newline written twice (an empty line), as in a `kill -9` of any daemon.

A region that says the client left, or that holds the rest of a line the lost daemon had begun
(a daemon that let go itself), is not adopted: the shim's full recovery takes those.
"""

from __future__ import annotations

from lazyd import wire
from lazyd.frames import Adopted
from lazyd.handoff.recovery import Recovery, plan
from lazyd.handoff.region import ENTRY_BYTES, LANDING_BYTES, TABLE_ENTRIES, Region, landing_offset
from lazyd.handoff.snapshot import of_region

ADOPTED = wire.encode(Adopted())
# The reply to an adopting hello that the daemon took: the quick resumer compares these bytes.

_ZEROS = bytes(LANDING_BYTES)


def convert(region: Region) -> Recovery | str:
    """Write the recovery of `region` (as a lost daemon left it) into it, in the order of the
    module docstring; returns what the session's outbox still owes the client, or why the
    session is not adopted here (then nothing was written)."""
    snap = of_region(region)
    if snap is not None and snap.state.closed:
        return "its daemon ended it because the client left"
    if snap is not None and snap.tail:
        return "its daemon let it go in the middle of a line"
    done = plan(snap)
    if snap is None:
        return done  # a daemon killed before its first state: nothing in flight, nothing read
    state = snap.state
    carried = done.carried
    carried.landing, carried.head_area = state.landing, state.head_area
    if done.landed:
        carried.unrecorded = _enter(region, done.ids)
        zone = state.landing ^ 1
        _clear_zone(region, zone)
        if done.head:
            carried.head_area ^= 1
            region.write_head(done.head, 0, carried.head_area)
        carried.landing = zone
    region.write(carried)
    region.whole = False  # no write of the lost daemon's is under way any more (asks nothing either way)
    if done.landed:
        _clear_zone(region, state.landing)
    return done


def _enter(region: Region, ids: list[bytes]) -> int:
    """Enter each of `ids` the table lacks into a free entry; how many found no entry (too long,
    or the table full): those are answered once and by nobody after a second loss."""
    used = region.entries()
    have = {text for _, text in used}
    taken = {index for index, _ in used}
    free = (index for index in range(TABLE_ENTRIES) if index not in taken)
    missed = 0
    for text in ids:
        if text in have:
            continue
        entry = next(free, None) if len(text) < ENTRY_BYTES else None
        if entry is None:
            missed += 1
            continue
        region.set_id(entry, text)
    return missed


def _clear_zone(region: Region, zone: int) -> None:
    """Zero what a read left at the start of landing zone `zone` (up to its first NUL)."""
    length = len(region.read_landed(zone))
    if length:
        at = landing_offset(zone)
        region.buf[at : at + length] = _ZEROS[:length]
