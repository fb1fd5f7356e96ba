"""Fuzzing every codec: mutated metadata and mutated chunk bytes give a right value or a ZarrxError.

For every codec zarrx implements (``bytes``, ``transpose``, ``gzip``, ``zstd``, ``blosc``,
``crc32c``, ``vlen-utf8``, ``vlen-bytes``, ``sharding_indexed``, ``zarrs.vlen``,
``cast_value``, ``scale_offset`` and every ``numcodecs.*`` codec) a small array is written,
then hypothesis mutates

* its ``zarr.json`` -- mostly the codec's own configuration (members deleted, replaced by
  hostile JSON values, nudged, wrapped, stringified, unknown members added), sometimes any
  other member, now and then the text itself;
* the bytes of one stored chunk -- truncated, bits flipped, bytes inserted, deleted, replaced,
  duplicated.

The array is then opened and read (whole and in part). The only allowed outcomes:

* a :class:`~zarrx.errors.ZarrxError` (any other exception fails the test, and so does a read
  that hangs or tries to take more than a bounded amount of memory: see
  ``tests/test_bad_input.py::hostile``);
* a value of the declared shape and data type, where every chunk that was not mutated reads
  exactly as written, a chunk protected by a checksum reads exactly as written, and an
  unchanged document or chunk reads exactly as written; where zarr-python reads the same
  mutated chunk, it reads the same values.

Example counts: ``ZARRX_FUZZ_EXAMPLES`` examples per test (:data:`CI_EXAMPLES` by default, in
CI); run many more on demand, e.g. ``ZARRX_FUZZ_EXAMPLES=100000 pytest tests/test_fuzz.py``.
The number of examples run is printed at the end of the module.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import os
import tempfile
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import zarrx
from zarrx.codecs import (
    BloscCodec,
    BytesCodec,
    Crc32cCodec,
    GzipCodec,
    TransposeCodec,
    ZarrsVlenCodec,
    ZstdCodec,
)
from zarrx.errors import ZarrxError
from zarrx.storage import MemoryStore
from tests.figures import add, report_figures  # noqa: F401 (report_figures is an autouse fixture)
from tests.test_bad_input import JSON_POOL, hostile, member_paths

#: examples per test in CI
CI_EXAMPLES = 50
EXAMPLES = int(os.environ.get("ZARRX_FUZZ_EXAMPLES", CI_EXAMPLES))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
)

SHAPE, CHUNKS = (8, 8), (4, 4)


def codec(name: str, **configuration: Any) -> dict[str, Any]:
    return {"name": name, "configuration": configuration} if configuration else {"name": name}


def numcodecs_case(name: str, array_dtype: str, place: str, **configuration: Any) -> dict[str, Any]:
    keywords: dict[str, Any] = {"dtype": array_dtype, "compressors": None}
    entry = codec(f"numcodecs.{name}", **configuration)
    keywords[place] = entry if place == "serializer" else [entry]
    return keywords


#: case -> (create_array keywords, whether a checksum protects every chunk byte)
CASES: dict[str, tuple[dict[str, Any], bool]] = {
    "bytes-little": ({"serializer": BytesCodec(endian="little"), "compressors": None}, False),
    "bytes-big": ({"dtype": "float64", "serializer": BytesCodec(endian="big"), "compressors": None}, False),
    "transpose": ({"filters": [TransposeCodec(order=(1, 0))], "compressors": None}, False),
    "gzip": ({"compressors": [GzipCodec(level=5)]}, False),
    "zstd": ({"compressors": [ZstdCodec(level=1)]}, False),
    "zstd-checksum": ({"compressors": [ZstdCodec(level=1, checksum=True)]}, True),
    "blosc-lz4": ({"compressors": [BloscCodec(cname="lz4", clevel=5, shuffle="shuffle", typesize=4)]}, False),
    "blosc-zstd": ({"compressors": [BloscCodec(cname="zstd", clevel=3, shuffle="bitshuffle", typesize=4)]}, False),
    "crc32c": ({"compressors": [Crc32cCodec()]}, True),
    "vlen-utf8": ({"dtype": "string", "compressors": None}, False),
    "vlen-bytes": ({"dtype": "bytes", "compressors": None}, False),
    "vlen-utf8-zstd-crc32c": ({"dtype": "string", "compressors": [ZstdCodec(level=1), Crc32cCodec()]}, True),
    "sharding": ({"chunks": (2, 2), "shards": (4, 4), "compressors": [ZstdCodec(level=1)]}, False),
    "sharding-crc32c": ({"chunks": (2, 4), "shards": (4, 4), "compressors": [Crc32cCodec()]}, True),
    "sharding-index-start": (
        {
            "chunks": (4, 4),
            "serializer": codec(
                "sharding_indexed",
                chunk_shape=[2, 2],
                codecs=[codec("bytes", endian="little")],
                index_codecs=[codec("bytes", endian="little"), codec("crc32c")],
                index_location="start",
            ),
            "compressors": None,
        },
        False,
    ),
    "zarrs.vlen": ({"dtype": "string", "serializer": ZarrsVlenCodec(), "compressors": None}, False),
    "cast_value": ({"dtype": "float64", "filters": [codec("cast_value", data_type="int16")], "compressors": None}, False),
    "scale_offset": (
        {"dtype": "float64", "filters": [codec("scale_offset", offset=5, scale=10)], "compressors": None},
        False,
    ),
    "numcodecs.delta": (numcodecs_case("delta", "int32", "filters", dtype="<i4"), False),
    "numcodecs.fixedscaleoffset": (
        numcodecs_case("fixedscaleoffset", "float64", "filters", offset=100, scale=10, dtype="<f8", astype="<u2"),
        False,
    ),
    "numcodecs.quantize": (numcodecs_case("quantize", "float64", "filters", digits=3, dtype="float64"), False),
    "numcodecs.bitround": (numcodecs_case("bitround", "float32", "filters", keepbits=10), False),
    "numcodecs.packbits": (numcodecs_case("packbits", "bool", "filters"), False),
    "numcodecs.astype": (
        numcodecs_case("astype", "float64", "filters", encode_dtype="<f4", decode_dtype="float64"),
        False,
    ),
    "numcodecs.shuffle": (numcodecs_case("shuffle", "int32", "compressors", elementsize=4), False),
    "numcodecs.lz4": (numcodecs_case("lz4", "int32", "compressors", acceleration=1), False),
    "numcodecs.zlib": (numcodecs_case("zlib", "int32", "compressors", level=5), False),
    "numcodecs.bz2": (numcodecs_case("bz2", "int32", "compressors", level=3), False),
    "numcodecs.lzma": (numcodecs_case("lzma", "int32", "compressors", preset=1), False),
    "numcodecs.crc32": (numcodecs_case("crc32", "int32", "compressors"), True),
    "numcodecs.adler32": (numcodecs_case("adler32", "int32", "compressors", location="end"), True),
    "numcodecs.fletcher32": (numcodecs_case("fletcher32", "int32", "compressors"), True),
    "numcodecs.jenkins_lookup3": (numcodecs_case("jenkins_lookup3", "int32", "compressors", initval=7), True),
    "numcodecs.zfpy": (numcodecs_case("zfpy", "float64", "serializer", mode=4, tolerance=0.001), False),
    "numcodecs.pcodec": (numcodecs_case("pcodec", "int32", "serializer", level=8), False),
}
OPTIONAL = {"numcodecs.zfpy": "zfpy", "numcodecs.pcodec": "pcodec"}
#: codecs zarr-python reads too, so a mutated chunk it decodes must decode to the same values here; not
#: zfpy: numcodecs' zfpy reads past the end of a truncated stream, so zarr-python's values for one vary
#: from read to read (zarrx pads the stream with zeros: its values are always the same)
ZARR_PYTHON_READS = {name for name in CASES if name not in ("zarrs.vlen", "cast_value", "scale_offset", "numcodecs.zfpy")}

TEXT = ["", "a", "héllo", "日本語", "x" * 20, "zarr", "\u0000", "end"]


def case_params():
    for name in CASES:
        marks = []
        if name in OPTIONAL:
            marks.append(pytest.mark.skipif(not _importable(OPTIONAL[name]), reason=f"needs {OPTIONAL[name]}"))
        yield pytest.param(name, marks=marks)


def _importable(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def sample(dtype: str) -> np.ndarray:
    n = int(np.prod(SHAPE))
    if dtype == "string":
        return np.array([TEXT[i % len(TEXT)] + str(i) for i in range(n)], dtype=object).reshape(SHAPE)
    if dtype == "bytes":
        return np.array([bytes([i % 7]) * (i % 5) for i in range(n)], dtype=object).reshape(SHAPE)
    if dtype == "bool":
        return (np.arange(n) % 3 == 0).reshape(SHAPE)
    values = np.arange(n).reshape(SHAPE) * 3 + 1000
    return (values / 10).astype(dtype) if dtype.startswith("float") else values.astype(dtype)


@functools.cache
def fixture(name: str) -> tuple[dict[str, bytes], np.ndarray]:
    """The stored keys of the case's 8x8 array, fully written, and the values it reads back."""
    keywords = dict(CASES[name][0])
    dtype = keywords.pop("dtype", "int32")
    chunks = keywords.pop("chunks", CHUNKS)
    mapping: dict[str, bytes] = {}
    array = zarrx.create_array(MemoryStore(mapping), "x", shape=SHAPE, chunks=chunks, dtype=dtype, **keywords)
    array[...] = sample(dtype)
    return mapping, array[...]


def count(kind: str) -> None:
    add(__name__, f"fuzz examples run ({kind})")


def read(mapping: dict[str, bytes]) -> tuple[np.ndarray, np.ndarray, Any] | None:
    """``x`` read whole -- a bounded corner of it, should the metadata claim a huge shape -- and in
    part (and its array), or None when zarrx refused with a ZarrxError."""

    def run():
        array = zarrx.open_array(MemoryStore(mapping), "x")
        return array[(slice(0, 8),) * array.ndim], array[(slice(1, 3),) * array.ndim], array

    try:
        return hostile(run)
    except ZarrxError:
        return None


# -- chunk bytes -----------------------------------------------------------------------------------
@st.composite
def mutated_bytes(draw, raw: bytes) -> bytes:
    for _ in range(draw(st.integers(1, 3))):
        position = draw(st.integers(0, max(0, len(raw) - 1)))
        operation = draw(st.sampled_from(["truncate", "flip", "flip", "insert", "delete", "replace", "duplicate", "zero"]))
        if operation == "truncate":
            raw = raw[:position]
        elif operation == "flip" and raw:
            raw = raw[:position] + bytes([raw[position] ^ (1 << draw(st.integers(0, 7)))]) + raw[position + 1 :]
        elif operation == "insert":
            raw = raw[:position] + draw(st.binary(min_size=1, max_size=8)) + raw[position:]
        elif operation == "delete":
            raw = raw[:position] + raw[position + draw(st.integers(1, 8)) :]
        elif operation == "replace":
            raw = draw(st.binary(max_size=200))
        elif operation == "zero":
            end = position + draw(st.integers(1, 16))
            raw = raw[:position] + bytes(len(raw[position:end])) + raw[end:]
        else:
            raw = raw + raw
    return raw


def chunk_region(key: str, chunks: tuple[int, ...]) -> tuple[slice, ...]:
    coords = [int(part) for part in key.split("/")[2:]]
    return tuple(slice(c * size, (c + 1) * size) for c, size in zip(coords, chunks))


def zarr_python_read(mapping: dict[str, bytes]) -> np.ndarray | None:
    """What zarr-python reads from the same keys (None when it fails)."""
    zarr = pytest.importorskip("zarr")
    with tempfile.TemporaryDirectory(prefix="zarrx-fuzz-") as folder:
        for key, value in mapping.items():
            path = os.path.join(folder, *key.split("/"))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as file:
                file.write(value)
        try:
            return np.asarray(zarr.open_array(folder, path="x", mode="r")[...])
        except Exception:  # zarr-python's own errors: it refuses the chunk
            return None


def same(a: np.ndarray, b: np.ndarray) -> bool:
    if a.dtype.kind in "fc":
        return np.array_equal(a, b, equal_nan=True)
    if a.dtype.kind in "OT" or b.dtype.kind in "OT":
        return a.shape == b.shape and all(x == y for x, y in zip(a.reshape(-1).tolist(), b.reshape(-1).tolist()))
    return np.array_equal(a, b)


@pytest.mark.parametrize("name", case_params())
@FUZZ
@given(data=st.data())
def test_mutated_chunk_reads_correctly_or_raises_zarrx_error(name, data):
    mapping, expected = fixture(name)
    chunk_keys = sorted(key for key in mapping if "/c/" in key)
    key = data.draw(st.sampled_from(chunk_keys), label="chunk")
    stored = data.draw(mutated_bytes(mapping[key]), label="bytes")
    count("chunk bytes")
    mutated = {**mapping, key: stored}
    result = read(mutated)
    if result is None:
        return
    whole, part, array = result
    assert whole.shape == expected.shape and whole.dtype == expected.dtype
    region = chunk_region(key, array.shards or array.chunks)
    untouched = np.ones(expected.shape, dtype=bool)
    untouched[region] = False
    assert same(whole[untouched], expected[untouched]), "a chunk that was not mutated reads differently"
    assert same(part, whole[(slice(1, 3),) * whole.ndim]), "a partial read differs from the whole read"
    if CASES[name][1] or stored == mapping[key]:
        assert same(whole, expected), "a checksummed or unchanged chunk reads differently"
    elif not same(whole[region], expected[region]) and name in ZARR_PYTHON_READS:
        theirs = zarr_python_read(mutated)
        if theirs is not None:
            assert same(whole, theirs), "zarr-python decodes the mutated chunk to other values"
        add(__name__, "mutated chunks decoding to other values, checked against zarr-python")


# -- metadata ------------------------------------------------------------------------------------
#: replacements of a member's value, by its JSON type: near misses more than random values
NEAR = {
    int: lambda value: [value + 1, value - 1, -value, 0, -1, value * 2**32, 2**63, 2**64 + value, float(value), str(value), True],
    float: lambda value: [value * 2, -value, 0.0, float("nan"), float("inf"), int(value) if math.isfinite(value) else 0, str(value)],
    str: lambda value: [value.upper(), value + "x", value[:-1], "", "<" + value, ">" + value, "|" + value, value * 2],
    bool: lambda value: [not value, int(value), str(value).lower(), None],
    list: lambda value: [value[::-1], value[:-1], value + value[-1:], [], [value], value * 2],
    dict: lambda value: [{}, {**value, "extra": 1}, {**value, "must_understand": False}, list(value.values())],
}


@st.composite
def mutated_metadata(draw, document: dict[str, Any]) -> bytes:
    document = json.loads(json.dumps(document))
    for _ in range(draw(st.integers(1, 3))):
        paths = member_paths(document)
        codec_paths = [path for path in paths if path[0] == "codecs"]
        if not paths:
            break
        pool = codec_paths if codec_paths and draw(st.integers(0, 9)) < 7 else paths
        *parents, last = draw(st.sampled_from(pool))
        container = document
        for name in parents:
            container = container[name]
        value = container[last]
        operation = draw(st.sampled_from(["delete", "replace", "near", "near", "near", "wrap", "stringify", "add"]))
        if operation == "delete":
            del container[last]
        elif operation == "replace":
            container[last] = copy.deepcopy(draw(st.sampled_from(JSON_POOL)))
        elif operation == "near" and type(value) in NEAR and NEAR[type(value)](value):
            container[last] = draw(st.sampled_from(NEAR[type(value)](value)))
        elif operation == "wrap":
            container[last] = [value]
        elif operation == "stringify":
            container[last] = json.dumps(value)
        elif isinstance(container, dict):
            container[draw(st.sampled_from(["extra", "name", "configuration", "must_understand", "endian"]))] = copy.deepcopy(
                draw(st.sampled_from(JSON_POOL))
            )
    text = json.dumps(document).encode()
    if draw(st.integers(0, 19)) == 0:  # now and then damaged text as well
        cut = draw(st.integers(0, len(text)))
        text = text[:cut] + draw(st.binary(max_size=3)) + text[cut + 1 :]
    return text


@pytest.mark.parametrize("name", case_params())
@FUZZ
@given(data=st.data())
def test_mutated_metadata_opens_correctly_or_raises_zarrx_error(name, data):
    mapping, expected = fixture(name)
    original = json.loads(mapping["x/zarr.json"])
    document = data.draw(mutated_metadata(original), label="zarr.json")
    count("metadata")
    result = read({**mapping, "x/zarr.json": document})
    if result is None:
        return
    whole, part, array = result
    assert whole.shape == tuple(min(8, length) for length in array.shape) and whole.dtype == array.dtype
    assert same(part, whole[(slice(1, 3),) * whole.ndim])
    try:
        unchanged = json.loads(document) == original
    except ValueError:
        unchanged = False
    if unchanged:
        assert same(whole, expected)
