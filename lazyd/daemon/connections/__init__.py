"""The daemon's listener and who gets in: the peer check, the descriptor budget, refusals, and what
a connection's hello says about its client. Hands each accepted session to lazyd/daemon/sessions/.
"""
