"""The hub's pure side: its catalog of tools, its meta-tools, its routing of ids and its handshake.

The daemon's side (the server it serves, the calls it makes) is lazyd/daemon/hub/.
"""
