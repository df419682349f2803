"""The machine lazyd runs on: /proc, private files, the socket's path, the user's directories,
the daemon's clean environment and the fallback journal.

Standard library only, except paths.py (platformdirs): the shim imports the rest at its floor.
"""
