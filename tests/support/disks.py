"""Small real filesystems for tests of full and read-only disks.

A tmpfs of a few hundred KiB, mounted in the test's temporary folder, fills up as a
real disk does (ENOSPC) and can be remounted read-only (EROFS). Mounting needs root:
without it the test is skipped, saying why; as root a mount that fails fails the test.
"""

from __future__ import annotations

import os
import subprocess

import pytest


def mount(*args: str) -> None:
    """Run mount(8); skip the test where it may not mount (not root)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small disk needs root (CI runs as root)")
    done = subprocess.run(["mount", *args], capture_output=True, check=False)
    assert not done.returncode, f"mount {' '.join(args)} failed: {done.stderr.decode().strip()}"


@pytest.fixture
def small_disk(tmp_path):
    """A 512 KiB tmpfs (skipped where the test may not mount)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mount("-t", "tmpfs", "-o", "size=512k", "tmpfs", str(disk))
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
