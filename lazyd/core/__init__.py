"""The core: every decision lazyd makes, as plain objects fed events and the time. No I/O.

May import the standard library's pure modules (the allowlist in tests/unit/test_architecture.py),
the rest of the core, and lazyd.errors, lazyd.config.durations and lazyd.config.envnames. Rooms: relay/ (the
handshake-era relay), eras/ (protocol eras and the stateless relay), lifecycle/, hub/, sharing/.
"""
