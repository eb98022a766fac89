"""Job handlers for the worker tests that run ``disquette worker`` as a subprocess.

They talk to the test through files in ``$DISQUETTE_TEST_DIR``: a handler
creates ``<body>.started`` when it begins and returns once ``<body>.release``
exists (``hold``), or fails (``fail``); ``report`` logs its progress and returns;
``shout`` returns its body in capitals (a result, with ``--results``).
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from disquette import Job
from disquette.worker import RunningJob

POLL = 0.01


def _dir() -> Path:
    return Path(os.environ["DISQUETTE_TEST_DIR"])


def _name(job: Job) -> str:
    return job.body.decode()


def hold(job: Job) -> None:
    (_dir() / f"{_name(job)}.started").touch()
    while not (_dir() / f"{_name(job)}.release").exists():
        time.sleep(POLL)


async def hold_async(job: Job) -> None:
    (_dir() / f"{_name(job)}.started").touch()
    while not (_dir() / f"{_name(job)}.release").exists():
        await asyncio.sleep(POLL)


def fail(job: Job) -> None:
    raise ValueError(f"cannot handle {_name(job)}")


def report(job: RunningJob) -> None:
    job.progress(f"{_name(job)}: halfway")
    job.progress(f"{_name(job)}: done")


def shout(job: Job) -> bytes:
    return job.body.upper()
