"""The user's config file: reading it, the values as users type them, and the model lazyd holds.

May import the base floor and the core (the identity and sharing vocabulary a server entry is
checked against); TOML is read by the standard library's tomllib. Nothing here runs a process or
opens a socket.
"""
