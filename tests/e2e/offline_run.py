"""Run a client CLI offline: `unshare -n python3 offline_run.py [--refuse-http PORT] -- ARGV...`
brings up loopback in the fresh network namespace (nothing else is reachable), optionally answers
HTTP on 127.0.0.1:PORT with 400 to every request (a model endpoint that refuses at once, so a
client fails its model call without retrying), and runs ARGV, exiting with its status."""

from __future__ import annotations

import http.server
import subprocess
import sys
import threading


class Refuse(http.server.BaseHTTPRequestHandler):
    """A model endpoint that refuses every request at once: a client then ends its turn."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        body = b'{"error":{"message":"offline test","type":"invalid_request_error","code":"offline"}}'
        self.send_response(400)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST

    def log_message(self, format: str, *args: object) -> None:
        pass


def main() -> int:
    args = sys.argv[1:]
    split = args.index("--")
    options, argv = args[:split], args[split + 1:]
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    if options[:1] == ["--refuse-http"]:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", int(options[1])), Refuse)
        threading.Thread(target=server.serve_forever, daemon=True).start()
    return subprocess.run(argv).returncode


if __name__ == "__main__":
    sys.exit(main())
