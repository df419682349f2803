"""The queue of client messages waiting for the server process."""

from __future__ import annotations

from collections.abc import Collection, Iterator

from lazyd.core.relay import jsonrpc as rpc
from lazyd.core.relay.actions import Action, Note, ToClient, WantServer
from lazyd.core.relay.jsonrpc import JsonId, Kind, Message
from lazyd.core.relay.routing import ClientId


class Waiting:
    """Client messages waiting for the server, in arrival order: forwarded (handled again) when the
    process is ready, answered with an error when it cannot be."""

    def __init__(self) -> None:
        self.items: list[tuple[ClientId, Message]] = []

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[tuple[ClientId, Message]]:
        return iter(self.items)

    def hold(self, cid: ClientId, msg: Message) -> None:
        self.items.append((cid, msg))

    def add(self, cid: ClientId, msg: Message, why: str) -> list[Action]:
        """Hold a request and ask for a live server."""
        self.items.append((cid, msg))
        return [WantServer(), Note(f"client {cid} {msg.method} id={msg.id!r} queued: {why}")]

    def take(self) -> list[tuple[ClientId, Message]]:
        """Everything waiting, leaving the queue empty (what is held again goes to the back)."""
        items, self.items = self.items, []
        return items

    def requests(self) -> int:
        return sum(1 for _, msg in self.items if msg.kind is Kind.REQUEST)

    def cancel(self, cid: ClientId, request_id: JsonId) -> bool:
        """Drop a client's queued request (its cancellation); whether one was there."""
        before = len(self.items)
        self.items = [(c, m) for c, m in self.items if not (c == cid and m.id == request_id and m.kind is Kind.REQUEST)]
        return len(self.items) != before

    def drop_client(self, cid: ClientId) -> None:
        self.items = [(c, m) for c, m in self.items if c != cid]

    def fail(self, message: str, clients: Collection[ClientId]) -> list[Action]:
        """Answer every queued request of an attached client with `message`, and empty the queue."""
        out: list[Action] = []
        for cid, msg in self.items:
            if msg.kind is Kind.REQUEST and msg.id is not None and cid in clients:
                out.append(ToClient(cid, rpc.error_line(msg.id, rpc.SERVER_UNAVAILABLE, message), msg.id))
        self.items = []
        return out
