"""Which client a shim session comes from, as far as the daemon can tell at its hello.

The identity of a session's server is decided at the hello, before `initialize` names the client.
What the daemon sees then is the shim's parent, the client that spawned it, skipping a shell or
wrapper in between (`sh -c`, `env`, `timeout`, `npx lazyd-shim`). It is only a first guess
(lazyd/daemon/sessions/learned_env.py files everything under `clientInfo.name`): a process name may
say nothing (`MainThread`).
"""

from __future__ import annotations

from lazyd.host import procfs

# Programs that run the shim on a client's behalf without being the client.
_WRAPPERS = frozenset({"sh", "bash", "dash", "zsh", "fish", "ksh", "mksh", "busybox", "env", "timeout",
                       "nice", "nohup", "setsid", "stdbuf", "sudo", "doas", "npx", "npm", "npm exec",
                       "pnpm", "yarn", "uvx", "uv", "pipx", "direnv"})
MAX_HOPS = 4  # a client is at most a few wrappers away; beyond that the name says nothing


def client_process(shim_pid: int) -> tuple[str, int | None]:
    """The name and pid of the program that started shim `shim_pid`; ("", None) when it cannot be told."""
    pid = shim_pid
    for _ in range(MAX_HOPS):
        stat = procfs.read_stat(pid)
        if stat is None or stat.ppid <= 1:
            return "", None
        pid = stat.ppid
        name = procfs.read_comm(pid)
        if not name:
            return "", None
        if name not in _WRAPPERS:
            return name, pid
    return "", None


def environment_names(pid: int | None) -> frozenset[str] | None:
    """The names of the variables `pid` was started with (never their values), None if unreadable."""
    items = procfs.read_environ(pid) if pid is not None else None
    if items is None:
        return None
    return frozenset(item.split(b"=", 1)[0].decode("utf-8", "surrogateescape") for item in items if b"=" in item)
