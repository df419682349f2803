"""lazyctl: the operator's command line. Talks to the daemon only over its socket
(lazyd/ctl/client.py), never by importing it; wrap/ rewrites client configs.
"""
