"""Upgrades and crashes that keep servers and sessions: the hand-over to a successor daemon, what it
inherits, and the systemd fd store that keeps server pipes across a crash.

Each part writes and rebuilds its own state (its to_state/from_state); this room carries the
envelope between the two daemons and decides what to inherit.
"""
