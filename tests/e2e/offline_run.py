"""Running a real client CLI offline, in a private network namespace with only loopback, so that it
can make no outside connection (lazyd's Unix sockets are files and reach across).

As a script, run in a fresh namespace (`unshare -n`, what `offline` builds):

    unshare -n python3 offline_run.py [--model-log FILE] -- COMMAND ARGS...

brings loopback up and runs COMMAND, exiting with its status. With `--model-log FILE`, an
OpenAI-style model endpoint listens on MODEL_URL first and answers every request with 400 (a
refusal a client does not retry: it ends its turn), appending each request to FILE: what a client
sends its model (its tool list), without any model. REFUSING_URL is a loopback address where
nothing listens, for a client whose model call should fail at once.

`Refuse` is the endpoint's handler, for a test that serves it in its own process.
"""

from __future__ import annotations

import functools
import http.server
import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path

MODEL_PORT = 8711
MODEL_URL = f"http://127.0.0.1:{MODEL_PORT}/v1"  # inside the namespace, with --model-log
REFUSING_URL = "http://127.0.0.1:9/v1"  # nothing listens there: a connection is refused at once
REFUSAL = json.dumps({"error": {"message": "offline test endpoint: no model here",
                                "type": "invalid_request_error", "code": "offline"}}).encode()
PROBE_TIMEOUT_S = 30.0


class Refuse(http.server.BaseHTTPRequestHandler):
    """A model endpoint that refuses every request at once; logs each one to `log_path`, if set."""

    log_path: str | None = None

    def _answer(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        if self.log_path is not None:
            with open(self.log_path, "ab") as log:
                log.write(f"{self.command} {self.path} ".encode() + body + b"\n")
        self.send_response(400)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(REFUSAL)))
        self.end_headers()
        self.wfile.write(REFUSAL)

    do_GET = do_POST = _answer

    def log_message(self, format: str, *args: object) -> None:
        pass


@functools.cache
def unshare_prefix() -> list[str] | None:
    """`unshare -n` (as root) or `unshare -rn` (a user namespace), whichever works here."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return None
    for prefix in (["unshare", "-n"], ["unshare", "-rn"]):
        probe = subprocess.run([*prefix, "ip", "link", "set", "lo", "up"], capture_output=True,
                               timeout=PROBE_TIMEOUT_S)
        if probe.returncode == 0:
            return prefix
    return None


def offline(argv: list[str], model_log: Path | None = None) -> list[str]:
    """`argv` run in a new network namespace; with `model_log`, beside the refusing model endpoint
    at MODEL_URL, which logs each request there."""
    prefix = unshare_prefix()
    if prefix is None:
        import pytest  # only the tests' side needs it, not the script in the namespace

        pytest.fail("no private network namespace here: unshare -n needs root or user namespaces")
    options = ["--model-log", str(model_log)] if model_log is not None else []
    return [*prefix, sys.executable, __file__, *options, "--", *argv]


def main(argv: list[str]) -> int:
    if "--" not in argv:
        print("usage: offline_run.py [--model-log FILE] -- COMMAND ARGS...", file=sys.stderr)
        return 2
    split = argv.index("--")
    options, command = argv[:split], argv[split + 1:]
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    if options[:1] == ["--model-log"]:
        Refuse.log_path = options[1]
        server = http.server.ThreadingHTTPServer(("127.0.0.1", MODEL_PORT), Refuse)
        threading.Thread(target=server.serve_forever, daemon=True).start()  # listening before the client starts
    return subprocess.run(command).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
