#!/usr/bin/env python3
"""Celery's and Kombu's own integration tests, run against a disquette node.

Usage::

    python bench/upstream_suites.py [--only kombu celery] [--celery-tests FILE ...]

The source distributions of the installed Celery and Kombu (``pip download
--no-binary :all:``: they ship ``t/integration``) are fetched into
``~/.cache/disquette-suites`` and unpacked, beside a virtualenv of their own with
this tree (pure build, from a wheel, so its ``.pth`` registers ``disque://``), the
same Celery and Kombu and their suites' test requirements (``SUITE_REQUIREMENTS``);
a disquette node is started here.

* **Kombu** has base classes per transport feature in ``t/integration/common.py``
  (``BasicFunctionality``, ``BaseExchangeTypes``, ``BaseTimeToLive``,
  ``BasePriority``, ``BaseMessage``, ``BaseEventLoop``, ``BaseFailover``), which its
  Redis and AMQP tests subclass with a ``connection`` fixture; this script writes
  ``t/integration/test_disque.py`` doing the same with ``disque://`` connections.
* **Celery**'s integration tests read ``TEST_BROKER`` and ``TEST_BACKEND``; they run
  with both set to the node's ``disque://`` URL and an in-process worker (their
  ``celery_session_worker``).

Prints each suite's counts and every test that did not pass with the first line
of its reason (the JUnit XML of each run is kept beside the sources). Nothing is
asserted: docs/celery.md says which tests pass, which do not apply, and why.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET
from importlib.metadata import version
from pathlib import Path

import _common as cm

CACHE = Path.home() / ".cache" / "disquette-suites"
KOMBU_CLASSES = ("BasicFunctionality", "BaseExchangeTypes", "BaseTimeToLive", "BasePriority",
                 "BaseMessage", "BaseEventLoop", "BaseFailover")  # fmt: skip
CELERY_TESTS = ("t/integration/test_tasks.py", "t/integration/test_canvas.py")
#: What the suites import beyond Celery and Kombu (Celery's requirements/test.txt, the
#: part its integration tests use).
SUITE_REQUIREMENTS = ("pytest", "pytest-timeout", "pytest-rerunfailures", "pytest-subtests",
                      "pytest-order", "pydantic", "redis", "freezegun")  # fmt: skip

KOMBU_MODULE = '''"""Kombu's transport tests on disquette (written by bench/upstream_suites.py)."""
import os

import kombu
import pytest

from .common import {classes}

URL = os.environ["DISQUE_URL"]


@pytest.fixture()
def connection():
    return kombu.Connection(URL)


@pytest.fixture()
def invalid_connection():
    return kombu.Connection("disque://127.0.0.1:1")


@pytest.fixture()
def failover_connection():
    return kombu.Connection("disque://127.0.0.1:1;" + URL)

{tests}
'''


def sdist(name: str) -> Path:
    """The unpacked source distribution of the installed ``name`` (downloaded once)."""
    release = f"{name}-{version(name)}"
    target = CACHE / release
    if not target.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "--no-binary", ":all:", "-d", str(CACHE), f"{name}=={version(name)}"],
                       check=True)  # fmt: skip
        with tarfile.open(CACHE / f"{release}.tar.gz") as archive:
            archive.extractall(CACHE)
    return target


def suite_python() -> str:
    """The suites' virtualenv (made once): this tree, Celery, Kombu, the test requirements."""
    venv = CACHE / "venv"
    python = venv / "bin" / "python"
    if not (venv / ".ready").exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        pins = [f"celery=={version('celery')}", f"kombu=={version('kombu')}"]
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", str(cm.REPO), *pins,
                        *SUITE_REQUIREMENTS], check=True,
                       env={**os.environ, "DISQUETTE_BUILD": "pure"})  # fmt: skip
        (venv / ".ready").touch()
    return str(python)


def pytest_run(root: Path, tests: list[str], env: dict[str, str], report: Path, timeout: int):
    # Celery's fixtures come from its pytest plugin; flaky tests run once (Celery's CI
    # reruns them up to five times: a first failure here is reported as it is).
    argv = [suite_python(), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
            "celery.contrib.pytest", "-p", "no:rerunfailures", "-o",
            "python_classes=test_* Test*", f"--junitxml={report}", f"--timeout={timeout}",
            "-W", "ignore::pytest.PytestUnknownMarkWarning", *tests]  # fmt: skip
    done = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True)
    print(done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-2000:])


def summarize(title: str, report: Path) -> None:
    if not report.exists():
        print(f"{title}: no report")
        return
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    others = []
    for case in ET.parse(report).iter("testcase"):
        name = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
        outcome = next((c for c in case if c.tag in ("failure", "error", "skipped")), None)
        if outcome is None:
            counts["passed"] += 1
            continue
        kind = "skipped" if outcome.tag == "skipped" else "failed"
        counts[kind] += 1
        reason = (outcome.get("message") or outcome.text or "").strip().splitlines()
        others.append(f"  {kind:7} {name}: {reason[0][:160] if reason else ''}")
    print(f"\n{title}: {counts['passed']} passed, {counts['failed']} failed, "
          f"{counts['skipped']} skipped")  # fmt: skip
    print("\n".join(others))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", default=["kombu", "celery"])
    parser.add_argument("--celery-tests", nargs="*", default=list(CELERY_TESTS))
    parser.add_argument("--timeout", type=int, default=60, help="seconds per test")
    args = parser.parse_args()
    cm.interrupt_on_sigterm()
    with cm.Server(cm.disquette_spec(sys.executable)) as node:
        url = f"disque://127.0.0.1:{node.port}"
        env = {**os.environ, "DISQUE_URL": url, "TEST_BROKER": url, "TEST_BACKEND": url}
        if "kombu" in args.only:
            root = sdist("kombu")
            tests = "\n".join(
                f"class test_Disque{c.removeprefix('Base')}({c}):\n    pass\n\n"
                for c in KOMBU_CLASSES
            )
            module = root / "t" / "integration" / "test_disque.py"
            module.write_text(KOMBU_MODULE.format(classes=", ".join(KOMBU_CLASSES), tests=tests))
            report = root / "disque-report.xml"
            pytest_run(root, [str(module.relative_to(root))], env, report, args.timeout)
            summarize(f"Kombu {version('kombu')} t/integration/common.py", report)
        if "celery" in args.only:
            root = sdist("celery")
            report = root / "disque-report.xml"
            pytest_run(root, args.celery_tests, env, report, args.timeout)
            summarize(f"Celery {version('celery')} {' '.join(args.celery_tests)}", report)


if __name__ == "__main__":
    main()
