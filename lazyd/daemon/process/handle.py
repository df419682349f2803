"""What a `ChildProcess` (lazyd/daemon/process/child.py) needs of the process it owns.

A process this daemon spawned is a `trio.Process`; one a predecessor handed over
(lazyd/daemon/upgrade/inherited.py) is rebuilt from its pid and pipes. Both give the same four
things, so the ladder, the pipes and the exit report work alike.
"""

from __future__ import annotations

from typing import Protocol

import trio


class ProcessHandle(Protocol):
    @property
    def pid(self) -> int: ...

    @property
    def stdin(self) -> trio.abc.SendStream | None: ...

    @property
    def stdout(self) -> trio.abc.ReceiveStream | None: ...

    @property
    def stderr(self) -> trio.abc.ReceiveStream | None: ...

    async def wait(self) -> int | None:
        """Once the leader has exited: reap it; its Popen-style status (None: unknown)."""
