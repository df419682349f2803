"""Run one command offline: in the private network namespace this process was started in
(`unshare -n`), with only the loopback interface, brought up here.

With `--model-log FILE`, an OpenAI-style model endpoint listens on 127.0.0.1:MODEL_PORT first and
answers every request with 400 (a refusal a client does not retry), appending each request body to
FILE: what a client sends its model (its tool list) without any model. The command's exit status is
this process's.

    unshare -n python3 offline_runner.py [--model-log FILE] -- COMMAND ARGS...
"""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading

MODEL_PORT = 8711
REFUSAL = json.dumps({"error": {"message": "offline test endpoint: no model here",
                                "type": "invalid_request_error"}}).encode()


def model_endpoint(log_path: str) -> http.server.HTTPServer:
    class Refuse(http.server.BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else b""
            with open(log_path, "ab") as log:
                log.write(f"{self.command} {self.path} ".encode() + body + b"\n")
            self.send_response(400)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(REFUSAL)))
            self.end_headers()
            self.wfile.write(REFUSAL)

        do_GET = do_POST = _answer

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", MODEL_PORT), Refuse)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main(argv: list[str]) -> int:
    if "--" not in argv:
        print("usage: offline_runner.py [--model-log FILE] -- COMMAND ARGS...", file=sys.stderr)
        return 2
    split = argv.index("--")
    options, command = argv[:split], argv[split + 1 :]
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    if options[:1] == ["--model-log"]:
        model_endpoint(options[1])  # bound and listening before the client starts
    return subprocess.run(command).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
