"""The numcodecs.* codecs: JSON forms, arrays exchanged with zarr-python both ways, corrupt chunks,
decompression bombs, and the choices zarr-python and the spec leave to us."""

from __future__ import annotations

import bz2
import json
import lzma
import pickle
import struct
import subprocess
import sys
import tracemalloc
import zlib
from importlib.util import find_spec

import numcodecs
import numcodecs.lz4
import numpy as np
import pytest

import zarrx
from zarrx.codecs import ChunkSpec, CodecPipeline, codec_from_json, get_codec_class
from zarrx.codecs.numcodecs_codecs import NUMCODECS_CODECS
from zarrx.dtypes import resolve_data_type
from zarrx.errors import ChunkDecodeError, MetadataError

zarr = pytest.importorskip("zarr")
numcodecs_zarr3 = pytest.importorskip("numcodecs.zarr3")

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),  # numcodecs.zarr3 moved to zarr.codecs.numcodecs
    pytest.mark.filterwarnings("ignore:Numcodecs codecs are not in the Zarr version 3 specification"),
]


def optional(package: str):
    return pytest.mark.skipif(
        find_spec(package) is None, reason=f"the optional {package!r} package is not installed (pip install {package})"
    )


# name -> (data type, configuration, zarr-python class in numcodecs.zarr3, where it goes, how to corrupt a chunk)
CODECS = {
    "numcodecs.delta": ("int32", {"dtype": "<i4"}, "Delta", "filters", "truncate"),
    "numcodecs.fixedscaleoffset": (
        "float64", {"offset": 100, "scale": 10, "dtype": "<f8", "astype": "<u2"}, "FixedScaleOffset", "filters",
        "truncate",
    ),
    "numcodecs.bitround": ("float32", {"keepbits": 10}, "BitRound", "filters", "truncate"),
    "numcodecs.quantize": ("float64", {"digits": 3, "dtype": "float64"}, "Quantize", "filters", "truncate"),
    "numcodecs.packbits": ("bool", {}, "PackBits", "filters", "padding"),
    "numcodecs.astype": (
        "float64", {"encode_dtype": "<f4", "decode_dtype": "float64"}, "AsType", "filters", "truncate",
    ),
    "numcodecs.shuffle": ("int32", {"elementsize": 4}, "Shuffle", "compressors", "truncate"),
    "numcodecs.lz4": ("int32", {"acceleration": 1}, "LZ4", "compressors", "garbage"),
    "numcodecs.zlib": ("int32", {"level": 5}, "Zlib", "compressors", "garbage"),
    "numcodecs.bz2": ("int32", {"level": 3}, "BZ2", "compressors", "garbage"),
    "numcodecs.lzma": ("int32", {"preset": 1}, "LZMA", "compressors", "garbage"),
    "numcodecs.crc32": ("int32", {}, "CRC32", "compressors", "flip"),
    "numcodecs.adler32": ("int32", {"location": "end"}, "Adler32", "compressors", "flip"),
    "numcodecs.fletcher32": ("int32", {}, "Fletcher32", "compressors", "flip"),
    "numcodecs.jenkins_lookup3": ("int32", {"initval": 7}, "JenkinsLookup3", "compressors", "flip"),
    "numcodecs.zfpy": ("float64", {"mode": 4, "tolerance": 0.001}, "ZFPY", "serializer", "header"),
    "numcodecs.pcodec": ("int32", {"level": 8}, "PCodec", "serializer", "truncate"),
}
OPTIONAL = {"numcodecs.zfpy": "zfpy", "numcodecs.pcodec": "pcodec"}
NAMES = [pytest.param(name, marks=optional(OPTIONAL[name])) if name in OPTIONAL else name for name in CODECS]
SHAPE, CHUNKS = (20, 7), (8, 7)


def sample(dtype: str) -> np.ndarray:
    """Values the codec under test keeps exactly or nearly (the comparisons are with zarr-python)."""
    values = np.arange(np.prod(SHAPE)).reshape(SHAPE)
    if dtype == "bool":
        return values % 3 == 0
    values = values * 3 + 1000
    return values.astype(dtype) / 10 if dtype.startswith("float") else values.astype(dtype)


def keyword_arguments(name: str) -> dict:
    dtype, configuration, _, place, _ = CODECS[name]
    codec = {"name": name, "configuration": configuration}
    arguments = {"filters": [], "serializer": "auto", "compressors": None}
    arguments[place] = codec if place == "serializer" else [codec]
    return arguments


def zarr_python_arguments(name: str) -> dict:
    dtype, configuration, class_name, place, _ = CODECS[name]
    codec = getattr(numcodecs_zarr3, class_name)(**configuration)
    arguments = {"filters": None, "compressors": None}
    arguments[place] = codec if place == "serializer" else [codec]
    return arguments


def assert_identical(actual: np.ndarray, expected: np.ndarray) -> None:
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    assert actual.tobytes() == expected.tobytes()


# -- JSON ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_json_round_trip(name: str) -> None:
    document = {"name": name, "configuration": CODECS[name][1]}
    codec = codec_from_json(document, "codecs[0]")
    assert type(codec) is NUMCODECS_CODECS[name]
    assert codec.to_json() == document
    assert json.loads(json.dumps(codec.to_json())) == document
    assert codec_from_json(codec.to_json(), "codecs[0]") == codec
    assert pickle.loads(pickle.dumps(codec)) == codec  # dask ships codecs to workers


def test_every_listed_codec_is_registered() -> None:
    assert sorted(NUMCODECS_CODECS) == sorted(CODECS)
    assert len(set(NUMCODECS_CODECS.values())) == len(CODECS)
    assert all(get_codec_class(name) is cls for name, cls in NUMCODECS_CODECS.items())


@pytest.mark.parametrize(
    ("document", "match"),
    [
        ({"name": "numcodecs.zlib", "configuration": {"level": 5, "bogus": 1}}, "numcodecs refuses"),
        ({"name": "numcodecs.delta", "configuration": {"dtype": "not a dtype"}}, "numcodecs refuses"),
        ({"name": "numcodecs.crc32", "configuration": {"location": "middle"}}, "numcodecs refuses"),
        ({"name": "numcodecs.lz4", "configuration": {"id": "zlib"}}, "does not match"),
    ],
)
def test_invalid_configuration(document, match: str) -> None:
    with pytest.raises(MetadataError, match=match):
        codec_from_json(document, "codecs[0]")


@pytest.mark.parametrize(
    ("dtype", "filters", "match"),
    [
        ("int64", [{"name": "numcodecs.delta", "configuration": {"dtype": "<i4"}}], "differs from the data type"),
        ("int32", [{"name": "numcodecs.packbits"}], "cannot encode"),
        ("int32", [{"name": "numcodecs.bitround", "configuration": {"keepbits": 3}}], "cannot encode"),
        ("float32", [{"name": "numcodecs.bitround", "configuration": {"keepbits": 30}}], "cannot encode"),
        ("int32", [{"name": "numcodecs.quantize", "configuration": {"digits": 2}}], "floating point"),
        ("float32", [{"name": "numcodecs.astype", "configuration": {"encode_dtype": ">f8"}}], "native byte order"),
    ],
)
def test_filters_validated_against_the_array(dtype, filters, match: str) -> None:
    with pytest.raises(MetadataError, match=match):
        zarrx.create_array({}, shape=(4,), dtype=dtype, filters=filters, compressors=None)


# -- arrays exchanged with zarr-python ----------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_reads_arrays_written_by_zarr_python(tmp_path, name: str) -> None:
    data = sample(CODECS[name][0])
    theirs = zarr.create_array(
        tmp_path / "a", shape=SHAPE, chunks=CHUNKS, dtype=data.dtype, **zarr_python_arguments(name)
    )
    theirs[...] = data
    ours = zarrx.open_array(tmp_path / "a")
    assert ours.metadata.to_json()["codecs"] == json.loads((tmp_path / "a" / "zarr.json").read_text())["codecs"]
    assert_identical(ours[...], zarr.open_array(tmp_path / "a")[...])
    assert_identical(ours[3:11, 2:5], theirs[3:11, 2:5])


@pytest.mark.parametrize("name", NAMES)
def test_zarr_python_reads_arrays_written_by_zarrx(tmp_path, name: str) -> None:
    data = sample(CODECS[name][0])
    ours = zarrx.create_array(tmp_path / "a", shape=SHAPE, chunks=CHUNKS, dtype=data.dtype, **keyword_arguments(name))
    ours[...] = data
    theirs = zarr.open_array(tmp_path / "a")[...]
    assert_identical(theirs, ours[...])
    if name not in ("numcodecs.bitround", "numcodecs.quantize", "numcodecs.zfpy", "numcodecs.astype",
                    "numcodecs.fixedscaleoffset"):
        assert_identical(theirs, data)  # lossless codecs
    else:
        np.testing.assert_allclose(theirs, data, rtol=1e-3)


def test_same_chunk_bytes_as_zarr_python(tmp_path) -> None:
    """Filters and compressors together: the stored chunks are byte for byte zarr-python's."""
    data = sample("float64")
    filters = [{"name": "numcodecs.fixedscaleoffset", "configuration": {"offset": 100, "scale": 10, "dtype": "<f8",
                                                                        "astype": "<u2"}}]  # fmt: skip
    compressors = [{"name": "numcodecs.shuffle", "configuration": {"elementsize": 2}},
                   {"name": "numcodecs.zlib", "configuration": {"level": 1}}]  # fmt: skip
    ours = zarrx.create_array(tmp_path / "ours", shape=SHAPE, chunks=CHUNKS, dtype="float64", filters=filters,
                              compressors=compressors)  # fmt: skip
    ours[...] = data
    theirs = zarr.create_array(
        tmp_path / "theirs", shape=SHAPE, chunks=CHUNKS, dtype="float64",
        filters=[numcodecs_zarr3.FixedScaleOffset(**filters[0]["configuration"])],
        compressors=[numcodecs_zarr3.Shuffle(elementsize=2), numcodecs_zarr3.Zlib(level=1)],
    )  # fmt: skip
    theirs[...] = data
    for chunk in ("c/0/0", "c/1/0", "c/2/0"):
        assert (tmp_path / "ours" / chunk).read_bytes() == (tmp_path / "theirs" / chunk).read_bytes()


def test_sharded_array_with_numcodecs(tmp_path) -> None:
    data = sample("int32")
    ours = zarrx.create_array(
        tmp_path / "a", shape=SHAPE, chunks=(4, 7), shards=(8, 7), dtype="int32",
        filters=[{"name": "numcodecs.delta"}], compressors=[{"name": "numcodecs.lz4"}, {"name": "numcodecs.crc32"}],
    )  # fmt: skip
    ours[...] = data
    assert_identical(zarr.open_array(tmp_path / "a")[...], data)
    assert_identical(zarrx.open_array(tmp_path / "a")[...], data)


# -- what zarr-python fills in, and where we differ ------------------------------------------


def test_configuration_filled_in_from_the_array() -> None:
    """As zarr-python's evolve_from_array_spec (and delta's dtype, which zarr-python requires)."""
    array = zarrx.create_array(
        {}, shape=(6,), dtype="float64",
        filters=[{"name": "numcodecs.quantize", "configuration": {"digits": 2}},
                 {"name": "numcodecs.astype", "configuration": {"encode_dtype": "<f4"}},
                 {"name": "numcodecs.delta"}],
        compressors=[{"name": "numcodecs.shuffle"}],
    )  # fmt: skip
    codecs = array.metadata.to_json()["codecs"]
    assert codecs[0]["configuration"] == {"digits": 2, "dtype": "float64"}
    assert codecs[1]["configuration"] == {"encode_dtype": "<f4", "decode_dtype": "float64"}
    assert codecs[2]["configuration"] == {"dtype": "float32"}  # delta sees astype's float32
    assert codecs[4]["configuration"] == {"elementsize": 4}  # shuffle sees the float32 bytes


def test_reads_configuration_without_the_filled_in_members(tmp_path) -> None:
    """zarr-python fills these in when it reads, too; a shuffle has no chunk spec when decoding."""
    data = np.linspace(0, 1, 12)
    array = zarrx.create_array(tmp_path / "a", shape=(12,), chunks=(5,), dtype="float64", compressors=None,
                               filters=[{"name": "numcodecs.quantize", "configuration": {"digits": 3}}])  # fmt: skip
    array[...] = data
    metadata = json.loads((tmp_path / "a" / "zarr.json").read_text())
    metadata["codecs"][0]["configuration"] = {"digits": 3}
    (tmp_path / "a" / "zarr.json").write_text(json.dumps(metadata))
    assert_identical(zarrx.open_array(tmp_path / "a")[...], zarr.open_array(tmp_path / "a")[...])
    metadata["codecs"].append({"name": "numcodecs.shuffle"})
    with pytest.raises(MetadataError, match="elementsize"):
        zarrx.open_array({"zarr.json": json.dumps(metadata).encode()})


def test_fixedscaleoffset_follows_the_spec(tmp_path) -> None:
    """Disagreement: zarr-python writes ``"dtype": "float64"`` and no ``astype``; the scale_offset
    spec ("Legacy numcodecs.fixedscaleoffset codec") requires both, as Zarr V2 data types. We write
    the spec's form and read both (test_reads_arrays_written_by_zarr_python reads zarr-python's)."""
    codec = {"name": "numcodecs.fixedscaleoffset", "configuration": {"offset": 1, "scale": 2}}
    array = zarrx.create_array({}, shape=(6,), dtype="float32", compressors=None, filters=[codec])
    assert array.metadata.to_json()["codecs"][0]["configuration"] == {"offset": 1, "scale": 2, "dtype": "<f4",
                                                                      "astype": "<f4"}  # fmt: skip
    zarr.create_array(tmp_path / "theirs", shape=(6,), dtype="float32", compressors=None,
                      filters=[numcodecs_zarr3.FixedScaleOffset(offset=1, scale=2)])  # fmt: skip
    theirs = json.loads((tmp_path / "theirs" / "zarr.json").read_text())["codecs"][0]
    assert theirs["configuration"] == {"offset": 1, "scale": 2, "dtype": "float32"}


def test_quantize_astype_changes_the_stored_type(tmp_path) -> None:
    """zarr-python does not resolve quantize's astype, so its bytes codec gets the wrong size and
    cannot read such arrays back; we store the astype values (as numcodecs' encode returns them)."""
    data = np.linspace(0, 1, 12)
    codec = {"name": "numcodecs.quantize", "configuration": {"digits": 2, "astype": "<f4"}}
    array = zarrx.create_array(tmp_path / "a", shape=(12,), chunks=(12,), dtype="float64", compressors=None,
                               filters=[codec])  # fmt: skip
    array[...] = data
    assert (tmp_path / "a" / "c" / "0").stat().st_size == 12 * 4
    expected = numcodecs.Quantize(digits=2, dtype="<f8", astype="<f4").encode(data).astype("<f8")
    assert_identical(zarrx.open_array(tmp_path / "a")[...], expected)


def test_packbits_spec() -> None:
    spec = ChunkSpec((3, 5), resolve_data_type("bool"), np.False_)
    codec = NUMCODECS_CODECS["numcodecs.packbits"]()
    encoded = codec.resolve_spec(spec)
    assert (encoded.shape, encoded.dtype) == ((3,), np.dtype("uint8"))
    values = np.arange(15).reshape(3, 5) % 4 == 0
    assert_identical(codec.decode(codec.encode(values, spec), spec), values)


def test_bitround_stored_as_float_bits() -> None:
    """numcodecs' BitRound returns integers; zarr-python stores their bits, so must we."""
    spec = ChunkSpec((4,), resolve_data_type("float32"), np.float32(0))
    codec = NUMCODECS_CODECS["numcodecs.bitround"](keepbits=3)
    values = np.array([1.1, 2.2, -3.3, 1e30], dtype="float32")
    encoded = codec.encode(values, spec)
    assert encoded.dtype == np.float32
    assert encoded.tobytes() == numcodecs.BitRound(keepbits=3).encode(values).tobytes()


def test_resolved_fill_value_is_encoded() -> None:
    spec = ChunkSpec((4,), resolve_data_type("float64"), np.float64(1002.5))
    codec = NUMCODECS_CODECS["numcodecs.fixedscaleoffset"](offset=1000, scale=10, dtype="<f8", astype="<u2")
    resolved = codec.resolve_spec(spec)
    assert resolved.data_type == resolve_data_type("uint16") and resolved.fill_value == 25


@optional("zfpy")
def test_zfpy_checks_the_header() -> None:
    spec = ChunkSpec((6, 10), resolve_data_type("float64"), 0.0)
    pipeline = CodecPipeline.from_json([{"name": "numcodecs.zfpy", "configuration": {"mode": 4, "tolerance": 1e-3}}])
    encoded = pipeline.encode(np.linspace(0, 1, 60).reshape(6, 10), spec)
    other = ChunkSpec((6, 11), resolve_data_type("float64"), 0.0)
    with pytest.raises(ChunkDecodeError, match="declares"):
        pipeline.decode(encoded, other, "c/0/0")
    # truncation cannot be detected (zfp streams have no length), but zfp reads zeros, not past the end
    assert pipeline.decode(encoded[: len(encoded) // 2], spec, "c/0/0").shape == (6, 10)


def test_optional_codecs_without_their_packages() -> None:
    """The module imports without zfpy and pcodec; using them then says what to install."""
    script = (
        "import sys; sys.modules['zfpy'] = None; sys.modules['pcodec'] = None\n"
        "import zarrx, pytest\n"
        "from zarrx.errors import MetadataError\n"
        "for name, package in (('zfpy', 'zfpy'), ('pcodec', 'pcodec')):\n"
        "    try:\n"
        "        zarrx.create_array({}, shape=(4,), dtype='float64', serializer={'name': 'numcodecs.' + name})\n"
        "    except MetadataError as error:\n"
        "        assert 'pip install ' + package in str(error), error\n"
        "    else:\n"
        "        raise SystemExit(name + ' worked without its package')\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True)


# -- corrupt chunks --------------------------------------------------------------------------


def corrupt(data: bytes, how: str) -> bytes:
    corruptions = {
        "truncate": lambda: data[: len(data) // 2 - 1],
        "garbage": lambda: bytes(range(256)) * (len(data) // 256 + 1),
        "flip": lambda: data[:8] + bytes([data[8] ^ 0x10]) + data[9:],
        "padding": lambda: b"\x09" + data[1:],  # packbits: more padding bits than a byte holds
        "header": lambda: b"zfq" + data[3:],
    }
    return corruptions[how]()


@pytest.mark.parametrize("name", NAMES)
def test_corrupt_chunk(tmp_path, name: str) -> None:
    data = sample(CODECS[name][0])
    array = zarrx.create_array(tmp_path / "a", shape=SHAPE, chunks=CHUNKS, dtype=data.dtype, **keyword_arguments(name))
    array[...] = data
    stored = array[...]
    chunk = tmp_path / "a" / "c" / "1" / "0"
    chunk.write_bytes(corrupt(chunk.read_bytes(), CODECS[name][4]))
    with pytest.raises(ChunkDecodeError, match="'c/1/0'"):
        zarrx.open_array(tmp_path / "a")[...]
    assert_identical(zarrx.open_array(tmp_path / "a")[:8], stored[:8])  # other chunks still read


def test_checksum_mismatch_message() -> None:
    spec = ChunkSpec((16,), resolve_data_type("uint8"), 0)
    for name in ("numcodecs.crc32", "numcodecs.adler32", "numcodecs.fletcher32", "numcodecs.jenkins_lookup3"):
        pipeline = CodecPipeline.from_json(["bytes", {"name": name}])
        encoded = bytearray(pipeline.encode(np.arange(16, dtype="uint8"), spec))
        encoded[6] ^= 1
        with pytest.raises(ChunkDecodeError, match=f"'c/0'.*{name}.*checksum mismatch"):
            pipeline.decode(bytes(encoded), spec, "c/0")
        with pytest.raises(ChunkDecodeError, match="too short"):
            pipeline.decode(b"ab", spec, "c/0")


# -- decompression bombs ----------------------------------------------------------------------

BOMB_SIZE = 256 * 2**20
CHUNK_SIZE = 64 * 2**10


def _zlib_bomb() -> bytes:
    """One zlib stream of 256 MiB of zeros, built from a repeated history-free deflate segment."""
    block = bytes(2**20)
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    segment = compressor.compress(block) + compressor.flush(zlib.Z_FULL_FLUSH)
    checksum = 1
    for _ in range(BOMB_SIZE // len(block)):
        checksum = zlib.adler32(block, checksum)
    return b"\x78\xda" + segment * (BOMB_SIZE // len(block)) + compressor.flush() + struct.pack(">I", checksum)


def _lz4_bomb() -> bytes:
    return bytes(numcodecs.lz4.compress(np.zeros(BOMB_SIZE, dtype=np.uint8)))


#: label -> (codec, data inflating to 256 MiB)
BOMBS = {
    "lz4": ("numcodecs.lz4", _lz4_bomb),
    "lz4, header lying": ("numcodecs.lz4", lambda: struct.pack("<I", CHUNK_SIZE) + _lz4_bomb()[4:]),
    "zlib": ("numcodecs.zlib", _zlib_bomb),
    # concatenated streams are valid bz2 and xz data (bz2.decompress and lzma.decompress read them all)
    "bz2": ("numcodecs.bz2", lambda: bz2.compress(bytes(BOMB_SIZE // 16), 9) * 16),
    "lzma": ("numcodecs.lzma", lambda: lzma.compress(bytes(BOMB_SIZE // 16), preset=0) * 16),
}


@pytest.fixture(scope="module", params=sorted(BOMBS))
def bomb(request) -> tuple[str, bytes]:
    name, make = BOMBS[request.param]
    return name, make()


def peak_memory(function) -> int:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        function()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_bomb_is_refused_with_bounded_memory(tmp_path, bomb) -> None:
    name, data = bomb
    assert len(data) < 2**21
    array = zarrx.create_array(tmp_path / "a", shape=(CHUNK_SIZE,), chunks=(CHUNK_SIZE,), dtype="uint8",
                               compressors=[{"name": name}])  # fmt: skip
    array[...] = 1
    (tmp_path / "a" / "c" / "0").write_bytes(data)

    def read() -> None:
        with pytest.raises(ChunkDecodeError, match="'c/0'.*(declares|larger than the expected|corrupt lz4)"):
            zarrx.open_array(tmp_path / "a")[...]

    assert peak_memory(read) < 4 * 2**20


def test_bomb_without_expected_size_stops_at_max_size(bomb) -> None:
    name, data = bomb
    codec = codec_from_json({"name": name}, "codecs[0]")
    peak = peak_memory(lambda: pytest.raises(ChunkDecodeError, codec.decode, data, None, 2**20))
    assert peak < 4 * 2**20


def test_lz4_size_header() -> None:
    codec = NUMCODECS_CODECS["numcodecs.lz4"]()
    data = bytes(codec.encode(bytes(range(256)) * 40))
    assert bytes(codec.decode(data, 10240, 10240)) == bytes(range(256)) * 40
    with pytest.raises(ChunkDecodeError, match="declares 10240 bytes, expected 10000"):
        codec.decode(data, 10000, 10000)
    lying = struct.pack("<I", 5000) + data[4:]  # the stream inflates past the declared size
    with pytest.raises(ChunkDecodeError, match="corrupt lz4 data"):  # LZ4 stops at the buffer's end
        codec.decode(lying, 5000, 5000)
    with pytest.raises(ChunkDecodeError, match="too short"):
        codec.decode(b"\x01", None, 100)


@pytest.mark.parametrize("name", ["numcodecs.zlib", "numcodecs.bz2", "numcodecs.lzma"])
def test_stream_sizes(name: str) -> None:
    codec = codec_from_json({"name": name}, "codecs[0]")
    data = bytes(codec.encode(bytes(1000)))
    assert bytes(codec.decode(data, 1000, 1000)) == bytes(1000)
    assert bytes(codec.decode(data + data, None, 5000)) == bytes(2000)  # concatenated streams, as numcodecs
    with pytest.raises(ChunkDecodeError, match="larger than the expected 999"):
        codec.decode(data, 999, 999)
    with pytest.raises(ChunkDecodeError, match="expected 1001"):
        codec.decode(data, 1001, 1001)
    with pytest.raises(ChunkDecodeError, match="truncated"):
        codec.decode(data[:-3], 1000, 1000)
    with pytest.raises(ChunkDecodeError, match="empty"):
        codec.decode(b"", 0, 0)
