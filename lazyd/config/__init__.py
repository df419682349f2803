"""The user's config file: reading it, the values as users type them, and the model lazyd holds.

May import the base floor, the core (the identity and sharing vocabulary a server entry is checked
against) and tomlkit. Nothing here runs a process or opens a socket.
"""
