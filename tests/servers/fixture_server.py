"""A scriptable stdio MCP server for tests: a correct handshake-era server with faults on demand.

Newline-delimited JSON-RPC on stdin/stdout, python standard library only (no SDK), so it starts in
tens of milliseconds. Requests are handled concurrently, one thread each, with one lock around
stdout, so a `sleep` call never blocks a `ping`. On stdin EOF it exits 0.

Behaviour by environment variable (all optional):

  FIXTURE_PAGE_SIZE=N           every listing is split into pages of N with an opaque nextCursor
  FIXTURE_TOOLS_EXTRA=a,b       extra echo-like tools (list drift between runs)
  FIXTURE_DRIFT_FILE=path       if the file exists at start, its comma-separated names add tools
  FIXTURE_START_DELAY_S=X       sleep X seconds before reading stdin
  FIXTURE_LISTING_DELAY_S=X     sleep X seconds before answering each listing page
  FIXTURE_HANG_ON_INITIALIZE=1  never answer `initialize`
  FIXTURE_CRASH_ON_START=CODE   write a line to stderr and exit CODE at once
  FIXTURE_IGNORE_EOF=1          keep running after stdin EOF
  FIXTURE_IGNORE_TERM=1         ignore SIGTERM
  FIXTURE_GRANDCHILDREN=N       start N sleeping python grandchildren in our process group (the
                                first ignores SIGTERM); they inherit the environment and stderr
  FIXTURE_GARBAGE_STDOUT=1      write a non-JSON line to stdout before each response
  FIXTURE_STDERR_FLOOD_MB=N     write N MiB of numbered lines to stderr before serving; the last
                                line is "fixture: stderr flood done"
  FIXTURE_DISCOVER=1            answer `server/discover` (else it is -32601 like real servers)
  FIXTURE_LOG=path              append the method of every received message, one per line
  FIXTURE_INSTRUCTIONS=text     the `instructions` of the initialize result
  FIXTURE_SHARING=MODE          the sharing it declares (`experimental.lazyd.sharing`): "shared" when
                                unset (it keeps no session's state worth guarding: the relay's tests
                                share it), "" for no declaration (an unknown server)
  FIXTURE_CAPABILITIES=json     more capabilities in the initialize result, e.g. {"x-mux": {...}};
                                it replaces the FIXTURE_SHARING declaration
  FIXTURE_ECHO_META=1           list a tool `meta` that answers the `_meta` its call carried, as JSON
  FIXTURE_LEAK_MIB_S=R          grow by R MiB of resident memory every second (see grow below)
  FIXTURE_MARKER=...            not read: inherited, so tests can find our processes in /proc

Tools: echo(text), pid, sleep(seconds) with progress every 0.1 s when the request has
_meta.progressToken and silent on notifications/cancelled, crash(code), counter, env(name),
sample(prompt), roots, elicit(message), log(level, text). Unlisted: stall(seconds) answers, then
stops reading stdin that long (a server whose stdin backs up); grow(mib) keeps mib MiB more of
written (resident) memory for the rest of its life and answers its total (a leaking server), and
with FIXTURE_LEAK_MIB_S=R it also grows by R MiB every second on its own from its start.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import sys
import threading
import time
from typing import Any, Callable

SUPPORTED_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
LATEST_VERSION = "2025-11-25"
CLIENT_REPLY_TIMEOUT_S = 30.0
"""How long a tool waits for the client's answer to a server-to-client request."""
PROGRESS_INTERVAL_S = 0.1
FLOOD_LINE = b"x" * 90
CAPABILITIES: dict[str, Any] = {
    "tools": {"listChanged": True},
    "prompts": {},
    "resources": {"subscribe": True, "listChanged": True},
    "logging": {},
}

Json = dict[str, Any]


def capabilities() -> Json:
    """CAPABILITIES with the sharing declaration (FIXTURE_SHARING) or FIXTURE_CAPABILITIES."""
    if os.environ.get("FIXTURE_CAPABILITIES"):
        return {**CAPABILITIES, **json.loads(os.environ["FIXTURE_CAPABILITIES"])}
    sharing = os.environ.get("FIXTURE_SHARING", "shared")
    return {**CAPABILITIES, "experimental": {"lazyd": {"sharing": sharing}}} if sharing else dict(CAPABILITIES)


class RpcError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


def _names(text: str) -> list[str]:
    return [n.strip() for n in text.split(",") if n.strip()]


class Server:
    def __init__(self) -> None:
        self.out_lock = threading.Lock()
        self.log_lock = threading.Lock()
        self.state_lock = threading.Lock()
        self.counter = 0
        self.hoard: list[bytearray] = []  # what grow() keeps
        self.next_server_id = 0
        self.waiting: dict[str, tuple[threading.Event, list[Json]]] = {}
        self.cancels: dict[str, threading.Event] = {}
        self.page_size = int(os.environ.get("FIXTURE_PAGE_SIZE", "0") or 0)
        self.garbage = _env_flag("FIXTURE_GARBAGE_STDOUT")
        self.hang_init = _env_flag("FIXTURE_HANG_ON_INITIALIZE")
        self.discover = _env_flag("FIXTURE_DISCOVER")
        self.log_path = os.environ.get("FIXTURE_LOG", "")
        extra = _names(os.environ.get("FIXTURE_TOOLS_EXTRA", ""))
        drift = os.environ.get("FIXTURE_DRIFT_FILE", "")
        if drift and os.path.exists(drift):
            with open(drift, encoding="utf-8") as f:
                extra += _names(f.read())
        self.extra_tools = extra

    # -- output ---------------------------------------------------------------------------

    def write(self, message: Json | list[Json]) -> None:
        data = json.dumps(message, separators=(",", ":")).encode() + b"\n"
        with self.out_lock:
            try:
                if self.garbage and not (isinstance(message, dict) and "method" in message):
                    sys.stdout.buffer.write(b"this is not json\n")
                sys.stdout.buffer.write(data)
                sys.stdout.buffer.flush()
            except BrokenPipeError:
                os._exit(0)

    def notify(self, method: str, params: Json) -> None:
        self.write({"jsonrpc": "2.0", "method": method, "params": params})

    def ask_client(self, method: str, params: Json) -> Json:
        """Send a request to the client and wait for its response message."""
        with self.state_lock:
            self.next_server_id += 1
            rid = f"fixture-{self.next_server_id}"
            done = threading.Event()
            slot: list[Json] = []
            self.waiting[json.dumps(rid)] = (done, slot)
        self.write({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        if not done.wait(CLIENT_REPLY_TIMEOUT_S):
            with self.state_lock:
                self.waiting.pop(json.dumps(rid), None)
            raise RpcError(-32603, f"no answer from the client to {method}")
        return slot[0]

    def record(self, method: str) -> None:
        if not self.log_path:
            return
        with self.log_lock, open(self.log_path, "a", encoding="utf-8") as f:
            f.write(method + "\n")

    # -- input ----------------------------------------------------------------------------

    def handle_line(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            self.write(_error(None, -32700, "parse error"))
            return
        if isinstance(message, list):
            threading.Thread(target=self.handle_batch, args=(message,), daemon=True).start()
        elif isinstance(message, dict):
            params = message.get("params")
            if message.get("method") == "tools/call" and isinstance(params, dict) and params.get("name") == "stall":
                # Answered first, then this (the only stdin reader) stops reading for a while: a
                # server whose stdin backs up, for the daemon's backpressure test.
                self.write({"jsonrpc": "2.0", "id": message.get("id"), "result": _text("stalling")})
                time.sleep(float((params.get("arguments") or {}).get("seconds", 1)))
                return
            self.dispatch(message)
        else:
            self.write(_error(None, -32600, "invalid request"))

    def handle_batch(self, batch: list[Any]) -> None:
        answers: list[Json] = []
        for message in batch:
            if not isinstance(message, dict):
                answers.append(_error(None, -32600, "invalid request"))
            elif "method" not in message:
                self.take_response(message)
            elif "id" not in message:
                self.record(str(message["method"]))
                self.take_notification(str(message["method"]), message.get("params") or {})
            else:
                self.record(str(message["method"]))
                answer = self.answer(message)
                if answer is not None:
                    answers.append(answer)
        if answers:
            self.write(answers)

    def dispatch(self, message: Json) -> None:
        method = message.get("method")
        if method is None:
            self.take_response(message)
            return
        self.record(str(method))
        if "id" not in message:
            self.take_notification(str(method), message.get("params") or {})
            return
        key = json.dumps(message["id"])
        with self.state_lock:
            self.cancels[key] = threading.Event()
        threading.Thread(target=self.answer_and_write, args=(message,), daemon=True).start()

    def answer_and_write(self, message: Json) -> None:
        answer = self.answer(message)
        if answer is not None:
            self.write(answer)

    def take_response(self, message: Json) -> None:
        with self.state_lock:
            waiter = self.waiting.pop(json.dumps(message.get("id")), None)
        if waiter is not None:
            waiter[1].append(message)
            waiter[0].set()

    def take_notification(self, method: str, params: Json) -> None:
        if method == "notifications/cancelled":
            with self.state_lock:
                event = self.cancels.get(json.dumps(params.get("requestId")))
            if event is not None:
                event.set()

    def answer(self, message: Json) -> Json | None:
        """The response to one request, or None when none must be sent."""
        rid = message.get("id")
        method = str(message.get("method"))
        params = message.get("params") or {}
        key = json.dumps(rid)
        with self.state_lock:
            cancel = self.cancels.setdefault(key, threading.Event())
        try:
            if method == "initialize" and self.hang_init:
                return None
            handler = self.handlers().get(method)
            if handler is None:
                raise RpcError(-32601, f"method not found: {method}")
            result = handler(params, cancel)
            if result is None:
                return None
            return {"jsonrpc": "2.0", "id": rid, "result": result}
        except RpcError as exc:
            return _error(rid, exc.code, exc.message)
        finally:
            with self.state_lock:
                self.cancels.pop(key, None)

    # -- methods --------------------------------------------------------------------------

    def handlers(self) -> dict[str, Callable[[Json, threading.Event], Json | None]]:
        empty: Callable[[Json, threading.Event], Json | None] = lambda p, c: {}
        table: dict[str, Callable[[Json, threading.Event], Json | None]] = {
            "initialize": self.initialize,
            "ping": empty,
            "tools/list": lambda p, c: self.page(p, "tools", self.tools()),
            "tools/call": self.call_tool,
            "prompts/list": lambda p, c: self.page(p, "prompts", PROMPTS),
            "prompts/get": self.get_prompt,
            "resources/list": lambda p, c: self.page(p, "resources", RESOURCES),
            "resources/read": self.read_resource,
            "resources/templates/list": lambda p, c: self.page(
                p, "resourceTemplates", TEMPLATES
            ),
            "resources/subscribe": empty,
            "resources/unsubscribe": empty,
            "logging/setLevel": empty,
            "completion/complete": self.complete,
        }
        if self.discover:
            table["server/discover"] = self.discover_result
        return table

    def initialize(self, params: Json, cancel: threading.Event) -> Json:
        asked = params.get("protocolVersion")
        version = asked if asked in SUPPORTED_VERSIONS else LATEST_VERSION
        result: Json = {
            "protocolVersion": version,
            "capabilities": capabilities(),
            "serverInfo": {"name": "fixture", "version": "1.0"},
        }
        if os.environ.get("FIXTURE_INSTRUCTIONS"):
            result["instructions"] = os.environ["FIXTURE_INSTRUCTIONS"]
        return result

    def discover_result(self, params: Json, cancel: threading.Event) -> Json:
        return {
            "supportedVersions": ["2026-07-28", *reversed(SUPPORTED_VERSIONS)],
            "capabilities": capabilities(),
            "cacheScope": "public",
            "resultType": "complete",
            "ttlMs": 60000,
            "instructions": "fixture server for lazyd tests",
        }

    def page(self, params: Json, key: str, items: list[Json]) -> Json:
        time.sleep(float(os.environ.get("FIXTURE_LISTING_DELAY_S", "0") or 0))
        start = 0
        cursor = params.get("cursor")
        if cursor is not None:
            try:
                start = int(base64.urlsafe_b64decode(str(cursor).encode()).decode().split(":")[1])
            except (ValueError, IndexError):
                raise RpcError(-32602, f"invalid cursor: {cursor!r}") from None
        if self.page_size <= 0:
            return {key: items[start:]}
        end = start + self.page_size
        result: Json = {key: items[start:end]}
        if end < len(items):
            result["nextCursor"] = base64.urlsafe_b64encode(f"{key}:{end}".encode()).decode()
        return result

    def tools(self) -> list[Json]:
        tools = [dict(t) for t in TOOLS]
        for name in self.extra_tools:
            tools.append(_tool(name, f"echo, named {name}", text="string"))
        if _env_flag("FIXTURE_ECHO_META"):
            tools.append(_tool("meta", "the _meta this call carried, as JSON"))
        return tools

    def call_tool(self, params: Json, cancel: threading.Event) -> Json | None:
        name = params.get("name")
        args = params.get("arguments") or {}
        meta = params.get("_meta") or {}
        if name == "echo" or name in self.extra_tools:
            return _text(str(args.get("text", "")))
        if name == "pid":
            return _text(str(os.getpid()))
        if name == "grow":
            return _text(f"{self.grow(int(args.get('mib', 1)))} MiB")
        if name == "meta" and _env_flag("FIXTURE_ECHO_META"):
            return _text(json.dumps(meta, sort_keys=True))
        if name == "sleep":
            return self.sleep(float(args.get("seconds", 1)), meta.get("progressToken"), cancel)
        if name == "crash":
            sys.stderr.write(f"fixture: crashing with status {args.get('code', 1)}\n")
            sys.stderr.flush()
            os._exit(int(args.get("code", 1)))
        if name == "counter":
            with self.state_lock:
                self.counter += 1
                return _text(str(self.counter))
        if name == "env":
            var = str(args.get("name", ""))
            if var not in os.environ:
                return {**_text(f"{var} is not set"), "isError": True}
            return _text(os.environ[var])
        if name == "sample":
            return self.client_text(
                "sampling/createMessage",
                {
                    "messages": [
                        {
                            "role": "user",
                            "content": {"type": "text", "text": str(args.get("prompt", "hi"))},
                        }
                    ],
                    "maxTokens": 100,
                },
            )
        if name == "roots":
            return self.client_json("roots/list", {})
        if name == "elicit":
            return self.client_json(
                "elicitation/create",
                {
                    "message": str(args.get("message", "Please answer")),
                    "requestedSchema": {
                        "type": "object",
                        "properties": {"answer": {"type": "string"}},
                    },
                },
            )
        if name == "log":
            level = str(args.get("level", "info"))
            self.notify(
                "notifications/message",
                {"level": level, "logger": "fixture", "data": str(args.get("text", "hello"))},
            )
            return _text(f"logged at {level}")
        raise RpcError(-32602, f"unknown tool: {name}")

    def grow(self, mib: int) -> int:
        """Keep `mib` MiB more, every page written so that it is resident; the total kept."""
        block = bytearray(b"\x01") * (mib * 1024 * 1024)
        with self.state_lock:
            self.hoard.append(block)
            return sum(len(b) for b in self.hoard) // (1024 * 1024)

    def leak(self, mib_per_s: float) -> None:
        """FIXTURE_LEAK_MIB_S: grow by `mib_per_s` MiB every second, forever (a thread)."""
        step = 0.1
        carry = 0.0
        while True:
            time.sleep(step)
            carry += mib_per_s * step
            if carry >= 1:
                self.grow(int(carry))
                carry -= int(carry)

    def sleep(self, seconds: float, token: Any, cancel: threading.Event) -> Json | None:
        deadline = time.monotonic() + seconds
        step = 0
        while (left := deadline - time.monotonic()) > 0:
            if cancel.wait(min(PROGRESS_INTERVAL_S, left)):
                return None  # cancelled: the spec says to send no response
            step += 1
            if token is not None:
                self.notify(
                    "notifications/progress",
                    {"progressToken": token, "progress": step, "message": f"slept {step}"},
                )
        return _text(f"slept {seconds}")

    def client_text(self, method: str, params: Json) -> Json:
        reply = self.ask_client(method, params)
        if "error" in reply:
            return _text(str(reply["error"].get("message", "error")))
        content = reply.get("result", {}).get("content", {})
        return _text(str(content.get("text", "")) if isinstance(content, dict) else "")

    def client_json(self, method: str, params: Json) -> Json:
        reply = self.ask_client(method, params)
        if "error" in reply:
            return {**_text(str(reply["error"].get("message", "error"))), "isError": True}
        return _text(json.dumps(reply.get("result"), sort_keys=True))

    def get_prompt(self, params: Json, cancel: threading.Event) -> Json:
        if params.get("name") != "greet":
            raise RpcError(-32602, f"unknown prompt: {params.get('name')}")
        who = (params.get("arguments") or {}).get("name", "world")
        return {
            "description": "A greeting",
            "messages": [{"role": "user", "content": {"type": "text", "text": f"Hello, {who}!"}}],
        }

    def read_resource(self, params: Json, cancel: threading.Event) -> Json:
        uri = str(params.get("uri", ""))
        for resource in RESOURCES:
            if resource["uri"] == uri:
                text = RESOURCE_TEXT[uri]
                break
        else:
            if not uri.startswith(ITEM_PREFIX) or not uri[len(ITEM_PREFIX) :]:
                raise RpcError(-32002, f"resource not found: {uri}")
            text = f"item {uri[len(ITEM_PREFIX):]}"
        return {"contents": [{"uri": uri, "mimeType": "text/plain", "text": text}]}

    def complete(self, params: Json, cancel: threading.Event) -> Json:
        prefix = str((params.get("argument") or {}).get("value", ""))
        values = [v for v in COMPLETIONS if v.startswith(prefix)]
        return {"completion": {"values": values, "total": len(values), "hasMore": False}}


def _error(rid: Any, code: int, message: str) -> Json:
    return {"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}}


def _text(text: str) -> Json:
    return {"content": [{"type": "text", "text": text}]}


def _tool(tool_name: str, description: str, /, **props: str) -> Json:
    return {
        "name": tool_name,
        "description": description,
        "inputSchema": {
            "type": "object",
            "properties": {k: {"type": v} for k, v in props.items()},
        },
    }


TOOLS = [
    _tool("echo", "Return the text argument", text="string"),
    _tool("pid", "Return the server's process id"),
    _tool("sleep", "Sleep, with progress notifications", seconds="number"),
    _tool("crash", "Exit at once with the given status", code="integer"),
    _tool("counter", "Increment an in-memory counter and return it"),
    _tool("env", "Return an environment variable of the server", name="string"),
    _tool("sample", "Ask the client for a sampling completion", prompt="string"),
    _tool("roots", "Ask the client for its roots"),
    _tool("elicit", "Ask the client to elicit input", message="string"),
    _tool("log", "Send a log message notification", level="string", text="string"),
]
PROMPTS = [
    {
        "name": "greet",
        "description": "Greet someone",
        "arguments": [{"name": "name", "description": "who to greet", "required": False}],
    }
]
RESOURCE_TEXT = {"fixture://static/alpha": "alpha", "fixture://static/beta": "beta"}
RESOURCES = [
    {"uri": uri, "name": uri.rsplit("/", 1)[1], "mimeType": "text/plain"} for uri in RESOURCE_TEXT
]
ITEM_PREFIX = "fixture://item/"
TEMPLATES = [{"uriTemplate": ITEM_PREFIX + "{id}", "name": "item", "mimeType": "text/plain"}]
COMPLETIONS = ["alice", "bob", "carol"]


def start_grandchildren(count: int) -> None:
    import subprocess

    for i in range(count):
        # The first one ignores SIGTERM: only a SIGKILL to the whole group can end it.
        ignore = "signal.signal(signal.SIGTERM, signal.SIG_IGN); " if i == 0 else ""
        code = f"import signal, time; {ignore}time.sleep(1000)"
        subprocess.Popen(
            [sys.executable, "-c", code],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )


def flood_stderr(mib: int) -> None:
    total = mib * 1024 * 1024
    block = bytearray()
    written = 0
    n = 0
    while written < total:
        while len(block) < 1024 * 1024:
            block += b"%09d " % n + FLOOD_LINE + b"\n"
            n += 1
        sys.stderr.buffer.write(block)
        written += len(block)
        block.clear()
    sys.stderr.buffer.write(b"fixture: stderr flood done\n")
    sys.stderr.buffer.flush()


def main() -> None:
    crash = os.environ.get("FIXTURE_CRASH_ON_START", "")
    if crash:
        sys.stderr.write(f"fixture: crashing on start with status {crash}\n")
        sys.stderr.flush()
        os._exit(int(crash))
    if _env_flag("FIXTURE_IGNORE_TERM"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    children = int(os.environ.get("FIXTURE_GRANDCHILDREN", "0") or 0)
    if children:
        start_grandchildren(children)
    flood = int(os.environ.get("FIXTURE_STDERR_FLOOD_MB", "0") or 0)
    if flood:
        flood_stderr(flood)
    delay = float(os.environ.get("FIXTURE_START_DELAY_S", "0") or 0)
    if delay > 0:
        time.sleep(delay)
    server = Server()
    leak = float(os.environ.get("FIXTURE_LEAK_MIB_S", "0") or 0)
    if leak > 0:
        threading.Thread(target=server.leak, args=(leak,), daemon=True).start()
    stdin = sys.stdin.buffer
    while line := stdin.readline():
        if line.strip():
            server.handle_line(line)
    if _env_flag("FIXTURE_IGNORE_EOF"):
        threading.Event().wait()
    # Under the output lock, so no response is cut in the middle of its line.
    with server.out_lock:
        sys.stdout.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
