"""Sharded reads of a local store in parts (zarrx.io.spans, zarrx.io.shards): a shard's wanted inner
chunks are read in parts of its open file on the I/O pool, a bounded number at a time, and
decoded from memory; the values are those of reading each inner chunk on its own."""

from __future__ import annotations

import contextlib
import os
import threading
import time
import tracemalloc
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import zarrx
import zarrx.io.shards
import zarrx.io.spans
from zarrx import concurrency
from zarrx.concurrency import map_concurrent, task_threads
from zarrx.errors import ChunkDecodeError, StoreError
from zarrx.io.spans import SpanPiece, SpanReads
from zarrx.storage import LocalStore

from tests.test_opened_shards import CountingReaders, CutAfterIndex, Remote, Watched

#: inner chunks of 16 KiB, shards of 384 KiB (read in 2 parts; the edge shards along the first
#: axis, half as deep, in 1)
SHAPE, CHUNKS, SHARDS = (40, 120, 192), (4, 32, 32), (16, 64, 96)
SELECTIONS = [
    np.s_[...],  # whole shards and the edge shards, cut by the array's end
    np.s_[3:37, 10:90, 5:80],  # parts of shards
    np.s_[16:32, 64:120, 96:192],  # one shard, whole, cut by the array's end
    np.s_[32:40, 64:120, 96:192],  # one edge shard, whole
    np.s_[5, :, :],  # one inner chunk deep
    np.s_[:, 40, 7:70],
    np.s_[::3, 1:99:7, 4],
]


@pytest.fixture(autouse=True)
def _small_reads_in_parts(monkeypatch):
    """These MiB reads go in parts too (by default only reads of 8 MiB decoded or more do), of
    128 KiB or more (by default 256 KiB): 2 parts per shard, 1 per edge shard."""
    monkeypatch.setattr(zarrx.io.shards, "MIN_READ_IN_PARTS", 0)
    monkeypatch.setattr(zarrx.io.shards, "MIN_SPAN_BYTES", 2**17)


def _data(shape=SHAPE):
    return np.random.default_rng(3).standard_normal(shape).astype("f4")  # incompressible: parts of MiB


def _sharded(path, data=None, shards=SHARDS):
    data = _data() if data is None else data
    array = zarrx.create_array(str(path), shape=data.shape, chunks=CHUNKS, shards=shards, dtype="f4", fill_value=-1,
                               compressors=[{"name": "zstd", "configuration": {"level": 1}}])  # fmt: skip
    array[...] = data
    return array


def _inner_chunk_path(monkeypatch):
    """Reads from here on take each inner chunk on its own (no shard wants enough bytes for parts)."""
    monkeypatch.setattr(zarrx.io.shards, "MIN_SPAN_BYTES", 2**62)


def _part_reads(store_path):
    """(inner chunks read, reads made) of a whole read, from what explain() predicts."""
    plan = zarrx.open_array(str(store_path)).explain(np.s_[...])
    reads = [request for request in plan.requests if request.kind == "inner chunks"]
    return sum(len(request.chunks) for request in reads), len(reads)


# -- values ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("plan_ahead", [None, 30], ids=["planned at once", "planned a shard ahead"])
@pytest.mark.parametrize("selection", SELECTIONS, ids=str)
def test_reads_in_parts_equal_the_data_and_the_inner_chunk_path(tmp_path, monkeypatch, selection, plan_ahead):
    if plan_ahead:  # the next shards opened and planned on the I/O pool while the decoders decode
        monkeypatch.setattr(zarrx.io.shards, "PLAN_AHEAD_PIECES", plan_ahead)
    _sharded(tmp_path)
    chunks, reads = _part_reads(tmp_path)
    assert chunks == 10 * 4 * 6 and reads == 8 * 2 + 4
    array = zarrx.open_array(str(tmp_path))
    in_parts = array[selection]
    np.testing.assert_array_equal(in_parts, _data()[selection])
    np.testing.assert_array_equal(zarrx.open_array(Remote(LocalStore(tmp_path)))[selection], in_parts)
    _inner_chunk_path(monkeypatch)
    assert _part_reads(tmp_path)[1] == chunks  # (that path reads them one by one)
    np.testing.assert_array_equal(zarrx.open_array(str(tmp_path))[selection], in_parts)


def test_a_read_in_parts_plans_its_first_shard_alone(tmp_path, monkeypatch):
    """The decoders start on the first shard while the rest of its group (here all 12 shards) is
    planned on the I/O pool."""
    _sharded(tmp_path)
    planned = []
    plan = zarrx.io.shards._opened_shard_items
    monkeypatch.setattr(zarrx.io.shards, "_opened_shard_items",
                        lambda handle, part, **options: planned.append(len(part)) or plan(handle, part, **options))  # fmt: skip
    np.testing.assert_array_equal(zarrx.open_array(str(tmp_path))[...], _data())
    assert planned == [1, 11]


def test_only_reads_of_8_mib_decoded_or_more_go_in_parts(tmp_path, monkeypatch):
    monkeypatch.undo()
    _sharded(tmp_path)
    array = zarrx.open_array(str(tmp_path))
    small = array.explain(np.s_[...])  # 7.5 MiB
    assert all(len(request.chunks) == 1 for request in small.requests if request.kind == "inner chunks")
    _sharded(tmp_path / "large", _data((48, 240, 192)))  # 8.4 MiB
    large = zarrx.open_array(str(tmp_path / "large")).explain(np.s_[...])
    assert sum(len(request.chunks) > 1 for request in large.requests) == 3 * 4 * 2  # a part per shard


def test_empty_inner_chunks_and_absent_shards_read_as_the_fill_value(tmp_path, monkeypatch):
    data = _data()
    data[4:12, 32:64, 32:64] = -1  # two inner chunks in the middle of a shard: not stored
    data[0:4, 0:64, 96:192] = -1  # a shard's first layer
    array = _sharded(tmp_path, data)
    os.remove(tmp_path / "c" / "1" / "0" / "1")  # a shard gone: all fill value
    data[16:32, 0:64, 96:192] = -1
    chunks, reads = _part_reads(tmp_path)
    assert chunks == 240 - 2 - 6 - 24 and reads == 7 * 2 + 4
    for selection in SELECTIONS:
        np.testing.assert_array_equal(array[selection], data[selection])
    _inner_chunk_path(monkeypatch)
    np.testing.assert_array_equal(zarrx.open_array(str(tmp_path))[...], data)


@pytest.mark.parametrize("where", ["one thread", "no I/O pool", "a task of one thread"])
def test_reads_on_one_thread_or_without_the_io_pool(tmp_path, monkeypatch, where):
    """One thread: parts read ahead, decoded on the calling thread. No I/O pool (``ZARRX_IO_DEPTH=1``,
    or a dask task given one thread): no parts, each inner chunk read by its decoding thread
    (the kernel's read-ahead then overlaps reading and decoding)."""
    _sharded(tmp_path)
    array = zarrx.open_array(str(tmp_path))
    if where == "one thread":
        monkeypatch.setenv("ZARRX_NUM_THREADS", "1")
    elif where == "no I/O pool":
        monkeypatch.setenv("ZARRX_IO_DEPTH", "1")
    with task_threads(1) if where == "a task of one thread" else contextlib.nullcontext():
        in_parts = any(len(request.chunks) > 1 for request in array.explain(np.s_[3:37, 10:90, 5:80]).requests)
        values = array[3:37, 10:90, 5:80]
    assert in_parts == (where == "one thread")
    np.testing.assert_array_equal(values, _data()[3:37, 10:90, 5:80])


def test_explain_predicts_exactly_the_reads_of_parts(tmp_path):
    _sharded(tmp_path)
    store = CountingReaders(LocalStore(tmp_path))
    array = zarrx.open_array(store)
    for selection in SELECTIONS:
        predicted = array.explain(selection)
        store.reads.clear()
        np.testing.assert_array_equal(array[selection], _data()[selection])
        expected = []
        for request in predicted.requests:
            if request.kind == "shard index":
                size = os.path.getsize(tmp_path / request.key)
                expected.append((request.key, size - request.byte_range.suffix, size))
            else:
                expected.append((request.key, request.byte_range.start, request.byte_range.end))
        assert sorted(store.reads) == sorted(expected)
    assert any(len(request.chunks) > 1 for request in array.explain(np.s_[...]).requests)


# -- one version, errors ---------------------------------------------------------------------------------
def test_a_shard_replaced_while_being_read_in_parts_is_read_from_its_old_version(tmp_path, monkeypatch):
    _sharded(tmp_path)
    _sharded(tmp_path / "other", -_data())

    def replace(store, key):  # renamed over it right after its index was read, before any part
        store.set(key, (tmp_path / "other" / key).read_bytes())

    array = zarrx.open_array(CutAfterIndex(LocalStore(tmp_path), replace))
    monkeypatch.setattr(zarrx.io.shards, "PLAN_AHEAD_PIECES", 30)  # a shard at a time, planned ahead
    np.testing.assert_array_equal(array[...], _data())  # every value from the version it opened
    np.testing.assert_array_equal(zarrx.open_array(str(tmp_path))[...], -_data())


def test_a_shard_cut_short_while_being_read_in_parts_is_an_error_naming_the_inner_chunk(tmp_path):
    _sharded(tmp_path)
    cut = CutAfterIndex(LocalStore(tmp_path), lambda store, key: os.truncate(store.local_path(key), 300_000))
    with pytest.raises(ChunkDecodeError, match=r"'c/0/0/0' inner chunk \(\d+, \d+, \d+\): the shard ended at byte 300000"):
        zarrx.open_array(cut)[0:16, 0:64, 0:96]


def test_a_part_that_fails_to_read_raises_the_stores_error_and_stops(tmp_path, monkeypatch):
    _sharded(tmp_path)

    class Failing(Watched):
        def after_readinto(self, value, start, found):
            if value.key == "c/1/1/1":
                raise StoreError(f"{value.key}: the device failed")

    with pytest.raises(StoreError, match="c/1/1/1: the device failed"):
        zarrx.open_array(Failing(LocalStore(tmp_path)))[...]
    monkeypatch.setattr(zarrx.io.shards, "PLAN_AHEAD_PIECES", 30)
    with pytest.raises(StoreError, match="c/1/1/1: the device failed"):
        zarrx.open_array(Failing(LocalStore(tmp_path)))[...]


# -- memory ------------------------------------------------------------------------------------------
def test_parts_held_at_once_stay_within_the_budget(tmp_path):
    size = 3 * 2**20
    (tmp_path / "shard").write_bytes(bytes(range(256)) * (size // 256))
    store = LocalStore(tmp_path)
    with store.range_readers() as open_value:
        value = open_value("shard")
        reads = SpanReads(budget=2**20)
        pieces = []
        for start in range(0, size, 2**18):  # 12 parts of 256 KiB, 4 pieces each
            part = reads.part(value, start, start + 2**18, 4)
            pieces.extend(SpanPiece(part, offset, offset + 2**16) for offset in range(start, start + 2**18, 2**16))
        assert reads.held <= 2**20  # started ahead: no more than the budget
        taken = iter(pieces)
        found = {}

        def decode():
            for piece in taken:
                found[piece.start] = bytes(reads.wait(piece.part)[piece.start - piece.part.start :][:2])
                reads.done(piece.part, 1)

        threads = [threading.Thread(target=decode) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        reads.close()
    assert found == {start: bytes([0, 1]) for start in range(0, size, 2**16)}
    assert reads.held == 0 and 2**20 <= reads.most_held <= 2**20 + 3 * 2**18  # + one part per thread out of turn


def test_a_large_read_holds_a_bounded_part_of_its_compressed_bytes(tmp_path, monkeypatch):
    data = _data((64, 192, 192))  # 9 MiB, 24 shards
    _sharded(tmp_path, data)
    monkeypatch.setattr(zarrx.io.spans, "HELD_BYTES_PER_THREAD", 2**20)
    array = zarrx.open_array(str(tmp_path))
    array[0:8, 0:8, 0:8]  # (imports, pools, scratch buffers)
    tracemalloc.start()
    try:
        values = array[...]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    np.testing.assert_array_equal(values, data)
    assert peak - values.nbytes < 4 * 2**20, peak - values.nbytes  # not the 9 MiB of compressed bytes


# -- many callers ------------------------------------------------------------------------------------
def test_calls_from_many_threads_at_once_leave_the_cores_to_the_pool(monkeypatch):
    monkeypatch.setenv("ZARRX_NUM_THREADS", "2")
    monkeypatch.setattr(concurrency, "_pool", None)  # a pool of 2 made here, whatever earlier tests made
    lock, active, most = threading.Lock(), [0], [0]

    def work(item):
        with lock:
            active[0] += 1
            most[0] = max(most[0], active[0])
        time.sleep(0.002)
        with lock:
            active[0] -= 1
        return item

    start = threading.Barrier(6)

    def call():
        start.wait()
        assert map_concurrent(work, range(40), caller_works=True) == list(range(40))

    callers = [threading.Thread(target=call) for _ in range(6)]
    for thread in callers:
        thread.start()
    for thread in callers:
        thread.join()
    concurrency._get_pool().shutdown(wait=True)
    assert 2 <= most[0] <= 3  # the pool's 2 threads and one caller; not 6 callers beside them


def test_sharded_reads_from_many_threads_at_once_are_each_right(tmp_path):
    _sharded(tmp_path)
    array = zarrx.open_array(str(tmp_path))
    regions = [np.s_[i : i + 16, j : j + 64, k : k + 96] for i in (0, 16, 32) for j in (0, 64) for k in (0, 96)]
    with ThreadPoolExecutor(8) as pool:
        values = list(pool.map(lambda region: array[region], regions))
    for region, found in zip(regions, values):
        np.testing.assert_array_equal(found, _data()[region])


def test_a_call_nested_in_a_working_callers_call_works_too(monkeypatch):
    monkeypatch.setenv("ZARRX_NUM_THREADS", "2")
    caller = threading.current_thread()
    ran_here = []

    def inner(item):
        if threading.current_thread() is caller:
            ran_here.append(item)
        time.sleep(0.001)
        return item

    def outer(item):
        if threading.current_thread() is caller and not ran_here:  # the caller's first group: nest
            assert map_concurrent(inner, range(40), caller_works=True) == list(range(40))
        return item

    assert map_concurrent(outer, range(8), caller_works=True) == list(range(8))
    assert ran_here  # the nested call's caller worked beside the pool, not waiting for it
