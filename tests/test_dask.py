"""zarrx.dask: arrays as dask arrays (one task per chunk or shard), parallel writes that never share a chunk."""

import io
import pickle
import subprocess
import sys
import time

import dask
import dask.array as da
import numpy as np
import pytest
from dask.delayed import Delayed
from dask.diagnostics import ProgressBar

import zarrx
from zarrx.dask import ArrayHandle, BlockSelections
from zarrx.io.execute import read_selection
from zarrx.errors import ChunkAlignmentError, ContainsArrayError, NodeNotFoundError, ReadOnlyError, UsageError
from zarrx.storage import LocalStore, MemoryStore

from .conftest import DTYPES, assert_same, sample_values
from .counting import CountingStore

DATA = np.arange(23 * 17, dtype="int32").reshape(23, 17)


def chunk_keys(store):
    return sorted(key for key in store.list_prefix("") if not key.endswith("zarr.json"))


def filled(shape, fill, region, values):
    expected = np.full(shape, fill, dtype=values.dtype)
    expected[region] = values
    return expected


# -- reading: values and block structure ------------------------------------------------------
@pytest.mark.parametrize(
    ("create", "blocks"),
    [
        ({"chunks": (5, 4)}, ((5, 5, 5, 5, 3), (4, 4, 4, 4, 1))),
        ({"chunks": (23, 17)}, ((23,), (17,))),
        ({"chunks": (5, 4), "shards": (10, 8)}, ((10, 10, 3), (8, 8, 1))),
        ({"chunks": (1, 17), "shards": (20, 17)}, ((20, 3), (17,))),
    ],
    ids=["chunked", "one-chunk", "sharded", "sharded-rows"],
)
def test_one_block_per_chunk_or_shard(create, blocks):
    arr = zarrx.create_array({}, shape=DATA.shape, dtype=DATA.dtype, **create)
    arr[...] = DATA
    x = arr.to_dask()
    assert x.chunks == blocks
    assert x.dtype == DATA.dtype
    np.testing.assert_array_equal(x.compute(), DATA)
    # one task per block, nothing else in the graph
    assert len(dict(x.__dask_graph__())) == x.npartitions


@pytest.mark.parametrize(
    ("chunks", "blocks"),
    [
        ((5, 4), ((5, 5, 5, 5, 3), (4, 4, 4, 4, 1))),  # the inner chunks
        ((15, 8), ((15, 8), (8, 8, 1))),  # multiples of them
        ((-1, None), ((23,), (17,))),  # whole axes
        (((10, 13), (4, 12, 1)), ((10, 13), (4, 12, 1))),  # explicit sizes, the last ones ragged
        (20, ((20, 3), (17,))),  # one size for every axis, capped at the axis
        ("auto", ((23,), (17,))),  # dask's choice, in multiples of the shards
    ],
)
def test_chunks_may_be_inner_chunks_or_multiples(chunks, blocks):
    arr = zarrx.create_array({}, shape=DATA.shape, dtype=DATA.dtype, chunks=(5, 4), shards=(10, 8))
    arr[...] = DATA
    x = zarrx.from_zarr(arr.store, chunks=chunks)
    assert x.chunks == blocks
    np.testing.assert_array_equal(x.compute(), DATA)


@pytest.mark.parametrize(
    ("chunks", "blocks"),
    [
        ((6, 4), ((6, 6, 6, 5), (4, 4, 4, 4, 1))),
        ((5, 6), ((5, 5, 5, 5, 3), (6, 6, 5))),
        (((5, 8, 10), (17,)), ((5, 8, 10), (17,))),
        (((4, 19), (17,)), ((4, 19), (17,))),
        ((7, 3), ((7, 7, 7, 2), (3, 3, 3, 3, 3, 2))),
    ],
)
@pytest.mark.parametrize("sharded", [False, True], ids=["chunked", "sharded"])
def test_chunks_that_cut_through_chunks_read_what_each_block_needs(chunks, blocks, sharded):
    # as dask.array.from_zarr: every block reads its part of the chunks (or shards) it covers
    layout = {"chunks": (5, 4), "shards": (10, 8)} if sharded else {"chunks": (5, 4)}
    arr = zarrx.create_array({}, shape=DATA.shape, dtype=DATA.dtype, **layout)
    arr[...] = DATA
    x = arr.to_dask(chunks=chunks)
    assert x.chunks == blocks
    np.testing.assert_array_equal(x.compute(), DATA)
    for index in np.ndindex(*x.numblocks):  # each block on its own, not just the whole
        selection = tuple(slice(sum(b[:i]), sum(b[: i + 1])) for b, i in zip(blocks, index))
        np.testing.assert_array_equal(x.blocks[index].compute(), DATA[selection])
    np.testing.assert_array_equal(x[3:19:2, 1:16].compute(), DATA[3:19:2, 1:16])


def test_from_zarr_opens_paths_and_urls(tmp_path):
    arr = zarrx.create_array(tmp_path / "data.zarr", "group/a", shape=DATA.shape, dtype=DATA.dtype, chunks=(8, 8))
    arr[...] = DATA
    x = zarrx.from_zarr(str(tmp_path / "data.zarr"), "group/a")
    np.testing.assert_array_equal(x.compute(), DATA)
    assert x.chunks == ((8, 8, 7), (8, 8, 1))
    np.testing.assert_array_equal(zarrx.from_zarr(arr).compute(), DATA)  # an Array works too
    with pytest.raises(NodeNotFoundError):
        zarrx.from_zarr(str(tmp_path / "data.zarr"), "group/missing")


@pytest.mark.parametrize(
    "dtype_name", ["bool", "int8", "uint64", "float16", "complex128", "datetime64", "string", "struct"]
)
def test_values_of_data_types(dtype_name):
    arr = zarrx.create_array({}, shape=(9, 7), dtype=DTYPES[dtype_name], chunks=(4, 3))
    values = sample_values(dtype_name, arr.dtype, arr.shape)
    arr[...] = values
    x = arr.to_dask()
    assert x.dtype == arr.dtype
    assert_same(x.compute(), values)
    copy = zarrx.to_zarr(x, {})
    assert copy.dtype == arr.dtype
    assert_same(copy[...], values)


def test_zero_dimensional_and_empty_arrays():
    scalar = zarrx.create_array({}, shape=(), dtype="float64", fill_value=2.5)
    x = scalar.to_dask()
    assert x.shape == () and x.compute() == 2.5
    assert zarrx.to_zarr(x * 2, {})[...] == 5.0

    empty = zarrx.create_array({}, shape=(0, 5), dtype="int16", chunks=(2, 2))
    x = empty.to_dask()
    assert x.shape == (0, 5) and x.compute().shape == (0, 5)
    assert zarrx.to_zarr(x, {}).shape == (0, 5)


@pytest.mark.parametrize(
    "selection",
    [
        np.s_[3:17, 2:9],
        np.s_[::3, ::-2],
        np.s_[5],
        np.s_[..., -1],
        np.s_[-7:, 4:5],
        np.s_[[1, 20, 4], 3:],
    ],
)
def test_selections_of_the_dask_array(selection):
    arr = zarrx.create_array({}, shape=DATA.shape, dtype=DATA.dtype, chunks=(5, 4), shards=(10, 8))
    arr[...] = DATA
    np.testing.assert_array_equal(arr.to_dask()[selection].compute(), DATA[selection])


def test_missing_chunks_read_as_fill_value():
    arr = zarrx.create_array({}, shape=(10, 10), dtype="float32", chunks=(5, 5), fill_value=np.nan)
    arr[:5, :5] = 1
    result = arr.to_dask().compute()
    assert np.all(result[:5, :5] == 1) and np.isnan(result[5:]).all() and np.isnan(result[:, 5:]).all()


def test_names_are_deterministic():
    arr = zarrx.create_array({}, shape=(10, 10), dtype="int8", chunks=(5, 5))
    assert arr.to_dask().name == arr.to_dask().name
    assert arr.to_dask().name != arr.to_dask(chunks=(10, 5)).name
    other = zarrx.create_array({}, shape=(10, 10), dtype="int8", chunks=(5, 5))
    assert arr.to_dask().name != other.to_dask().name


def test_import_zarrx_does_not_import_dask():
    code = "import sys, zarrx; assert 'dask' not in sys.modules; zarrx.from_zarr; assert 'dask' in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


# -- the graph: small, lazy, touching only what is needed -------------------------------------
def test_a_million_chunks_build_fast_and_a_selection_reads_only_its_chunks():
    counting = CountingStore(MemoryStore())
    arr = zarrx.create_array(counting, shape=(10_000, 10_000), dtype="float32", chunks=(10, 10), fill_value=0)
    arr[:100, :100] = np.arange(10_000, dtype="float32").reshape(100, 100)
    assert arr.nchunks == 1_000_000
    start = time.perf_counter()
    x = arr.to_dask()
    build = time.perf_counter() - start
    assert x.npartitions == 1_000_000
    assert build < 0.5, f"building the graph of 1,000,000 chunks took {build:.2f} s"

    counting.reset()
    start = time.perf_counter()
    part = x[5:25, 3:17].compute()
    elapsed = time.perf_counter() - start
    # rows 5:25 are chunk rows 0..2, columns 3:17 chunk columns 0..1, each read once
    read = sorted(key for key, _ in counting.chunk_requests())
    assert read == sorted(f"c/{i}/{j}" for i in range(3) for j in range(2))
    np.testing.assert_array_equal(part, arr[5:25, 3:17])
    assert elapsed < 2, f"computing a 20x14 selection took {elapsed:.2f} s"

    counting.reset()
    total = x[:20, :20].sum().compute()
    assert len(counting.chunk_requests()) == 4
    assert total == arr[:20, :20].sum()


def test_a_million_blocks_along_one_axis():
    arr = zarrx.create_array({}, shape=(10_000_000,), dtype="int8", chunks=(10,), fill_value=3)
    start = time.perf_counter()
    x = arr.to_dask()
    assert time.perf_counter() - start < 2
    assert x.numblocks == (1_000_000,)
    np.testing.assert_array_equal(x[123_456:123_470].compute(), np.full(14, 3, dtype="int8"))


def test_block_selections_are_made_on_demand():
    selections = BlockSelections(((4, 4, 2), (3, 5, 1)))
    assert selections[(2, 1)] == (slice(8, 10), slice(3, 8))
    assert selections[(0, 2)] == (slice(0, 4), slice(8, 9))
    assert selections.numblocks == (3, 3)


def test_the_task_handle_is_small_and_holds_no_data(tmp_path):
    arr = zarrx.create_array(
        tmp_path / "a.zarr", shape=(1000, 1000), dtype="float64", chunks=(100, 100), compressors=None
    )
    marker = np.frombuffer(b"ZARRXDATA" * 1000, dtype="uint8")
    arr[...] = np.resize(marker, 8_000_000).view("float64").reshape(1000, 1000)
    handle = arr.handle
    assert isinstance(handle, ArrayHandle)
    pickled = pickle.dumps(handle)
    assert len(pickled) < 4096
    assert b"ZARRXDATA" not in pickled
    copy = pickle.loads(pickled)
    np.testing.assert_array_equal(read_selection(copy, np.s_[:2, :2]), arr[:2, :2])

    # every task of the graph: the handle and one block's slices
    tasks = dict(arr.to_dask().__dask_graph__())
    assert len(tasks) == 100
    for task in list(tasks.values())[:3]:
        assert len(pickle.dumps(task)) < 4096


def test_tasks_use_the_batched_read_path():
    counting = CountingStore(MemoryStore())
    arr = zarrx.create_array(counting, shape=(64, 64), dtype="int32", chunks=(8, 8), shards=(32, 32))
    arr[...] = np.arange(64 * 64, dtype="int32").reshape(64, 64)
    counting.reset()
    # a dask block of a whole shard is one request, not one per inner chunk
    x = arr.to_dask()
    block = x.blocks[1, 0].compute()
    assert [key for key, _ in counting.chunk_requests()] == ["c/1/0"]
    np.testing.assert_array_equal(block, arr[32:, :32])


# -- writing ---------------------------------------------------------------------------------
def test_to_zarr_creates_the_array_with_chunks_from_the_blocks(tmp_path):
    x = da.from_array(DATA, chunks=(10, 6))
    arr = zarrx.to_zarr(x, tmp_path / "out.zarr", "a/b", dimension_names=["y", "x"], attributes={"units": "m"})
    assert arr.chunks == (10, 6) and arr.shards is None
    assert arr.shape == DATA.shape and arr.dtype == DATA.dtype
    opened = zarrx.open_array(tmp_path / "out.zarr", "a/b")
    np.testing.assert_array_equal(opened[...], DATA)
    assert opened.dimension_names == ("y", "x") and opened.attrs["units"] == "m"
    assert len(chunk_keys(LocalStore(tmp_path / "out.zarr"))) == 3 * 3

    with pytest.raises(ContainsArrayError, match="overwrite=True"):
        zarrx.to_zarr(x, tmp_path / "out.zarr", "a/b")
    again = zarrx.to_zarr(x + 1, tmp_path / "out.zarr", "a/b", overwrite=True)
    np.testing.assert_array_equal(again[...], DATA + 1)


@pytest.mark.parametrize(
    ("blocks", "create"),
    [
        ((10, 6), {"chunks": (5, 3)}),
        ((10, 6), {"chunks": (5, 3), "shards": (10, 6)}),
        ((20, 17), {"chunks": (5, 17), "shards": (10, 17)}),
        ((10, 6), {"chunks": (10, 6), "compressors": None, "dtype": "float64", "fill_value": -1}),
    ],
)
def test_to_zarr_with_chunks_and_shards(blocks, create):
    arr = zarrx.to_zarr(da.from_array(DATA, chunks=blocks), {}, **create)
    assert arr.chunks == create["chunks"] and arr.shards == create.get("shards")
    np.testing.assert_array_equal(arr[...], DATA.astype(arr.dtype))
    np.testing.assert_array_equal(arr.to_dask().compute(), DATA.astype(arr.dtype))


def test_to_zarr_refuses_blocks_that_do_not_line_up_when_asked_to_be_strict():
    x = da.from_array(DATA, chunks=(10, 6))
    with pytest.raises(ChunkAlignmentError, match=r"blocks \(0, 0\) and \(1, 0\) both write chunk \(2, 0\)"):
        zarrx.to_zarr(x, {}, chunks=(4, 6), safe_chunks=True)
    with pytest.raises(ChunkAlignmentError, match=r"same shard \(shard shape \(20, 6\)\).*align_chunks=True"):
        zarrx.to_zarr(x, {}, chunks=(5, 6), shards=(20, 6), align_chunks=False)
    with pytest.raises(ChunkAlignmentError, match=r"pass align_chunks=True"):
        zarrx.to_zarr(x, {}, chunks=(4, 6), align="error")
    for strict in ({"safe_chunks": True}, {"align_chunks": False}, {"align": "error"}):
        arr = zarrx.to_zarr(x, {}, chunks=(10, 6), **strict)  # blocks that line up are written as they are
        np.testing.assert_array_equal(arr[...], DATA)
    # by default (as dask) and when asked, blocks are rechunked onto the grid
    for aligned in ({}, {"align": "rechunk"}, {"align_chunks": True}, {"safe_chunks": True, "align_chunks": True}):
        np.testing.assert_array_equal(zarrx.to_zarr(x, {}, chunks=(4, 6), **aligned)[...], DATA)
    # irregular blocks: the first block's shape would be shared by the others
    irregular = da.from_array(DATA, chunks=((10, 7, 6), (17,)))
    with pytest.raises(ChunkAlignmentError, match=r"blocks \(1, 0\) and \(2, 0\)"):
        zarrx.to_zarr(irregular, {}, safe_chunks=True)
    with pytest.warns(UserWarning, match="The array uses irregular chunk sizes"):
        np.testing.assert_array_equal(zarrx.to_zarr(irregular, {})[...], DATA)


def test_to_zarr_argument_errors():
    x = da.from_array(DATA, chunks=(10, 6))
    # shards without chunks: the first block (dividing the shard) is the chunk; the blocks still
    # have to line up with the shards
    with pytest.raises(ChunkAlignmentError, match=r"shard shape \(20, 12\)"):
        zarrx.to_zarr(x, {}, shards=(20, 12), safe_chunks=True)
    with pytest.raises(UsageError, match="shape"):
        zarrx.to_zarr(x, {}, shape=(1, 2))
    with pytest.raises(UsageError, match="align"):
        zarrx.to_zarr(x, {}, align="lock")
    target = zarrx.create_array({}, shape=(30, 30), dtype="int32", chunks=(10, 6))
    with pytest.raises(UsageError, match="region"):
        zarrx.to_zarr(x, target.store, region=(slice(0, 20), slice(0, 17)))  # wrong shape
    with pytest.raises(UsageError, match="step 1"):
        zarrx.to_zarr(x, target.store, region=(slice(0, 46, 2), slice(0, 17)))
    with pytest.raises(UsageError, match="only for creating"):
        zarrx.to_zarr(x, target.store, region=(slice(0, 23), slice(0, 17)), chunks=(5, 5))
    with pytest.raises(UsageError, match="compute_chunk_sizes"):
        zarrx.to_zarr(x[x[:, 0] > 100], {})


@pytest.mark.parametrize("sharded", [False, True], ids=["chunked", "sharded"])
def test_region_writes_aligned_with_the_grid(sharded):
    layout = {"chunks": (5, 3), "shards": (10, 6)} if sharded else {"chunks": (10, 6)}
    target = zarrx.create_array({}, shape=(40, 30), dtype="int32", fill_value=-1, **layout)
    region = np.s_[10:33, 6:23]
    # blocks of 10x6 starting on the grid; the last ones end inside a chunk, which only they touch
    zarrx.to_zarr(da.from_array(DATA, chunks=(10, 6)), target.store, region=region)
    np.testing.assert_array_equal(target[...], filled((40, 30), -1, region, DATA))


def test_region_write_keeps_the_rest_of_partly_written_chunks():
    target = zarrx.create_array({}, shape=(20,), dtype="int64", chunks=(10,), fill_value=0)
    target[...] = np.arange(20)
    # one block from 3 to 17: it alone touches chunks 0 and 1, reading and merging them
    zarrx.to_zarr(da.full(14, -5, chunks=14, dtype="int64"), target.store, region=(slice(3, 17),))
    np.testing.assert_array_equal(target[...], np.r_[0:3, [-5] * 14, 17:20])


@pytest.mark.parametrize("sharded", [False, True], ids=["chunked", "sharded"])
def test_misaligned_region_writes_are_refused_naming_the_blocks(sharded):
    layout = {"chunks": (5, 3), "shards": (10, 6)} if sharded else {"chunks": (10, 6)}
    kind = "shard" if sharded else "chunk"
    target = zarrx.create_array({}, shape=(40, 30), dtype="int32", fill_value=-1, **layout)
    before = dict(target.store.mapping)
    x = da.from_array(DATA, chunks=(10, 6))
    with pytest.raises(ChunkAlignmentError) as raised:
        zarrx.to_zarr(x, target.store, region=np.s_[5:28, 6:23], safe_chunks=True)
    message = str(raised.value)
    # the boundary between block rows 0 and 1 is at 5 + 10 = 15, inside chunk row 1
    assert f"blocks (0, 0) and (1, 0) both write {kind} (1, 1)" in message
    assert f"{kind} shape (10, 6)" in message and "align_chunks=True" in message
    assert target.store.mapping == before  # nothing was written

    with pytest.raises(ChunkAlignmentError, match=rf"blocks \(0, 0\) and \(0, 1\) both write {kind} \(1, 2\)"):
        zarrx.to_zarr(x, target.store, region=np.s_[10:33, 7:24], align_chunks=False)
    assert target.store.mapping == before


@pytest.mark.parametrize(
    ("region", "blocks"),
    [
        (np.s_[5:28, 6:23], (10, 6)),
        (np.s_[1:24, 3:20], (7, 5)),
        (np.s_[17:40, 13:30], ((1, 22), (16, 1))),
        (np.s_[0:23, 0:17], ((3, 3, 3, 14), (17,))),
    ],
)
@pytest.mark.parametrize("sharded", [False, True], ids=["chunked", "sharded"])
def test_misaligned_region_writes_are_rechunked_when_asked(region, blocks, sharded):
    layout = {"chunks": (5, 3), "shards": (10, 6)} if sharded else {"chunks": (10, 6)}
    target = zarrx.create_array({}, shape=(40, 30), dtype="int32", fill_value=-1, **layout)
    target[...] = -np.arange(40 * 30, dtype="int32").reshape(40, 30)
    expected = target[...]
    expected[region] = DATA
    zarrx.to_zarr(da.from_array(DATA, chunks=blocks), target.store, region=region, align="rechunk")
    np.testing.assert_array_equal(target[...], expected)


def test_to_zarr_into_an_array_object(tmp_path):
    target = zarrx.create_array(tmp_path / "t.zarr", shape=(23, 34), dtype="int32", chunks=(10, 17), fill_value=0)
    x = da.from_array(DATA, chunks=(10, 17))
    assert zarrx.to_zarr(x, target, region=np.s_[:, 17:]) is target
    np.testing.assert_array_equal(target[:, 17:], DATA)
    zarrx.to_zarr(da.from_array(np.c_[DATA, DATA], chunks=10), target, align="rechunk")  # all of it
    np.testing.assert_array_equal(target[...], np.c_[DATA, DATA])
    with pytest.raises(ReadOnlyError, match="read-only"):
        zarrx.to_zarr(x, zarrx.open_array(tmp_path / "t.zarr", mode="r"), region=np.s_[:, :17])


def test_repeating_a_write_writes_again():
    target = zarrx.create_array({}, shape=DATA.shape, dtype=DATA.dtype, chunks=(10, 6), fill_value=0)
    x = da.from_array(DATA, chunks=(10, 6))
    first = zarrx.to_zarr(x, target, compute=False)
    second = zarrx.to_zarr(x, target, compute=False)
    assert first.name != second.name
    first.compute()
    target[...] = 0
    second.compute()
    np.testing.assert_array_equal(target[...], DATA)


def test_compute_false_returns_what_dask_array_store_returns():
    store = MemoryStore()
    x = da.from_array(DATA, chunks=(10, 6))
    lazy = zarrx.to_zarr(x, store, compute=False)
    # dask.array.store(compute=False): a dask array with the source's blocks whose tasks write
    expected = da.store(x, np.empty(DATA.shape, DATA.dtype), compute=False)
    assert isinstance(lazy, da.Array) and isinstance(expected, da.Array)
    assert lazy.chunks == expected.chunks == x.chunks and lazy.dtype == expected.dtype
    assert zarrx.open_array(store).shape == DATA.shape  # the metadata is written at once
    assert chunk_keys(store) == []  # the data only when computed
    assert lazy.compute().size == expected.compute().size == 0  # nothing held, as dask's
    np.testing.assert_array_equal(zarrx.open_array(store)[...], DATA)

    # region writes too, and several together
    target = zarrx.create_array({}, shape=(46, 17), dtype="int32", chunks=(23, 17), fill_value=0)
    writes = [
        zarrx.to_zarr(da.from_array(DATA, chunks=23), target.store, region=np.s_[:23], compute=False),
        zarrx.to_zarr(da.from_array(-DATA, chunks=23), target.store, region=np.s_[23:], compute=False),
    ]
    dask.compute(*writes)
    np.testing.assert_array_equal(target[...], np.concatenate([DATA, -DATA]))


def test_every_chunk_is_written_once_without_reading():
    counting = CountingStore(MemoryStore())
    x = da.from_array(DATA, chunks=(10, 6))
    delayed = zarrx.to_zarr(x, counting, compute=False)
    counting.reset()
    delayed.compute()
    assert counting.chunk_requests() == []  # whole chunks: nothing to merge
    assert sorted(counting.writes) == sorted(f"c/{i}/{j}" for i in range(3) for j in range(3))


def test_write_empty_chunks_is_respected():
    x = da.zeros((20, 20), chunks=10, dtype="int8")
    x[:10, :10] = 1
    store = MemoryStore()
    zarrx.to_zarr(x, store, fill_value=0)
    assert chunk_keys(store) == ["c/0/0"]
    everything = MemoryStore()
    zarrx.to_zarr(x, everything, fill_value=0, write_empty_chunks=True)
    assert len(chunk_keys(everything)) == 4


def test_progress_bar():
    arr = zarrx.create_array({}, shape=DATA.shape, dtype=DATA.dtype, chunks=(5, 5))
    arr[...] = DATA
    out = io.StringIO()
    with ProgressBar(out=out, minimum=0, dt=0.001):
        total = arr.to_dask().sum().compute()
        zarrx.to_zarr(arr.to_dask() + 1, {})
    assert total == DATA.sum()
    assert "100% Completed" in out.getvalue()


# -- a real cluster of worker processes ------------------------------------------------------
def test_distributed_cluster_with_worker_processes(tmp_path):
    distributed = pytest.importorskip("distributed")
    data = np.random.default_rng(0).standard_normal((120, 90))
    url = str(tmp_path / "cluster.zarr")
    with (
        distributed.LocalCluster(
            n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None, silence_logs=40
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        # blocks of 30x30 onto shards of 30x30 holding 10x10 chunks: written on both workers
        x = da.from_array(data, chunks=(30, 30))
        arr = zarrx.to_zarr(x, url, "a", chunks=(10, 10), shards=(30, 30))
        np.testing.assert_array_equal(zarrx.open_array(url, "a")[...], data)

        delayed = zarrx.to_zarr(x * 2, url, "b", compute=False)
        future = client.compute(delayed)
        distributed.progress(future)  # the text progress bar in a script; must not break anything
        assert future.result().size == 0  # dask.array.store(compute=False)'s empty result
        np.testing.assert_array_equal(zarrx.open_array(url, "b")[...], data * 2)

        y = zarrx.from_zarr(url, "a")
        assert y.chunks == ((30,) * 4, (30,) * 3)
        total = client.compute(y.sum())
        distributed.progress(total)
        np.testing.assert_allclose(total.result(), data.sum())
        np.testing.assert_array_equal(y[10:95, ::7].compute(), data[10:95, ::7])

        # a misaligned region write is rechunked, then written by both workers
        zarrx.to_zarr(da.from_array(-data[:50, :50], chunks=20), url, "a", region=np.s_[5:55, 5:55], align="rechunk")
        expected = data.copy()
        expected[5:55, 5:55] = -data[:50, :50]
        np.testing.assert_array_equal(arr[...], expected)
        workers = client.run(lambda: True)
        assert len(workers) == 2


def test_writes_to_a_memory_store_refuse_to_leave_the_process():
    """A worker process would write into a copy of an in-memory store: the data would be lost silently."""
    import pickle

    from zarrx.errors import StoreError

    x = da.ones((4, 4), chunks=(2, 2), dtype="int8")
    delayed = zarrx.to_zarr(x, MemoryStore(), compute=False)
    with pytest.raises(StoreError, match="in-memory store"):
        pickle.dumps(dict(delayed.dask))
    store = MemoryStore()
    zarrx.to_zarr(x, store)  # the threaded scheduler never pickles
    assert zarrx.open_array(store)[...].sum() == 16


def test_writing_more_than_fits_streams_block_by_block(tmp_path):
    """A 256 MiB array written from a lazy dask array never holds more than a few blocks."""
    import tracemalloc

    x = da.random.default_rng(0).random((4096, 8192), chunks=(256, 1024)).astype("float64")  # 256 MiB, 2 MiB blocks
    tracemalloc.start()
    try:
        with dask.config.set(scheduler="threads", num_workers=2):
            zarrx.to_zarr(x, str(tmp_path / "big.zarr"), compressors=None)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 2**20, f"peak {peak / 2**20:.0f} MiB for a 256 MiB write"
    assert zarrx.open_array(str(tmp_path / "big.zarr")).nchunks_initialized == 16 * 8


# -- dask.array.to_zarr's keywords and results ------------------------------------------------------
def test_return_stored_gives_the_stored_values_with_the_source_blocks():
    x = da.from_array(DATA, chunks=(10, 6))
    target = zarrx.create_array({}, shape=DATA.shape, dtype="int16", chunks=(10, 6), fill_value=0)
    lazy = zarrx.to_zarr(x * 1000, target, compute=False, return_stored=True)
    assert lazy.chunks == x.chunks and chunk_keys(target.store) == []
    np.testing.assert_array_equal(lazy.compute(), (DATA * 1000).astype("int16"))  # what the store holds
    stored = zarrx.to_zarr(-x, target, return_stored=True)
    assert isinstance(stored, da.Array) and stored.chunks == x.chunks
    target[...] = 0
    np.testing.assert_array_equal(stored.compute(), 0)  # read from the store when computed


def test_dask_keywords_component_and_mode(tmp_path):
    x = da.from_array(DATA, chunks=(10, 6))
    zarrx.to_zarr(x, tmp_path / "d.zarr", component="nested/a")
    np.testing.assert_array_equal(zarrx.from_zarr(tmp_path / "d.zarr", component="nested/a").compute(), DATA)
    with pytest.raises(ContainsArrayError):
        zarrx.to_zarr(x, tmp_path / "d.zarr", component="nested/a", mode="w-")
    zarrx.to_zarr(-x, tmp_path / "d.zarr", component="nested/a", mode="w")
    np.testing.assert_array_equal(zarrx.open_array(tmp_path / "d.zarr", "nested/a")[...], -DATA)
    with pytest.raises(UsageError, match="Cannot use mode 'r'"):
        zarrx.to_zarr(x, tmp_path / "d.zarr", component="b", mode="r")
    with pytest.raises(UsageError, match="component"):
        zarrx.to_zarr(x, tmp_path / "d.zarr", "a", component="b")
    assert zarrx.from_zarr(tmp_path / "d.zarr", component="nested/a", name="mine").name == "mine"


@pytest.mark.parametrize(
    ("blocks", "shards", "chunks"),
    [((10, 6), (20, 12), (10, 6)), ((4, 6), (10, 12), (2, 6)), ((23, 17), (23, 17), (23, 17))],
)
def test_sharded_writes_choose_chunks_when_not_given(blocks, shards, chunks):
    x = da.from_array(DATA, chunks=blocks)
    arr = zarrx.to_zarr(x, {}, shards=shards, align_chunks=True)
    assert arr.shards == shards and arr.chunks == chunks  # the first block, or what divides it and the shard
    np.testing.assert_array_equal(arr[...], DATA)


def test_irregular_blocks_are_regularised_with_dasks_warning_when_aligning():
    irregular = da.from_array(DATA, chunks=((10, 7, 6), (17,)))
    with pytest.warns(UserWarning, match="The array uses irregular chunk sizes"):
        lazy = zarrx.to_zarr(irregular, {}, compute=False, align_chunks=True)
    assert lazy.chunks == ((10, 10, 3), (17,))


def test_safe_chunks_false_rechunks_too():
    x = da.from_array(DATA, chunks=(10, 6))
    with pytest.raises(ChunkAlignmentError):
        zarrx.to_zarr(x, {}, chunks=(4, 6), safe_chunks=True)
    np.testing.assert_array_equal(zarrx.to_zarr(x, {}, chunks=(4, 6), safe_chunks=False)[...], DATA)


def test_dask_performance_warnings_for_partial_chunks_and_blocks_past_the_chunk_size():
    from dask.array.core import PerformanceWarning

    target = zarrx.create_array({}, shape=(30,), dtype="int64", chunks=(3,), shards=(6,), fill_value=0)
    with pytest.warns(PerformanceWarning, match="writes part of a shard along axis 0"):
        zarrx.to_zarr(da.arange(5, chunks=5), target, region=(slice(1, 6),))
    with dask.config.set({"array.chunk-size": 1}), pytest.warns(PerformanceWarning, match="array.chunk-size"):
        zarrx.to_zarr(da.arange(30, chunks=10), target, align_chunks=True)
    np.testing.assert_array_equal(target[:], np.arange(30))
