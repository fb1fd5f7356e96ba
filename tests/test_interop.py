"""Interoperability with zarr-python 3 and tensorstore, on local disk.

The rule: an array of any data type and codec chain written by zarr-python or by
tensorstore reads identically in zarrx (values, ``dtype``, ``fill_value``,
``chunks``, ``dimension_names``, attributes), and an array written by zarrx opens
identically in both. The matrix is data types x codec chains x shapes (edge
chunks, 0-d, zero-length), plus chunk key encodings, fill values, groups,
consolidated metadata, and byte-level agreement where the spec makes the bytes
deterministic.

Codec chains are spec JSON: zarrx and tensorstore take it as is, zarr-python as
its ``zarr.codecs`` objects. Every write leaves some chunks absent and others
partly written, so fill values are also read back from the store's gaps, not
only from the metadata.

When another implementation departs from the accepted spec, zarrx follows the
spec (project rule) and a test asserts the departure and says why: see the
"Disagreements" section at the end.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest
import tensorstore as ts
import zarr
from zarr.core.dtype import VariableLengthBytes
from zarr.registry import get_codec_class

import zarrx
from zarrx.codecs import codec_from_json
from zarrx.dtypes import resolve_data_type
from zarrx.errors import MetadataError, UnsupportedExtensionError

from .conftest import DTYPES, assert_same, sample_values

pytestmark = [
    pytest.mark.filterwarnings("ignore::zarr.errors.UnstableSpecificationWarning"),
    pytest.mark.filterwarnings("ignore::zarr.errors.ZarrUserWarning"),  # "consolidated metadata is not in the spec"
    pytest.mark.filterwarnings("ignore::FutureWarning"),
]


# -- case tables ------------------------------------------------------------------------------


class DataTypeCase(NamedTuple):
    numpy: Any  # the in-memory NumPy dtype every library should report
    zarr_python: Any  # dtype argument for zarr.create_array
    zarrx: Any  # dtype argument for zarrx.create_array
    fill_value: Any  # a non-default fill value


STRUCT = np.dtype([("x", "<f4"), ("n", "<i2"), ("tag", "S3")])
RAW_BYTES = {"name": "raw_bytes", "configuration": {"length_bytes": 3}}  # zarr-python's name for V3

#: every data type zarr-python 3.1 writes, and zarrx's name for the same type
DATA_TYPES = {
    "bool": DataTypeCase("bool", "bool", "bool", True),
    "int8": DataTypeCase("int8", "int8", "int8", -7),
    "int16": DataTypeCase("int16", "int16", "int16", -32768),
    "int32": DataTypeCase("int32", "int32", "int32", 2**31 - 1),
    "int64": DataTypeCase("int64", "int64", "int64", -(2**63)),
    "uint8": DataTypeCase("uint8", "uint8", "uint8", 255),
    "uint16": DataTypeCase("uint16", "uint16", "uint16", 7),
    "uint32": DataTypeCase("uint32", "uint32", "uint32", 2**32 - 1),
    "uint64": DataTypeCase("uint64", "uint64", "uint64", 2**64 - 1),
    "float16": DataTypeCase("float16", "float16", "float16", -0.0),
    "float32": DataTypeCase("float32", "float32", "float32", np.nan),
    "float64": DataTypeCase("float64", "float64", "float64", -np.inf),
    "complex64": DataTypeCase("complex64", "complex64", "complex64", complex(np.nan, 1.5)),
    "complex128": DataTypeCase("complex128", "complex128", "complex128", complex(-2.5, np.inf)),
    "string": DataTypeCase(np.dtypes.StringDType(), str, "string", "fill"),
    "bytes": DataTypeCase(np.dtype(object), VariableLengthBytes(), "bytes", b"\x00xy"),
    "fixed_length_utf32": DataTypeCase("<U5", "<U5", "<U5", "aé日"),
    "null_terminated_bytes": DataTypeCase("S4", "S4", "S4", b"ab"),
    "raw_bytes": DataTypeCase("V3", "V3", RAW_BYTES, b"\x01\x02\xff"),
    "datetime64": DataTypeCase("M8[ns]", "M8[ns]", "M8[ns]", 1_700_000_000_000_000_000),
    "datetime64[10s]": DataTypeCase("M8[10s]", "M8[10s]", "M8[10s]", 123),
    "datetime64[D]": DataTypeCase("M8[D]", "M8[D]", "M8[D]", -5),
    "timedelta64": DataTypeCase("m8[10s]", "m8[10s]", "m8[10s]", 17),
    "timedelta64[ms]": DataTypeCase("m8[ms]", "m8[ms]", "m8[ms]", -(2**40)),
    "timedelta64[25us]": DataTypeCase("m8[25us]", "m8[25us]", "m8[25us]", 4),
    "struct": DataTypeCase(STRUCT, STRUCT, STRUCT, (1.5, -2, b"ab")),
}
#: zarrx writes "struct" as the accepted spec says; zarr-python 3.1 reads only "structured"
#: (test_zarr_python_cannot_read_spec_struct_or_raw_bits)
ZARRX_TO_ZARR_PYTHON = {name: case for name, case in DATA_TYPES.items() if name != "struct"}
#: tensorstore's zarr3 data types that zarrx also knows (tensorstore has no string, time or struct types)
TENSORSTORE_DATA_TYPES = {name: DATA_TYPES[name] for name in [
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "complex64", "complex128",
]}  # fmt: skip
#: tensorstore's other zarr3 data types (bfloat16, int2/int4, float8...) are in tests/test_ml_dtypes.py

BYTES_LITTLE = {"name": "bytes", "configuration": {"endian": "little"}}
BYTES_BIG = {"name": "bytes", "configuration": {"endian": "big"}}
GZIP = {"name": "gzip", "configuration": {"level": 5}}
CRC32C = {"name": "crc32c"}
TRANSPOSE = {"name": "transpose"}  # the order is filled in for the array's rank by _codec_kwargs


def _blosc(cname: str, shuffle: str) -> dict[str, Any]:
    return {"name": "blosc", "configuration": {"cname": cname, "clevel": 5, "shuffle": shuffle}}


#: create_array's filters / serializer / compressors as spec JSON; a missing key is the library default
CODEC_CHAINS: dict[str, dict[str, Any]] = {
    "default": {},
    "uncompressed": {"compressors": None},
    "gzip": {"compressors": [GZIP]},
    "blosc-lz4-shuffle": {"compressors": [_blosc("lz4", "shuffle")]},
    "blosc-zstd-bitshuffle": {"compressors": [_blosc("zstd", "bitshuffle")]},
    "blosc-blosclz-noshuffle": {"compressors": [_blosc("blosclz", "noshuffle")]},
    "zstd-checksum": {"compressors": [{"name": "zstd", "configuration": {"level": 3, "checksum": True}}]},
    "crc32c": {"compressors": [CRC32C]},
    "gzip-crc32c": {"compressors": [GZIP, CRC32C]},
    "big-endian": {"serializer": BYTES_BIG, "compressors": None},
    "transpose": {"filters": [TRANSPOSE], "compressors": [GZIP]},
    "transpose-big-endian-crc32c": {"filters": [TRANSPOSE], "serializer": BYTES_BIG, "compressors": [CRC32C]},
}
#: chains whose output the spec fixes byte for byte (no compressor with choices of its own)
DETERMINISTIC_CHAINS = ["uncompressed", "big-endian", "crc32c", "transpose-big-endian-crc32c"]
#: tensorstore's own default (no "codecs") last, so the non-2-d shapes use "uncompressed": for
#: some shapes (zero-length) tensorstore's default is sharding_indexed, out of scope here
TENSORSTORE_CHAINS = [*(chain for chain in CODEC_CHAINS if chain != "default"), "default"]


class ShapeCase(NamedTuple):
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    written: Any  # the selection written; the rest stays fill value, partly in absent chunks


SHAPES = {
    "2-d": ShapeCase((5, 7), (2, 3), np.s_[0:4, 1:7]),
    "0-d": ShapeCase((), (), ()),
    "1-d": ShapeCase((7,), (3,), np.s_[0:4]),
    "3-d": ShapeCase((4, 3, 5), (3, 2, 2), np.s_[1:4, :, 0:3]),
    "single-chunk": ShapeCase((3, 2), (4, 4), np.s_[0:2, :]),
    "zero-length": ShapeCase((0, 4), (2, 2), np.s_[0:0]),
    "many-chunks": ShapeCase((40, 50), (7, 6), np.s_[3:33, 5:]),  # 54 chunks: the batched, threaded paths
}

#: the short form zarr-python and zarrx take; None is the default encoding
CHUNK_KEY_ENCODINGS = {
    "default": None,
    "default-dot": {"name": "default", "separator": "."},
    "v2-dot": {"name": "v2", "separator": "."},
    "v2-slash": {"name": "v2", "separator": "/"},
}


def _applies(data_type: str, chain: str, ndim: int) -> bool:
    codecs = CODEC_CHAINS[chain]
    if "serializer" in codecs and data_type in ("string", "bytes"):
        return False  # the bytes codec needs fixed-size elements
    return "filters" not in codecs or ndim >= 2


def _matrix(data_types: dict[str, DataTypeCase], chains: list[str], exclude: Any = ()) -> list[Any]:
    """Every data type with every chain on the 2-d shape (non-default fill value), every data
    type on every other shape with the first chain (default fill value), and the transpose
    chains on the 3-d shape; less the ``(data_type, chain)`` pairs in ``exclude``."""
    params = []
    for name in data_types:
        for chain in chains:
            if _applies(name, chain, 2) and (name, chain) not in exclude:
                params.append(pytest.param(name, chain, "2-d", True, id=f"{name}-{chain}-2-d"))
        for shape in SHAPES:
            if shape != "2-d":
                params.append(pytest.param(name, chains[0], shape, False, id=f"{name}-{chains[0]}-{shape}"))
        for chain in ("transpose", "transpose-big-endian-crc32c"):
            if chain in chains and _applies(name, chain, 3) and (name, chain) not in exclude:
                params.append(pytest.param(name, chain, "3-d", True, id=f"{name}-{chain}-3-d"))
    return params


MATRIX = ("data_type", "chain", "shape", "non_default_fill")


# -- helpers ------------------------------------------------------------------------------------


def _codec_kwargs(chain: str, ndim: int) -> dict[str, Any]:
    kwargs = dict(CODEC_CHAINS[chain])
    if "filters" in kwargs:
        # a rotation, not a reversal: for ndim > 2 its inverse differs from it, so a codec that
        # applied the order where the inverse belongs is caught
        order = [*range(1, ndim), 0]
        transpose = {"name": "transpose", "configuration": {"order": order}}
        kwargs["filters"] = [transpose if codec is TRANSPOSE else codec for codec in kwargs["filters"]]
    return kwargs


def _scalar(value: Any, dtype: Any) -> np.ndarray:
    """``value`` as a 0-d array of ``dtype``, to compare fill values with assert_same."""
    if isinstance(value, np.ndarray):
        value = value[()]
    return np.array(value, dtype=dtype)


def _fill_for(case: DataTypeCase, non_default: bool) -> Any:
    return _scalar(case.fill_value, case.numpy)[()] if non_default else None


def _fill_json(case: DataTypeCase, non_default: bool) -> Any:
    """The fill value as spec JSON, for tensorstore's metadata."""
    if not non_default:
        return None
    return resolve_data_type(case.zarrx).fill_value_to_json(_fill_for(case, True))


def _values(name: str, case: DataTypeCase, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return sample_values(name, np.dtype(case.numpy), shape, seed=len(name) + seed)


def _expected(values: np.ndarray, fill_value: Any, written: Any) -> np.ndarray:
    expected = np.full(values.shape, _scalar(fill_value, values.dtype), dtype=values.dtype)
    expected[written] = values[written]
    return expected


def _dimension_names(ndim: int) -> list[str | None] | None:
    return {0: None, 1: ["t"], 2: ["t", "y"], 3: ["z", None, "x"]}[ndim]


def _attributes(case_id: str) -> dict[str, Any]:
    return {"case": case_id, "nested": {"list": [1, 2.5, None, True], "text": "ünïcode"}}


def _native_dtype(dtype: np.dtype) -> np.dtype:
    """``dtype`` in native byte order, zarrx's in-memory rule (fields too)."""
    return dtype if dtype.kind in "OT" or dtype.isnative else dtype.newbyteorder("=")


def _native(array: np.ndarray) -> np.ndarray:
    return array.astype(_native_dtype(array.dtype), copy=False)


def _zarr_python_read(array: zarr.Array) -> np.ndarray:
    """The whole array as zarr-python reads it, in native byte order. zarr-python 3.1 returns
    values in the stored byte order, and for a 0-d array a scalar (or, for variable-length
    bytes, an ``S<n>`` array): those become a 0-d array of zarr-python's own dtype."""
    values = array[...]
    if np.ndim(values) == 0:
        values = np.array(np.asarray(values)[()], dtype=array.dtype)
    return _native(values)


def _chunk_files(path: Path) -> list[str]:
    return sorted(p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file() and p.name != "zarr.json")


def _as_codec_objects(kwargs: dict[str, Any], from_json: Any) -> dict[str, Any]:
    """The codec keywords with each JSON codec made an object by ``from_json``."""
    return {
        key: value if value is None else from_json(value) if isinstance(value, dict) else [from_json(v) for v in value]
        for key, value in kwargs.items()
    }


def _zarr_python_codec(codec_json: dict[str, Any]) -> Any:
    return get_codec_class(codec_json["name"]).from_dict(codec_json)  # a zarr.codecs class


def _zarrx_codec(codec_json: dict[str, Any]) -> Any:
    return codec_from_json(codec_json, "codecs")


def _write_zarr_python(path: Path, case: DataTypeCase, chain: str, shape: ShapeCase, fill: Any, **extra: Any):
    fill_kwargs = {} if fill is None else {"fill_value": fill}  # zarr-python: None is not "default"
    codecs = _as_codec_objects(_codec_kwargs(chain, len(shape.shape)), _zarr_python_codec)
    return zarr.create_array(
        str(path), shape=shape.shape, chunks=shape.chunks, dtype=case.zarr_python, **fill_kwargs, **codecs, **extra,
    )  # fmt: skip


def _write_zarrx(
    path: Path, case: DataTypeCase, chain: str, shape: ShapeCase, fill: Any, *, codec_objects: bool = False, **extra: Any
):
    """zarrx.create_array with the chain's codecs as JSON dicts, or as zarrx codec objects."""
    codecs = _codec_kwargs(chain, len(shape.shape))
    if codec_objects:
        codecs = _as_codec_objects(codecs, _zarrx_codec)
    return zarrx.create_array(
        str(path), shape=shape.shape, chunks=shape.chunks, dtype=case.zarrx, fill_value=fill, **codecs, **extra,
    )  # fmt: skip


def _tensorstore_metadata(data_type: str, chain: str, shape: ShapeCase, fill_json: Any, **extra: Any) -> dict[str, Any]:
    ndim = len(shape.shape)
    metadata: dict[str, Any] = {
        "shape": list(shape.shape),
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(shape.chunks)}},
        "data_type": data_type,
        **extra,
    }
    if chain != "default":
        kwargs = _codec_kwargs(chain, ndim)
        serializer = kwargs.get("serializer", BYTES_LITTLE)
        metadata["codecs"] = [*kwargs.get("filters", []), serializer, *(kwargs.get("compressors") or [])]
    if fill_json is not None:
        metadata["fill_value"] = fill_json
    if _dimension_names(ndim) is not None:
        metadata["dimension_names"] = _dimension_names(ndim)
    return metadata


def _create_tensorstore(path: Path, metadata: dict[str, Any]) -> ts.TensorStore:
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}, "metadata": metadata}
    return ts.open(spec, create=True).result()


def _open_tensorstore(path: Path) -> ts.TensorStore:
    return ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}}).result()


def _spec_name(dtype: Any) -> str:
    json_form = resolve_data_type(dtype).to_json()
    return json_form["name"] if isinstance(json_form, dict) else json_form


def test_matrix_covers_every_zarrx_data_type():
    """Each data type zarrx supports (conftest.DTYPES) is in the matrix but ``r24``, which only
    zarrx writes (zarr-python writes ``raw_bytes``); see the Disagreements tests for it."""
    covered = {_spec_name(case.zarrx) for case in DATA_TYPES.values()}
    assert {_spec_name(dtype) for dtype in DTYPES.values()} - covered == {"r24"}


# -- 1. zarr-python -> zarrx --------------------------------------------------------------------

#: zarr-python 3.1 writes variable-length elements behind a transpose in the unpermuted order:
#: test_zarr_python_writes_variable_length_chunks_untransposed
ZARR_PYTHON_TRANSPOSED_VARIABLE_LENGTH = {
    (name, chain) for name in ("string", "bytes") for chain in CODEC_CHAINS if "filters" in CODEC_CHAINS[chain]
}


@pytest.mark.parametrize(MATRIX, _matrix(DATA_TYPES, list(CODEC_CHAINS), ZARR_PYTHON_TRANSPOSED_VARIABLE_LENGTH))
def test_zarr_python_to_zarrx(tmp_path, data_type, chain, shape, non_default_fill):
    case, shape_case = DATA_TYPES[data_type], SHAPES[shape]
    fill = _fill_for(case, non_default_fill)
    names = _dimension_names(len(shape_case.shape))
    attributes = _attributes(f"{data_type}-{chain}-{shape}")
    source = _write_zarr_python(
        tmp_path / "a", case, chain, shape_case, fill, dimension_names=names, attributes=attributes
    )
    values = _values(data_type, case, shape_case.shape)
    source[shape_case.written] = values[shape_case.written]
    if fill is not None:
        assert_same(_scalar(source.fill_value, case.numpy), _scalar(fill, case.numpy))

    array = zarrx.open_array(str(tmp_path / "a"))

    assert array.dtype == np.dtype(case.numpy)
    assert_same(_scalar(array.fill_value, case.numpy), _scalar(source.fill_value, case.numpy))
    assert_same(array[...], _expected(values, source.fill_value, shape_case.written))
    assert_same(array[...], _zarr_python_read(source))
    strided = tuple(slice(None, None, -2) for _ in shape_case.shape)
    assert_same(array[strided], _expected(values, source.fill_value, shape_case.written)[strided])
    assert array.shape == shape_case.shape
    assert array.chunks == shape_case.chunks
    assert array.dimension_names == (None if names is None else tuple(names))
    assert array.attrs.asdict() == attributes


@pytest.mark.parametrize("encoding", CHUNK_KEY_ENCODINGS)
@pytest.mark.parametrize("shape", ["2-d", "0-d", "3-d"])
def test_chunk_key_encoding_with_zarr_python(tmp_path, encoding, shape):
    """Both writers store the same chunk keys, and each reads the other's."""
    case, shape_case = DATA_TYPES["int16"], SHAPES[shape]
    extra = {} if CHUNK_KEY_ENCODINGS[encoding] is None else {"chunk_key_encoding": CHUNK_KEY_ENCODINGS[encoding]}
    values = _values("int16", case, shape_case.shape)
    _write_zarr_python(tmp_path / "zp", case, "uncompressed", shape_case, None, **extra)[...] = values
    _write_zarrx(tmp_path / "zx", case, "uncompressed", shape_case, None, **extra)[...] = values

    keys = _chunk_files(tmp_path / "zx")
    assert keys == _chunk_files(tmp_path / "zp")
    assert len(keys) == zarrx.open_array(str(tmp_path / "zx")).nchunks
    assert_same(zarrx.open_array(str(tmp_path / "zp"))[...], values)
    assert_same(_zarr_python_read(zarr.open_array(str(tmp_path / "zx"), mode="r")), values)


HIERARCHY_MEMBERS = {"a": "group", "a/b": "group", "a/b/z": "array", "a/y": "array", "empty": "group", "x": "array"}
HIERARCHY_ATTRIBUTES = {"": {"title": "root", "n": 1}, "a": {"level": 1}, "a/b": {"level": 2, "tags": ["x", "y"]},
                        "x": {"units": "m"}, "a/y": {}}  # fmt: skip
HIERARCHY_DATA = {
    "x": np.arange(10, dtype="int32"),
    "a/y": np.linspace(0, 1, 12, dtype="float64").reshape(3, 4),
    "a/b/z": np.array(["p", "qq", ""], dtype=np.dtypes.StringDType()),
}


def _build_hierarchy(library: Any, root: Any) -> None:
    """The same hierarchy through zarr-python's or zarrx's group API (they agree on these calls)."""
    a = root.create_group("a", attributes=HIERARCHY_ATTRIBUTES["a"])
    b = a.create_group("b", attributes=HIERARCHY_ATTRIBUTES["a/b"])
    root.create_group("empty")
    x = root.create_array("x", shape=(10,), chunks=(4,), dtype="int32", attributes={"units": "m"})
    y = a.create_array("y", shape=(3, 4), chunks=(2, 2), dtype="float64", dimension_names=["r", "c"])
    z = b.create_array("z", shape=(3,), chunks=(2,), dtype=str if library is zarr else "string")
    for array, path in [(x, "x"), (y, "a/y"), (z, "a/b/z")]:
        array[...] = HIERARCHY_DATA[path]


def _assert_hierarchy(root: Any, library: Any, read: Any) -> None:
    members = dict(root.members(max_depth=None))
    kinds = {name: "array" if isinstance(node, library.Array) else "group" for name, node in members.items()}
    assert kinds == HIERARCHY_MEMBERS
    for path, attributes in HIERARCHY_ATTRIBUTES.items():
        assert (root[path] if path else root).attrs.asdict() == attributes
    for path, values in HIERARCHY_DATA.items():
        assert_same(read(root[path]), values)
        assert_same(read(members[path]), values)


def _assert_zarrx_hierarchy(root: zarrx.Group) -> None:
    _assert_hierarchy(root, zarrx, lambda array: array[...])
    assert sorted(root) == ["a", "empty", "x"]
    assert root["a/y"].dimension_names == ("r", "c")
    assert root["a"]["b"]["z"].path == "a/b/z"


def test_zarr_python_hierarchy_to_zarrx(tmp_path):
    _build_hierarchy(zarr, zarr.open_group(str(tmp_path / "h"), mode="w", attributes=HIERARCHY_ATTRIBUTES[""]))
    root = zarrx.open_group(str(tmp_path / "h"), mode="r")
    assert not root.is_consolidated
    _assert_zarrx_hierarchy(root)


def test_zarr_python_consolidated_hierarchy_to_zarrx(tmp_path):
    path = str(tmp_path / "h")
    _build_hierarchy(zarr, zarr.open_group(path, mode="w", attributes=HIERARCHY_ATTRIBUTES[""]))
    zarr.consolidate_metadata(path)
    # a group added after consolidation is missing from the consolidated document: zarrx must
    # not see it through the consolidated view, which shows it reads that document
    zarr.open_group(path, mode="r+", use_consolidated=False).create_group("late")

    root = zarrx.open_group(path, mode="r")
    assert root.is_consolidated and root["a"].is_consolidated
    _assert_zarrx_hierarchy(root)
    assert "late" not in root
    assert zarrx.open_group(path, mode="r", use_consolidated=True).is_consolidated
    listed = zarrx.open_group(path, mode="r", use_consolidated=False)
    assert not listed.is_consolidated and "late" in listed


@pytest.mark.parametrize("data_type", DATA_TYPES)
def test_zarrx_metadata_changes_keep_zarr_python_arrays_readable(tmp_path, data_type):
    """zarrx rewrites the zarr.json of an array zarr-python made (an attribute, a shrink that
    trims a boundary chunk, a grow): zarrx and zarr-python both open it again and agree.
    zarrx writes legacy names back in the spec's form ("variable_length_bytes" as "bytes",
    "structured" as "struct"), so the result must be a document the spec allows; zarr-python
    cannot read "struct" (test_zarr_python_cannot_read_spec_struct_or_raw_bits)."""
    case = DATA_TYPES[data_type]
    values = _values(data_type, case, (4,))
    source = zarr.create_array(str(tmp_path / "a"), shape=(4,), chunks=(3,), dtype=case.zarr_python, compressors=None)
    source[...] = values

    array = zarrx.open_array(str(tmp_path / "a"), mode="r+")
    array.attrs["units"] = "m"
    array.resize(2)
    array.resize(5)

    expected = np.full(5, _scalar(source.fill_value, case.numpy), dtype=case.numpy)
    expected[:2] = values[:2]
    reopened = zarrx.open_array(str(tmp_path / "a"))
    assert_same(reopened[...], expected)
    assert reopened.attrs.asdict() == {"units": "m"}
    if data_type in ZARRX_TO_ZARR_PYTHON:
        theirs = zarr.open_array(str(tmp_path / "a"), mode="r")
        assert_same(_zarr_python_read(theirs), expected)
        assert theirs.attrs.asdict() == {"units": "m"}


UPDATE_CHAINS = ["uncompressed", "gzip-crc32c", "big-endian", "transpose", "transpose-big-endian-crc32c"]
#: overlaps written chunks, partly written edge chunks and absent ones
UPDATE_REGION = np.s_[1:5, 0:4]


def _update_cases(data_types: list[str], exclude: Any = ()) -> list[Any]:
    return [
        pytest.param(name, chain, id=f"{name}-{chain}")
        for name in data_types
        for chain in UPDATE_CHAINS
        if _applies(name, chain, 2) and (name, chain) not in exclude
    ]


@pytest.mark.parametrize(
    ("data_type", "chain"),
    _update_cases(
        ["int32", "float64", "string", "bytes", "fixed_length_utf32", "raw_bytes", "datetime64[10s]", "struct"],
        ZARR_PYTHON_TRANSPOSED_VARIABLE_LENGTH,
    ),
)
def test_zarrx_updates_zarr_python_array(tmp_path, data_type, chain):
    """zarrx rewrites part of an array zarr-python wrote (merging into chunks it did not write,
    filling absent ones), keeping zarr-python's metadata: zarr-python reads the result."""
    case, shape_case = DATA_TYPES[data_type], SHAPES["2-d"]
    fill = _fill_for(case, True)
    values, update = _values(data_type, case, shape_case.shape), _values(data_type, case, shape_case.shape, seed=7)
    _write_zarr_python(tmp_path / "a", case, chain, shape_case, fill)[shape_case.written] = values[shape_case.written]
    before = (tmp_path / "a" / "zarr.json").read_bytes()

    zarrx.open_array(str(tmp_path / "a"), mode="r+")[UPDATE_REGION] = update[UPDATE_REGION]

    expected = _expected(values, fill, shape_case.written)
    expected[UPDATE_REGION] = update[UPDATE_REGION]
    assert (tmp_path / "a" / "zarr.json").read_bytes() == before
    assert_same(_zarr_python_read(zarr.open_array(str(tmp_path / "a"), mode="r")), expected)
    assert_same(zarrx.open_array(str(tmp_path / "a"))[...], expected)


# -- 2. zarrx -> zarr-python --------------------------------------------------------------------


@pytest.mark.parametrize(MATRIX, _matrix(ZARRX_TO_ZARR_PYTHON, list(CODEC_CHAINS)))
def test_zarrx_to_zarr_python(tmp_path, data_type, chain, shape, non_default_fill):
    case, shape_case = DATA_TYPES[data_type], SHAPES[shape]
    fill = _fill_for(case, non_default_fill)
    names = _dimension_names(len(shape_case.shape))
    attributes = _attributes(f"{data_type}-{chain}-{shape}")
    source = _write_zarrx(tmp_path / "a", case, chain, shape_case, fill, dimension_names=names, attributes=attributes)
    values = _values(data_type, case, shape_case.shape)
    source[shape_case.written] = values[shape_case.written]

    array = zarr.open_array(str(tmp_path / "a"), mode="r")

    assert _native_dtype(array.dtype) == np.dtype(case.numpy)
    assert_same(_scalar(array.fill_value, case.numpy), _scalar(source.fill_value, case.numpy))
    assert_same(_zarr_python_read(array), _expected(values, source.fill_value, shape_case.written))
    assert array.shape == shape_case.shape
    assert array.chunks == shape_case.chunks
    assert array.metadata.dimension_names == (None if names is None else tuple(names))
    assert array.attrs.asdict() == attributes


def _assert_zarr_python_hierarchy(root: zarr.Group) -> None:
    _assert_hierarchy(root, zarr, _zarr_python_read)
    assert root["a/y"].metadata.dimension_names == ("r", "c")


def test_zarrx_hierarchy_to_zarr_python(tmp_path):
    _build_hierarchy(zarrx, zarrx.create_group(str(tmp_path / "h"), attributes=HIERARCHY_ATTRIBUTES[""]))
    root = zarr.open_group(str(tmp_path / "h"), mode="r")
    assert root.metadata.consolidated_metadata is None
    _assert_zarr_python_hierarchy(root)


def test_zarrx_consolidated_hierarchy_to_zarr_python(tmp_path):
    path = str(tmp_path / "h")
    _build_hierarchy(zarrx, zarrx.create_group(path, attributes=HIERARCHY_ATTRIBUTES[""]))
    assert zarrx.consolidate_metadata(path).is_consolidated
    # a group added by another writer, which leaves the consolidated document as it was (zarrx's own
    # writes keep it true: tests/test_consolidated.py)
    Path(path, "late").mkdir()
    Path(path, "late", "zarr.json").write_bytes(zarrx.create_group({}).metadata.to_bytes())

    for root in (zarr.open_consolidated(path, mode="r"), zarr.open_group(path, mode="r")):
        assert set(root.metadata.consolidated_metadata.flattened_metadata) == set(HIERARCHY_MEMBERS)
        _assert_zarr_python_hierarchy(root)
        assert "late" not in root


# -- 3. tensorstore <-> zarrx -------------------------------------------------------------------


@pytest.mark.parametrize(MATRIX, _matrix(TENSORSTORE_DATA_TYPES, TENSORSTORE_CHAINS))
def test_tensorstore_to_zarrx(tmp_path, data_type, chain, shape, non_default_fill):
    case, shape_case = DATA_TYPES[data_type], SHAPES[shape]
    attributes = _attributes(f"{data_type}-{chain}-{shape}")
    metadata = _tensorstore_metadata(
        data_type, chain, shape_case, _fill_json(case, non_default_fill), attributes=attributes
    )
    source = _create_tensorstore(tmp_path / "a", metadata)
    values = _values(data_type, case, shape_case.shape)
    source[shape_case.written].write(values[shape_case.written]).result()
    if non_default_fill:
        assert_same(_scalar(source.fill_value, case.numpy), _scalar(case.fill_value, case.numpy))

    array = zarrx.open_array(str(tmp_path / "a"))

    assert array.dtype == np.dtype(case.numpy) == source.dtype.numpy_dtype
    assert_same(_scalar(array.fill_value, case.numpy), _scalar(source.fill_value, case.numpy))
    assert_same(array[...], _expected(values, source.fill_value, shape_case.written))
    assert_same(array[...], source.read().result())
    assert array.shape == shape_case.shape
    assert array.chunks == shape_case.chunks
    names = _dimension_names(len(shape_case.shape))
    assert array.dimension_names == (None if names is None else tuple(names))
    assert array.attrs.asdict() == attributes


@pytest.mark.parametrize(MATRIX, _matrix(TENSORSTORE_DATA_TYPES, list(CODEC_CHAINS)))
def test_zarrx_to_tensorstore(tmp_path, data_type, chain, shape, non_default_fill):
    case, shape_case = DATA_TYPES[data_type], SHAPES[shape]
    fill = _fill_for(case, non_default_fill)
    names = _dimension_names(len(shape_case.shape))
    attributes = _attributes(f"{data_type}-{chain}-{shape}")
    source = _write_zarrx(tmp_path / "a", case, chain, shape_case, fill, dimension_names=names, attributes=attributes)
    values = _values(data_type, case, shape_case.shape)
    source[shape_case.written] = values[shape_case.written]

    array = _open_tensorstore(tmp_path / "a")

    assert array.dtype.numpy_dtype == np.dtype(case.numpy)
    assert_same(_scalar(array.fill_value, case.numpy), _scalar(source.fill_value, case.numpy))
    assert_same(array.read().result(), _expected(values, source.fill_value, shape_case.written))
    assert array.shape == shape_case.shape
    assert tuple(array.chunk_layout.read_chunk.shape or ()) == shape_case.chunks  # tensorstore: None when 0-d
    assert array.domain.labels == tuple("" if name is None else name for name in names or ())
    assert array.spec().to_json()["metadata"]["attributes"] == attributes


@pytest.mark.parametrize(("data_type", "chain"), _update_cases(["uint8", "int64", "float32", "complex128"]))
def test_zarrx_updates_tensorstore_array(tmp_path, data_type, chain):
    """zarrx rewrites part of an array tensorstore wrote; tensorstore reads the result."""
    case, shape_case = DATA_TYPES[data_type], SHAPES["2-d"]
    values, update = _values(data_type, case, shape_case.shape), _values(data_type, case, shape_case.shape, seed=7)
    metadata = _tensorstore_metadata(data_type, chain, shape_case, _fill_json(case, True))
    _create_tensorstore(tmp_path / "a", metadata)[shape_case.written].write(values[shape_case.written]).result()

    zarrx.open_array(str(tmp_path / "a"), mode="r+")[UPDATE_REGION] = update[UPDATE_REGION]

    expected = _expected(values, _fill_for(case, True), shape_case.written)
    expected[UPDATE_REGION] = update[UPDATE_REGION]
    assert_same(_open_tensorstore(tmp_path / "a").read().result(), expected)


@pytest.mark.parametrize("encoding", CHUNK_KEY_ENCODINGS)
@pytest.mark.parametrize("shape", ["2-d", "0-d", "3-d"])
def test_chunk_key_encoding_with_tensorstore(tmp_path, encoding, shape):
    """Both writers store the same chunk keys, and each reads the other's."""
    case, shape_case = DATA_TYPES["int16"], SHAPES[shape]
    short = CHUNK_KEY_ENCODINGS[encoding]
    extra = {} if short is None else {"chunk_key_encoding": short}
    spec_form = {} if short is None else {
        "chunk_key_encoding": {"name": short["name"], "configuration": {"separator": short["separator"]}}
    }  # fmt: skip
    values = _values("int16", case, shape_case.shape)
    metadata = _tensorstore_metadata("int16", "uncompressed", shape_case, None, **spec_form)
    _create_tensorstore(tmp_path / "ts", metadata).write(values).result()
    _write_zarrx(tmp_path / "zx", case, "uncompressed", shape_case, None, **extra)[...] = values

    assert _chunk_files(tmp_path / "zx") == _chunk_files(tmp_path / "ts")
    assert_same(zarrx.open_array(str(tmp_path / "ts"))[...], values)
    assert_same(_open_tensorstore(tmp_path / "zx").read().result(), values)


#: (data type, fill value as spec JSON, the canonical form zarrx writes back): the named and the
#: "0x" forms, NaN payloads, signed zeros
SPECIAL_FLOAT_FILLS = [
    ("float16", "0x7e01", "0x7e01"),
    ("float16", "-Infinity", "-Infinity"),
    ("float32", "0x7fc00001", "0x7fc00001"),
    ("float32", "0x7fc00000", "NaN"),
    ("float64", "0xfff8000000000123", "0xfff8000000000123"),
    ("float64", "0x8000000000000000", -0.0),
    ("complex64", ["0x7fc00001", "Infinity"], ["0x7fc00001", "Infinity"]),
    ("complex128", ["NaN", "0x7ff8000000000001"], ["NaN", "0x7ff8000000000001"]),
]


def _fill_bits(data_type: str, fill_json: Any) -> bytes:
    """The bytes a spec fill value stands for, computed here from the spec's definitions."""
    component = np.dtype({"complex64": "float32", "complex128": "float64"}.get(data_type, data_type))
    named = {"NaN": np.nan, "Infinity": np.inf, "-Infinity": -np.inf}
    parts = fill_json if isinstance(fill_json, list) else [fill_json]
    out = b""
    for part in parts:
        if part in named:
            out += np.array(named[part], dtype=component).tobytes()  # NumPy's NaN is the spec's canonical one
        else:
            out += np.array(int(part, 16), dtype=f"u{component.itemsize}").tobytes()
    return out


@pytest.mark.parametrize(("data_type", "fill_json", "canonical"), SPECIAL_FLOAT_FILLS)
def test_float_fill_values_are_bit_exact_with_tensorstore(tmp_path, data_type, fill_json, canonical):
    """Special float fill values survive bit for bit both ways, in the metadata and in the
    chunks' gaps."""
    bits = _fill_bits(data_type, fill_json)
    shape_case = SHAPES["1-d"]
    metadata = _tensorstore_metadata(data_type, "uncompressed", shape_case, fill_json)
    _create_tensorstore(tmp_path / "ts", metadata)[0:4].write(np.zeros(4, data_type)).result()
    ours = zarrx.open_array(str(tmp_path / "ts"))
    assert np.array(ours.fill_value, dtype=data_type).tobytes() == bits
    assert ours[6:7].tobytes() == bits  # an absent chunk

    zarrx.create_array(str(tmp_path / "zx"), shape=(7,), chunks=(3,), dtype=data_type, fill_value=ours.fill_value)
    written = json.loads((tmp_path / "zx" / "zarr.json").read_bytes())["fill_value"]
    assert written == canonical and str(written) == str(canonical)  # -0.0, not 0.0
    reopened = _open_tensorstore(tmp_path / "zx")
    assert np.array(reopened.fill_value, dtype=data_type).tobytes() == bits
    assert reopened[6:7].read().result().tobytes() == bits


# -- 4. byte-level agreement --------------------------------------------------------------------

BYTE_IDENTICAL_CASES = [
    *(("int32", chain) for chain in DETERMINISTIC_CHAINS),
    *((name, "uncompressed") for name in [
        "bool", "uint64", "float16", "complex128", "string", "bytes", "fixed_length_utf32",
        "null_terminated_bytes", "raw_bytes", "datetime64[10s]", "struct",
    ]),
]  # fmt: skip


@pytest.mark.parametrize(("data_type", "chain"), BYTE_IDENTICAL_CASES)
def test_chunks_are_byte_identical(tmp_path, data_type, chain):
    """Without a compressor the spec fixes every byte of a chunk (edge chunks padded with the
    fill value), so every writer must produce the same files. The struct case compares only
    chunks: zarrx and zarr-python name the type differently (see Disagreements)."""
    case, shape_case = DATA_TYPES[data_type], SHAPES["2-d"]
    values = _values(data_type, case, shape_case.shape)
    writers = {
        "zx": _write_zarrx(tmp_path / "zx", case, chain, shape_case, _fill_for(case, True)),
        "zp": _write_zarr_python(tmp_path / "zp", case, chain, shape_case, _fill_for(case, True)),
    }
    for array in writers.values():
        array[shape_case.written] = values[shape_case.written]
    if data_type in TENSORSTORE_DATA_TYPES:
        metadata = _tensorstore_metadata(data_type, chain, shape_case, _fill_json(case, True))
        _create_tensorstore(tmp_path / "ts", metadata)[shape_case.written].write(values[shape_case.written]).result()
        writers["ts"] = None

    keys = _chunk_files(tmp_path / "zx")
    assert 0 < len(keys) <= 6  # 3 x 3 chunks; the last row is never written, all-fill chunks are not stored
    for name in writers:
        assert _chunk_files(tmp_path / name) == keys, name
        for key in keys:
            assert (tmp_path / name / key).read_bytes() == (tmp_path / "zx" / key).read_bytes(), (name, key)


METADATA_CASES = [
    ("int32", "default", True),
    ("int32", "uncompressed", False),
    ("uint8", "blosc-lz4-shuffle", True),
    ("float32", "gzip-crc32c", True),
    ("float64", "transpose-big-endian-crc32c", True),
    ("complex64", "zstd-checksum", True),
    ("string", "default", True),
    ("bytes", "crc32c", True),
    ("fixed_length_utf32", "big-endian", True),
    ("null_terminated_bytes", "default", True),
    ("raw_bytes", "blosc-zstd-bitshuffle", True),
    ("datetime64[10s]", "transpose", True),
    ("timedelta64", "default", False),
]


@pytest.mark.parametrize(("data_type", "chain", "non_default_fill"), METADATA_CASES)
def test_zarrx_metadata_parses_equal_in_zarr_python(tmp_path, data_type, chain, non_default_fill):
    """The zarr.json zarrx writes, parsed by zarr-python, equals the metadata zarr-python writes
    itself for the same arguments (both normalised by zarr-python's parser). Here zarrx gets
    codec objects (zarrx.codecs), where the matrix passes JSON dicts."""
    case, shape_case = DATA_TYPES[data_type], SHAPES["2-d"]
    fill = _fill_for(case, non_default_fill)
    extra = {"dimension_names": ["t", "y"], "chunk_key_encoding": {"name": "v2", "separator": "/"}}
    _write_zarrx(tmp_path / "zx", case, chain, shape_case, fill, codec_objects=True, **extra)
    _write_zarr_python(tmp_path / "zp", case, chain, shape_case, fill, **extra)

    ours = zarr.open_array(str(tmp_path / "zx"), mode="r").metadata
    theirs = zarr.open_array(str(tmp_path / "zp"), mode="r").metadata

    assert ours.shape == theirs.shape
    assert ours.data_type == theirs.data_type
    assert ours.chunk_grid == theirs.chunk_grid
    assert ours.chunk_key_encoding == theirs.chunk_key_encoding
    assert ours.codecs == theirs.codecs
    assert ours.dimension_names == theirs.dimension_names
    assert_same(_scalar(ours.fill_value, case.numpy), _scalar(theirs.fill_value, case.numpy))


# -- Disagreements: where another implementation departs from the spec ---------------------------


@pytest.mark.parametrize("data_type", ["struct", "r24"])
def test_zarr_python_cannot_read_spec_struct_or_raw_bits(tmp_path, data_type):
    """zarrx writes the accepted spec's names, which zarr-python 3.1 cannot read.

    Records are the registered ``struct`` extension (zarr-extensions data-types/struct);
    ``"structured"`` is its legacy alias, which implementations "MUST NOT write". Raw bits are
    the core spec's ``r<N>`` (fill value a list of byte values); ``raw_bytes`` is zarr-python's
    own, unregistered name. zarr-python 3.1 knows only ``structured`` and ``raw_bytes``, so it
    refuses zarrx's arrays. Project rule: "When the spec and another implementation disagree,
    follow the spec and note it in a test". zarrx still reads both legacy forms: the same data
    written by zarr-python reads back equal in zarrx (and see the struct and raw_bytes cases of
    test_zarr_python_to_zarrx). When zarr-python learns these names, move them into the
    zarrx -> zarr-python matrix.
    """
    numpy_dtype = np.dtype(DTYPES[data_type]) if data_type == "struct" else np.dtype("V3")
    values = sample_values(data_type, numpy_dtype, (5,))
    zarrx.create_array(str(tmp_path / "zx"), shape=(5,), chunks=(2,), dtype=DTYPES[data_type])[...] = values
    written = json.loads((tmp_path / "zx" / "zarr.json").read_bytes())["data_type"]
    assert written == ("r24" if data_type == "r24" else {"name": "struct", "configuration": written["configuration"]})

    with pytest.raises(ValueError, match="No Zarr data type found"):
        zarr.open_array(str(tmp_path / "zx"), mode="r")

    zarr.create_array(str(tmp_path / "zp"), shape=(5,), chunks=(2,), dtype=numpy_dtype)[...] = values
    legacy = json.loads((tmp_path / "zp" / "zarr.json").read_bytes())["data_type"]["name"]
    assert legacy == ("structured" if data_type == "struct" else "raw_bytes")
    assert_same(zarrx.open_array(str(tmp_path / "zp"))[...], values)
    assert_same(zarrx.open_array(str(tmp_path / "zx"))[...], values)


def test_tensorstore_cannot_read_spec_raw_bits_fill_value(tmp_path):
    """The core spec writes an ``r<N>`` fill value as a list of byte values ("Permitted fill
    values": "an array of integers ... each in the range [0, 255]"), and zarrx does. tensorstore
    0.1.x expects a base64 string there (zarr-python's ``raw_bytes`` form) and refuses the
    array; zarrx follows the spec. (The other direction cannot be tested: creating an ``r<N>``
    array aborts the whole process in tensorstore 0.1.86.)"""
    array = zarrx.create_array(str(tmp_path / "zx"), shape=(5,), chunks=(2,), dtype="r24", compressors=None)
    array[...] = sample_values("r24", np.dtype("V3"), (5,))
    assert json.loads((tmp_path / "zx" / "zarr.json").read_bytes())["fill_value"] == [0, 0, 0]
    with pytest.raises(ValueError, match="base64"):
        _open_tensorstore(tmp_path / "zx")


def _vlen(items: list[bytes]) -> bytes:
    """The vlen-utf8 / vlen-bytes encoding: u32le count, then u32le length + bytes per item."""
    return len(items).to_bytes(4, "little") + b"".join(len(item).to_bytes(4, "little") + item for item in items)


@pytest.mark.parametrize("data_type", ["string", "bytes"])
def test_zarr_python_writes_variable_length_chunks_untransposed(tmp_path, data_type):
    """The transpose codec hands the next codec the permuted chunk (codecs/transpose: the
    encoded array has ``shape[order[i]]``), so vlen-utf8 / vlen-bytes must list the elements in
    the C order of the *transposed* chunk. zarr-python 3.1 lists them in the untransposed order,
    then decodes by the spec, so even its own round trip returns a transposed chunk. zarrx
    follows the spec: it writes the permuted order (which zarr-python reads back correctly),
    and decodes zarr-python's bytes exactly as zarr-python does.
    """
    case = DATA_TYPES[data_type]
    items = [b"a", b"bb", b"", b"d\x00", b"e", b"ff"]
    values = np.array([item.decode() if data_type == "string" else item for item in items], dtype=case.numpy)
    values = values.reshape(2, 3)
    kwargs = {"shape": (2, 3), "chunks": (2, 3), "filters": [{"name": "transpose", "configuration": {"order": [1, 0]}}],
              "compressors": None}  # fmt: skip
    zarrx.create_array(str(tmp_path / "zx"), dtype=case.zarrx, **kwargs)[...] = values
    theirs = zarr.create_array(str(tmp_path / "zp"), dtype=case.zarr_python, **kwargs)
    theirs[...] = values

    transposed = [items[i] for i in (0, 3, 1, 4, 2, 5)]  # values.T in C order
    assert (tmp_path / "zx" / "c" / "0" / "0").read_bytes() == _vlen(transposed)
    assert (tmp_path / "zp" / "c" / "0" / "0").read_bytes() == _vlen(items)  # zarr-python's departure
    assert_same(_zarr_python_read(zarr.open_array(str(tmp_path / "zx"), mode="r")), values)
    from_zarr_python = zarrx.open_array(str(tmp_path / "zp"))[...]
    assert_same(from_zarr_python, _zarr_python_read(theirs))
    assert not (from_zarr_python == values).all()


def test_zarr_python_loses_nan_payloads_of_fill_values(tmp_path):
    """The core spec's ``"NaN"`` is one NaN (sign 0, mantissa MSB only: ``0x7fc00000`` for
    float32); any other NaN must be written in the ``"0x..."`` form and is then exact. zarr-python
    3.1 writes every NaN as ``"NaN"``, so a payload is lost on the way to disk (zarrx, following
    the spec, reads the canonical NaN), and it reads a float16 ``"0x7e01"`` as ``0x7e00``. zarrx
    writes and reads the ``"0x"`` form bit-exactly, as tensorstore does
    (test_float_fill_values_are_bit_exact_with_tensorstore)."""
    payload_nan = np.array(0x7FC00001, dtype=np.uint32).view(np.float32)[()]
    zarr.create_array(str(tmp_path / "zp"), shape=(3,), dtype="float32", fill_value=payload_nan)
    assert json.loads((tmp_path / "zp" / "zarr.json").read_bytes())["fill_value"] == "NaN"
    assert np.array(zarrx.open_array(str(tmp_path / "zp")).fill_value).view(np.uint32) == 0x7FC00000

    zarrx.create_array(str(tmp_path / "zx"), shape=(3,), dtype="float32", fill_value=payload_nan)
    assert json.loads((tmp_path / "zx" / "zarr.json").read_bytes())["fill_value"] == "0x7fc00001"
    assert np.array(zarr.open_array(str(tmp_path / "zx"), mode="r").fill_value).view(np.uint32) == 0x7FC00001

    zarrx.create_array(str(tmp_path / "zx16"), shape=(3,), dtype="float16", fill_value="0x7e01")
    assert np.array(zarrx.open_array(str(tmp_path / "zx16")).fill_value).view(np.uint16) == 0x7E01
    assert np.array(zarr.open_array(str(tmp_path / "zx16"), mode="r").fill_value).view(np.uint16) == 0x7E00


def test_zarr_python_bytes_codec_on_variable_length_bytes_is_refused(tmp_path):
    """zarr-python 3.1 accepts ``serializer=BytesCodec(...)`` for variable-length bytes and
    writes ``{"name": "bytes"}`` for the type (it cannot then write data to it). The ``bytes``
    codec encodes fixed-size elements only (codecs/bytes), so zarrx refuses the metadata with a
    MetadataError that names the codec and the fix."""
    kwargs = {"shape": (3,), "dtype": VariableLengthBytes(), "serializer": BYTES_BIG, "compressors": None}
    zarr.create_array(str(tmp_path / "zp"), **kwargs)
    assert json.loads((tmp_path / "zp" / "zarr.json").read_bytes())["codecs"] == [{"name": "bytes"}]
    with pytest.raises(MetadataError, match="vlen-bytes") as error:
        zarrx.open_array(str(tmp_path / "zp"))
    assert "zarr.json" in str(error.value)


def test_zarr_python_drops_big_endian_for_structured(tmp_path):
    """Asked for ``BytesCodec(endian="big")`` on a structured type, zarr-python 3.1 writes
    little-endian records and a ``bytes`` codec without ``endian``. The legacy ``structured``
    rules say to read that as little-endian, which zarrx does, so the values agree; zarrx itself
    honours the requested order and records it."""
    values = sample_values("struct", STRUCT, (4,))
    kwargs = {"shape": (4,), "chunks": (4,), "dtype": STRUCT, "serializer": BYTES_BIG, "compressors": None}
    zarr.create_array(str(tmp_path / "zp"), **kwargs)[...] = values
    zarrx.create_array(str(tmp_path / "zx"), **kwargs)[...] = values

    assert json.loads((tmp_path / "zp" / "zarr.json").read_bytes())["codecs"] == [{"name": "bytes"}]
    assert (tmp_path / "zp" / "c" / "0").read_bytes() == values.astype(STRUCT.newbyteorder("<")).tobytes()
    assert json.loads((tmp_path / "zx" / "zarr.json").read_bytes())["codecs"] == [BYTES_BIG]
    assert (tmp_path / "zx" / "c" / "0").read_bytes() == values.astype(STRUCT.newbyteorder(">")).tobytes()
    assert_same(zarrx.open_array(str(tmp_path / "zp"))[...], values)
    assert_same(zarrx.open_array(str(tmp_path / "zx"))[...], values)
