"""Fuzzing the relay core with hostile clients and servers mixed into random sessions (case 36).

Testing policy: this extends the random walk of sharing_walk.py (played by test_relay_sharing.py;
its `Walk` models what every client and the server have seen and checks every action against
it: each request answered at most once and only to its owner, nothing lost once the server is
gone, the in-flight count equal to the model's, relay ids never reused, only the declared action
types). Here the walk
also meets peers that break the rules: clients sending bytes that are not JSON-RPC, requests
that try to smuggle an id past the relay with a duplicate "id" key, cancels of ids they do not
own, answers to server requests that went to someone else; a server answering twice, under
unknown ids, under the right number as a string, or with lines that are not JSON. Each hostile
event has its documented outcome asserted on top of the walk's invariants. Hypothesis runs with a
fixed seed and bounded examples; the outer test counts the events, so "10,000 events" is checked.
"""

from __future__ import annotations

import random

from hypothesis import given, note, settings
from hypothesis import strategies as st

from lazyd.core.relay import jsonrpc as rpc
from lazyd.core.relay.jsonrpc import Invalid, JsonId, JsonObj
from tests.unit.relay_driver import Driver, result, running, warm_snapshot
from tests.unit.sharing_walk import OPS, Walk, key

EXAMPLES = 120
MIN_EVENTS = 10_000
HOSTILE_OPS = ("client_garbage", "smuggle", "foreign_cancel", "spoof_answer",
               "server_garbage", "server_garbage", "server_duplicate")
ALL_OPS = (*OPS, *HOSTILE_OPS)

# Client lines that are not valid messages, as sloppy or hostile peers write them.
CLIENT_GARBAGE = [
    b"", b"not json", b"\xff\xfe", b"[]", b"[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]", b"1", b"null",
    b"{}", b'{"jsonrpc":"2.0","id":null,"method":"tools/call"}', b'{"jsonrpc":"2.0","id":1.5,"method":"ping"}',
    b'{"jsonrpc":"2.0","id":true,"method":"ping"}', b'{"jsonrpc":"2.0","id":[1],"method":"ping"}',
    b'{"jsonrpc":"2.0","method":5}', b'{"jsonrpc":"2.0","id":"g1"}', b'{"jsonrpc":"2.0","id":"g2","method":{}}',
    b'{"jsonrpc":"2.0","id":"g3","method":"tools/call","params":' + b"[" * 300 + b"]" * 300 + b"}",
]


class HostileWalk(Walk):
    """The sharing walk, plus rule-breaking clients and servers."""

    answered_rids: set[int]

    def hostile(self, op: str, a: int, b: int, rng: random.Random) -> None:
        d = self.d
        cid = self.pick(a)
        if op == "client_garbage" and cid is not None:
            self.client_garbage(cid, rng)
        elif op == "smuggle" and cid is not None:
            self.smuggle(cid, b)
        elif op == "foreign_cancel" and cid is not None:
            mine = set(self.outstanding[cid]) | {key(i) for i in self.finished[cid]} | self.cancelled[cid]
            others = [i for c in self.clients if c != cid for i in self.outstanding[c].values()]
            candidates: list[object] = [None, 1.5, {}, [], True, "never-sent", *others]
            target = candidates[b % len(candidates)]
            if isinstance(target, (int, str)) and not isinstance(target, bool) and key(target) in mine:
                return
            out = d.tell(cid, "notifications/cancelled", {"requestId": target})
            assert out.server == [], "a cancel of an id the client does not own went upstream"
            self.check(out)
        elif op == "spoof_answer" and cid is not None:
            theirs = [(c, i) for c, i in self.delivered if c != cid and (cid, i) not in self.delivered]
            if theirs:
                out = d.send(cid, result(theirs[b % len(theirs)][1], {"spoofed": True}))
                assert out.server == [], "an answer to another client's server request went upstream"
                self.check(out)
        elif op == "server_garbage" and self.server_up:
            self.server_garbage(b, rng)
        elif op == "server_duplicate" and self.server_up and self.answered_rids:
            rid = sorted(self.answered_rids)[b % len(self.answered_rids)]
            out = d.server_says(result(rid, {"content": [], "structuredContent": {"owner": -1, "id": -1}}))
            assert out.done == [], f"a second answer to relay id {rid} reached a client"
            self.check(out)

    def client_garbage(self, cid: int, rng: random.Random) -> None:
        line = rng.choice(CLIENT_GARBAGE)
        if rng.random() < 0.5:
            # Damage a valid request: whatever it becomes, it is either a message or refused.
            raw = bytearray(rpc.dumps({"jsonrpc": "2.0", "id": f"g{rng.randrange(9)}", "method": "tools/call",
                                       "params": {"name": "echo"}}))
            for _ in range(rng.randint(1, 3)):
                raw[rng.randrange(len(raw))] = rng.choice(b'{}[]",:01 x')
            line = bytes(raw)
        msg = rpc.parse(line)
        if not isinstance(msg, Invalid):
            return  # still a message: the plain walk covers those
        if msg.id is not None:
            if key(msg.id) in self.outstanding[cid] or key(msg.id) in self.cancelled[cid]:
                return  # reusing an id in flight is the client's own confusion, not modelled
            if msg.reply is not None:
                self.outstanding[cid][key(msg.id)] = msg.id
        out = self.d.send(cid, line)
        assert out.server == [] and not out.want, "an invalid line had an effect upstream"
        assert len(out.client(cid)) == (1 if msg.reply is not None else 0)
        self.check(out)

    def smuggle(self, cid: int, b: int) -> None:
        # A request whose leading id is a relay id in use, repeated as a duplicate key: parsers see
        # that id, and the relay must still give the server its own relay id for this request.
        live = sorted(rid for rid in self.d.upstream if isinstance(rid, int))
        fake: JsonId = live[b % len(live)] if live else 10**6 + b
        if key(fake) in self.outstanding[cid] or key(fake) in self.cancelled[cid]:
            return
        # The walk's clients number their ids 1, 2, 3...: move this one past the borrowed id so
        # that it never reuses an id in flight (that would be the client's own confusion).
        self.next_id[cid] = max(self.next_id[cid], int(fake))
        params = {"name": "echo", "arguments": {"owner": cid, "id": fake}}
        line = (b'{"jsonrpc":"2.0","id":' + rpc.dumps(fake) + b',"method":"tools/call","params":'
                + rpc.dumps(params) + b',"id":' + rpc.dumps(fake) + b"}")
        self.outstanding[cid][key(fake)] = fake
        self.methods[(cid, key(fake))] = "tools/call"
        before = set(self.d.upstream)
        out = self.d.send(cid, line)
        self.check(out)
        sent = [m for m in out.server if m.get("method") == "tools/call"]
        for msg in sent:
            assert msg["id"] not in before, f"the server was shown relay id {msg['id']}, already in use"

    def server_garbage(self, b: int, rng: random.Random) -> None:
        live = sorted(self.d.upstream)
        rid = live[b % len(live)] if live else 424242
        line = rng.choice([
            b"this is not json", b"\xff", b"{}", b"[1,2]", b'{"jsonrpc":"2.0","id":null,"error":{"code":1,"message":"x"}}',
            rpc.dumps(result(str(rid), {"content": []})),  # the right number, as a string: not ours
            rpc.dumps(result(10**12 + b, {"content": []})),  # an id the relay never issued
            rpc.dumps({"jsonrpc": "2.0", "id": rid}),  # neither result nor error
        ])
        out = self.d.server_says(line)
        assert out.done == [], f"server garbage {line!r} answered a client request"
        self.check(out)
        if out.aborts:
            self.exit()

    def respond(self, msg: JsonObj, b: int) -> None:
        rid = msg["id"]
        if isinstance(rid, int):
            self.answered_rids.add(rid)
        super().respond(msg, b)


def decode(data: bytes) -> list[tuple[str, int, int]]:
    return [(ALL_OPS[data[i] % len(ALL_OPS)], data[i + 1] % 16, data[i + 2] % 16) for i in range(0, len(data) - 2, 3)]


def test_ten_thousand_events_with_hostile_clients_and_servers_keep_every_invariant() -> None:
    events = 0

    @settings(derandomize=True, max_examples=EXAMPLES, deadline=None, database=None)
    @given(st.booleans(), st.binary(min_size=150, max_size=600), st.integers(0, 2**32))
    def run(warm: bool, data: bytes, seed: int) -> None:
        nonlocal events
        ops = decode(data)
        note(f"warm={warm} seed={seed} ops={ops}")
        rng = random.Random(seed)
        walk = HostileWalk(Driver(warm_snapshot() if warm else None))
        walk.answered_rids = set()
        for op, a, b in ops:
            if op in HOSTILE_OPS:
                walk.hostile(op, a, b, rng)
            else:
                walk.step(op, a, b)
            events += 1
        walk.exit()
        for cid in walk.clients:
            assert walk.outstanding[cid] == {}, f"client {cid} still waits for {list(walk.outstanding[cid].values())}"

    run()
    assert events >= MIN_EVENTS


def test_a_client_cannot_make_the_server_answer_another_clients_request_with_a_duplicate_id() -> None:
    # Regression: the relay spliced its id over the leading "id" and left the duplicate, so the
    # server saw the client's chosen id, here the relay id of client 2's call, and its answer
    # went to client 2.
    d = running(1, 2)
    d.ask(2, 7, "tools/call", {"name": "slow"})
    (victim_rid,) = [rid for rid, m in d.upstream.items() if m["method"] == "tools/call"]
    smuggled = (b'{"jsonrpc":"2.0","id":' + str(victim_rid).encode()
                + b',"method":"tools/call","params":{"name":"echo"},"id":' + str(victim_rid).encode() + b"}")
    out = d.send(1, smuggled)
    (forwarded,) = out.server
    assert forwarded["id"] != victim_rid
    answer = d.reply(forwarded, {"content": [], "structuredContent": {"from": "client 1's call"}})
    assert answer.done == [(1, victim_rid)] and answer.client(2) == []
    (line,) = answer.client(1)
    assert line["id"] == victim_rid and line["result"]["structuredContent"] == {"from": "client 1's call"}
    # Client 2's call is still waiting for its own answer, which reaches client 2 only.
    late = d.reply(d.upstream[victim_rid], {"content": [], "structuredContent": {"from": "client 2's call"}})
    assert late.done == [(2, 7)] and late.client(1) == []
