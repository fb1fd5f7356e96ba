"""Processes of one machine writing parts of the same chunks (or shards) of a local store keep every value.

A partial write reads the chunk, merges its values and stores the chunk whole. Threads of one
process are ordered by zarrx's in-process locks (tests/test_partial_write_threads.py); across
processes a store of local files locks each partial object in a lock file of the machine's
temporary folder (:func:`zarrx.storage.metadata_updates.object_file_locks`). Without those
locks, the writers here lose values in every run: each process's write reads chunks that another
process is about to store, and the later store drops the earlier one's values.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import dask.array as da
import numpy as np
import pytest

import zarrx
from zarrx.storage import LocalStore
from zarrx.storage.metadata_updates import OBJECT_LOCK_NAME, object_lock_file

PROCESSES = 4
ROUNDS = 6
ROOT = Path(__file__).resolve().parents[1]

#: one writer process: waits for the start file, then each round writes every PROCESSES-th
#: element of the whole array (a partial write of every chunk) with that round's values
WRITER = r"""
import os, sys, tempfile, time, numpy as np, zarrx
path, name, number, count, rounds, start = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6]), sys.argv[6]
if len(sys.argv) > 7:  # a temporary folder that cannot be used
    tempfile.tempdir = sys.argv[7]
arr = zarrx.open_array(path, name, mode="r+")
while not os.path.exists(start):
    time.sleep(0.001)
for round_number in range(rounds):
    selection = np.s_[number::count]
    arr[selection] = np.arange(arr.size, dtype=arr.dtype)[selection] + 1000 * (round_number + 1)
"""


def _race(path: Path, name: str, tmp_path: Path, *tempdir: str) -> np.ndarray:
    start = tmp_path / f"start-{name}"
    children = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(path), name, str(number), str(PROCESSES), str(ROUNDS),
                          str(start), *tempdir], cwd=ROOT, stderr=subprocess.PIPE)  # fmt: skip
        for number in range(PROCESSES)
    ]
    time.sleep(1.0)  # the writers import zarrx and open the array, then wait for the start
    start.touch()
    for child in children:
        _, error = child.communicate(timeout=120)
        assert child.returncode == 0, error.decode()[-2000:]
    return zarrx.open_array(path, name)[...]


@pytest.mark.parametrize("layout", ["chunks", "shards"])
def test_processes_writing_parts_of_the_same_chunks_keep_every_value(tmp_path, layout):
    path = tmp_path / "data.zarr"
    keywords = {"chunks": (8,)} if layout == "chunks" else {"chunks": (4,), "shards": (16,)}
    zarrx.create_array(LocalStore(path), layout, shape=(2048,), dtype="i8", fill_value=-1, **keywords)
    found = _race(path, layout, tmp_path)
    expected = np.arange(2048) + 1000 * ROUNDS
    lost = np.flatnonzero(found != expected)
    assert lost.size == 0, f"{lost.size} of {found.size} values lost, e.g. at {lost[:8].tolist()}: {found[lost[:8]]}"
    # the locks live in the machine's temporary folder: the store holds only the array
    assert object_lock_file(str(path)).startswith(os.path.realpath(os.path.dirname(object_lock_file("/"))))
    assert os.path.exists(object_lock_file(str(path)))
    assert sorted(os.listdir(path)) == [layout, "zarr.json"]


def test_without_a_usable_temporary_folder_the_lock_file_is_in_the_store_and_never_listed(tmp_path):
    path = tmp_path / "data.zarr"
    zarrx.create_array(LocalStore(path), "chunks", shape=(2048,), chunks=(8,), dtype="i8", fill_value=-1)
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")  # the lock file's folder would be below a file: it cannot be made
    found = _race(path, "chunks", tmp_path, str(not_a_folder))
    np.testing.assert_array_equal(found, np.arange(2048) + 1000 * ROUNDS)
    assert (path / OBJECT_LOCK_NAME).exists()
    store = LocalStore(path)
    assert store.list_dir("") == ["chunks", "zarr.json"] and OBJECT_LOCK_NAME not in list(store.list_prefix(""))
    store.delete_prefix("")  # and never deleted (another process may hold it)
    assert (path / OBJECT_LOCK_NAME).exists() and store.list_dir("") == []


def test_dask_store_without_its_lock_on_worker_processes_keeps_every_value(tmp_path):
    # dask's own da.store, told to take no lock (as users do for speed), with blocks of 3000
    # across chunks of 2000: every other chunk is written in part by two tasks on two processes
    from distributed import Client, LocalCluster

    x = da.arange(200_000, chunks=3000, dtype="i4")
    with LocalCluster(n_workers=2, threads_per_worker=2, processes=True, dashboard_address=":0") as cluster:
        with Client(cluster):
            for attempt in range(3):
                arr = zarrx.create_array(tmp_path / f"a{attempt}.zarr", shape=(200_000,), chunks=(2000,), dtype="i4")
                da.store(x, arr, lock=False)
                found = arr[...]
                lost = np.flatnonzero(found != np.arange(200_000))
                assert lost.size == 0, f"attempt {attempt}: {lost.size} values lost, e.g. at {lost[:8].tolist()}"
