"""What a server's process tree runs: a node script's package, a real tree read from /proc, and
the record kept across daemons."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from lazyd.daemon.sessions.running import RunsRecord, look, package_name


def test_a_node_script_is_named_by_the_nearest_package_json_that_has_a_name(tmp_path: Path) -> None:
    root = tmp_path / "lib" / "task-master"
    (root / "dist").mkdir(parents=True)
    (root / "package.json").write_text(json.dumps({"name": "task-master-ai", "version": "0.43.1"}))
    (root / "dist" / "package.json").write_text(json.dumps({"type": "module"}))  # no name: looked past
    (root / "dist" / "mcp-server.js").write_text("")
    assert package_name(str(root / "dist" / "mcp-server.js")) == "task-master-ai"
    # Not a node script (a Python server's directory may hold some project's package.json): None.
    (root / "dist" / "server.py").write_text("")
    assert package_name(str(root / "dist" / "server.py")) is None
    assert package_name(str(tmp_path / "nowhere" / "x.js")) is None


def test_a_wrapper_that_forks_is_looked_through_to_what_it_runs(tmp_path: Path) -> None:
    script = tmp_path / "acme_server.py"
    script.write_text("import time\ntime.sleep(30)\n")
    wrapper = tmp_path / "wrap.sh"
    wrapper.write_text(f"#!/bin/sh\n'{sys.executable}' '{script}'\n")  # no exec: a child of the shell
    wrapper.chmod(0o755)
    proc = subprocess.Popen([str(wrapper)], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while "acme_server" not in look(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert look(proc.pid)[0] == "acme_server"  # the shell names nothing, its child does
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the shell and its child: the group it leads
        proc.wait()


def test_the_record_is_kept_for_the_next_daemon_and_a_broken_file_starts_anew(tmp_path: Path) -> None:
    record = RunsRecord(tmp_path)
    assert record.names("d1") is None
    record.record("d1", ["@modelcontextprotocol/server-everything", "node"])
    assert RunsRecord(tmp_path).names("d1") == ["@modelcontextprotocol/server-everything", "node"]
    (tmp_path / "runs.json").write_text("{not json")
    assert RunsRecord(tmp_path).names("d1") is None
