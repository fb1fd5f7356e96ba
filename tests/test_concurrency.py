"""Concurrent writers and readers: exact results, no silently lost writes, no torn reads.

* Many threads, and several processes, writing disjoint chunks (shards) of one array at once
  give exactly the values written.
* Parallel writes that would share a chunk or shard are refused or serialized, never lost:
  ``zarrx.to_zarr`` refuses dask blocks that share a chunk (:class:`ChunkAlignmentError`,
  before anything is written) or rechunks them with ``align="rechunk"``; threads of one process
  that write parts of one chunk hold :func:`zarrx.io.locks.chunk_lock` (zarrx takes no lock by
  itself -- see docs/reliability.md; the control test shows what happens without it).
* Readers during writes see each chunk whole, old or new.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import threading
import time
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import zarrx
from zarrx.errors import ChunkAlignmentError
from zarrx.io.locks import chunk_lock
from zarrx.storage import LocalStore, MemoryStore
from zarrx.storage.store import Store
from zarrx.tools.verify import verify
from tests.counting import Wrapping
from tests.figures import add, report_figures  # noqa: F401 (report_figures is an autouse fixture)

SHAPE = (48, 48)
ARRAYS = {
    "plain": {"chunks": (8, 6)},
    "sharded": {"chunks": (4, 3), "shards": (8, 12)},
}
THREADS = 16


@pytest.fixture(params=["memory", "local"])
def store(request, tmp_path):
    return MemoryStore() if request.param == "memory" else LocalStore(tmp_path / "data.zarr")


def unit_of(arr) -> tuple[int, ...]:
    return arr.shards or arr.chunks


def units(shape, unit):
    """The selection of every stored object (chunk or shard) of an array."""
    return [
        tuple(slice(i, min(i + u, s)) for i, u, s in zip(start, unit, shape))
        for start in itertools.product(*(range(0, s, u) for s, u in zip(shape, unit)))
    ]


def values(gen: int, shape=SHAPE) -> np.ndarray:
    return (np.arange(int(np.prod(shape))).reshape(shape) + 100_000 * gen).astype("int64")


def run_threads(count: int, target) -> None:
    barrier = threading.Barrier(count)
    errors: list[BaseException] = []

    def run(number: int) -> None:
        barrier.wait()
        try:
            target(number)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


# -- disjoint writers ------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ARRAYS)
def test_threads_writing_disjoint_chunks_give_the_exact_result(store, kind):
    arr = zarrx.create_array(store, "x", shape=SHAPE, dtype="int64", fill_value=-1, **ARRAYS[kind])
    regions = units(SHAPE, unit_of(arr))
    for gen in range(3):
        expected = values(gen)

        def write(number: int) -> None:
            writer = zarrx.open_array(store, "x", mode="r+")  # each thread its own handle
            for region in regions[number::THREADS]:
                # a unit in two halves: partial writes of a chunk only this thread touches
                half = region[0].start + (region[0].stop - region[0].start) // 2
                first, second = (slice(region[0].start, half), region[1]), (slice(half, region[0].stop), region[1])
                writer[first] = expected[first]
                writer[second] = expected[second]

        run_threads(THREADS, write)
        np.testing.assert_array_equal(zarrx.open_array(store, "x")[...], expected)
        add(__name__, "disjoint concurrent unit writes checked", len(regions) * 2)


PROCESS_WRITER = r"""
import sys, numpy as np, zarrx
root, number, count, names = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
for name in names:
    arr = zarrx.open_array(root, name, mode="r+")
    unit = arr.shards or arr.chunks
    expected = (np.arange(arr.size).reshape(arr.shape) + 7).astype("int64")
    rows = list(range(0, arr.shape[0], unit[0]))[number::count]
    for start in rows:  # whole rows of units: no unit is shared with another process
        for column in range(0, arr.shape[1], unit[1]):
            region = np.s_[start : start + unit[0], column : column + unit[1]]
            arr[region] = expected[region]
"""


def test_processes_writing_disjoint_chunks_give_the_exact_result(tmp_path):
    root = tmp_path / "data.zarr"
    shape, processes = (96, 96), 3
    for name, keywords in ARRAYS.items():
        zarrx.create_array(LocalStore(root), name, shape=shape, dtype="int64", fill_value=-1, **keywords)
    children = [
        subprocess.Popen(
            [sys.executable, "-c", PROCESS_WRITER, str(root), str(number), str(processes), *ARRAYS],
            cwd=Path(__file__).resolve().parents[1],
            stderr=subprocess.PIPE,
        )
        for number in range(processes)
    ]
    for child in children:
        _, error = child.communicate(timeout=120)
        assert child.returncode == 0, error.decode()[-2000:]
    expected = (np.arange(np.prod(shape)).reshape(shape) + 7).astype("int64")
    for name in ARRAYS:
        np.testing.assert_array_equal(zarrx.open_array(root, name)[...], expected)
        add(__name__, "processes writing one array at once (exact result)", processes)
    assert verify(str(root)).ok


# -- shared chunks: refused or serialized, never lost ----------------------------------------------
@st.composite
def dask_writes(draw):
    """A chunk (and maybe shard) shape, dask block sizes and a region offset along each of two axes."""
    chunks = tuple(draw(st.integers(1, 5)) for _ in range(2))
    shards = None
    if draw(st.booleans()):
        shards = tuple(c * draw(st.integers(1, 3)) for c in chunks)
    offset = tuple(draw(st.integers(0, 6)) for _ in range(2))
    blocks = tuple(tuple(draw(st.lists(st.integers(1, 7), min_size=1, max_size=4))) for _ in range(2))
    return chunks, shards, offset, blocks


@settings(max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=dask_writes(), align=st.sampled_from(["error", "rechunk"]))
def test_dask_writes_that_share_a_chunk_are_refused_before_writing_or_rechunked(case, align):
    chunks, shards, offset, blocks = case
    data_shape = tuple(sum(sizes) for sizes in blocks)
    shape = tuple(o + s + 2 for o, s in zip(offset, data_shape))
    store = MemoryStore()
    arr = zarrx.create_array(store, shape=shape, chunks=chunks, shards=shards, dtype="int64", fill_value=-1)
    old = values(1, shape)
    arr[...] = old
    before = dict(store.mapping)
    x = da.from_array(values(2, data_shape), chunks=blocks)
    region = tuple(slice(o, o + s) for o, s in zip(offset, data_shape))
    expected = old.copy()
    expected[region] = values(2, data_shape)
    with dask.config.set(scheduler="threads", num_workers=8):
        try:
            zarrx.to_zarr(x, store, region=region, align=align)
        except ChunkAlignmentError as error:
            assert align == "error" and ("shard" if shards else "chunk") in str(error)
            assert store.mapping == before  # refused before a single chunk was written
            add(__name__, "misaligned dask writes refused before writing", 1)
            return
    np.testing.assert_array_equal(zarrx.open_array(store)[...], expected)
    add(__name__, "dask region writes checked exact", 1)


class SlowReads(Wrapping):
    """Wraps a store; every batch read waits, so writers that read-modify-write the same chunk overlap."""

    def __init__(self, inner: Store, delay: float = 0.1) -> None:
        super().__init__(inner)
        self.delay = delay

    def get_many(self, keys):
        found = self.inner.get_many(keys)
        time.sleep(self.delay)
        return found

    def __hash__(self):
        return hash((SlowReads, self.inner))

    def __eq__(self, other):
        return isinstance(other, SlowReads) and other.inner == self.inner


@pytest.mark.parametrize("kind", ARRAYS)
@pytest.mark.parametrize("locked", [True, False], ids=["chunk_lock", "no-caller-lock"])
def test_threads_writing_parts_of_one_chunk(store, kind, locked):
    """Exact with or without the caller's chunk_lock: zarrx locks each partial object itself
    from its read to its store; slow reads make every thread's read-modify-write overlap."""
    zarrx.create_array(store, "x", shape=(8, 12), dtype="int64", fill_value=0, **ARRAYS[kind])
    slow = SlowReads(store, delay=0.02)  # without zarrx's lock, every thread would read the old chunk
    threads = 6

    def write(number: int) -> None:
        writer = zarrx.open_array(slow, "x", mode="r+")
        selection = np.s_[number, :]  # one row each: all rows share the first chunk (shard)
        with chunk_lock(writer, selection) if locked else _nothing():
            writer[selection] = number + 1

    run_threads(threads, write)
    result = zarrx.open_array(store, "x")[...]
    expected = np.zeros((8, 12), dtype="int64")
    expected[:threads] = np.arange(1, threads + 1)[:, None]
    np.testing.assert_array_equal(result, expected)
    add(__name__, "partial writes of one chunk serialized" + (" (chunk_lock held too)" if locked else ""), threads)


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def test_chunk_lock_orders_overlapping_selections_without_deadlock():
    store = MemoryStore()
    zarrx.create_array(store, shape=(40,), chunks=(4,), dtype="int64", fill_value=0)
    counter = np.zeros(40, dtype="int64")
    lock = threading.Lock()

    def write(number: int) -> None:
        writer = zarrx.open_array(store, mode="r+")
        for step in range(20):
            start = (number * 7 + step * 3) % 30
            selection = np.s_[start : start + 10]
            with chunk_lock(writer, selection), chunk_lock(writer, np.s_[start + 2 : start + 5]):  # re-entrant
                writer[selection] = writer[selection] + 1
            with lock:
                counter[selection] += 1

    run_threads(8, write)
    np.testing.assert_array_equal(zarrx.open_array(store)[...], counter)


# -- readers during writes -------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ARRAYS)
def test_readers_during_writes_see_whole_old_or_new_chunks(store, kind):
    """A reader of whole chunks (shards) while another thread rewrites them, generation after generation."""
    arr = zarrx.create_array(store, "x", shape=SHAPE, dtype="int64", fill_value=-1, **ARRAYS[kind])
    unit = unit_of(arr)
    grid = [s // u for s, u in zip(SHAPE, unit)]
    numbers = np.kron(np.arange(grid[0] * grid[1]).reshape(grid), np.ones(unit, dtype="int64"))
    arr[...] = numbers
    stop = threading.Event()

    def rewrite() -> None:
        gen = 1
        while not stop.is_set():
            arr[...] = numbers + 1000 * gen
            gen += 1

    writer = threading.Thread(target=rewrite)
    writer.start()
    reader = zarrx.open_array(store, "x")
    reads = 0
    try:
        deadline = time.monotonic() + 0.4
        while time.monotonic() < deadline:
            for selection in (np.s_[...], np.s_[unit[0] : 3 * unit[0], :]):
                got = reader[selection]
                for region in units(got.shape, unit):
                    block = got[region]
                    assert (block == block.flat[0]).all(), f"a torn chunk: {np.unique(block)}"
                    assert block.flat[0] % 1000 == numbers[selection][region].flat[0]
                reads += 1
    finally:
        stop.set()
        writer.join()
    add(__name__, "reads during rewrites, every chunk whole", reads)


class ReplaceBetweenReads(Wrapping):
    """Wraps a store; calls ``replace()`` once, between a reader's first and second batch of ranges."""

    def __init__(self, inner: Store, replace) -> None:
        super().__init__(inner)
        self.replace, self.calls = replace, 0

    def get_ranges(self, requests):
        self.calls += 1
        if self.calls == 2:
            self.replace()
        return self.inner.get_ranges(requests)


def test_a_partial_shard_read_while_the_shard_is_replaced_reads_whole_inner_chunks(store):
    numbers = np.kron(np.arange(64).reshape(8, 8), np.ones((2, 2), dtype="int64"))
    arr = zarrx.create_array(store, "x", shape=(16, 16), chunks=(2, 2), shards=(16, 16), dtype="int64",
                             fill_value=-1, compressors=None)  # fmt: skip
    arr[...] = numbers
    new = numbers + 1000
    new[:2, :2] = -1  # inner chunk (0, 0) all fill: every other inner chunk moves in the new shard

    def replace() -> None:
        arr[...] = new

    reader = zarrx.open_array(ReplaceBetweenReads(store, replace), "x")
    got = reader[4:8, 4:8]  # four inner chunks of the shard: its index, then their byte ranges
    for region in units(got.shape, (2, 2)):
        old_block, new_block = numbers[4:8, 4:8][region], new[4:8, 4:8][region]
        assert np.array_equal(got[region], old_block) or np.array_equal(got[region], new_block), got
