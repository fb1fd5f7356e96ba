"""Threads of one process writing parts of one chunk (or shard) never lose each other's values.

Each round, 8 threads released together by a barrier each write one element of a fresh
chunk (or one inner chunk of a fresh shard) with a plain ``arr[i] = v``, no caller's lock:
every partial write reads the object, merges and stores it, and without zarrx's own lock
the last one stored drops the others' values (7 of 8 lost in most rounds).
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import zarrx
from zarrx.io import locks
from zarrx.storage.memory import MemoryStore

THREADS = 8
ROUNDS = 300


def _race(arr: zarrx.Array, rounds: int) -> np.ndarray:
    """Run ``rounds`` rounds of 8 threads each writing one element of the round's object;
    return what the array holds."""
    barrier = threading.Barrier(THREADS)
    errors: list[BaseException] = []

    def writer(i: int) -> None:
        try:
            for r in range(rounds):
                barrier.wait()
                arr[r * THREADS + i] = r * THREADS + i + 1
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)
            barrier.abort()

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    return arr[...]


@pytest.mark.parametrize("where", ["memory", "local"])
def test_threads_writing_elements_of_one_chunk_keep_every_value(tmp_path, where):
    store = {} if where == "memory" else tmp_path / "a.zarr"
    rounds = ROUNDS if where == "memory" else ROUNDS // 3
    arr = zarrx.create_array(store, shape=(rounds * THREADS,), chunks=(THREADS,), dtype="i4", fill_value=0)
    found = _race(arr, rounds)
    lost = np.flatnonzero(found == 0)
    assert lost.size == 0, f"{lost.size} of {found.size} values lost, e.g. at {lost[:8].tolist()}"
    np.testing.assert_array_equal(found, np.arange(1, rounds * THREADS + 1))


@pytest.mark.parametrize("where", ["memory", "local"])
def test_threads_writing_inner_chunks_of_one_shard_keep_every_value(tmp_path, where):
    store = {} if where == "memory" else tmp_path / "s.zarr"
    rounds = ROUNDS if where == "memory" else ROUNDS // 3
    arr = zarrx.create_array(store, shape=(rounds * THREADS,), chunks=(1,), shards=(THREADS,), dtype="i4", fill_value=0)
    found = _race(arr, rounds)
    lost = np.flatnonzero(found == 0)
    assert lost.size == 0, f"{lost.size} of {found.size} values lost, e.g. at {lost[:8].tolist()}"
    np.testing.assert_array_equal(found, np.arange(1, rounds * THREADS + 1))


def test_arrays_opened_separately_on_one_folder_share_the_locks(tmp_path):
    zarrx.create_array(tmp_path / "a.zarr", shape=(100 * THREADS,), chunks=(THREADS,), dtype="i4", fill_value=0)
    opened = [zarrx.open_array(tmp_path / "a.zarr", mode="r+") for _ in range(THREADS)]
    barrier = threading.Barrier(THREADS)

    def writer(i: int) -> None:
        for r in range(100):
            barrier.wait()
            opened[i][r * THREADS + i] = 1

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert int((opened[0][...] == 1).sum()) == 100 * THREADS


def test_a_caller_holding_chunk_lock_can_write_and_read_back_the_same_chunk():
    # the caller's locks and the writes' own are apart: holding one never blocks the other
    arr = zarrx.create_array({}, shape=(16,), chunks=(8,), dtype="i4", fill_value=0)
    done = threading.Event()

    def update() -> None:
        with locks.chunk_lock(arr, np.s_[2:5]):
            arr[2:5] += 1
            arr[3] += 1
        done.set()

    thread = threading.Thread(target=update)
    thread.start()
    thread.join(timeout=30)
    assert done.is_set(), "the write under chunk_lock did not finish"
    assert arr[...].tolist() == [0, 0, 1, 2, 1] + [0] * 11


def test_object_locks_are_all_released_after_a_batch_of_more_keys_than_stripes():
    store = MemoryStore()
    keys = [f"c/{i}" for i in range(2 * locks.STRIPES)]  # more keys than stripes: some share one
    with locks.object_locks(store, keys):
        pass

    def take_each() -> list[bool]:  # from another thread: a stripe still held would time out
        taken = []
        for lock in locks._OBJECT_LOCKS:
            taken.append(lock.acquire(timeout=5))
            lock.release()
        return taken

    found: list[list[bool]] = []
    thread = threading.Thread(target=lambda: found.append(take_each()))
    thread.start()
    thread.join()
    assert found and all(found[0]) and len(found[0]) == locks.STRIPES
