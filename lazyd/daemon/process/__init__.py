"""One real server process: its command and environment, spawning it, its stdin, its stdout cut into
lines, its stderr log, its process tree and the stop ladder. Knows nothing of MCP.
"""
