"""The local session of the example, the benchmarks and the tests
(disquette/spark/local.py) leaves nothing behind in the temporary folder once its
process ends: its log4j2 file's folder was left in /tmp by every session."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support.servers import SRC

STARTS = """
from disquette.spark.local import local_session
spark = local_session("leaves-nothing")
assert spark.range(3).count() == 3
spark.stop()
"""


def test_a_local_session_leaves_no_folder_in_the_temporary_folder(tmp_path):
    temp = tmp_path / "temp"
    temp.mkdir()
    env = dict(os.environ, TMPDIR=str(temp), PYTHONPATH=str(SRC))
    subprocess.run([sys.executable, "-c", STARTS], env=env, check=True, timeout=300,
                   capture_output=True)  # fmt: skip
    assert not [p.name for p in temp.iterdir() if p.name.startswith("disquette-spark-")]
