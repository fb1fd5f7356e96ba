"""zarr.json documents: the spec's examples, round trips, extension rules and errors naming the field."""

import copy
import json

import numpy as np
import pytest

from zarrx.errors import MetadataError, UnknownCodecError, UnsupportedExtensionError
from zarrx.metadata.chunk_grid import RegularChunkGrid
from zarrx.metadata.chunk_key_encoding import (
    DefaultChunkKeyEncoding,
    V2ChunkKeyEncoding,
    parse_chunk_key_encoding,
)
from zarrx.metadata.node import ArrayMetadata, GroupMetadata, parse_node_metadata

# The core spec's array example ("Array metadata", "Example").
SPEC_ARRAY = {
    "zarr_format": 3,
    "node_type": "array",
    "shape": [10000, 1000],
    "dimension_names": ["rows", "columns"],
    "data_type": "float64",
    "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [1000, 100]}},
    "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
    "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
    "fill_value": "NaN",
    "attributes": {"foo": 42, "bar": "apples", "baz": [1, 2, 3, 4]},
}

# The core spec's group example.
SPEC_GROUP = {"zarr_format": 3, "node_type": "group", "attributes": {"spam": "ham", "eggs": 42}}

KEY = "foo/zarr.json"


def parse(document):
    return parse_node_metadata(json.dumps(document).encode(), KEY)


def test_spec_array_example():
    metadata = parse(SPEC_ARRAY)
    assert isinstance(metadata, ArrayMetadata)
    assert metadata.shape == (10000, 1000)
    assert metadata.chunks == (1000, 100)
    assert metadata.dtype == np.float64
    assert np.isnan(metadata.fill_value)
    assert metadata.dimension_names == ("rows", "columns")
    assert metadata.nchunks == 100
    assert metadata.chunk_key((1, 0)) == "c/1/0"
    assert metadata.to_json() == SPEC_ARRAY


def test_spec_group_example():
    metadata = parse(SPEC_GROUP)
    assert isinstance(metadata, GroupMetadata)
    assert metadata.attributes == {"spam": "ham", "eggs": 42}
    assert metadata.to_json() == SPEC_GROUP


def test_spec_extension_example_with_string_type():
    document = {
        "zarr_format": 3,
        "node_type": "array",
        "data_type": "string",
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "."}},
        "codecs": [{"name": "vlen-utf8"}, {"name": "zstd", "configuration": {"level": 1}}],
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [32]}},
        "shape": [128],
        "dimension_names": ["x"],
        "fill_value": "",
        "attributes": {},
    }
    metadata = parse(document)
    assert metadata.chunk_key((3,)) == "c.3"
    assert parse(metadata.to_json()).to_json() == metadata.to_json()


def test_group_without_attributes_round_trips_with_empty_attributes():
    metadata = parse({"zarr_format": 3, "node_type": "group"})
    assert metadata.attributes == {}


@pytest.mark.parametrize(
    "value, encoding, key",
    [
        ({"name": "default"}, DefaultChunkKeyEncoding("/"), "c/1/23/45"),
        ({"name": "default", "configuration": {"separator": "."}}, DefaultChunkKeyEncoding("."), "c.1.23.45"),
        ({"name": "v2"}, V2ChunkKeyEncoding("."), "1.23.45"),
        ({"name": "v2", "configuration": {"separator": "/"}}, V2ChunkKeyEncoding("/"), "1/23/45"),
        ("default", DefaultChunkKeyEncoding("/"), "c/1/23/45"),
    ],
)
def test_chunk_key_encodings_from_spec(value, encoding, key):
    parsed = parse_chunk_key_encoding(value)
    assert parsed == encoding
    assert parsed.encode((1, 23, 45)) == key
    assert parsed.decode(key) == (1, 23, 45)


def test_chunk_keys_of_0d_arrays():
    assert DefaultChunkKeyEncoding().encode(()) == "c"
    assert V2ChunkKeyEncoding().encode(()) == "0"
    assert DefaultChunkKeyEncoding().decode("c") == ()


def test_chunk_key_encoding_short_form_for_users():
    assert parse_chunk_key_encoding({"name": "v2", "separator": "/"}, allow_short_form=True) == V2ChunkKeyEncoding("/")
    with pytest.raises(MetadataError):
        parse_chunk_key_encoding({"name": "v2", "separator": "/"})


def test_regular_grid():
    grid = RegularChunkGrid.from_json({"name": "regular", "configuration": {"chunk_shape": [2, 5]}})
    assert grid.grid_shape((5, 10)) == (3, 2)
    assert grid.to_json() == {"name": "regular", "configuration": {"chunk_shape": [2, 5]}}


def mutated(path, value):
    document = copy.deepcopy(SPEC_ARRAY)
    target = document
    for part in path[:-1]:
        target = target[part]
    if value is DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return document


DELETE = object()


@pytest.mark.parametrize(
    "path, value, field",
    [
        (("zarr_format",), 4, "zarr_format"),
        (("zarr_format",), 2, "zarr_format"),
        (("zarr_format",), DELETE, "zarr_format"),
        (("node_type",), "folder", "node_type"),
        (("shape",), [-1, 10], "shape"),
        (("shape",), "10", "shape"),
        (("shape",), [10.5, 3], "shape"),
        (("shape",), DELETE, "shape"),
        (("chunk_grid", "configuration", "chunk_shape"), [10], "chunk_shape"),
        (("chunk_grid", "configuration", "chunk_shape"), [0, 10], "chunk_shape"),
        (("chunk_grid", "configuration"), {}, "chunk_shape"),
        (("chunk_key_encoding", "configuration", "separator"), "-", "separator"),
        (("fill_value",), "nope", "fill_value"),
        (("fill_value",), DELETE, "fill_value"),
        (("codecs",), [], "codecs"),
        (("codecs",), [{"name": "gzip", "configuration": {"level": 1}}], "codecs"),
        (("dimension_names",), ["x"], "dimension_names"),
        (("dimension_names",), [1, 2], "dimension_names"),
        (("attributes",), [1], "attributes"),
        (("data_type",), 7, "data_type"),
    ],
)
def test_invalid_fields_name_field_and_key(path, value, field):
    with pytest.raises(MetadataError) as info:
        parse(mutated(path, value))
    assert KEY in str(info.value)
    assert field in str(info.value)


@pytest.mark.parametrize(
    "path, value, error",
    [
        (("data_type",), "float128", UnsupportedExtensionError),
        (("chunk_grid",), {"name": "irregular", "configuration": {}}, UnsupportedExtensionError),
        (("chunk_key_encoding",), {"name": "fancy"}, UnsupportedExtensionError),
        (("codecs",), [{"name": "bytes"}, {"name": "magic-codec"}], UnknownCodecError),
        (("storage_transformers",), [{"name": "sharding-of-the-future"}], UnsupportedExtensionError),
        (("new_required_field",), {"name": "x"}, UnsupportedExtensionError),
        (("new_required_field",), 5, UnsupportedExtensionError),
    ],
)
def test_unknown_required_extensions_refuse_to_open(path, value, error):
    with pytest.raises(error) as info:
        parse(mutated(path, value))
    assert KEY in str(info.value)


def test_optional_extensions_are_ignored_and_kept():
    document = mutated(("storage_transformers",), [{"name": "cache-hint", "must_understand": False}])
    document["my_extension"] = {"must_understand": False, "anything": [1, 2]}
    document["codecs"] = [
        {"name": "bytes", "configuration": {"endian": "little"}},
        {"name": "fancy-optional", "must_understand": False},
    ]
    metadata = parse(document)
    assert [c["name"] for c in metadata.codecs.to_json()] == ["bytes"]
    written = metadata.to_json()
    assert written["my_extension"] == document["my_extension"]
    assert written["storage_transformers"] == document["storage_transformers"]


@pytest.mark.parametrize("raw", [b"", b"{", b"[1, 2]", b"\xff\xfe", b'"array"', b"null"])
def test_undecodable_documents(raw):
    with pytest.raises(MetadataError, match=KEY):
        parse_node_metadata(raw, KEY)


def test_consolidated_metadata_round_trip():
    document = dict(SPEC_GROUP)
    document["consolidated_metadata"] = {"kind": "inline", "must_understand": False, "metadata": {"a": SPEC_ARRAY}}
    metadata = parse(document)
    assert metadata.consolidated_metadata.metadata["a"] == SPEC_ARRAY
    assert metadata.to_json() == document
