"""Icechunk 2.x, in an interpreter of its own: the environment of tests/test_icechunk.py.

icechunk 2.x needs Python 3.12; the test environment may run an older Python. As for the
zarr-python 3.2+ peer (``tests/zarr_next.py``), the tests build a virtual environment once from the
first Python 3.12+ found (``~/.pyenv/versions/3.1[2-9]*`` or the PATH), keep it in
``~/.cache/zarrx-tests`` and run scripts in it: scripts go in on the command line, results come
back as JSON on standard output (arrays as ``.npy`` files). It holds icechunk, zarr-python,
xarray, dask with distributed, h5py and netCDF4 (the files whose chunks become virtual
references), and zarrx installed editable from the checkout under test -- so zarrx's own
dependencies come from its ``pyproject.toml``, its entry points (``engine="zarrx"``) are
registered, and its code is the checkout's. One environment per checkout and set of
requirements. Without such a Python the tests fail, saying so (they never skip).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from .zarr_next import _CACHE, _interpreters

ROOT = Path(__file__).resolve().parent.parent
#: what the environment installs besides zarrx (icechunk 2.x: the issue measured 2.3)
REQUIREMENTS = ("icechunk>=2.3,<3", "zarr>=3.1", "xarray", "dask[distributed]", "h5py", "netCDF4")
#: seconds the last build of the environment took (None: it was already there)
BUILD_SECONDS: float | None = None


def _digest() -> str:
    """What the environment depends on: the checkout's place, its pyproject.toml, the requirements."""
    text = json.dumps([str(ROOT), (ROOT / "pyproject.toml").read_text(), REQUIREMENTS])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def icechunk_python() -> str:
    """The interpreter of the environment with icechunk 2.x and this checkout's zarrx, made on first use."""
    global BUILD_SECONDS
    for base in _interpreters():
        probe = subprocess.run([base, "-c", "import sys, venv; print('%d.%d' % sys.version_info[:2])"],
                               capture_output=True, text=True)  # fmt: skip
        if probe.returncode:  # a pyenv shim of a version not installed, say
            continue
        target = _CACHE / f"icechunk-py{probe.stdout.strip()}-{_digest()}"
        python, ready = target / "bin" / "python", target / "ready"
        if not ready.exists():
            started = time.monotonic()
            subprocess.run([base, "-m", "venv", "--clear", str(target)], check=True, capture_output=True)
            install = [str(python), "-m", "pip", "install", "-q", *REQUIREMENTS, "-e", str(ROOT)]
            result = subprocess.run(install, capture_output=True, text=True, timeout=900)
            if result.returncode:
                raise RuntimeError(f"building the icechunk environment failed:\n{result.stderr[-3000:]}")
            BUILD_SECONDS = time.monotonic() - started
            ready.write_text(json.dumps({"requirements": REQUIREMENTS, "seconds": BUILD_SECONDS, "root": str(ROOT)}))
        ready.touch()  # its last use: see _prune
        _prune(target)
        return str(python)
    raise RuntimeError(
        "no Python 3.12 or later found (PATH, pyenv) for icechunk 2.x, which the Icechunk tests "
        f"(tests/test_icechunk.py) run with; this interpreter is {sys.version.split()[0]}"
    )


#: an environment of another checkout unused for this long is deleted (each is about 370 MB)
STALE_SECONDS = 24 * 3600


def _prune(keep: Path) -> None:
    """Delete the environments of checkouts that are gone (CI clones each run afresh, into a new
    folder: one environment each) or that no test used for a day; never ``keep``."""
    for other in _CACHE.glob("icechunk-py*-*"):
        if other == keep:
            continue
        ready = other / "ready"
        try:
            root = json.loads(ready.read_text()).get("root") if ready.exists() else None
            unused = time.time() - (ready if ready.exists() else other).stat().st_mtime
        except (OSError, ValueError):
            continue
        if unused > STALE_SECONDS or (root is not None and not Path(root).exists() and unused > 600):
            shutil.rmtree(other, ignore_errors=True)


def run_icechunk(script: str, *arguments: str, timeout: float = 300) -> dict:
    """Run ``script`` in the icechunk environment (``sys.argv[1:]`` are ``arguments``); it prints
    one JSON object last, which is returned."""
    result = subprocess.run([icechunk_python(), "-c", script, *arguments], capture_output=True, text=True,
                            timeout=timeout, cwd=str(ROOT))  # fmt: skip
    if result.returncode:
        raise AssertionError(f"the icechunk script failed:\n{result.stderr[-4000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])
