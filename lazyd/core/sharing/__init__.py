"""Identity and sharing: when two sessions may share one server process, and which one a session joins.

The environment rules, the per-run variables learned from what is seen, the known servers and
the client profiles all feed one decision here. Pure: the daemon (lazyd/daemon/sessions/) feeds it.
"""
