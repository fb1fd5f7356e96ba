"""The built-in codecs: JSON forms, round trips, compatibility with numcodecs / zarr-python /
tensorstore, and every kind of corrupt input (which must raise ChunkDecodeError, bounded)."""

from __future__ import annotations

import gzip
import json
import struct
import tracemalloc
import zlib
from pathlib import Path

import numcodecs
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zarrx.codecs import (
    BloscCodec,
    BytesCodec,
    ChunkSpec,
    Codec,
    CodecPipeline,
    Crc32cCodec,
    GzipCodec,
    TransposeCodec,
    VLenBytesCodec,
    VLenUTF8Codec,
    ZstdCodec,
    codec_from_json,
)
from zarrx.dtypes import resolve_data_type
from zarrx.errors import ChunkDecodeError, MetadataError

KEY = "c/1/2"
FIXED_DTYPES = [
    "bool", "int8", "uint8", "int16", "uint16", "int32", "uint64", "float16", "float32", "float64",
    "complex64", "complex128", "M8[ns]", "m8[s]", "U3", "S4", "V3", [("a", "<i4"), ("b", "u1")],
]  # fmt: skip
SHAPES = [(), (0,), (7,), (3, 4), (2, 0, 3), (2, 3, 5)]
COMPRESSORS = [
    GzipCodec(level=0),
    GzipCodec(level=9),
    ZstdCodec(level=3),
    ZstdCodec(level=-5, checksum=True),
    BloscCodec(cname="lz4", clevel=5, shuffle="shuffle", typesize=4),
    BloscCodec(cname="zstd", clevel=9, shuffle="bitshuffle", typesize=2, blocksize=256),
    BloscCodec(cname="blosclz", clevel=0, shuffle="noshuffle"),
    BloscCodec(),
]


# -- shared helpers ---------------------------------------------------------------------


def make_spec(dtype, shape) -> ChunkSpec:
    data_type = resolve_data_type(dtype)
    return ChunkSpec(tuple(shape), data_type, data_type.default_fill_value())


def sample(spec: ChunkSpec, seed: int = 0) -> np.ndarray:
    """Deterministic varied data of the spec's shape and dtype."""
    rng = np.random.default_rng(seed)
    dtype, size = spec.dtype, spec.size
    if dtype.kind == "T":
        words = ["", "a", "é", "日本語", "null\x00inside", "x" * 300, "🙂"]
        values = [words[i] for i in rng.integers(0, len(words), size)]
        return np.array(values, dtype=dtype).reshape(spec.shape)
    if dtype.kind == "O":
        values = np.empty(size, dtype=object)
        values[:] = [rng.bytes(int(n)) for n in rng.integers(0, 20, size)]
        return values.reshape(spec.shape)
    if dtype.kind == "b":
        return rng.integers(0, 2, size).astype(bool).reshape(spec.shape)
    return np.frombuffer(rng.bytes(size * dtype.itemsize), dtype=dtype).reshape(spec.shape).copy()


def assert_same(actual: np.ndarray, expected: np.ndarray) -> None:
    assert actual.shape == expected.shape
    assert actual.dtype == expected.dtype
    if expected.dtype.kind in "OT":
        assert actual.tolist() == expected.tolist()
    else:  # raw bytes: NaN payloads, odd datetimes and struct padding must survive too
        assert actual.tobytes() == expected.tobytes()


def round_trip(codecs, dtype, shape, seed: int = 0) -> bytes:
    """Encode and decode a sample chunk through ``codecs``; return the encoded bytes."""
    spec = make_spec(dtype, shape)
    pipeline = CodecPipeline.from_codecs(codecs).evolve_from_spec(spec)
    pipeline.validate(spec)
    array = sample(spec, seed)
    encoded = pipeline.encode(array, spec)
    assert isinstance(encoded, bytes)
    assert_same(pipeline.decode(encoded, spec, KEY), array)
    assert pipeline.encoded_size(spec) in (None, len(encoded))
    return encoded


def decode_error(codecs, data, dtype="int32", shape=(4,), match: str | None = None) -> ChunkDecodeError:
    """Decoding ``data`` must raise ChunkDecodeError naming the key (and matching ``match``)."""
    spec = make_spec(dtype, shape)
    pipeline = CodecPipeline.from_codecs(codecs).evolve_from_spec(spec)
    with pytest.raises(ChunkDecodeError, match=match) as info:
        pipeline.decode(data, spec, KEY)
    assert KEY in str(info.value)
    return info.value


def encode(codecs, array: np.ndarray, dtype=None) -> bytes:
    spec = make_spec(dtype or array.dtype, array.shape)
    return CodecPipeline.from_codecs(codecs).evolve_from_spec(spec).encode(array, spec)


def peak_memory(function) -> int:
    """Peak traced allocation (bytes) while ``function`` runs."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        function()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# -- JSON ---------------------------------------------------------------------------------

ALL_CODECS = [
    BytesCodec(),
    BytesCodec(endian="big"),
    BytesCodec(endian="little"),
    TransposeCodec(order=(1, 0)),
    TransposeCodec(order=(2, 0, 1)),
    *COMPRESSORS,
    Crc32cCodec(),
    VLenUTF8Codec(),
    VLenBytesCodec(),
]


@pytest.mark.parametrize("codec", ALL_CODECS, ids=repr)
def test_json_round_trip(codec: Codec) -> None:
    document = codec.to_json()
    assert json.loads(json.dumps(document)) == document
    assert type(codec).from_json(document.get("configuration", {})) == codec
    assert codec_from_json(document, "codecs[0]") == codec


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        ({"name": "gzip", "configuration": {"level": 1}}, GzipCodec(level=1)),  # gzip spec example
        (
            {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 1, "shuffle": "shuffle", "typesize": 4,
                                                "blocksize": 0}},  # fmt: skip
            BloscCodec(cname="lz4", clevel=1, shuffle="shuffle", typesize=4),
        ),  # blosc spec example
        ({"name": "zstd", "configuration": {"level": 1, "checksum": True}}, ZstdCodec(level=1, checksum=True)),
        ({"name": "zstd", "configuration": {"level": 0, "checksum": False}}, ZstdCodec()),  # zarr-python's form
        ({"name": "vlen-utf8"}, VLenUTF8Codec()),
        ({"name": "vlen-utf8", "configuration": {}}, VLenUTF8Codec()),  # zarr-python's form
        ("vlen-bytes", VLenBytesCodec()),
        ("bytes", BytesCodec()),
        ({"name": "bytes", "configuration": {"endian": "big"}}, BytesCodec(endian="big")),
        ({"name": "endian", "configuration": {"endian": "little"}}, BytesCodec(endian="little")),  # old name
        ({"name": "transpose", "configuration": {"order": [2, 0, 1]}}, TransposeCodec(order=(2, 0, 1))),
        ({"name": "crc32c"}, Crc32cCodec()),
        ({"name": "crc32c", "configuration": {}}, Crc32cCodec()),
    ],
)
def test_spec_examples(document, expected: Codec) -> None:
    assert codec_from_json(document, "codecs[0]") == expected


def test_canonical_json() -> None:
    assert ZstdCodec(level=3).to_json() == {"name": "zstd", "configuration": {"level": 3}}  # checksum omitted
    assert BytesCodec().to_json() == {"name": "bytes"}
    assert VLenUTF8Codec().to_json() == {"name": "vlen-utf8"}
    assert BloscCodec(cname="lz4", clevel=5, shuffle="shuffle", typesize=4).to_json() == {
        "name": "blosc",
        "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle", "typesize": 4, "blocksize": 0},
    }


@pytest.mark.parametrize(
    ("document", "match"),
    [
        ({"name": "gzip", "configuration": {"level": 10}}, "level must be an integer from 0 to 9"),
        ({"name": "gzip", "configuration": {"level": "1"}}, "level"),
        ({"name": "gzip", "configuration": {"level": True}}, "level"),
        ({"name": "gzip", "configuration": {}}, "requires the configuration member 'level'"),
        ({"name": "gzip", "configuration": {"level": 1, "mtime": 0}}, r"unexpected configuration members \['mtime'\]"),
        ({"name": "zstd", "configuration": {"level": 23}}, "from -131072 to 22"),
        ({"name": "zstd", "configuration": {"level": 1, "checksum": 1}}, "checksum"),
        ({"name": "zstd"}, "level"),
        ({"name": "blosc", "configuration": {"cname": "lzma", "clevel": 5}}, "cname"),
        ({"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": 1}}, "shuffle"),
        ({"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "typesize": 0}}, "typesize"),
        ({"name": "blosc", "configuration": {"cname": "lz4", "clevel": -1}}, "clevel"),
        ({"name": "transpose", "configuration": {"order": [0, 0]}}, "permutation"),
        ({"name": "transpose", "configuration": {"order": [1.0, 0]}}, "integers"),
        ({"name": "transpose", "configuration": {"order": "X"}}, "integers"),
        ({"name": "transpose"}, "order"),
        ({"name": "bytes", "configuration": {"endian": "middle"}}, "endian"),
        ({"name": "crc32c", "configuration": {"seed": 1}}, "takes none"),
        ({"name": "vlen-utf8", "configuration": {"x": 1}}, "unexpected"),
    ],
)
def test_invalid_configuration(document, match: str) -> None:
    with pytest.raises(MetadataError, match=match) as info:
        codec_from_json(document, "codecs[3]")
    assert str(info.value).startswith("codecs[3]: ")


def test_constructors_validate() -> None:
    with pytest.raises(MetadataError, match="level"):
        GzipCodec(level=12)
    with pytest.raises(MetadataError, match="shuffle"):
        BloscCodec(shuffle="byte")
    with pytest.raises(MetadataError, match="permutation"):
        TransposeCodec(order=(0, 2))


# -- round trips --------------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", FIXED_DTYPES, ids=str)
@pytest.mark.parametrize("endian", ["little", "big"])
def test_bytes_round_trip(dtype, shape, endian) -> None:
    encoded = round_trip([BytesCodec(endian=endian)], dtype, shape)
    assert len(encoded) == make_spec(dtype, shape).nbytes


@pytest.mark.parametrize(
    ("dtype", "values"),
    [
        (">u2", [1, 2, 0x1234]),
        (">f8", [1.5, -np.inf]),
        (">c8", [1 + 2j]),
        (">M8[s]", [0, 1]),
        (">U2", ["ab", "é"]),
        ([("a", ">i4"), ("b", "u1"), ("c", ">f2")], [(1, 2, 3.0), (-1, 255, -0.5)]),
    ],
    ids=str,
)
def test_bytes_big_endian_layout(dtype, values) -> None:
    stored = np.array(values, dtype=dtype)
    native = stored.astype(stored.dtype.newbyteorder("="))
    assert encode([BytesCodec(endian="big")], native) == stored.tobytes()
    assert encode([BytesCodec(endian="little")], native) == stored.astype(stored.dtype.newbyteorder("<")).tobytes()
    spec = make_spec(native.dtype, native.shape)
    decoded = CodecPipeline.from_codecs([BytesCodec(endian="big")]).decode(stored.tobytes(), spec, KEY)
    assert_same(decoded, native)


def test_bytes_endian_required_and_filled() -> None:
    spec = make_spec("int16", (3,))
    with pytest.raises(MetadataError, match="endian"):
        BytesCodec().validate(spec)
    assert BytesCodec().evolve_from_spec(spec) == BytesCodec(endian="little")
    assert BytesCodec(endian="big").evolve_from_spec(spec) == BytesCodec(endian="big")
    for single_byte in ["uint8", "int8", "bool", "S3", "V2"]:
        spec = make_spec(single_byte, (3,))
        BytesCodec().validate(spec)
        assert BytesCodec().evolve_from_spec(spec).to_json() == {"name": "bytes"}


def test_bytes_decode_is_zero_copy() -> None:
    data = np.arange(12, dtype="<i4").tobytes()
    decoded = BytesCodec(endian="little").decode(data, make_spec("int32", (3, 4)))
    assert np.shares_memory(decoded, np.frombuffer(data, np.uint8))


@pytest.mark.parametrize(
    ("order", "shape"),
    [((1, 0), (3, 4)), ((0, 1), (3, 4)), ((2, 0, 1), (2, 3, 4)), ((0,), (5,)), ((), ()), ((1, 0), (0, 3))],
)
@pytest.mark.parametrize("dtype", ["uint16", "float64", "string"])
def test_transpose(order, shape, dtype) -> None:
    serializer = VLenUTF8Codec() if dtype == "string" else BytesCodec(endian="big")
    encoded = round_trip([TransposeCodec(order=order), serializer], dtype, shape)
    spec = make_spec(dtype, shape)
    assert TransposeCodec(order=order).resolve_spec(spec).shape == tuple(shape[axis] for axis in order)
    assert encoded == encode([serializer], sample(spec).transpose(order))  # the spec's B[B_pos] = A[A_pos]


def test_transpose_legacy_orders_and_validation() -> None:
    spec = make_spec("int8", (2, 3, 4))
    assert TransposeCodec(order="F").evolve_from_spec(spec) == TransposeCodec(order=(2, 1, 0))
    assert TransposeCodec(order="C").evolve_from_spec(spec) == TransposeCodec(order=(0, 1, 2))
    assert codec_from_json({"name": "transpose", "configuration": {"order": "F"}}, "codecs[0]").permutation(2) == (1, 0)
    with pytest.raises(MetadataError, match="3 dimensions"):
        TransposeCodec(order=(1, 0)).validate(spec)


@pytest.mark.parametrize("shape", [(), (0,), (1000,), (17, 13)], ids=str)
@pytest.mark.parametrize("codec", [*COMPRESSORS, Crc32cCodec()], ids=repr)
@pytest.mark.parametrize("dtype", ["float32", "uint8", "complex128", [("a", "<i4"), ("b", "u1")]], ids=str)
def test_bytes_bytes_round_trip(codec, dtype, shape) -> None:
    round_trip([BytesCodec(), codec], dtype, shape)
    round_trip([BytesCodec(endian="big"), codec, Crc32cCodec()], dtype, shape, seed=1)


def test_compressors_compress() -> None:
    zeros = np.zeros(10_000, dtype="int32")
    for codec in [GzipCodec(level=1), ZstdCodec(level=3), BloscCodec(cname="lz4", clevel=5), BloscCodec()]:
        assert len(encode([BytesCodec(), codec], zeros)) < 1000, codec


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize(("dtype", "codec"), [("string", VLenUTF8Codec()), ("bytes", VLenBytesCodec())])
def test_vlen_round_trip(dtype, codec, shape) -> None:
    round_trip([codec], dtype, shape)
    round_trip([codec, ZstdCodec(level=1), Crc32cCodec()], dtype, shape, seed=2)
    round_trip([codec, BloscCodec()], dtype, shape, seed=3)


def test_vlen_layout() -> None:
    encoded = encode([VLenUTF8Codec()], np.array(["a", "bé", ""], dtype=np.dtypes.StringDType()))
    assert encoded == struct.pack("<II", 3, 1) + b"a" + struct.pack("<I", 3) + "bé".encode() + struct.pack("<I", 0)
    values = np.empty(2, dtype=object)
    values[:] = [b"\x00", b"xy"]
    expected = struct.pack("<II", 2, 1) + b"\x00" + struct.pack("<I", 2) + b"xy"
    assert encode([VLenBytesCodec()], values, "bytes") == expected


def test_vlen_validate() -> None:
    with pytest.raises(MetadataError, match="vlen-utf8 codec encodes variable-length strings"):
        VLenUTF8Codec().validate(make_spec("float32", (2,)))
    with pytest.raises(MetadataError, match="vlen-utf8"):
        VLenUTF8Codec().validate(make_spec("bytes", (2,)))
    with pytest.raises(MetadataError, match="vlen-bytes"):
        VLenBytesCodec().validate(make_spec("string", (2,)))
    with pytest.raises(MetadataError, match="use vlen-utf8"):
        BytesCodec().validate(make_spec("string", (2,)))


def test_blosc_evolve() -> None:
    assert BloscCodec().evolve_from_spec(make_spec("float64", (3,))) == BloscCodec(shuffle="shuffle", typesize=8)
    assert BloscCodec().evolve_from_spec(make_spec("uint8", (3,))) == BloscCodec(shuffle="bitshuffle", typesize=1)
    assert BloscCodec().evolve_from_spec(make_spec("string", (3,))) == BloscCodec(shuffle="bitshuffle", typesize=1)
    chosen = BloscCodec(cname="lz4", shuffle="noshuffle", typesize=2)
    assert chosen.evolve_from_spec(make_spec("float64", (3,))) == chosen


# -- compatibility with numcodecs ---------------------------------------------------------

PAYLOAD = np.random.default_rng(5).integers(0, 20, 5000, dtype="<i4").tobytes()


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        (ZstdCodec(level=3), numcodecs.Zstd(level=3)),
        (ZstdCodec(level=-1, checksum=True), numcodecs.Zstd(level=-1, checksum=True)),
        (BloscCodec(cname="lz4", clevel=5, shuffle="shuffle", typesize=4), numcodecs.Blosc("lz4", 5, 1, typesize=4)),
        (BloscCodec(cname="zstd", clevel=3, shuffle="bitshuffle", typesize=4, blocksize=1024),
         numcodecs.Blosc("zstd", 3, 2, blocksize=1024, typesize=4)),  # fmt: skip
        (Crc32cCodec(), numcodecs.CRC32C(location="end")),
    ],
    ids=repr,
)
def test_identical_to_numcodecs(ours, theirs) -> None:
    assert bytes(ours.encode(PAYLOAD)) == bytes(theirs.encode(PAYLOAD))
    assert bytes(ours.decode(theirs.encode(PAYLOAD), len(PAYLOAD), len(PAYLOAD))) == PAYLOAD


@pytest.mark.parametrize("level", [0, 1, 6, 9])
def test_gzip_compatible_with_numcodecs(level) -> None:
    ours = GzipCodec(level=level).encode(PAYLOAD)
    assert bytes(numcodecs.GZip(level=level).decode(ours)) == PAYLOAD
    assert gzip.decompress(ours) == PAYLOAD
    assert GzipCodec(level=level).encode(PAYLOAD) == ours  # deterministic: no timestamp
    theirs = numcodecs.GZip(level=level).encode(PAYLOAD)
    assert bytes(GzipCodec(level=level).decode(theirs, len(PAYLOAD), len(PAYLOAD))) == PAYLOAD
    members = gzip.compress(PAYLOAD[:100]) + gzip.compress(PAYLOAD[100:])  # multi-member stream
    assert bytes(GzipCodec(level=level).decode(members, None, 2**20)) == PAYLOAD


@pytest.mark.parametrize("shape", [(0,), (), (50,), (4, 5)], ids=str)
def test_vlen_identical_to_numcodecs(shape) -> None:
    strings = sample(make_spec("string", shape), seed=7)
    assert encode([VLenUTF8Codec()], strings) == bytes(numcodecs.VLenUTF8().encode(strings.astype(object).reshape(-1)))
    blobs = sample(make_spec("bytes", shape), seed=8)
    assert encode([VLenBytesCodec()], blobs, "bytes") == bytes(numcodecs.VLenBytes().encode(blobs.reshape(-1)))


# -- real files written by zarr-python and tensorstore -----------------------------------


def read_chunks(path: Path, dtype, chunk_shape):
    """Decode every chunk file under ``path`` with the codecs of its zarr.json: {coords: array}."""
    metadata = json.loads((path / "zarr.json").read_text())
    pipeline = CodecPipeline.from_json(metadata["codecs"])
    spec = make_spec(dtype, chunk_shape)
    pipeline.validate(spec)
    chunks = {}
    for file in sorted((path / "c").rglob("*")):
        if file.is_file():
            key = file.relative_to(path).as_posix()
            coords = tuple(int(part) for part in key.split("/")[1:])
            chunks[coords] = pipeline.decode(file.read_bytes(), spec, key)
    return chunks


def assert_chunks_match(chunks, data: np.ndarray, chunk_shape) -> None:
    assert chunks
    for coords, chunk in chunks.items():
        region = tuple(slice(c * n, (c + 1) * n) for c, n in zip(coords, chunk_shape))
        expected = data[region]
        assert_same(chunk[tuple(slice(0, n) for n in expected.shape)], expected)


@pytest.mark.parametrize(
    ("dtype", "filters", "serializer", "compressors"),
    [
        ("int16", ["transpose"], ("bytes", "big"), ["zstd-checksum", "crc32c"]),
        ("float64", [], ("bytes", "little"), ["blosc"]),
        ("uint8", [], ("bytes", None), ["gzip"]),
        ("string", [], ("vlen-utf8", None), ["zstd"]),
    ],
)
def test_reads_zarr_python_chunks(tmp_path, dtype, filters, serializer, compressors) -> None:
    zarr = pytest.importorskip("zarr")
    zarr_codecs = {
        "transpose": zarr.codecs.TransposeCodec(order=(1, 0)),
        "zstd-checksum": zarr.codecs.ZstdCodec(level=3, checksum=True),
        "zstd": zarr.codecs.ZstdCodec(level=1),
        "crc32c": zarr.codecs.Crc32cCodec(),
        "blosc": zarr.codecs.BloscCodec(cname="lz4", clevel=5),
        "gzip": zarr.codecs.GzipCodec(level=5),
    }
    name, endian = serializer
    zarr_serializer = zarr.codecs.BytesCodec(endian=endian) if name == "bytes" else zarr.codecs.VLenUTF8Codec()
    data = sample(make_spec(dtype, (9, 7)), seed=4)
    array = zarr.create_array(
        str(tmp_path / "a"), shape=data.shape, chunks=(4, 3), dtype=str if dtype == "string" else dtype,
        filters=[zarr_codecs[f] for f in filters], serializer=zarr_serializer,
        compressors=[zarr_codecs[c] for c in compressors],
    )  # fmt: skip
    array[...] = data
    assert_chunks_match(read_chunks(tmp_path / "a", dtype, (4, 3)), data, (4, 3))


@pytest.mark.parametrize(
    ("dtype", "codecs"),
    [
        ("int32", [TransposeCodec(order=(1, 0)), BytesCodec(endian="big"), ZstdCodec(level=5, checksum=True),
                   Crc32cCodec()]),  # fmt: skip
        ("float32", [BytesCodec(endian="little"), BloscCodec(cname="zstd", clevel=3, shuffle="bitshuffle")]),
        ("uint16", [BytesCodec(endian="big"), GzipCodec(level=1)]),
        ("string", [VLenUTF8Codec(), ZstdCodec(level=2)]),
    ],
)
def test_zarr_python_reads_our_chunks(tmp_path, dtype, codecs) -> None:
    zarr = pytest.importorskip("zarr")
    data = sample(make_spec(dtype, (9, 7)), seed=9)
    chunk_shape = (4, 3)
    spec = make_spec(dtype, chunk_shape)
    pipeline = CodecPipeline.from_codecs(codecs).evolve_from_spec(spec)
    root = tmp_path / "a"
    (root / "c").mkdir(parents=True)
    (root / "zarr.json").write_text(json.dumps({
        "zarr_format": 3, "node_type": "array", "shape": list(data.shape), "data_type": spec.data_type.to_json(),
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunk_shape)}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": "" if dtype == "string" else 0, "codecs": pipeline.to_json(),
    }))  # fmt: skip
    for i in range(3):
        for j in range(3):
            chunk = np.full(chunk_shape, spec.fill_value, dtype=spec.dtype)
            part = data[i * 4 : (i + 1) * 4, j * 3 : (j + 1) * 3]
            chunk[: part.shape[0], : part.shape[1]] = part
            (root / "c" / str(i)).mkdir(exist_ok=True)
            (root / "c" / str(i) / str(j)).write_bytes(pipeline.encode(chunk, spec))
    assert_same(zarr.open_array(str(root), mode="r")[...].astype(spec.dtype), data)


def test_reads_tensorstore_chunks(tmp_path) -> None:
    ts = pytest.importorskip("tensorstore")
    codecs = [
        {"name": "transpose", "configuration": {"order": [1, 0]}},
        {"name": "bytes", "configuration": {"endian": "big"}},
        {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle", "typesize": 4}},
        {"name": "gzip", "configuration": {"level": 6}},
        {"name": "zstd", "configuration": {"level": 1}},
        {"name": "crc32c"},
    ]
    data = sample(make_spec("int32", (9, 7)), seed=6)
    store = ts.open({
        "driver": "zarr3", "kvstore": {"driver": "file", "path": str(tmp_path / "a")},
        "metadata": {"shape": [9, 7], "data_type": "int32", "codecs": codecs,
                     "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4, 3]}}},
    }, create=True).result()  # fmt: skip
    store[...] = data
    assert_chunks_match(read_chunks(tmp_path / "a", "int32", (4, 3)), data, (4, 3))


# -- corrupt input ------------------------------------------------------------------------

INT32_100 = np.arange(100, dtype="int32")


@pytest.mark.parametrize("codec", COMPRESSORS, ids=repr)
def test_truncated_compressed_chunks(codec) -> None:
    encoded = encode([BytesCodec(), codec], INT32_100)
    for cut in sorted({0, 1, 4, 10, 15, 16, len(encoded) // 2, len(encoded) - 4, len(encoded) - 1}):
        decode_error([BytesCodec(), codec], encoded[:cut], shape=(100,))


@pytest.mark.parametrize("codec", [*COMPRESSORS, Crc32cCodec()], ids=repr)
@pytest.mark.parametrize("seed", range(3))
def test_random_bytes(codec, seed) -> None:
    garbage = np.random.default_rng(seed).bytes(200)
    decode_error([BytesCodec(), codec], garbage, shape=(100,))


@pytest.mark.parametrize("codec", COMPRESSORS, ids=repr)
def test_compressed_chunk_of_wrong_size(codec) -> None:
    too_long = encode([BytesCodec(), codec], np.arange(101, dtype="int32"))
    decode_error([BytesCodec(), codec], too_long, shape=(100,), match="101|404|expected")
    too_short = encode([BytesCodec(), codec], np.arange(99, dtype="int32"))
    decode_error([BytesCodec(), codec], too_short, shape=(100,), match="99|396|expected")


def test_crc32c_mismatch() -> None:
    encoded = bytearray(encode([BytesCodec(), Crc32cCodec()], INT32_100))
    encoded[17] ^= 0x01
    error = decode_error([BytesCodec(), Crc32cCodec()], bytes(encoded), shape=(100,), match="checksum mismatch")
    assert "crc32c" in str(error)
    decode_error([BytesCodec(), Crc32cCodec()], b"\x00\x01\x02", shape=(100,), match="too short")


@pytest.mark.parametrize("size", [0, 399, 401, 800])
def test_raw_chunk_of_wrong_size(size) -> None:
    match = f"expected 400 bytes.*found {size}"
    error = decode_error([BytesCodec(endian="little")], bytes(size), shape=(100,), match=match)
    assert "'bytes'" in str(error)


def test_blosc_header_checked_before_c_blosc() -> None:
    encoded = bytearray(BloscCodec(cname="lz4", clevel=5, shuffle="shuffle", typesize=4).encode(INT32_100.tobytes()))
    declares_more = encoded.copy()
    declares_more[4:8] = struct.pack("<I", 2**31)
    decode_error([BytesCodec(), BloscCodec()], bytes(declares_more), shape=(100,), match="declares 2147483648")
    with pytest.raises(ChunkDecodeError, match="over the limit"):
        BloscCodec().decode(bytes(declares_more), None, 2**20)
    inflated = encoded.copy()
    inflated[12:16] = struct.pack("<I", len(encoded) + 1000)  # c-blosc would read past the buffer
    decode_error([BytesCodec(), BloscCodec()], bytes(inflated), shape=(100,), match="declares")


@pytest.fixture(scope="module")
def gzip_bomb() -> bytes:
    """A valid single-member gzip stream of 1 GiB of zeros (~1 MB), built without compressing 1 GiB."""
    chunk = bytes(1 << 20)
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    segment = compressor.compress(chunk) + compressor.flush(zlib.Z_FULL_FLUSH)  # byte-aligned, history-free
    crc = 0
    for _ in range(1024):
        crc = zlib.crc32(chunk, crc)
    body = segment * 1024 + compressor.flush()
    return b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" + body + struct.pack("<II", crc, 0)


@pytest.fixture(scope="module")
def zstd_bomb() -> bytes:
    """1 GiB of zeros as one zstd frame (~32 KB) that declares its content size."""
    return bytes(numcodecs.zstd.compress(np.zeros(1 << 30, dtype=np.uint8), 1))


def test_gzip_bomb(gzip_bomb) -> None:
    spec_bytes = 4096
    peak = peak_memory(lambda: decode_error([BytesCodec(), GzipCodec()], gzip_bomb, "uint8", (spec_bytes,), "larger"))
    assert peak < 8 * 2**20
    peak = peak_memory(lambda: pytest.raises(ChunkDecodeError, GzipCodec().decode, gzip_bomb, None, 2**20))
    assert peak < 12 * 2**20


def test_zstd_bomb(zstd_bomb) -> None:
    peak = peak_memory(lambda: decode_error([BytesCodec(), ZstdCodec()], zstd_bomb, "uint8", (4096,), "declares"))
    assert peak < 2**20
    peak = peak_memory(lambda: pytest.raises(ChunkDecodeError, ZstdCodec().decode, zstd_bomb, None, 2**20))
    assert peak < 2**20


def test_zstd_frame_without_content_size() -> None:
    frame = bytes(numcodecs.zstd.compress(bytes(4000), 1))
    assert frame[4] == 0x60  # single segment, 2-byte content size: rewrite as "size unknown", 1 MiB window
    unsized = frame[:4] + bytes([0x00, 0x50]) + frame[7:]
    assert bytes(ZstdCodec().decode(unsized, 4000, 4000)) == bytes(4000)
    for wrong in (3999, 4001, 100):
        with pytest.raises(ChunkDecodeError):
            ZstdCodec().decode(unsized, wrong, wrong)
    with pytest.raises(ChunkDecodeError, match="does not declare its decoded size"):
        ZstdCodec().decode(unsized, None, 2**20)
    # an unsized zstd bomb (64 MiB of zeros) stops at the expected size
    big = bytes(numcodecs.zstd.compress(np.zeros(1 << 26, dtype=np.uint8), 1))
    assert big[4] >> 6 == 2 and not big[4] & 0x20  # 4-byte content size after a window descriptor
    unsized_big = big[:4] + bytes([0x00, big[5]]) + big[10:]
    peak = peak_memory(lambda: pytest.raises(ChunkDecodeError, ZstdCodec().decode, unsized_big, 4096, 4096))
    assert peak < 2**20


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"", "too short"),
        (b"\x03\x00", "too short"),
        (struct.pack("<I", 2), "expected 3 elements.*count of 2"),
        (struct.pack("<I", 0xFFFFFFFF), "count of 4294967295"),
        (struct.pack("<II", 3, 1) + b"a", "truncated"),
        (struct.pack("<II", 3, 0xFFFFFFF0) + bytes(8), "corrupt"),
        (struct.pack("<IIIII", 3, 0, 0, 5, 1), "corrupt"),
        (struct.pack("<IIII", 3, 0, 0, 1) + b"\xff", "invalid UTF-8"),
        (struct.pack("<IIII", 3, 0, 0, 2) + b"\xc3(", "invalid UTF-8"),
    ],
)
def test_vlen_corrupt(data, match) -> None:
    error = decode_error([VLenUTF8Codec()], data, "string", (3,), match)
    assert "vlen-utf8" in str(error)


def test_vlen_bytes_corrupt() -> None:
    decode_error([VLenBytesCodec()], struct.pack("<III", 2, 1, 50) + b"x", "bytes", (2,), "corrupt")
    decode_error([VLenBytesCodec()], struct.pack("<I", 1 << 30), "bytes", (2,), "count")


PIPELINES = {
    "raw": ([BytesCodec(endian="little")], "int32"),
    "gzip": ([BytesCodec(), GzipCodec()], "int32"),
    "zstd+crc": ([BytesCodec(), ZstdCodec(checksum=True), Crc32cCodec()], "int32"),
    "blosc": ([BytesCodec(), BloscCodec(cname="lz4", clevel=5, shuffle="shuffle")], "int32"),
    "vlen": ([VLenUTF8Codec()], "string"),
    "vlen+gzip": ([VLenUTF8Codec(), GzipCodec()], "string"),
    "vlen-bytes+zstd": ([VLenBytesCodec(), ZstdCodec()], "bytes"),
}


@pytest.mark.parametrize("name", PIPELINES)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_mutated_chunks_raise_only_chunk_decode_error(name, data) -> None:
    """Random damage to a valid chunk either decodes to the right shape or raises ChunkDecodeError."""
    codecs, dtype = PIPELINES[name]
    spec = make_spec(dtype, (6, 5))
    pipeline = CodecPipeline.from_codecs(codecs).evolve_from_spec(spec)
    encoded = bytearray(pipeline.encode(sample(spec, seed=3), spec))
    for _ in range(data.draw(st.integers(1, 3))):
        position = data.draw(st.integers(0, len(encoded) - 1))
        encoded[position] = data.draw(st.integers(0, 255))
    encoded = encoded[: data.draw(st.integers(0, len(encoded)))] if data.draw(st.booleans()) else encoded
    try:
        decoded = pipeline.decode(bytes(encoded), spec, KEY)
    except ChunkDecodeError as error:
        assert KEY in str(error)
    else:
        assert decoded.shape == spec.shape and decoded.dtype == spec.dtype


@pytest.mark.parametrize("name", PIPELINES)
@settings(max_examples=40, deadline=None)
@given(garbage=st.binary(max_size=300))
def test_garbage_raises_only_chunk_decode_error(name, garbage) -> None:
    codecs, dtype = PIPELINES[name]
    spec = make_spec(dtype, (2, 2))
    pipeline = CodecPipeline.from_codecs(codecs).evolve_from_spec(spec)
    try:
        decoded = pipeline.decode(garbage, spec, KEY)
    except ChunkDecodeError:
        pass
    else:
        assert decoded.shape == spec.shape and decoded.dtype == spec.dtype
