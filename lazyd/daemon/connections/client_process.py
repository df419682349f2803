"""Which client a shim session comes from, as far as the daemon can tell at its hello.

The identity of a session's server is decided at the hello, before the client's `initialize` names
it (clientInfo.name arrives with the first line, after the process is chosen). What the daemon can
see then is the shim's parent: the client that spawned it (`opencode`, `codex`, `claude`: each of
them runs its servers directly). A shell or a wrapper in between (`sh -c`, `env`, `timeout`,
`npx lazyd-shim`) is skipped, so the name is the program that decided to run the server.

The name is only a first guess at the client: the client is its `clientInfo.name`, which arrives
with its `initialize` (lazyd/daemon/sessions/learned_env.py files everything under that name, and
guesses it at a hello from the process name it was last seen with). A process name may say nothing:
Copilot CLI's native binary names itself `MainThread`, and so may any program.
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


def client_process_name(shim_pid: int) -> str:
    """The name of the program that started shim `shim_pid`, "" when it cannot be told."""
    return client_process(shim_pid)[0]


def environment_names(pid: int | None) -> frozenset[str] | None:
    """The names of the variables `pid` was started with (never their values), None if unreadable."""
    items = procfs.read_environ(pid) if pid is not None else None
    if items is None:
        return None
    return frozenset(item.split(b"=", 1)[0].decode("utf-8", "surrogateescape") for item in items if b"=" in item)
