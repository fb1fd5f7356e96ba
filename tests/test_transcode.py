"""Copies between arrays that store the same chunks go unit by unit (zarrx/io/transcode.py).

``zarrx.convert`` keeping the chunks and ``dst[...] = src`` between arrays of one layout decode
each source chunk (or inner chunk) and encode it again with the destination's codecs, never
assembling a block of the step's values. Every case is checked value for value against the
source, and read back by zarr-python too.
"""

from __future__ import annotations

import numpy as np
import pytest
import zarr

import zarrx
from zarrx.errors import ChunkDecodeError
from zarrx.io.transcode import transcodes
from zarrx.storage import MemoryStore, MetricsStore

SHAPE = (37, 45)  # edge chunks and edge shards cut short on both axes
BLOSC = [{"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle", "typesize": 4}}]
ZSTD = [{"name": "zstd", "configuration": {"level": 3}}]


def values() -> np.ndarray:
    data = np.arange(np.prod(SHAPE), dtype="i4").reshape(SHAPE) - 500
    data[:8, :10] = 0  # all fill: left out
    data[20:30, 11:20] = 7
    return data


def make(store, layout: dict, data: np.ndarray | None = None, **options):
    array = zarrx.create_array(store, shape=SHAPE, dtype="i4", **layout, **options)
    array[...] = values() if data is None else data
    return array


LAYOUTS = {
    "sharded": dict(chunks=(4, 5), shards=(8, 20), compressors=BLOSC),
    "chunks": dict(chunks=(4, 5), compressors=BLOSC),
}
INTO = {  # (source layout, destination layout)
    "sharded -> sharded, new codecs": ("sharded", dict(chunks=(4, 5), shards=(8, 20), compressors=ZSTD)),
    "sharded -> sharded, a filter added": ("sharded", dict(chunks=(4, 5), shards=(8, 20), compressors=ZSTD,
                                                          filters=[{"name": "numcodecs.delta", "configuration": {"dtype": "<i4"}}])),
    "chunks -> shards of them": ("chunks", dict(chunks=(4, 5), shards=(12, 10), compressors=ZSTD)),
    "chunks -> chunks, new codecs": ("chunks", dict(chunks=(4, 5), compressors=ZSTD)),
}


@pytest.mark.filterwarnings("ignore:Numcodecs codecs are not in the Zarr version 3")  # zarr-python reading the delta filter
@pytest.mark.parametrize("case", INTO)
@pytest.mark.parametrize("form", ["setitem", "convert"])
def test_a_copy_of_the_same_chunks_goes_unit_by_unit_and_keeps_every_value(case, form, tmp_path):
    source_layout, target_layout = INTO[case]
    source = make(str(tmp_path / "src"), LAYOUTS[source_layout])
    if form == "setitem":
        target = zarrx.create_array(str(tmp_path / "dst"), shape=SHAPE, dtype="i4", **target_layout)
        assert transcodes(source.handle, target.handle)
        target[...] = source
    else:
        options = {key: value for key, value in target_layout.items() if key != "chunks"}
        target = zarrx.convert(str(tmp_path / "src"), str(tmp_path / "dst"), progress=False, **options)
        assert transcodes(source.handle, target.handle)
    np.testing.assert_array_equal(target[...], values())
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "dst"), mode="r")[...], values())
    # the all-fill units (rows 0-7, columns 0-9) are left out, as a write of the values would leave them
    assert not stored_unit(target, (0, 0)) and not stored_unit(target, (1, 1)) and stored_unit(target, (2, 0))


def stored_unit(array, unit: tuple[int, int]) -> bool:
    """Whether the destination stores the unit (chunk, or inner chunk) at ``unit``."""
    handle = array.handle
    if handle.sharding is None:
        return handle.store.get(handle.object_key(unit)) is not None
    shard, inner = handle.locate(unit)
    raw = handle.store.get(handle.object_key(shard))
    return raw is not None and handle.sharding.read_index(raw, handle.spec, "", whole=True).location(inner) is not None


def test_a_sharded_source_is_read_one_whole_shard_per_destination_shard():
    store, written = MetricsStore(MemoryStore()), MetricsStore(MemoryStore())
    source = make(store, LAYOUTS["sharded"])
    target = zarrx.create_array(written, shape=SHAPE, dtype="i4", chunks=(4, 5), shards=(8, 20), compressors=ZSTD)
    store.reset()
    written.reset()
    target[...] = source
    summary = store.summary()
    # 5 x 3 shards, each read once, whole (a step of small shards fetches them in one call) ...
    assert "get_ranges" not in summary and summary["get_many"].requests == target.nchunks
    # ... and written in one call: a remote store gets them concurrently, not one after another
    assert list(written.summary()) == ["set_many"] and written.summary()["set_many"].requests == target.nchunks
    np.testing.assert_array_equal(target[...], values())


def test_what_the_destination_held_is_replaced_whole():
    source = make({}, LAYOUTS["sharded"], data=np.zeros(SHAPE, "i4") + np.arange(45, dtype="i4"))
    source[8:16, :] = 0  # a row of units all fill, some of them absent
    target = make({}, dict(chunks=(4, 5), shards=(8, 20), compressors=ZSTD), data=np.full(SHAPE, 9, "i4"))
    target[...] = source
    np.testing.assert_array_equal(target[...], source[...])


def test_a_destination_writing_empty_chunks_stores_every_unit():
    source = make({}, LAYOUTS["chunks"])
    target = zarrx.create_array({}, shape=SHAPE, dtype="i4", chunks=(4, 5), compressors=ZSTD, write_empty_chunks=True)
    assert transcodes(source.handle, target.handle)
    target[...] = source
    assert target.nchunks_initialized == target.nchunks
    np.testing.assert_array_equal(target[...], values())


def test_a_corrupt_source_inner_chunk_is_named():
    store = MemoryStore()
    source = make(store, LAYOUTS["sharded"])
    key = "c/1/0"
    shard = bytearray(store.get(key))
    shard[4] ^= 0xFF  # the first inner chunk's blosc header: its decoded size
    store.set(key, bytes(shard))
    target = zarrx.create_array({}, shape=SHAPE, dtype="i4", chunks=(4, 5), shards=(8, 20), compressors=ZSTD)
    with pytest.raises(ChunkDecodeError, match=r"c/1/0 inner chunk \(0, 0\)"):
        target[...] = source


@pytest.mark.parametrize(
    "change",
    [
        dict(chunks=(5, 4), compressors=ZSTD),  # other units
        dict(chunks=(4, 5), shards=(8, 10), compressors=ZSTD),  # a source shard into two
        dict(chunks=(4, 5), compressors=ZSTD),  # a source shard into chunks
        dict(chunks=(4, 5), shards=(8, 20), compressors=ZSTD, fill_value=1),  # absent means another value
        dict(chunks=(4, 5), shards=(8, 20), compressors=ZSTD, dtype="i8"),
        dict(chunks=(4, 5), shards=(8, 20), compressors=None),  # no codec: read into, written from a block
    ],
)
def test_other_layouts_take_the_step_by_step_copy(change):
    source = make({}, LAYOUTS["sharded"])
    options = {"dtype": "i4", **change}
    target = zarrx.create_array({}, shape=SHAPE, **options)
    assert not transcodes(source.handle, target.handle)
    target[...] = source
    np.testing.assert_array_equal(target[...], values())


@pytest.mark.parametrize("source_layout", LAYOUTS)
def test_units_stored_all_fill_in_the_source_are_left_out(source_layout):
    source = make({}, LAYOUTS[source_layout], write_empty_chunks=True)
    assert stored_unit(source, (0, 0))
    target = zarrx.create_array({}, shape=SHAPE, dtype="i4", chunks=(4, 5), shards=(8, 20), compressors=ZSTD)
    target[...] = source
    assert not stored_unit(target, (0, 0)) and stored_unit(target, (2, 0))
    np.testing.assert_array_equal(target[...], values())


@pytest.mark.parametrize("damage", ["cut short", "index past the end"])
def test_a_damaged_source_shard_is_named(damage):
    store = MemoryStore()
    make(store, LAYOUTS["sharded"])
    key = "c/1/0"
    shard = bytearray(store.get(key))
    if damage == "cut short":
        shard = shard[: len(shard) // 2]
    else:  # the first index entry's offset (the index at the end, 16 bytes an entry, then a crc32c)
        entries = len(shard) - 4 - 8 * 2 * 8
        shard[entries : entries + 8] = (len(shard) * 2).to_bytes(8, "little")
    store.set(key, bytes(shard))
    source = zarrx.open_array(store)
    target = zarrx.create_array({}, shape=SHAPE, dtype="i4", chunks=(4, 5), shards=(8, 20), compressors=ZSTD)
    with pytest.raises(zarrx.errors.ZarrxError, match="c/1/0"):
        target[...] = source
