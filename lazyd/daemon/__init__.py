"""The daemon: the trio shell around the core. Sockets, processes, signals, files, systemd.

May import everything below it (base, paths, config, core), trio and sdnotify; never lazyctl or
the shim. Rooms: connections/, sessions/, runtime/, process/, handoff/, upgrade/, hub/, control/;
what is daemon-wide (main, start-up, logging, notify, the runtime dir) sits here.
"""
