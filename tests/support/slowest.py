"""The slowest tests, measured, so that a parallel run starts their modules first.

pytest-xdist's ``loadscope`` scheduling hands each module's tests (tests/run.sh) to one of its
workers in collection order; with the long modules first (a simulator's seed ranges, a
Spark driver killed, a wheel built), they run side by side from the start and the short
ones fill the end, instead of one long module starting last and running alone.
tests/slowest.txt holds ``seconds node-id`` lines from a measured run; refresh it after a
run that wrote a JUnit report (make test writes .test-logs/main.xml)::

    python -m tests.support.slowest report.xml > tests/slowest.txt

A module none of whose tests is in the file (a new one) runs after the known ones, in
collection order. The file only orders the run: every test runs whatever it says.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

FILE = Path(__file__).resolve().parents[1] / "slowest.txt"
#: Tests shorter than this are left in collection order.
LISTED_FROM_S = 3.0


def load(path: Path = FILE) -> dict[str, float]:
    """node id -> seconds, from ``path`` (empty if it is missing)."""
    if not path.is_file():
        return {}
    known: dict[str, float] = {}
    for line in path.read_text().splitlines():
        seconds, _, node_id = line.partition(" ")
        if node_id and not line.startswith("#"):
            known[node_id] = float(seconds)
    return known


def from_junit(report: Path) -> list[tuple[float, str]]:
    """(seconds, node id) of each test of a JUnit report at least LISTED_FROM_S long."""
    found: list[tuple[float, str]] = []
    for case in ET.parse(report).iter("testcase"):
        module, name = case.get("classname", ""), case.get("name", "")
        seconds = float(case.get("time", "0"))
        if module and seconds >= LISTED_FROM_S:
            found.append((seconds, f"{module.replace('.', '/')}.py::{name}"))
    return sorted(found, reverse=True)


if __name__ == "__main__":
    print("# seconds node-id: the slowest tests of a measured run (tests/support/slowest.py)")
    for seconds, node_id in from_junit(Path(sys.argv[1])):
        print(f"{seconds:.1f} {node_id}")
