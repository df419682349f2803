"""A recording tee for a stdio MCP connection: `stdio_recorder.py LOG COMMAND ARGS...` runs the
command with this process's stdin and stdout relayed line by line, and appends every line of both
directions to LOG as JSON (`{"to": "server" | "client", "line": ...}`), so a test can read what a
real client sent and what it was answered. Standard library only."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from typing import IO


def main() -> int:
    log_path, argv = sys.argv[1], sys.argv[2:]
    lock = threading.Lock()
    log = open(log_path, "a", encoding="utf-8")

    def record(to: str, line: bytes) -> None:
        with lock:
            log.write(json.dumps({"to": to, "line": line.decode("utf-8", "replace")}) + "\n")
            log.flush()

    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None

    def answers(stdout: IO[bytes]) -> None:
        for line in stdout:
            record("client", line)
            sys.stdout.buffer.write(line)
            sys.stdout.buffer.flush()

    reader = threading.Thread(target=answers, args=(proc.stdout,), daemon=True)
    reader.start()
    try:
        for line in sys.stdin.buffer:
            record("server", line)
            proc.stdin.write(line)
            proc.stdin.flush()
    except BrokenPipeError:
        pass
    try:
        proc.stdin.close()
    except BrokenPipeError:
        pass
    code = proc.wait()
    reader.join(5)
    return code


if __name__ == "__main__":
    sys.exit(main())
