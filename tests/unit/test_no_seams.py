"""The installed package reads no test seam and no variable that names a program to run.

A repository's MCP config can set any variable for the shim it starts, and the daemon every client
shares was started by one of those shims: a variable the product reads is one any repository can
set. Tests reach their seams through the suite (tests/e2e/seams/sitecustomize.py, fixtures).
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FORBIDDEN = ("LAZYD_TEST_", "LAZYD_DAEMON_ARGV")


def test_no_module_of_the_package_names_a_test_seam_or_a_daemon_command_variable() -> None:
    found = [f"{path.relative_to(REPO)}:{number}: {line.strip()}"
             for package in ("lazyd", "shim") for path in sorted((REPO / package).rglob("*"))
             if path.is_file() and path.suffix in (".py", ".sh", "") and "__pycache__" not in path.parts
             for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
             if any(name in line for name in FORBIDDEN)]
    assert found == []
