"""One supervised server as the daemon runs it: the supervisor (where trio meets the relay core and the
lifecycle), its configuration, its status row, its lanes per era, its outbox to clients and its cache.
"""
