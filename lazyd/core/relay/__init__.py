"""The relay core of one server instance in the handshake era: events in, actions out, no I/O.

The core's parts (client messages, server messages, start-up, routing of ids) are composed by
RelayCore in core.py. May import the rest of lazyd/core and the floor below it, nothing with I/O.
"""
