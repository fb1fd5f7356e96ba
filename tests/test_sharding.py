"""sharding_indexed: the spec's binary format, partial I/O that touches only what it needs, merging writes."""

import json
import struct

import numpy as np
import pytest

import zarrx
from zarrx.codecs import BloscCodec, BytesCodec, ChunkSpec, Crc32cCodec, GzipCodec, ShardingCodec, TransposeCodec, ZstdCodec
from zarrx.codecs.crc32c import crc32c
from zarrx.dtypes import resolve_data_type
from zarrx.errors import ChunkDecodeError, MetadataError
from zarrx.storage import MemoryStore
from zarrx.storage.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest

from .conftest import DTYPES, assert_same, sample_values
from .counting import CountingStore

SPEC_CONFIGURATION = {
    "chunk_shape": [32, 32],
    "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "gzip", "configuration": {"level": 1}}],
    "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
    "index_location": "end",
}
EMPTY = 2**64 - 1


def spec_of(shape, dtype="int32", fill=0):
    return ChunkSpec(tuple(shape), resolve_data_type(dtype), np.dtype(dtype).type(fill))


def test_spec_configuration_round_trips():
    codec = ShardingCodec.from_json(SPEC_CONFIGURATION)
    assert codec.to_json() == {"name": "sharding_indexed", "configuration": SPEC_CONFIGURATION}
    assert ShardingCodec.from_json({k: v for k, v in SPEC_CONFIGURATION.items() if k != "index_location"}).index_location == "end"


def test_index_size_example_from_spec():
    """Shard [64, 64], inner [32, 32], bytes + crc32c: 16 * 4 + 4 = 68 bytes."""
    codec = ShardingCodec(chunk_shape=(32, 32))
    assert codec.index_size(spec_of((64, 64))) == 68


def hand_built_shard(chunks, index_location):
    """A 2x1 shard of int16 inner chunks of shape (2,), raw bytes, bytes+crc32c index, built from the spec."""
    payload, entries = b"", []
    index_bytes = 2 * 16 + 4
    offset = index_bytes if index_location == "start" else 0
    for chunk in chunks:
        if chunk is None:
            entries += [EMPTY, EMPTY]
            continue
        data = np.asarray(chunk, dtype="<i2").tobytes()
        entries += [offset, len(data)]
        payload += data
        offset += len(data)
    index = struct.pack("<4Q", *entries)
    index += struct.pack("<I", crc32c(np.frombuffer(index, np.uint8)))
    return index + payload if index_location == "start" else payload + index


@pytest.mark.parametrize("index_location", ["start", "end"])
def test_decodes_a_hand_built_shard_with_an_empty_inner_chunk(index_location):
    codec = ShardingCodec(chunk_shape=(2,), codecs=[BytesCodec(endian="little")], index_location=index_location)
    spec = spec_of((4,), "int16", fill=-7)
    shard = hand_built_shard([[5, 6], None], index_location)
    np.testing.assert_array_equal(codec.decode(shard, spec), [5, 6, -7, -7])
    # and our encoder writes exactly that layout
    assert codec.encode(np.array([5, 6, -7, -7], dtype="int16"), spec) == shard


def test_reads_a_hand_built_shard_through_an_array():
    store = MemoryStore()
    array = zarrx.create_array(store, shape=(8,), chunks=(2,), shards=(4,), dtype="int16", fill_value=-7, compressors=None)
    store.set("c/1", hand_built_shard([None, [1, 2]], "end"))
    assert_same(array[...], np.array([-7, -7, -7, -7, -7, -7, 1, 2], dtype="int16"))


SHARDED_SHAPES = [
    ((), (), ()),
    ((0,), (2,), (4,)),
    ((11,), (2,), (4,)),
    ((10, 13), (2, 3), (4, 6)),
    ((5, 6, 7), (2, 2, 3), (4, 2, 6)),
]


@pytest.mark.parametrize("shape, chunks, shards", SHARDED_SHAPES, ids=[str(s) for s, _, _ in SHARDED_SHAPES])
@pytest.mark.parametrize("index_location", ["start", "end"])
def test_every_dtype_round_trips_sharded(dtype_name, shape, chunks, shards, index_location):
    store = MemoryStore()
    array = zarrx.create_array(store, "x", shape=shape, chunks=chunks, shards=shards, dtype=DTYPES[dtype_name])
    if index_location == "start":  # rebuild with the index first
        codec = array.metadata.codecs.array_bytes
        array = zarrx.create_array(
            store, "x", shape=shape, chunks=shards, dtype=DTYPES[dtype_name], overwrite=True, compressors=None,
            serializer=ShardingCodec(chunk_shape=chunks, codecs=codec.codecs, index_location="start"),
        )  # fmt: skip
    data = sample_values(dtype_name, array.dtype, shape)
    array[...] = data
    assert_same(zarrx.open_array(store, "x")[...], data)
    if shape and shape[0] > 3:
        update = sample_values(dtype_name, array.dtype, (2, *shape[1:]), seed=3)
        array[1:3] = update
        data[1:3] = update
        assert_same(zarrx.open_array(store, "x")[...], data)
        assert_same(array.oindex[[0, shape[0] - 1]], data[[0, shape[0] - 1]])


def test_properties_and_metadata():
    array = zarrx.create_array({}, shape=(100, 100), chunks=(10, 10), shards=(50, 50), dtype="float32")
    assert array.chunks == (10, 10) and array.shards == (50, 50)
    document = array.metadata.to_json()
    assert document["chunk_grid"]["configuration"]["chunk_shape"] == [50, 50]
    codec = document["codecs"][0]
    assert codec["name"] == "sharding_indexed"
    assert codec["configuration"]["index_codecs"] == [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]
    assert zarrx.create_array({}, shape=(10,), chunks=(5,), dtype="int8").shards is None


def test_shards_must_be_multiples_of_chunks():
    with pytest.raises(MetadataError, match="shards"):
        zarrx.create_array({}, shape=(10,), chunks=(3,), shards=(4,), dtype="int8")


def test_nested_sharding_and_transpose_before_sharding():
    inner = ShardingCodec(chunk_shape=(2, 2), codecs=[BytesCodec(), ZstdCodec(level=1)])
    store = MemoryStore()
    nested = zarrx.create_array(store, "n", shape=(9, 9), chunks=(8, 8), dtype="int32", compressors=None,
                                serializer=ShardingCodec(chunk_shape=(4, 4), codecs=[inner]))  # fmt: skip
    data = np.arange(81, dtype="int32").reshape(9, 9)
    nested[...] = data
    assert_same(zarrx.open_array(store, "n")[1:8, ::2], data[1:8, ::2])
    transposed = zarrx.create_array(store, "t", shape=(6, 10), chunks=(6, 4), dtype="int32", compressors=None,
                                    filters=[TransposeCodec(order=(1, 0))],
                                    serializer=ShardingCodec(chunk_shape=(2, 3), codecs=[BytesCodec()]))  # fmt: skip
    data = np.arange(60, dtype="int32").reshape(6, 10)
    transposed[...] = data
    transposed[2:5, 1] = -1
    data[2:5, 1] = -1
    assert_same(zarrx.open_array(store, "t")[...], data)
    assert transposed.chunks == (3, 2)  # the inner (2, 3) chunks of the transposed shard, in array order


# -- what partial I/O touches -------------------------------------------------------------------


def sharded(index_location="end", compressors=None, **kwargs):
    store = CountingStore(MemoryStore())
    serializer = ShardingCodec(
        chunk_shape=(4, 4), codecs=[BytesCodec(), *(compressors or [])], index_location=index_location
    )
    array = zarrx.create_array(store, shape=(32, 32), chunks=(16, 16), dtype="int32", compressors=None,
                               serializer=serializer, **kwargs)  # fmt: skip
    data = np.arange(32 * 32, dtype="int32").reshape(32, 32)
    array[...] = data
    store.reset()
    return store, array, data


def test_whole_shard_read_is_one_request():
    store, array, data = sharded()
    assert_same(array[:16, 16:], data[:16, 16:])
    assert store.chunk_requests() == [("c/0/1", OffsetByteRequest(0))]


@pytest.mark.parametrize("index_location, index_request", [("end", SuffixByteRequest(16 * 16 + 4)), ("start", RangeByteRequest(0, 16 * 16 + 4))])
def test_partial_read_fetches_index_then_only_touched_inner_chunks(index_location, index_request):
    store, array, data = sharded(index_location)
    # rows 5..6, cols 1..2 lie in the single inner chunk (1, 0) of shard (0, 0)
    assert_same(array[5:7, 1:3], data[5:7, 1:3])
    requests = store.chunk_requests()
    assert requests[0] == ("c/0/0", index_request)
    # the second batch reads the index again beside the inner chunk, to check that the shard
    # was not replaced between the two batches (tests/test_concurrency.py)
    assert len(requests) == 3 and requests[1] == ("c/0/0", index_request) and requests[2][0] == "c/0/0"
    assert requests[2][1].end - requests[2][1].start == 4 * 4 * 4  # one raw inner chunk
    assert store.batches == 2


def test_neighbouring_inner_chunks_are_coalesced_and_index_read_once_per_shard():
    store, array, data = sharded()
    # a row band across two shards: inner chunks (1, 0..3) of shard (0,0) and (1, 0..3) of shard (0,1)
    assert_same(array[5:7, :], data[5:7, :])
    requests = store.chunk_requests()
    index_reads = [key for key, byte_range in requests if isinstance(byte_range, SuffixByteRequest)]
    # each index twice: alone, then again in the batch of its inner chunks (the consistency check)
    assert sorted(index_reads) == ["c/0/0", "c/0/0", "c/0/1", "c/0/1"]
    data_reads = [(key, r) for key, r in requests if isinstance(r, RangeByteRequest)]
    assert len(data_reads) == 2  # four adjacent inner chunks per shard: one request each
    assert store.batches == 2


def test_point_reads_touch_few_bytes():
    store, array, data = sharded(compressors=[ZstdCodec(level=1)])
    points = (np.array([0, 31, 17]), np.array([0, 31, 3]))
    assert_same(array.vindex[points], data[points])
    # the indexes twice (alone, then beside the inner chunks, to check they did not change) + the three inner chunks
    assert store.bytes_read < 2 * 3 * (16 * 16 + 4) + 3 * 4 * 4 * 4
    assert store.batches == 2


def test_missing_shards_and_empty_inner_chunks_read_as_fill():
    store = CountingStore(MemoryStore())
    array = zarrx.create_array(store, shape=(8, 8), chunks=(2, 2), shards=(4, 4), dtype="float64", fill_value=np.nan)
    array[0, 0] = 1.0
    expected = np.full((8, 8), np.nan)
    expected[0, 0] = 1.0
    assert_same(array[...], expected)
    assert_same(array[1:3, 1:3], expected[1:3, 1:3])


@pytest.mark.parametrize("shards", [None, (4, 6)])
@pytest.mark.parametrize("where", ["memory", "folder"])
def test_whole_chunks_side_by_side_land_in_place(tmp_path, where, shards):
    """Whole (inner) chunks next to each other along the last dimension are decoded into a run and
    put in place with one copy (ChunkDecoder.put_many). A run ends at a new row of chunks, at the
    next shard (which starts where the last run stopped, two rows higher) and at a partial chunk;
    an absent one goes in place alone. Every value lands where it belongs."""
    store = MemoryStore() if where == "memory" else str(tmp_path / "a.zarr")
    array = zarrx.create_array(store, shape=(6, 14), chunks=(2, 3), shards=shards, dtype="int32", fill_value=-1,
                               compressors=[BloscCodec(cname="lz4", clevel=1, shuffle="shuffle")])  # fmt: skip
    expected = np.arange(84, dtype="int32").reshape(6, 14)
    expected[0:2, 0:3] = -1  # a chunk of fill values: not stored
    array[...] = expected
    for selection in [..., (slice(1, 5), slice(2, 13)), (slice(None), slice(3, 12)), (slice(4, 6),), (slice(0, 2), slice(6, 14))]:
        assert_same(array[selection], expected[selection])


# -- writes ------------------------------------------------------------------------------------


def test_whole_shard_write_is_one_object_and_needs_no_read():
    store = CountingStore(MemoryStore())
    array = zarrx.create_array(store, shape=(8, 8), chunks=(2, 2), shards=(4, 4), dtype="int32")
    store.reset()
    array[:4, :4] = 1
    assert store.writes == ["c/0/0"]
    assert store.chunk_requests() == []


def test_partial_write_keeps_untouched_inner_chunks_byte_for_byte():
    store, array, data = sharded(compressors=[GzipCodec(level=9)])
    codec = array.metadata.codecs.array_bytes
    spec = array.metadata.chunk_spec
    before = store.inner.get("c/0/0")
    index_before = codec.decode_index(memoryview(before)[-codec.index_size(spec):], spec, "c/0/0")
    store.reset()
    array[0, 0] = -5
    data[0, 0] = -5
    assert_same(array[...], data)
    after = store.inner.get("c/0/0")
    index_after = codec.decode_index(memoryview(after)[-codec.index_size(spec):], spec, "c/0/0")
    for inner in np.ndindex(4, 4):
        if inner == (0, 0):
            continue
        o1, n1 = (int(v) for v in index_before[inner])
        o2, n2 = (int(v) for v in index_after[inner])
        assert before[o1 : o1 + n1] == after[o2 : o2 + n2]
    assert store.writes == ["c/0/0"]


def test_empty_inner_chunks_are_left_out_and_empty_shards_deleted():
    store = MemoryStore()
    array = zarrx.create_array(store, shape=(8,), chunks=(2,), shards=(4,), dtype="int8", fill_value=0, compressors=None)
    array[0] = 1
    codec = array.metadata.codecs.array_bytes
    spec = array.metadata.chunk_spec
    shard = store.get("c/0")
    index = codec.decode_index(memoryview(shard)[-codec.index_size(spec):], spec, "c/0")
    assert index[1].tolist() == [EMPTY, EMPTY]
    assert len(shard) == 2 + codec.index_size(spec)  # one raw 2-byte inner chunk and the index
    array[0] = 0
    assert store.get("c/0") is None


def test_corrupt_shards_name_the_key():
    store = MemoryStore()
    array = zarrx.create_array(store, "a", shape=(8,), chunks=(2,), shards=(4,), dtype="int8", compressors=None)
    array[...] = 3
    good = store.get("a/c/1")
    store.set("a/c/1", good[:-1] + bytes([good[-1] ^ 1]))  # checksum of the index
    with pytest.raises(ChunkDecodeError, match="a/c/1"):
        array[...]
    with pytest.raises(ChunkDecodeError, match="a/c/1"):
        array[5]
    index = np.full((2, 2), 10**9, dtype="<u8").tobytes()  # both entries point far past the end
    store.set("a/c/1", b"\0" * 4 + index + struct.pack("<I", crc32c(np.frombuffer(index, np.uint8))))
    with pytest.raises(ChunkDecodeError, match="past the end"):
        array[...]
    store.set("a/c/1", b"\1")
    with pytest.raises(ChunkDecodeError, match="a/c/1"):
        array[...]


@pytest.mark.parametrize(
    "configuration, message",
    [
        ({**SPEC_CONFIGURATION, "chunk_shape": [3, 32]}, "evenly divide"),
        ({**SPEC_CONFIGURATION, "chunk_shape": [32]}, "dimension"),
        ({**SPEC_CONFIGURATION, "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "gzip", "configuration": {"level": 1}}]}, "fixed size"),
        ({**SPEC_CONFIGURATION, "index_location": "middle"}, "index_location"),
        ({k: v for k, v in SPEC_CONFIGURATION.items() if k != "codecs"}, "codecs"),
    ],
)
def test_invalid_sharding_metadata(configuration, message):
    document = {
        "zarr_format": 3, "node_type": "array", "shape": [64, 64], "data_type": "int32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [64, 64]}},
        "chunk_key_encoding": {"name": "default"}, "fill_value": 0,
        "codecs": [{"name": "sharding_indexed", "configuration": configuration}],
    }  # fmt: skip
    store = MemoryStore()
    store.set("zarr.json", json.dumps(document).encode())
    with pytest.raises(MetadataError, match=message):
        zarrx.open_array(store)
