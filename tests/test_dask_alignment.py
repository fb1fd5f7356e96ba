"""Dask writes whose blocks straddle shards (or chunks) are aligned, as dask's ``to_zarr`` does.

dask 2026.8's ``to_zarr`` rechunks a dask array onto the target's shard grid before writing
(``"auto"`` blocks near ``array.chunk-size`` in multiples of the shard shape), with a
PerformanceWarning when that setting is smaller than a shard and a UserWarning for irregular
blocks. zarrx does the same -- by default for :func:`zarrx.to_zarr`, with ``align_chunks=True``
for ``ds.zarrx.to_zarr`` (xarray's default ``safe_chunks=True`` refuses) -- except that blocks
already on the grid are left alone and that no block is ever smaller than one shard. Checked
here: the block sizes against dask's own choice, the warnings, the refusals with the keyword
that fixes them, and -- on a ``distributed.LocalCluster`` with worker processes, thousands of
tiny tasks -- that region writes and appends into sharded and unsharded arrays with partial
shards at their edges lose no value.
"""

from __future__ import annotations

import warnings

import dask
import dask.array as da
import numpy as np
import pytest
import xarray as xr
from dask.array.core import PerformanceWarning, normalize_chunks

import zarrx
from zarrx.errors import ChunkAlignmentError

distributed = pytest.importorskip("distributed")

SHARDED = {"chunks": (2, 3), "shards": (4, 6)}
CHUNKED = {"chunks": (4, 6)}
LAYOUTS = pytest.mark.parametrize("layout", [CHUNKED, SHARDED], ids=["chunked", "sharded"])


def boundaries_on_grid(blocks, offsets, unit, shape):
    """Whether every block boundary (shifted by the region start) is on the grid of ``unit``."""
    for sizes, offset, size in zip(blocks, offsets, unit):
        ends = offset + np.cumsum(sizes)[:-1]
        if np.any(ends % size):
            return False
    return True


# -- block sizes: dask's ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("shape", "region", "blocks", "chunk_size"),
    [
        ((1000, 60), np.s_[3:997, :], (7, 60), "2KiB"),  # one axis straddles
        ((200, 120), np.s_[5:185, 13:103], (9, 25), "1KiB"),  # both axes, a region inside shards
        ((4000,), (slice(None),), (10,), "1KiB"),  # dask's test_zarr_to_zarr_shards, larger
    ],
)
@LAYOUTS
def test_blocks_are_dasks_auto_blocks_on_the_grid(shape, region, blocks, chunk_size, layout):
    unit = layout.get("shards", layout["chunks"])[: len(shape)]
    layout = {key: value[: len(shape)] for key, value in layout.items()}
    target = zarrx.create_array({}, shape=shape, dtype="int32", fill_value=-1, **layout)
    index = region + (slice(None),) * (len(shape) - len(region))
    offsets = tuple(item.indices(length)[0] for item, length in zip(index, shape))
    data = np.arange(np.prod(shape), dtype="int32").reshape(shape)[index]
    x = da.from_array(data, chunks=blocks)
    with dask.config.set({"array.chunk-size": chunk_size}), warnings.catch_warnings():
        warnings.simplefilter("error", PerformanceWarning)
        warnings.filterwarnings("ignore", "The input Dask array writes part of")  # region edges inside a shard
        lazy = zarrx.to_zarr(x, target, region=region, compute=False)
        auto = normalize_chunks(
            tuple("auto" if s % u or o % u else max(b) for s, u, o, b in zip(x.chunksize, unit, offsets, x.chunks)),
            shape, dtype=np.dtype("int32"), previous_chunks=unit,
        )  # fmt: skip
    assert boundaries_on_grid(lazy.chunks, offsets, unit, shape)
    for axis, (sizes, wanted) in enumerate(zip(lazy.chunks, auto)):
        if x.chunksize[axis] % unit[axis] or offsets[axis] % unit[axis]:
            # dask's nominal size along the axes it had to change, inside the region
            assert max(sizes) == wanted[0] and wanted[0] % unit[axis] == 0
        else:
            assert sizes == x.chunks[axis]  # an axis already on the grid keeps its blocks
    lazy.compute()
    expected = np.full(shape, -1, dtype="int32")
    expected[index] = data
    np.testing.assert_array_equal(target[...], expected)


@LAYOUTS
def test_blocks_on_the_grid_are_not_rechunked(layout):
    target = zarrx.create_array({}, shape=(40, 30), dtype="int32", fill_value=0, **layout)
    x = da.ones((32, 24), chunks=(8, 12), dtype="int32")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lazy = zarrx.to_zarr(x, target, region=np.s_[4:36, 6:30], compute=False)
    assert lazy.chunks == x.chunks
    assert not any("rechunk" in str(name) for name in lazy.dask.layers)


def test_a_chunk_size_below_one_shard_warns_as_dask_and_writes_whole_shards():
    target = zarrx.create_array({}, shape=(100,), dtype="int64", chunks=(3,), shards=(6,), fill_value=0)
    with dask.config.set({"array.chunk-size": 1}):
        with pytest.warns(PerformanceWarning, match="The input Dask array will be rechunked along axis 0") as caught:
            lazy = zarrx.to_zarr(da.arange(100, chunks=10), target, compute=False)
    assert "48 bytes" in str(caught[0].message) and "array.chunk-size" in str(caught[0].message)
    assert set(lazy.chunks[0][:-1]) == {6}  # one shard per task, never less: dask would race here
    lazy.compute()
    np.testing.assert_array_equal(target[...], np.arange(100))


def test_irregular_blocks_of_a_new_array_warn_as_dask():
    x = da.concatenate([da.arange(5, chunks=5), da.arange(5, 12, chunks=7), da.arange(12, 20, chunks=1)])
    with pytest.warns(UserWarning, match="The array uses irregular chunk sizes"):
        lazy = zarrx.to_zarr(x, {}, compute=False)
    assert lazy.chunks == ((7, 7, 6),)  # dask: rechunked to the largest block
    lazy.compute()


@LAYOUTS
def test_strictness_refuses_and_names_the_keyword(layout):
    target = zarrx.create_array({}, shape=(40, 30), dtype="int32", fill_value=0, **layout)
    x = da.ones((30, 30), chunks=(5, 30), dtype="int32")
    for strict in ({"safe_chunks": True}, {"align_chunks": False}, {"align": "error"}):
        with pytest.raises(ChunkAlignmentError, match="pass align_chunks=True"):
            zarrx.to_zarr(x, target, region=np.s_[:30], **strict)
    assert not target[...].any()
    # the same write by default, or asked for
    for aligned in ({}, {"align_chunks": True}, {"safe_chunks": False}, {"align": "rechunk"}):
        target[...] = 0
        zarrx.to_zarr(x, target, region=np.s_[:30], **aligned)
        np.testing.assert_array_equal(target[...], np.r_[np.ones((30, 30)), np.zeros((10, 30))])


def test_xarray_refuses_by_default_and_aligns_when_asked(tmp_path):
    # xarray's semantics: safe_chunks=True (the default) refuses, align_chunks=True rechunks
    encoding = {"v": {"chunks": (2, 3), "shards": (4, 6)}}
    ds = xr.Dataset({"v": (("t", "x"), np.arange(60 * 12).reshape(60, 12))}).chunk({"t": 5, "x": 6})
    with pytest.raises(ChunkAlignmentError, match="align_chunks=True"):
        ds.zarrx.to_zarr(tmp_path / "a.zarr", mode="w", encoding=encoding)
    ds.zarrx.to_zarr(tmp_path / "a.zarr", mode="w", encoding=encoding, align_chunks=True)
    ds.zarrx.to_zarr(tmp_path / "b.zarr", mode="w", encoding=encoding, safe_chunks=False)
    for name in ("a.zarr", "b.zarr"):
        np.testing.assert_array_equal(zarrx.open_array(tmp_path / name, "v")[...], ds["v"].values)


def test_reading_blocks_that_cut_through_shards(tmp_path):
    arr = zarrx.create_array(tmp_path / "r.zarr", shape=(50, 40), dtype="int32", chunks=(2, 3), shards=(4, 6))
    values = np.arange(2000, dtype="int32").reshape(50, 40)
    arr[...] = values
    x = zarrx.from_zarr(tmp_path / "r.zarr", chunks=(5, 7))
    assert x.chunks == ((5,) * 10, (7,) * 5 + (5,))
    np.testing.assert_array_equal(x.compute(scheduler="threads"), values)


# -- many writers, one array: worker processes ------------------------------------------------------
@pytest.fixture(scope="module")
def client():
    with (
        distributed.LocalCluster(
            n_workers=2, processes=True, threads_per_worker=2, dashboard_address=None, silence_logs=40
        ) as cluster,
        distributed.Client(cluster, set_as_default=False) as client,
    ):
        yield client


@LAYOUTS
def test_region_writes_from_worker_processes_lose_nothing(client, tmp_path, layout):
    # 61 x 59: partial shards (and chunks) at the far ends of both axes; the region starts and
    # ends inside shards; blocks of 3 x 5 straddle them all (about a thousand tasks)
    shape, region = (61, 59), np.s_[3:58, 5:57]
    path = str(tmp_path / "region.zarr")
    target = zarrx.create_array(path, shape=shape, dtype="int32", fill_value=0, **layout)
    before = -np.arange(61 * 59, dtype="int32").reshape(shape)
    target[...] = before
    data = np.arange(55 * 52, dtype="int32").reshape(55, 52) + 1
    x = da.from_array(data, chunks=(3, 5))
    unit = layout.get("shards", layout["chunks"])
    shard_bytes = int(np.prod(unit)) * 4
    with dask.config.set({"array.chunk-size": shard_bytes}), pytest.warns(PerformanceWarning, match="part of"):
        lazy = zarrx.to_zarr(x, path, region=region, compute=False)
    assert lazy.npartitions > 130 and len(lazy.__dask_graph__()) > 900  # one tiny task per shard (chunk)
    client.compute(lazy).result()
    expected = before.copy()
    expected[region] = data
    np.testing.assert_array_equal(zarrx.open_array(path)[...], expected)


@LAYOUTS
def test_appends_from_worker_processes_lose_nothing(client, tmp_path, layout):
    # dask appends (grow, then write the new rows) of 13 rows in blocks of 3: each append starts
    # inside the partial shard the previous one left at the edge
    path = str(tmp_path / "append.zarr")
    unit = layout.get("shards", layout["chunks"])
    first = np.arange(7 * 59, dtype="int32").reshape(7, 59)
    zarrx.to_zarr(da.from_array(first, chunks=(7, 59)), path, **layout)
    expected = [first]
    with dask.config.set({"array.chunk-size": int(np.prod(unit)) * 4}):
        for step in range(4):
            rows = np.full((13, 59), step + 1, dtype="int32") * (1 + np.arange(59, dtype="int32"))
            target = zarrx.open_array(path, mode="r+")
            start = target.shape[0]
            target.resize((start + 13, 59))
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", "The input Dask array writes part of", PerformanceWarning)
                lazy = zarrx.to_zarr(da.from_array(rows, chunks=(3, 5)), target, region=np.s_[start:], compute=False)
            client.compute(lazy).result()
            expected.append(rows)
    np.testing.assert_array_equal(zarrx.open_array(path)[...], np.concatenate(expected))


def test_xarray_appends_and_regions_from_worker_processes_lose_nothing(client, tmp_path):
    path = str(tmp_path / "ds.zarr")
    encoding = {"v": {"chunks": (2, 3), "shards": (4, 6)}}

    def piece(start, rows):
        values = np.arange(start * 23, (start + rows) * 23, dtype="int64").reshape(rows, 23)
        return xr.Dataset({"v": (("t", "x"), values)}).chunk({"t": 3, "x": 5})

    with dask.config.set({"array.chunk-size": 192}):
        delayed = piece(0, 9).zarrx.to_zarr(path, mode="w", encoding=encoding, align_chunks=True, compute=False)
        client.compute(delayed).result()
        for start in (9, 20, 33):
            rows = 11 if start == 9 else 13
            delayed = piece(start, rows).zarrx.to_zarr(path, append_dim="t", align_chunks=True, compute=False)
            client.compute(delayed).result()
        # overwrite a region whose blocks straddle the shards
        patch = -piece(5, 30)
        delayed = patch.zarrx.to_zarr(path, region={"t": slice(5, 35)}, align_chunks=True, compute=False)
        client.compute(delayed).result()
    expected = np.arange(46 * 23, dtype="int64").reshape(46, 23)
    expected[5:35] *= -1
    np.testing.assert_array_equal(zarrx.open_array(path, "v")[...], expected)


def test_object_data_is_aligned_near_its_own_block_size():
    # dask cannot size "auto" blocks of object data: the blocks become the largest multiple of the
    # chunk that fits in the largest block
    words = np.array([f"w{i}" * (i % 4) for i in range(50)], dtype=object)
    target = zarrx.create_array({}, shape=(50,), chunks=(4,), dtype=str)
    lazy = zarrx.to_zarr(da.from_array(words, chunks=9), target, compute=False)
    assert lazy.chunks == ((8,) * 6 + (2,),)
    lazy.compute()
    assert (target[...] == words).all()
