"""What a node holds besides the core's jobs, and the pipeline every request goes through.

:class:`~disquette.state.server.ServerState` is Disque's ``server`` struct: the
configuration, the command table it is given, the connected clients, and the records
the pipeline keeps (statistics, the slow log, the latency monitor, ACL LOG); the
pipeline applies Disque's processing order, the permissions of restricted users
(:mod:`~disquette.state.access`) and the statistics around each command.

The commands, the observers (INFO, ``/metrics``, the dashboard's views), the HTTP
port and both shells (the asyncio server and the simulator) read it; it imports none
of them, so that commands and observers each depend on the state and never on each
other's internals (docs/architecture.md).
"""
