"""The rectilinear chunk grid: metadata, every kind of indexing, sharding, resize and append, dask,
xarray, explain / verify / convert, and interop with zarr-python 3.2+ and zarrs both ways."""

from __future__ import annotations

import json
from pathlib import Path

import dask.array as da
import jsonschema
import numpy as np
import pytest
import xarray as xr

import zarrx
import zarrx.xarray  # noqa: F401  (the .zarrx accessors)
from zarrx.errors import ChunkAlignmentError, MetadataError, UnsupportedExtensionError
from zarrx.metadata.chunk_grid import parse_chunk_grid
from zarrx.metadata.rectilinear import MAX_EDGES, RectilinearChunkGrid

from .zarr_next import run_zarr_next
from .zarrs_peer import zarrs_read, zarrs_write

SCHEMA = json.loads((Path(__file__).parent / "data/zarr-extensions/chunk-grids/rectilinear/schema.json").read_text())


def grid_json(*chunk_shapes):
    return {"name": "rectilinear", "configuration": {"kind": "inline", "chunk_shapes": list(chunk_shapes)}}


# -- metadata ---------------------------------------------------------------------------------
def test_the_registry_example():
    """chunk-grids/rectilinear, "Example": every way of declaring edges, on shape [6, 6, 6, 6, 6]."""
    grid = parse_chunk_grid(grid_json(4, [1, 2, 3], [[4, 2]], [[1, 3], 3], [4, 4, 4]))
    shape = (6,) * 5
    grid.validate(shape)
    assert grid.chunk_edges(shape) == ((4, 4), (1, 2, 3), (4, 4), (1, 1, 1, 3), (4, 4))  # the overflow chunk holds nothing
    assert grid.grid_shape(shape) == (2, 3, 2, 4, 2)
    assert grid.chunk_shape_at((1, 2, 0, 3, 1)) == (4, 3, 4, 3, 4)
    written = grid.to_json()
    assert jsonschema.validate(written, SCHEMA) is None
    assert parse_chunk_grid(written) == grid


def test_the_registry_indexing_example(tmp_path):
    """chunk-grids/rectilinear, "Indexing": edges [[16, 10], [24, 14]]; index (20, 15) is chunk (1, 0), at (4, 15)."""
    array = zarrx.create_array(str(tmp_path), shape=(26, 38), chunks=((16, 10), (24, 14)), dtype="u2", compressors=None)
    array[20, 15] = 7
    chunk = np.frombuffer((tmp_path / "c" / "1" / "0").read_bytes(), "<u2").reshape(10, 24)
    assert chunk[4, 15] == 7 and chunk.sum() == 7


@pytest.mark.parametrize(("chunk_shapes", "message"), [
    ([[0, 2]], r"chunk_shapes\[0\]\[0\]: expected a positive integer"),
    ([[[2, 0]]], r"chunk_shapes\[0\]\[0\]\[1\]"),
    ([[[2, 3, 4]]], r"a run is \[edge length, count\]"),
    ([[]], "at least one edge"),
    ([[1, 2]], "add up to 3, less than the dimension's length 10"),
    ([4, 4], "expected 1 entries"),
    ([[[1, MAX_EDGES + 1]]], "more than"),
    ([True], "positive integer"),
])  # fmt: skip
def test_bad_grids_are_refused_naming_the_field(tmp_path, chunk_shapes, message):
    (tmp_path / "zarr.json").write_text(json.dumps({
        "zarr_format": 3, "node_type": "array", "shape": [10], "data_type": "uint8", "fill_value": 0,
        "chunk_grid": grid_json(*chunk_shapes), "chunk_key_encoding": {"name": "default"}, "codecs": [{"name": "bytes"}],
    }))  # fmt: skip
    with pytest.raises(MetadataError, match=message):
        zarrx.open_array(str(tmp_path))


@pytest.mark.parametrize("configuration", [{"chunk_shapes": [4]}, {"kind": "file", "chunk_shapes": [4]}, {"kind": "inline"},
                                           {"kind": "inline", "chunk_shapes": [4], "extra": 1}])  # fmt: skip
def test_bad_configurations_are_refused(configuration):
    with pytest.raises(MetadataError, match="chunk_grid"):
        parse_chunk_grid({"name": "rectilinear", "configuration": configuration})


def test_unknown_grids_name_both_known_ones():
    with pytest.raises(UnsupportedExtensionError, match="'rectangular'.*'rectilinear', 'regular'"):
        parse_chunk_grid({"name": "rectangular", "configuration": {"chunk_shape": [[2, 3]]}})


def test_a_regular_grid_keeps_the_fast_path(tmp_path):
    """Regular arrays project selections with integer chunk lengths; rectilinear dimensions whose
    edges are all alike too."""
    regular = zarrx.create_array({}, "r", shape=(10, 10), chunks=(5, 5), dtype="u1")
    assert regular.handle.io_chunk_shape == (5, 5)
    mixed = zarrx.create_array({}, "m", shape=(10, 10), chunks=((5, 5), (3, 7)), dtype="u1")
    step, offsets = mixed.handle.io_chunk_shape
    assert step == 5 and offsets.tolist() == [0, 3, 10]


# -- indexing -------------------------------------------------------------------------------------
def _random_grid(rng, shape):
    """A chunk per dimension: sometimes a step, else edges (overflowing the end now and then)."""
    grid = []
    for length in shape:
        if rng.random() < 0.25:
            grid.append(int(rng.integers(1, 6)))
            continue
        edges = []
        while sum(edges) < length + int(rng.integers(0, 4)):
            edges.append(int(rng.integers(1, 6)))
        grid.append(tuple(edges) or (1,))
    return tuple(grid)


def _random_slice(rng, length):
    low, high = sorted(int(v) for v in rng.integers(-length - 2, length + 2, 2))
    step = int(rng.choice([1, 1, 1, 2, 3, -1, -2, 7]))
    return slice(low, high, step) if step > 0 else slice(high, low, step)


@pytest.mark.parametrize("seed", range(12))
def test_reads_and_writes_match_numpy(seed):
    rng = np.random.default_rng(seed)
    shape = tuple(int(n) for n in rng.integers(1, 14, int(rng.integers(1, 4))))
    sharded = seed % 3 == 0
    grid = _random_grid(rng, shape)
    if sharded:  # shards of several sizes, inner chunks of 2 dividing them
        grid = tuple(2 * g if isinstance(g, int) else tuple(2 * e for e in g) for g in grid)
        array = zarrx.create_array({}, "a", shape=shape, chunks=(2,) * len(shape), shards=grid, dtype="i4", fill_value=-1)
    else:
        array = zarrx.create_array({}, "a", shape=shape, chunks=grid, dtype="i4", fill_value=-1)
    expected = np.full(shape, -1, dtype="i4")
    for round_ in range(8):
        selection = tuple(_random_slice(rng, n) if rng.random() < 0.8 else int(rng.integers(0, n)) for n in shape)
        values = rng.integers(0, 1000, np.shape(expected[selection])).astype("i4")
        array[selection] = values
        expected[selection] = values
        np.testing.assert_array_equal(array[...], expected)
        reading = tuple(_random_slice(rng, n) for n in shape)
        np.testing.assert_array_equal(array[reading], expected[reading])
        outer = tuple(np.sort(rng.integers(0, n, 3)) if rng.random() < 0.5 else _random_slice(rng, n) for n in shape)
        np.testing.assert_array_equal(array.oindex[outer], expected[np.ix_(*[np.arange(n)[o] for n, o in zip(shape, outer)])])
        points = tuple(rng.integers(0, n, 5) for n in shape)
        np.testing.assert_array_equal(array.vindex[points], expected[points])
        array.vindex[points] = round_
        expected[points] = round_
    np.testing.assert_array_equal(array[...], expected)


def test_edge_chunks_are_stored_at_their_declared_size(tmp_path):
    array = zarrx.create_array(str(tmp_path), shape=(7,), chunks=((3, 5),), dtype="u1", fill_value=9, compressors=None)
    array[...] = np.arange(7)
    assert (tmp_path / "c" / "1").read_bytes() == bytes([3, 4, 5, 6, 9])  # 5 declared, 4 in the array


def test_shard_edges_must_be_multiples_of_the_inner_chunks(tmp_path):
    with pytest.raises(MetadataError, match=r"shard edges \[3\] are not multiples of the inner chunk length 2"):
        zarrx.create_array(str(tmp_path), shape=(10,), chunks=(2,), shards=((4, 3, 4),), dtype="u1")


def test_sharded_partial_reads_fetch_only_the_inner_chunks(tmp_path):
    array = zarrx.create_array(str(tmp_path), shape=(20, 6), chunks=(2, 3), shards=((4, 8, 8), (6,)), dtype="f4")
    array[...] = np.arange(120, dtype="f4").reshape(20, 6)
    plan = array.explain(np.s_[5:7, 4])
    # a local shard is opened once and each inner chunk read from it by the thread decoding it
    assert [(r.kind, r.key, r.chunks) for r in plan.requests if r.kind == "inner chunks"] == [
        ("inner chunks", "c/1/0", ((2, 1),)), ("inner chunks", "c/1/0", ((3, 1),))
    ]
    np.testing.assert_array_equal(array[5:7, 4], [34, 40])
    # through a store of round trips, the two neighbours are one merged range
    remote = zarrx.open_array(zarrx.storage.MemoryStore({key: tmp_path.joinpath(key).read_bytes()
                                                         for key in ("zarr.json", "c/1/0")}))  # fmt: skip
    plan = remote.explain(np.s_[5:7, 4])
    assert [(r.kind, r.key, r.chunks) for r in plan.requests if r.kind == "inner chunks"] == [
        ("inner chunks", "c/1/0", ((2, 1), (3, 1)))
    ]
    np.testing.assert_array_equal(remote[5:7, 4], [34, 40])


# -- resize and append -------------------------------------------------------------------------------
def test_resize_repeats_the_last_edge_and_clears_past_the_edge(tmp_path):
    array = zarrx.create_array(str(tmp_path), shape=(10,), chunks=((4, 6),), dtype="u1", fill_value=0)
    array[...] = np.arange(1, 11)
    array.resize(4)
    assert not (tmp_path / "c" / "1").exists()
    array.resize(20)
    assert json.loads((tmp_path / "zarr.json").read_text())["chunk_grid"]["configuration"]["chunk_shapes"] == [[4, [6, 3]]]
    np.testing.assert_array_equal(array[...], [1, 2, 3, 4] + [0] * 16)


def test_append_adds_one_chunk_of_the_appended_length(tmp_path):
    array = zarrx.create_array(str(tmp_path), shape=(5, 2), chunks=((2, 3), 2), dtype="i2")
    array[...] = 1
    array.append(np.full((7, 2), 2, dtype="i2"))
    array.append(np.full((1, 2), 3, dtype="i2"))
    assert array.chunks == ((2, 3, 7, 1), (2,))
    np.testing.assert_array_equal(array[:, 0], [1] * 5 + [2] * 7 + [3])


# -- dask ---------------------------------------------------------------------------------------------
def _irregular():
    """What a filter or a concatenation leaves: blocks of several sizes."""
    return da.concatenate([da.arange(12, chunks=5), da.arange(100, 107, chunks=7), da.arange(3, chunks=1)]).reshape(22, 1)


def test_to_zarr_writes_dask_blocks_as_the_chunks(tmp_path):
    x = _irregular()
    assert x.chunks == ((5, 5, 2, 7, 1, 1, 1), (1,))
    with pytest.raises(ChunkAlignmentError):  # strict: the first block's shape, which they straddle
        zarrx.to_zarr(x, str(tmp_path / "refused"), safe_chunks=True)
    with pytest.warns(UserWarning, match="irregular chunk sizes"):  # by default, as dask: regular blocks
        regular = zarrx.to_zarr(x, str(tmp_path / "regular"))
    assert regular.chunks == (7, 1)
    np.testing.assert_array_equal(regular[...], x.compute())
    array = zarrx.to_zarr(x, str(tmp_path / "a"), chunks="dask")
    assert array.chunks == ((5, 5, 2, 7, 1, 1, 1), (1,))
    grid = json.loads((tmp_path / "a" / "zarr.json").read_text())["chunk_grid"]
    assert grid == grid_json([[5, 2], 2, 7, [1, 3]], 1)
    back = zarrx.from_zarr(str(tmp_path / "a"))
    assert back.chunks == x.chunks
    np.testing.assert_array_equal(back.compute(), x.compute())


def test_regular_dask_blocks_give_a_regular_grid(tmp_path):
    zarrx.to_zarr(da.ones((10, 4), chunks=(4, 4)), str(tmp_path), chunks="dask")
    assert json.loads((tmp_path / "zarr.json").read_text())["chunk_grid"]["name"] == "regular"


def test_dask_writes_into_rectilinear_arrays_align_on_its_grid(tmp_path):
    array = zarrx.create_array(str(tmp_path), shape=(10,), chunks=((3, 3, 4),), dtype="i8", fill_value=0)
    with pytest.raises(ChunkAlignmentError, match="boundary is at 5"):
        zarrx.to_zarr(da.ones(10, chunks=5, dtype="i8"), array, safe_chunks=True)
    lazy = zarrx.to_zarr(da.ones(10, chunks=5, dtype="i8"), array, compute=False)  # by default: its chunks
    assert lazy.chunks == ((3, 3, 4),)
    lazy.compute()
    zarrx.to_zarr(da.full(4, 2, chunks=4, dtype="i8"), array, region=(slice(6, 10),))
    np.testing.assert_array_equal(array[...], [1] * 6 + [2] * 4)
    back = zarrx.from_zarr(str(tmp_path), chunks=5)  # blocks that cut through its chunks read what they need
    assert back.chunks == ((5, 5),)
    np.testing.assert_array_equal(back.compute(), [1] * 6 + [2] * 4)


# -- xarray ------------------------------------------------------------------------------------------
def test_xarray_writes_irregular_blocks_when_asked(tmp_path):
    dataset = xr.Dataset({"v": (("t", "y"), _irregular())})
    with pytest.raises(ValueError, match="uniform chunk sizes"):  # xarray's rule, by default
        dataset.zarrx.to_zarr(str(tmp_path / "refused"), mode="w")
    dataset.zarrx.to_zarr(str(tmp_path / "a"), mode="w", rectilinear=True)
    opened = xr.open_dataset(str(tmp_path / "a"), engine="zarrx", chunks={})
    assert opened["v"].chunks == dataset["v"].chunks
    np.testing.assert_array_equal(opened["v"].values, dataset["v"].values)
    region = xr.Dataset({"v": (("t", "y"), da.zeros((7, 1), chunks=7, dtype=int))})
    region.zarrx.to_zarr(str(tmp_path / "a"), region={"t": slice(12, 19)})  # exactly one chunk: allowed
    with pytest.raises(ChunkAlignmentError, match="chunk boundaries"):
        region.zarrx.to_zarr(str(tmp_path / "a"), region={"t": slice(11, 18)})


# -- tools -------------------------------------------------------------------------------------------------
def test_verify_explain_and_convert(tmp_path):
    array = zarrx.create_array(str(tmp_path / "src"), shape=(10, 7), chunks=((3, 3, 4), (2, 5)), dtype="f4")
    array[...] = np.arange(70).reshape(10, 7)
    assert [r.key for r in array.explain(np.s_[2:5, 3:]).requests] == ["c/0/1", "c/1/1"]
    (tmp_path / "src" / "c" / "2" / "1").write_bytes(b"garbage")
    report = zarrx.verify(str(tmp_path / "src"))
    assert [problem.key for problem in report.corrupt] == ["c/2/1"] and report.chunks_checked == 6
    array[...] = np.arange(70).reshape(10, 7)
    zarrx.convert(str(tmp_path / "src"), str(tmp_path / "kept"))
    assert zarrx.open_array(str(tmp_path / "kept")).chunks == ((3, 3, 4), (2, 5))
    zarrx.convert(str(tmp_path / "src"), str(tmp_path / "regular"), chunks=(5, 5))
    regular = zarrx.open_array(str(tmp_path / "regular"))
    assert regular.chunks == (5, 5)
    np.testing.assert_array_equal(regular[...], np.arange(70).reshape(10, 7))


# -- interop -----------------------------------------------------------------------------------------------
def test_zarr_python_writes_zarrx_reads(tmp_path):
    run_zarr_next(
        "a = zarr.create_array(sys.argv[1], shape=(10, 7), chunks=[[3, 3, 4], [2, 5]], dtype='i4', fill_value=-1)\n"
        "a[:8] = np.arange(56).reshape(8, 7)\n"
        "s = zarr.create_array(sys.argv[2], shape=(12, 4), chunks=(2, 2), shards=[[4, 8], [4]], dtype='f8')\n"
        "s[...] = np.arange(48.0).reshape(12, 4)\n",
        str(tmp_path / "a"), str(tmp_path / "s"),
    )  # fmt: skip
    array = zarrx.open_array(str(tmp_path / "a"))
    assert array.chunks == ((3, 3, 4), (2, 5))
    expected = np.full((10, 7), -1)
    expected[:8] = np.arange(56).reshape(8, 7)
    np.testing.assert_array_equal(array[...], expected)
    sharded = zarrx.open_array(str(tmp_path / "s"))
    assert sharded.shards == ((4, 8), (4,)) and sharded.chunks == (2, 2)
    np.testing.assert_array_equal(sharded[3:9, 1:3], np.arange(48.0).reshape(12, 4)[3:9, 1:3])


def test_zarrx_writes_from_dask_zarr_python_reads(tmp_path):
    x = _irregular()
    zarrx.to_zarr(x, str(tmp_path / "a"), chunks="dask")
    zarrx.create_array(str(tmp_path / "s"), shape=(12, 4), chunks=(2, 2), shards=((4, 8), (4,)), dtype="f8")[...] = (
        np.arange(48.0).reshape(12, 4))  # fmt: skip
    out = run_zarr_next(
        "a, s = zarr.open_array(sys.argv[1]), zarr.open_array(sys.argv[2])\n"
        "np.save(sys.argv[3], a[...]); np.save(sys.argv[4], s[...])\n"
        "print(json.dumps([a.read_chunk_sizes, s.read_chunk_sizes]))\n",
        str(tmp_path / "a"), str(tmp_path / "s"), str(tmp_path / "a.npy"), str(tmp_path / "s.npy"),
    )  # fmt: skip
    np.testing.assert_array_equal(np.load(tmp_path / "a.npy"), x.compute())
    np.testing.assert_array_equal(np.load(tmp_path / "s.npy"), np.arange(48.0).reshape(12, 4))
    chunk_sizes = json.loads(out)
    assert chunk_sizes[0] == [list(sizes) for sizes in x.chunks]


def test_zarrs_reads_and_writes_rectilinear_arrays(tmp_path):
    values = np.arange(70, dtype="<u2").reshape(10, 7)
    array = zarrx.create_array(str(tmp_path / "zarrx"), shape=(10, 7), chunks=((3, 3, 4), (2, 6)), dtype="u2", fill_value=5,
                               compressors=None)  # fmt: skip
    array[...] = values
    np.testing.assert_array_equal(zarrs_read(tmp_path / "zarrx", 2).view("<u2"), values)
    zarrs_write(tmp_path / "zarrs", {"shape": [10, 7], "data_type": "uint16", "fill_value": 5,
                                     "chunk_grid": grid_json([[3, 2], 4], [2, 6]),
                                     "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
                                     "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]}, values)  # fmt: skip
    np.testing.assert_array_equal(zarrx.open_array(str(tmp_path / "zarrs"))[...], values)
    for key in ["c/0/0", "c/2/1"]:  # chunks at their declared sizes, edge chunks padded with the fill value
        assert (tmp_path / "zarrx" / key).read_bytes() == (tmp_path / "zarrs" / key).read_bytes()
    assert RectilinearChunkGrid.from_json(json.loads((tmp_path / "zarrs" / "zarr.json").read_text())["chunk_grid"]).chunk_shapes == ((3, 3, 4), (2, 6))
