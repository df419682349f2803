"""The lifecycle of one supervised server: its states, its rules, its timing, and who uses it.

Pure: fed events and the time, it returns actions; the daemon's runtime (lazyd/daemon/runtime/)
carries them out.
"""
