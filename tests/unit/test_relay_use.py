"""The relay marks a client request that is real use of the server (`Used`), for the check linger:
the handshake, listings, discovery, ping and log levels are not use; anything else is, a method
no list knows included, and the mark comes before the request's own actions (so a start the
request makes is already a used one)."""

from __future__ import annotations

import pytest

from lazyd.core.relay.core import Used, WantServer
from lazyd.core.lifecycle.usage import counts_as_use
from tests.unit.relay_driver import CLIENT_PARAMS, Driver, result, warm_snapshot


def warm() -> Driver:
    d = Driver(warm_snapshot())
    d.attach(1)
    d.ask(1, 0, "initialize", CLIENT_PARAMS)
    d.tell(1, "notifications/initialized")
    return d


@pytest.mark.parametrize("method", ["tools/list", "prompts/list", "resources/list", "resources/templates/list",
                                    "ping", "logging/setLevel"])
def test_listings_and_the_relays_own_answers_are_not_use(method: str) -> None:
    d = warm()
    params = {"level": "info"} if method == "logging/setLevel" else None
    out = d.ask(1, 5, method, params)
    assert not any(isinstance(a, Used) for a in out)
    assert not any(isinstance(a, WantServer) for a in out)  # answered from the cache


def test_the_handshake_is_not_use() -> None:
    d = Driver(warm_snapshot())
    d.attach(1)
    assert not any(isinstance(a, Used) for a in d.ask(1, 0, "initialize", CLIENT_PARAMS))
    assert not any(isinstance(a, Used) for a in d.tell(1, "notifications/initialized"))


@pytest.mark.parametrize("method", ["tools/call", "resources/read", "prompts/get", "completion/complete",
                                    "resources/subscribe", "x-vendor/anything"])
def test_every_other_request_is_use_marked_before_the_start_it_asks_for(method: str) -> None:
    d = warm()
    out = list(d.ask(1, 7, method, {"name": "echo", "uri": "file:///x", "arguments": {}}))
    assert isinstance(out[0], Used)
    assert WantServer() in out  # the server sleeps: the request starts it, after the mark


def test_a_response_or_notification_from_the_client_is_not_use() -> None:
    d = warm()
    assert not any(isinstance(a, Used) for a in d.send(1, result(3, {})))
    assert not any(isinstance(a, Used) for a in d.tell(1, "notifications/roots/list_changed"))


def test_the_rule_reads_as_documented() -> None:
    assert not counts_as_use("server/discover") and not counts_as_use("subscriptions/listen")
    assert counts_as_use("tools/call") and counts_as_use("tasks/get")
