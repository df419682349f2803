"""lazyd: a per-user daemon that runs MCP servers lazily, shares them across clients and keeps them
supervised.

Its floors, bottom up (docs/architecture.md): errors.py, protocol/ and host/ (shared by the daemon,
lazyctl and the shim), handoff/, core/ (pure decisions), config/, daemon/ (trio) and ctl/
(lazyctl); the shim is a package of its own (shim/, installed as lazyd_shim).
"""
