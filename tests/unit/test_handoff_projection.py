"""One in-flight table per hand-off session: the ledger's (lazyd/daemon/handoff/ledger.py), with the
region's table its projection, whoever holds the ledger: the daemon that opened the session, an
upgrade's successor continuing it, or a daemon that reclaimed it after a kill -9.

Testing policy: hypothesis (derandomized, bounded) over sequences of what a session does to its
in-flight set (a request read, an answer wholly written, a cancellation, the session continued by
a successor, reclaimed after a kill, with or without a read the lost daemon had not recorded), against a plain model of the set; after every step the region
is read as a recovering shim reads it (a fresh `Region` over the same bytes), in anonymous memory
(zero pages until written, as a new memfd's).
"""

from __future__ import annotations

import json
import mmap

from hypothesis import given, settings
from hypothesis import strategies as st

from lazyd.daemon.handoff.ledger import Ledger
from lazyd.handoff import region as hs
from lazyd.handoff.recovery import Recovery, reclaim
from lazyd.handoff.region import Region
from lazyd.protocol.linepeek import id_key

JsonId = int | str
LONG = "x" * hs.ENTRY_BYTES  # its JSON text is over an entry: in the ledger alone

ids = st.one_of(st.integers(-3, 6), st.sampled_from(["1", "a", "", LONG, LONG + "y"]))
steps = st.lists(st.one_of(st.tuples(st.sampled_from(["request", "answer", "cancel", "landed"]), ids),
                           st.tuples(st.sampled_from(["continue", "reclaim"]), st.none())), max_size=40)


def text(request_id: JsonId) -> bytes:
    return json.dumps(request_id).encode()


def recorded(request_id: JsonId) -> bool:
    return len(text(request_id)) < hs.ENTRY_BYTES


def line(kind: str, request_id: JsonId) -> bytes:
    if kind == "request":
        return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {}}).encode()
    return json.dumps({"jsonrpc": "2.0", "method": "notifications/cancelled",
                       "params": {"requestId": request_id}}).encode()


@settings(derandomize=True, max_examples=200, deadline=None)
@given(steps)
def test_the_region_s_table_is_the_ledger_s_in_flight_set_after_every_step_whoever_holds_it(
        script: list[tuple[str, JsonId | None]]) -> None:
    with mmap.mmap(-1, hs.REGION_BYTES) as buf:
        run(script, buf)


def run(script: list[tuple[str, JsonId | None]], buf: mmap.mmap) -> None:
    ledger = Ledger(Region(buf))
    model: dict[object, JsonId] = {}  # what the client waits for, by id_key (1 and "1" differ)
    for step in script:
        kind, request_id = step
        if kind == "request":
            assert request_id is not None
            ledger.client_line(line("request", request_id))
            model.setdefault(id_key(request_id), request_id)
        elif kind in ("answer", "cancel"):
            assert request_id is not None
            if kind == "answer":
                ledger.answered(request_id)
            else:
                ledger.client_line(line("cancel", request_id))
            model.pop(id_key(request_id), None)
        elif kind == "continue":
            # An upgrade's successor: it finds the table's ids; those too long for it are lost.
            ledger = Ledger(Region(buf))
            model = {key: value for key, value in model.items() if recorded(value)}
        else:
            # A kill -9 and a reclaiming: what the table holds is answered through the new ledger,
            # whose table it is now; an id no table held is answered by nobody. With "landed",
            # the daemon was killed after reading a request and before recording it: it is in
            # the region after the head, and the reclaiming ledger holds it like any other.
            landed = request_id
            region = Region(buf)
            if landed is not None:
                assert region.current is not None
                region.write_head(line("request", landed) + b"\n", region.current.head_len, region.current.head_area)
                region = Region(buf)
            done = reclaim(region)
            assert isinstance(done, Recovery)
            ledger = Ledger(region, recovery=done)
            model = {key: value for key, value in model.items() if recorded(value)}
            if landed is not None:
                model.setdefault(id_key(landed), landed)
            assert sorted(done.ids) == sorted(text(value) for value in model.values()), step
        seen = Region(buf)  # as the shim would read it now
        assert seen.current is not None
        assert sorted(entry for _, entry in seen.entries()) == sorted(
            text(value) for value in model.values() if recorded(value)), step
        assert ledger.inflight == len(model), step
