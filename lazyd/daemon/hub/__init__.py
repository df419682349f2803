"""The hub as the daemon serves it: an MCP server over every server it knows, and its calls into them
(the pure side is lazyd/core/hub/).
"""
