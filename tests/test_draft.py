"""The 2022 draft layout of Zarr v3 (seeds 001 and 002), read-only.

The fixture writes a hierarchy by hand from the seeds' examples -- the entry point document,
the explicit group with ``spam``/``eggs`` attributes, the ``(10000, 1000)`` ``<f8`` array
with gzip and a ``NaN`` fill value, the datetime extension type with its fallback, the
``/foo/bar`` group and ``/foo/baz`` array of the storage-key tables (so ``/foo`` is an
implicit group) -- plus what zarr-python 2.x's experimental v3 API wrote (its entry point
URI, ``"compressor": {"codec": URI}``, ``"bool"``, filters in ``attributes``), F layout,
the ``.`` separator and a root array. Chunk bytes are made with the compression libraries
directly, in the memory layout the draft describes.
"""

from __future__ import annotations

import gzip
import json
import zlib
from typing import Any

import numcodecs
import numpy as np
import pytest

import zarrx
from zarrx.errors import MetadataError, ReadOnlyError, UnsupportedExtensionError
from zarrx.metadata.draft import DRAFT_FORMAT

from .counting import CountingStore

# seed 002, "Entry point metadata"
ENTRY_POINT = {
    "zarr_format": "https://purl.org/zarr/spec/core/3.0",
    "metadata_encoding": "https://purl.org/zarr/spec/core/3.0",
    "metadata_key_suffix": ".json",
    "extensions": [],
}
# seed 002, "Array metadata": the first example, verbatim
SPEC_ARRAY = {
    "shape": [10000, 1000],
    "data_type": "<f8",
    "chunk_grid": {"type": "regular", "chunk_shape": [1000, 100], "separator": "/"},
    "chunk_memory_layout": "C",
    "codecs": [{"type": "https://purl.org/zarr/spec/codec/gzip/1.0", "configuration": {"level": 1}}],
    "fill_value": "NaN",
    "extensions": [],
    "attributes": {"foo": 42, "bar": "apples", "baz": [1, 2, 3, 4]},
}
# seed 002, the second example: an extension data type with a fallback
DATETIME_ARRAY = {
    **SPEC_ARRAY,
    "shape": [6, 4],
    "chunk_grid": {"type": "regular", "chunk_shape": [4, 2], "separator": "/"},
    "data_type": {"extension": "https://purl.org/zarr/spec/extensions/datetime-dtypes/1.0",
                  "type": "<M8[ns]", "fallback": "<i8"},
    "fill_value": None,
    "attributes": {},
}  # fmt: skip
GZIP = [{"type": "https://purl.org/zarr/spec/codec/gzip/1.0", "configuration": {"level": 1}}]


def document(value: dict[str, Any]) -> bytes:
    return json.dumps(value).encode()


def chunk_bytes(chunk: np.ndarray, order: str = "C") -> bytes:
    """The draft's binary representation: the elements in C or F order, as stored (no codec)."""
    return np.asarray(chunk).tobytes(order=order)


def spec_values() -> np.ndarray:
    return np.arange(1000 * 100, dtype="<f8").reshape(1000, 100) / 7


@pytest.fixture
def draft_store() -> dict[str, bytes]:
    store: dict[str, bytes] = {"zarr.json": document(ENTRY_POINT)}
    # seed 002, "Group metadata" (without the example's trailing comma, which is not JSON)
    store["meta/root.group.json"] = document({"attributes": {"spam": "ham", "eggs": 42}})
    # the storage-key tables: /foo/bar is an explicit group, /foo/baz an array; /foo is implicit
    store["meta/root/foo/bar.group.json"] = document({"attributes": {"kind": "explicit"}})
    store["meta/root/foo/baz.array.json"] = document(SPEC_ARRAY)
    values = spec_values()
    store["data/root/foo/baz/c1/0"] = gzip.compress(chunk_bytes(values), compresslevel=1)
    store["data/root/foo/baz/c9/9"] = gzip.compress(chunk_bytes(-values), compresslevel=1)
    # the datetime example, one chunk stored
    times = (np.arange(8, dtype="<i8") * 10**9).view("<M8[ns]").reshape(4, 2)
    store["meta/root/foo/times.array.json"] = document(DATETIME_ARRAY)
    store["data/root/foo/times/c0/1"] = gzip.compress(chunk_bytes(times))
    # F memory layout, "." separator, big-endian ints, no codec, under the implicit group /deep/er
    layout_f = {
        "shape": [5, 4], "data_type": ">i4", "chunk_memory_layout": "F", "fill_value": -1,
        "chunk_grid": {"type": "regular", "chunk_shape": [3, 2], "separator": "."}, "attributes": {},
    }  # fmt: skip
    store["meta/root/deep/er/f.array.json"] = document(layout_f)
    grid = np.arange(20, dtype=">i4").reshape(5, 4)
    for i in range(2):
        for j in range(2):
            chunk = np.full((3, 2), -1, dtype=">i4")
            part = grid[i * 3 : i * 3 + 3, j * 2 : j * 2 + 2]
            chunk[: part.shape[0], : part.shape[1]] = part
            store[f"data/root/deep/er/f/c{i}.{j}"] = chunk_bytes(chunk, "F")
    return store


@pytest.fixture
def zarr_python_2_store() -> dict[str, bytes]:
    """What zarr-python 2.x's experimental v3 API wrote (its Metadata3 encoding)."""
    store = {
        "zarr.json": document({
            "zarr_format": "https://purl.org/zarr/spec/protocol/core/3.0",
            "metadata_encoding": "https://purl.org/zarr/spec/protocol/core/3.0",
            "metadata_key_suffix": ".json",
            "extensions": [],
        }),
        "meta/root/arthur/dent.array.json": document({
            "shape": [5, 10], "data_type": "<i4",
            "chunk_grid": {"type": "regular", "chunk_shape": [2, 5], "separator": "/"},
            "chunk_memory_layout": "C", "fill_value": 0, "extensions": [],
            "compressor": {"codec": "https://purl.org/zarr/spec/codec/blosc/1.0",
                           "configuration": {"cname": "lz4", "clevel": 5, "shuffle": 1, "blocksize": 0}},
            "attributes": {"question": "life", "answer": 42, "filters": [{"id": "delta", "dtype": "<i4"}]},
            "dimension_separator": "/",
        }),
        "meta/root/flags.array.json": document({
            "shape": [6], "data_type": "bool", "chunk_grid": {"type": "regular", "chunk_shape": [4], "separator": "/"},
            "chunk_memory_layout": "C", "fill_value": True, "extensions": [], "attributes": {},
            "compressor": {"codec": "https://purl.org/zarr/spec/codec/zlib/1.0", "configuration": {"level": 1}},
        }),
    }  # fmt: skip
    dent = np.arange(50, dtype="<i4").reshape(5, 10)
    delta, blosc = numcodecs.Delta(dtype="<i4"), numcodecs.Blosc(cname="lz4", clevel=5, shuffle=1)
    for i in range(3):
        for j in range(2):
            chunk = np.zeros((2, 5), dtype="<i4")
            part = dent[i * 2 : i * 2 + 2, j * 5 : j * 5 + 5]
            chunk[: part.shape[0]] = part
            store[f"data/root/arthur/dent/c{i}/{j}"] = blosc.encode(delta.encode(chunk))
    store["data/root/flags/c0"] = zlib.compress(np.array([1, 0, 1, 0], dtype="u1").tobytes())
    return store


def test_the_seed_hierarchy_opens_with_its_groups(draft_store):
    root = zarrx.open(draft_store)
    assert root.zarr_format == DRAFT_FORMAT and root.read_only
    assert root.attrs.asdict() == {"spam": "ham", "eggs": 42}
    assert sorted(root) == ["deep", "foo"]
    foo = root["foo"]
    assert foo.attrs.asdict() == {} and not foo.metadata.explicit  # implicit: no document, things below it
    assert sorted(foo) == ["bar", "baz", "times"]
    assert foo["bar"].attrs["kind"] == "explicit" and foo["bar"].metadata.explicit
    assert sorted(root["deep"]) == ["er"] and sorted(root["deep/er"]) == ["f"]
    assert "baz (10000, 1000) float64 chunks=(1000, 100)" in root.tree()
    assert "no array or group" in str(pytest.raises(KeyError, lambda: root["nothing"]).value)


def test_the_seed_array_example_reads(draft_store):
    array = zarrx.open_array(draft_store, "foo/baz")
    assert array.shape == (10000, 1000) and array.chunks == (1000, 100) and array.dtype == np.float64
    assert np.isnan(array.fill_value)
    assert array.attrs.asdict() == {"foo": 42, "bar": "apples", "baz": [1, 2, 3, 4]}
    values = spec_values()
    np.testing.assert_array_equal(array[1000:2000, :100], values)
    np.testing.assert_array_equal(array[9500:9510, 950:960], -values[500:510, 50:60])
    assert np.isnan(array[:1000, :100]).all()  # an absent chunk reads as the fill value
    np.testing.assert_array_equal(array[999:1001, 99], [np.nan, values[0, 99]])


def test_chunk_keys_follow_the_draft_storage_keys(draft_store):
    store = CountingStore(zarrx.storage.MemoryStore(draft_store))
    array = zarrx.open_array(store, "foo/baz")
    store.reset()
    array[1500, 50]
    assert store.requests == [("data/root/foo/baz/c1/0", None)]
    assert array.nchunks_initialized == 2 and array.nbytes_stored > 0


def test_extension_data_type_f_layout_and_dot_separator(draft_store):
    times = zarrx.open_array(draft_store, "foo/times")
    assert times.dtype == np.dtype("M8[ns]") and times.fill_value is None
    expected = np.full((6, 4), np.datetime64("NaT"), dtype="M8[ns]")  # null fill: the type's default, NaT
    expected[:4, 2:] = (np.arange(8, dtype="<i8") * 10**9).view("M8[ns]").reshape(4, 2)
    np.testing.assert_array_equal(times[:], expected)
    f = zarrx.open_array(draft_store, "deep/er/f")
    assert f.metadata.chunk_key((1, 0)) == "c1.0"
    np.testing.assert_array_equal(f[:], np.arange(20, dtype="int32").reshape(5, 4))


def test_zarr_python_2_experimental_layout_reads(zarr_python_2_store):
    root = zarrx.open_group(zarr_python_2_store)
    assert sorted(root) == ["arthur", "flags"]
    dent = root["arthur/dent"]
    assert dent.attrs.asdict() == {"question": "life", "answer": 42}  # its filters live in attributes
    np.testing.assert_array_equal(dent[:], np.arange(50, dtype="int32").reshape(5, 10))
    flags = zarrx.open_array(zarr_python_2_store, "flags")
    assert flags.dtype == np.bool_ and flags[:].tolist() == [True, False, True, False, True, True]


def test_a_root_array():
    store = {
        "zarr.json": document(ENTRY_POINT),
        "meta/root.array.json": document({**SPEC_ARRAY, "shape": [3], "chunk_grid": {"type": "regular", "chunk_shape": [2]},
                                          "fill_value": 9.5, "codecs": [], "attributes": {}}),
        "data/root/c1": chunk_bytes(np.array([4.0, 5.0])),
    }  # fmt: skip
    array = zarrx.open(store)
    assert isinstance(array, zarrx.Array) and array[:].tolist() == [9.5, 9.5, 4.0]


def test_writes_are_refused(draft_store):
    root = zarrx.open_group(draft_store, mode="r+")
    array = root["foo/baz"]
    attempts = {
        "group attrs": lambda: root.attrs.update(x=1),
        "array attrs": lambda: array.attrs.update(x=1),
        "array data": lambda: array.__setitem__((0, 0), 1.0),
        "resize": lambda: array.resize(5, 5),
        "create array": lambda: root.create_array("new", shape=(1,)),
        "create group": lambda: root["foo"].create_group("new"),
        "delete": lambda: root.__delitem__("foo"),
        "create through the api": lambda: zarrx.create_array(draft_store, "foo/new", shape=(1,)),
        "consolidate": lambda: zarrx.consolidate_metadata(draft_store),
    }
    for name, attempt in attempts.items():
        with pytest.raises(ReadOnlyError, match="2022 draft layout") as raised:
            attempt()
        assert "zarrx.convert" in str(raised.value), name
    assert "data/root/foo/baz/c0/0" not in draft_store and "meta/root/new.array.json" not in draft_store


@pytest.mark.parametrize(
    "key, change, error, fragment",
    [
        ("zarr.json", {"extensions": [{"extension": "https://example.org/x", "must_understand": True}]},
         UnsupportedExtensionError, "extensions[0]"),
        ("meta/root/foo/baz.array.json", {"codecs": [{"type": "https://example.org/codec/magic/1.0"}]},
         UnsupportedExtensionError, "codecs[0]"),
        ("meta/root/foo/baz.array.json", {"storage_transformers": [{"extension": "x", "type": "sharding"}]},
         UnsupportedExtensionError, "storage_transformers"),
        ("meta/root/foo/baz.array.json", {"chunk_memory_layout": "Z"}, UnsupportedExtensionError, "chunk_memory_layout"),
        ("meta/root/foo/baz.array.json", {"data_type": "<q9"}, MetadataError, "data_type"),
        ("meta/root/foo/baz.array.json", {"fill_value": "apple"}, MetadataError, "fill_value"),
        ("meta/root/foo/baz.array.json",  # a chunk of 2**80 elements is refused before anything allocates
         {"shape": [2**40, 2**40], "chunk_grid": {"type": "regular", "chunk_shape": [2**40, 2**40]}},
         MetadataError, "chunk_grid"),
    ],
)
def test_bad_draft_metadata_names_key_and_field(draft_store, key, change, error, fragment):
    draft_store[key] = document({**json.loads(draft_store[key]), **change})
    with pytest.raises(error) as raised:
        zarrx.open_array(draft_store, "foo/baz")
    assert key in str(raised.value) and fragment in str(raised.value)


def test_hex_fill_values_and_zarr_format_3_refusal(draft_store):
    draft_store["meta/root/foo/baz.array.json"] = document({**SPEC_ARRAY, "fill_value": "0x7ff0000000000000"})
    assert zarrx.open_array(draft_store, "foo/baz")[0, 0] == np.inf
    with pytest.raises(MetadataError, match="2022 draft layout"):
        zarrx.open(draft_store, zarr_format=3)


def test_dask_reads_draft_arrays(draft_store):
    x = zarrx.from_zarr(draft_store, "deep/er/f")
    assert int(x.sum().compute()) == sum(range(20))
