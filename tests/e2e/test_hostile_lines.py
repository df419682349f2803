"""Hostile JSON lines through a real daemon, on the frame path and on the hand-off path: each costs
that line its JSON-RPC error and nothing else (docs/relay.md, "Bad input").

Every path reads a line as `json.loads` does (the last of repeated keys wins) or refuses it; an id
is a string or an integer that msgpack carries (-2^63 to 2^64-1), anything else is refused with
-32600 under a null id; a line nested deeper than the bound, or too deep to parse at all, is
-32700 under a null id; a refused line leaves nothing in flight, so the shim exits at once at
stdin EOF. The daemon keeps its pid and a healthy session beside sees no error.

Policy: real shim, daemon and servers (the fixture server, and tests/servers/repeated_id_server.py
for answers with two ids); "at once" is a bound far below the 60 s the shim waits for answers
still owed, never a measured speed.
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import SERVERS, Daemon, UserEnv, start_daemon
from tests.e2e.faults_support import FIXTURE, RawShim, text_of
from tests.e2e.shim_paths import ShimPath

pytestmark = pytest.mark.e2e

REPEATED_ID_SERVER = [sys.executable, str(SERVERS / "repeated_id_server.py")]
LARGE = 100 * 1024  # over the 64 KiB where the large-line readers take over
EXIT_AT_ONCE_S = 10.0  # an exit with nothing owed; the shim would wait 60 s for an answer still owed
PATHS = (ShimPath("frames", False, False), ShimPath("hand-off", True, False))


@pytest.fixture(params=PATHS, ids=[p.name for p in PATHS])
def path(request: pytest.FixtureRequest) -> ShimPath:
    chosen: ShimPath = request.param
    return chosen


@pytest.fixture
def daemon(user_env: UserEnv) -> Iterator[Daemon]:
    d = start_daemon(user_env)
    yield d
    if d.proc.poll() is None:
        d.stop()


class Beside:
    """A healthy session of the same server, calling between the hostile lines."""

    def __init__(self, user: UserEnv, server: list[str]) -> None:
        self.shim = RawShim(user, server)
        self.shim.initialize("beside-init")
        self.n = 0

    def still_fine(self) -> None:
        self.n += 1
        self.shim.send({"jsonrpc": "2.0", "id": self.n, "method": "tools/call",
                        "params": {"name": "echo", "arguments": {"text": f"fine {self.n}"}}})
        answer = self.shim.read()
        assert answer.get("id") == self.n and text_of(answer) == f"fine {self.n}", answer

    def close(self) -> None:
        assert self.shim.close_stdin_and_wait() == 0
        self.shim.close()


@pytest.fixture
def beside(user_env: UserEnv, daemon: Daemon) -> Iterator[Beside]:
    b = Beside(user_env, FIXTURE)
    yield b
    b.close()


def started(user: UserEnv, path: ShimPath, server: list[str] | None = None) -> RawShim:
    shim = path.started(user, server_argv=server or FIXTURE)
    shim.initialize("init")
    path.check(shim)
    return shim


def request(request_id: Any, text: str = "x") -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                       "params": {"name": "echo", "arguments": {"text": text}}}).encode()


def refusal(answer: dict[str, Any], code: int) -> None:
    assert answer.get("id", "absent") is None and answer["error"]["code"] == code, answer


def exits_at_once(shim: RawShim) -> None:
    try:
        status = shim.close_stdin_and_wait(EXIT_AT_ONCE_S)
    finally:
        shim.close()
    assert status == 0, shim.stderr()


def test_integer_ids_beyond_what_msgpack_carries_are_refused_under_a_null_id_and_the_bounds_round_trip(
        user_env: UserEnv, daemon: Daemon, beside: Beside, path: ShimPath) -> None:
    shim = started(user_env, path)
    for bad in (b"100000000000000000000", b"18446744073709551616", b"-9223372036854775809", b"1.0", b"1e3"):
        shim.send_raw(request(0).replace(b'"id": 0', b'"id": ' + bad) + b"\n")
        refusal(shim.read(), -32600)
        beside.still_fine()
    for edge in (2**64 - 1, -(2**63), 0):
        shim.send_raw(request(edge, "edge") + b"\n")
        answer = shim.read()
        assert answer["id"] == edge and type(answer["id"]) is int and text_of(answer) == "edge", answer
    assert daemon.proc.poll() is None, "the daemon died"
    exits_at_once(shim)
    beside.still_fine()


def test_a_line_nested_past_the_bound_or_too_deep_to_parse_is_a_parse_error_and_the_session_goes_on(
        user_env: UserEnv, daemon: Daemon, beside: Beside, path: ShimPath) -> None:
    shim = started(user_env, path)
    for depth in (257, 1000, 100_000):
        nested = b"[" * depth + b"]" * depth
        for line in (b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"x":%s}}' % (depth, nested), nested):
            shim.send_raw(line + b"\n")
            refusal(shim.read(), -32700)
            beside.still_fine()
    shim.send_raw(request(1, "after") + b"\n")
    assert text_of(shim.read()) == "after"
    assert daemon.proc.poll() is None, "the daemon died"
    exits_at_once(shim)


def test_a_first_line_too_deep_to_parse_that_names_initialize_is_a_parse_error_and_the_session_goes_on(
        user_env: UserEnv, daemon: Daemon, beside: Beside, path: ShimPath) -> None:
    # The daemon learns a client's handshake from its first lines (lazyd/daemon/control/handshakes.py).
    shim = path.started(user_env, server_argv=FIXTURE)
    nested = b"[" * 100_000 + b"]" * 100_000
    shim.send_raw(b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":%s}\n' % nested)
    refusal(shim.read(), -32700)
    beside.still_fine()
    shim.initialize("init")
    shim.send_raw(request(2, "after") + b"\n")
    assert text_of(shim.read()) == "after"
    assert daemon.proc.poll() is None, "the daemon died"
    exits_at_once(shim)


@pytest.mark.parametrize("kind", ["invalid UTF-8", "10^5 deep"])
def test_a_refused_line_over_64_kib_leaves_nothing_in_flight_and_the_shim_exits_at_once_at_eof(
        user_env: UserEnv, daemon: Daemon, path: ShimPath, kind: str) -> None:
    shim = started(user_env, path)
    if kind == "invalid UTF-8":
        line = request(7, "y" * LARGE).replace(b"yyyy", b"yy\xffy", 1)
    else:
        line = b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":%s%s}' % (b"[" * 100_000, b"]" * 100_000)
    shim.send_raw(line + b"\n")
    refusal(shim.read(), -32700)
    exits_at_once(shim)


@pytest.mark.parametrize("size", [0, LARGE], ids=["small", "large"])
def test_a_client_line_with_two_ids_is_answered_once_under_the_last_as_json_reads_it(
        user_env: UserEnv, daemon: Daemon, beside: Beside, path: ShimPath, size: int) -> None:
    shim = started(user_env, path)
    text = "z" * size
    # The SDKs' id-first shape with a second id at the end, and the method-first one with two.
    lines = [request(1, text)[:-1] + b', "id": 2}',
             b'{"jsonrpc":"2.0","method":"tools/call","id":3,"params":{"name":"echo","arguments":{"text":"%s"}},"id":4}'
             % text.encode()]
    for line in lines:
        shim.send_raw(line + b"\n")
    answers = [shim.read(), shim.read()]
    assert sorted(a["id"] for a in answers) == [2, 4], [a.get("id") for a in answers]
    assert all(text_of(a) == text for a in answers)
    shim.fence("fence")  # nothing more was owed
    beside.still_fine()
    exits_at_once(shim)


@pytest.mark.parametrize("size", [0, LARGE], ids=["small", "large"])
def test_a_server_answer_with_two_ids_reaches_the_client_only_under_an_id_it_sent(
        user_env: UserEnv, daemon: Daemon, path: ShimPath, size: int) -> None:
    shim = started(user_env, path, REPEATED_ID_SERVER)
    text = "w" * size
    sent: set[Any] = {"init"}

    def call(request_id: Any, name: str, **args: Any) -> None:
        sent.add(request_id)
        shim.send({"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                   "params": {"name": name, "arguments": {"text": text, **args}}})

    # The server's last id is its answer's id: a relay id nobody asked with, so nobody's answer.
    call(10, "twice", other=987654, order="request-first")
    call(11, "echo")
    answer = shim.read()
    assert answer["id"] == 11 and text_of(answer) == text, {k: v for k, v in answer.items() if k != "result"}
    # The server's last id is the request's: its answer, under the client's own id, once.
    call(12, "twice", other=987654, order="other-first")
    answer = shim.read()
    assert answer["id"] == 12 and text_of(answer) == text, {k: v for k, v in answer.items() if k != "result"}
    shim.fence("fence")  # and nothing else came
    # Call 10 got no answer, as it would get none from this server run directly: the client gives
    # up on it, and then nothing is owed.
    shim.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 10}})
    exits_at_once(shim)


def _hostile_lines(rng: random.Random, count: int) -> Iterator[tuple[bytes, Any]]:
    """(line, the id json.loads reads as a request's, or None when the line must be refused
    under a null id or is a notification); each request id used once."""
    ids = iter(range(1000, 10**9))

    def ident() -> Any:
        n = next(ids)
        return rng.choice([n, -n, str(n), f"é{n}\\"])

    decoys = [None, True, 1.5, 10**20, -(2**63) - 1, "d", {"a": 1}, [1], 7]
    for _ in range(count):
        shape = rng.randrange(10)
        pad = "p" * rng.choice([0, 0, 0, 10, LARGE])
        if shape <= 2:  # repeated ids, the last a valid one
            good = ident()
            first = json.dumps(rng.choice(decoys))
            body = json.dumps({"name": "echo", "arguments": {"text": pad}})
            yield (b'{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":%s,"id":%s}'
                   % (first.encode(), body.encode(), json.dumps(good).encode())), good
        elif shape == 3:  # repeated ids, the last not a valid id
            yield (b'{"jsonrpc":"2.0","id":%s,"method":"ping","params":{"p":"%s"},"id":%s}'
                   % (json.dumps(ident()).encode(), pad.encode(), json.dumps(rng.choice(decoys[:5])).encode())), None
        elif shape == 4:  # deep
            depth = rng.choice([257, 300, 999, 1000, 5000, 100_000])
            yield (b'{"jsonrpc":"2.0","id":%s,"method":"ping","params":{"p":%s%s}}'
                   % (json.dumps(ident()).encode(), b"[" * depth, b"]" * depth)), None
        elif shape == 5:  # not UTF-8, not JSON, not an object
            yield rng.choice([b'{"jsonrpc":"2.0","id":5,"method":"ping","params":{"p":"\xff%s"}}' % pad.encode(),
                              b"not json " + pad.encode(), b"[]", b"42", b'"s"', b"null",
                              b'{"jsonrpc":"2.0","id":6,"method":"ping"'
                              ]), None
        elif shape == 6:  # a method repeated: the last one counts
            yield (b'{"jsonrpc":"2.0","method":"nope","id":%s,"method":"ping","params":{"p":"%s"}}'
                   % (json.dumps(good := ident()).encode(), pad.encode())), good
        elif shape == 7:  # spaces and escapes around the id
            good = ident()
            yield (b'{ "jsonrpc" : "2.0" , "method" : "ping" , "params" : {"p":"%s"} , "\\u0069d" : %s }'
                   % (pad.encode(), json.dumps(good).encode())), good
        else:  # an ordinary request
            good = ident()
            yield json.dumps({"jsonrpc": "2.0", "id": good, "method": "ping", "params": {"p": pad}}).encode(), good


@pytest.mark.parametrize("refused_first", [0, 8], ids=["after the handshake", "refused lines before it"])
def test_a_fuzz_of_hostile_lines_costs_each_line_its_error_and_nothing_else(
        user_env: UserEnv, daemon: Daemon, beside: Beside, path: ShimPath, refused_first: int) -> None:
    rng = random.Random(36 + refused_first)
    owed: list[Any] = []
    refusals = 0
    shim = path.started(user_env, server_argv=FIXTURE)
    if refused_first:
        # The daemon looks at a session's first lines for its handshake: hostile ones, some
        # naming "initialize", then the real one.
        first = [line for line, good in _hostile_lines(rng, 200) if good is None][:refused_first - 1]
        first.append(b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":%s}' % (b"[" * 5000 + b"]" * 5000))
        for line in first:
            shim.send_raw(line + b"\n")
            answer = shim.read()
            assert answer.get("id", "absent") is None and answer["error"]["code"] in (-32600, -32700), answer
    shim.initialize("init")
    path.check(shim)
    for n, (line, good) in enumerate(_hostile_lines(rng, 400)):
        shim.send_raw(line + b"\n")
        if good is None:
            refusals += 1
        else:
            owed.append(good)
        if n % 20 == 19:
            beside.still_fine()
    seen: list[Any] = []
    nulls = 0
    while len(seen) < len(owed) or nulls < refusals:
        answer = shim.read()
        if answer.get("id") is None:
            nulls += 1
            assert answer["error"]["code"] in (-32600, -32700), answer
        else:
            seen.append(answer["id"])
    assert sorted(map(json.dumps, seen)) == sorted(map(json.dumps, owed))
    shim.fence("fence")  # nothing more
    assert daemon.proc.poll() is None, "the daemon died"
    beside.still_fine()
    exits_at_once(shim)
