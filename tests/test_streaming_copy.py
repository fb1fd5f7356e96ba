"""Streaming copies (issue 31): ``dst[...] = src``, ``zarrx.convert`` and whole-shard writes.

* ``dst[region] = src`` with a lazy source -- a zarrx array, a zarr-python array, a dask array,
  any object with ``shape``, ``dtype`` and ``__getitem__`` -- copies the same values as writing
  ``src[...]`` (partial edge shards, other chunks and shards, fill values, sharded to
  unsharded and back), part by part (the source is indexed per step, never whole);
* the peak memory of a copy of a 64 MiB array in 512 KiB shards, measured with tracemalloc
  in a process of its own, stays under 4 destination shards per thread (``to_zarr`` of a dask
  array: 4 of its blocks aligned on the shards), where reading the source whole takes 64 MiB;
* a copy whose source or destination fails raises that error, and leaves no thread behind;
  ``zarrx convert`` stopped by a failing write leaves an incomplete destination that a rerun
  completes;
* a whole-shard write encodes the inner chunks on the pool and stores each shard once.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import dask.array as da
import numpy as np
import pytest
import zarr

import zarrx
import zarrx.io.copy
from zarrx.errors import StoreError
from zarrx.storage import LocalStore, MemoryStore
from zarrx.testing import FaultyStore
from zarrx.tools.convert_job import JOB_KEY

from tests.counting import CountingStore

SHAPE = (13, 17, 9)


@pytest.fixture(autouse=True)
def small_steps(monkeypatch):
    """Steps of one object (shard or chunk) however small: these arrays are KiB, not MiB."""
    monkeypatch.setattr(zarrx.io.copy, "MIN_STEP_BYTES", 0)


@pytest.fixture(scope="module")
def data() -> np.ndarray:
    values = np.arange(np.prod(SHAPE), dtype="i4").reshape(SHAPE)
    values[:3] = -1  # the fill value: those chunks are not stored
    return values


class Sliced:
    """A lazy array-like that only offers shape, dtype and __getitem__, and counts its reads."""

    def __init__(self, values: np.ndarray) -> None:
        self.values, self.shape, self.dtype, self.reads = values, values.shape, values.dtype, []

    def __getitem__(self, selection):
        self.reads.append(selection)
        return self.values[selection]


def sources(data: np.ndarray) -> dict[str, object]:
    zx = zarrx.create_array({}, shape=SHAPE, chunks=(4, 5, 3), shards=(8, 10, 6), dtype="i4", fill_value=-1)
    zx[...] = data
    zp = zarr.create_array({}, shape=SHAPE, chunks=(3, 7, 9), dtype="i4", fill_value=-1)
    zp[...] = data
    return {
        "zarrx": zx,
        "zarr-python": zp,
        "dask": da.from_array(data, chunks=(5, 5, 5)),
        "dask-of-zarrx": zarrx.from_zarr(zx.store),
        "array-like": Sliced(data),
    }


def stored(array) -> dict[str, bytes]:
    keys = list(array.store.list_prefix(""))
    return {key: value for key, value in array.store.get_many(keys).items()}


GRIDS = {"chunks": ((2, 3, 4), None), "sharded": ((2, 3, 4), (4, 6, 8)), "one-chunk": (SHAPE, None)}


@pytest.mark.parametrize("grid", GRIDS)
@pytest.mark.parametrize("kind", ["zarrx", "zarr-python", "dask", "dask-of-zarrx", "array-like"])
def test_a_lazy_source_copies_the_values_of_its_materialised_form(kind, grid, data):
    source = sources(data)[kind]
    chunks, shards = GRIDS[grid]
    whole = zarrx.create_array({}, shape=SHAPE, chunks=chunks, shards=shards, dtype="i4", fill_value=-1)
    whole[...] = source
    np.testing.assert_array_equal(whole[...], data)
    # into a region of a larger array: partial shards at every edge keep their fill value around it
    larger = zarrx.create_array({}, shape=(20, 20, 20), chunks=chunks, shards=shards, dtype="i4", fill_value=7)
    larger[2:15, 1:18, 3:12] = source
    expected = np.full((20, 20, 20), 7, dtype="i4")
    expected[2:15, 1:18, 3:12] = data
    np.testing.assert_array_equal(larger[...], expected)
    # the same bytes as the user's form, which reads the source whole first
    materialised = zarrx.create_array({}, shape=SHAPE, chunks=chunks, shards=shards, dtype="i4", fill_value=-1)
    materialised[...] = np.asarray(source[...])
    assert stored(whole) == stored(materialised)


def test_the_source_is_read_part_by_part(data):
    source = Sliced(data)
    target = zarrx.create_array({}, shape=SHAPE, chunks=(2, 17, 9), shards=(4, 17, 9), dtype="i4", fill_value=-1)
    target[...] = source
    # one read per destination step (a few shards), none of the whole array
    assert len(source.reads) > 1
    assert all(np.prod([s.stop - s.start for s in read]) < data.size for read in source.reads)


@pytest.mark.parametrize("where", ["memory", "local"])
def test_buffers_reused_between_steps_never_change_what_was_written(where, data, tmp_path):
    # uncompressed chunks are the values' own bytes: a store keeping them without a copy would
    # see the next step's values, read into the same buffer
    source = sources(data)["zarrx"]
    store = MemoryStore() if where == "memory" else LocalStore(str(tmp_path / "a.zarr"))
    target = zarrx.create_array(store, shape=SHAPE, chunks=(1, 17, 9), dtype="i4", fill_value=-1, compressors=None)
    target[...] = source
    np.testing.assert_array_equal(zarrx.open_array(store)[...], data)


def test_sharded_to_unsharded_and_back_with_other_grids_and_fill_values():
    values = np.random.default_rng(3).normal(size=(37, 29)).astype("f4")
    values[5:20, 3:9] = np.nan
    sharded = zarrx.create_array({}, shape=values.shape, chunks=(4, 4), shards=(8, 12), dtype="f4", fill_value=np.nan)
    sharded[...] = values
    plain = zarrx.create_array({}, shape=values.shape, chunks=(7, 10), dtype="f4", fill_value=np.nan, compressors="zstd")
    plain[...] = sharded
    back = zarrx.create_array({}, shape=values.shape, chunks=(5, 3), shards=(10, 9), dtype="f4", fill_value=np.nan)
    back[...] = plain
    np.testing.assert_array_equal(back[...], values)
    # all-fill inner chunks are left out of the copy, as they are of the source
    reference = zarrx.to_zarr(da.from_array(values, chunks=(10, 9)), {}, chunks=(5, 3), shards=(10, 9), fill_value=np.nan)
    assert stored(back) == stored(reference)


def test_other_selections_and_shapes_still_take_the_source_whole(data):
    target = zarrx.create_array({}, shape=(4, 6), chunks=(2, 2), dtype="i4", fill_value=0)
    row = Sliced(np.arange(6, dtype="i4"))
    target[...] = row  # broadcast along the first axis
    target[::2, 1] = Sliced(np.array([9, 9], dtype="i4"))  # a step
    expected = np.tile(np.arange(6), (4, 1))
    expected[::2, 1] = 9
    np.testing.assert_array_equal(target[...], expected)
    with pytest.raises(zarrx.errors.SelectionError, match="shape"):
        target[...] = Sliced(np.zeros((3, 6), dtype="i4"))


class FailingSource(Sliced):
    def __getitem__(self, selection):
        if len(self.reads) == 2:
            raise OSError("the source went away")
        return super().__getitem__(selection)


def _copy_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == "zarrx-copy-reader"]


def test_a_failing_source_stops_the_copy_with_its_error(data):
    target = zarrx.create_array({}, shape=SHAPE, chunks=(1, 17, 9), dtype="i4", fill_value=-1)
    with pytest.raises(OSError, match="went away"):
        target[...] = FailingSource(data)
    assert not _copy_threads()


def test_a_failing_destination_stops_the_reader(data, tmp_path):
    faulty = FaultyStore(LocalStore(str(tmp_path / "a.zarr")), fail_set=lambda key: key.endswith("c/2/0/0"))
    target = zarrx.create_array(faulty, shape=SHAPE, chunks=(1, 17, 9), shards=(2, 17, 9), dtype="i4", fill_value=-1)
    source = Sliced(data)
    with pytest.raises(StoreError):
        target[...] = source
    assert not _copy_threads()
    assert len(source.reads) < 7  # stopped a few steps ahead, not read to the end


def test_a_convert_stopped_by_a_failed_write_is_incomplete_and_a_rerun_completes_it(tmp_path):
    source = zarrx.create_array(str(tmp_path / "src.zarr"), shape=(64, 48), chunks=(8, 8), dtype="u2")
    source[...] = np.arange(64 * 48, dtype="u2").reshape(64, 48)
    faulty = FaultyStore(LocalStore(str(tmp_path / "dst.zarr")), fail_set=lambda key: key == "c/3/0")
    with pytest.raises(StoreError):
        zarrx.convert(str(tmp_path / "src.zarr"), faulty, chunks=(4, 8), shards=(16, 48), progress=False)
    stored = LocalStore(str(tmp_path / "dst.zarr"))
    assert stored.get(JOB_KEY) is not None and stored.get("zarr.json") is None
    missing = sorted({f"c/{row}/0" for row in range(4)} - set(stored.list_prefix("c/")))
    assert not zarrx.verify(str(tmp_path / "dst.zarr")).ok
    counting = CountingStore(LocalStore(str(tmp_path / "dst.zarr")))
    copy = zarrx.convert(str(tmp_path / "src.zarr"), counting, chunks=(4, 8), shards=(16, 48), progress=False)
    np.testing.assert_array_equal(copy[...], source[...])
    assert stored.get(JOB_KEY) is None
    assert sorted(key for key in counting.writes if key.startswith("c/")) == missing  # only the missing shards


def test_a_whole_shard_is_encoded_on_the_pool_and_written_once():
    counting = CountingStore(MemoryStore())
    # 32 inner chunks of 64 KiB: large enough for the pool (zarrx.io.decode.MIN_THREADED_CHUNK_BYTES),
    # and enough that the pool's threads take some while the calling thread encodes beside them
    target = zarrx.create_array(counting, shape=(512, 512), chunks=(64, 128), shards=(512, 512), dtype="f8")
    encoded_on = set()
    codec = target.handle.sharding.codecs
    original = type(codec).encode

    class Recording(type(codec)):
        def encode(self, *args, **kwargs):
            encoded_on.add(threading.current_thread().name)
            return original(self, *args, **kwargs)

    object.__setattr__(codec, "__class__", Recording)  # this array's own (frozen) pipeline object only
    counting.reset()
    target[...] = np.random.default_rng(1).normal(size=(512, 512))
    assert [key for key in counting.writes if key.startswith("c/")] == ["c/0/0"]
    assert any(name.startswith("zarrx-worker") for name in encoded_on)
    np.testing.assert_array_equal(zarrx.open_array(counting)[...], target[...])


MEMORY_SCRIPT = textwrap.dedent(
    """
    import sys, tracemalloc, numpy as np, zarrx, dask.array, zarrx.dask.write, zarrx.tools.conversion
    form, folder, destination = sys.argv[1], sys.argv[2], sys.argv[3]
    source = zarrx.open_array(folder + "/src")
    kwargs = dict(shape=source.shape, chunks=(4, 64, 128), shards=(8, 128, 256), dtype="u2")
    target = zarrx.create_array(destination + "/dst", **kwargs)
    warm, small = zarrx.create_array({}, **kwargs), zarrx.create_array({}, shape=(8, 128, 512), dtype="u2")
    small[...] = 1
    warm[:8, :128, :512] = small  # imports, pools, codec contexts
    zarrx.convert(warm.store, {}, progress=False)
    zarrx.to_zarr(zarrx.from_zarr(small.store), warm, region=(slice(0, 8), slice(0, 128), slice(0, 512)))
    tracemalloc.start()
    if form == "setitem":
        target[...] = source
    elif form == "convert":
        target = zarrx.convert(folder + "/src", destination + "/conv", chunks=(4, 64, 128), shards=(8, 128, 256),
                               compressors="auto", progress=False)
    elif form == "to_zarr":
        zarrx.to_zarr(zarrx.from_zarr(folder + "/src"), target)
    elif form == "materialised":
        target[...] = source[...]
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert (target[:, :64, :64] == source[:, :64, :64]).all() and (target[-8:] == source[-8:]).all()
    print(peak)
    """
)


@pytest.fixture(scope="module")
def large_source(tmp_path_factory):
    """64 MiB of uint16 in chunks of 256 KiB, uncompressed, written 8 MiB at a time."""
    folder = tmp_path_factory.mktemp("large")
    source = zarrx.create_array(str(folder / "src"), shape=(64, 512, 1024), chunks=(8, 128, 128), dtype="u2",
                                compressors=None)  # fmt: skip
    for start in range(0, 64, 8):
        values = np.arange(start * 512 * 1024, (start + 8) * 512 * 1024).astype("u2").reshape(8, 512, 1024)
        source[start : start + 8] = values
    return folder


@pytest.mark.parametrize("form", ["setitem", "convert", "to_zarr", "materialised"])
def test_a_copy_holds_a_few_destination_shards_not_the_array(form, large_source, tmp_path):
    run = subprocess.run(
        [sys.executable, "-c", MEMORY_SCRIPT, form, str(large_source), str(tmp_path)], capture_output=True, text=True,
        timeout=120,
        env={**__import__("os").environ, "ZARRX_NUM_THREADS": "2", "DASK_NUM_WORKERS": "2"},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    peak = int(run.stdout.split()[-1])
    shard = 8 * 128 * 256 * 2  # 512 KiB
    bound = 4 * shard * 2  # four destination shards per thread, two threads
    if form == "materialised":  # the bound is one the user's form does not meet: the test can fail
        assert peak > 64 * 2**20
    elif form == "to_zarr":
        # dask's blocks, rechunked onto the shards (2 MiB here: 8 x 128 x 1024, as dask's to_zarr
        # aligns them), are what a to_zarr holds: four of them per thread
        block = 8 * 128 * 1024 * 2
        assert peak < 4 * block * 2, f"to_zarr: peak {peak / 2**20:.1f} MiB"
    else:
        assert peak < bound, f"{form}: peak {peak / 2**20:.1f} MiB over {bound / 2**20:.0f} MiB"


# -- a source that reads the destination itself ---------------------------------------------------
SHIFT_SOURCES = {
    "zarrx dask": lambda url, store: zarrx.from_zarr(store),
    "zarrx dask, inline_array=False": lambda url, store: zarrx.from_zarr(store, inline_array=False),
    "xarray DataArray": lambda url, store: __import__("xarray").DataArray(zarrx.from_zarr(store)),
    "zarr-python array via from_zarr": lambda url, store: zarrx.from_zarr(zarr.open_array(url, mode="r")),
    "dask from_array of zarr-python": lambda url, store: da.from_array(zarr.open_array(url, mode="r"), chunks=65_536),
}
SHIFT_CASES = [(kind, "folder") for kind in SHIFT_SOURCES] + [
    (kind, "memory") for kind in SHIFT_SOURCES if "zarr-python" not in kind  # zarr-python opens the folder
]


@pytest.mark.parametrize(("kind", "where"), SHIFT_CASES)
def test_a_source_reading_the_destination_itself_is_read_before_it_is_overwritten(tmp_path, kind, where):
    """``arr[1:] = <a lazy view of arr>[:-1]`` shifts by one: step by step it would read steps it
    had already overwritten (ten steps of 64 Ki elements here), so such a source is read whole."""
    url = str(tmp_path / "a.zarr")
    n = 600_000
    arr = zarrx.create_array(url if where == "folder" else MemoryStore(), shape=(n,), chunks=(65_536,), dtype="i4")
    arr[...] = np.arange(n, dtype="i4")
    source = SHIFT_SOURCES[kind](url, url if where == "folder" else arr.store)
    arr[1:] = source[:-1]
    np.testing.assert_array_equal(arr[...], np.concatenate([[0], np.arange(n - 1)]))
