"""`lazyctl wrap` and `unwrap`: rewriting each AI client's config file so that its servers run through
lazyd-shim, byte-safely (only the spans it changes), and undoing it.
"""
