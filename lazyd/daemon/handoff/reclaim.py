"""Reclaiming: the daemon takes back, in place, a hand-off session whose previous daemon was lost.

Under systemd a session's descriptors outlive a `kill -9` of the daemon in the fd store
(lazyd/daemon/handoff/stored_sessions.py). The restarted daemon reopens the region as the lost
daemon left it and does on it what the shim's recovery would (lazyd/handoff/recovery.py decides
both), since the waiter, which never woke, cannot be given a new region. `reclaim` decides (writing
nothing); the session's ledger records it, and its outbox writes the answers, retiring an id only
once its error line is written. In this order a `kill -9` of this daemon at any instant leaves a
region the next recovery handles, at worst answering an id or ending a cut line twice:

1. ids in lines found in the landing zone enter the table, beside the table's own;
2. the next read's zone is cleared, and the head, extended by the landed input, goes to the head
   area the state does not name;
3. one state write names that zone and head; then the landed zone is cleared;
4. the outbox writes the newline ending a cut line, then one error per id.

A region that says the client left, or that holds the rest of a line its daemon let go of, is the
shim's to recover.
"""

from __future__ import annotations

from lazyd.handoff.recovery import Recovery, plan
from lazyd.handoff.region import Region


def reclaim(region: Region) -> Recovery | str:
    """What reclaiming `region` owes the client and carries on, or why the shim recovers it instead."""
    state = region.current
    if state is not None and state.closed:
        return "its daemon ended it because the client left"
    if state is not None and state.tail_len:
        return "its daemon let it go in the middle of a line"
    return plan(region)
