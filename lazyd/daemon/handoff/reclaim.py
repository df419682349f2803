"""Adoption: the daemon takes back, in place, a hand-off session whose previous daemon was lost.

Under systemd a hand-off session's descriptors outlive a `kill -9` of the daemon in the fd store
(lazyd/daemon/handoff/stored_sessions.py): the restarted daemon gets the client's stdin, stdout and the shim's
socket back, reopens the region *as the lost daemon left it* and reads the adopting hello (whose
`adopt` names the region's layout, docs/protocol.md, "Adoption") through the waiter's /proc/PID/fd.
The daemon then does what the shim's own recovery does (lazyd/handoff/recovery.py decides it for
both), on the same region, since the waiter, which never woke, cannot receive a new one.

`adoption` decides what the session owes (nothing written); the session's ledger, the one writer
of the region's table (lazyd/daemon/handoff/ledger.py), then records it, and the answers
themselves go out through the session's outbox, so that the outbox's rules hold for them: an
error's id leaves the table only once its whole line is in the client's stdout, and the torn byte
stays set until the newline that ends a cut line is written. In what order, so that a `kill -9`
of this daemon at any instant leaves a region the next recovery handles, and the client a stream
of whole lines:

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
(a daemon that let go itself), is not adopted: the shim's recovery takes those.
"""

from __future__ import annotations

from lazyd.handoff.recovery import Recovery, plan
from lazyd.handoff.region import Region
from lazyd.handoff.snapshot import of_region


def adoption(region: Region) -> Recovery | str:
    """What adopting `region` (as a lost daemon left it) owes the client and carries on, or why
    the session is not adopted here; writes nothing (the ledger records it: the module docstring)."""
    snap = of_region(region)
    if snap is not None and snap.state.closed:
        return "its daemon ended it because the client left"
    if snap is not None and snap.tail:
        return "its daemon let it go in the middle of a line"
    return plan(snap)
