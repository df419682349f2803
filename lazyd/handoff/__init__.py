"""The hand-off region: the one contract between a waiting shim and the daemon serving its client.

Both sides import this room (the shim at its stdlib + msgpack floor), so it imports only the standard
library and the base floor. The region's layout is versioned here; the daemon's side of the session
is lazyd/daemon/handoff/, the shim's is shim/handoff.py and shim/recover.py.
"""
