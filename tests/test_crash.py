"""Crash safety: a writer SIGKILLed in the middle of a large parallel write loses nothing.

A child process rewrites two arrays of a LocalStore again and again, each generation with new
values: ``plain`` (400 raw chunks, written by ``zarrx.to_zarr`` with dask's threaded
scheduler) and ``sharded`` (16 shards of 100 inner chunks each, written by ``arr[...] = ...``
on zarrx's thread pool). Every chunk of generation ``g`` holds one value,
``g * 1000 + the chunk's number``, so a chunk can be checked on its own. The test kills the
child with SIGKILL after a random delay, several times, and after every kill checks that

* every chunk decodes and holds the whole value of one generation written since the last one
  completed -- never a torn chunk, a chunk of another place, or a mix;
* the leftover temporary files of the interrupted writes are never listed as keys nor read as
  chunks (and ``verify`` reports them apart);
* :func:`zarrx.verify` finds no corruption and no unknown keys.

The next child starts from the surviving state, so each kill hits a store already hit.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import zarrx
from zarrx.storage import LocalStore
from zarrx.tools.verify import verify
from tests.figures import add, report_figures  # noqa: F401 (report_figures is an autouse fixture)

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")

#: array -> (shape, chunks (inner chunks), shards or None); the unit written whole is the shard if any
ARRAYS = {
    "plain": ((1600, 1600), (80, 80), None),
    "sharded": ((800, 800), (20, 20), (200, 200)),
}
KILLS = 5
#: seconds after the child starts writing before it is killed
DELAYS = (0.05, 1.2)

WRITER = r"""
import json, os, sys
import dask, dask.array as da, numpy as np
import zarrx

root, start = sys.argv[1], int(sys.argv[2])
progress = os.path.join(root, "..", "progress.json")
plain = zarrx.open_array(root, "plain", mode="r+")
sharded = zarrx.open_array(root, "sharded", mode="r+")

def generation_of(shape, unit, g):
    grid = [s // u for s, u in zip(shape, unit)]
    numbers = np.arange(grid[0] * grid[1], dtype="int32").reshape(grid) + g * 1000
    return np.kron(numbers, np.ones(unit, dtype="int32"))

def mark(g):
    temporary = progress + ".writing"
    with open(temporary, "w") as file:
        json.dump({"started": g}, file)
    os.replace(temporary, progress)

with dask.config.set(scheduler="threads", num_workers=4):
    for g in range(start, start + 10**6):
        mark(g)
        values = da.from_array(generation_of(plain.shape, plain.chunks, g), chunks=plain.chunks)
        zarrx.to_zarr(values, plain)
        sharded[...] = generation_of(sharded.shape, sharded.shards, g)
"""


def generation(name: str, gen: int) -> np.ndarray:
    shape, chunks, shards = ARRAYS[name]
    unit = shards or chunks
    grid = [s // u for s, u in zip(shape, unit)]
    numbers = np.arange(grid[0] * grid[1], dtype="int32").reshape(grid) + gen * 1000
    return np.kron(numbers, np.ones(unit, dtype="int32"))


def started(progress: Path) -> int:
    try:
        return json.loads(progress.read_text())["started"]
    except (FileNotFoundError, json.JSONDecodeError, KeyError):
        return -1


def check_units(store: LocalStore, name: str, generations: set[int]) -> tuple[int, dict[int, int]]:
    """Each written unit holds one whole generation in ``generations``; units checked and by generation."""
    arr = zarrx.open_array(store, name)
    values = arr[...]
    unit = arr.shards or arr.chunks
    counts: dict[int, int] = {}
    checked = 0
    for i in range(0, arr.shape[0], unit[0]):
        for j in range(0, arr.shape[1], unit[1]):
            block = values[i : i + unit[0], j : j + unit[1]]
            first = int(block.flat[0])
            gen, number = divmod(first, 1000)
            assert (block == first).all(), f"{name} unit at ({i}, {j}) is torn: values {np.unique(block)}"
            assert number == (i // unit[0]) * (arr.shape[1] // unit[1]) + j // unit[1], f"{name} unit misplaced"
            assert gen in generations, f"{name} unit at ({i}, {j}) holds generation {gen}, expected {generations}"
            counts[gen] = counts.get(gen, 0) + 1
            checked += 1
    return checked, counts


def temporary_files(root: Path) -> list[Path]:
    return [path for path in root.rglob("*.tmp")]


def test_sigkill_during_parallel_writes_leaves_whole_old_or_new_chunks(tmp_path):
    root = tmp_path / "data.zarr"
    store = LocalStore(root)
    for name, (shape, chunks, shards) in ARRAYS.items():
        arr = zarrx.create_array(store, name, shape=shape, chunks=chunks, shards=shards, dtype="int32",
                                 fill_value=-1, compressors=None)  # fmt: skip
        arr[...] = generation(name, 0)
    progress = tmp_path / "progress.json"
    rng = random.Random()
    # every unit holds a generation from the last one completed to the last one started
    completed, next_generation, mixed, leftovers = 0, 1, 0, 0
    for kill in range(KILLS):
        child = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(root), str(next_generation)],
            cwd=Path(__file__).resolve().parents[1],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            deadline = time.monotonic() + 60
            while started(progress) < next_generation:  # wait out the imports: kill while writing
                assert child.poll() is None, f"the writer died: {child.stderr.read().decode()[-2000:]}"
                assert time.monotonic() < deadline, "the writer never started writing"
                time.sleep(0.01)
            time.sleep(rng.uniform(*DELAYS))
            os.kill(child.pid, signal.SIGKILL)
            assert child.wait(timeout=30) == -signal.SIGKILL
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
            child.stderr.close()
        last = started(progress)
        if last > next_generation:  # this child finished at least one generation
            completed = last - 1
        add(__name__, "writers SIGKILLed mid-write")

        # no temporary file is a key; every unit is whole and of the last two generations
        leftovers += len(temporary_files(root))
        assert not [key for key in store.list_prefix("") if key.endswith(".tmp")]
        for name in ARRAYS:
            checked, counts = check_units(store, name, set(range(completed, last + 1)))
            add(__name__, "units checked after a kill (all whole, none lost)", checked)
            mixed += len(counts) > 1
        report = verify(store)
        assert report.ok, str(report)
        assert report.unknown == [] and report.missing == []
        assert len(report.temporary) == len(temporary_files(root))
        next_generation = last + 1
    add(__name__, "arrays caught mid-write by a kill (old and new chunks side by side)", mixed)
    add(__name__, "temporary files left by kills (never read)", leftovers)
