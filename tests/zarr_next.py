"""zarr-python 3.2 and later, in an interpreter of its own: the peer for rectilinear chunk grids.

zarr-python reads and writes ``rectilinear`` chunk grids from 3.2 on (behind its
``array.rectilinear_chunks`` switch), and 3.2 needs Python 3.12; the test environment may run an
older Python (zarr-python 3.1 there cannot open such arrays at all). So the interop tests run
zarr-python in a virtual environment of its own, made once from the first Python 3.12+ found
(on the PATH or under pyenv) and kept in ``~/.cache/zarrx-tests``; scripts go in on the command
line and results come back as ``.npy`` files. Without such a Python the tests fail, saying so.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

#: the zarr-python the environment installs (rectilinear grids: 3.2)
REQUIREMENT = "zarr>=3.2"
_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "zarrx-tests"


def _interpreters() -> list[str]:
    found = sorted(glob.glob(str(Path.home() / ".pyenv" / "versions" / "3.1[2-9]*" / "bin" / "python")))
    found += [shutil.which(f"python3.{minor}") or "" for minor in range(12, 16)]
    return [path for path in found if path]


def zarr_next_python() -> str:
    """The interpreter of the environment with zarr-python 3.2+, made on first use."""
    for base in _interpreters():
        probe = subprocess.run([base, "-c", "import sys, venv; print('%d.%d' % sys.version_info[:2])"],
                               capture_output=True, text=True)  # fmt: skip
        if probe.returncode:  # a pyenv shim of a version not installed, say
            continue
        version = probe.stdout.strip()
        target = _CACHE / f"zarr-next-py{version}"
        python = target / "bin" / "python"
        ready = target / "ready"
        if not ready.exists():
            subprocess.run([base, "-m", "venv", "--clear", str(target)], check=True, capture_output=True)
            subprocess.run([str(python), "-m", "pip", "install", "-q", REQUIREMENT, "numpy"], check=True,
                           capture_output=True, timeout=600)  # fmt: skip
            ready.write_text(REQUIREMENT)
        return str(python)
    raise RuntimeError(
        "no Python 3.12 or later found (PATH, pyenv) for zarr-python 3.2+, the peer of the rectilinear "
        f"chunk grid tests; this interpreter is {sys.version.split()[0]}"
    )


def run_zarr_next(script: str, *arguments: str) -> str:
    """Run ``script`` with zarr-python 3.2+ (rectilinear grids switched on); its standard output."""
    prelude = "import sys, json, numpy as np, zarr\nzarr.config.set({'array.rectilinear_chunks': True})\n"
    result = subprocess.run([zarr_next_python(), "-c", prelude + script, *arguments], capture_output=True,
                            text=True, timeout=300)  # fmt: skip
    if result.returncode:
        raise AssertionError(f"zarr-python 3.2+ failed:\n{result.stderr[-3000:]}")
    return result.stdout
