"""zarrx.dask.lazy: ordinary dask arrays reading a stored array -- built through dask's constructor,
sliced by dask, with graphs that follow a selection given when the array is made (``region=``);
million-chunk arrays, irregular axes, fusion, pickling, annotations, a cluster of worker processes.

(Random selections against dask and NumPy: tests/test_dask_lazy_properties.py; nothing of dask
patched: tests/test_process_guest.py.)
"""

from __future__ import annotations

import pickle

import dask
import dask.array as da
import numpy as np
import pytest

import zarrx
from zarrx.dask.axes import RegularAxis, TableAxis, axis_from_sizes
from zarrx.dask.lazy import read_layer
from zarrx.errors import NameNotFoundError, SelectionError, UsageTypeError
from zarrx.storage import MemoryStore

from .counting import CountingStore

VALUES = np.arange(30 * 8, dtype="int32").reshape(30, 8)


def optimized_tasks(x: da.Array) -> int:
    """How many tasks computing ``x`` runs: its graph culled and fused, as compute() does."""
    (graph,) = dask.optimize(x)
    return len(graph.__dask_graph__())


def chunk_reads(counting: CountingStore) -> list[str]:
    return sorted(key for key, _ in counting.chunk_requests())


@pytest.fixture
def small():
    arr = zarrx.create_array({}, shape=VALUES.shape, chunks=(4, 3), dtype=VALUES.dtype)
    arr[...] = VALUES
    return arr


@pytest.fixture
def counted():
    counting = CountingStore(MemoryStore())
    arr = zarrx.create_array(counting, shape=VALUES.shape, chunks=(3, 8), dtype=VALUES.dtype, dimension_names=["t", "x"])
    arr[...] = VALUES
    counting.reset()
    return counting, arr


@pytest.fixture(scope="module")
def giant():
    """1,000,000 chunks along the first axis, ten of them written, in a counting store."""
    counting = CountingStore(MemoryStore())
    arr = zarrx.create_array(counting, shape=(1_000_000, 4, 4), chunks=(1, 4, 4), dtype="float32", fill_value=0)
    arr[:10] = np.arange(160, dtype="float32").reshape(10, 4, 4)
    return counting, arr


# -- a million chunks -------------------------------------------------------------------------
def test_a_million_chunks_are_a_plain_dask_array_of_one_read_layer(giant):
    _, arr = giant
    x = arr.to_dask()
    assert type(x) is da.Array
    assert x.shape == arr.shape and x.numblocks == (1_000_000, 1, 1) and x.npartitions == 1_000_000
    assert x.chunksize == (1, 4, 4) and x.size == arr.size and len(x) == 1_000_000
    assert list(x.dask.layers) == [x.name] and read_layer(x) is x.dask.layers[x.name]


def test_a_region_is_a_graph_of_the_chunks_it_touches(giant):
    counting, arr = giant
    y = zarrx.from_zarr(arr, region=(slice(0, 10),))
    assert y.chunks == ((1,) * 10, (4,), (4,)) and len(y.dask) == 10
    total = y.sum()
    assert optimized_tasks(total) < 20  # ten reads (fused with their partial sums) and a tree of sums
    counting.reset()
    assert float(total.compute()) == float(np.arange(160).sum())
    assert chunk_reads(counting) == sorted(f"c/{i}/0/0" for i in range(10))


def test_regions_with_integers_ellipsis_negative_indices_steps_and_new_axes(giant):
    _, arr = giant
    point = arr.to_dask(region=(7, 2, 3))
    assert point.shape == () and len(point.dask) == 1 and float(point.compute()) == float(arr[7, 2, 3])
    tail = arr.to_dask(region=(slice(-20, None), Ellipsis, slice(1, 3)))
    assert tail.shape == (20, 4, 2) and len(tail.dask) == 20
    np.testing.assert_array_equal(tail[5].compute(), arr[999_985, :, 1:3])
    stepped = arr.to_dask(region=(slice(2, 12, 3), None))
    assert stepped.shape == (4, 1, 4, 4) and len(stepped.__dask_graph__()) < 30
    np.testing.assert_array_equal(stepped.compute(), arr[2:12:3][:, None])
    backwards = arr.to_dask(region=slice(9, 0, -2))
    assert backwards.chunks == ((1,) * 5, (4,), (4,))
    np.testing.assert_array_equal(backwards.compute(), arr[9:0:-2])


def test_regions_by_dimension_name_keep_blocks_on_the_stored_grid(counted):
    counting, arr = counted
    y = zarrx.from_zarr(arr, region={"t": slice(4, 20)})
    assert y.chunks == ((2, 3, 3, 3, 3, 2), (8,))  # chunks of 3: blocks end on chunk boundaries
    np.testing.assert_array_equal(y.compute(), VALUES[4:20])
    assert chunk_reads(counting) == [f"c/{i}/0" for i in range(1, 7)]  # each touched chunk once
    assert arr.to_dask(region={-1: 5}).shape == (30,)


@pytest.mark.parametrize(
    ("region", "error"),
    [
        ((30,), SelectionError),
        ((0, 9), SelectionError),
        (([1, 2],), UsageTypeError),
        ({"nope": 1}, NameNotFoundError),
    ],
)
def test_bad_regions_name_the_array_and_the_region(small, region, error):
    with pytest.raises(error, match="region"):
        small.to_dask(region=region)
    if error is SelectionError:  # the IndexError dask (and NumPy) raise for the same index
        with pytest.raises(IndexError):
            da.from_array(VALUES, chunks=(4, 3))[region]


# -- slices are dask's: shared reads ---------------------------------------------------------------
def test_a_slice_is_dasks_own_and_shares_the_read_tasks(counted):
    counting, arr = counted
    x = zarrx.from_zarr(arr)
    part = x[4:20]
    assert x.name in part.dask.layers  # dask's slice over the one read layer
    for result in (x[1:] - x[:-1], da.diff(x, axis=0)):
        counting.reset()
        np.testing.assert_array_equal(result.compute(), np.diff(VALUES, axis=0))
        assert chunk_reads(counting) == sorted(f"c/{i}/0" for i in range(10))  # each chunk once
    counting.reset()
    whole, first = dask.compute(x.sum(), x[:10].sum())
    assert (whole, first) == (VALUES.sum(), VALUES[:10].sum())
    assert chunk_reads(counting) == sorted(f"c/{i}/0" for i in range(10))


def test_annotations_survive_slicing(small):
    with dask.annotate(retries=3, resources={"memory": 1}):
        x = small.to_dask()
    y = x[3:9] * 2
    assert read_layer(y).annotations == {"retries": 3, "resources": {"memory": 1}}
    with dask.annotate(priority=7):
        z = small.to_dask(region=(slice(3, 9),))
    assert read_layer(z).annotations == {"priority": 7}


def as_plain_dask(x: da.Array) -> da.Array:
    """The same graph as an array made by dask's own constructor."""
    return da.Array(x.dask, x.name, x.chunks, meta=x._meta)


def test_whole_array_work_is_dasks_own_graph(small):
    x = small.to_dask()
    plain = as_plain_dask(x)
    assert x[:] is x and x[...] is x
    for make in (lambda a: a.sum(), lambda a: (a * 2 + 1).mean(axis=0), lambda a: a.T @ a):
        assert optimized_tasks(make(x)) == optimized_tasks(make(plain))
        np.testing.assert_array_equal(make(x).compute(), make(plain).compute())


def test_elementwise_work_after_a_region_fuses_with_the_reads(small):
    part = small.to_dask(region=(slice(5, 17), slice(2, None)))
    assert part.numblocks == (4, 3)
    result = (part * 2 - 1).sum(axis=1)
    # each read fused with the arithmetic and its partial sum: 12 tasks, and 4 to combine them
    assert optimized_tasks(result) == optimized_tasks((as_plain_dask(part) * 2 - 1).sum(axis=1)) == 16
    np.testing.assert_array_equal(result.compute(), (VALUES[5:17, 2:] * 2 - 1).sum(axis=1))


@pytest.mark.parametrize(
    "index",
    [[3, 1, 20], np.array([0, 29]), (slice(None), np.array([True, False] * 4)), VALUES[:, 0] % 3 == 0],
    ids=["list", "array", "mask-axis", "mask"],
)
def test_every_index_is_dasks(small, index):
    x = small.to_dask()
    plain = da.from_array(VALUES, chunks=x.chunks)
    ours, theirs = x[index], plain[index]
    assert ours.chunks == theirs.chunks
    np.testing.assert_array_equal(ours.compute(), VALUES[index])


def test_out_of_bounds_indices_raise_dasks_errors(small):
    x, plain = small.to_dask(), da.from_array(VALUES, chunks=(4, 3))
    for index in (30, (0, -9), (0, 0, 0)):
        with pytest.raises(IndexError) as ours:
            x[index]
        with pytest.raises(IndexError) as theirs:
            plain[index]
        assert str(ours.value) == str(theirs.value)


def test_an_empty_reversed_region_starting_before_the_array_is_empty(small):
    # dask issue 10555: dask's own slicing selects elements here; NumPy, and a region, none
    assert small.to_dask(region=slice(-40, None, -1)).shape == VALUES[-40::-1].shape == (0, 8)


def test_assignment_is_dasks(small):
    x = small.to_dask()
    x[2] = -1
    expected = VALUES.copy()
    expected[2] = -1
    np.testing.assert_array_equal(x[1:4].compute(), expected[1:4])
    np.testing.assert_array_equal(small[...], VALUES)  # the stored array is untouched


def test_a_pickled_or_copied_array_keeps_its_graph(small):
    import copy as copying

    y = small.to_dask()[3:20]
    for copy in (pickle.loads(pickle.dumps(y)), copying.deepcopy(y)):
        assert copy.chunks == y.chunks and copy.name == y.name
        assert optimized_tasks(copy.sum()) == optimized_tasks(y.sum())
        np.testing.assert_array_equal(copy.compute(), VALUES[3:20])


def test_names_follow_the_selection(small):
    x = small.to_dask()
    region = small.to_dask(region=(slice(3, 9),))
    assert region.name == small.to_dask(region=(slice(3, 9),)).name != small.to_dask(region=(slice(3, 10),)).name
    assert x[3:9].name == x[3:9].name != region.name
    other = zarrx.create_array({}, shape=VALUES.shape, chunks=(4, 3), dtype="int32")
    assert other.to_dask(region=(slice(3, 9),)).name != region.name


# -- block layouts ------------------------------------------------------------------------------
def axes_of(x: da.Array):
    """The axis descriptions of the read layer's block selections."""
    (selections,) = read_layer(x).io_deps.values()
    return selections.axes


def test_irregular_blocks_keep_a_table_of_edges():
    arr = zarrx.create_array({}, shape=(12, 5), chunks=(1, 5), dtype="int16")
    arr[...] = np.arange(60).reshape(12, 5)
    x = zarrx.from_zarr(arr, chunks=((2, 7, 3), -1))
    assert isinstance(axes_of(x)[0], TableAxis)
    y = zarrx.from_zarr(arr, chunks=((2, 7, 3), -1), region=slice(1, 10))
    assert y.chunks == ((1, 7, 1), (5,)) == x[1:10].chunks and isinstance(axes_of(y)[0], TableAxis)
    np.testing.assert_array_equal(y.compute(), arr[1:10])


def test_a_rectilinear_grid_is_a_table_of_edges():
    arr = zarrx.create_array({}, shape=(26, 6), chunks=((16, 4, 6), (2, 4)), dtype="int16")
    arr[...] = np.arange(26 * 6).reshape(26, 6)
    x = arr.to_dask()
    assert x.chunks == ((16, 4, 6), (2, 4)) and isinstance(axes_of(x)[0], TableAxis)
    y = arr.to_dask(region=(slice(10, 22), 1))
    assert y.chunks == ((6, 4, 2),) and len(y.dask) == 3
    np.testing.assert_array_equal(y.compute(), arr[10:22, 1])


def test_blocks_of_size_zero_among_others_are_left_to_dask():
    axis = axis_from_sizes((3, 0, 2))
    assert axis.chunks == (3, 0, 2)
    arr = zarrx.create_array({}, shape=(5,), chunks=(1,), dtype="int8")
    arr[...] = np.arange(5)
    x = zarrx.from_zarr(arr, chunks=((3, 0, 2),))
    plain = da.from_array(np.arange(5, dtype="int8"), chunks=((3, 0, 2),))
    assert x[1:4].chunks == plain[1:4].chunks == ((2, 1),)
    np.testing.assert_array_equal(x[1:4].compute(), [1, 2, 3])


@pytest.mark.parametrize(
    ("chunks", "blocks"), [(None, ((8, 2),)), ((4,), ((4, 4, 2),)), ((-1,), ((10,),)), ((16,), ((10,),))]
)
def test_shards_and_multiples_of_chunks_are_regular_axes(chunks, blocks):
    arr = zarrx.create_array({}, shape=(10,), chunks=(2,), shards=(8,), dtype="int8")
    arr[...] = np.arange(10)
    x = zarrx.from_zarr(arr, chunks=chunks)
    assert x.chunks == blocks and isinstance(axes_of(x)[0], RegularAxis)
    assert x[3:9].chunks == da.from_array(np.arange(10), chunks=blocks)[3:9].chunks
    np.testing.assert_array_equal(x[3:9].compute(), np.arange(3, 9))


# -- worker processes -----------------------------------------------------------------------------
def test_slices_run_on_a_cluster_of_worker_processes(tmp_path):
    distributed = pytest.importorskip("distributed")
    url = str(tmp_path / "giant.zarr")
    arr = zarrx.create_array(url, shape=(200_000, 3), chunks=(1, 3), dtype="float64", fill_value=1.0)
    arr[:5] = np.arange(15.0).reshape(5, 3)
    with (
        distributed.LocalCluster(
            n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None, silence_logs=40
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        x = zarrx.from_zarr(url)
        assert float(client.compute(x[:5].sum()).result()) == float(np.arange(15.0).sum())
        np.testing.assert_array_equal(client.compute(x[3:8, 1]).result(), [10.0, 13.0, 1.0, 1.0, 1.0])
        np.testing.assert_array_equal(x[199_990::4].compute(), np.ones((3, 3)))


# -- inline_array ---------------------------------------------------------------------------------
def _tasks_refer_to(x, key):
    graph = dict(x.dask)
    return [k for k, task in graph.items() if k != key and key in getattr(task, "dependencies", ())]


@pytest.mark.parametrize("peer", [False, True], ids=["zarrx-path", "zarr-python-array"])
def test_inline_array_false_puts_the_array_in_the_graph_once(tmp_path, peer):
    zarr = pytest.importorskip("zarr")
    url = str(tmp_path / "a.zarr")
    arr = zarrx.create_array(url, shape=(6, 4), chunks=(2, 4), dtype="int32")
    arr[...] = np.arange(24).reshape(6, 4)
    given = zarr.open_array(url, mode="r") if peer else url
    inline = zarrx.from_zarr(given)  # the default: every task holds the handle
    assert len(dict(inline.dask)) == 3 and inline.name != zarrx.from_zarr(given, inline_array=False).name
    x = zarrx.from_zarr(given, inline_array=False)
    graph = dict(x.dask)
    key = f"original-{x.name}"
    assert len(graph) == 4 and sorted(_tasks_refer_to(x, key)) == [(x.name, i, 0) for i in range(3)]
    held = graph[key].value if hasattr(graph[key], "value") else graph[key]
    if peer:
        assert held is given
    else:
        assert type(held).__name__ == "ArrayHandle" and held.metadata == arr.handle.metadata
    for scheduler in ("threads", "processes"):  # the held array object travels to other processes
        np.testing.assert_array_equal(x.compute(scheduler=scheduler), np.arange(24).reshape(6, 4))
    np.testing.assert_array_equal(x[1:5, 2].compute(), np.arange(24).reshape(6, 4)[1:5, 2])
