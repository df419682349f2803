"""Hand-off sessions: the daemon reads and writes the client's own pipes, keeping in the shared region
(lazyd/handoff/) what the waiting shim needs should the daemon be lost.
"""
