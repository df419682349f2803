"""The hand-off region: the one contract between a waiting shim and the daemon serving its client.

Both sides import this room (the shim at its stdlib + msgpack floor), so it imports only the
standard library and the base floor.
"""
