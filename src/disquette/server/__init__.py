"""The asyncio shell around the core: sockets, timers, signals, logs, files."""
