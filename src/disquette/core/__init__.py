"""The sans-I/O core: jobs, queues, timers and the node that wires them.

Nothing in here touches a socket, a file, the wall clock or the global random
generator. The shells (the asyncio server, the simulator, the tests) pass in a
clock, random sources and the objects through which the core talks outward.
"""
