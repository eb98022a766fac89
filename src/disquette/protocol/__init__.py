"""RESP2: reading client requests and encoding replies, with Disque's limits."""
