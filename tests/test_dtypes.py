"""Tests for zarrx.dtypes, written from the specs' own examples.

Sources: the core spec's "Data types" / "Permitted fill values", the
zarr-extensions data type READMEs (string, bytes, fixed_length_utf32,
numpy.datetime64, numpy.timedelta64, struct, structured) and zarr-python 3.1's
data type documentation. Where the spec and zarr-python disagree, we follow
the spec and a test below says so.
"""

from __future__ import annotations

import base64
import datetime
import json
import struct as pystruct
import warnings

import numpy as np
import pytest
import zarr
import zarr.core.dtype as zarr_dtype
from hypothesis import given
from hypothesis import strategies as st

from zarrx.dtypes import DataType, parse_data_type, resolve_data_type
from zarrx.errors import MetadataError, UnsupportedExtensionError

STRUCT_POINT = {
    "name": "struct",
    "configuration": {
        "fields": [{"name": "x", "data_type": "float32"}, {"name": "y", "data_type": "float32"}]
    },
}
STRUCT_NESTED = {
    "name": "struct",
    "configuration": {
        "fields": [{"name": "point", "data_type": STRUCT_POINT}, {"name": "value", "data_type": "float64"}]
    },
}
STRUCT_TIMESTAMP = {
    "name": "struct",
    "configuration": {
        "fields": [
            {
                "name": "timestamp",
                "data_type": {"name": "numpy.datetime64", "configuration": {"unit": "s", "scale_factor": 1}},
            },
            {"name": "value", "data_type": "float32"},
        ]
    },
}


def datetime_json(unit: str = "us", scale_factor: int = 10, name: str = "numpy.datetime64") -> dict:
    return {"name": name, "configuration": {"unit": unit, "scale_factor": scale_factor}}


def utf32_json(length_bytes: int) -> dict:
    return {"name": "fixed_length_utf32", "configuration": {"length_bytes": length_bytes}}


def length_json(name: str, length_bytes: int) -> dict:
    return {"name": name, "configuration": {"length_bytes": length_bytes}}


def assert_scalar_of(scalar, data_type):
    """``scalar`` is a scalar of ``data_type`` (NumPy "U" and "S" scalars do not keep their width)."""
    if data_type.item_size is None:
        assert isinstance(scalar, (str, bytes))
        return
    found = np.asarray(scalar).dtype
    expected = data_type.numpy_dtype
    assert found == expected or (found.kind == expected.kind in "US" and found.itemsize <= expected.itemsize)


def scalar_bytes(scalar, data_type) -> bytes:
    """The in-memory bytes of a fixed-size scalar of ``data_type``."""
    return np.asarray(scalar, dtype=data_type.numpy_dtype).tobytes()


def bits_of(value: object, dtype: str) -> int:
    """The bit pattern of a float/complex scalar, as an integer (complex: the raw bytes)."""
    array = np.array(value, dtype=dtype).reshape(1)
    return int.from_bytes(array.view(np.uint8).tobytes(), "little")


# --- data_type JSON round trip --------------------------------------------------------------

CANONICAL_DATA_TYPES = [
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "complex64", "complex128", "r8", "r16", "r48",
    "string", "bytes", utf32_json(48), utf32_json(4),
    length_json("null_terminated_bytes", 3), length_json("raw_bytes", 4),
    datetime_json("us", 10), datetime_json("s", 10), datetime_json("μs", 1), datetime_json("generic", 1),
    datetime_json("ns", 1, "numpy.timedelta64"), datetime_json("as", 2**31 - 1, "numpy.timedelta64"),
    STRUCT_POINT, STRUCT_NESTED, STRUCT_TIMESTAMP,
]  # fmt: skip

NUMPY_DTYPES = {
    "bool": "?", "int8": "i1", "int16": "i2", "int32": "i4", "int64": "i8", "uint8": "u1",
    "uint16": "u2", "uint32": "u4", "uint64": "u8", "float16": "f2", "float32": "f4",
    "float64": "f8", "complex64": "c8", "complex128": "c16", "r8": "V1", "r16": "V2", "r48": "V6",
}  # fmt: skip


@pytest.mark.parametrize("data_type_json", CANONICAL_DATA_TYPES, ids=repr)
def test_data_type_round_trip(data_type_json):
    data_type = parse_data_type(data_type_json)
    assert isinstance(data_type, DataType)
    assert data_type.to_json() == data_type_json
    assert parse_data_type(data_type.to_json()) == data_type
    assert hash(parse_data_type(data_type.to_json())) == hash(data_type)


@pytest.mark.parametrize(("name", "numpy_dtype"), NUMPY_DTYPES.items())
def test_core_numpy_dtypes(name, numpy_dtype):
    data_type = parse_data_type(name)
    assert data_type.numpy_dtype == np.dtype(numpy_dtype)
    assert data_type.item_size == np.dtype(numpy_dtype).itemsize
    assert data_type.needs_endian == (
        np.dtype(numpy_dtype).itemsize > 1 and not name.startswith("r") and name != "bool"
    )
    assert parse_data_type({"name": name}).to_json() == name  # object form is written short-hand
    assert parse_data_type({"name": name, "configuration": {}}).to_json() == name


@pytest.mark.parametrize(
    ("data_type_json", "numpy_dtype", "item_size", "needs_endian"),
    [
        ("string", np.dtypes.StringDType(), None, False),
        ("bytes", np.dtype(object), None, False),
        (utf32_json(48), np.dtype("U12"), 48, True),
        (length_json("null_terminated_bytes", 3), np.dtype("S3"), 3, False),
        (length_json("raw_bytes", 4), np.dtype("V4"), 4, False),
        (datetime_json("us", 10), np.dtype("M8[10us]"), 8, True),
        (datetime_json("μs", 1), np.dtype("M8[us]"), 8, True),
        (datetime_json("generic", 1), np.dtype("M8"), 8, True),
        (datetime_json("h", 3, "numpy.timedelta64"), np.dtype("m8[3h]"), 8, True),
        (STRUCT_POINT, np.dtype([("x", "f4"), ("y", "f4")]), 8, True),
        (STRUCT_NESTED, np.dtype([("point", [("x", "f4"), ("y", "f4")]), ("value", "f8")]), 16, True),
        (
            {"name": "struct", "configuration": {"fields": [{"name": "a", "data_type": "uint8"}]}},
            np.dtype([("a", "u1")]),
            1,
            False,
        ),
    ],
    ids=repr,
)
def test_extension_numpy_dtypes(data_type_json, numpy_dtype, item_size, needs_endian):
    data_type = parse_data_type(data_type_json)
    assert data_type.numpy_dtype == numpy_dtype
    assert data_type.item_size == item_size
    assert data_type.is_variable_length == (item_size is None)
    assert data_type.needs_endian == needs_endian


def test_struct_remembers_legacy_name():
    # structured README: legacy arrays may omit the bytes codec's endian (read as little-endian),
    # so the codec layer needs to know; the flag is not part of the JSON or of equality
    legacy = parse_data_type(
        {"name": "structured", "configuration": {"fields": [["x", "float32"], ["y", "float32"]]}}
    )
    assert legacy.legacy and not parse_data_type(STRUCT_POINT).legacy
    assert legacy == parse_data_type(STRUCT_POINT)
    assert legacy.to_json() == STRUCT_POINT


def test_struct_layout_is_packed():
    # struct README, "Bytes codec encoding": int32, uint8, float64 -> 13 bytes at offsets 0, 4, 5
    data_type = parse_data_type(
        {
            "name": "struct",
            "configuration": {
                "fields": [
                    {"name": "id", "data_type": "int32"},
                    {"name": "flags", "data_type": "uint8"},
                    {"name": "value", "data_type": "float64"},
                ]
            },
        }
    )
    dtype = data_type.numpy_dtype
    assert dtype.itemsize == 13
    assert [dtype.fields[name][1] for name in dtype.names] == [0, 4, 5]
    nested = parse_data_type(STRUCT_NESTED).numpy_dtype
    assert nested.itemsize == 16 and nested.fields["value"][1] == 8


@pytest.mark.parametrize(
    ("read", "written"),
    [
        ("variable_length_bytes", "bytes"),  # zarr-python 3.1's name
        ({"name": "bytes", "configuration": {}}, "bytes"),
        ({"name": "string"}, "string"),
        # legacy "structured": [name, data_type] pairs, written back as "struct"
        (
            {"name": "structured", "configuration": {"fields": [["x", "float32"], ["y", "float32"]]}},
            STRUCT_POINT,
        ),
        (
            {"name": "structured", "configuration": {"fields": STRUCT_POINT["configuration"]["fields"]}},
            STRUCT_POINT,
        ),
        # struct README changelog: a field data type may be an object without configuration
        (
            {
                "name": "struct",
                "configuration": {"fields": [{"name": "x", "data_type": {"name": "float64"}}]},
            },
            {"name": "struct", "configuration": {"fields": [{"name": "x", "data_type": "float64"}]}},
        ),
        ({"name": "float32", "must_understand": True}, "float32"),
    ],
    ids=repr,
)
def test_data_type_read_forms(read, written):
    assert parse_data_type(read).to_json() == written


# --- resolve_data_type -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dtype_like", "expected"),
    [
        ("<f4", "float32"),
        (">f4", "float32"),
        (">i2", "int16"),
        ("int", "int64"),
        (np.dtype("uint16"), "uint16"),
        (np.float64, "float64"),
        (np.dtype("q"), "int64"),  # 'q' and 'l' are distinct int64 types on Linux
        (bool, "bool"),
        ("?", "bool"),
        ("c16", "complex128"),
        ("float32", "float32"),
        ("r16", "r16"),
        ("V4", "r32"),  # the core spec's raw bits, not zarr-python's raw_bytes
        ("string", "string"),
        (str, "string"),
        (np.dtypes.StringDType(), "string"),
        ("bytes", "bytes"),
        ("variable_length_bytes", "bytes"),
        (bytes, "bytes"),
        ("U5", utf32_json(20)),
        (">U3", utf32_json(12)),
        ("S3", length_json("null_terminated_bytes", 3)),
        ("M8[ns]", datetime_json("ns", 1)),
        ("M8[10s]", datetime_json("s", 10)),
        (">m8[3h]", datetime_json("h", 3, "numpy.timedelta64")),
        ("M8", datetime_json("generic", 1)),
        ([("x", "<f4"), ("y", ">f4")], STRUCT_POINT),
        ([("point", [("x", "f4"), ("y", "f4")]), ("value", "f8")], STRUCT_NESTED),
        ([("timestamp", "M8[s]"), ("value", "f4")], STRUCT_TIMESTAMP),
        (datetime_json("us", 10), datetime_json("us", 10)),
        (STRUCT_POINT, STRUCT_POINT),
        (parse_data_type("int8"), "int8"),
    ],
    ids=repr,
)
def test_resolve_data_type(dtype_like, expected):
    data_type = resolve_data_type(dtype_like)
    assert data_type.to_json() == expected
    assert data_type.numpy_dtype.isnative


def test_resolve_keeps_instance():
    data_type = parse_data_type(STRUCT_POINT)
    assert resolve_data_type(data_type) is data_type


@pytest.mark.parametrize(
    ("dtype_like", "message"),
    [
        ("O", "pass dtype='string'"),
        (object, "pass dtype='string'"),
        ("not-a-dtype", "dtype: 'not-a-dtype'"),
        ("f16", "dtype:"),  # long double: no Zarr type
        ("U0", "dtype:"),
        ("S", "dtype:"),
        ("V0", "dtype:"),
        (np.dtype([("a", "i1"), ("b", "f8")], align=True), "repack_fields"),
        (np.dtype({"names": ["a"], "formats": ["i4"], "itemsize": 8}), "padding"),
        ([("a", "f4", (3,))], "subarray"),
        ([("a", "O")], "pass dtype='string'"),
        ("struct", "dtype.configuration.fields"),
        (
            {"name": "numpy.datetime64", "configuration": {"unit": "x", "scale_factor": 1}},
            "dtype.configuration.unit",
        ),
    ],
    ids=repr,
)
def test_resolve_data_type_rejects(dtype_like, message):
    with pytest.raises(
        MetadataError, match=f"^{message}" if message.startswith("dtype") else message
    ) as info:
        resolve_data_type(dtype_like)
    assert str(info.value).startswith("dtype")


def test_resolve_unknown_name_object():
    with pytest.raises(UnsupportedExtensionError, match="^dtype: unknown data type 'float8'"):
        resolve_data_type({"name": "float8"})


# --- fill values -----------------------------------------------------------------------------

# (data_type, JSON fill value read, expected scalar, canonical JSON written)
FILL_VALUES = [
    ("bool", True, np.True_, True),
    ("bool", False, np.False_, False),
    ("int8", -128, np.int8(-128), -128),
    ("int8", 127, np.int8(127), 127),
    ("int64", -(2**63), np.int64(-(2**63)), -(2**63)),
    ("uint64", 2**64 - 1, np.uint64(2**64 - 1), 2**64 - 1),
    ("uint8", 0, np.uint8(0), 0),
    ("float32", 1.5, np.float32(1.5), 1.5),
    ("float32", 1, np.float32(1), 1.0),
    ("float64", -0.0, np.float64(-0.0), -0.0),
    ("float64", 0.1, np.float64(0.1), 0.1),
    ("float32", 0.1, np.float32(0.1), float(np.float32(0.1))),
    ("float16", 65504, np.float16(65504), 65504.0),
    ("float16", 1e10, np.float16(np.inf), "Infinity"),  # rounds to nearest: infinity
    ("float64", 2**1100, np.float64(np.inf), "Infinity"),
    ("float32", "Infinity", np.float32(np.inf), "Infinity"),
    ("float64", "-Infinity", np.float64(-np.inf), "-Infinity"),
    ("float32", "NaN", np.float32(np.nan), "NaN"),
    ("float32", "0x7fc00000", np.float32(np.nan), "NaN"),  # the core spec's example
    ("float32", "0x3f800000", np.float32(1.0), 1.0),
    ("float32", "0x7F800000", np.float32(np.inf), "Infinity"),
    ("float16", "0x3c00", np.float16(1.0), 1.0),
    ("float64", "0x3ff0000000000000", np.float64(1.0), 1.0),
    ("complex64", [1, 2], np.complex64(1 + 2j), [1.0, 2.0]),
    ("complex128", ["-Infinity", "NaN"], np.complex128(complex(-np.inf, np.nan)), ["-Infinity", "NaN"]),
    ("complex64", ["0x3f800000", -0.5], np.complex64(1 - 0.5j), [1.0, -0.5]),
    ("r16", [1, 255], np.void(b"\x01\xff"), [1, 255]),
    ("r8", [0], np.void(b"\x00"), [0]),
    ("string", "foo", "foo", "foo"),  # string README example
    ("string", "", "", ""),
    ("string", "héllo ✓", "héllo ✓", "héllo ✓"),
    ("bytes", [1, 2, 3], b"\x01\x02\x03", "AQID"),  # bytes README examples
    ("bytes", "AQID", b"\x01\x02\x03", "AQID"),
    ("bytes", [], b"", ""),
    ("bytes", "", b"", ""),
    (utf32_json(48), "", np.str_(""), ""),  # fixed_length_utf32 README example
    (utf32_json(48), "foo", np.str_("foo"), "foo"),
    (utf32_json(12), "Hi✓", np.str_("Hi✓"), "Hi✓"),
    (length_json("null_terminated_bytes", 3), "YWI=", np.bytes_(b"ab"), "YWI="),
    (length_json("null_terminated_bytes", 3), "", np.bytes_(b""), ""),
    (length_json("raw_bytes", 2), "AQI=", np.void(b"\x01\x02"), "AQI="),
    (datetime_json("us", 10), 5, np.datetime64(50, "us"), 5),
    (datetime_json("s", 10), -1, np.datetime64(-10, "s"), -1),
    (datetime_json("s", 1), 2**63 - 1, np.datetime64(2**63 - 1, "s"), 2**63 - 1),
    (datetime_json("ns", 1, "numpy.timedelta64"), 7, np.timedelta64(7, "ns"), 7),
    (datetime_json("D", 1, "numpy.timedelta64"), 0, np.timedelta64(0, "D"), 0),
    (
        STRUCT_POINT,
        {"x": 1.23, "y": 4.56},
        None,
        {"x": float(np.float32(1.23)), "y": float(np.float32(4.56))},
    ),
    (STRUCT_POINT, {"x": 0.0, "y": 0.0}, None, {"x": 0.0, "y": 0.0}),
    (
        STRUCT_NESTED,
        {"point": {"x": 1.0, "y": 2.0}, "value": 3.14},
        None,
        {"point": {"x": 1.0, "y": 2.0}, "value": 3.14},
    ),
    (STRUCT_POINT, {"x": "NaN", "y": "-Infinity"}, None, {"x": "NaN", "y": "-Infinity"}),
    (STRUCT_TIMESTAMP, {"timestamp": "NaT", "value": 1}, None, {"timestamp": -(2**63), "value": 1.0}),
    # legacy "structured" base64 of the packed little-endian bytes
    (STRUCT_POINT, base64.b64encode(pystruct.pack("<ff", 1.5, -2.0)).decode(), None, {"x": 1.5, "y": -2.0}),
    (STRUCT_POINT, "AAAAAAAAAAA=", None, {"x": 0.0, "y": 0.0}),
]


def _same_scalar(found, expected):
    if isinstance(expected, (np.floating, np.complexfloating)):
        assert type(found) is type(expected)
        assert bits_of(found, expected.dtype) == bits_of(expected, expected.dtype) or (
            np.isnan(expected) and np.isnan(found)
        )
    elif isinstance(expected, (np.datetime64, np.timedelta64)):
        assert found.dtype.kind == expected.dtype.kind
        assert found == expected
    else:
        assert type(found) is type(expected) and found == expected


@pytest.mark.parametrize(("data_type_json", "read", "expected", "written"), FILL_VALUES, ids=repr)
def test_fill_value(data_type_json, read, expected, written):
    data_type = parse_data_type(data_type_json)
    scalar = data_type.fill_value_from_json(read)
    if expected is not None:
        _same_scalar(scalar, expected)
    assert_scalar_of(scalar, data_type)
    assert data_type.fill_value_to_json(scalar) == written
    # the written form reads back to the same bits
    again = data_type.fill_value_from_json(written)
    if data_type.item_size is None:
        assert again == scalar
    else:
        assert scalar_bytes(again, data_type) == scalar_bytes(scalar, data_type)


@pytest.mark.parametrize(
    ("name", "hex_value"),
    [
        ("float16", "0x7e01"),
        ("float16", "0xfe00"),
        ("float16", "0x7c01"),  # signalling NaN
        ("float32", "0x7fc00001"),
        ("float32", "0xffc00000"),  # negative NaN is not "NaN"
        ("float32", "0x7f800001"),  # signalling NaN
        ("float32", "0x7fffffff"),
        ("float64", "0x7ff8000000000001"),
        ("float64", "0xfff8000000000000"),
        ("float64", "0x7ff0000000000001"),
    ],
)
def test_nan_payload_is_bit_exact(name, hex_value):
    data_type = parse_data_type(name)
    scalar = data_type.fill_value_from_json(hex_value)
    assert isinstance(scalar, data_type.numpy_dtype.type)
    assert np.isnan(scalar)
    assert bits_of(scalar, name) == int(hex_value, 16)
    assert data_type.fill_value_to_json(scalar) == hex_value.lower()


@pytest.mark.parametrize(
    ("name", "bits"), [("float16", 0x7E00), ("float32", 0x7FC00000), ("float64", 0x7FF8000000000000)]
)
def test_canonical_nan(name, bits):
    data_type = parse_data_type(name)
    assert bits_of(data_type.fill_value_from_json("NaN"), name) == bits
    assert (
        data_type.fill_value_to_json(np.array(bits, dtype=f"u{data_type.item_size}").view(name)[()]) == "NaN"
    )
    assert data_type.fill_value_to_json(float("nan")) == "NaN"


def test_complex_nan_payload_is_bit_exact():
    data_type = parse_data_type("complex64")
    scalar = data_type.fill_value_from_json(["0x7fc00001", "0xffc00000"])
    assert np.array(scalar).reshape(1).view(np.uint32).tolist() == [0x7FC00001, 0xFFC00000]
    assert data_type.fill_value_to_json(scalar) == ["0x7fc00001", "0xffc00000"]


def test_struct_field_nan_payload_is_bit_exact():
    data_type = parse_data_type(STRUCT_POINT)
    scalar = data_type.fill_value_from_json({"x": "0x7fc00001", "y": 1})
    assert np.array(scalar["x"]).view(np.uint32) == 0x7FC00001
    assert data_type.fill_value_to_json(scalar) == {"x": "0x7fc00001", "y": 1.0}


@given(st.integers(0, 2**16 - 1), st.integers(0, 2**32 - 1), st.integers(0, 2**64 - 1))
def test_every_float_bit_pattern_round_trips(bits16, bits32, bits64):
    for name, bits in (("float16", bits16), ("float32", bits32), ("float64", bits64)):
        data_type = parse_data_type(name)
        hex_value = f"0x{bits:0{2 * data_type.item_size}x}"
        scalar = data_type.fill_value_from_json(hex_value)
        written = data_type.fill_value_to_json(scalar)
        assert bits_of(data_type.fill_value_from_json(written), name) == bits


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_float64_numbers_are_exact(value):
    data_type = parse_data_type("float64")
    assert data_type.fill_value_to_json(data_type.fill_value_from_json(value)) == value


def test_float_rounds_half_to_even():
    # 1 + 2**-11 lies halfway between two float16 values; ties go to the even mantissa (1.0)
    assert parse_data_type("float16").fill_value_from_json(1 + 2**-11) == np.float16(1.0)
    assert parse_data_type("float16").fill_value_from_json(1 + 3 * 2**-11) == np.float16(1 + 2**-9)
    # integers beyond 2**53 round to nearest float64 too (2**53 + 1 -> 2**53)
    assert parse_data_type("float64").fill_value_from_json(2**53 + 1) == np.float64(2**53)


@pytest.mark.parametrize(
    "data_type_json", [datetime_json("s", 10), datetime_json("ns", 1, "numpy.timedelta64")], ids=repr
)
@pytest.mark.parametrize("nat", ["NaT", -(2**63)])
def test_nat_both_ways(data_type_json, nat):
    data_type = parse_data_type(data_type_json)
    scalar = data_type.fill_value_from_json(nat)
    assert np.isnat(scalar)
    assert scalar.dtype == data_type.numpy_dtype
    assert data_type.fill_value_to_json(scalar) == -(2**63)  # written as the integer, as zarr-python does
    assert np.isnat(data_type.default_fill_value())


def test_generic_unit_holds_only_nat():
    data_type = parse_data_type(datetime_json("generic", 1))
    assert np.isnat(data_type.fill_value_from_json("NaT"))
    with pytest.raises(MetadataError, match="^fill_value: .*generic"):
        data_type.fill_value_from_json(5)


@pytest.mark.parametrize(
    ("data_type_json", "value", "expected_json"),
    [
        (datetime_json("s", 10), np.datetime64("2020-01-01"), 157783680),
        (datetime_json("s", 10), "2020-01-01T00:00:10", 157783681),
        (datetime_json("s", 1), datetime.datetime(1970, 1, 1, 0, 1), 60),
        (datetime_json("s", 1), 42, 42),
        (datetime_json("s", 1), "NaT", -(2**63)),
        (datetime_json("ms", 1, "numpy.timedelta64"), np.timedelta64(2, "s"), 2000),
        (datetime_json("ms", 1, "numpy.timedelta64"), datetime.timedelta(seconds=1), 1000),
        ("float32", "0x7fc00001", "0x7fc00001"),
        ("float32", "Infinity", "Infinity"),
        ("float64", 3, 3.0),
        ("int16", 3.0, 3),
        ("int16", np.int64(-5), -5),
        ("uint8", True, 1),
        ("bool", 1, True),
        ("complex128", 1 + 2j, [1.0, 2.0]),
        ("complex64", ("NaN", 1), ["NaN", 1.0]),
        ("r16", b"\x01\x02", [1, 2]),
        ("r16", [1, 2], [1, 2]),
        ("bytes", b"\x00\xff", "AP8="),
        ("string", "a", "a"),
        (utf32_json(8), "ab", "ab"),
        (length_json("null_terminated_bytes", 4), b"ab", "YWI="),
        (length_json("raw_bytes", 2), b"\x01\x02", "AQI="),
        (STRUCT_POINT, {"x": 1, "y": 2}, {"x": 1.0, "y": 2.0}),
        (STRUCT_POINT, (1, 2), {"x": 1.0, "y": 2.0}),
        (STRUCT_POINT, np.array((1, 2), dtype=[("x", ">f4"), ("y", ">f4")])[()], {"x": 1.0, "y": 2.0}),
        (STRUCT_NESTED, {"point": (1, 2), "value": 3}, {"point": {"x": 1.0, "y": 2.0}, "value": 3.0}),
    ],
    ids=repr,
)
def test_cast_scalar(data_type_json, value, expected_json):
    data_type = parse_data_type(data_type_json)
    scalar = data_type.cast_scalar(value)
    assert_scalar_of(scalar, data_type)
    assert data_type.fill_value_to_json(scalar) == expected_json
    assert data_type.fill_value_to_json(value) == expected_json


@pytest.mark.parametrize("data_type_json", CANONICAL_DATA_TYPES, ids=repr)
def test_default_fill_value_round_trips(data_type_json):
    data_type = parse_data_type(data_type_json)
    default = data_type.default_fill_value()
    written = data_type.fill_value_to_json(default)
    again = data_type.fill_value_from_json(written)
    if data_type.item_size is None:
        assert again == default
    else:
        assert scalar_bytes(again, data_type) == scalar_bytes(default, data_type)


# --- bad metadata ----------------------------------------------------------------------------

BAD_FILL_VALUES = [
    ("bool", 1),
    ("bool", "true"),
    ("bool", None),
    ("int8", 128),
    ("int8", -129),
    ("uint8", -1),
    ("uint64", 2**64),
    ("int64", 2**63),
    ("int32", 1.5),
    ("int32", 1.0),  # a JSON number with a fraction part
    ("int32", True),
    ("int32", "1"),
    ("int32", None),
    ("float32", True),
    ("float32", "nan"),
    ("float32", "inf"),
    ("float32", "1.5"),
    ("float32", "0x7fc0"),  # hex of the wrong width
    ("float32", "0x7fc0000000"),
    ("float16", "0x7fc00000"),
    ("float64", "0x7fc00000"),
    ("float32", "0x7fc0_000"),
    ("float32", "0xzzzzzzzz"),
    ("float32", None),
    ("float32", [1.0]),
    ("complex64", 1.0),
    ("complex64", [1.0]),
    ("complex64", [1.0, 2.0, 3.0]),
    ("complex64", [1.0, "x"]),
    ("complex64", {"real": 1}),
    ("r16", [1]),
    ("r16", [1, 256]),
    ("r16", [1, -1]),
    ("r16", [1, 2.0]),
    ("r16", "AQI="),
    ("r16", 0),
    ("string", 1),
    ("string", None),
    ("string", ["a"]),
    ("bytes", [256]),
    ("bytes", [1.5]),
    ("bytes", "not base64!"),
    ("bytes", "AQI"),  # missing padding
    ("bytes", 5),
    ("bytes", None),
    (utf32_json(8), "abc"),  # more than length_bytes / 4 code points
    (utf32_json(8), "ab\x00"),
    (utf32_json(8), 1),
    (utf32_json(8), [97]),
    (length_json("null_terminated_bytes", 2), "YWJj"),  # b"abc" is too long
    (length_json("null_terminated_bytes", 2), [97]),
    (length_json("raw_bytes", 2), "AQID"),
    (length_json("raw_bytes", 2), [1, 2]),
    (datetime_json("s", 1), 2**63),
    (datetime_json("s", 1), -(2**63) - 1),
    (datetime_json("s", 1), 1.5),
    (datetime_json("s", 1), "nat"),
    (datetime_json("s", 1), "2020-01-01"),
    (datetime_json("s", 1), True),
    (datetime_json("s", 1, "numpy.timedelta64"), None),
    (STRUCT_POINT, {"x": 1.0}),  # every field is required
    (STRUCT_POINT, {"x": 1.0, "y": 2.0, "z": 3.0}),
    (STRUCT_POINT, [1.0, 2.0]),
    (STRUCT_POINT, "AAAA"),  # base64 of the wrong size
    (STRUCT_POINT, "%%%"),
    (STRUCT_POINT, None),
]


@pytest.mark.parametrize(("data_type_json", "value"), BAD_FILL_VALUES, ids=repr)
def test_bad_fill_value(data_type_json, value):
    data_type = parse_data_type(data_type_json)
    with pytest.raises(MetadataError, match="^fill_value"):
        data_type.fill_value_from_json(value)


@pytest.mark.parametrize(
    ("data_type_json", "value", "field"),
    [
        (STRUCT_POINT, {"x": 1.0, "y": "nope"}, "fill_value.y"),
        (STRUCT_NESTED, {"point": {"x": 1.0, "y": True}, "value": 1}, "fill_value.point.y"),
        (STRUCT_NESTED, {"point": {"x": 1.0}, "value": 1}, "fill_value.point"),
        (STRUCT_TIMESTAMP, {"timestamp": 1.5, "value": 1}, "fill_value.timestamp"),
    ],
    ids=repr,
)
def test_bad_struct_fill_value_names_the_field(data_type_json, value, field):
    with pytest.raises(MetadataError, match=f"^{field}:"):
        parse_data_type(data_type_json).fill_value_from_json(value)


@pytest.mark.parametrize(
    ("data_type_json", "value"),
    [
        ("int8", 300),
        ("int8", 1.5),
        ("uint8", -1),
        ("int8", "1"),
        ("int8", None),
        ("bool", "false"),
        ("bool", None),
        ("float32", None),
        ("float32", "one"),
        ("float64", [1.0]),
        ("complex64", "x"),
        ("complex64", [1.0]),
        ("string", 1),
        ("string", b"a"),
        ("bytes", "a"),
        (utf32_json(4), "ab"),
        (length_json("null_terminated_bytes", 1), b"ab"),
        (length_json("raw_bytes", 2), b"\x01"),
        ("r16", b"\x01"),
        (datetime_json("s", 1), "not a date"),
        (datetime_json("s", 1), object()),
        (STRUCT_POINT, {"x": 1}),
        (STRUCT_POINT, (1, 2, 3)),
        (STRUCT_POINT, 5),
    ],
    ids=repr,
)
def test_bad_cast_scalar(data_type_json, value):
    data_type = parse_data_type(data_type_json)
    with pytest.raises(MetadataError, match="^fill_value"):
        data_type.cast_scalar(value)


BAD_DATA_TYPES = [
    # (JSON, error class, message prefix)
    ("float128", UnsupportedExtensionError, "data_type: unknown data type 'float128'"),
    ({"name": "float7_e3m3"}, UnsupportedExtensionError, "data_type: unknown data type 'float7_e3m3'"),
    # must_understand: false cannot make an unknown data type skippable
    ({"name": "float7_e3m3", "must_understand": False}, UnsupportedExtensionError, "data_type: unknown"),
    ({"name": "float32", "must_understand": False}, MetadataError, "data_type.must_understand"),
    ("", MetadataError, "data_type"),
    (5, MetadataError, "data_type"),
    (None, MetadataError, "data_type"),
    ({"configuration": {}}, MetadataError, "data_type.name"),
    ({"name": "int32", "configuration": {"endian": "little"}}, MetadataError, "data_type.configuration"),
    ({"name": "string", "configuration": {"x": 1}}, MetadataError, "data_type.configuration"),
    ({"name": "int32", "configuration": 5}, MetadataError, "data_type.configuration"),
    ("r7", MetadataError, "data_type: raw bits"),
    ("r0", MetadataError, "data_type: raw bits"),
    ("r012", MetadataError, "data_type: raw bits"),
    ({"name": "r16", "configuration": {"a": 1}}, MetadataError, "data_type.configuration"),
    ("fixed_length_utf32", MetadataError, "data_type.configuration.length_bytes"),
    (utf32_json(6), MetadataError, "data_type.configuration.length_bytes"),  # not a multiple of 4
    (utf32_json(0), MetadataError, "data_type.configuration.length_bytes"),
    (utf32_json(-4), MetadataError, "data_type.configuration.length_bytes"),
    (utf32_json(4.0), MetadataError, "data_type.configuration.length_bytes"),
    (utf32_json(True), MetadataError, "data_type.configuration.length_bytes"),
    (
        {"name": "fixed_length_utf32", "configuration": {"length_bytes": 4, "x": 1}},
        MetadataError,
        "data_type.configuration",
    ),
    (length_json("null_terminated_bytes", 0), MetadataError, "data_type.configuration.length_bytes"),
    (length_json("raw_bytes", "4"), MetadataError, "data_type.configuration.length_bytes"),
    (datetime_json("sec", 1), MetadataError, "data_type.configuration.unit"),
    (datetime_json("S", 1), MetadataError, "data_type.configuration.unit"),
    (datetime_json("s", 0), MetadataError, "data_type.configuration.scale_factor"),
    (datetime_json("s", 2**31), MetadataError, "data_type.configuration.scale_factor"),
    (datetime_json("s", 1.0), MetadataError, "data_type.configuration.scale_factor"),
    (datetime_json("s", True), MetadataError, "data_type.configuration.scale_factor"),
    (datetime_json("generic", 2), MetadataError, "data_type.configuration.scale_factor"),
    (
        {"name": "numpy.datetime64", "configuration": {"unit": "s"}},
        MetadataError,
        "data_type.configuration.scale_factor",
    ),
    (
        {"name": "numpy.datetime64", "configuration": {"scale_factor": 1}},
        MetadataError,
        "data_type.configuration.unit",
    ),
    ("numpy.timedelta64", MetadataError, "data_type.configuration.unit"),
    (
        {"name": "numpy.timedelta64", "configuration": {"unit": "s", "scale_factor": 1, "endian": "big"}},
        MetadataError,
        "data_type.configuration",
    ),
    ("struct", MetadataError, "data_type.configuration.fields"),
    ({"name": "struct", "configuration": {"fields": []}}, MetadataError, "data_type.configuration.fields"),
    (
        {"name": "struct", "configuration": {"fields": {"x": "int8"}}},
        MetadataError,
        "data_type.configuration.fields",
    ),
    (
        {
            "name": "struct",
            "configuration": {
                "fields": [{"name": "x", "data_type": "int8"}, {"name": "x", "data_type": "int16"}]
            },
        },
        MetadataError,
        "data_type.configuration.fields: field names must be unique",
    ),
    (
        {"name": "struct", "configuration": {"fields": [{"name": "", "data_type": "int8"}]}},
        MetadataError,
        r"data_type.configuration.fields\[0\].name",
    ),
    (
        {"name": "struct", "configuration": {"fields": [{"name": 1, "data_type": "int8"}]}},
        MetadataError,
        r"data_type.configuration.fields\[0\].name",
    ),
    (
        {"name": "struct", "configuration": {"fields": [{"name": "s", "data_type": "string"}]}},
        MetadataError,
        r"data_type.configuration.fields\[0\].data_type: field 's' has the variable-length",
    ),
    (
        {"name": "struct", "configuration": {"fields": [{"name": "b", "data_type": "bytes"}]}},
        MetadataError,
        r"data_type.configuration.fields\[0\].data_type",
    ),
    (
        {
            "name": "struct",
            "configuration": {
                "fields": [{"name": "a", "data_type": "int8"}, {"name": "b", "data_type": "float8"}]
            },
        },
        UnsupportedExtensionError,
        r"data_type.configuration.fields\[1\].data_type: unknown data type 'float8'",
    ),
    (
        {"name": "struct", "configuration": {"fields": [{"name": "t", "data_type": datetime_json("x", 1)}]}},
        MetadataError,
        r"data_type.configuration.fields\[0\].data_type.configuration.unit",
    ),
    (
        {
            "name": "struct",
            "configuration": {
                "fields": [
                    {
                        "name": "p",
                        "data_type": {"name": "struct", "configuration": {"fields": [["x", "int8"]]}},
                    }
                ]
            },
        },
        MetadataError,
        r"data_type.configuration.fields\[0\].data_type.configuration.fields\[0\]",
    ),
    # the [name, data_type] pair form is legacy "structured" only
    (
        {"name": "struct", "configuration": {"fields": [["x", "float32"]]}},
        MetadataError,
        r"data_type.configuration.fields\[0\]",
    ),
    (
        {"name": "struct", "configuration": {"fields": [{"name": "x", "data_type": "int8", "extra": 1}]}},
        MetadataError,
        r"data_type.configuration.fields\[0\]",
    ),
    (
        {"name": "struct", "configuration": {"fields": [{"name": "x", "data_type": "int8"}], "align": True}},
        MetadataError,
        "data_type.configuration",
    ),
    (
        {"name": "structured", "configuration": {"fields": [["x"]]}},
        MetadataError,
        r"data_type.configuration.fields\[0\]",
    ),
    (
        {"name": "structured", "configuration": {"fields": [["x", "int8"], ["x", "int8"]]}},
        MetadataError,
        "data_type.configuration.fields: field names must be unique",
    ),
]


@pytest.mark.parametrize(("data_type_json", "error", "message"), BAD_DATA_TYPES, ids=repr)
def test_bad_data_type(data_type_json, error, message):
    with pytest.raises(error, match=f"^{message}") as info:
        parse_data_type(data_type_json)
    assert type(info.value) is error


# --- interoperability with zarr-python -------------------------------------------------------


# zarr-python 3.1.6 has no "r<N>" and no "struct" (it reads and writes the legacy "structured")
ZARR_PYTHON_READS = [
    data_type
    for data_type in CANONICAL_DATA_TYPES
    if not (isinstance(data_type, str) and data_type.startswith("r"))
]
ZARR_PYTHON_READS = [
    data_type
    for data_type in ZARR_PYTHON_READS
    if not (isinstance(data_type, dict) and data_type["name"] == "struct")
]

INTEROP_FILL_VALUES = [
    (data_type_json, read)
    for data_type_json, read, _, _ in FILL_VALUES
    if data_type_json in ZARR_PYTHON_READS
] + [
    ("float32", "0x7fc00001"),
    ("float64", "0xfff8000000000000"),
    ("complex64", ["0x7fc00001", "Infinity"]),
    (datetime_json("s", 10), "NaT"),
]


def zarr_python(data_type_json):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr-python warns that some of these types are unstable
        return zarr_dtype.get_data_type_from_json(data_type_json, zarr_format=3)


def zarr_python_scalar_json(zarr_type, scalar):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return zarr_type.to_json_scalar(scalar, zarr_format=3)


@pytest.mark.parametrize("data_type_json", ZARR_PYTHON_READS, ids=repr)
def test_zarr_python_reads_our_data_types(data_type_json):
    ours = parse_data_type(data_type_json)
    theirs = zarr_python(ours.to_json())
    assert theirs.to_native_dtype() == ours.numpy_dtype
    # and we read what zarr-python writes for the same NumPy dtype
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        written_by_zarr = theirs.to_json(zarr_format=3)
    assert parse_data_type(written_by_zarr) == ours
    # and we read the fill value zarr-python writes by default
    default = theirs.default_scalar()
    ours_default = ours.fill_value_from_json(zarr_python_scalar_json(theirs, default))
    if ours.item_size is None:
        assert ours_default == default
    else:
        assert scalar_bytes(ours_default, ours) == scalar_bytes(default, ours)


@pytest.mark.parametrize(("data_type_json", "read"), INTEROP_FILL_VALUES, ids=repr)
def test_zarr_python_reads_our_fill_values(data_type_json, read):
    ours = parse_data_type(data_type_json)
    scalar = ours.fill_value_from_json(read)
    written = ours.fill_value_to_json(scalar)
    theirs = zarr_python(ours.to_json())
    their_scalar = theirs.from_json_scalar(written, zarr_format=3)
    if ours.item_size is None:
        assert their_scalar == scalar
    else:
        assert scalar_bytes(their_scalar, ours) == scalar_bytes(scalar, ours)
    # what zarr-python writes back for it, we read to the same value, except that it writes every
    # NaN as "NaN" (see test_zarr_python_writes_every_nan_as_canonical)
    again = ours.fill_value_from_json(zarr_python_scalar_json(theirs, their_scalar))
    if ours.item_size is None:
        assert again == scalar
    elif ours.numpy_dtype.kind in "fc" and np.isnan(scalar):
        assert np.isnan(again)
    else:
        assert scalar_bytes(again, ours) == scalar_bytes(scalar, ours)


def test_zarr_python_writes_every_nan_as_canonical():
    # Disagreement: zarr-python writes a NaN with a payload (or a sign) as "NaN", which the core
    # spec defines as the canonical bit pattern only; we keep the bits with the "0x" form.
    ours = parse_data_type("float32")
    theirs = zarr_python("float32")
    payload = ours.fill_value_from_json("0x7fc00001")
    assert zarr_python_scalar_json(theirs, payload) == "NaN"
    assert ours.fill_value_to_json(payload) == "0x7fc00001"


def test_zarr_python_variable_length_bytes_name():
    # zarr-python 3.1 writes the name "variable_length_bytes"; the spec's name is "bytes". Both
    # read; we write "bytes", which zarr-python also reads.
    assert zarr_python(parse_data_type("variable_length_bytes").to_json()).to_native_dtype() == np.dtype(
        object
    )
    assert parse_data_type("variable_length_bytes").to_json() == "bytes"


def test_zarr_python_bytes_fill_value_int_list():
    # The bytes README allows a list of integers; zarr-python 3.1.6 reads only base64. We read
    # both and write base64, which both read.
    ours = parse_data_type("bytes")
    assert ours.fill_value_from_json([1, 2, 3]) == b"\x01\x02\x03"
    assert ours.fill_value_to_json(b"\x01\x02\x03") == "AQID"
    assert zarr_python("bytes").from_json_scalar("AQID", zarr_format=3) == b"\x01\x02\x03"


@pytest.mark.parametrize("name", ["r8", "r16", "r48"])
def test_zarr_python_lacks_raw_bits(name):
    # The core spec's r<N> is what we write for NumPy "V" dtypes; zarr-python 3.1.6 has no r<N>
    # (it writes its own "raw_bytes", which we read). We follow the spec.
    with pytest.raises(ValueError):
        zarr_python(name)
    assert resolve_data_type(f"V{int(name[1:]) // 8}").to_json() == name
    assert parse_data_type(length_json("raw_bytes", 2)).numpy_dtype == parse_data_type("r16").numpy_dtype


@pytest.mark.parametrize("data_type_json", [STRUCT_POINT, STRUCT_NESTED, STRUCT_TIMESTAMP], ids=repr)
def test_struct_follows_spec_not_zarr_python(data_type_json):
    # Disagreement: zarr-python 3.1.6 writes the legacy "structured" ([name, data_type] pairs and a
    # base64 fill value) and cannot read "struct". The struct spec says to write "struct" with an
    # object fill value and to read "structured"; we follow the spec.
    ours = parse_data_type(data_type_json)
    assert ours.to_json()["name"] == "struct"
    assert isinstance(ours.fill_value_to_json(ours.default_fill_value()), dict)
    try:
        theirs = zarr_python(ours.to_json())
    except ValueError:
        pass  # zarr-python 3.1.6
    else:  # a zarr-python that reads "struct" must agree with us
        assert theirs.to_native_dtype() == ours.numpy_dtype


@pytest.mark.parametrize(
    "numpy_dtype",
    [
        [("x", "<f4"), ("y", "<f4")],
        [("a", ">i2"), ("b", [("c", ">f4"), ("d", "<i2")])],  # zarr-python's own doc example
        [("t", "M8[s]"), ("s", "U3"), ("b", "S2"), ("flag", "?")],
    ],
    ids=repr,
)
def test_we_read_zarr_python_structured(numpy_dtype):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = zarr_dtype.parse_dtype(numpy_dtype, zarr_format=3)
        written = theirs.to_json(zarr_format=3)
    assert written["name"] == "structured"
    ours = parse_data_type(written)
    assert ours.numpy_dtype == theirs.to_native_dtype().newbyteorder("=")
    assert ours == resolve_data_type(numpy_dtype)
    # zarr-python's base64 fill value (the packed little-endian bytes) reads to the same record;
    # (its data type read back from JSON is little-endian, like ours)
    theirs = zarr_python(written)
    record = np.zeros((), dtype=ours.numpy_dtype)
    record[ours.numpy_dtype.names[0]] = 7 if ours.numpy_dtype[0].kind != "M" else np.datetime64(7, "s")
    fill_json = zarr_python_scalar_json(theirs, record[()])
    assert isinstance(fill_json, str)
    assert ours.fill_value_from_json(fill_json).tobytes() == record.tobytes()


@pytest.mark.parametrize(
    ("dtype", "fill_value"),
    [
        ("float32", np.float32("nan")),
        ("float64", -np.inf),
        ("int8", -5),
        ("uint64", 2**64 - 1),
        ("c8", 1 + 2j),
        ("?", True),
        ("M8[10s]", np.datetime64("NaT")),
        ("M8[s]", np.datetime64("2020-01-01")),
        ("m8[ms]", np.timedelta64(5, "ms")),
        ("U5", "ab"),
        ("S3", b"ab"),
        ("V2", b"\x01\x02"),
        ([("x", "f4"), ("y", "i2")], (1.5, 2)),
        ("bytes", b"ab"),
        (str, "x"),
    ],
    ids=repr,
)
def test_we_read_zarr_python_array_metadata(dtype, fill_value):
    """Read the data_type and fill_value of a zarr.json written by zarr-python itself."""
    store = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        array = zarr.create_array(store=store, shape=(2,), dtype=dtype, fill_value=fill_value)
    document = json.loads(store["zarr.json"].to_bytes())
    ours = parse_data_type(document["data_type"])
    assert ours.numpy_dtype == array.dtype or isinstance(ours.numpy_dtype, np.dtypes.StringDType)
    scalar = ours.fill_value_from_json(document["fill_value"])
    expected = array.fill_value
    if ours.item_size is None:
        assert scalar == expected
    else:
        assert scalar_bytes(scalar, ours) == scalar_bytes(expected, ours)
