"""Writing to a file system that fills up: no torn chunk, a clear StoreError, the old data kept.

The store lives on a 1 MiB tmpfs mounted for the test (``mount -t tmpfs -o size=1m``, which needs
root, as CI has). Where no tmpfs can be mounted, the same scenario runs in a child process whose
files may not grow past 1 MiB (``RLIMIT_FSIZE``, with ``SIGXFSZ`` ignored): each write past the limit
then fails half-way with ``EFBIG`` instead of ``ENOSPC`` -- the same torn-write hazard, one file at a time.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import zarrx
from zarrx.errors import StoreError

LIMIT = 2**20


def generation(seed: int, shape: tuple[int, ...]) -> np.ndarray:
    """Random values (incompressible) for a seed, a constant (compressed to almost nothing) for 0."""
    return np.random.default_rng(seed).random(shape) if seed else np.full(shape, 1.5)


def fill_up(root: Path, shape: tuple[int, ...], chunks: tuple[int, ...]) -> dict[str, object]:
    """Write a first generation to part of an array, then a second to all of it, which does not fit.

    Returns what was seen; raises AssertionError where a guarantee does not hold.
    """
    array = zarrx.create_array(root, "x", shape=shape, chunks=chunks, dtype="float64", fill_value=-1)
    first, second = generation(0, shape), generation(2, shape)
    array[: chunks[0]] = first[: chunks[0]]  # the first row of chunks: it fits, compressed
    try:
        array[...] = second  # about twice the file system: fails part-way
    except StoreError as error:
        message = str(error)
    else:
        raise AssertionError("writing more than the file system holds did not fail")
    assert "x/c/" in message and ("No space left" in message or "File too large" in message), message
    try:
        array.attrs["after"] = "full"  # a metadata write may fail too: the old document stays whole
    except StoreError:
        pass
    reopened = zarrx.open_array(root, "x")
    assert reopened.shape == shape and set(reopened.attrs.asdict()) <= {"after"}
    values = reopened[...]  # every stored chunk decodes whole: no torn chunk
    written = 0
    for index in np.ndindex(*reopened.metadata.grid_shape):
        region = tuple(slice(i * c, (i + 1) * c) for i, c in zip(index, chunks))
        found = values[region]
        old = first[region] if index[0] == 0 else np.full(found.shape, -1.0)
        assert np.array_equal(found, old) or np.array_equal(found, second[region]), f"chunk {index} is torn"
        written += np.array_equal(found, second[region])
    report = zarrx.verify(root)
    assert report.ok and report.corrupt == [] and report.temporary == [], str(report)
    assert not [name for _, _, names in os.walk(root) for name in names if name.endswith(".tmp")]
    for key in [key for key in array.store.list_prefix("x/c/") if not key.startswith("x/c/0/")]:
        array.store.delete(key)  # room again (a deletion needs none): a rewrite in place works
    array[: chunks[0], : chunks[1]] = 7.0
    assert (zarrx.open_array(root, "x")[: chunks[0], : chunks[1]] == 7.0).all()
    return {"message": message, "second_generation_chunks": written}


def _mount_tmpfs(folder: Path) -> bool:
    folder.mkdir()
    if shutil.which("mount") is None or not hasattr(os, "geteuid") or os.geteuid() != 0:
        return False
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={LIMIT // 1024}k", "tmpfs", str(folder)],
                          capture_output=True, text=True)  # fmt: skip
    return done.returncode == 0


CHILD = """
import json, resource, signal, sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from tests.test_full_file_system import fill_up, LIMIT
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
print(json.dumps(fill_up(Path(sys.argv[1]), (1024, 512), (512, 512))))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="tmpfs, or RLIMIT_FSIZE: Linux")
def test_a_write_to_a_full_file_system_leaves_no_torn_chunk_and_a_clear_store_error(tmp_path):
    folder = tmp_path / "small"
    if _mount_tmpfs(folder):
        try:
            # 32 chunks of 32 KiB, 2 MiB in all, on a 1 MiB file system
            seen = fill_up(folder / "store", (512, 512), (64, 64))
        finally:
            subprocess.run(["umount", str(folder)], check=True)
        assert "No space left on device" in seen["message"]
        assert seen["second_generation_chunks"] > 0  # it filled up part-way through the write
    else:  # no tmpfs here: each file limited to 1 MiB; chunks of 2 MiB fail half-way
        child = subprocess.run(
            [sys.executable, "-c", CHILD, str(folder / "store"), str(Path(__file__).resolve().parents[1])],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert child.returncode == 0, child.stdout + child.stderr[-3000:]
        seen = json.loads(child.stdout.splitlines()[-1])
        assert "File too large" in seen["message"]
