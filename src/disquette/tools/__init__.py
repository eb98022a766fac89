"""Developer tools that run real disquette processes (``make run``'s local cluster)."""
