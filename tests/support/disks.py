"""Small real filesystems for tests of full and read-only disks.

A tmpfs of a few hundred KiB, mounted in the test's temporary folder, fills up as a
real disk does (ENOSPC) and can be remounted read-only (EROFS). Mounting needs the
right to; where the test may not mount, it is skipped, saying why.
"""

from __future__ import annotations

import subprocess

import pytest


def mount(*args: str) -> None:
    """Run mount(8); skip the test where mounting is not allowed."""
    done = subprocess.run(["mount", *args], capture_output=True, check=False)
    if done.returncode:
        pytest.skip(f"mount {' '.join(args)} failed: {done.stderr.decode().strip()}")


@pytest.fixture
def small_disk(tmp_path):
    """A 512 KiB tmpfs (skipped where mounting is not allowed)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mount("-t", "tmpfs", "-o", "size=512k", "tmpfs", str(disk))
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
