"""I/O depth apart from CPU threads (issue 31): large local reads in ranges on the I/O pool, chunks
stored as in memory read straight into the output."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import zarrx
from zarrx.concurrency import call_io_depth, io_depth, map_io, task_threads
from zarrx.errors import ChunkDecodeError, UsageError
from zarrx.storage.local import IO_RANGE_BYTES, read_ranges_into

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _create(path, values, **options):
    array = zarrx.create_array(path, shape=values.shape, dtype=values.dtype, **options)
    array[...] = values
    return array


def test_the_io_depth_is_a_setting_and_a_task_keeps_its_threads(monkeypatch):
    monkeypatch.delenv("ZARRX_IO_DEPTH", raising=False)
    assert io_depth() == 16
    monkeypatch.setenv("ZARRX_IO_DEPTH", "6")
    assert io_depth() == call_io_depth() == 6
    with task_threads(2):  # inside a dask task: no more requests in flight than the task's threads
        assert call_io_depth() == 2
    for bad in ("0", "-3", "many"):
        monkeypatch.setenv("ZARRX_IO_DEPTH", bad)
        with pytest.raises(UsageError, match="ZARRX_IO_DEPTH.*" + bad):
            io_depth()


def test_map_io_keeps_order_and_raises_the_first_error(monkeypatch):
    monkeypatch.setenv("ZARRX_IO_DEPTH", "4")
    assert map_io(lambda value: value * 2, list(range(50))) == list(range(0, 100, 2))

    def fail_on_7(value):
        if value == 7:
            raise ValueError("seven")
        return value

    with pytest.raises(ValueError, match="seven"):
        map_io(fail_on_7, list(range(20)))


@pytest.mark.parametrize("depth", ["1", "3", "16"])
def test_a_large_range_read_in_parallel_ranges_stops_where_the_file_ends(tmp_path, monkeypatch, depth):
    monkeypatch.setenv("ZARRX_IO_DEPTH", depth)
    data = np.random.default_rng(0).integers(0, 256, 3 * IO_RANGE_BYTES + 12345, dtype=np.uint8).tobytes()
    path = tmp_path / "value"
    path.write_bytes(data)
    descriptor = os.open(path, os.O_RDONLY)
    try:
        buffer = bytearray(4 * IO_RANGE_BYTES)  # more than the file holds past 100
        found = read_ranges_into(descriptor, 100, memoryview(buffer))
    finally:
        os.close(descriptor)
    assert found == len(data) - 100
    assert bytes(buffer[:found]) == data[100:]


CHILD = """
import json, sys, threading
import numpy as np, zarrx
from zarrx.concurrency import task_threads
array = zarrx.open_array(sys.argv[1], mode="r")
io = lambda: sum(thread.name.startswith("zarrx-io") for thread in threading.enumerate())
with task_threads(1):  # a dask task's thread: one read at a time, no I/O pool
    inside = array[...]
in_task = io()
outside = array[...]
print(json.dumps({"in_task": in_task, "outside": io(), "equal": bool((inside == outside).all()),
                  "sum": int(outside.sum(dtype=np.uint64))}))
"""


def test_a_large_chunk_is_read_with_the_io_depth_outside_tasks_only(tmp_path):
    # one uncompressed chunk of 32 MiB: read straight into the output, in ranges on the I/O pool
    values = np.arange(2**23, dtype=np.uint32).reshape(2048, 4096)
    _create(tmp_path / "a.zarr", values, chunks=(2048, 4096), compressors=None)
    env = {**os.environ, "ZARRX_IO_DEPTH": "4", "PYTHONPATH": ROOT}
    done = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "a.zarr")], capture_output=True, text=True,
                          env=env, timeout=120, check=True)  # fmt: skip
    found = json.loads(done.stdout.splitlines()[-1])
    # outside a task the ranges go to the I/O pool, at most depth - 1 threads beside the caller
    # (how many it starts depends on how fast the first ones finish: a pool thread is reused)
    assert 1 <= found.pop("outside") <= 3
    assert found == {"in_task": 0, "equal": True, "sum": int(values.sum(dtype=np.uint64))}


@pytest.mark.parametrize("dtype", ["<u2", ">u2", "<f8"])
def test_chunks_stored_as_in_memory_read_straight_into_the_output_at_edges_and_in_parts(tmp_path, dtype):
    values = np.arange(300 * 500, dtype=dtype).reshape(300, 500)
    array = _create(tmp_path / "a.zarr", values, chunks=(128, 256), compressors=None)
    for selection in [(...,), (slice(5, 290), slice(0, 500)), (slice(128, 256), slice(256, 500)), (7, slice(None))]:
        np.testing.assert_array_equal(array[selection], values[selection])


def test_a_chunk_file_of_the_wrong_size_is_a_decode_error_not_garbage(tmp_path):
    values = np.arange(256 * 256, dtype="<u2").reshape(256, 256)
    array = _create(tmp_path / "a.zarr", values, chunks=(128, 256), compressors=None)
    chunk = tmp_path / "a.zarr" / "c" / "1" / "0"
    chunk.write_bytes(chunk.read_bytes()[:-2])
    with pytest.raises(ChunkDecodeError, match="c/1/0"):
        array[...]


@pytest.mark.parametrize("shape, chunks", [((32, 128, 192), (16, 32, 64)), ((4, 512, 384), (1, 256, 128))],
                         ids=["planes", "rows of one plane"])  # fmt: skip
def test_whole_chunks_go_into_a_strided_output_in_ranges_each_put_in_place_by_its_reader(tmp_path, monkeypatch, shape, chunks):
    """An uncompressed chunk of two ranges or more whose piece of the output is strided is read in
    ranges that are blocks of it (slices along its first dimension, or along the second where one
    slice of the first is more than a range), each copied into place on the I/O thread that read
    it; inside a task (one request at a time) it is read whole, then copied."""
    import threading

    import zarrx.io.decode as decode
    from zarrx.concurrency import IO_THREAD_NAME

    monkeypatch.setattr(decode, "IO_RANGE_BYTES", 2048)
    values = np.arange(np.prod(shape), dtype="<u2").reshape(shape)
    array = _create(tmp_path / "a.zarr", values, chunks=chunks, compressors=None)
    copied_on = []
    copy_values = decode.copy_values
    monkeypatch.setattr(decode, "copy_values", lambda target, source: copied_on.append(threading.current_thread().name)
                        or copy_values(target, source))  # fmt: skip
    np.testing.assert_array_equal(zarrx.open_array(tmp_path / "a.zarr")[...], values)
    assert any(name.startswith(IO_THREAD_NAME) for name in copied_on)
    copied_on.clear()
    with task_threads(1):
        np.testing.assert_array_equal(array[2:, 5:], values[2:, 5:])
    assert not any(name.startswith(IO_THREAD_NAME) for name in copied_on)


def test_a_chunk_cut_short_while_its_ranges_are_read_is_an_error_naming_it(tmp_path, monkeypatch):
    import zarrx.io.decode as decode
    from zarrx.storage import LocalStore

    from .test_opened_shards import Watched

    class CutAfterFirstRange(Watched):
        def after_readinto(self, value, start, found):
            os.truncate(self.inner.local_path(value.key), 10)

    monkeypatch.setattr(decode, "IO_RANGE_BYTES", 2048)
    monkeypatch.setenv("ZARRX_IO_DEPTH", "2")  # the ranges after the first two start once it is cut
    values = np.arange(32 * 64 * 128, dtype="<u2").reshape(32, 64, 128)
    _create(tmp_path / "a.zarr", values, chunks=(16, 32, 64), compressors=None)
    array = zarrx.open_array(CutAfterFirstRange(LocalStore(tmp_path / "a.zarr")))
    with pytest.raises(ChunkDecodeError, match=r"chunk 'c/\d/\d/\d': the file ended at byte \d+ while reading its bytes .* cut short"):
        array[...]
