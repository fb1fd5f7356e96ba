"""Arrays end to end: every data type x codec chains x shapes (edge chunks, 0-d, zero-length)."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import zarrx
from zarrx.codecs import BloscCodec, BytesCodec, Crc32cCodec, GzipCodec, TransposeCodec
from zarrx.errors import BoundsCheckError, ReadOnlyError, SelectionError
from zarrx.storage import MemoryStore

from .conftest import DTYPES, assert_same, sample_values

SHAPES = [
    ((), ()),
    ((0,), (3,)),
    ((7,), (3,)),
    ((5, 0), (2, 2)),
    ((10, 7), (3, 4)),
    ((4, 5, 6), (2, 3, 4)),
]

FIXED_CHAINS = {
    "raw": dict(compressors=None),
    "zstd": dict(),
    "big-gzip": dict(serializer=BytesCodec(endian="big"), compressors=[GzipCodec(level=3)]),
    "blosc-crc32c": dict(compressors=[BloscCodec(cname="lz4", clevel=5, shuffle="shuffle"), Crc32cCodec()]),
    "json-dicts": dict(compressors=[{"name": "zstd", "configuration": {"level": 3, "checksum": True}}]),
}
VARIABLE_CHAINS = {
    "raw": dict(compressors=None),
    "zstd": dict(),
    "gzip-crc32c": dict(compressors=[GzipCodec(level=1), Crc32cCodec()]),
}


def chains_for(name):
    return VARIABLE_CHAINS if name in ("string", "bytes") else FIXED_CHAINS


@pytest.mark.parametrize("shape, chunks", SHAPES, ids=[str(s) for s, _ in SHAPES])
def test_every_dtype_and_chain_round_trips(dtype_name, shape, chunks):
    for chain_name, chain in chains_for(dtype_name).items():
        store = MemoryStore()
        array = zarrx.create_array(store, "x", shape=shape, chunks=chunks, dtype=DTYPES[dtype_name], **chain)
        data = sample_values(dtype_name, array.dtype, shape)
        array[...] = data
        reopened = zarrx.open_array(store, "x")
        assert_same(reopened[...], data)
        if len(shape) >= 1 and shape[0] > 2:
            # a partial, misaligned write is read-modify-write
            update = sample_values(dtype_name, array.dtype, (2, *shape[1:]), seed=1)
            array[1:3] = update
            data[1:3] = update
            assert_same(zarrx.open_array(store, "x")[...], data)


def test_transpose_chain_matches_numpy():
    store = MemoryStore()
    array = zarrx.create_array(store, shape=(5, 6, 7), chunks=(2, 4, 3), dtype="int32", filters=[TransposeCodec(order=(2, 0, 1))])
    data = np.arange(5 * 6 * 7, dtype="int32").reshape(5, 6, 7)
    array[...] = data
    assert_same(zarrx.open_array(store)[1:4, ::-2, 5], data[1:4, ::-2, 5])
    assert zarrx.open_array(store).metadata.to_json()["codecs"][0] == {"name": "transpose", "configuration": {"order": [2, 0, 1]}}


def test_missing_chunks_read_as_fill_value():
    array = zarrx.create_array({}, shape=(6, 6), chunks=(3, 3), dtype="float32", fill_value=-1.5)
    array[0:3, 0:3] = 1
    expected = np.full((6, 6), -1.5, dtype="float32")
    expected[:3, :3] = 1
    assert_same(array[...], expected)


def test_fill_value_chunks_are_not_stored_and_stored_ones_are_deleted():
    store = MemoryStore()
    array = zarrx.create_array(store, shape=(4, 4), chunks=(2, 2), dtype="int16", fill_value=7)
    array[...] = 7
    assert array.nchunks_initialized == 0
    array[0, 0] = 1
    assert array.nchunks_initialized == 1
    array[0, 0] = 7
    assert array.nchunks_initialized == 0
    keep = zarrx.create_array(MemoryStore(), "keep", shape=(4, 4), chunks=(2, 2), dtype="int16", fill_value=7, write_empty_chunks=True)
    keep[...] = 7
    assert keep.nchunks_initialized == 4


def test_negative_zero_is_not_the_fill_value():
    array = zarrx.create_array({}, shape=(2,), chunks=(2,), dtype="float64", fill_value=0.0)
    array[...] = -0.0
    assert array.nchunks_initialized == 1
    assert np.signbit(array[...]).all()


def test_nan_fill_value_chunk_not_stored():
    array = zarrx.create_array({}, shape=(4,), chunks=(2,), dtype="float32", fill_value=np.nan)
    array[...] = np.nan
    assert array.nchunks_initialized == 0


def test_stored_keys_follow_chunk_key_encoding():
    store = MemoryStore()
    zarrx.create_array(store, "a", shape=(4, 4), chunks=(2, 2), dtype="u1", compressors=None)[...] = 1
    zarrx.create_array(store, "b", shape=(4, 4), chunks=(2, 2), dtype="u1", chunk_key_encoding={"name": "v2", "separator": "."})[...] = 1
    zarrx.create_array(store, "c", shape=(), dtype="u1")[...] = 1
    keys = set(store.list_prefix(""))
    assert {"a/c/0/0", "a/c/1/1", "b/0.0", "b/1.1", "c/c"} <= keys
    assert zarrx.open_array(store, "a").nchunks_initialized == 4
    assert zarrx.open_array(store, "b").nchunks_initialized == 4


def test_zero_d_array():
    array = zarrx.create_array({}, shape=(), dtype="float64", fill_value=3.5)
    assert array[()] == 3.5
    array[...] = 2.0
    assert array[...] == 2.0
    assert array.nchunks == 1


@st.composite
def selection_case(draw):
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(0, 8)) for _ in range(ndim))
    chunks = tuple(draw(st.integers(1, 4)) for _ in range(ndim))
    selection = []
    for n in shape:
        kind = draw(st.sampled_from(["int", "slice"] if n else ["slice"]))
        if kind == "int":
            selection.append(draw(st.integers(-n, n - 1)))
        else:
            bound = st.one_of(st.none(), st.integers(-n - 2, n + 2))
            step = st.one_of(st.none(), st.sampled_from([1, 2, 3, -1, -2, -3]))
            selection.append(slice(draw(bound), draw(bound), draw(step)))
    return shape, chunks, tuple(selection)


@settings(max_examples=150, deadline=None)
@given(selection_case())
def test_hypothesis_read_and_write_selections_match_numpy(case):
    shape, chunks, selection = case
    expected = np.arange(int(np.prod(shape)), dtype="int32").reshape(shape)
    array = zarrx.create_array({}, shape=shape, chunks=chunks, dtype="int32", fill_value=-1)
    array[...] = expected
    assert_same(array[selection], expected[selection])
    new = -np.arange(expected[selection].size, dtype="int32").reshape(expected[selection].shape) - 5
    array[selection] = new
    expected[selection] = new
    assert_same(array[...], expected)


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_hypothesis_oindex_and_vindex_match_numpy(data):
    shape = (data.draw(st.integers(1, 9)), data.draw(st.integers(1, 9)))
    chunks = (data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4)))
    expected = np.arange(shape[0] * shape[1], dtype="int64").reshape(shape)
    array = zarrx.create_array({}, shape=shape, chunks=chunks, dtype="int64")
    array[...] = expected
    rows = np.array(data.draw(st.lists(st.integers(-shape[0], shape[0] - 1), max_size=5)), dtype=int)
    cols = np.array(data.draw(st.lists(st.integers(-shape[1], shape[1] - 1), max_size=5)), dtype=int)
    assert_same(array.oindex[rows, cols], expected[np.ix_(rows, cols)])
    n = min(len(rows), len(cols))
    assert_same(array.vindex[rows[:n], cols[:n]], expected[rows[:n], cols[:n]])
    # writes: distinct points only, so the order of duplicates does not matter
    points = sorted({(int(r) % shape[0], int(c) % shape[1]) for r, c in zip(rows[:n], cols[:n])})
    if points:
        r, c = np.array(points).T
        array.vindex[r, c] = -9
        expected[r, c] = -9
        assert_same(array[...], expected)
    mask = expected % 3 == 0
    assert_same(array.vindex[mask], expected[mask])
    assert_same(array.oindex[mask[:, 0], :], expected[mask[:, 0], :])


def test_getitem_with_arrays_is_outer_indexing_like_numpy_for_one_array():
    data = np.arange(20).reshape(4, 5)
    array = zarrx.create_array({}, shape=(4, 5), chunks=(3, 2), dtype=data.dtype)
    array[...] = data
    assert_same(array[[3, 0, 0], 1:4], data[[3, 0, 0], 1:4])
    array[[0, 2], :] = 0
    data[[0, 2], :] = 0
    assert_same(array[...], data)


def test_selection_errors():
    array = zarrx.create_array({}, shape=(4, 5), chunks=(2, 2), dtype="int8")
    with pytest.raises(BoundsCheckError, match="dimension 1"):
        array[0, 5]
    with pytest.raises(SelectionError):
        array[0, 0, 0]
    with pytest.raises(SelectionError, match="shape"):
        array[:2, :2] = np.zeros((3, 3))
    with pytest.raises(zarrx.errors.ZarrxError):
        array[0, 0] = "not a number"


def test_read_only_array_refuses_writes():
    store = MemoryStore()
    zarrx.create_array(store, "x", shape=(2,), dtype="int8")
    array = zarrx.open_array(store, "x", mode="r")
    with pytest.raises(ReadOnlyError, match="/x"):
        array[0] = 1
    with pytest.raises(ReadOnlyError):
        array.attrs["a"] = 1


def test_resize_shrink_then_grow_shows_fill_not_stale_data():
    store = MemoryStore()
    array = zarrx.create_array(store, shape=(10, 10), chunks=(4, 4), dtype="int32", fill_value=0)
    original = np.arange(100, dtype="int32").reshape(10, 10) + 1
    array[...] = original
    array.resize(5, 6)
    assert array.shape == (5, 6)
    assert_same(array[...], original[:5, :6])
    assert array.nchunks_initialized == 4  # chunks in rows/cols 0-1 survive
    array.resize((10, 10))
    expected = np.zeros((10, 10), dtype="int32")
    expected[:5, :6] = original[:5, :6]
    assert_same(zarrx.open_array(store)[...], expected)


def test_append():
    array = zarrx.create_array({}, shape=(3, 2), chunks=(2, 2), dtype="float32")
    array[...] = 1
    assert array.append(np.full((4, 2), 2, dtype="float32")) == (7, 2)
    assert_same(array[...], np.concatenate([np.ones((3, 2), "float32"), np.full((4, 2), 2, "float32")]))
    array.append(np.full((7, 1), 3, dtype="float32"), axis=1)
    assert array.shape == (7, 3)
    with pytest.raises(SelectionError):
        array.append(np.zeros((2, 2)))


def test_attributes_persist():
    store = MemoryStore()
    array = zarrx.create_array(store, "v", shape=(2,), dtype="int8", attributes={"units": "K"})
    array.attrs["long_name"] = "temperature"
    array.attrs.update(a=1, b=[1, 2])
    del array.attrs["a"]
    assert zarrx.open_array(store, "v").attrs.asdict() == {"units": "K", "long_name": "temperature", "b": [1, 2]}


def test_properties_repr_and_info():
    store = MemoryStore()
    array = zarrx.create_array(store, "g/temp", shape=(10, 20), chunks=(5, 5), dtype="<f4", dimension_names=["y", "x"])
    array[:5, :5] = 1
    assert (array.ndim, array.size, array.nbytes, array.nchunks) == (2, 200, 800, 8)
    assert array.name == "/g/temp" and array.path == "g/temp" and array.basename == "temp"
    assert array.dimension_names == ("y", "x")
    assert array.shards is None
    assert "shape=(10, 20)" in repr(array) and "float32" in repr(array)
    text = str(array.info_complete())
    assert "Chunks initialized" in text and "1/8" in text and "zstd" in text
    assert len(array) == 10


def test_auto_chunks_are_bounded():
    array = zarrx.create_array({}, shape=(10_000, 10_000), dtype="float64")
    assert np.prod(array.chunks) * 8 <= 4 * 2**20
    assert all(c >= 1 for c in array.chunks)


def test_many_chunk_read_uses_one_batched_store_call():
    # a store with round trips (a store whose reads are local is read chunk by chunk, one
    # batch_reader per thread: test_small_chunk_reads_go_through_the_batch_reader)
    class Counting(MemoryStore):
        reads_are_local = False
        calls = 0
        in_batch = False

        def get_many(self, keys):
            Counting.calls += 1
            Counting.in_batch = True
            try:
                return super().get_many(keys)
            finally:
                Counting.in_batch = False

        def get(self, key, byte_range=None):
            if not key.endswith("zarr.json") and not Counting.in_batch:
                raise AssertionError(f"per-chunk get({key!r})")
            return super().get(key, byte_range)

    store = Counting()
    array = zarrx.create_array(store, shape=(64, 64), chunks=(4, 4), dtype="int16")
    array[...] = 1
    Counting.calls = 0
    assert array[...].sum() == 64 * 64
    assert Counting.calls == 1


def test_resize_deletes_stale_chunks_beyond_the_grid():
    """A chunk another writer left past the array's edge must not reappear when the array grows."""
    store = MemoryStore()
    array = zarrx.create_array(store, shape=(4,), chunks=(2,), dtype="int8", fill_value=0)
    array[...] = 1
    big = zarrx.create_array(MemoryStore(), shape=(8,), chunks=(2,), dtype="int8", fill_value=0)
    big[...] = 9
    store.set("c/3", big.store.get("c/3"))  # stale chunk at [6, 8)
    array.resize(3)
    array.resize(8)
    assert_same(array[...], np.array([1, 1, 1, 0, 0, 0, 0, 0], dtype="int8"))


def test_growing_rewrites_no_chunk_when_nothing_lies_past_the_edge():
    # growing lists the chunks once (what an interrupted append left past the edge is cleared
    # before the new shape shows it: tests/test_append_crash.py) and writes only the metadata
    class Watching(MemoryStore):
        touched = []

        def set(self, key, value):
            self.touched.append(key)
            super().set(key, value)

        def set_many(self, items):
            self.touched.extend(items)
            super().set_many(items)

        def list_prefix(self, prefix):
            self.touched.append(("list", prefix))
            return super().list_prefix(prefix)

    store = Watching()
    array = zarrx.create_array(store, shape=(5,), chunks=(4,), dtype="int8")
    array[...] = 1
    Watching.touched.clear()
    array.resize(7)
    listings = [item for item in Watching.touched if isinstance(item, tuple)]
    assert len(listings) == 1 and [item for item in Watching.touched if item not in listings] == ["zarr.json"]


def test_full_read_peak_memory_is_close_to_the_output(tmp_path):
    import tracemalloc

    array = zarrx.create_array(str(tmp_path / "a.zarr"), shape=(2048, 4096), chunks=(256, 512), dtype="float64")
    array[...] = np.random.default_rng(0).random((2048, 4096))  # 64 MiB
    reopened = zarrx.open_array(str(tmp_path / "a.zarr"))
    tracemalloc.start()
    try:
        out = reopened[...]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak <= 1.2 * out.nbytes, f"peak {peak / out.nbytes:.2f}x the output"
