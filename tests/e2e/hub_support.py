"""Helpers for end-to-end tests of the hub: a session on it, the text of a tool result.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client

from tests.conftest import UserEnv, shim_command


@asynccontextmanager
async def hub_session(user: UserEnv, *shim_args: str, **client_kwargs: Any) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(command=shim_command(), args=["--hub", *shim_args], env=user.env)
    with open(user.root / "shim.stderr", "a") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write, **client_kwargs) as session:
                await session.initialize()
                yield session


def texts(result: types.CallToolResult) -> list[str]:
    return [c.text for c in result.content if isinstance(c, types.TextContent)]
