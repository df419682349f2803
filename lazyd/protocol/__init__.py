"""What goes over lazyd's sockets and pipes: the frames, their msgpack wire, and JSON-RPC lines.

Standard library and msgpack only: the shim imports these at its floor.
"""
