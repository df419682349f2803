"""Control operations (lazyctl over the daemon socket): status, wake, sleep, check and their progress.
"""
