"""The registry's ML data types: bfloat16, float8/6/4, int2/int4/uint2/uint4 and the complex forms.

Each round-trips bit for bit through zarrx (both byte orders, sharded and compressed), its fill
values follow its registry page, the forms users hold (the ml_dtypes dtype, the registry name)
create it, a NumPy dtype zarrx cannot store faithfully is refused, and arrays cross both ways
with tensorstore and with zarrs (Rust, see ``tests/zarrs_peer.py``) bit for bit.
"""

from __future__ import annotations

import json

import ml_dtypes
import numpy as np
import pytest
import tensorstore as ts

import zarrx
from zarrx.codecs import BytesCodec, GzipCodec, ZstdCodec
from zarrx.dtypes import parse_data_type, resolve_data_type
from zarrx.errors import MetadataError

from .zarrs_peer import zarrs_read, zarrs_write

#: the registry's floats (and tensorstore's float8_e4m3fn): bits per value in the bytes codec's byte
FLOATS = {
    "bfloat16": 16, "float8_e3m4": 8, "float8_e4m3": 8, "float8_e4m3fn": 8, "float8_e4m3b11fnuz": 8,
    "float8_e4m3fnuz": 8, "float8_e5m2": 8, "float8_e5m2fnuz": 8, "float8_e8m0fnu": 8,
    "float6_e2m3fn": 6, "float6_e3m2fn": 6, "float4_e2m1fn": 4,
}  # fmt: skip
INTEGERS = {"int2": 2, "int4": 4, "uint2": 2, "uint4": 4}
#: complex forms: component float type (None: NumPy's own) and the in-memory dtype
COMPLEX = {
    "complex_bfloat16": ("bfloat16", np.dtype(ml_dtypes.bcomplex32)),
    "complex_float16": ("float16", np.dtype(ml_dtypes.complex32)),
    "complex_float32": ("float32", np.dtype(np.complex64)),
    "complex_float64": ("float64", np.dtype(np.complex128)),
    **{f"complex_{name}": (name, np.dtype(np.complex64)) for name in FLOATS if name not in ("bfloat16", "float8_e4m3fn")},
}
ALL = [*FLOATS, *INTEGERS, *COMPLEX]
#: the types tensorstore 0.1 writes (float8_e4m3, float6, uint2/uint4 and the complex forms it lacks)
TENSORSTORE = ["bfloat16", "float8_e3m4", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e4m3b11fnuz", "float8_e5m2",
               "float8_e5m2fnuz", "float8_e8m0fnu", "float4_e2m1fn", "int2", "int4"]  # fmt: skip
#: zarrs has every registry type (not tensorstore's float8_e4m3fn)
ZARRS = [name for name in ALL if name != "float8_e4m3fn"]


def _component_dtype(name: str) -> np.dtype:
    return np.dtype(getattr(ml_dtypes, name, None) or name)


def stored_size(name: str) -> int:
    """Bytes per element in the bytes codec, from the registry pages."""
    if name in COMPLEX:
        return 2 * _component_dtype(COMPLEX[name][0]).itemsize
    return 2 if name == "bfloat16" else 1


def stored_bits(name: str, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Random stored elements (every bit pattern the type has, NaN payloads included) as raw bytes."""
    rng = np.random.default_rng(seed)
    size = int(np.prod(shape))
    if name in COMPLEX:
        component = COMPLEX[name][0]
        bits = FLOATS.get(component, 8 * _component_dtype(component).itemsize)
        width = _component_dtype(component).itemsize
        raw = rng.integers(0, 2**bits, size * 2, dtype=np.uint64).astype(f"<u{width}")
        if COMPLEX[name][1] == np.complex64 and width == 1:
            # complex64 in memory keeps every value, not NaN payloads: draw no NaN
            raw[np.isnan(raw.view(_component_dtype(component)))] = 0
        return raw.view(np.uint8).reshape(*shape, 2 * width)
    bits = FLOATS.get(name) or INTEGERS[name]
    return rng.integers(0, 2**bits, size, dtype=np.uint64).astype(f"<u{stored_size(name)}").view(np.uint8).reshape(*shape, stored_size(name))


def in_memory(name: str, raw: np.ndarray) -> np.ndarray:
    """The values of stored elements, in the in-memory dtype zarrx uses (from ml_dtypes, not zarrx)."""
    shape = raw.shape[:-1]
    if name in COMPLEX:
        component, memory = COMPLEX[name]
        parts = np.ascontiguousarray(raw).view(f"<u{_component_dtype(component).itemsize}")
        parts = parts.astype(parts.dtype.newbyteorder("=")).view(_component_dtype(component))
        if memory.itemsize == 2 * parts.dtype.itemsize:
            return parts.view(memory).reshape(shape)
        values = parts.reshape(*shape, 2).astype(np.float32)
        return np.ascontiguousarray(values).view(np.complex64).reshape(shape)
    return np.ascontiguousarray(raw).view(f"<u{raw.shape[-1]}").astype(f"=u{raw.shape[-1]}").view(getattr(ml_dtypes, name)).reshape(shape)


def bits_of(values: np.ndarray) -> bytes:
    """The in-memory bytes of ``values``, for bit-exact comparison (NaN payloads, signed zeros)."""
    return np.ascontiguousarray(values).tobytes()


# -- round trips ------------------------------------------------------------------------------
@pytest.mark.parametrize("endian", ["little", "big"])
@pytest.mark.parametrize("name", ALL)
def test_round_trip_bit_exact(name, endian):
    raw = stored_bits(name, (9, 7))
    values = in_memory(name, raw)
    array = zarrx.create_array({}, "a", shape=(9, 7), chunks=(4, 3), dtype=name, compressors=[ZstdCodec(level=1)],
                               serializer=BytesCodec(endian=endian))  # fmt: skip
    assert array.dtype == values.dtype
    array[...] = values
    assert bits_of(array[...]) == bits_of(values)
    assert bits_of(array[1:8:3, ::-2]) == bits_of(values[1:8:3, ::-2])


@pytest.mark.parametrize("name", ["bfloat16", "int4", "float4_e2m1fn", "complex_float8_e5m2", "complex_bfloat16"])
def test_round_trip_sharded(name):
    values = in_memory(name, stored_bits(name, (8, 6), seed=3))
    array = zarrx.create_array({}, "a", shape=(8, 6), chunks=(2, 3), shards=(4, 6), dtype=name)
    array[...] = values
    array[1, 1] = values[0, 0]
    expected = values.copy()
    expected[1, 1] = values[0, 0]
    assert bits_of(array[...]) == bits_of(expected)


def test_bfloat16_big_endian_bytes_on_disk(tmp_path):
    values = np.array([1.5, -2.0, np.inf, 3.0e38], dtype=ml_dtypes.bfloat16)
    array = zarrx.create_array(str(tmp_path), shape=(4,), chunks=(4,), dtype="bfloat16", compressors=None,
                               serializer=BytesCodec(endian="big"))  # fmt: skip
    array[...] = values
    assert (tmp_path / "c" / "0").read_bytes() == values.view("<u2").astype(">u2").tobytes()


def test_sub_byte_upper_bits_are_ignored_and_written_as_zero(tmp_path):
    """int4 and float4 take one byte; the upper bits mean nothing (registry: "ignored")."""
    array = zarrx.create_array(str(tmp_path), shape=(4,), chunks=(4,), dtype="int4", compressors=None)
    array[...] = np.array([-1, 7, -8, 0], dtype=ml_dtypes.int4)
    assert (tmp_path / "c" / "0").read_bytes() == bytes([0x0F, 0x07, 0x08, 0x00])
    (tmp_path / "c" / "0").write_bytes(bytes([0xFF, 0xA7, 0x38, 0xF0]))  # another writer's upper bits
    back = array[...]
    assert back.tolist() == [-1, 7, -8, 0]
    assert back.view(np.uint8).tolist() == [0x0F, 0x07, 0x08, 0x00]


def test_complex_float8_takes_two_bytes_per_element(tmp_path):
    values = np.array([1.5 - 2j, np.nan + 0.25j], dtype=np.complex64)
    array = zarrx.create_array(str(tmp_path), shape=(2,), chunks=(2,), dtype="complex_float8_e4m3", compressors=None)
    array[...] = values
    stored = (tmp_path / "c" / "0").read_bytes()
    assert stored == np.array([1.5, -2, np.nan, 0.25]).astype(ml_dtypes.float8_e4m3).tobytes()
    np.testing.assert_array_equal(array[...], values)
    array[0] = 1.0625 + 0j  # rounds to the component type, as a cast would
    assert array[0] == np.complex64(1.0)


# -- fill values ------------------------------------------------------------------------------
#: (data type, fill value JSON, stored bytes of the fill value or None, written back as)
FILLS = [
    ("bfloat16", "NaN", "c07f", "NaN"),  # registry: "NaN" is 0x7fc0
    ("bfloat16", "0x7fc1", "c17f", "0x7fc1"),
    ("bfloat16", "-Infinity", "80ff", "-Infinity"),
    ("bfloat16", 1.5, "c03f", 1.5),
    ("float8_e4m3", "NaN", "7c", "NaN"),
    ("float8_e5m2", "NaN", "7e", "NaN"),
    ("float8_e3m4", "NaN", "78", "NaN"),
    ("float8_e4m3fnuz", "NaN", "80", "NaN"),
    ("float8_e5m2fnuz", "NaN", "80", "NaN"),
    ("float8_e4m3b11fnuz", "NaN", "80", "NaN"),
    ("float8_e8m0fnu", "NaN", "ff", "NaN"),
    ("float8_e8m0fnu", 0.0, "00", "0x00"),  # no zero: the nearest value, 2**-127
    ("float8_e8m0fnu", 1.0, "7f", "0x7f"),
    ("float8_e4m3", 1.5, "3c", "0x3c"),  # one-byte floats are written in the hex form
    ("float4_e2m1fn", -6.0, "0f", "0x0f"),
    ("float6_e3m2fn", "0x1f", "1f", "0x1f"),
    ("int4", -8, "08", -8),
    ("uint2", 3, "03", 3),
    ("complex_bfloat16", [1.5, "NaN"], "c03fc07f", [1.5, "NaN"]),
    ("complex_float16", ["Infinity", -0.0], "007c0080", ["Infinity", -0.0]),
    ("complex_float8_e5m2", [1.5, "0x7b"], "3e7b", ["0x3e", "0x7b"]),
    ("complex_float4_e2m1fn", [0.5, -1], "010a", ["0x01", "0x0a"]),
]


@pytest.mark.parametrize(("name", "fill_json", "fill_bytes", "written"), FILLS)
def test_fill_values(tmp_path, name, fill_json, fill_bytes, written):
    data_type = parse_data_type(name)
    fill = data_type.fill_value_from_json(fill_json)
    assert data_type.fill_value_to_json(fill) == written
    # what a reader sees where nothing is stored: the registry's bits for the JSON form
    array = zarrx.create_array(str(tmp_path), shape=(2,), chunks=(1,), dtype=name, fill_value=fill, compressors=None)
    assert json.loads((tmp_path / "zarr.json").read_text())["fill_value"] == written
    expected = in_memory(name, np.frombuffer(bytes.fromhex(fill_bytes), np.uint8).reshape(1, -1))
    assert bits_of(array[...]) == bits_of(np.concatenate([expected, expected]))
    assert array.metadata.data_type.to_stored(array[...], "<").tobytes() == bytes.fromhex(fill_bytes) * 2


BAD_FILLS = [
    ("float4_e2m1fn", "NaN"), ("float6_e2m3fn", "Infinity"), ("float8_e4m3fnuz", "-Infinity"),
    ("float8_e8m0fnu", "Infinity"), ("bfloat16", "0x7fc"), ("int4", 8), ("uint2", -1), ("int2", 1.5),
    ("complex_bfloat16", 1.0), ("float8_e4m3", "nan"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "fill_json"), BAD_FILLS)
def test_bad_fill_values_are_refused(name, fill_json):
    with pytest.raises(MetadataError, match="^fill_value"):
        parse_data_type(name).fill_value_from_json(fill_json)


@pytest.mark.parametrize(("name", "value"), [("float4_e2m1fn", 100.0), ("float6_e3m2fn", -1e6), ("float8_e4m3fn", 1e4),
                                             ("int4", 9), ("float4_e2m1fn", np.nan), ("uint4", -1)])  # fmt: skip
def test_user_fill_values_out_of_range_are_refused(name, value):
    with pytest.raises(MetadataError, match="^fill_value"):
        zarrx.create_array({}, "a", shape=(2,), dtype=name, fill_value=value)


# -- the forms users hold -------------------------------------------------------------------------
NUMPY_FORMS = {**{name: getattr(ml_dtypes, name) for name in [*FLOATS, *INTEGERS]},
               "complex_bfloat16": ml_dtypes.bcomplex32, "complex_float16": ml_dtypes.complex32}  # fmt: skip


@pytest.mark.parametrize("name", sorted(NUMPY_FORMS))
def test_numpy_dtype_and_registry_name_create_the_type(tmp_path, name):
    by_numpy = zarrx.create_array(str(tmp_path / "a"), shape=(3,), dtype=NUMPY_FORMS[name])
    by_name = zarrx.create_array(str(tmp_path / "b"), shape=(3,), dtype=name)
    by_json = zarrx.create_array(str(tmp_path / "c"), shape=(3,), dtype={"name": name})
    for folder, array in zip("abc", (by_numpy, by_name, by_json)):
        assert json.loads((tmp_path / folder / "zarr.json").read_text())["data_type"] == name
        assert array.dtype == np.dtype(NUMPY_FORMS[name])
    assert resolve_data_type(np.dtype(NUMPY_FORMS[name])).to_json() == name


@pytest.mark.parametrize("dtype", [ml_dtypes.int1, ml_dtypes.uint1])
def test_numpy_dtype_without_zarr_type_is_refused_not_stored_as_raw_bytes(tmp_path, dtype):
    """ml_dtypes.int1 is kind "V" like raw bytes; storing it as r8 would lose what it is."""
    for zarr_format in (3, 2):
        with pytest.raises(MetadataError, match="^dtype: the NumPy dtype (int1|uint1)"):
            zarrx.create_array(str(tmp_path / str(zarr_format)), shape=(3,), dtype=dtype, zarr_format=zarr_format)
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, "complex_float8_e4m3", "int4"])
def test_types_without_a_v2_form_are_refused_in_v2(tmp_path, dtype):
    with pytest.raises(MetadataError, match="^dtype: .* no Zarr v2 form"):
        zarrx.create_array(str(tmp_path), shape=(3,), dtype=dtype, zarr_format=2)


def test_complex_aliases_are_written_back_under_their_name(tmp_path):
    array = zarrx.create_array(str(tmp_path), shape=(2,), dtype="complex_float64", fill_value=1 + 2j)
    array[...] = [1j, 2]
    reopened = zarrx.open_array(str(tmp_path), mode="r+")
    reopened.attrs["x"] = 1
    assert json.loads((tmp_path / "zarr.json").read_text())["data_type"] == "complex_float64"
    assert reopened.dtype == np.complex128 and reopened[...].tolist() == [1j, 2]
    assert resolve_data_type(np.complex64).to_json() == "complex64"  # NumPy's type stays the core one


def test_dask_and_xarray_carry_bfloat16(tmp_path):
    import dask.array as da
    import xarray as xr

    import zarrx.xarray  # noqa: F401  (the .zarrx accessor)

    values = np.arange(12, dtype=np.float32).reshape(3, 4).astype(ml_dtypes.bfloat16)
    zarrx.to_zarr(da.from_array(values, chunks=(2, 2)), str(tmp_path / "d"), chunks=(2, 2))
    assert bits_of(zarrx.from_zarr(str(tmp_path / "d")).compute()) == bits_of(values)
    zarrx.create_group(str(tmp_path / "x"))
    xr.Dataset({"w": (("y", "x"), values)}).zarrx.to_zarr(str(tmp_path / "x"), mode="w")
    opened = xr.open_dataset(str(tmp_path / "x"), engine="zarrx", mask_and_scale=False)
    assert opened["w"].dtype == ml_dtypes.bfloat16 and bits_of(opened["w"].values) == bits_of(values)


# -- interop ------------------------------------------------------------------------------------
def _tensorstore(path, metadata=None):
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}}
    if metadata is not None:
        spec["metadata"] = metadata
    return ts.open(spec, create=metadata is not None).result()


@pytest.mark.parametrize("sharded", [False, True], ids=["chunks", "shards"])
@pytest.mark.parametrize("name", TENSORSTORE)
def test_tensorstore_writes_zarrx_reads(tmp_path, name, sharded):
    values = in_memory(name, stored_bits(name, (6, 5), seed=1))
    # tensorstore writes float8_e8m0fnu fill values wrong (test_tensorstore_misencodes_float8_e8m0fnu_fill):
    # its default, 0.0, is one both read alike
    fill = values[0, 0] if name != "float8_e8m0fnu" else parse_data_type(name).fill_value_from_json(0.0)
    codecs = [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd", "configuration": {"level": 1}}]
    if sharded:
        codecs = [{"name": "sharding_indexed", "configuration": {"chunk_shape": [2, 2], "codecs": codecs}}]
    chunk_shape = [4, 4] if sharded else [4, 2]
    store = _tensorstore(tmp_path, {"shape": [6, 5], "data_type": name, "codecs": codecs,
                                    "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunk_shape}},
                                    "fill_value": parse_data_type(name).fill_value_to_json(fill)})  # fmt: skip
    store[:4, :3].write(values[:4, :3]).result()
    expected = store.read().result()
    array = zarrx.open_array(str(tmp_path))
    assert array.dtype == expected.dtype
    assert bits_of(array[...]) == bits_of(expected)
    assert bits_of(array[4:, 3:]) == bits_of(np.full((2, 2), fill, dtype=array.dtype))


@pytest.mark.parametrize("sharded", [False, True], ids=["chunks", "shards"])
@pytest.mark.parametrize("name", TENSORSTORE)
def test_zarrx_writes_tensorstore_reads(tmp_path, name, sharded):
    values = in_memory(name, stored_bits(name, (6, 5), seed=2))
    array = zarrx.create_array(str(tmp_path), shape=(6, 5), chunks=(2, 2), shards=(4, 4) if sharded else None,
                               dtype=name, fill_value=values[5, 4])  # fmt: skip
    array[:4, :3] = values[:4, :3]
    read = _tensorstore(tmp_path).read().result()
    assert read.dtype == array.dtype
    assert bits_of(read) == bits_of(array[...])
    assert bits_of(read[5, 4]) == bits_of(values[5, 4])


@pytest.mark.parametrize("name", ZARRS)
def test_zarrs_writes_zarrx_reads(tmp_path, name):
    raw = stored_bits(name, (5, 4), seed=4)
    fill = 0 if name in INTEGERS else "0x00" if stored_size(name) == 1 else 0.0
    if name in COMPLEX:
        fill = ["0x00", "0x00"] if stored_size(name) == 2 else [0.0, 0.0]
    zarrs_write(tmp_path, {"shape": [5, 4], "data_type": name, "fill_value": fill,
                           "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 3]}},
                           "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
                           "codecs": [{"name": "bytes", "configuration": {"endian": "big"}}]}, raw)  # fmt: skip
    assert bits_of(zarrx.open_array(str(tmp_path))[...]) == bits_of(in_memory(name, raw))


@pytest.mark.parametrize("name", ZARRS)
def test_zarrx_writes_zarrs_reads(tmp_path, name):
    raw = stored_bits(name, (5, 4), seed=5)
    endian = "little" if name in COMPLEX else "big"  # see test_zarrs_misreads_big_endian_complex_edge_chunks
    array = zarrx.create_array(str(tmp_path), shape=(5, 4), chunks=(2, 3), dtype=name, serializer=BytesCodec(endian=endian),
                               compressors=[GzipCodec(level=1)])  # zarrs wants zstd's optional "checksum"  # fmt: skip
    array[...] = in_memory(name, raw)
    read = zarrs_read(tmp_path, stored_size(name))
    assert read.tobytes() == np.ascontiguousarray(raw).tobytes()


def test_tensorstore_misencodes_float8_e8m0fnu_fill(tmp_path):
    """Disagreement: tensorstore 0.1 writes float8_e8m0fnu fill values as numbers that are not the
    value of their bits (0x7f, which is 1.0, becomes 2**64), and reads the number 1.0 as 0x3f. zarrx
    follows the registry (a number is the value) and writes one-byte floats in the hex form, which
    tensorstore reads right."""
    store = _tensorstore(tmp_path, {"shape": [2], "data_type": "float8_e8m0fnu", "fill_value": "0x7f"})
    assert json.loads((tmp_path / "zarr.json").read_text())["fill_value"] == 2.0**64
    assert store.read().result().view(np.uint8).tolist() == [0x7F, 0x7F]
    assert zarrx.open_array(str(tmp_path)).fill_value.view(np.uint8) == 0xBF  # the number's value: 2**64
    zarrx.create_array(str(tmp_path / "zx"), shape=(2,), dtype="float8_e8m0fnu", fill_value=1.0)
    assert json.loads((tmp_path / "zx" / "zarr.json").read_text())["fill_value"] == "0x7f"
    assert _tensorstore(tmp_path / "zx").read().result().view(np.uint8).tolist() == [0x7F, 0x7F]


def test_zarrs_misreads_big_endian_complex_edge_chunks(tmp_path):
    """Disagreement: zarrs 0.23 swaps whole complex elements, not each component, when it reads an
    edge chunk stored big-endian -- its own writes too. zarrx reads them right."""
    raw = np.arange(20 * 8, dtype=np.uint8).view("V8").reshape(5, 4)
    zarrs_write(tmp_path, {"shape": [5, 4], "data_type": "complex64", "fill_value": [0, 0],
                           "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 3]}},
                           "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
                           "codecs": [{"name": "bytes", "configuration": {"endian": "big"}}]}, raw)  # fmt: skip
    assert zarrs_read(tmp_path, 8)[:2, :3].tobytes() == raw[:2, :3].tobytes()  # a whole chunk: right
    assert zarrs_read(tmp_path, 8)[:2, 3].tobytes() != raw[:2, 3].tobytes()  # an edge chunk: swapped
    assert zarrx.open_array(str(tmp_path))[...].tobytes() == raw.tobytes()
