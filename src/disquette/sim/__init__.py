"""The deterministic simulator: many node cores in one process, on virtual time.

The simulator is the second shell around the sans-I/O core (the server is the
first). It runs N nodes with their real command pipeline on one virtual clock,
connects them through a virtual network that delays, drops, duplicates,
reorders and partitions messages, crashes and restarts node processes, and
drives them with simulated producers and consumers — all from one seed, so a
seed replays the same history exactly. At the end of each run it checks the
properties a Disque cluster promises (see :mod:`disquette.sim.properties`).

Modules, one per concept:

* :mod:`~disquette.sim.loop` -- virtual time and the event queue;
* :mod:`~disquette.sim.trace` -- the event log: digest and recent events;
* :mod:`~disquette.sim.network` -- bus links, latency and network faults;
* :mod:`~disquette.sim.process` -- a node process: core, pipeline, timers, disk;
* :mod:`~disquette.sim.clients` -- producers and consumers;
* :mod:`~disquette.sim.history` -- what clients saw and crashes destroyed;
* :mod:`~disquette.sim.faults` -- fault plans and schedules;
* :mod:`~disquette.sim.properties` -- the checks;
* :mod:`~disquette.sim.runner` -- one run, from a seed to a :class:`Result`;
* :mod:`~disquette.sim.batch` -- many seeds in worker processes.

Replay one seed with ``python -m disquette.sim --seed N [--nodes 5] [--verbose]``.
"""

from disquette.sim.runner import Result, SimConfig, Simulation, config_for_seed, run_seed

__all__ = ["Result", "SimConfig", "Simulation", "config_for_seed", "run_seed"]
