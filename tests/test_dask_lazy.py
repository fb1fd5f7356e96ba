"""zarrx.dask.lazy: dask arrays whose graph follows the selection -- million-chunk arrays, what falls
back to dask, irregular axes, fusion, pickling, a cluster of worker processes.

(Random chains of selections against dask and NumPy: tests/test_dask_lazy_properties.py.)
"""

from __future__ import annotations

import importlib
import pickle
import subprocess
import sys

import dask
import dask.array as da
import numpy as np
import pytest

import zarrx
from zarrx.dask import lazy
from zarrx.dask.axes import RegularAxis, TableAxis, axis_from_sizes
from zarrx.dask.lazy import layout_of
from zarrx.storage import MemoryStore

from .counting import CountingStore

VALUES = np.arange(30 * 8, dtype="int32").reshape(30, 8)


def optimized_tasks(x: da.Array) -> int:
    """How many tasks computing ``x`` runs: its graph culled and fused, as compute() does."""
    (graph,) = dask.optimize(x)
    return len(graph.__dask_graph__())


@pytest.fixture
def small():
    arr = zarrx.create_array({}, shape=VALUES.shape, chunks=(4, 3), dtype=VALUES.dtype)
    arr[...] = VALUES
    return arr


@pytest.fixture(scope="module")
def giant():
    """1,000,000 chunks along the first axis, ten of them written, in a counting store."""
    counting = CountingStore(MemoryStore())
    arr = zarrx.create_array(counting, shape=(1_000_000, 4, 4), chunks=(1, 4, 4), dtype="float32", fill_value=0)
    arr[:10] = np.arange(160, dtype="float32").reshape(10, 4, 4)
    return counting, arr


# -- a million chunks -------------------------------------------------------------------------
def test_a_million_chunks_are_a_plain_dask_array_described_by_a_few_numbers(giant):
    _, arr = giant
    x = arr.to_dask()
    assert type(x) is da.Array
    assert x.shape == arr.shape and x.numblocks == (1_000_000, 1, 1) and x.npartitions == 1_000_000
    assert x.chunksize == (1, 4, 4) and x.size == arr.size and len(x) == 1_000_000
    assert layout_of(x).axes == (RegularAxis(0, 1_000_000, 1), RegularAxis(0, 4, 4), RegularAxis(0, 4, 4))
    assert len(x.chunks[0]) == 1_000_000
    # equal axes share one tuple of block sizes (a dataset's variables share their time axis)
    assert arr.to_dask().chunks[0] is x.chunks[0]


def test_a_slice_is_a_new_read_layer_of_the_chunks_it_touches(giant):
    counting, arr = giant
    x = arr.to_dask()
    y = x[:10]
    assert y.chunks == ((1,) * 10, (4,), (4,))
    assert list(y.dask.layers) == [y.name] and x.name not in y.dask.layers
    assert len(y.dask) == 10
    total = y.sum()
    assert optimized_tasks(total) < 20  # ten reads (fused with their partial sums) and a tree of sums
    counting.reset()
    assert float(total.compute()) == float(np.arange(160).sum())
    assert sorted(key for key, _ in counting.chunk_requests()) == sorted(f"c/{i}/0/0" for i in range(10))


def test_chains_integers_ellipsis_and_negative_indices_stay_small(giant):
    _, arr = giant
    x = arr.to_dask()
    y = x[-20:][5:15][..., 1:3][3]
    assert layout_of(y) is not None and y.shape == (4, 2) and len(y.dask) == 1
    np.testing.assert_array_equal(y.compute(), arr[999_983, :, 1:3])
    point = x[7, 2, 3]
    assert point.shape == () and len(point.dask) == 1
    assert float(point.compute()) == float(arr[7, 2, 3])


def test_steps_and_new_axes_are_dask_slicing_on_the_bounding_box(giant):
    _, arr = giant
    x = arr.to_dask()
    y = x[2:12:3, None]
    assert layout_of(y) is None  # dask's getitem over a small read layer
    assert len(y.dask) < 20 and x.name not in y.dask.layers
    np.testing.assert_array_equal(y.compute(), arr[2:12:3][:, None])
    z = x[9:0:-2]
    assert z.chunks == ((1,) * 5, (4,), (4,)) and len(z.dask) < 20
    np.testing.assert_array_equal(z.compute(), arr[9:0:-2])


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


def test_elementwise_work_after_a_slice_fuses_with_the_reads(small):
    part = small.to_dask()[5:17, 2:]
    assert part.numblocks == (4, 3)
    result = (part * 2 - 1).sum(axis=1)
    # each read fused with the arithmetic and its partial sum: 12 tasks, and 4 to combine them
    assert optimized_tasks(result) == optimized_tasks((as_plain_dask(part) * 2 - 1).sum(axis=1)) == 16
    np.testing.assert_array_equal(result.compute(), (VALUES[5:17, 2:] * 2 - 1).sum(axis=1))


# -- what falls back to dask --------------------------------------------------------------------
@pytest.mark.parametrize(
    "index",
    [
        [3, 1, 20],
        np.array([0, 29]),
        (slice(None), np.array([True, False] * 4)),
        VALUES[:, 0] % 3 == 0,
        (Ellipsis, [7, 7]),
    ],
    ids=["list", "array", "mask-axis", "mask", "ellipsis-list"],
)
def test_other_indices_are_dasks_own(small, index):
    x = small.to_dask()
    plain = da.from_array(VALUES, chunks=x.chunks)
    ours, theirs = x[index], plain[index]
    assert layout_of(ours) is None and ours.chunks == theirs.chunks
    np.testing.assert_array_equal(ours.compute(), VALUES[index])


def test_dask_arrays_as_indices_are_dasks_own(small):
    x = small.to_dask()
    rows = da.from_array(np.array([2, 9, 9, 0]), chunks=2)
    np.testing.assert_array_equal(x[rows].compute(), VALUES[[2, 9, 9, 0]])
    mask = x[:, 0] > 100
    assert np.isnan(x[mask].shape[0])
    np.testing.assert_array_equal(x[mask].compute(), VALUES[VALUES[:, 0] > 100])


def test_out_of_bounds_indices_raise_dasks_errors(small):
    x, plain = small.to_dask(), da.from_array(VALUES, chunks=(4, 3))
    for index in (30, (0, -9), (0, 0, 0)):
        with pytest.raises(IndexError) as ours:
            x[index]
        with pytest.raises(IndexError) as theirs:
            plain[index]
        assert str(ours.value) == str(theirs.value)


def test_an_empty_reversed_slice_starting_before_the_array_is_empty(small):
    # dask issue 10555: dask's own slicing selects elements here; NumPy selects none
    x = small.to_dask()
    assert x[-40::-1].shape == VALUES[-40::-1].shape == (0, 8)
    assert x[-40::-1].chunks == ((0,), (3, 3, 2))


def test_assignment_turns_the_array_into_plain_dask(small):
    x = small.to_dask()
    x[2] = -1
    assert layout_of(x) is None
    expected = VALUES.copy()
    expected[2] = -1
    np.testing.assert_array_equal(x[1:4].compute(), expected[1:4])
    np.testing.assert_array_equal(small[...], VALUES)  # the stored array is untouched


def test_a_pickled_array_is_plain_dask_with_the_same_values(small):
    y = small.to_dask()[3:20]
    copy = pickle.loads(pickle.dumps(y))
    assert copy.chunks == y.chunks and copy.name == y.name
    np.testing.assert_array_equal(copy.compute(), VALUES[3:20])


def test_names_follow_the_selection(small):
    x = small.to_dask()
    assert x[3:9].name == x[3:9].name == x[:20][3:9].name
    assert x[3:9].name != x[3:10].name != x[3].name
    assert x[3:9].name != zarrx.create_array({}, shape=VALUES.shape, chunks=(4, 3), dtype="int32").to_dask()[3:9].name


# -- block layouts ------------------------------------------------------------------------------
def test_irregular_blocks_keep_a_table_of_edges():
    arr = zarrx.create_array({}, shape=(12, 5), chunks=(1, 5), dtype="int16")
    arr[...] = np.arange(60).reshape(12, 5)
    x = zarrx.from_zarr(arr, chunks=((2, 7, 3), -1))
    assert isinstance(layout_of(x).axes[0], TableAxis)
    y = x[1:10]
    assert y.chunks == ((1, 7, 1), (5,)) and isinstance(layout_of(y).axes[0], TableAxis)
    np.testing.assert_array_equal(y.compute(), arr[1:10])


def test_a_rectilinear_grid_is_a_table_of_edges():
    arr = zarrx.create_array({}, shape=(26, 6), chunks=((16, 4, 6), (2, 4)), dtype="int16")
    arr[...] = np.arange(26 * 6).reshape(26, 6)
    x = arr.to_dask()
    assert x.chunks == ((16, 4, 6), (2, 4)) and isinstance(layout_of(x).axes[0], TableAxis)
    y = x[10:22, 1]
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
    assert x.chunks == blocks and isinstance(layout_of(x).axes[0], RegularAxis)
    assert x[3:9].chunks == da.from_array(np.arange(10), chunks=blocks)[3:9].chunks
    np.testing.assert_array_equal(x[3:9].compute(), np.arange(3, 9))


# -- the wrapped __getitem__ ---------------------------------------------------------------------
def test_dasks_getitem_is_wrapped_once_and_other_arrays_go_straight_to_it(small):
    small.to_dask()
    original = da.Array.__getitem__.__wrapped__
    importlib.reload(lazy)
    small.to_dask()
    assert da.Array.__getitem__.__wrapped__ is original  # a reload does not wrap the wrapper
    assert da.Array.__getitem__.__doc__ == original.__doc__
    plain = da.arange(10, chunks=3)
    assert layout_of(plain) is None
    np.testing.assert_array_equal(plain[2:5].compute(), [2, 3, 4])


def test_nothing_is_wrapped_before_zarrx_builds_an_array():
    code = (
        "import dask.array as da, xarray as xr, zarrx; original = da.Array.__getitem__; "
        "xr.namedarray.parallelcompat.list_chunkmanagers(); import zarrx.xarray.chunkmanager; "
        "assert da.Array.__getitem__ is original; "
        "zarrx.create_array({}, shape=(4,), chunks=(2,), dtype='i1').to_dask(); "
        "assert da.Array.__getitem__.__wrapped__ is original"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_getitem_wrapped_by_someone_else_is_kept():
    code = (
        "import functools, dask.array as da, zarrx; original = da.Array.__getitem__; calls = []\n"
        "@functools.wraps(original)\n"
        "def other(self, index):\n"
        "    calls.append(index); return original(self, index)\n"
        "da.Array.__getitem__ = other\n"
        "x = zarrx.create_array({}, shape=(8,), chunks=(2,), dtype='i1', fill_value=3).to_dask()\n"
        "assert da.Array.__getitem__.__wrapped__ is other\n"
        "assert x[1:5].chunks == ((1, 2, 1),) and not calls\n"
        "assert da.ones(4)[1:3].shape == (2,) and calls == [slice(1, 3)]"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


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
