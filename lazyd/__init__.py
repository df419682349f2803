"""lazyd: a per-user daemon that runs MCP servers lazily, shares them across clients and keeps them
supervised. The floors, bottom up, are in docs/architecture.md: the base modules here (errors,
wire, frames, paths, private files, /proc), config/, core/ (pure decisions), daemon/ (trio, the
processes and sockets), ctl/ (lazyctl). The shim is a separate package (shim/, installed as
lazyd_shim) that imports only the base floor.
"""
