"""Several writes in flight on local stores (issue 31): the pool encodes, the I/O pool writes.

The writes are watched through a real local store (a :class:`~zarrx.storage.store.WrapperStore`
over a :class:`~zarrx.storage.LocalStore` whose chunk writes take a little while and count how
many run at once, on which threads), read back by a second store on the same folder.
"""

from __future__ import annotations

import os
import threading
import time
import tracemalloc

import numpy as np
import pytest

import zarrx
from zarrx.concurrency import task_threads, writes_behind
from zarrx.errors import StoreError, UsageError
import zarrx.io.write
from zarrx.storage import LocalStore
from zarrx.storage.local import is_temporary_name
from zarrx.storage.store import WrapperStore

THREADS = 2


class Watched(WrapperStore):
    """Chunk writes that take ``pause`` seconds each, counted while they run."""

    def __init__(self, inner, pause=0.02):
        super().__init__(inner)
        self.pause, self.lock = pause, threading.Lock()
        self.running = self.most = self.written = 0
        self.threads: set[str] = set()

    def set(self, key, value):
        if key.endswith("zarr.json"):
            return super().set(key, value)
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
            self.threads.add(threading.current_thread().name)
        try:
            time.sleep(self.pause)
            super().set(key, value)
        finally:
            with self.lock:
                self.running -= 1
                self.written += 1


@pytest.fixture(autouse=True)
def two_threads(monkeypatch):
    """Two encoding threads and 16 writes allowed in flight, whatever the machine."""
    monkeypatch.setenv("ZARRX_NUM_THREADS", str(THREADS))
    monkeypatch.setenv("ZARRX_IO_DEPTH", "16")
    monkeypatch.setenv("ZARRX_WRITE_DEPTH", "16")


def _values(shape=(256, 1024)):
    return np.arange(np.prod(shape), dtype="u4").reshape(shape)


def _files(folder):
    return [name for _, _, names in os.walk(folder) for name in names]


@pytest.mark.parametrize("compressors", [None, "auto"], ids=["uncompressed", "compressed"])
def test_writes_run_on_the_io_pool_several_at_once_and_values_are_identical(tmp_path, compressors):
    values = _values()
    store = Watched(LocalStore(str(tmp_path)))
    # 16 chunks of 64 KiB, each a strided piece of the value
    array = zarrx.create_array(store, shape=values.shape, dtype=values.dtype, chunks=(64, 256), compressors=compressors)
    array[...] = values
    assert store.written == 16
    # more writes at once than the two threads encoding, never more than the I/O depth
    assert THREADS < store.most <= 16
    assert any(name.startswith("zarrx-io") for name in store.threads), store.threads
    np.testing.assert_array_equal(zarrx.open_array(str(tmp_path))[...], values)
    assert not [name for name in _files(tmp_path) if name.endswith(".tmp")]


def test_encoded_objects_waiting_for_a_slow_device_stay_bounded(tmp_path, monkeypatch):
    monkeypatch.setenv("ZARRX_IO_DEPTH", "2")  # a slow device: two writes at a time
    monkeypatch.setattr(zarrx.io.write, "HELD_BYTES_PER_THREAD", 2 * 64 * 1024)  # two chunks per thread
    values = _values((1024, 1024))  # 4 MiB in 64 chunks of 64 KiB, each gathered into a copy
    store = Watched(LocalStore(str(tmp_path)), pause=0.005)
    array = zarrx.create_array(store, shape=values.shape, dtype=values.dtype, chunks=(64, 256), compressors=None)
    tracemalloc.start()
    try:
        array[...] = values
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert store.written == 64 and store.most <= 2
    # the objects handed to the I/O pool (4 x 64 KiB) and those being encoded (2 x 64 KiB),
    # not the 4 MiB of all the chunks waiting for the device
    assert peak < 1.5 * 2**20, peak
    np.testing.assert_array_equal(zarrx.open_array(str(tmp_path))[...], values)


def test_a_concurrent_reader_never_sees_a_torn_chunk(tmp_path):
    shape, chunks = (256, 1024), (64, 256)
    array = zarrx.create_array(Watched(LocalStore(str(tmp_path)), pause=0.002), shape=shape, dtype="u4",
                               chunks=chunks, compressors=None)  # fmt: skip
    array[...] = np.ones(shape, "u4")
    reader = zarrx.open_array(str(tmp_path))
    seen, errors, stop = set(), [], threading.Event()

    def read_while_writing():
        while not stop.is_set():
            try:
                found = reader[...]
            except Exception as error:  # noqa: BLE001 -- a torn chunk: reported below
                errors.append(error)
                return
            for part in found.reshape(4, 64, 4, 256).transpose(0, 2, 1, 3).reshape(16, -1):
                seen.add(tuple(np.unique(part)))  # one chunk: all old values or all new ones

    thread = threading.Thread(target=read_while_writing)
    thread.start()
    try:
        for version in range(2, 8):
            array[...] = np.full(shape, version, "u4")
    finally:
        stop.set()
        thread.join()
    assert not errors, errors
    assert seen and all(len(values) == 1 for values in seen), seen
    np.testing.assert_array_equal(reader[...], np.full(shape, 7, "u4"))


def test_a_failed_write_names_its_key_and_leaves_no_temporary_file(tmp_path):
    values = _values()
    array = zarrx.create_array(Watched(LocalStore(str(tmp_path))), shape=values.shape, dtype=values.dtype,
                               chunks=(64, 256), compressors=None)  # fmt: skip
    blocker = tmp_path / "c" / "2" / "1"
    blocker.mkdir(parents=True)  # a folder where chunk (2, 1) goes: renaming over it fails
    (blocker / "keep").write_bytes(b"x")
    with pytest.raises(StoreError, match="c/2/1"):
        array[...] = values
    assert not [name for name in _files(tmp_path) if is_temporary_name(name) or name.endswith(".tmp")]
    reader = zarrx.open_array(str(tmp_path))
    np.testing.assert_array_equal(reader[0:64, 0:256], values[0:64, 0:256])  # chunk (0, 0) was written


def test_by_default_each_object_is_written_by_the_thread_that_encoded_it(tmp_path, monkeypatch):
    monkeypatch.delenv("ZARRX_WRITE_DEPTH")
    values = _values()
    store = Watched(LocalStore(str(tmp_path)))
    array = zarrx.create_array(store, shape=values.shape, dtype=values.dtype, chunks=(64, 256), compressors=None)
    array[...] = values
    assert store.most <= THREADS and not any(name.startswith("zarrx-io") for name in store.threads)
    np.testing.assert_array_equal(zarrx.open_array(str(tmp_path))[...], values)
    monkeypatch.setenv("ZARRX_WRITE_DEPTH", "none")
    with pytest.raises(UsageError, match="ZARRX_WRITE_DEPTH.*none"):
        array[...] = values


def test_inside_a_task_given_one_thread_writes_stay_on_it(tmp_path):
    values = _values()
    store = Watched(LocalStore(str(tmp_path)), pause=0)
    array = zarrx.create_array(store, shape=values.shape, dtype=values.dtype, chunks=(64, 256), compressors=None)
    with task_threads(1):
        array[...] = values
    assert store.threads == {threading.current_thread().name} and store.most == 1
    np.testing.assert_array_equal(zarrx.open_array(str(tmp_path))[...], values)


def test_writes_behind_waits_for_every_call_and_raises_the_first_error():
    done, lock = [], threading.Lock()

    def slow(number):
        time.sleep(0.01)
        if number == 3:
            raise OSError(f"write {number} failed")
        with lock:
            done.append(number)

    with pytest.raises(OSError, match="write 3 failed"):
        with writes_behind(held_bytes=4, depth=4) as write:
            for number in range(4):
                write(lambda number=number: slow(number), 1)
    assert sorted(done) == [0, 1, 2]  # the block's end waited for the others


def test_writes_behind_holds_no_more_bytes_than_allowed_but_always_one_call():
    held, most, lock = [0], [0], threading.Lock()

    def hold(nbytes):
        with lock:
            held[0] += nbytes
            most[0] = max(most[0], held[0] if nbytes <= 100 else held[0] - nbytes + 100)  # the big one alone
        time.sleep(0.005)
        with lock:
            held[0] -= nbytes

    with writes_behind(held_bytes=100, depth=16) as write:
        for nbytes in [30] * 12 + [250, 30, 30]:  # 250: more than allowed, goes alone
            write(lambda nbytes=nbytes: hold(nbytes), nbytes)
    assert 60 <= most[0] <= 100, most  # several at once, never more than allowed


@pytest.mark.parametrize("depth", ["1", "16"])
@pytest.mark.parametrize("chunk_side", [16, 128])  # small chunks written in loops, large ones from the pool
def test_uncompressed_chunks_of_a_strided_value_are_stored_intact(tmp_path, monkeypatch, depth, chunk_side):
    # a strided piece of an uncompressed chunk is gathered into the thread's scratch memory when
    # the thread stores it before building the next: every chunk must still hold its own values
    monkeypatch.setenv("ZARRX_WRITE_DEPTH", depth)
    source = np.arange(256 * 256 * 4, dtype="i4").reshape(256, 256, 4)
    value = source[:, :, 1].T  # strided: no chunk of it is contiguous
    array = zarrx.create_array(tmp_path / "a.zarr", shape=(256, 256), chunks=(chunk_side, chunk_side),
                               dtype="i4", compressors=None)  # fmt: skip
    array[...] = value
    np.testing.assert_array_equal(zarrx.open_array(tmp_path / "a.zarr")[...], value)
