"""The CPU each test costs, measured, so that CI's time can be read where it goes.

On two cores the suite is bound by CPU, not by its waits: a test that sleeps for a
minute beside others costs little, one that starts a JVM or runs a seed range costs
much, and wall-clock durations under load mix the two. Each test's JUnit record
(``--junitxml``) gets a ``cpu_s`` property: the CPU seconds its worker process and
the children it reaped spent from its setup to its teardown (a server a module
shares is reaped, and charged, at the module's last test, so per-file totals are
right; a grandchild left to init is not counted). Read a report with::

    python -m tests.support.cpu .test-logs/main.xml [FILES]

which prints the CPU in all, by folder and of the FILES (15) costliest files (0: the
first line alone).
"""

from __future__ import annotations

import resource
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import pytest

PROPERTY = "cpu_s"
_STARTED = pytest.StashKey[float]()


def spent() -> float:
    """CPU seconds of this process and its reaped children, so far."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def started(item: pytest.Item) -> None:
    """Called as a test's setup begins."""
    item.stash[_STARTED] = spent()


def finished(item: pytest.Item) -> None:
    """Called as its teardown report is made: the property goes into that report."""
    if _STARTED in item.stash:
        item.user_properties.append((PROPERTY, f"{spent() - item.stash[_STARTED]:.2f}"))


def by_file(report: Path) -> Counter[str]:
    """File -> CPU seconds of its tests, from a JUnit report."""
    totals: Counter[str] = Counter()
    for case in ET.parse(report).iter("testcase"):
        for prop in case.iter("property"):
            if prop.get("name") == PROPERTY:
                totals[case.get("classname", "").replace(".", "/") + ".py"] += float(
                    prop.get("value", "0")
                )
    return totals


def main(report: Path, files: int = 15) -> None:
    totals = by_file(report)
    folders: Counter[str] = Counter()
    for name, seconds in totals.items():
        folders["/".join(name.split("/")[:2])] += seconds
    print(f"{sum(totals.values()):8.1f}  CPU seconds in all")
    if not files:
        return
    for folder, seconds in folders.most_common():
        print(f"{seconds:8.1f}  {folder}/")
    print()
    for name, seconds in totals.most_common(files):
        print(f"{seconds:8.1f}  {name}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), *map(int, sys.argv[2:3]))
