"""What Continue reads from a YAML file: the `yaml` package it parses config.yaml with
(tests/servers/node_modules/yaml), run by node, several documents per run."""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

from tests.conftest import SERVERS

NODE_TIMEOUT_S = 60.0  # a run takes ~100 ms; reached only when broken
_SCRIPT = """const Y = require('yaml'); let s = '';
process.stdin.on('data', d => s += d).on('end', () => process.stdout.write(JSON.stringify(
  JSON.parse(s).map(t => { try { return {ok: Y.parse(t)}; } catch (e) { return {error: String(e.message)}; } }))));"""


def continues_readings(texts: list[str]) -> list[Any]:
    """Each document as Continue's YAML library reads it (its JSON form); AssertionError naming
    the library's message for one it refuses."""
    node = shutil.which("node")
    assert node, "node is missing"
    assert (SERVERS / "node_modules" / "yaml").exists(), "run `npm ci --prefix tests/servers`"
    done = subprocess.run([node, "-e", _SCRIPT], input=json.dumps(texts), capture_output=True, text=True,
                          timeout=NODE_TIMEOUT_S, env={"NODE_PATH": str(SERVERS / "node_modules"), "PATH": "/usr/bin:/bin"})  # fmt: skip
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    for text, result in zip(texts, results):
        assert "ok" in result, f"Continue's YAML library refuses {text!r}: {result['error']}"
    return [result["ok"] for result in results]


def continues_reading(text: str) -> Any:
    (value,) = continues_readings([text])
    return value
