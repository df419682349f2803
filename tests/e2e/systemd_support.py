"""Helpers for end-to-end tests of a daemon under systemd-style activation: lazyctl, a tool's
text, skipping when a tool is missing.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from typing import Any

import pytest
from mcp.types import TextContent


STEP_TIMEOUT_S = 20.0  # bound on any one step; reached only when something is broken


def lazyctl(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lazyd.ctl.main", *args], env=env, capture_output=True,
                          text=True, timeout=STEP_TIMEOUT_S)


def require_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        print(f"skipping: {name} is not installed")
        pytest.skip(f"{name} is not installed")
    return path


async def tool_text(session: Any, name: str, arguments: dict[str, Any]) -> str:
    """The text of a tool result's first content block (the fixture's tools all answer text)."""
    result = await session.call_tool(name, arguments)
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text
