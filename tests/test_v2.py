"""Zarr v2: metadata, interop with zarr-python's ``zarr_format=2`` in both directions, safety.

The rule, as for v3: an array written by zarr-python as format 2 (every compressor, filters,
order F, both separators, every v2 data type, null/NaN/base64 fill values, consolidated
metadata) reads identically in zarrx, and a v2 array written by zarrx opens identically in
zarr-python -- byte for byte where the codec is deterministic. Values are compared in
native byte order: zarrx arrays are native in memory, zarr-python keeps the stored order.

Safety: the ``pickle`` object codec is refused before any chunk is read, so a malicious
pickle in the store is never loaded (the marker file it would write never appears).
"""

from __future__ import annotations

import base64
import json
import os
import pickle
import zlib
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import pytest
import zarr
from zarr.core.dtype import VariableLengthBytes

import zarrx
from zarrx.errors import (
    ChunkDecodeError,
    ContainsArrayError,
    MetadataError,
    NodeNotFoundError,
    ReadOnlyError,
    UnknownCodecError,
    UnsupportedExtensionError,
)
from zarrx.metadata.v2 import ArrayMetadataV2, GroupMetadataV2, parse_v2_node
from zarrx.storage import LocalStore, MemoryStore

from .conftest import sample_values
from .counting import CountingStore

pytestmark = [
    pytest.mark.filterwarnings("ignore::zarr.errors.UnstableSpecificationWarning"),
    pytest.mark.filterwarnings("ignore::zarr.errors.ZarrUserWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
]

STRUCT = [("a", ">i2"), ("b", [("c", "<f4"), ("d", "S2")])]
FLAT_STRUCT = [("a", ">i2"), ("c", ">f4"), ("d", "S2")]
SUBARRAY_STRUCT = [("x", "<f4"), ("z", "<i2", (2,))]

#: every v2 data type: id -> (zarr-python dtype, name for sample_values)
DTYPES: dict[str, tuple[Any, str]] = {
    "<i2": ("<i2", "int"), ">i2": (">i2", "int"), ">u4": (">u4", "int"), "<i8": ("<i8", "int"),
    "|b1": ("|b1", "bool"), "|i1": ("|i1", "int"), "|u1": ("|u1", "int"),
    "<f4": ("<f4", "float"), ">f8": (">f8", "float"), "<f2": ("<f2", "float"),
    "<c16": ("<c16", "complex"), ">c8": (">c8", "complex"),
    "<U5": ("<U5", "unicode"), ">U3": (">U3", "unicode"), "|S4": ("|S4", "bytes-fixed"), "|V3": ("|V3", "void"),
    "<M8[ns]": ("<M8[ns]", "time"), ">m8[s]": (">m8[s]", "time"), "<M8[D]": ("<M8[D]", "time"),
    "struct": (STRUCT, "struct"), "struct-flat": (FLAT_STRUCT, "struct"),
    "vlen-utf8": (str, "string"), "vlen-bytes": (VariableLengthBytes(), "bytes"),
}  # fmt: skip

#: numcodecs compressors, as zarr-python writes them
COMPRESSORS = {
    "none": None,
    "blosc": numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE),
    "blosc-zstd-bitshuffle": numcodecs.Blosc(cname="zstd", clevel=3, shuffle=numcodecs.Blosc.BITSHUFFLE),
    "zstd": numcodecs.Zstd(level=3),
    "gzip": numcodecs.GZip(level=5),
    "zlib": numcodecs.Zlib(level=1),
    "lz4": numcodecs.LZ4(),
    "bz2": numcodecs.BZ2(level=5),
    "lzma": numcodecs.LZMA(),
    # no zarrx codec of their own: decoded by numcodecs into a buffer of the expected size
    "crc32c": numcodecs.CRC32C(),
    "base64": numcodecs.Base64(),
}


def native(dtype: np.dtype) -> np.dtype:
    return dtype if dtype.kind in "OT" else dtype.newbyteorder("=")


def values_for(dtype: np.dtype, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Deterministic values of a (possibly big-endian or object) dtype."""
    if isinstance(dtype, np.dtypes.StringDType):
        return sample_values("string", dtype, shape, seed)
    if dtype.kind == "O":
        return sample_values("bytes", dtype, shape, seed)
    if dtype.names and any(dtype.fields[n][0].subdtype for n in dtype.names):
        out = np.zeros(shape, dtype=dtype)
        out["x"] = np.arange(np.prod(shape)).reshape(shape) * 1.5
        out["z"] = np.arange(2 * np.prod(shape)).reshape((*shape, 2))
        return out
    return sample_values("x", native(dtype), shape, seed).astype(dtype)


def assert_values(actual: np.ndarray, expected: np.ndarray) -> None:
    """Same values and same native dtype (NaN == NaN, NaT == NaT, bytes compared raw)."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape
    if expected.dtype.kind in "OT":
        assert actual.dtype == expected.dtype
        assert actual.tolist() == expected.tolist()
        return
    actual, expected = actual.astype(native(actual.dtype)), expected.astype(native(expected.dtype))
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert actual.tobytes() == expected.tobytes()


def zarr_python_array(path: Path, dtype: Any, **kwargs: Any) -> zarr.Array:
    kwargs.setdefault("shape", (5, 3))
    kwargs.setdefault("chunks", (2, 2))
    return zarr.create_array(str(path), dtype=dtype, zarr_format=2, **kwargs)


def zarray(path: Path) -> dict[str, Any]:
    return json.loads((path / ".zarray").read_text())


# -- metadata --------------------------------------------------------------------------------------

ARRAY_DOCUMENTS = {
    "spec-example": {
        "shape": [10000, 10000], "chunks": [1000, 1000], "dtype": "<f8", "fill_value": "NaN", "order": "C",
        "filters": [{"id": "delta", "dtype": "<f8", "astype": "<f4"}], "dimension_separator": ".",
        "compressor": {"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1}, "zarr_format": 2,
    },
    "null-fill-F-nested": {
        "shape": [20, 20], "chunks": [10, 10], "dtype": ">i4", "fill_value": None, "order": "F",
        "filters": None, "dimension_separator": "/", "compressor": {"id": "zlib", "level": 1}, "zarr_format": 2,
    },
    "structured-base64": {
        "shape": [3], "chunks": [2], "dtype": [["a", ">i2"], ["b", [["c", "<f4"], ["d", "|S2"]]]],
        "fill_value": base64.b64encode(b"\x00\x07" + np.float32(1.5).tobytes() + b"hi").decode(), "order": "C",
        "filters": None, "dimension_separator": ".", "compressor": None, "zarr_format": 2,
    },
    "subarray-fields": {
        "shape": [4], "chunks": [4], "dtype": [["x", "<f4"], ["z", "<f4", [2, 2]]], "fill_value": None,
        "order": "C", "filters": None, "dimension_separator": ".", "compressor": None, "zarr_format": 2,
    },
    "bytes-infinity-complex": {
        "shape": [2], "chunks": [1], "dtype": "<c16", "fill_value": ["Infinity", "-Infinity"], "order": "C",
        "filters": None, "dimension_separator": ".", "compressor": None, "zarr_format": 2,
    },
    "vlen-utf8": {
        "shape": [4], "chunks": [2], "dtype": "|O", "fill_value": "", "order": "C",
        "filters": [{"id": "vlen-utf8"}], "dimension_separator": ".",
        "compressor": {"id": "zstd", "level": 0}, "zarr_format": 2,
    },
    "unknown-member-kept": {
        "shape": [], "chunks": [], "dtype": "<M8[s]", "fill_value": -9223372036854775808, "order": "C",
        "filters": None, "dimension_separator": ".", "compressor": None, "zarr_format": 2, "custom": {"a": 1},
    },
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(ARRAY_DOCUMENTS))
def test_array_metadata_round_trips(name):
    document = ARRAY_DOCUMENTS[name]
    metadata = ArrayMetadataV2.from_json(document, {"_ARRAY_DIMENSIONS": ["x"] * len(document["shape"])})
    assert metadata.to_json() == document
    assert ArrayMetadataV2.from_json(json.loads(metadata.to_bytes())).to_json() == document
    assert metadata.dimension_names == ("x",) * len(document["shape"])
    assert json.loads(metadata.documents()[".zattrs"]) == {"_ARRAY_DIMENSIONS": ["x"] * len(document["shape"])}


def test_metadata_offers_what_the_array_machinery_uses():
    metadata = ArrayMetadataV2.from_json(ARRAY_DOCUMENTS["null-fill-F-nested"])
    assert metadata.dtype == np.dtype("int32") and metadata.stored_dtype == np.dtype(">i4")
    assert metadata.data_type.to_json() == "int32"
    assert metadata.fill_value == 0 and metadata.declared_fill_value is None
    assert metadata.chunk_key((1, 2)) == "1/2" and metadata.grid_shape == (2, 2) and metadata.nchunks == 4
    assert metadata.chunk_key_encoding.decode("1/0") == (1, 0)
    assert list(metadata.chunk_grid.all_chunk_coords(metadata.shape))[-1] == (1, 1)
    assert metadata.storage_key("a/b", (0, 1)) == "a/b/0/1"
    assert metadata.evolve(shape=(30, 20)).to_json()["shape"] == [30, 20]
    assert metadata.evolve(dimension_names=["y", "x"]).attributes == {"_ARRAY_DIMENSIONS": ["y", "x"]}
    zero_d = ArrayMetadataV2.from_json(ARRAY_DOCUMENTS["unknown-member-kept"])
    assert zero_d.chunk_key(()) == "0" and np.isnat(zero_d.fill_value)


def test_group_metadata_round_trips():
    metadata = parse_v2_node({".zgroup": b'{"zarr_format": 2}', ".zattrs": b'{"title": "t"}'}, "g")
    assert isinstance(metadata, GroupMetadataV2) and metadata.attributes == {"title": "t"}
    assert {name: json.loads(raw) for name, raw in metadata.documents().items()} == {
        ".zgroup": {"zarr_format": 2}, ".zattrs": {"title": "t"}
    }
    assert parse_v2_node({".zattrs": b"{}"}, "g") is None


def _changed(document: dict[str, Any], field: str, value: Any) -> dict[str, Any]:
    changed = dict(document)
    if value is DROP:
        changed.pop(field)
    else:
        changed[field] = value
    return changed


DROP = object()
BASE = ARRAY_DOCUMENTS["null-fill-F-nested"]
ERROR_CASES = [
    ("zarr_format", 3, MetadataError, "zarr_format"),
    ("zarr_format", DROP, MetadataError, "zarr_format"),
    ("shape", "10", MetadataError, "shape"),
    ("shape", DROP, MetadataError, "shape"),
    ("chunks", [10], MetadataError, "chunks"),
    ("chunks", [0, 10], MetadataError, "chunks"),
    ("dtype", "<q9", MetadataError, "dtype"),
    ("dtype", "|O", MetadataError, "dtype"),
    ("dtype", [["a"]], MetadataError, "dtype[0]"),
    ("dtype", 7, MetadataError, "dtype"),
    ("order", "X", MetadataError, "order"),
    ("fill_value", "abc", MetadataError, "fill_value"),
    ("fill_value", 2**40, MetadataError, "fill_value"),
    ("dimension_separator", "-", MetadataError, "dimension_separator"),
    ("filters", {"id": "delta"}, MetadataError, "filters"),
    ("filters", [{"dtype": "<i4"}], MetadataError, "filters[0]"),
    ("filters", [{"id": "vlen-utf8"}], MetadataError, "filters"),
    ("compressor", {"level": 1}, MetadataError, "compressor"),
    ("compressor", {"id": "no-such-codec"}, UnknownCodecError, "compressor"),
    ("compressor", {"id": "blosc", "cname": "nope"}, MetadataError, "compressor"),
    ("compressor", {"id": "pickle"}, UnsupportedExtensionError, "compressor"),
]


@pytest.mark.parametrize("field, value, error, fragment", ERROR_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(ERROR_CASES)])
def test_metadata_errors_name_the_key_and_the_field(field, value, error, fragment):
    store = MemoryStore()
    store.set("g/a/.zarray", json.dumps(_changed(BASE, field, value)).encode())
    with pytest.raises(error) as raised:
        zarrx.open_array(store, "g/a")
    assert str(raised.value).startswith(f"g/a/.zarray: {fragment}"), str(raised.value)


@pytest.mark.parametrize(
    "key, raw, fragment",
    [
        ("x/.zarray", b'{"zarr_format": 2,', "not valid JSON"),
        ("x/.zarray", b"[2]", "JSON object"),
        ("x/.zattrs", b"[1, 2]", "JSON object"),
        ("x/.zgroup", b'{"zarr_format": 3}', "zarr_format"),
    ],
)
def test_bad_documents_name_their_key(key, raw, fragment):
    store = MemoryStore()
    store.set("x/.zarray", json.dumps(BASE).encode())
    store.set(key, raw)
    if key.endswith(".zgroup"):
        store.delete("x/.zarray")
    with pytest.raises(MetadataError, match=fragment) as raised:
        zarrx.open(store, "x")
    assert key in str(raised.value)


def test_base64_and_special_fill_values_read_and_write():
    store = MemoryStore()
    documents = {
        "s": ("|S3", base64.b64encode(b"ab").decode(), np.bytes_(b"ab")),
        "v": ("|V2", base64.b64encode(b"\x01\xff").decode(), np.void(b"\x01\xff")),
        "nan": ("<f4", "NaN", np.float32("nan")),
        "neg": (">f8", "-Infinity", -np.inf),
        "t": ("<m8[ms]", "NaT", np.timedelta64("NaT", "ms")),
        "u": (">U2", "é", "é"),
    }
    for name, (dtype, fill, _) in documents.items():
        document = {**BASE, "shape": [2], "chunks": [2], "dtype": dtype, "fill_value": fill, "order": "C"}
        store.set(f"{name}/.zarray", json.dumps(document).encode())
    for name, (dtype, fill, expected) in documents.items():
        array = zarrx.open_array(store, name)
        read = array[:]
        assert np.asarray(expected, dtype=native(np.dtype(dtype))).tobytes() * 2 == read.tobytes(), name
        # written back as read; NaT as the int64 zarr-python writes
        assert array.metadata.to_json()["fill_value"] == (-(2**63) if fill == "NaT" else fill)


# -- zarr-python writes, zarrx reads ---------------------------------------------------------------


@pytest.mark.parametrize("dtype_id", sorted(DTYPES))
def test_zarr_python_data_types_read_identically(tmp_path, dtype_id):
    dtype, _ = DTYPES[dtype_id]
    theirs = zarr_python_array(tmp_path / "a", dtype)
    values = values_for(theirs.dtype, (5, 3))
    theirs[:4] = values[:4]  # row 4 stays fill value (and chunk row 2 is partly absent)
    ours = zarrx.open_array(str(tmp_path / "a"))
    assert ours.metadata.zarr_format == 2
    assert ours.dtype == native(theirs.dtype)
    assert_values(ours[:], theirs[:])
    assert_values(ours[1:4, 1], theirs[1:4, 1])


def test_nested_structured_types_zarr_python_writes_but_cannot_read(tmp_path):
    """Disagreement: the v2 spec allows nested structured types ("Structured data types may also be
    nested"), and zarr-python 3.1 writes them, but cannot open them again; zarrx reads them."""
    theirs = zarr_python_array(tmp_path / "a", STRUCT)
    values = values_for(theirs.dtype, (5, 3))
    theirs[:] = values
    with pytest.raises(ValueError, match="No Zarr data type"):
        zarr.open_array(str(tmp_path / "a"), mode="r")
    assert_values(zarrx.open_array(str(tmp_path / "a"))[:], values)


def test_null_structured_fill(tmp_path):
    """A null fill value leaves absent chunks "undefined" (v2 spec). zarrx reads them as zero bytes
    (the v3 default of every field); zarr-python casts the integer 0 to each field, so its
    byte-string fields read b"0". Both are within the spec; arrays that care state a fill value."""
    theirs = zarr_python_array(tmp_path / "a", FLAT_STRUCT, shape=(2,), chunks=(2,), fill_value=None)
    assert zarray(tmp_path / "a")["fill_value"] is None
    assert theirs[:]["d"].tolist() == [b"0", b"0"]
    assert zarrx.open_array(str(tmp_path / "a"))[:]["d"].tolist() == [b"", b""]


def test_subarray_struct_written_by_zarrx_reads_back_and_has_no_v3_type(tmp_path):
    dtype = np.dtype(SUBARRAY_STRUCT)
    ours = zarrx.create_array(str(tmp_path / "a"), shape=(5,), chunks=(2,), dtype=dtype, zarr_format=2)
    values = values_for(dtype, (5,))
    ours[:] = values
    assert_values(zarrx.open_array(str(tmp_path / "a"))[:], values)
    assert zarray(tmp_path / "a")["dtype"] == [["x", "<f4"], ["z", "<i2", [2]]]
    with pytest.raises(UnsupportedExtensionError, match="no Zarr v3 equivalent"):
        zarrx.convert(str(tmp_path / "a"), str(tmp_path / "b"), progress=False)


@pytest.mark.parametrize("compressor", sorted(COMPRESSORS))
@pytest.mark.parametrize("order", ["C", "F"])
def test_zarr_python_compressors_and_orders_read_identically(tmp_path, compressor, order):
    theirs = zarr_python_array(tmp_path / "a", "<f8", shape=(7, 5), chunks=(3, 2), order=order,
                               compressors=COMPRESSORS[compressor], fill_value=np.nan)  # fmt: skip
    values = values_for(np.dtype("<f8"), (7, 5))
    theirs[1:6, :4] = values[1:6, :4]
    assert zarray(tmp_path / "a")["order"] == order
    ours = zarrx.open_array(str(tmp_path / "a"))
    assert_values(ours[:], theirs[:])
    assert_values(ours.oindex[[0, 2, 6], [4, 1]], theirs.oindex[[0, 2, 6], [4, 1]])


@pytest.mark.parametrize(
    "dtype, filters",
    [
        ("<i4", [numcodecs.Delta(dtype="<i4")]),
        ("<i8", [numcodecs.Delta(dtype="<i8", astype="<i2")]),
        ("<f8", [numcodecs.FixedScaleOffset(offset=1000, scale=10, dtype="<f8", astype="<i4")]),
        ("<f4", [numcodecs.Quantize(digits=2, dtype="<f4")]),
        ("|b1", [numcodecs.PackBits()]),
        ("<f8", [numcodecs.AsType(encode_dtype="<f4", decode_dtype="<f8")]),
        ("<u2", [numcodecs.Shuffle(elementsize=2), numcodecs.Delta(dtype="<u2")]),
    ],
    ids=["delta", "delta-astype", "fixedscaleoffset", "quantize", "packbits", "astype", "shuffle-delta"],
)
@pytest.mark.parametrize("separator", [".", "/"])
def test_zarr_python_filters_and_separators_read_identically(tmp_path, dtype, filters, separator):
    theirs = zarr_python_array(tmp_path / "a", dtype, shape=(9, 4), chunks=(4, 3), filters=filters,
                               chunk_key_encoding={"name": "v2", "separator": separator})  # fmt: skip
    values = values_for(np.dtype(dtype), (9, 4))
    if dtype == "<i8":
        values = (values % 1000).astype(dtype)
    if dtype == "<f8":
        values = np.round(np.nan_to_num(values, nan=0.0, posinf=0.0, neginf=0.0), 1)
    theirs[:8] = values[:8]
    assert zarray(tmp_path / "a")["dimension_separator"] == separator
    assert (tmp_path / "a" / ("1/0" if separator == "/" else "1.0")).exists()
    assert_values(zarrx.open_array(str(tmp_path / "a"))[:], theirs[:])


def test_zarr_python_null_fill_reads_as_the_default_and_reports_none(tmp_path):
    theirs = zarr_python_array(tmp_path / "a", "<f4", fill_value=None)
    theirs[0, 0] = 5
    assert zarray(tmp_path / "a")["fill_value"] is None
    ours = zarrx.open_array(str(tmp_path / "a"))
    assert ours.fill_value is None and theirs.fill_value is None
    assert_values(ours[:], theirs[:])  # zarr-python reads absent chunks of a null fill as zeros


def test_hand_made_vlen_array_reads_as_object_arrays_of_arrays():
    store = MemoryStore()
    document = {**BASE, "shape": [5], "chunks": [3], "dtype": "|O", "fill_value": None, "order": "C",
                "filters": [{"id": "vlen-array", "dtype": "<i4"}], "compressor": {"id": "zstd", "level": 1}}  # fmt: skip
    store.set(".zarray", json.dumps(document).encode())
    items = np.empty(3, dtype=object)
    items[:] = [np.arange(2, dtype="<i4"), np.arange(0, dtype="<i4"), np.arange(4, dtype="<i4")]
    store.set("0", numcodecs.Zstd(level=1).encode(numcodecs.VLenArray("<i4").encode(items)))
    array = zarrx.open_array(store)
    read = array[:]
    assert read.dtype == object and [list(item) for item in read[:3]] == [[0, 1], [], [0, 1, 2, 3]]
    assert read[3] is None and read[4] is None  # the absent chunk: no fill value for vlen-array
    with pytest.raises(ReadOnlyError, match="vlen-array"):
        zarrx.open_array(store, mode="r+")[0] = np.arange(3)


def test_zarr_python_hierarchy_reads_identically(tmp_path):
    root = zarr.open_group(str(tmp_path / "h"), mode="w", zarr_format=2, attributes={"title": "v2"})
    t2m = root.create_array("weather/t2m", shape=(4, 6), chunks=(2, 3), dtype="<f4", fill_value=np.nan)
    t2m[:3] = np.arange(18, dtype="<f4").reshape(3, 6)
    t2m.attrs.update({"units": "K", "_ARRAY_DIMENSIONS": ["time", "lon"]})
    root.create_group("empty").attrs["note"] = "nothing"
    ours = zarrx.open_group(str(tmp_path / "h"))
    assert ours.metadata.zarr_format == 2 and ours.attrs.asdict() == {"title": "v2"}
    assert sorted(ours) == ["empty", "weather"] and ours["empty"].attrs["note"] == "nothing"
    array = ours["weather/t2m"]
    assert array.dimension_names == ("time", "lon") and array.attrs["units"] == "K"
    assert "_ARRAY_DIMENSIONS" in array.attrs  # kept, as zarr-python and xarray expect
    assert_values(array[:], t2m[:])
    assert "t2m (4, 6) float32" in ours.tree()


def test_zarr_python_consolidated_hierarchy_opens_in_one_request(tmp_path):
    root = zarr.open_group(str(tmp_path / "h"), mode="w", zarr_format=2)
    for name in ("a", "b/c", "b/d"):
        root.create_array(name, shape=(3,), dtype="<i2", fill_value=7)
    zarr.consolidate_metadata(str(tmp_path / "h"))
    root.create_group("late")  # after consolidation: only a live listing sees it
    store = CountingStore(LocalStore(tmp_path / "h", read_only=True))
    ours = zarrx.open_group(store, zarr_format=2)
    assert ours.is_consolidated and store.batches == 1
    assert [key for key, _ in store.requests] == [".zarray", ".zgroup", ".zattrs", ".zmetadata"]
    store.reset()
    assert sorted(ours) == ["a", "b"] and ours["b/d"][:].tolist() == [7, 7, 7]
    assert "c" in ours.tree() and store.requests == [("b/d/0", None)]  # no metadata read, no listing
    store.reset()
    assert zarrx.open_group(store).is_consolidated  # detecting the format first looks for zarr.json
    assert [key for key, _ in store.requests] == ["zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata"]
    live = zarrx.open_group(str(tmp_path / "h"), use_consolidated=False)
    assert not live.is_consolidated and "late" in live


def test_group_listing_reads_children_in_one_batch(tmp_path):
    root = zarr.open_group(str(tmp_path / "h"), mode="w", zarr_format=2)
    for name in ("a", "b", "c"):
        root.create_array(name, shape=(2,), dtype="<i2")
    store = CountingStore(LocalStore(tmp_path / "h"))
    group = zarrx.open_group(store, zarr_format=2)
    store.reset()
    assert group.keys() == ["a", "b", "c"]
    assert store.batches == 1 and len(store.requests) == 9  # .zarray, .zgroup, .zattrs per child


# -- zarrx writes, zarr-python reads --------------------------------------------------------------


@pytest.mark.parametrize("dtype_id", sorted(set(DTYPES) - {"vlen-bytes", "struct"}) + ["bytes"])
def test_zarrx_data_types_open_identically_in_zarr_python(tmp_path, dtype_id):
    dtype = DTYPES[dtype_id][0] if dtype_id != "bytes" else bytes
    # structured: a stated fill value (a null one reads differently, see test_null_structured_fill)
    fill = (7, 1.5, b"z") if dtype_id == "struct-flat" else None
    ours = zarrx.create_array(str(tmp_path / "a"), shape=(5, 3), chunks=(2, 2), dtype=dtype, zarr_format=2,
                              fill_value=fill)  # fmt: skip
    values = values_for(ours.dtype, (5, 3))
    ours[:4] = values[:4]
    theirs = zarr.open_array(str(tmp_path / "a"), mode="r")
    assert native(theirs.dtype) == ours.dtype
    assert_values(ours[:], theirs[:])
    if isinstance(dtype, str) and dtype[0] in "<>|":
        assert zarray(tmp_path / "a")["dtype"] == dtype  # the byte order as given


@pytest.mark.parametrize("compressor", sorted(COMPRESSORS))
def test_zarrx_chunks_are_the_bytes_zarr_python_writes(tmp_path, compressor):
    values = values_for(np.dtype(">i4"), (6, 5))
    kwargs = dict(shape=(6, 5), chunks=(4, 3), dtype=">i4", order="F", fill_value=0,
                  filters=[numcodecs.Delta(dtype=">i4")], compressors=COMPRESSORS[compressor])  # fmt: skip
    ours = zarrx.create_array(str(tmp_path / "ours"), zarr_format=2, **kwargs)
    theirs = zarr.create_array(str(tmp_path / "theirs"), zarr_format=2, **kwargs)
    ours[:] = values
    theirs[:] = values
    assert zarray(tmp_path / "ours") == zarray(tmp_path / "theirs")
    for key in ("0.0", "0.1", "1.0", "1.1"):
        if compressor != "gzip":  # gzip headers carry a timestamp
            assert (tmp_path / "ours" / key).read_bytes() == (tmp_path / "theirs" / key).read_bytes(), key
    assert_values(zarr.open_array(str(tmp_path / "ours"), mode="r")[:], values)
    assert_values(zarrx.open_array(str(tmp_path / "theirs"))[:], values)


def test_zarrx_hierarchy_and_consolidated_metadata_open_in_zarr_python(tmp_path):
    path = str(tmp_path / "h")
    root = zarrx.create_group(path, zarr_format=2, attributes={"title": "x"})
    array = root.create_array("g/temp", shape=(3, 4), chunks=(2, 2), dtype="<f8", dimension_names=["y", "x"],
                              attributes={"units": "K"}, dimension_separator="/", fill_value=np.nan)  # fmt: skip
    array[1:, 1:] = 1.5
    assert array.metadata.zarr_format == 2 and root["g"].metadata.zarr_format == 2
    zarrx.consolidate_metadata(path)
    document = json.loads((tmp_path / "h" / ".zmetadata").read_text())
    assert document["zarr_consolidated_format"] == 1 and "g/temp/.zarray" in document["metadata"]
    for theirs in (zarr.open_consolidated(path, mode="r", zarr_format=2), zarr.open_group(path, mode="r")):
        assert theirs.attrs["title"] == "x"
        temp = theirs["g/temp"]
        assert dict(temp.attrs) == {"units": "K", "_ARRAY_DIMENSIONS": ["y", "x"]}
        assert_values(temp[:], array[:])


def test_attribute_and_shape_changes_rewrite_the_v2_documents(tmp_path):
    path = str(tmp_path / "a")
    array = zarrx.create_array(path, shape=(4,), chunks=(2,), dtype="<i2", zarr_format=2, fill_value=-1)
    array[:] = [1, 2, 3, 4]
    array.attrs["units"] = "m"
    array.append(np.array([5, 6], dtype="<i2"))
    array.resize(3)
    theirs = zarr.open_array(path, mode="r")
    assert theirs.shape == (3,) and theirs.attrs["units"] == "m"
    assert theirs[:].tolist() == [1, 2, 3]
    array.resize(5)
    assert theirs.fill_value == -1 and zarr.open_array(path, mode="r")[:].tolist() == [1, 2, 3, -1, -1]


def test_v2_groups_create_v2_children_and_formats_are_selectable():
    store = MemoryStore()
    root = zarrx.create_group(store, zarr_format=2)
    root.create_array("x", shape=(2,), dtype="int8")
    root.require_group("g").create_group("h")
    assert sorted(k for k in store.list_prefix("") if "zarr.json" in k) == []
    assert set(store.list_prefix("")) >= {".zgroup", "x/.zarray", "g/.zgroup", "g/h/.zgroup"}
    assert zarrx.open(store, zarr_format=2).metadata.zarr_format == 2
    with pytest.raises(NodeNotFoundError, match="zarr.json"):
        zarrx.open(store, zarr_format=3)
    with pytest.raises(ContainsArrayError):
        zarrx.create_array(store, "x/y", shape=(1,), zarr_format=2)
    with pytest.raises(MetadataError, match="zarr_format"):
        zarrx.create_group(store, "z", zarr_format=4)


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"shards": (2,)}, "shards"),
        ({"serializer": {"name": "bytes"}}, "serializer"),
        ({"compressors": [numcodecs.Zlib(), numcodecs.Zstd()]}, "one compressor"),
        ({"chunk_key_encoding": {"name": "default"}}, "chunk_key_encoding"),
        ({"dimension_separator": "-"}, "dimension_separator"),
        ({"order": "K"}, "order"),
        ({"dimension_names": [None]}, "_ARRAY_DIMENSIONS"),
        ({"filters": [{"id": "pickle"}]}, "pickle"),
        ({"dtype": object}, "ambiguous"),
    ],
)
def test_create_v2_refuses_what_v2_cannot_store(kwargs, fragment):
    with pytest.raises(MetadataError, match=fragment):
        zarrx.create_array({}, shape=(4,), zarr_format=2, **kwargs)


def test_both_formats_present_prefers_v3():
    store = MemoryStore()
    zarrx.create_array(store, shape=(2,), dtype="int8", zarr_format=2, fill_value=2)
    zarrx.migrate_v2_to_v3(store)
    assert zarrx.open(store).metadata.zarr_format == 3
    assert zarrx.open(store, zarr_format=2).metadata.zarr_format == 2


def test_dask_reads_v2_arrays(tmp_path):
    theirs = zarr_python_array(tmp_path / "a", ">f8", shape=(10, 10), chunks=(3, 4), order="F")
    theirs[:] = np.arange(100.0).reshape(10, 10)
    x = zarrx.from_zarr(str(tmp_path / "a"))
    assert x.chunks == ((3, 3, 3, 1), (4, 4, 2)) and float(x.sum().compute()) == 4950.0


# -- bounded decoding and bad chunks ----------------------------------------------------------------


def _array_with_chunk(document_changes: dict[str, Any], chunk: bytes) -> zarrx.Array:
    store = MemoryStore()
    document = {**BASE, "shape": [4, 4], "chunks": [4, 4], "dtype": "<i4", "fill_value": 0, "order": "C",
                "compressor": None, **document_changes}  # fmt: skip
    store.set("a/.zarray", json.dumps(document).encode())
    store.set("a/0/0", chunk)
    return zarrx.open_array(store, "a")


@pytest.mark.parametrize(
    "changes, chunk, fragment",
    [
        ({}, b"\x00" * 63, "expected 64 bytes"),
        ({"compressor": {"id": "zlib", "level": 1}}, zlib.compress(b"\x00" * 10**6), "larger than the expected 64"),
        ({"compressor": {"id": "zlib", "level": 1}}, zlib.compress(b"\x00" * 64)[:-3], "zlib"),
        ({"compressor": {"id": "zstd", "level": 1}}, numcodecs.Zstd().encode(b"\x00" * 65), "expected 64"),
        ({"compressor": {"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1}}, b"garbage-blosc-header", "blosc"),
        ({"compressor": {"id": "gzip", "level": 1}}, b"not gzip", "gzip"),
        ({"compressor": {"id": "lz4"}}, numcodecs.LZ4().encode(b"\x00" * 100), "expected 64"),
        ({"filters": [{"id": "delta", "dtype": "<i4", "astype": "<i2"}]}, b"\x00" * 64, "expected 32 bytes"),
        ({"dtype": "|O", "filters": [{"id": "vlen-utf8"}]}, b"\xff\xff\xff\x7f" + b"\x00" * 8, "count of 2147483647"),
        ({"dtype": "|O", "filters": [{"id": "vlen-utf8"}]}, b"\x10\x00\x00\x00" + b"\x00" * 8, "truncated"),
    ],
    ids=["short", "zlib-bomb", "zlib-truncated", "zstd-size", "blosc-garbage", "gzip-garbage", "lz4-size",
         "filter-size", "vlen-count", "vlen-truncated"],
)
def test_corrupt_chunks_are_chunk_decode_errors_naming_the_key(changes, chunk, fragment):
    array = _array_with_chunk(changes, chunk)
    with pytest.raises(ChunkDecodeError, match=fragment) as raised:
        array[...]
    assert "'a/0/0'" in str(raised.value)


def test_compressors_without_a_bounded_decoder_need_a_known_size():
    """numcodecs decodes compressors zarrx has no codec for into a buffer of the expected size;
    when the size is not known (variable-length elements) zarrx refuses rather than let it grow."""
    store = MemoryStore()
    document = {**BASE, "shape": [2], "chunks": [2], "dtype": "|O", "fill_value": "", "order": "C",
                "filters": [{"id": "vlen-utf8"}], "compressor": {"id": "base64"}}  # fmt: skip
    store.set(".zarray", json.dumps(document).encode())
    store.set("0", numcodecs.Base64().encode(numcodecs.VLenUTF8().encode(np.array(["a", "b"], dtype=object))))
    with pytest.raises(ChunkDecodeError, match="cannot bound the output of compressor 'base64'"):
        zarrx.open_array(store)[:]
    document = {**document, "compressor": {"id": "zstd", "level": 1}}
    store.set(".zarray", json.dumps(document).encode())
    store.set("0", numcodecs.Zstd(level=1).encode(numcodecs.VLenUTF8().encode(np.array(["a", "b"], dtype=object))))
    assert zarrx.open_array(store)[:].tolist() == ["a", "b"]  # zstd frames state their size


# -- pickle is never executed ----------------------------------------------------------------------


class _Exploit:
    """Unpickling this runs ``os.system`` to create a marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return os.system, (f"touch {self.marker}",)


@pytest.mark.parametrize("where", ["filters", "compressor", "consolidated"])
def test_a_pickle_payload_in_the_store_is_never_executed(tmp_path, monkeypatch, where):
    marker = tmp_path / "pwned"
    payload = pickle.dumps(np.array([_Exploit(marker)], dtype=object))
    pickle.loads(pickle.dumps(_Exploit(tmp_path / "canary")))  # the payload works when unpickled...
    assert (tmp_path / "canary").exists()
    (tmp_path / "canary").unlink()

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("zarrx unpickled data from the store")

    monkeypatch.setattr(pickle, "loads", refuse)  # ...and zarrx never calls it
    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "Unpickler", refuse)
    root = tmp_path / "store"
    (root / "x").mkdir(parents=True)
    (root / ".zgroup").write_text('{"zarr_format": 2}')
    codec = {"id": "pickle", "protocol": 5}
    document = {**BASE, "shape": [1], "chunks": [1], "dtype": "|O", "fill_value": None, "order": "C",
                "filters": [codec] if where != "compressor" else None,
                "compressor": codec if where == "compressor" else None}  # fmt: skip
    (root / "x" / ".zarray").write_text(json.dumps(document))
    (root / "x" / "0").write_bytes(payload)
    if where == "consolidated":
        metadata = {".zgroup": {"zarr_format": 2}, "x/.zarray": document}
        (root / ".zmetadata").write_text(json.dumps({"zarr_consolidated_format": 1, "metadata": metadata}))
    attempts = [
        lambda: zarrx.open_array(str(root), "x")[...],
        lambda: zarrx.open_group(str(root))["x"][...],
        lambda: list(zarrx.open_group(str(root)).members()),
        lambda: zarrx.from_zarr(str(root), "x").compute(),
    ]
    for attempt in attempts:
        with pytest.raises(UnsupportedExtensionError, match="pickle") as raised:
            attempt()
        assert "x/.zarray" in str(raised.value) and "arbitrary code" in str(raised.value)
    assert not marker.exists()


@pytest.mark.parametrize("codec_id", ["json2", "msgpack2"])
def test_object_codecs_holding_arbitrary_objects_are_refused(codec_id):
    store = MemoryStore()
    document = {**BASE, "shape": [1], "chunks": [1], "dtype": "|O", "filters": [{"id": codec_id}]}
    store.set(".zarray", json.dumps(document).encode())
    with pytest.raises(UnsupportedExtensionError, match=f"'{codec_id}'.*arbitrary Python objects"):
        zarrx.open_array(store)


def test_object_dtype_needs_an_object_codec_and_read_only_stores_refuse_writes():
    with pytest.raises(MetadataError, match="object codec"):
        ArrayMetadataV2.from_json({**BASE, "dtype": "|O"})
    store = {}
    zarrx.create_array(store, shape=(2,), dtype="<i2", zarr_format=2)
    with pytest.raises(ReadOnlyError):
        zarrx.open_array(MemoryStore(store, read_only=True), mode="r")[0] = 1


@pytest.mark.parametrize("root_format, child_format", [(3, 2), (2, 3)])
def test_a_hierarchy_keeps_one_format(root_format, child_format):
    from zarrx.errors import UsageError

    store = MemoryStore()
    zarrx.create_group(store, zarr_format=root_format)
    before = dict(store._data)
    with pytest.raises(UsageError, match=rf"Zarr v{child_format} node at 'a/x': '/' is a Zarr v{root_format} node"):
        zarrx.create_array(store, "a/x", shape=(2,), dtype="int8", zarr_format=child_format)
    assert dict(store._data) == before  # nothing written
    zarrx.create_array(store, "a/x", shape=(2,), dtype="int8", zarr_format=root_format)
    assert zarrx.open_group(store)["a/x"].metadata.zarr_format == root_format
