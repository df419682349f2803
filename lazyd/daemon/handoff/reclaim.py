"""Reclaiming: the daemon takes back, in place, a hand-off session whose previous daemon was lost.

Under systemd the session's descriptors outlive a kill -9 in the fd store
(lazyd/daemon/handoff/stored_sessions.py), and the waiter, which never woke, cannot be given a new
region: the restarted daemon does on the lost daemon's region what the shim's recovery would
(docs/protocol.md, "Reclaiming"). `reclaim` decides, writing nothing; the session's ledger records
it (lazyd/daemon/handoff/ledger.py gives the order of the writes) and its outbox writes the answers.
"""

from __future__ import annotations

from lazyd.handoff.recovery import Recovery, plan
from lazyd.handoff.region import Region


def reclaim(region: Region) -> Recovery | str:
    """What reclaiming `region` owes the client and carries on, or why the shim recovers it instead:
    a region that says the client left, or holds the rest of a line its daemon let go of, is the shim's."""
    state = region.current
    if state is not None and state.closed:
        return "its daemon ended it because the client left"
    if state is not None and state.tail_len:
        return "its daemon let it go in the middle of a line"
    return plan(region)
