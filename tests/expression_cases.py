"""Cases run with dask's array expressions on (``DASK_ARRAY__QUERY_PLANNING=True``), in a process
of their own: tests/test_dask_expression.py runs this file with pytest in a subprocess (the
setting is read once, when ``dask.array`` is first imported).

zarrx's read is an input expression (:mod:`zarrx.dask.expression`): dask's optimiser pushes a
slice that is the read's only user into it, and leaves slices over a read with other users as
dask's own, so every chunk is read once.
"""

from __future__ import annotations

import pickle

import dask
import dask.array as da
import numpy as np
import pytest
import xarray as xr

import zarrx
from zarrx.dask.expression import ReadExpression
from zarrx.storage import MemoryStore

from tests.counting import CountingStore

VALUES = np.arange(40 * 6, dtype="float32").reshape(40, 6)


def test_query_planning_is_on():
    assert da.array_expr_enabled()
    assert type(zarrx.create_array({}, shape=(2,), chunks=(1,), dtype="i1").to_dask()).__module__.startswith(
        "dask.array._array_expr"
    )


@pytest.fixture
def counted():
    counting = CountingStore(MemoryStore())
    arr = zarrx.create_array(counting, shape=VALUES.shape, chunks=(4, 6), dtype=VALUES.dtype, dimension_names=["t", "x"])
    arr[...] = VALUES
    counting.reset()
    return counting, arr


def chunk_reads(counting):
    return sorted(key for key, _ in counting.chunk_requests())


def optimized_tasks(x) -> int:
    """The tasks computing ``x`` runs: its expression optimised (as compute() does; dask.optimize
    leaves expressions as they are), then lowered to a graph."""
    return len(x.optimize().__dask_graph__())


def test_a_slice_of_a_million_chunks_reads_and_builds_only_its_blocks():
    counting = CountingStore(MemoryStore())
    arr = zarrx.create_array(counting, shape=(1_000_000, 4), chunks=(1, 4), dtype="float32", fill_value=1)
    arr[:10] = np.arange(40, dtype="float32").reshape(10, 4)
    counting.reset()
    total = zarrx.from_zarr(arr)[:10].sum()
    assert optimized_tasks(total) < 30
    assert float(total.compute()) == float(np.arange(40).sum())
    assert chunk_reads(counting) == sorted(f"c/{i}/0" for i in range(10))


@pytest.mark.parametrize(
    "index", [np.s_[5:30], np.s_[3], np.s_[5:30:4, 1:5], np.s_[-3:], np.s_[30:2:-3, 2], np.s_[..., 1]]
)
def test_pushed_slices_read_the_touched_chunks_and_numpys_values(counted, index):
    counting, arr = counted
    part = zarrx.from_zarr(arr)[index]
    np.testing.assert_array_equal(part.compute(), VALUES[index])
    first = index[0] if isinstance(index, tuple) else index
    rows = np.atleast_1d(np.arange(40)[slice(None) if first is Ellipsis else first])
    assert chunk_reads(counting) == sorted({f"c/{row // 4}/0" for row in rows})


def test_a_slice_that_is_the_only_user_becomes_the_read(counted):
    _, arr = counted
    optimized = zarrx.from_zarr(arr)[8:16].expr.optimize()
    assert isinstance(optimized, ReadExpression) and optimized.numblocks == (2, 1)
    assert isinstance(zarrx.from_zarr(arr)[:].expr.optimize(), ReadExpression)


def test_slices_of_a_read_with_other_users_share_its_tasks(counted):
    counting, arr = counted
    x = zarrx.from_zarr(arr)
    # slices on the chunk grid: dask's expressions cannot yet combine misaligned blocks
    # (x[1:] - x[:-1] fails in dtype inference for dask.array.from_array arrays too)
    counting.reset()
    np.testing.assert_array_equal((x[4:] - x[:-4]).compute(), VALUES[4:] - VALUES[:-4])
    assert chunk_reads(counting) == sorted(f"c/{i}/0" for i in range(10))
    counting.reset()
    whole, first = dask.compute(x.sum(), x[:10].sum())
    assert (whole, first) == (VALUES.sum(), VALUES[:10].sum())
    assert chunk_reads(counting) == sorted(f"c/{i}/0" for i in range(10))


def test_regions_and_pickles(counted):
    counting, arr = counted
    part = zarrx.from_zarr(arr, region={"t": slice(6, 13)})
    assert part.chunks == ((2, 4, 1), (6,))
    np.testing.assert_array_equal(part.compute(), VALUES[6:13])
    assert chunk_reads(counting) == ["c/1/0", "c/2/0", "c/3/0"]
    copy = pickle.loads(pickle.dumps(zarrx.from_zarr(arr)[3:20]))
    assert optimized_tasks(copy) == optimized_tasks(zarrx.from_zarr(arr)[3:20])
    np.testing.assert_array_equal(copy.compute(), VALUES[3:20])


def test_xarray_reads_each_chunk_once():
    counting = CountingStore(MemoryStore())
    root = zarrx.create_group(counting)
    v = root.create_array("v", shape=VALUES.shape, chunks=(4, 6), dtype=VALUES.dtype, dimension_names=["t", "x"])
    v[...] = VALUES
    zarrx.consolidate_metadata(counting)
    ds = xr.open_dataset(counting, engine="zarrx", chunks={})
    # xarray's own operations on expression arrays are still partial in dask (its .values gives
    # an object array, diff and skipna reductions raise, for engine="zarr" too): dask's on .data
    counting.reset()
    np.testing.assert_array_equal(ds.v.isel(t=slice(8, 16)).data.compute(), VALUES[8:16])
    assert chunk_reads(counting) == ["v/c/2/0", "v/c/3/0"]  # the selection pushed into the read
    counting.reset()
    data = ds.v.data
    whole, part = dask.compute(data.sum(), (data[4:] - data[:-4]).sum())
    assert (whole, part) == (VALUES.sum(), (VALUES[4:] - VALUES[:-4]).sum())
    assert chunk_reads(counting) == sorted(f"v/c/{i}/0" for i in range(10))
