"""What is read of a client's JSON lines to keep its in-flight table: ids, methods, cancellations.

Whoever reads a client's stdin keeps a table of the requests in flight, so that the shim can answer
them if the daemon is lost: the shim itself on the frame path, the daemon on a hand-off session
(lazyd/daemon/handoff/session.py). It needs each request's id (with its JSON type: 1 and "1"
differ), which lines cancel what, and which are the handshake. A line is read as the relay core
reads it (lazyd/protocol/jsonline.py), so that a line the daemon refuses under a null id is never
in flight here, and an id in flight is the one the daemon answers. Standard library only.
"""

from __future__ import annotations

import json

from lazyd.protocol import jsonline

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs start-up time
if TYPE_CHECKING:
    JsonId = int | str
    IdKey = tuple[bool, int | str]


EOF_WAIT_S = 60.0
# How long whoever serves a client's stdin goes on answering the requests the client wrote before
# closing it: the MCP SDKs' default request timeout, after which the client gives up on an answer.
# A client that does not want to wait closes its stdout or signals the shim, and it ends at once.


def id_key(value: object) -> IdKey | None:
    """A hashable key that keeps the JSON type of a request id; None for what is no id
    (null, a boolean, a fraction, an integer beyond what msgpack carries: lazyd/protocol/jsonline.py)."""
    if not jsonline.valid_id(value):
        return None
    assert isinstance(value, (int, str))
    return (isinstance(value, str), value)


def error_line(request_id: JsonId, code: int, message: str) -> bytes:
    """A JSON-RPC error response line (without newline) for ``request_id``."""
    response = {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}
    return json.dumps(response, separators=(",", ":")).encode()


class LineInfo:
    """What the relay needs from one client line: requests, cancellations, handshake role."""

    __slots__ = ("requests", "cancelled", "kind")

    def __init__(self) -> None:
        self.requests: list[tuple[IdKey, JsonId]] = []
        self.cancelled: list[IdKey] = []
        self.kind: str | None = None  # "initialize" or "initialized"


def inspect_line(line: bytes) -> LineInfo:
    """Read a client line for bookkeeping. A line the relay refuses (not JSON, nested too deep)
    yields an empty LineInfo."""
    message, refused = jsonline.read(line)
    if refused is not None:  # not JSON, not UTF-8, or too deep: the daemon answers -32700 under a null id
        return LineInfo()
    if not isinstance(message, dict):
        # Nor a 2025-03-26 batch: the relay refuses one whole, with one error under a null id, so
        # none of its requests is ever answered by its id; kept in flight, each held a client that
        # closed its stdin for EOF_WAIT_S.
        return LineInfo()
    method = message.get("method")
    if not isinstance(method, str):
        return LineInfo()  # a response to a server request, or garbage
    return message_info(method, "id" in message, message.get("id"), message.get("params"))


def message_info(method: str, has_id: bool, request_id: object, params: object) -> LineInfo:
    """What one message with `method` says for bookkeeping: a request (an id, valid or not) or a
    notification (a cancellation, the handshake's end). The rule `inspect_line` applies to the JSON
    it parsed and the daemon's ledger to the relay's parse (lazyd/daemon/handoff/ledger.py)."""
    info = LineInfo()
    if has_id:
        key = id_key(request_id)
        if key is not None and isinstance(request_id, (int, str)):
            info.requests.append((key, request_id))
            if method == "initialize":
                info.kind = "initialize"
    elif method == "notifications/cancelled":
        key = id_key(params.get("requestId")) if isinstance(params, dict) else None
        if key is not None:
            info.cancelled.append(key)
    elif method == "notifications/initialized":
        info.kind = "initialized"
    return info


ID_SCAN_BYTES = 64 * 1024
# What is kept of an over-long line to find its id and method: both come first in the JSON that
# real SDKs write.


class LineSplitter:
    """A client's stdin cut into lines, the one way every reader of it cuts them: the shim's relay
    (frames), the daemon on a hand-off session, and the shim recovering one from the region.

    A line ends at "\n" (a "\r" before it is dropped); blank lines carry no message and are
    skipped. A line over `max_line` bytes is *too long*: only its first ID_SCAN_BYTES are kept (to
    answer its request with an error) and the rest is skipped as it comes. At EOF, a last line
    without its newline is still a line. `feed` returns, for the lines its bytes complete, each as
    (line, too_long); `buffer` and `discarding` are the start of the line not yet complete, and
    `newlines` how many line ends its bytes held (blank lines too), found as it cut them: what a
    reader sizes its next read by, without a second pass over the bytes."""

    __slots__ = ("max_line", "buffer", "discarding", "newlines")

    def __init__(self, max_line: int, head: bytes = b"", discarding: bool = False) -> None:
        self.max_line = max_line
        self.buffer = bytearray(head)
        self.discarding = discarding
        self.newlines = 0  # line ends in the bytes of the last feed

    def feed(self, data: bytes) -> list[tuple[bytes, bool]]:
        out: list[tuple[bytes, bool]] = []
        buffer, limit = self.buffer, self.max_line + 1  # room for a "\r"
        start, end = 0, len(data)
        newlines = 0
        while start < end:
            newline = data.find(b"\n", start)
            stop = end if newline < 0 else newline
            if self.discarding or len(buffer) + stop - start > limit:
                if len(buffer) < ID_SCAN_BYTES:  # the start is kept, whatever the reads were
                    buffer += data[start : min(stop, start + ID_SCAN_BYTES - len(buffer))]
                del buffer[ID_SCAN_BYTES:]
                self.discarding = True
            elif newline >= 0 and not buffer:
                self._line(data[start:newline], out)
            elif newline >= 0:
                # The end of the line the buffer began: joined once (appending it first would
                # grow the buffer, and a slice of `data` would be a copy of its own).
                line = b"".join((buffer, memoryview(data)[start:stop]))
                # A new buffer for the next line rather than this one emptied: a buffer that grew
                # past the C library's mmap threshold stays a mapping of its own, given back page
                # by page as it shrinks and faulted in again as the next large line grows it.
                self.buffer = buffer = bytearray()
                self._line(line, out)
            else:
                buffer += data[start:stop]  # a whole read without a newline: `data` itself
            if newline < 0:
                break
            newlines += 1
            if self.discarding:
                self._line(bytes(buffer), out, too_long=True)
                buffer.clear()
                self.discarding = False
            start = newline + 1
        self.newlines = newlines
        return out

    def finish(self) -> list[tuple[bytes, bool]]:
        """At EOF: the last line, if it had no newline."""
        out: list[tuple[bytes, bool]] = []
        self._line(bytes(self.buffer), out, too_long=self.discarding)
        self.buffer.clear()
        self.discarding = False
        return out

    def _line(self, line: bytes, out: list[tuple[bytes, bool]], too_long: bool = False) -> None:
        if line.endswith(b"\r"):
            line = line[:-1]
        if too_long or len(line) > self.max_line:
            out.append((line[:ID_SCAN_BYTES], True))
        elif line and not line.isspace():
            out.append((line, False))


TOO_LONG_CODE = -32600  # JSON-RPC's "Invalid Request", for a line over the longest one taken


def too_long_answer(prefix: bytes, max_line: int) -> bytes | None:
    """The answer (a line without its newline) to an over-long line of which `prefix` is the start
    (LineSplitter's too_long), the same from whoever reads the client's stdin: -32600 under the id
    of the request it starts with, or None when it holds no readable request id (then it is
    dropped, as nothing could be answered under it)."""
    request_id = too_long_request(prefix)
    if request_id is None:
        return None
    return error_line(request_id, TOO_LONG_CODE, f"lazyd: line too long (more than {max_line} bytes)")


def too_long_request(prefix: bytes) -> JsonId | None:
    """The id of the request an over-long line starts with (its first ID_SCAN_BYTES), or None
    when it holds no readable request id: then it is dropped rather than answered. Only the
    outermost object's members count, read by the JSON scanner up to the first the prefix does not
    hold whole (`jsonline.members`); of repeated keys the last counts, as for `json.loads`."""
    prefix = prefix[:ID_SCAN_BYTES]
    try:
        text = prefix.decode("utf-8", "surrogatepass")  # as json.loads decodes bytes
    except UnicodeDecodeError as error:  # cut inside a character, or not UTF-8 from there on
        text = prefix[: error.start].decode("utf-8", "surrogatepass")
    start = len(text) - len(text.lstrip(" \t\r\n"))
    if text[start : start + 1] != "{":
        return None
    fields = {key: value for key, value, _ in jsonline.members(text, start + 1) if key in ("id", "method")}
    found = fields.get("id")
    if isinstance(fields.get("method"), str) and id_key(found) is not None:
        assert isinstance(found, (int, str))
        return found
    return None


def request_ids_in(head: bytes, discarding: bool, data: bytes, max_line: int) -> tuple[list[bytes], bytes, bool]:
    """The requests in client input nobody relayed for sure, as a hand-off session's shim finds
    it in the region (lazyd/handoff/region.py): `head`, the start of a line (with `discarding`, the
    first bytes of an over-long one), then `data`, the bytes read after it.

    Returns the JSON text of each request id in the lines `data` completes, cut as LineSplitter
    cuts them, the start of the line left unfinished, and whether that start is an over-long line's."""
    splitter = LineSplitter(max_line, head, discarding)
    ids: list[bytes] = []
    for line, too_long in splitter.feed(data):
        if too_long:
            found = too_long_request(line)
            if found is not None:
                ids.append(json.dumps(found).encode())
        else:
            ids.extend(json.dumps(request_id).encode() for _, request_id in inspect_line(line).requests)
    return ids, bytes(splitter.buffer), splitter.discarding
