"""Mixed releases in the simulator: rolling upgrades over many seeds (property 24).

``DISQUETTE_SIM_UPGRADE`` (default 10, for CI's time; hunt with more) seeds of each
upgrade mode: five nodes of the previous release's bus (protocol 1: no version, a
strict decoder) restarted one by one as this release, and five of this release
restarted as the next one rehearsed (protocol 3, a feature more, probing its older
peers with a type and a field no release knows). Every node reads frames with its
own release's codec: a frame one could not read fails the run, as does a node wrong
about what a linked peer speaks, and the rolling runs' own properties hold (no
acknowledged job lost). A last test shows the check bites: a protocol 2 message
sent to a node of protocol 1.
"""

from __future__ import annotations

import os

from disquette.core import messages as msg
from disquette.sim.batch import run_many
from disquette.sim.runner import Simulation, config_for_seed
from tests.sim.test_simulation import failures

UPGRADE = int(os.environ.get("DISQUETTE_SIM_UPGRADE", "10"))
FIRST = int(os.environ.get("DISQUETTE_SIM_FIRST", "0"))


def test_rolling_upgrades_from_the_previous_release():
    results = run_many(range(FIRST, FIRST + UPGRADE), "upgrade")
    assert all(r.ok for r in results), failures(results)
    assert sum(r.stats["lost_unexcused"] for r in results) == 0
    assert sum(r.stats["crashes"] for r in results) >= UPGRADE  # (restarts did happen)


def test_rolling_upgrades_to_the_next_release_rehearsed():
    results = run_many(range(FIRST, FIRST + UPGRADE), "upgrade-next")
    assert all(r.ok for r in results), failures(results)
    assert sum(r.stats["lost_unexcused"] for r in results) == 0
    # The older nodes still running at the end skipped the newer ones' probes.
    assert sum(r.stats["bus_skipped"] + r.stats["bus_trimmed"] for r in results) > 0


def test_a_frame_a_node_cannot_read_is_a_violation():
    sim = Simulation(config_for_seed(1, "upgrade"))
    assert sim.start_cluster()
    old, other = sim.processes[0], sim.processes[1]
    assert old.node is not None and other.node is not None
    assert old.node.dialect.speech.version == 1  # every node runs the previous release
    other.node.bus_send(old.node_id, other.node.dialect.version_message())
    sim.loop.run_until(sim.loop.now + 100)
    assert sim.network.unreadable
    assert f"unknown message type {msg.VERSION}" in sim.network.unreadable[0]
