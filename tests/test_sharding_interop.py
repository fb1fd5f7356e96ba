"""Sharded arrays (``sharding_indexed``) across zarrx, zarr-python 3 and tensorstore, on local disk.

The rule: a sharded array written by zarr-python or by tensorstore reads identically in
zarrx -- whole, and through partial selections (strided slices, ``oindex``, ``vindex``)
that take zarrx's partial-shard path -- and a sharded array written by zarrx, including
shards it rewrote in part, reads identically in both. Every array goes through the same
sequence of writes (:data:`LAYOUTS`): a region that covers some shards in part and leaves
others absent and some inner chunks empty, a single element in an edge shard, a whole
inner chunk set back to the fill value (zarrx leaves it out of the shard), a whole shard
set back to the fill value (zarrx deletes the shard) and one more element merged into an
existing shard.

Codec chains are spec JSON (:func:`sharding`, :data:`CHAINS`): tensorstore takes it as is,
zarrx as its codec objects (``serializer=zarrx.codecs.ShardingCodec(...)``) and zarr-python as
``zarr.codecs`` objects (``serializer=zarr.codecs.ShardingCodec(..., index_location=start|end)``);
zarrx's and zarr-python's ``create_array(chunks=inner, shards=outer)`` are tested on every data
type they share.

What zarr-python 3.1.6 cannot read
    An array whose ``transpose`` codec comes *before* ``sharding_indexed`` (tensorstore writes
    it, and so does zarrx): zarr-python checks the inner chunk shape against the untransposed
    shard shape and raises ``ValueError: The array's `chunk_shape` ... needs to be divisible by
    the shard's inner `chunk_shape```
    (:func:`test_zarr_python_cannot_read_transpose_before_sharding`). The same order one level
    down -- ``transpose`` then ``sharding_indexed`` inside an outer shard -- it reads and writes
    correctly, since it checks divisibility only against the array's chunk grid. It reads every
    other layout here too: index at start or end, index codecs with or without ``crc32c``, in
    either byte order and transposed, nested sharding, big-endian inner ``bytes``, ``transpose``
    inside the shard, and zstd, gzip, blosc and crc32c inner codecs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, NamedTuple

import numpy as np
import pytest
import tensorstore as ts
import zarr
from zarr.core.dtype import VariableLengthBytes
from zarr.registry import get_codec_class

import zarrx
from zarrx.codecs import codec_from_json
from zarrx.storage import LocalStore
from zarrx.storage.store import RangeByteRequest, SuffixByteRequest

from .conftest import assert_same, sample_values
from .counting import CountingStore

pytestmark = [
    pytest.mark.filterwarnings("ignore::zarr.errors.UnstableSpecificationWarning"),
    pytest.mark.filterwarnings("ignore::zarr.errors.ZarrUserWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
]


# -- codecs as spec JSON ----------------------------------------------------------------------

BYTES = {"name": "bytes", "configuration": {"endian": "little"}}
BYTES_BIG = {"name": "bytes", "configuration": {"endian": "big"}}
CRC32C = {"name": "crc32c"}
ZSTD = {"name": "zstd", "configuration": {"level": 3, "checksum": False}}
GZIP = {"name": "gzip", "configuration": {"level": 5}}


def blosc(typesize: int) -> dict[str, Any]:
    configuration = {"cname": "lz4", "clevel": 5, "shuffle": "bitshuffle", "typesize": typesize, "blocksize": 0}
    return {"name": "blosc", "configuration": configuration}


def transpose(order: tuple[int, ...]) -> dict[str, Any]:
    return {"name": "transpose", "configuration": {"order": list(order)}}


def sharding(chunk_shape, codecs=(BYTES,), index_codecs=(BYTES, CRC32C), index_location="end") -> dict[str, Any]:
    return {
        "name": "sharding_indexed",
        "configuration": {
            "chunk_shape": list(chunk_shape),
            "codecs": list(codecs),
            "index_codecs": list(index_codecs),
            "index_location": index_location,
        },
    }


class Layout(NamedTuple):
    shape: tuple[int, ...]
    shards: tuple[int, ...]
    chunks: tuple[int, ...]  # the inner chunks
    #: the writes, in order: (selection, "values" or "fill")
    writes: list[tuple[Any, str]]
    #: the key of a shard the writes fill and later set all back to the fill value (zarrx then
    #: deletes it); None when there is none
    emptied_shard: str | None


LAYOUTS = {
    # 3 x 3 shards, edge shards cut to 2 rows and 1 column; inner chunks in columns 0..2 stay empty
    "2-d": Layout((10, 13), (4, 6), (2, 3), [
        (np.s_[1:7, 3:12], "values"),
        (np.s_[9, 12], "values"),  # the corner edge shard
        (np.s_[2:4, 9:12], "fill"),  # one whole inner chunk of shard (0, 1)
        (np.s_[4:8, 6:12], "fill"),  # all of shard (1, 1)
        (np.s_[5, 4], "values"),  # merged into shard (1, 0)
    ], "c/1/1"),  # fmt: skip
    "3-d": Layout((5, 9, 7), (4, 6, 4), (2, 3, 2), [
        (np.s_[0:3, 4:9, 1:6], "values"),
        (np.s_[4, 8, 6], "values"),
        (np.s_[0:2, 6:9, 2:4], "fill"),
        (np.s_[0:4, 6:9, 4:7], "fill"),  # shard (0, 1, 1), an edge shard in two dimensions
        (np.s_[3, 1, 0], "values"),
    ], "c/0/1/1"),  # fmt: skip
    "1-d": Layout((23,), (8,), (2,), [
        (np.s_[3:13], "values"),
        (np.s_[22], "values"),
        (np.s_[4:6], "fill"),
        (np.s_[8:16], "fill"),
        (np.s_[0], "values"),
    ], "c/1"),  # fmt: skip
    # one shard bigger than the array: 6 of its 8 inner chunks hold array elements
    "oversized-shard": Layout((5, 7), (8, 8), (2, 4), [
        (np.s_[1:4, 2:7], "values"),
        (np.s_[4, 6], "values"),
        (np.s_[0:2, 4:7], "fill"),  # the in-bounds part of an edge inner chunk
        (np.s_[2, 0], "values"),
    ], None),  # fmt: skip
    # inner chunks of 64 KiB (float32): zarrx decodes and assembles on its thread pool
    "threaded": Layout((300, 520), (256, 256), (128, 128), [
        (np.s_[10:290, 3:500], "values"),
        (np.s_[299, 519], "values"),
        (np.s_[128:256, 0:128], "fill"),
        (np.s_[256:300, 256:512], "fill"),
        (np.s_[5, 7], "values"),
    ], "c/1/1"),  # fmt: skip
    # 16 shards of 16 inner chunks; two shards hold one and two inner chunks
    "sparse": Layout((64, 64), (16, 16), (4, 4), [
        (np.s_[17, 33], "values"),
        (np.s_[40:43, 5:9], "values"),
    ], None),  # fmt: skip
}


def _apply_writes(layout: Layout, values: np.ndarray, fill_value: Any, write: Callable[[Any, np.ndarray], None]) -> np.ndarray:
    """Run the layout's writes through ``write(selection, value)``; returns what the array must hold."""
    expected = np.full(layout.shape, fill_value, dtype=values.dtype)
    for selection, what in layout.writes:
        value = np.asarray(values[selection], dtype=values.dtype)  # a 0-d array, not a scalar, for one element
        value = value if what == "values" else np.full_like(value, fill_value)
        write(selection, value)
        expected[selection] = value
    return expected


def _selections(shape: tuple[int, ...], zarrx_only: bool = False) -> list[tuple[str, Any]]:
    """Partial selections, as ``(kind, selection)``: kind is "basic", "oindex" or "vindex".
    ``zarrx_only`` adds what zarr-python does not take: negative steps, a whole-array mask."""
    rng = np.random.default_rng(len(shape))
    selections = [
        ("basic", tuple(slice(1, None, 3) for _ in shape)),
        ("basic", tuple(slice(n // 4, n - 1, 2) for n in shape)),
        ("basic", (shape[0] - 1, *(slice(None, None, 5) for _ in shape[1:]))),
        ("oindex", tuple(np.array([n - 1, 0, n // 2, 0]) for n in shape)),  # unsorted, repeated
        ("oindex", tuple(np.arange(n) % 3 != 1 for n in shape)),
        ("vindex", tuple(rng.integers(0, n, 11) for n in shape)),
    ]
    if zarrx_only:
        selections += [
            ("basic", tuple(slice(None, None, -2) for _ in shape)),
            ("vindex", rng.random(shape) < 0.2),
        ]
    return selections


def _numpy_select(expected: np.ndarray, kind: str, selection: Any) -> np.ndarray:
    return expected[np.ix_(*selection)] if kind == "oindex" else expected[selection]


def _assert_reads(
    expected: np.ndarray,
    read: Callable[[str, Any], Any],
    native: Callable[[Any], np.ndarray] = np.asarray,
    zarrx_only: bool = False,
) -> None:
    """``read(kind, selection)`` gives numpy's values for the whole array and every partial selection."""
    assert_same(native(read("basic", ...)), expected)
    for kind, selection in _selections(expected.shape, zarrx_only):
        assert_same(native(read(kind, selection)), _numpy_select(expected, kind, selection))


def _indexed_read(array: zarrx.Array | zarr.Array) -> Callable[[str, Any], Any]:
    """Reads through zarrx's or zarr-python's (same) indexing API."""
    return lambda kind, selection: {"basic": array, "oindex": array.oindex, "vindex": array.vindex}[kind][selection]


def _tensorstore_read(array: ts.TensorStore) -> Callable[[str, Any], Any]:
    def read(kind: str, selection: Any) -> np.ndarray:
        view = {"basic": array, "oindex": array.oindex, "vindex": array.vindex}[kind]
        return view[selection].read().result()

    return read


def _native(values: Any) -> np.ndarray:
    """zarr-python returns values in the stored byte order; zarrx and tensorstore in native order."""
    values = np.asarray(values)
    return values if values.dtype.kind in "OT" or values.dtype.isnative else values.astype(values.dtype.newbyteorder("="))


def _zarr_python_codec(codec_json: dict[str, Any]) -> Any:
    """A ``zarr.codecs`` object, the nested codecs of a sharding codec too."""
    return get_codec_class(codec_json["name"]).from_dict(codec_json)


def _create_tensorstore(path: Path, metadata: dict[str, Any]) -> ts.TensorStore:
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}, "metadata": metadata}
    return ts.open(spec, create=True).result()


def _open_tensorstore(path: Path) -> ts.TensorStore:
    return ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}}).result()


def _zarr_python_write(array: zarr.Array) -> Callable[[Any, np.ndarray], None]:
    """Integer indices as length-1 slices: zarr-python 3.1.6 fails to encode a single variable-length
    bytes element written by integer index (numcodecs: "Expected bytes, got numpy.ndarray")."""

    def write(selection: Any, value: np.ndarray) -> None:
        items = selection if isinstance(selection, tuple) else (selection,)
        slices = tuple(slice(item, item + 1) if isinstance(item, int) else item for item in items)
        array[slices] = value.reshape(np.empty(array.shape)[slices].shape)

    return write


def _tensorstore_write(array: ts.TensorStore) -> Callable[[Any, np.ndarray], None]:
    return lambda selection, value: array[selection].write(value).result()


def _middle(layout: Layout) -> tuple[int, ...]:
    """A chunk shape between the shard and its inner chunks, for nested sharding."""
    return (layout.chunks[0], *layout.shards[1:])


def _rotation(ndim: int) -> tuple[int, ...]:
    """A transpose order whose inverse differs from it when ndim > 2."""
    return (*range(1, ndim), 0)


def _transposed(shape: tuple[int, ...], order: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(shape[axis] for axis in order)


#: a sharded array's ``codecs`` as spec JSON, given its layout and the element size
CHAINS: dict[str, Callable[[Layout, int], list[dict[str, Any]]]] = {
    "index-end-crc32c": lambda L, size: [sharding(L.chunks)],
    "index-start-crc32c": lambda L, size: [sharding(L.chunks, index_location="start")],
    "index-end-no-crc32c": lambda L, size: [sharding(L.chunks, index_codecs=[BYTES])],
    "index-start-big-endian": lambda L, size: [sharding(L.chunks, index_codecs=[BYTES_BIG, CRC32C], index_location="start")],
    "index-transposed": lambda L, size: [
        sharding(L.chunks, index_codecs=[transpose(_rotation(len(L.shape) + 1)), BYTES_BIG, CRC32C], index_location="start")
    ],
    "inner-zstd": lambda L, size: [sharding(L.chunks, codecs=[BYTES, ZSTD])],
    "inner-gzip-crc32c": lambda L, size: [sharding(L.chunks, codecs=[BYTES, GZIP, CRC32C], index_location="start")],
    "inner-blosc": lambda L, size: [sharding(L.chunks, codecs=[BYTES, blosc(size)])],
    "inner-big-endian-zstd": lambda L, size: [sharding(L.chunks, codecs=[BYTES_BIG, ZSTD])],
    "inner-transpose": lambda L, size: [sharding(L.chunks, codecs=[transpose(_rotation(len(L.shape))), BYTES, GZIP])],
    "nested": lambda L, size: [
        sharding(_middle(L), codecs=[sharding(L.chunks, codecs=[BYTES_BIG, ZSTD], index_location="start")])
    ],
    "transpose-before-sharding": lambda L, size: [
        transpose(_rotation(len(L.shape))),
        sharding(_transposed(L.chunks, _rotation(len(L.shape))), codecs=[BYTES, GZIP], index_location="start"),
    ],
    # the outer shard holds transposed middle chunks, each a shard of inner chunks
    "nested-transpose-before-sharding": lambda L, size: [
        sharding(_middle(L), codecs=[
            transpose(_rotation(len(L.shape))),
            sharding(_transposed(L.chunks, _rotation(len(L.shape))), codecs=[BYTES, ZSTD]),
        ]),
    ],  # fmt: skip
}


class Case(NamedTuple):
    chain: str
    layout: str
    data_type: str  # the spec's data type name, as in conftest.DTYPES
    fill: Any  # a fill value (None: the default)


def _cases(rows: list[tuple[str, str, str, Any]]) -> list[Any]:
    return [pytest.param(Case(*row), id="-".join(str(part) for part in row[:3])) for row in rows]


#: chains x layouts x data types that every writer writes and every reader reads
CASES = [
    ("index-end-crc32c", "2-d", "int32", None),
    ("index-end-crc32c", "3-d", "float32", np.nan),
    ("index-end-crc32c", "1-d", "uint8", 7),
    ("index-end-crc32c", "sparse", "float64", np.nan),
    ("index-start-crc32c", "2-d", "float32", np.nan),
    ("index-start-crc32c", "3-d", "int16", -1),
    ("index-start-crc32c", "sparse", "int64", 0),
    ("index-end-no-crc32c", "2-d", "uint16", 3),
    ("index-end-no-crc32c", "1-d", "complex64", None),
    ("index-start-big-endian", "2-d", "int32", -5),
    ("index-transposed", "2-d", "uint32", None),
    ("index-transposed", "3-d", "float64", np.nan),
    ("inner-zstd", "3-d", "uint64", None),
    ("inner-gzip-crc32c", "2-d", "float64", -0.0),
    ("inner-blosc", "2-d", "float32", np.nan),
    ("inner-blosc", "3-d", "int16", None),
    ("inner-big-endian-zstd", "2-d", "float64", np.nan),
    ("inner-big-endian-zstd", "1-d", "int32", 9),
    ("inner-transpose", "3-d", "int32", 2),
    ("nested", "2-d", "float32", np.nan),
    ("nested", "3-d", "uint16", None),
    ("nested", "sparse", "int8", 1),
    ("nested-transpose-before-sharding", "2-d", "float32", np.nan),
    ("nested-transpose-before-sharding", "3-d", "int16", None),
    ("index-end-crc32c", "2-d", "bool", None),
    ("index-end-crc32c", "oversized-shard", "int32", -3),
    ("index-start-crc32c", "oversized-shard", "float64", np.nan),
    ("inner-zstd", "threaded", "float32", np.nan),
    ("index-start-crc32c", "threaded", "float32", 0),
]
#: what zarr-python cannot read (see the module docstring): tensorstore and zarrx only
TRANSPOSE_CASES = [
    ("transpose-before-sharding", "2-d", "int32", None),
    ("transpose-before-sharding", "3-d", "float32", np.nan),
    ("transpose-before-sharding", "sparse", "uint16", 5),
    ("transpose-before-sharding", "oversized-shard", "int32", None),
]


def _values(case: Case, dtype: np.dtype) -> np.ndarray:
    return sample_values(case.data_type, dtype, LAYOUTS[case.layout].shape, seed=len(case.chain))


def _fill_of(case: Case) -> Any:
    dtype = np.dtype(case.data_type)
    return np.zeros((), dtype)[()] if case.fill is None else dtype.type(case.fill)


def _spec_fill(case: Case) -> Any:
    """The fill value as spec JSON (for tensorstore's metadata)."""
    fill = _fill_of(case)
    if fill.dtype.kind == "f" and np.isnan(fill):
        return "NaN"
    if fill.dtype.kind == "c":
        return [float(fill.real), float(fill.imag)]
    return fill.item()


def _element_size(case: Case) -> int:
    return np.dtype(case.data_type).itemsize


def _write_tensorstore(path: Path, case: Case) -> np.ndarray:
    layout = LAYOUTS[case.layout]
    metadata = {
        "shape": list(layout.shape),
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(layout.shards)}},
        "data_type": case.data_type,
        "codecs": CHAINS[case.chain](layout, _element_size(case)),
        "fill_value": _spec_fill(case),
    }
    array = _create_tensorstore(path, metadata)
    return _apply_writes(layout, _values(case, np.dtype(case.data_type)), _fill_of(case), _tensorstore_write(array))


def _write_zarr_python(path: Path, case: Case) -> np.ndarray:
    layout = LAYOUTS[case.layout]
    codecs = [_zarr_python_codec(codec) for codec in CHAINS[case.chain](layout, _element_size(case))]
    array = zarr.create_array(
        str(path), shape=layout.shape, chunks=layout.shards, dtype=case.data_type, fill_value=_fill_of(case),
        filters=codecs[:-1], serializer=codecs[-1], compressors=None,
    )  # fmt: skip
    return _apply_writes(layout, _values(case, array.dtype), _fill_of(case), _zarr_python_write(array))


def _write_zarrx(path: Path, case: Case) -> np.ndarray:
    layout = LAYOUTS[case.layout]
    codecs = [codec_from_json(codec, "codecs") for codec in CHAINS[case.chain](layout, _element_size(case))]
    array = zarrx.create_array(
        str(path), shape=layout.shape, chunks=layout.shards, dtype=case.data_type, fill_value=_fill_of(case),
        filters=codecs[:-1], serializer=codecs[-1], compressors=None,
    )  # fmt: skip
    expected = _apply_writes(layout, _values(case, array.dtype), _fill_of(case), array.__setitem__)
    if layout.emptied_shard is not None:
        assert not (path / layout.emptied_shard).exists(), "a shard set back to the fill value is deleted"
    return expected


def _assert_zarrx_reads(path: Path, case: Case, expected: np.ndarray) -> None:
    layout = LAYOUTS[case.layout]
    array = zarrx.open_array(str(path))
    assert array.shape == layout.shape and array.dtype == expected.dtype
    assert array.shards == layout.shards
    assert array.chunks == (_middle(layout) if case.chain.startswith("nested") else layout.chunks)
    assert_same(np.asarray(array.fill_value, expected.dtype), np.asarray(_fill_of(case), expected.dtype))
    _assert_reads(expected, _indexed_read(array), zarrx_only=True)


# -- 1. zarr-python -> zarrx --------------------------------------------------------------------


@pytest.mark.parametrize("case", _cases(CASES))
def test_zarr_python_to_zarrx(tmp_path, case):
    expected = _write_zarr_python(tmp_path / "a", case)
    _assert_zarrx_reads(tmp_path / "a", case, expected)


class DataTypeCase(NamedTuple):
    zarr_python: Any  # dtype argument for zarr.create_array
    zarrx: Any  # dtype argument for zarrx.create_array
    fill_value: Any


#: zarr-python's data types, sharded with its defaults (zstd inner chunks, or vlen-* for strings)
DATA_TYPES = {
    "bool": DataTypeCase("bool", "bool", True),
    "int8": DataTypeCase("int8", "int8", -7),
    "uint32": DataTypeCase("uint32", "uint32", 2**32 - 1),
    "int64": DataTypeCase("int64", "int64", -(2**63)),
    "float16": DataTypeCase("float16", "float16", -0.0),
    "float32": DataTypeCase("float32", "float32", np.nan),
    "float64": DataTypeCase("float64", "float64", np.nan),
    "complex128": DataTypeCase("complex128", "complex128", complex(np.nan, 1.5)),
    "string": DataTypeCase(str, "string", "fill"),
    "bytes": DataTypeCase(VariableLengthBytes(), "bytes", b"\x00xy"),
    "fixed_length_utf32": DataTypeCase("<U5", "<U5", "aé日"),
    "null_terminated_bytes": DataTypeCase("S4", "S4", b"ab"),
    "datetime64": DataTypeCase("M8[ns]", "M8[ns]", 1_700_000_000_000_000_000),
    "timedelta64": DataTypeCase("m8[10s]", "m8[10s]", 17),
}


def _data_type_values(name: str, dtype: np.dtype, layout: Layout) -> np.ndarray:
    return sample_values(name, dtype, layout.shape, seed=len(name))


@pytest.mark.parametrize("layout_name", ["2-d", "3-d"])
@pytest.mark.parametrize("data_type", DATA_TYPES)
def test_zarr_python_data_types_to_zarrx(tmp_path, data_type, layout_name):
    """``zarr.create_array(chunks=inner, shards=outer)``, every data type, a non-default fill value."""
    case, layout = DATA_TYPES[data_type], LAYOUTS[layout_name]
    source = zarr.create_array(
        str(tmp_path / "a"), shape=layout.shape, chunks=layout.chunks, shards=layout.shards, dtype=case.zarr_python,
        fill_value=case.fill_value,
    )  # fmt: skip
    array = zarrx.open_array(str(tmp_path / "a"))
    fill = np.asarray(array.fill_value, array.dtype)[()]
    expected = _apply_writes(layout, _data_type_values(data_type, array.dtype, layout), fill, _zarr_python_write(source))

    assert (array.chunks, array.shards) == (layout.chunks, layout.shards) == (source.chunks, source.shards)
    assert_same(np.asarray(source.fill_value, array.dtype), np.asarray(fill, array.dtype))
    _assert_reads(expected, _indexed_read(array), zarrx_only=True)


# -- 2. tensorstore -> zarrx --------------------------------------------------------------------


@pytest.mark.parametrize("case", _cases(CASES + TRANSPOSE_CASES))
def test_tensorstore_to_zarrx(tmp_path, case):
    expected = _write_tensorstore(tmp_path / "a", case)
    _assert_zarrx_reads(tmp_path / "a", case, expected)


# -- 3. zarrx -> zarr-python and tensorstore ----------------------------------------------------


@pytest.mark.parametrize("case", _cases(CASES))
def test_zarrx_to_zarr_python(tmp_path, case):
    expected = _write_zarrx(tmp_path / "a", case)
    array = zarr.open_array(str(tmp_path / "a"), mode="r")
    layout = LAYOUTS[case.layout]
    assert (array.shape, array.shards) == (layout.shape, layout.shards)
    assert array.chunks == (_middle(layout) if case.chain.startswith("nested") else layout.chunks)
    _assert_reads(expected, _indexed_read(array), _native)


@pytest.mark.parametrize("case", _cases(CASES + TRANSPOSE_CASES))
def test_zarrx_to_tensorstore(tmp_path, case):
    expected = _write_zarrx(tmp_path / "a", case)
    array = _open_tensorstore(tmp_path / "a")
    layout = LAYOUTS[case.layout]
    assert array.shape == layout.shape
    assert tuple(array.chunk_layout.write_chunk.shape) == layout.shards
    _assert_reads(expected, _tensorstore_read(array))
    _assert_zarrx_reads(tmp_path / "a", case, expected)  # and zarrx reads back what it wrote


@pytest.mark.parametrize("data_type", DATA_TYPES)
def test_zarrx_data_types_to_zarr_python(tmp_path, data_type):
    """``zarrx.create_array(chunks=inner, shards=outer)``, every data type zarr-python reads."""
    case, layout = DATA_TYPES[data_type], LAYOUTS["2-d"]
    source = zarrx.create_array(
        str(tmp_path / "a"), shape=layout.shape, chunks=layout.chunks, shards=layout.shards, dtype=case.zarrx,
        fill_value=case.fill_value,
    )  # fmt: skip
    fill = np.asarray(source.fill_value, source.dtype)[()]
    expected = _apply_writes(layout, _data_type_values(data_type, source.dtype, layout), fill, source.__setitem__)
    array = zarr.open_array(str(tmp_path / "a"), mode="r")
    assert (array.chunks, array.shards) == (layout.chunks, layout.shards)
    _assert_reads(expected, _indexed_read(array), _native)


# -- 4. zarrx rewriting shards another library wrote --------------------------------------------

WRITERS = {"zarr-python": _write_zarr_python, "tensorstore": _write_tensorstore}
READERS = {
    "zarr-python": lambda path: _indexed_read(zarr.open_array(str(path), mode="r")),
    "tensorstore": lambda path: _tensorstore_read(_open_tensorstore(path)),
}
#: (writer, chain); zarr-python cannot write transpose before sharding (module docstring)
MERGE_CASES = [
    (writer, chain)
    for writer in WRITERS
    for chain in ["index-start-crc32c", "index-end-no-crc32c", "inner-big-endian-zstd", "nested", "transpose-before-sharding"]
    if (writer, chain) != ("zarr-python", "transpose-before-sharding")
]


@pytest.mark.parametrize("writer, chain", MERGE_CASES)
def test_zarrx_rewrites_part_of_foreign_shards(tmp_path, writer, chain):
    """zarrx merges new values into shards the other library wrote, and deletes one it empties;
    that library reads the result."""
    case = Case(chain, "2-d", "float32", np.nan)
    expected = WRITERS[writer](tmp_path / "a", case)
    array = zarrx.open_array(str(tmp_path / "a"), mode="r+")
    update = np.arange(2 * 9, dtype="float32").reshape(2, 9) - 3
    array[3:5, 2:11] = update  # four shards, each in part
    expected[3:5, 2:11] = update
    assert (tmp_path / "a/c/2/2").exists()  # holds one element, [9, 12]
    array.oindex[[0, 9], [0, 12]] = np.nan  # back to the fill value: corners, two of them in absent shards
    expected[np.ix_([0, 9], [0, 12])] = np.nan
    assert not (tmp_path / "a/c/2/2").exists()
    _assert_reads(expected, READERS[writer](tmp_path / "a"), _native)
    _assert_reads(expected, _indexed_read(zarrx.open_array(str(tmp_path / "a"))), zarrx_only=True)


def test_tensorstore_chunk_layout_sharding_to_zarrx(tmp_path):
    """tensorstore shards on its own when asked for write chunks bigger than read chunks, and
    leaves ``index_location`` out of the metadata (the spec's default, "end")."""
    layout = LAYOUTS["2-d"]
    schema = {
        "dtype": "uint16",
        "domain": {"shape": list(layout.shape)},
        "chunk_layout": {"write_chunk": {"shape": list(layout.shards)}, "read_chunk": {"shape": list(layout.chunks)}},
    }
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(tmp_path / "a")}, "schema": schema}
    source = ts.open(spec, create=True).result()
    (codec,) = json.loads((tmp_path / "a" / "zarr.json").read_text())["codecs"]
    assert codec["name"] == "sharding_indexed" and "index_location" not in codec["configuration"]
    values = sample_values("uint16", np.dtype("uint16"), layout.shape)
    expected = _apply_writes(layout, values, np.uint16(0), _tensorstore_write(source))
    array = zarrx.open_array(str(tmp_path / "a"))
    assert (array.chunks, array.shards) == (layout.chunks, layout.shards)
    _assert_reads(expected, _indexed_read(array), zarrx_only=True)


@pytest.mark.parametrize("chain", ["index-end-crc32c", "index-start-crc32c", "nested"])
def test_zarrx_empty_inner_chunks_kept_when_asked(tmp_path, chain):
    """With ``write_empty_chunks=True`` zarrx stores fill-valued inner chunks and shards; both readers agree."""
    case, layout = Case(chain, "2-d", "int16", 4), LAYOUTS["2-d"]
    codecs = [codec_from_json(codec, "codecs") for codec in CHAINS[chain](layout, 2)]
    array = zarrx.create_array(
        str(tmp_path / "a"), shape=layout.shape, chunks=layout.shards, dtype="int16", fill_value=4,
        serializer=codecs[0], compressors=None, write_empty_chunks=True,
    )  # fmt: skip
    expected = _apply_writes(layout, _values(case, array.dtype), np.int16(4), array.__setitem__)
    assert (tmp_path / "a" / layout.emptied_shard).exists()
    _assert_reads(expected, _indexed_read(zarr.open_array(str(tmp_path / "a"), mode="r")), _native)
    _assert_reads(expected, _tensorstore_read(_open_tensorstore(tmp_path / "a")))
    _assert_reads(expected, _indexed_read(zarrx.open_array(str(tmp_path / "a"))), zarrx_only=True)


# -- 5. what zarrx fetches from shards another library wrote ------------------------------------


@pytest.mark.parametrize("writer", WRITERS)
@pytest.mark.parametrize("chain, index_request", [
    ("index-end-crc32c", SuffixByteRequest(4 * 4 * 16 + 4)),
    ("index-start-crc32c", RangeByteRequest(0, 4 * 4 * 16 + 4)),
    ("index-end-no-crc32c", SuffixByteRequest(4 * 4 * 16)),
])  # fmt: skip
def test_point_read_of_a_foreign_shard_fetches_the_index_and_one_inner_chunk(tmp_path, writer, chain, index_request):
    """Layout "sparse": a shard holds 4 x 4 inner chunks of 4 x 4; an index entry is 16 bytes."""
    case = Case(chain, "sparse", "int32", -1)
    expected = WRITERS[writer](tmp_path / "a", case)
    store = CountingStore(LocalStore(tmp_path / "a"))
    array = zarrx.open_array(store)
    store.reset()
    assert_same(np.asarray(array[41, 6]), expected[41, 6])
    assert store.chunk_requests()[0] == ("c/2/0", index_request)
    # the second batch holds the index again (the check that the shard did not change) and the inner chunk
    assert len(store.chunk_requests()) == 3 and store.batches == 2
    index_size = index_request.suffix if isinstance(index_request, SuffixByteRequest) else index_request.end
    assert store.bytes_read == 2 * index_size + 4 * 4 * 4  # the index twice and one raw int32 inner chunk


# -- 6. disagreements ---------------------------------------------------------------------------


@pytest.mark.parametrize("writer", ["tensorstore", "zarrx"])
def test_zarr_python_cannot_read_transpose_before_sharding(tmp_path, writer):
    """zarr-python 3.1.6 compares the inner chunk shape with the *untransposed* shard shape, though
    the spec gives the sharding codec the shape the transpose codec produces (core spec, "Determination
    of encoded representations"). tensorstore and zarrx agree (test_tensorstore_to_zarrx,
    test_zarrx_to_tensorstore on the transpose-before-sharding cases)."""
    case = Case("transpose-before-sharding", "2-d", "int32", None)
    {"tensorstore": _write_tensorstore, "zarrx": _write_zarrx}[writer](tmp_path / "a", case)
    with pytest.raises(ValueError, match="divisible by the shard's inner `chunk_shape`"):
        zarr.open_array(str(tmp_path / "a"), mode="r")
