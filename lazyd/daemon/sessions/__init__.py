"""Which server a session belongs to: the registry of identities, named servers and private instances,
the sharing gate, and what is learned about clients' environments across restarts.
"""
