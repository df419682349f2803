"""The protocol eras: which one a server speaks, which one a client gets, and the stateless era's
own relay (discover, the stateless cache, `subscriptions/listen`).

Pure like the rest of the core: no I/O, no clock or randomness but what it is given.
"""
