"""Client commands: argument parsing, the call into the core, the reply's shape.

One module per family (jobs, queues, cluster, server, introspection); each
command is registered in :mod:`disquette.commands.table` with Disque's arity
and flags, and :mod:`disquette.commands.state` runs them in Disque's order.
"""
