"""Whether this machine can build the compiled hot path: a C compiler and Python's
headers, what setup.py's mypyc build needs (``make tools`` installs both)."""

from __future__ import annotations

import shutil
import sysconfig
from pathlib import Path


def can_compile() -> bool:
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    headers = Path(sysconfig.get_paths()["include"], "Python.h")
    return shutil.which(compiler) is not None and headers.exists()
