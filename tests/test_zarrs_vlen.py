"""The ``zarrs.vlen`` codec: chunks laid out by hand from the zarrs documentation, round trips
through arrays, the configuration's JSON forms (versions 0.0 and 0.1, the alias name), and
corrupt chunks, which must raise ChunkDecodeError naming the chunk key, bounded.

The expected layouts are built here with ``struct`` and the compressors' own libraries, never
with the codec: ``u64le(len(index)) | index | data`` ("start") or ``data | index |
u64le(len(index))`` ("end"), the index holding the ``n + 1`` offsets of the elements in the data.
"""

from __future__ import annotations

import gzip
import json
import struct
import tracemalloc

import google_crc32c
import numcodecs.blosc
import numcodecs.zstd
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import zarrx
from zarrx.codecs import (
    BloscCodec,
    BytesCodec,
    ChunkSpec,
    CodecPipeline,
    Crc32cCodec,
    GzipCodec,
    ZarrsVlenCodec,
    ZstdCodec,
    codec_from_json,
    get_codec_class,
)
from zarrx.dtypes import resolve_data_type
from zarrx.errors import ChunkDecodeError, ChunkEncodeError, MetadataError, UnknownCodecError
from zarrx.storage import MemoryStore

KEY = "c/0"
ALIAS = "https://codec.zarrs.dev/array_to_bytes/vlen"
RAW = {"name": "bytes"}
LITTLE = {"name": "bytes", "configuration": {"endian": "little"}}
ZSTD = {"name": "zstd", "configuration": {"level": 1}}
CRC32C = {"name": "crc32c"}
STRINGS = ["a", "bé", "", "日本語", "null\x00inside", "🙂" * 3]
BLOBS = [b"\x00", b"", b"\xff\xfe", bytes(range(256)), b"abc"]


# -- helpers: the layout by hand --------------------------------------------------------------


def make_spec(dtype, shape) -> ChunkSpec:
    data_type = resolve_data_type(dtype)
    return ChunkSpec(tuple(shape), data_type, data_type.default_fill_value())


def pieces_of(values) -> list[bytes]:
    return [value.encode() if isinstance(value, str) else value for value in values]


def offsets_of(pieces) -> list[int]:
    offsets = [0]
    for piece in pieces:
        offsets.append(offsets[-1] + len(piece))
    return offsets


def index_bytes(offsets, index_data_type: str = "uint32", endian: str = "<") -> bytes:
    return struct.pack(f"{endian}{len(offsets)}{'I' if index_data_type == 'uint32' else 'Q'}", *offsets)


def chunk(index: bytes, data: bytes, location: str = "start") -> bytes:
    """The seed document's layout: the encoded index length as u64le, at the start or the end."""
    length = struct.pack("<Q", len(index))
    return length + index + data if location == "start" else data + index + length


def configuration(data_codecs=({"name": "bytes"},), index_codecs=(LITTLE,), index_data_type="uint32", location="start"):
    config = {"data_codecs": list(data_codecs), "index_codecs": list(index_codecs), "index_data_type": index_data_type}
    if location is not None:  # None: configuration version 0.0, which has no index_location
        config["index_location"] = location
    return config


def decode_with(config, raw: bytes, dtype: str, shape, name: str = "zarrs.vlen") -> np.ndarray:
    codec = codec_from_json({"name": name, "configuration": config}, "codecs[0]")
    spec = make_spec(dtype, shape)
    pipeline = CodecPipeline.from_codecs([codec]).evolve_from_spec(spec)
    pipeline.validate(spec)
    return pipeline.decode(raw, spec, KEY)


def as_array(values, dtype: str) -> np.ndarray:
    if dtype == "string":
        return np.array(values, dtype=np.dtypes.StringDType())
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def blosc(data: bytes, typesize: int, shuffle: int) -> bytes:
    return bytes(numcodecs.blosc.compress(data, b"zstd", 5, shuffle, 0, typesize))


# -- hand-built chunks decode --------------------------------------------------------------------

#: the seed document's example configuration (blosc on both chains, uint32 index at the end)
DOCUMENT_EXAMPLE = {
    "data_codecs": [
        {"name": "bytes"},
        {
            "name": "blosc",
            "configuration": {"cname": "zstd", "clevel": 5, "shuffle": "bitshuffle", "typesize": 1, "blocksize": 0},
        },
    ],
    "index_codecs": [
        {"name": "bytes", "configuration": {"endian": "little"}},
        {
            "name": "blosc",
            "configuration": {"cname": "zstd", "clevel": 5, "shuffle": "shuffle", "typesize": 4, "blocksize": 0},
        },
    ],
    "index_data_type": "uint32",
    "index_location": "end",
}


HAND_BUILT = {
    # name: (configuration, build(pieces) -> chunk bytes)
    "uint32-start": (
        configuration(),
        lambda p: chunk(index_bytes(offsets_of(p)), b"".join(p), "start"),
    ),
    "uint32-end": (
        configuration(location="end"),
        lambda p: chunk(index_bytes(offsets_of(p)), b"".join(p), "end"),
    ),
    "uint64-start": (
        configuration(index_data_type="uint64"),
        lambda p: chunk(index_bytes(offsets_of(p), "uint64"), b"".join(p), "start"),
    ),
    "uint64-end": (
        configuration(index_data_type="uint64", location="end"),
        lambda p: chunk(index_bytes(offsets_of(p), "uint64"), b"".join(p), "end"),
    ),
    "v0.0-uint64 (index at the start)": (
        configuration(index_data_type="uint64", location=None),
        lambda p: chunk(index_bytes(offsets_of(p), "uint64"), b"".join(p), "start"),
    ),
    "v0.0-uint32 (index at the start)": (
        configuration(location=None),
        lambda p: chunk(index_bytes(offsets_of(p)), b"".join(p), "start"),
    ),
    "big-endian index": (
        configuration(index_codecs=[{"name": "bytes", "configuration": {"endian": "big"}}], location="end"),
        lambda p: chunk(index_bytes(offsets_of(p), endian=">"), b"".join(p), "end"),
    ),
    "zstd data, uint32-end": (
        configuration(data_codecs=[{"name": "bytes"}, {"name": "zstd", "configuration": {"level": 3}}], location="end"),
        lambda p: chunk(index_bytes(offsets_of(p)), bytes(numcodecs.zstd.compress(b"".join(p), 3)), "end"),
    ),
    "zstd data, uint64-start": (
        configuration(data_codecs=[RAW, ZSTD], index_data_type="uint64"),
        lambda p: chunk(index_bytes(offsets_of(p), "uint64"), bytes(numcodecs.zstd.compress(b"".join(p), 1)), "start"),
    ),
    "gzip data, zstd index, v0.0": (
        configuration(
            data_codecs=[{"name": "bytes"}, {"name": "gzip", "configuration": {"level": 5}}],
            index_codecs=[LITTLE, {"name": "zstd", "configuration": {"level": 0}}],
            location=None,
        ),
        lambda p: chunk(bytes(numcodecs.zstd.compress(index_bytes(offsets_of(p)), 0)), gzip.compress(b"".join(p)), "start"),
    ),
    "crc32c on both chains": (
        configuration(data_codecs=[RAW, CRC32C], index_codecs=[LITTLE, CRC32C], location="end"),
        lambda p: chunk(_with_crc(index_bytes(offsets_of(p))), _with_crc(b"".join(p)), "end"),
    ),
    "the document's example (blosc)": (
        DOCUMENT_EXAMPLE,
        lambda p: chunk(blosc(index_bytes(offsets_of(p)), 4, 1), blosc(b"".join(p), 1, 2), "end"),
    ),
}


def _with_crc(data: bytes) -> bytes:
    return data + struct.pack("<I", google_crc32c.value(data))


@pytest.mark.parametrize("case", HAND_BUILT)
@pytest.mark.parametrize(("dtype", "values"), [("string", STRINGS), ("bytes", BLOBS)], ids=["string", "bytes"])
def test_hand_built_chunks_decode(case, dtype, values) -> None:
    config, build = HAND_BUILT[case]
    decoded = decode_with(config, build(pieces_of(values)), dtype, (len(values),))
    assert decoded.dtype == make_spec(dtype, ()).dtype
    assert decoded.tolist() == values


@pytest.mark.parametrize("case", HAND_BUILT)
def test_hand_built_chunks_decode_in_c_order(case) -> None:
    config, build = HAND_BUILT[case]
    values = ["r0c0", "r0c1", "é", "", "r1c1", "x" * 70]
    decoded = decode_with(config, build(pieces_of(values)), "string", (2, 3))
    assert decoded.tolist() == [values[:3], values[3:]]


@pytest.mark.parametrize("case", ["uint32-start", "uint64-end", "v0.0-uint64 (index at the start)"])
def test_hand_built_chunks_are_what_the_codec_writes(case) -> None:
    """For raw chains the encoding is fully determined: ours must be byte for byte the layout."""
    config, build = HAND_BUILT[case]
    codec = ZarrsVlenCodec.from_json(config)
    for dtype, values in [("string", STRINGS), ("bytes", BLOBS)]:
        spec = make_spec(dtype, (len(values),))
        pipeline = CodecPipeline.from_codecs([codec]).evolve_from_spec(spec)
        assert pipeline.encode(as_array(values, dtype), spec) == build(pieces_of(values))


def test_special_chunks_by_hand() -> None:
    # a 0-d chunk has one element: two offsets
    assert decode_with(configuration(), chunk(index_bytes([0, 3]), b"h\xc3\xa9"), "bytes", ()).tolist() == b"h\xc3\xa9"
    assert decode_with(configuration(), chunk(index_bytes([0, 4]), "héj".encode()), "string", ()).tolist() == "héj"
    # all elements empty: no data at all, and (as zarrs writes it) the data codecs are skipped
    zstd_data = configuration(data_codecs=[RAW, ZSTD], location="end")
    assert decode_with(zstd_data, chunk(index_bytes([0, 0, 0]), b"", "end"), "string", (2,)).tolist() == ["", ""]
    # an empty chunk still has its one offset
    assert decode_with(configuration(), chunk(index_bytes([0]), b""), "string", (0, 3)).shape == (0, 3)
    # the alias name reads the same
    raw = chunk(index_bytes([0, 1, 3]), b"abc", "end")
    assert decode_with(configuration(location="end"), raw, "string", (2,), name=ALIAS).tolist() == ["a", "bc"]


def test_empty_data_is_written_without_the_data_codecs() -> None:
    codec = ZarrsVlenCodec(data_codecs=[BytesCodec(), ZstdCodec(level=1)], index_data_type="uint32", index_location="end")
    spec = make_spec("string", (3,))
    encoded = CodecPipeline.from_codecs([codec]).evolve_from_spec(spec).encode(as_array(["", "", ""], "string"), spec)
    assert encoded == chunk(index_bytes([0, 0, 0, 0]), b"", "end")


# -- round trips through arrays --------------------------------------------------------------------

SERIALIZERS = [
    ZarrsVlenCodec(),
    ZarrsVlenCodec(index_data_type="uint32", index_location="end"),
    ZarrsVlenCodec(data_codecs=[BytesCodec(), ZstdCodec(level=3)], index_codecs=[BytesCodec(endian="big"), Crc32cCodec()]),
    ZarrsVlenCodec.from_json(DOCUMENT_EXAMPLE),
    ZarrsVlenCodec(
        data_codecs=[BytesCodec(), GzipCodec(level=1)], index_codecs=[BytesCodec(), BloscCodec()], index_location="end"
    ),
]
ARRAY_SHAPES = [((), ()), ((0,), (4,)), ((7,), (3,)), ((3, 4), (3, 4)), ((5, 6), (2, 4))]


def sample(dtype: str, shape, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    size = int(np.prod(shape))
    words = STRINGS if dtype == "string" else BLOBS
    return as_array([words[i] for i in rng.integers(0, len(words), size)], dtype).reshape(shape)


@pytest.mark.parametrize(("shape", "chunks"), ARRAY_SHAPES, ids=str)
@pytest.mark.parametrize("serializer", SERIALIZERS, ids=range(len(SERIALIZERS)))
@pytest.mark.parametrize("dtype", ["string", "bytes"])
def test_array_round_trip(dtype, serializer, shape, chunks) -> None:
    store = MemoryStore()
    array = zarrx.create_array(store, "x", shape=shape, chunks=chunks, dtype=dtype, serializer=serializer)
    data = sample(dtype, shape)
    array[...] = data
    reopened = zarrx.open_array(store, "x")
    assert reopened[...].tolist() == data.tolist()
    assert reopened[...].dtype == data.dtype
    written = json.loads(store.get("x/zarr.json"))["codecs"][0]
    assert written["name"] == "zarrs.vlen"
    assert set(written["configuration"]) == {"data_codecs", "index_codecs", "index_data_type", "index_location"}


def test_array_round_trip_with_fill_value_partial_writes_and_compressor() -> None:
    store = MemoryStore()
    array = zarrx.create_array(
        store, shape=(4, 5), chunks=(3, 2), dtype="string", fill_value="∅", serializer=ZarrsVlenCodec(index_location="end")
    )
    array[1:3, 1:4] = np.array([["ä", "", "b"], ["日本", "c" * 100, ""]], dtype=np.dtypes.StringDType())
    expected = np.full((4, 5), "∅", dtype=np.dtypes.StringDType())
    expected[1:3, 1:4] = [["ä", "", "b"], ["日本", "c" * 100, ""]]
    assert zarrx.open_array(store)[...].tolist() == expected.tolist()
    assert json.loads(store.get("zarr.json"))["codecs"][1]["name"] == "zstd"  # the array's own compressor


def test_array_with_alias_name_is_read_and_rewritten_canonical() -> None:
    store = MemoryStore()
    zarrx.create_array(store, shape=(3,), dtype="string", serializer=ZarrsVlenCodec(), compressors=None)[...] = as_array(
        ["x", "é", ""], "string"
    )
    metadata = json.loads(store.get("zarr.json"))
    metadata["codecs"][0]["name"] = ALIAS
    del metadata["codecs"][0]["configuration"]["index_location"]  # version 0.0: the index is at the start
    store.set("zarr.json", json.dumps(metadata).encode())
    array = zarrx.open_array(store)
    assert array[...].tolist() == ["x", "é", ""]
    assert array.metadata.to_json()["codecs"][0]["name"] == "zarrs.vlen"
    assert array.metadata.to_json()["codecs"][0]["configuration"]["index_location"] == "start"


def test_fixed_size_data_types_are_refused() -> None:
    for dtype in ["int32", "uint8", "<U3", "S4", "float64"]:
        with pytest.raises(MetadataError, match="zarrs.vlen codec encodes variable-length"):
            ZarrsVlenCodec().validate(make_spec(dtype, (2,)))
        with pytest.raises(MetadataError, match="zarrs.vlen"):
            zarrx.create_array({}, shape=(2,), dtype=dtype, serializer=ZarrsVlenCodec())


def test_encoding_a_non_bytes_element_is_a_chunk_encode_error() -> None:
    spec = make_spec("bytes", (2,))
    pipeline = CodecPipeline.from_codecs([ZarrsVlenCodec()]).evolve_from_spec(spec)
    with pytest.raises(ChunkEncodeError, match="element 1 is str"):
        pipeline.encode(as_array([b"ok", "not bytes"], "bytes"), spec)


# -- JSON --------------------------------------------------------------------------------------------

CONFIGURATIONS = [
    configuration(),
    configuration(index_data_type="uint64", location="end"),
    DOCUMENT_EXAMPLE,
    configuration(
        data_codecs=[{"name": "transpose", "configuration": {"order": [0]}}, RAW, {"name": "gzip", "configuration": {"level": 1}}],
        index_codecs=[{"name": "bytes", "configuration": {"endian": "big"}}, CRC32C],
    ),
]


@pytest.mark.parametrize("config", CONFIGURATIONS, ids=range(len(CONFIGURATIONS)))
def test_json_round_trip(config) -> None:
    codec = ZarrsVlenCodec.from_json(config)
    assert codec.to_json() == {"name": "zarrs.vlen", "configuration": config}
    assert codec_from_json(codec.to_json(), "codecs[0]") == codec
    assert codec_from_json({"name": ALIAS, "configuration": config}, "codecs[0]") == codec
    assert ZarrsVlenCodec.from_json(json.loads(json.dumps(codec.to_json()))["configuration"]) == codec


def test_version_0_0_is_read_and_written_as_0_1() -> None:
    old = configuration(index_data_type="uint64", location=None)
    codec = ZarrsVlenCodec.from_json(old)
    assert codec.index_location == "start"
    assert codec.to_json()["configuration"] == {**old, "index_location": "start"}


def test_registry_and_defaults() -> None:
    assert get_codec_class("zarrs.vlen") is ZarrsVlenCodec
    assert get_codec_class(ALIAS) is ZarrsVlenCodec
    # zarrs' defaults: raw data, a little-endian uint64 index at the start
    assert ZarrsVlenCodec().to_json() == {
        "name": "zarrs.vlen",
        "configuration": configuration(index_data_type="uint64", location="start"),
    }
    evolved = ZarrsVlenCodec(index_codecs=[BytesCodec()]).evolve_from_spec(make_spec("string", (4,)))
    assert evolved.to_json()["configuration"]["index_codecs"] == [LITTLE]  # a uint index needs an endian


def without(member: str) -> dict:
    return {key: value for key, value in configuration().items() if key != member}


@pytest.mark.parametrize(
    ("config", "match"),
    [
        ({**configuration(), "version": "0.1"}, "unexpected configuration members \\['version'\\]"),
        (without("data_codecs"), "requires the configuration member 'data_codecs'"),
        (without("index_codecs"), "requires the configuration member 'index_codecs'"),
        (without("index_data_type"), "requires the configuration member 'index_data_type'"),
        (configuration(index_data_type="uint16"), "index_data_type must be one of \\['uint32', 'uint64'\\]"),
        (configuration(location="middle"), "index_location must be one of \\['start', 'end'\\]"),
        ({**configuration(), "data_codecs": {"name": "bytes"}}, "data_codecs: expected a list of codecs"),
        ({**configuration(), "index_codecs": [ZSTD]}, "index_codecs: expected exactly one array -> bytes"),
    ],
)
def test_invalid_configurations(config, match) -> None:
    with pytest.raises(MetadataError, match=match) as info:
        codec_from_json({"name": "zarrs.vlen", "configuration": config}, "codecs[0]")
    assert "codecs[0]" in str(info.value)


def test_unknown_nested_codec() -> None:
    config = configuration(data_codecs=[{"name": "bytes"}, {"name": "no-such-codec"}])
    with pytest.raises(UnknownCodecError, match="zarrs.vlen.data_codecs\\[1\\].*no-such-codec"):
        codec_from_json({"name": "zarrs.vlen", "configuration": config}, "codecs[0]")


# -- corrupt chunks, read through an array -------------------------------------------------------------

GOOD = ["ab", "", "é!"]  # 5 bytes of data, offsets 0 2 2 5
GOOD_DATA = "".join(GOOD).encode()

CORRUPT = {
    # name: (index_location, chunk bytes, message pattern)
    "empty": ("start", b"", "0 bytes is too short for the 8-byte encoded index length"),
    "truncated length": ("end", b"\x10\x00\x00", "3 bytes is too short"),
    "index length past the end": (
        "start", struct.pack("<Q", 17) + index_bytes([0, 2, 2, 5]), "index length is 17 bytes, but the chunk has only 16"
    ),
    "huge index length": ("end", GOOD_DATA + struct.pack("<Q", 2**64 - 1), "index length is 18446744073709551615"),
    "truncated data": ("start", chunk(index_bytes([0, 2, 2, 5]), GOOD_DATA[:-1]), "declares 5 bytes of data.*found 4"),
    "offsets past the end": ("end", chunk(index_bytes([0, 2, 2, 9]), GOOD_DATA, "end"), "declares 9 bytes of data.*found 5"),
    "non-monotonic offsets": (
        "start", chunk(index_bytes([0, 4, 2, 5]), GOOD_DATA), r"decrease at element 1: offsets\[1\] = 4 > offsets\[2\] = 2"
    ),
    "first offset not 0": ("start", chunk(index_bytes([1, 2, 2, 5]), GOOD_DATA), "first offset is 1, expected 0"),
    "too few offsets": ("start", chunk(index_bytes([0, 2, 5]), GOOD_DATA), "index is 12 bytes, expected 16: 4 uint32 offsets"),
    "too many offsets": ("end", chunk(index_bytes([0, 2, 2, 5, 5]), GOOD_DATA, "end"), "index is 20 bytes, expected 16"),
    "index of the other data type": (
        "start", chunk(index_bytes([0, 2, 2, 5], "uint64"), GOOD_DATA), "index is 32 bytes, expected 16"
    ),
    "bad UTF-8": ("start", chunk(index_bytes([0, 2, 2, 5]), b"ab\xff\xfe\xfd"), "invalid UTF-8 in element 2"),
    "UTF-8 split between elements": ("start", chunk(index_bytes([0, 1, 2, 3]), "aé".encode()), "invalid UTF-8 in element 1"),
    "the other index location": ("end", chunk(index_bytes([0, 2, 2, 5]), GOOD_DATA, "start"), "index length|offset|UTF-8"),
}


def corrupt_array(location: str, raw: bytes, data_codecs=None):
    store = MemoryStore()
    serializer = ZarrsVlenCodec(data_codecs=data_codecs or [BytesCodec()], index_data_type="uint32", index_location=location)
    array = zarrx.create_array(store, "a", shape=(6,), chunks=(3,), dtype="string", serializer=serializer, compressors=None)
    array[...] = as_array(GOOD * 2, "string")
    store.set("a/c/1", raw)
    return array


@pytest.mark.parametrize("name", CORRUPT)
def test_corrupt_chunks_raise_chunk_decode_error(name) -> None:
    location, raw, match = CORRUPT[name]
    array = corrupt_array(location, raw)
    with pytest.raises(ChunkDecodeError, match=match) as info:
        array[...]
    assert "'a/c/1'" in str(info.value) and "'zarrs.vlen'" in str(info.value)
    assert array[:3].tolist() == GOOD  # the intact chunk still reads


def test_corrupt_compressed_chains() -> None:
    zstd = [BytesCodec(), ZstdCodec(level=1)]
    # the last offset claims 2**32 - 1 bytes, over the 2 GiB limit: refused before decompressing or allocating
    raw = chunk(index_bytes([0, 0, 0, 2**32 - 1]), b"\x28\xb5\x2f\xfd" + bytes(8))
    array = corrupt_array("start", raw, zstd)
    tracemalloc.start()
    try:
        with pytest.raises(ChunkDecodeError, match="'a/c/1'.*'zarrs.vlen'") as info:
            array[...]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2**20, f"{peak} bytes allocated for a hostile chunk"
    assert "4294967295" in str(info.value)
    # a zstd frame that decodes to other than the last offset's size
    frame = bytes(numcodecs.zstd.compress(b"abcdef", 1))
    with pytest.raises(ChunkDecodeError, match="'a/c/1'.*data_codecs.*zstd.*declares 6 decoded bytes, expected 5"):
        corrupt_array("start", chunk(index_bytes([0, 2, 2, 5]), frame), zstd)[...]
    # garbage where the data's zstd frame should be
    with pytest.raises(ChunkDecodeError, match="'a/c/1'.*not a zstd frame"):
        corrupt_array("end", chunk(index_bytes([0, 2, 2, 5]), b"garbage", "end"), zstd)[...]


def test_huge_uint64_offset_is_refused() -> None:
    spec = make_spec("bytes", (2,))
    codec = ZarrsVlenCodec(data_codecs=[BytesCodec(), GzipCodec()], index_data_type="uint64")
    pipeline = CodecPipeline.from_codecs([codec]).evolve_from_spec(spec)
    raw = chunk(index_bytes([0, 1, 2**64 - 1], "uint64"), gzip.compress(b"ab"))
    with pytest.raises(ChunkDecodeError, match=f"{KEY}.*18446744073709551615 bytes of data, over the limit"):
        pipeline.decode(raw, spec, KEY)


def test_corrupt_index_chain_names_the_nested_codec() -> None:
    spec = make_spec("string", (3,))
    codec = ZarrsVlenCodec(index_codecs=[BytesCodec(endian="little"), Crc32cCodec()], index_data_type="uint32")
    pipeline = CodecPipeline.from_codecs([codec]).evolve_from_spec(spec)
    index = index_bytes([0, 2, 2, 5]) + b"\x00\x00\x00\x00"  # wrong checksum
    with pytest.raises(ChunkDecodeError, match=f"chunk '{KEY}': codec 'zarrs.vlen': .*index_codecs.*crc32c"):
        pipeline.decode(chunk(index, GOOD_DATA), spec, KEY)


FUZZ_SERIALIZERS = {
    "raw": ZarrsVlenCodec(index_data_type="uint32"),
    "end+zstd": ZarrsVlenCodec(data_codecs=[BytesCodec(), ZstdCodec(level=1)], index_location="end"),
    "document example": ZarrsVlenCodec.from_json(DOCUMENT_EXAMPLE),
}


@pytest.mark.parametrize("name", FUZZ_SERIALIZERS)
@pytest.mark.parametrize("dtype", ["string", "bytes"])
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_mutated_chunks_raise_only_chunk_decode_error(name, dtype, data) -> None:
    spec = make_spec(dtype, (4, 3))
    pipeline = CodecPipeline.from_codecs([FUZZ_SERIALIZERS[name]]).evolve_from_spec(spec)
    encoded = bytearray(pipeline.encode(sample(dtype, spec.shape, seed=1), spec))
    for _ in range(data.draw(st.integers(1, 3))):
        encoded[data.draw(st.integers(0, len(encoded) - 1))] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        encoded = encoded[: data.draw(st.integers(0, len(encoded)))]
    try:
        decoded = pipeline.decode(bytes(encoded), spec, KEY)
    except ChunkDecodeError as error:
        assert KEY in str(error)
    else:
        assert decoded.shape == spec.shape and decoded.dtype == spec.dtype


@settings(max_examples=100, deadline=None)
@given(garbage=st.binary(max_size=200), location=st.sampled_from(["start", "end"]))
def test_garbage_raises_only_chunk_decode_error(garbage, location) -> None:
    spec = make_spec("string", (2, 2))
    pipeline = CodecPipeline.from_codecs([ZarrsVlenCodec(index_location=location)]).evolve_from_spec(spec)
    try:
        decoded = pipeline.decode(garbage, spec, KEY)
    except ChunkDecodeError as error:
        assert KEY in str(error)
    else:
        assert decoded.shape == (2, 2)


# -- zarrs itself ---------------------------------------------------------------------------------


def _zarrs_pipeline(tmp_path, metadata: dict):
    import zarr.storage as zarr_storage
    import zarrs._internal as internal
    return internal, internal.CodecPipelineImpl(json.dumps(metadata), zarr_storage.LocalStore(str(tmp_path)))


@pytest.mark.parametrize("name", ["zarrs.vlen", ALIAS])
@pytest.mark.parametrize("config", [*CONFIGURATIONS[:3], configuration(location=None)], ids=range(4))
def test_zarrs_parses_what_we_write(tmp_path, name, config) -> None:
    """zarrs (Rust, through zarrs-python) parses the configurations we write and read.

    zarrs-python 0.2.3 cannot move variable-length data between numpy and zarrs (reads
    raise "variable length data type not supported", writes panic), so there is no array
    zarrs wrote to read back; its parser is still the reference for the configuration.
    """
    serializer = ZarrsVlenCodec.from_json(config)
    zarrx.create_array(str(tmp_path), shape=(3,), dtype="string", serializer=serializer, compressors=None)
    metadata = json.loads((tmp_path / "zarr.json").read_text())
    metadata["codecs"][0]["name"] = name
    _zarrs_pipeline(tmp_path, metadata)  # raises TypeError if zarrs refuses the configuration
    metadata["codecs"][0]["configuration"]["unknown"] = 1
    with pytest.raises(TypeError, match="VlenCodecConfiguration"):
        _zarrs_pipeline(tmp_path, metadata)
