"""Select first, then chunk: ``ds.zarrx.chunk()`` after ``.isel``/``.sel`` on a dataset opened with
``engine="zarrx"`` (zarrx/xarray/stored_chunks.py): blocks on the stored grid, nothing read
before compute, each selected chunk read once, values as engine="zarr" gives them."""

from __future__ import annotations

import dask
import numpy as np
import pytest
import xarray as xr

import zarrx
from zarrx.errors import UsageError
from zarrx.storage import MemoryStore, MetricsStore
from zarrx.xarray.stored_chunks import stored_block_sizes

READS = ("get", "get_many", "get_ranges")

T = np.arange(100 * 6, dtype="f4").reshape(100, 6)
S = np.arange(100 * 6, dtype="f8").reshape(100, 6) / 7


def _write(store):
    root = zarrx.create_group(store, overwrite=True)
    root.create_array("time", shape=(100,), chunks=(100,), dtype="i8", dimension_names=["time"])[:] = np.arange(100)
    root.create_array("t", shape=(100, 6), chunks=(10, 3), dtype="f4", dimension_names=["time", "x"])[:] = T
    sharded = root.create_array(
        "s", shape=(100, 6), chunks=(5, 3), shards=(20, 6), dtype="f8", dimension_names=["time", "x"]
    )
    sharded[:] = S
    return root


@pytest.fixture
def metrics():
    store = MetricsStore(MemoryStore())
    _write(store)
    return store


@pytest.fixture(scope="module")
def local_path(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("stored-chunks") / "data.zarr")
    zarrx.consolidate_metadata(_write(path).store)
    return path


def _reads(store: MetricsStore) -> int:
    summary = store.summary()
    return sum(summary[name].requests for name in READS)


def _open(store):
    return xr.open_dataset(store, engine="zarrx", consolidated=False)


# -- the blocks --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "selection, t_blocks, s_blocks",
    [
        ({}, (10,) * 10, (20,) * 5),
        ({"time": slice(5, 100)}, (5,) + (10,) * 9, (15, 20, 20, 20, 20)),
        ({"time": slice(5, 38)}, (5, 10, 10, 8), (15, 18)),
        ({"time": slice(20, 30)}, (10,), (10,)),
        ({"time": slice(3, 60, 4)}, (2, 3, 2, 3, 2, 3), (5, 5, 5)),  # stored 3 7 | 11 15 19 | ...
        ({"time": slice(95, 5, -10)}, (1,) * 9, (2, 2, 2, 2, 1)),  # descending: 95 85 | 75 65 | ...
        ({"time": [1, 2, 15, 33, 34, 35]}, (2, 1, 3), (3, 3)),
        ({"time": slice(0, 0)}, (0,), (0,)),
    ],
)
def test_blocks_follow_the_stored_chunks_of_the_selection(metrics, selection, t_blocks, s_blocks):
    chunked = _open(metrics).isel(selection).zarrx.chunk()
    assert chunked.t.chunks == (t_blocks, (3, 3))
    assert chunked.s.chunks == (s_blocks, (6,))  # the shards, not the inner chunks


def test_a_selection_of_a_selection_counts_from_the_stored_start(metrics):
    ds = _open(metrics)
    twice = ds.isel(time=slice(5, 100)).isel(time=slice(10, 40), x=slice(1, 6))
    assert twice.zarrx.chunk().t.chunks == ((5, 10, 10, 5), (2, 3))
    labels = ds.sel(time=slice(12, 47))  # label-based, through the time index
    assert labels.zarrx.chunk().t.chunks == ((8, 10, 10, 8), (3, 3))


def test_an_integer_selection_drops_its_dimension(metrics):
    chunked = _open(metrics).isel(x=4, time=slice(7, 30)).zarrx.chunk()
    assert chunked.t.dims == ("time",) and chunked.t.chunks == ((3, 10, 10),)


@pytest.mark.parametrize(
    "multiples, t_blocks, x_blocks",
    [
        ({"time": 2}, (15, 20, 20, 20, 20), (3, 3)),
        ({"time": 3, "x": 2}, (25, 30, 30, 10), (6,)),
        ({"time": -1}, (95,), (3, 3)),
    ],
)
def test_multiples_group_stored_chunks_and_keep_their_boundaries(metrics, multiples, t_blocks, x_blocks):
    chunked = _open(metrics).isel(time=slice(5, 100)).zarrx.chunk(multiples)
    assert chunked.t.chunks == (t_blocks, x_blocks)


def test_multiples_are_checked(metrics):
    ds = _open(metrics)
    with pytest.raises(UsageError, match=r"\['lat'\] are not dimensions"):
        ds.zarrx.chunk({"lat": 2})
    with pytest.raises(UsageError, match=r"multiples\['time'\]: expected the number of stored chunks"):
        ds.zarrx.chunk({"time": 0})


def test_a_rectilinear_grid_cuts_at_its_own_boundaries():
    store = MemoryStore()
    root = zarrx.create_group(store)
    root.create_array("r", shape=(30,), chunks=((4, 6, 10, 10),), dtype="i2", dimension_names=["y"])[:] = np.arange(30)
    ds = _open(store)
    assert ds.isel(y=slice(2, 25)).zarrx.chunk().r.chunks == ((2, 6, 10, 5),)
    assert stored_block_sizes(ds.r.isel(y=slice(2, 25)).variable, {"y": 2}) == {"y": (8, 15)}


def test_variables_of_unknown_origin_use_their_preferred_chunks_or_one_block(metrics):
    ds = _open(metrics).isel(time=slice(5, 100))
    ds = ds.assign(loaded=ds.t.load(), plain=(("time",), np.zeros(95)))
    chunked = ds.zarrx.chunk()
    assert chunked.loaded.chunks == ((10,) * 9 + (5,), (3, 3))  # from encoding["preferred_chunks"], counted from 0
    assert chunked.plain.chunks == ((95,),)
    already = ds.chunk({"time": 7}).zarrx.chunk()
    assert already.t.chunks[0][:2] == (7, 7)  # a chunked variable is left as it is


def test_index_variables_stay_in_memory(metrics):
    chunked = _open(metrics).isel(time=slice(5, 100)).zarrx.chunk()
    assert chunked.time.variable.chunks is None and chunked.indexes["time"][0] == 5


# -- lazy and cheap ------------------------------------------------------------------------------------
def test_nothing_is_read_before_compute_and_each_selected_chunk_once(metrics):
    ds = _open(metrics)
    metrics.reset()
    part = ds[["t"]].isel(time=slice(5, 38), x=slice(0, 3)).zarrx.chunk()
    graph = part.t.data.__dask_graph__()
    assert _reads(metrics) == 0
    assert len(graph) <= part.t.data.npartitions + 1  # one task per block, and the array it reads from
    values = part.t.values
    np.testing.assert_array_equal(values, T[5:38, 0:3])
    assert _reads(metrics) == 4  # chunks 0..3 along time, chunk 0 along x: one read each


def test_the_graph_follows_the_selection_not_the_array(metrics):
    ds = _open(metrics)
    whole = ds.zarrx.chunk().t.data
    part = ds.isel(time=slice(40, 60)).zarrx.chunk().t.data
    assert whole.npartitions == 20 and part.npartitions == 4
    assert len(part.__dask_graph__()) < len(whole.__dask_graph__()) / 3


def test_a_sharded_variable_reads_each_selected_shard_in_one_task(metrics):
    ds = _open(metrics)
    metrics.reset()
    part = ds.s.isel(time=slice(25, 60)).zarrx.chunk()
    assert _reads(metrics) == 0
    (computed,) = dask.compute(part)
    np.testing.assert_array_equal(computed.values, S[25:60])
    # each block is inside one shard, so no shard index is read by two tasks: two shards (20:40, 40:60),
    # one index read and one batch of inner-chunk ranges each at most
    summary = metrics.summary()
    assert summary["get_ranges"].calls + summary["get"].calls + summary["get_many"].calls <= 2 * 2


def test_values_equal_engine_zarr(local_path):
    ours = xr.open_dataset(local_path, engine="zarrx")
    theirs = xr.open_dataset(local_path, engine="zarr")
    for selection in ({"time": slice(5, 100)}, {"time": slice(3, 60, 4), "x": [0, 5]}, {"x": 2}):
        chunked = ours.isel(selection).zarrx.chunk()
        xr.testing.assert_identical(chunked.compute(), theirs.isel(selection).compute())
        assert chunked.t.chunks is not None


# -- DataArray and DataTree ----------------------------------------------------------------------------
def test_the_dataarray_accessor_chunks_the_array_and_its_coordinates(metrics):
    ds = _open(metrics)
    array = ds.t.assign_coords(other=ds.s.isel(x=0)).isel(time=slice(5, 45))
    chunked = array.zarrx.chunk()
    assert chunked.chunks == ((5, 10, 10, 10, 5), (3, 3))
    assert chunked.other.chunks == ((15, 20, 5),)  # along the shards of s
    assert chunked.encoding == array.encoding and chunked.name == "t"
    np.testing.assert_array_equal(chunked.values, T[5:45])
    assert array.zarrx.chunk({"time": 2}).chunks == ((15, 20, 5), (3, 3))
    assert array.isel(x=0).zarrx.chunk({"time": -1}).chunks == ((40,),)
    with pytest.raises(UsageError, match="not dimensions"):
        array.zarrx.chunk({"lat": 2})


def test_the_datatree_accessor_chunks_every_node():
    store = MemoryStore()
    root = _write(store)
    child = root.create_group("child")
    child.create_array("u", shape=(100,), chunks=(25,), dtype="i4", dimension_names=["time"])[:] = np.arange(100)
    tree = xr.open_datatree(store, engine="zarrx", consolidated=False)
    chunked = tree.isel(time=slice(10, 60)).zarrx.chunk()
    assert chunked["/"].t.chunks == ((10,) * 5, (3, 3))
    assert chunked["/child"].u.chunks == ((15, 25, 10),)
    np.testing.assert_array_equal(chunked["/child"].u.values, np.arange(10, 60))
    with pytest.raises(UsageError, match="not dimensions"):
        tree.zarrx.chunk({"nope": 1})
