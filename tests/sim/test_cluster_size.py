"""bench/cluster_size.py's measurements hold what they claim, on small clusters.

The benchmark forms clusters in the simulator (virtual time: deterministic, so these
are facts of the protocol, not timings of the machine) and measures what grows with
their size. Here, on 10 and 30 nodes: the mesh forms from one node's MEETs; a crashed
node is flagged FAIL everywhere, never before the node timeout; one ADDJOB REPLICATE
3 costs its two copies and their confirmations whatever the size, and one ACKJOB's
garbage collection the same on both sizes; the traffic at rest grows with the size.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "cluster_size.py"
TIMEOUT = 2000


def bench():
    spec = importlib.util.spec_from_file_location("cluster_size", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_what_grows_with_the_cluster_and_what_does_not():
    cluster_size = bench()
    small, large = (cluster_size.measure(n, 3, TIMEOUT, seed=7) for n in (10, 30))
    for row in (small, large):
        assert row["detect_ms"] >= TIMEOUT
        assert row["addjob_msgs"] == 4  # two REPLJOBs, two GOTJOBs
        assert row["memory_per_node"] > 0
    assert small["ack_gc_msgs"] == large["ack_gc_msgs"] > 0
    assert large["rest_msgs_s_node"] > small["rest_msgs_s_node"]
    text = cluster_size.table_text([small, large])
    assert text.count("\n") == 3 and "| 30 |" in text
