"""lazyd: a per-user daemon that runs MCP servers lazily, shares them across clients and keeps them
supervised. The modules here are its base floor, shared by the daemon, lazyctl and the shim (all
but lazyd/host/paths.py, which needs platformdirs): the one exception tree, durations and names as users
type them, the wire and its typed frames, the socket's path, every file location, private files,
/proc and the fallback journal.

The floors, bottom up, are in docs/architecture.md: these base modules, handoff/ (the hand-off
region), core/ (pure decisions), config/ (the user's file, checked against the core's vocabulary),
daemon/ (trio, the processes and sockets), ctl/ (lazyctl). The shim is a separate package (shim/,
installed as lazyd_shim) that imports only the base floor and the hand-off region.
"""
