"""`--parallelism N` starts each step as a child `tango` process found on PATH (Tango 1.3.2's
`multicore_executor.py`); a venv's `tango` run without activating the venv is not there. The
directory of this interpreter goes first on PATH (an environment change, no patch)."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def tango_on_path() -> None:
    bin_dir = str(Path(sys.executable).parent)
    path = os.environ.get("PATH", "")
    if bin_dir not in path.split(os.pathsep):
        os.environ["PATH"] = bin_dir + os.pathsep + path


tango_on_path()
