"""The cast_value and scale_offset codecs (zarr-extensions): the specs' examples, rounding and range
rules against exact references, fill values, errors and round trips."""

from __future__ import annotations

import json
from fractions import Fraction

import numcodecs
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import zarrx
from zarrx.codecs import ChunkSpec, CodecPipeline, codec_from_json
from zarrx.codecs.cast_value import ROUNDING_MODES, CastValueCodec, cast_values
from zarrx.codecs.scale_offset import ScaleOffsetCodec
from zarrx.dtypes import resolve_data_type
from zarrx.errors import ChunkDecodeError, ChunkEncodeError, MetadataError


def make_array(dtype, codecs, fill_value=None, shape=(8,), chunks=(4,), store=None) -> zarrx.Array:
    return zarrx.create_array({} if store is None else store, shape=shape, chunks=chunks, dtype=dtype,
                              fill_value=fill_value, filters=codecs, compressors=None)  # fmt: skip


def stored(array: zarrx.Array, store: dict, key: str = "c/0") -> np.ndarray:
    """A stored chunk, as the values the array -> bytes codec encoded (in the encoded data type)."""
    specs = array.metadata.codecs.resolve_specs(array.metadata.chunk_spec)
    return np.frombuffer(store[key], dtype=specs[-1].dtype.newbyteorder("<")).astype(specs[-1].dtype)


def spec_of(dtype, fill_value=0, shape=(4,)) -> ChunkSpec:
    data_type = resolve_data_type(dtype)
    return ChunkSpec(shape, data_type, data_type.cast_scalar(fill_value))


def same(actual, expected) -> None:
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    np.testing.assert_array_equal(actual, expected)
    if expected.dtype.kind == "f":
        np.testing.assert_array_equal(np.signbit(actual), np.signbit(expected))


# -- JSON ---------------------------------------------------------------------------------

DOCUMENTS = [
    {"name": "cast_value", "configuration": {"data_type": "uint8"}},
    {"name": "cast_value", "configuration": {"data_type": "int16", "rounding": "towards-zero", "out_of_range": "wrap"}},
    {"name": "cast_value", "configuration": {
        "data_type": "float16", "rounding": "nearest-away", "out_of_range": "clamp",
        "scalar_map": {"encode": [["NaN", 0]], "decode": [[0, "NaN"]]}}},
    {"name": "scale_offset"},
    {"name": "scale_offset", "configuration": {"offset": 5, "scale": 0.1}},
    {"name": "scale_offset", "configuration": {"offset": "-Infinity"}},
    {"name": "scale_offset", "configuration": {"scale": 3}},
]  # fmt: skip


@pytest.mark.parametrize("document", DOCUMENTS, ids=json.dumps)
def test_json_round_trip(document) -> None:
    codec = codec_from_json(document, "codecs[0]")
    assert codec.to_json() == document
    assert codec_from_json(json.loads(json.dumps(codec.to_json())), "codecs[0]") == codec


@pytest.mark.parametrize(
    ("document", "match"),
    [
        ({"name": "cast_value"}, "requires the configuration member 'data_type'"),
        ({"name": "cast_value", "configuration": {"data_type": "uint8", "extra": 1}}, "unexpected"),
        ({"name": "cast_value", "configuration": {"data_type": "bool"}}, "integer or float"),
        ({"name": "cast_value", "configuration": {"data_type": "complex64"}}, "integer or float"),
        ({"name": "cast_value", "configuration": {"data_type": "nope"}}, "unknown data type"),
        ({"name": "cast_value", "configuration": {"data_type": "uint8", "rounding": "up"}}, "rounding"),
        ({"name": "cast_value", "configuration": {"data_type": "uint8", "out_of_range": "saturate"}}, "out_of_range"),
        ({"name": "cast_value", "configuration": {"data_type": "float32", "out_of_range": "wrap"}}, "integer"),
        ({"name": "cast_value", "configuration": {"data_type": "uint8", "scalar_map": {"encode": [[1]]}}}, "pairs"),
        ({"name": "cast_value", "configuration": {"data_type": "uint8", "scalar_map": {"both": []}}}, "scalar_map"),
        ({"name": "scale_offset", "configuration": {"offset": 1, "shift": 2}}, "unexpected"),
        ({"name": "scale_offset", "configuration": {"scale": True}}, "scale must be a number"),
        ({"name": "scale_offset", "configuration": {"offset": [1, 2]}}, "offset must be a number"),
    ],
)
def test_invalid_configuration(document, match: str) -> None:
    with pytest.raises(MetadataError, match=match):
        codec_from_json(document, "codecs[0]")


@pytest.mark.parametrize(
    ("dtype", "codec", "match"),
    [
        ("bool", {"name": "cast_value", "configuration": {"data_type": "uint8"}}, "integer and float"),
        ("float64", {"name": "cast_value", "configuration": {
            "data_type": "uint8", "scalar_map": {"encode": [[0.5, 300]]}}}, "scalar_map.encode"),  # 300: not a uint8
        ("uint8", {"name": "cast_value", "configuration": {
            "data_type": "int8", "scalar_map": {"decode": [["NaN", 1]]}}}, "scalar_map.decode"),  # keys are int8
        ("complex64", {"name": "scale_offset"}, "integer and float"),
        ("int32", {"name": "scale_offset", "configuration": {"scale": 0.5}}, "scale"),  # int32 scalars are integers
        ("float32", {"name": "scale_offset", "configuration": {"scale": 0}}, "non-zero"),
        ("float32", {"name": "scale_offset", "configuration": {"offset": "NaN"}}, "offset finite"),
        ("uint8", {"name": "scale_offset", "configuration": {"offset": -1}}, "offset"),
    ],
)  # fmt: skip
def test_configuration_checked_against_the_data_type(dtype, codec, match: str) -> None:
    with pytest.raises(MetadataError, match=match):
        make_array(dtype, [codec])


# -- the specs' examples ------------------------------------------------------------------------


def test_cast_value_numpy_compatibility_example() -> None:
    """cast_value README, "NumPy compatibility": towards-zero, wrap, non-finite values mapped to 0."""
    metadata = {"data_type": "float64", "codecs": [{"name": "cast_value", "configuration": {
        "data_type": "uint8", "rounding": "towards-zero", "out_of_range": "wrap",
        "scalar_map": {"encode": [["NaN", 0], ["+Infinity", 0], ["-Infinity", 0]]}}}, "bytes"]}  # fmt: skip
    store = {}
    array = make_array(metadata["data_type"], metadata["codecs"][:1], shape=(8,), chunks=(8,), store=store)
    values = np.array([np.nan, np.inf, -np.inf, 3.7, -1.5, 256.9, 1000.0, -0.0])
    array[...] = values
    finite = values[3:]
    same(stored(array, store), np.concatenate([[0, 0, 0], finite.astype(np.int64).astype(np.uint8)]).astype(np.uint8))
    same(array[...], np.array([0, 0, 0, 3, 255, 0, 232, 0], dtype="float64"))  # lossy, as the spec says


def test_cast_value_spec_spelling_of_infinity() -> None:
    """Spec inconsistency: the example writes "+Infinity", which the core spec's fill value encoding
    (that scalar_map entries use) does not have: it has "Infinity". We read both, so the example works,
    and write back what we read; fill values keep the strict encoding."""
    for spelling in ("+Infinity", "Infinity"):
        codec = CastValueCodec("uint8", scalar_map={"encode": [[spelling, 1]], "decode": [[1, spelling]]})
        assert codec.to_json()["configuration"]["scalar_map"]["encode"] == [[spelling, 1]]
        spec = spec_of("float64", shape=(2,))
        same(codec.encode(np.array([np.inf, 2.0]), spec), np.array([1, 2], dtype="uint8"))
        same(codec.decode(np.array([1, 2], dtype="uint8"), spec), np.array([np.inf, 2.0]))
    with pytest.raises(MetadataError, match="fill_value"):
        make_array("float64", [], fill_value="+Infinity")


@pytest.mark.parametrize(
    ("out_of_range", "expected"), [(None, None), ("clamp", 127), ("wrap", -128)]
)
def test_cast_value_out_of_range_example(out_of_range, expected) -> None:
    """cast_value README, out_of_range: 128.0 as int8."""
    codec = CastValueCodec("int8", out_of_range=out_of_range)
    if expected is None:
        with pytest.raises(ChunkEncodeError, match="out of the range of int8.*out_of_range"):
            codec.encode(np.array([128.0]), spec_of("float64", shape=(1,)))
    else:
        same(codec.encode(np.array([128.0]), spec_of("float64", shape=(1,))), np.array([expected], dtype="int8"))


@pytest.mark.parametrize("source", ["int32", "float64", "int64"])
def test_cast_value_wrap_example(source) -> None:
    """cast_value README: int16 wrapping follows two's complement."""
    codec = CastValueCodec("int16", out_of_range="wrap")
    encoded = codec.encode(np.array([32768, 32769, -32769], dtype=source), spec_of(source, shape=(3,)))
    same(encoded, np.array([-32768, -32767, 32767], dtype="int16"))


def test_scale_offset_float32_example() -> None:
    """scale_offset README, "Float32 with scale and offset": float32 arithmetic, float32 scalars."""
    store = {}
    array = make_array("float32", [{"name": "scale_offset", "configuration": {"offset": 5, "scale": 0.1}}], store=store)
    values = np.array([5, 15, 105, -995, 0.5, 1e30, np.nan, -np.inf], dtype="float32")
    array[...] = values
    expected = (values - np.float32(5)) * np.float32(0.1)
    assert expected.dtype == np.float32
    same(np.concatenate([stored(array, store, "c/0"), stored(array, store, "c/1")]), expected)
    same(array[...], expected / np.float32(0.1) + np.float32(5))


def test_scale_offset_uint16_range_reduction_example() -> None:
    """scale_offset README, "Uint16 range reduction": [1000, 1255] stored as uint8 [0, 255]."""
    codecs = [{"name": "scale_offset", "configuration": {"offset": 1000}},
              {"name": "cast_value", "configuration": {"data_type": "uint8"}}]  # fmt: skip
    store = {}
    array = make_array("uint16", codecs, fill_value=1000, shape=(256,), chunks=(256,), store=store)
    values = np.arange(1000, 1256, dtype="uint16")
    array[...] = values
    same(stored(array, store), np.arange(256, dtype="uint8"))
    same(array[...], values)
    with pytest.raises(ChunkEncodeError, match="x - 1000 is not representable in uint16 for x = 999"):
        array[0] = 999
    with pytest.raises(ChunkEncodeError, match="256 is out of the range of uint8"):
        array[0] = 1256
    # The example shows no fill value: the default 0 would be transformed to 0 - 1000, which uint16
    # cannot hold, and the spec makes that an error.
    with pytest.raises(MetadataError, match="fill value"):
        make_array("uint16", codecs)


def test_float64_to_uint8_nan_preservation_example() -> None:
    """scale_offset README, "Float64 to uint8 with NaN preservation"."""
    codecs = [
        {"name": "scale_offset", "configuration": {"offset": -10, "scale": 0.1}},
        {"name": "cast_value", "configuration": {"data_type": "uint8", "rounding": "nearest-even",
                                                 "scalar_map": {"encode": [["NaN", 0]], "decode": [[0, "NaN"]]}}},
    ]  # fmt: skip
    store = {}
    array = make_array("float64", codecs, fill_value="NaN", shape=(6,), chunks=(4,), store=store)
    specs = array.metadata.codecs.resolve_specs(array.metadata.chunk_spec)
    assert np.isnan(specs[1].fill_value) and specs[2].fill_value == 0 and specs[2].dtype == np.uint8
    array[:5] = [0.0, 2540.0, 1234.0, np.nan, 5.0]
    same(stored(array, store, "c/0"), np.array([1, 255, 124, 0], dtype="uint8"))
    same(array[...], np.array([0.0, 2540.0, 1230.0, np.nan, 10.0, np.nan]))  # lossy values, exact NaN
    assert "c/1" in store  # the partially written chunk; a chunk of NaN only is not stored
    array[4:] = np.nan
    assert "c/1" not in array.store


def test_fixedscaleoffset_conversion_example() -> None:
    """scale_offset README, "Conversion example": the numcodecs.fixedscaleoffset equivalent."""
    codecs = [{"name": "scale_offset", "configuration": {"scale": 0.1, "offset": 10}},
              {"name": "cast_value", "configuration": {"data_type": "uint8", "out_of_range": "wrap"}}]  # fmt: skip
    store = {}
    array = make_array("float32", codecs, fill_value=10.0, shape=(10,), chunks=(10,), store=store)
    assert array.metadata.codecs.resolve_specs(array.metadata.chunk_spec)[-1].fill_value == 0
    values = np.linspace(10, 100, 10, dtype="float32")
    array[...] = values
    same(stored(array, store), np.arange(10, dtype="uint8"))  # in [0, 10], as the README says
    legacy = numcodecs.FixedScaleOffset(offset=10, scale=0.1, dtype="<f4", astype="u1")
    same(stored(array, store), legacy.encode(values))
    np.testing.assert_allclose(array[...], legacy.decode(legacy.encode(values)), rtol=1e-6)
    array[0] = 10 + 300 / 0.1  # out of range: wrapped, as numcodecs does
    assert stored(array, store)[0] == legacy.encode(np.float32([10 + 300 / 0.1]))[0] == 300 % 256


# -- cast_value: rounding and range against exact references ----------------------------------

HALVES = [-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 2.6, -2.6, -0.0]
ROUNDED = {
    "nearest-even": [-2, -2, 0, 0, 2, 2, 3, -3, 0],
    "towards-zero": [-2, -1, 0, 0, 1, 2, 2, -2, 0],
    "towards-positive": [-2, -1, 0, 1, 2, 3, 3, -2, 0],
    "towards-negative": [-3, -2, -1, 0, 1, 2, 2, -3, 0],
    "nearest-away": [-3, -2, -1, 1, 2, 3, 3, -3, 0],
}


@pytest.mark.parametrize("rounding", ROUNDING_MODES)
def test_rounding_to_integers(rounding) -> None:
    same(cast_values(np.array(HALVES), np.dtype("int8"), rounding), np.array(ROUNDED[rounding], dtype="int8"))


def neighbours(value: Fraction, dtype: np.dtype) -> tuple[np.floating, np.floating]:
    """The largest ``dtype`` value <= ``value`` and the smallest >= it (finite range assumed)."""
    low = np.array(float(value)).astype(dtype)
    while Fraction(float(low)) > value:
        low = np.nextafter(low, dtype.type(-np.inf))
    while Fraction(float(np.nextafter(low, dtype.type(np.inf)))) <= value:
        low = np.nextafter(low, dtype.type(np.inf))
    high = low if Fraction(float(low)) == value else np.nextafter(low, dtype.type(np.inf))
    return low, high


def reference(value: Fraction, dtype: np.dtype, rounding: str) -> float:
    low, high = neighbours(value, dtype)
    if low == high:
        return float(low)
    below, above = value - Fraction(float(low)), Fraction(float(high)) - value
    even = low if int(np.array(low).view(f"u{dtype.itemsize}")) % 2 == 0 else high
    away = high if value > 0 else low
    choice = {
        "towards-negative": low,
        "towards-positive": high,
        "towards-zero": low if value > 0 else high,
        "nearest-even": low if below < above else high if above < below else even,
        "nearest-away": low if below < above else high if above < below else away,
    }[rounding]
    return float(choice)


@settings(max_examples=300, deadline=None)
@given(
    value=st.one_of(
        st.floats(-3e38, 3e38, allow_nan=False),
        st.floats(-1e-38, 1e-38, allow_nan=False),  # float32 subnormals
        st.integers(-(2**25), 2**25).map(lambda n: n * 2.0**-24 + 1),  # ties near 1
    ),
    rounding=st.sampled_from(ROUNDING_MODES),
)
def test_float64_to_float32_rounding(value, rounding) -> None:
    result = cast_values(np.array([value]), np.dtype("float32"), rounding)
    assert result.dtype == np.float32
    assert float(result[0]) == reference(Fraction(value), np.dtype("float32"), rounding)
    if value == 0:
        assert np.signbit(result[0]) == np.signbit(value)


@settings(max_examples=300, deadline=None)
@given(
    value=st.one_of(st.integers(-(2**63), 2**63 - 1), st.integers(-(2**26), 2**26)),
    target=st.sampled_from(["float32", "float64"]),
    rounding=st.sampled_from(ROUNDING_MODES),
)
def test_int64_to_float_rounding(value, target, rounding) -> None:
    result = cast_values(np.array([value], dtype="int64"), np.dtype(target), rounding)
    assert float(result[0]) == reference(Fraction(value), np.dtype(target), rounding)


@settings(max_examples=200, deadline=None)
@given(value=st.integers(0, 2**64 - 1), rounding=st.sampled_from(ROUNDING_MODES))
def test_uint64_to_float64_rounding(value, rounding) -> None:
    result = cast_values(np.array([value], dtype="uint64"), np.dtype("float64"), rounding, "clamp")
    assert float(result[0]) == reference(Fraction(value), np.dtype("float64"), rounding)


@settings(max_examples=300, deadline=None)
@given(
    value=st.floats(-1e25, 1e25, allow_nan=False, allow_infinity=False),
    target=st.sampled_from(["int8", "uint8", "int16", "uint32", "int64", "uint64"]),
    rounding=st.sampled_from(ROUNDING_MODES),
    out_of_range=st.sampled_from(["clamp", "wrap"]),
)
def test_float_to_integer_range(value, target, rounding, out_of_range) -> None:
    dtype = np.dtype(target)
    rounded = {"nearest-even": round(Fraction(value)), "towards-zero": int(value),
               "towards-negative": int(np.floor(value)), "towards-positive": int(np.ceil(value)),
               "nearest-away": int(np.sign(value)) * int(abs(Fraction(value)) + Fraction(1, 2))}[rounding]  # fmt: skip
    info = np.iinfo(dtype)
    if out_of_range == "clamp":
        expected = min(max(rounded, info.min), info.max)
    else:
        expected = (rounded - info.min) % 2 ** (8 * dtype.itemsize) + info.min
    assert int(cast_values(np.array([value]), dtype, rounding, out_of_range)[0]) == expected
    if not info.min <= rounded <= info.max:
        with pytest.raises(ValueError, match="out of the range"):
            cast_values(np.array([value]), dtype, rounding)


@pytest.mark.parametrize(
    ("value", "target", "rounding", "expected"),
    [
        (3.5e38, "float32", "nearest-even", np.inf),
        (-3.5e38, "float32", "towards-zero", -np.inf),
        (65519.0, "float16", "nearest-even", 65504.0),  # rounds down to the largest: in range
        (65520.0, "float16", "nearest-even", np.inf),  # the tie goes to infinity: out of range
        (65535.0, "float16", "towards-zero", 65504.0),  # below 2**16: in range
        (65536.0, "float16", "towards-zero", np.inf),
        (65505.0, "float16", "towards-positive", np.inf),
        (-65505.0, "float16", "towards-positive", -65504.0),
        (70000, "float16", "nearest-even", np.inf),  # from an integer
    ],
)
def test_float_out_of_range(value, target, rounding, expected) -> None:
    source = np.array([value], dtype="int32" if isinstance(value, int) else "float64")
    clamped = cast_values(source, np.dtype(target), rounding, "clamp")
    assert clamped[0] == expected
    if np.isinf(expected):
        with pytest.raises(ValueError, match=f"out of the range of {target}; set out_of_range to 'clamp',"):
            cast_values(source, np.dtype(target), rounding)
    else:
        assert cast_values(source, np.dtype(target), rounding)[0] == expected


def test_special_values() -> None:
    values = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0])
    for target in ("float32", "float16"):
        same(cast_values(values, np.dtype(target)), values.astype(target))  # NaN, infinities and signed zeros kept
    for value in (np.nan, np.inf, -np.inf):
        with pytest.raises(ValueError, match="has no NaN or infinity.*scalar_map"):
            cast_values(np.array([value]), np.dtype("int32"), out_of_range="clamp")  # even when clamping
    same(cast_values(np.array([-0.0]), np.dtype("uint8")), np.array([0], dtype="uint8"))


def test_scalar_map_order_and_nan_payloads() -> None:
    payload_nan = np.array([0x7FF8000000000001], dtype="u8").view("float64")[0]
    values = np.array([np.nan, payload_nan, 1.0, 2.0, -0.0])
    mapped = cast_values(values, np.dtype("int8"), scalar_map=[(np.nan, -1), (1.0, 10), (1.0, 20), (0.0, 7)])
    same(mapped, np.array([-1, -1, 10, 2, 7], dtype="int8"))  # first entry wins; 0 matches -0.0


def test_integer_casts() -> None:
    same(cast_values(np.array([0, 255, 256, -1], dtype="int32"), np.dtype("uint8"), out_of_range="clamp"),
         np.array([0, 255, 255, 0], dtype="uint8"))  # fmt: skip
    same(cast_values(np.array([2**64 - 1], dtype="uint64"), np.dtype("int64"), out_of_range="wrap"),
         np.array([-1], dtype="int64"))  # fmt: skip
    with pytest.raises(ValueError, match="18446744073709551615 is out of the range of int64"):
        cast_values(np.array([2**64 - 1], dtype="uint64"), np.dtype("int64"))
    same(cast_values(np.array([-(2**63)], dtype="int64"), np.dtype("uint64"), out_of_range="clamp"),
         np.array([0], dtype="uint64"))  # fmt: skip


# -- cast_value: fill values and the pipeline ---------------------------------------------------


def test_fill_value_cast_and_checked() -> None:
    codecs = [{"name": "cast_value", "configuration": {"data_type": "int16"}}]
    array = make_array("float32", codecs, fill_value=-7.0)
    assert array.metadata.codecs.resolve_specs(array.metadata.chunk_spec)[-1].fill_value == -7
    with pytest.raises(MetadataError, match="fill value 0.5 becomes 0 as int16 and 0.0 when decoded"):
        make_array("float32", codecs, fill_value=0.5)
    with pytest.raises(MetadataError, match="fill value.*nan.*scalar_map"):
        make_array("float32", codecs, fill_value="NaN")
    with pytest.raises(MetadataError, match="fill value.*out of the range of int16"):
        make_array("float32", codecs, fill_value=1e6)


def test_decode_errors_name_the_chunk() -> None:
    store = {}
    array = make_array("uint8", [{"name": "cast_value", "configuration": {"data_type": "int16"}}], store=store)
    array[...] = np.arange(8)
    store["c/1"] = (np.array([1, 2, -3, 4], dtype="<i2").tobytes())
    with pytest.raises(ChunkDecodeError, match=r"chunk 'c/1'.*cast_value.*-3 is out of the range of uint8"):
        array[...]


@pytest.mark.parametrize(
    ("dtype", "target"),
    [("int16", "int32"), ("uint8", "float16"), ("float32", "float64"), ("int32", "float64"), ("uint16", "int32"),
     ("float16", "float32")],
)  # fmt: skip
def test_widening_round_trip(dtype, target) -> None:
    info = np.finfo(dtype) if np.dtype(dtype).kind == "f" else np.iinfo(dtype)
    values = np.array([info.min, info.max, 0, 1, -1 if info.min else 2, 3, 5, 7], dtype=dtype)
    store = {}
    array = make_array(dtype, [{"name": "cast_value", "configuration": {"data_type": target}}], store=store)
    array[...] = values
    assert stored(array, store).dtype == np.dtype(target)
    same(array[...], values)


def test_sharded_cast_value_uses_the_cast_fill_value() -> None:
    array = zarrx.create_array({}, shape=(8,), chunks=(2,), shards=(8,), dtype="float64", fill_value=-1.0,
                               filters=[{"name": "cast_value", "configuration": {"data_type": "int8"}}])  # fmt: skip
    array[2:4] = [5.0, 6.0]
    same(array[...], np.array([-1, -1, 5, 6, -1, -1, -1, -1], dtype="float64"))


# -- scale_offset --------------------------------------------------------------------------------


def test_scale_offset_absent_members_are_identities() -> None:
    codec = ScaleOffsetCodec()
    assert codec.to_json() == {"name": "scale_offset"}
    spec = spec_of("int64")
    values = np.array([-(2**63), 2**63 - 1, 0, 5], dtype="int64")
    same(codec.encode(values, spec), values)
    same(codec.decode(values, spec), values)


def test_scale_offset_parameters_use_the_array_type() -> None:
    codec = ScaleOffsetCodec(offset=0.1, scale=0.1)
    assert codec.parameters(spec_of("float32")) == (np.float32(0.1), np.float32(0.1))
    assert codec.parameters(spec_of("float64")) == (0.1, 0.1)
    assert ScaleOffsetCodec(offset="0x3f800000").parameters(spec_of("float32"))[0] == 1.0
    assert ScaleOffsetCodec(offset=np.float32(2.5)).configuration() == {"offset": 2.5}


@pytest.mark.parametrize(
    ("dtype", "offset", "scale", "values", "error", "match"),
    [
        ("int8", 0, 2, [64], ChunkEncodeError, r"x \* 2 is not representable in int8 for x = 64"),
        ("int8", 0, -1, [-128], ChunkEncodeError, r"x \* -1 is not representable in int8 for x = -128"),
        ("int64", -1, 1, [2**63 - 1], ChunkEncodeError, r"x - -1 is not representable in int64"),
        ("uint32", 10, 1, [9], ChunkEncodeError, r"x - 10 is not representable in uint32 for x = 9"),
        ("float16", -10000, 1, [60000], ChunkEncodeError, r"\(x - offset\) \* scale is not representable in float16"),
        ("float32", 0, 1e-30, [1e30], None, None),  # underflow to a representable value is fine
        ("float64", 0, 1e300, [1e10], ChunkEncodeError, "not representable in float64 for x = 10000000000.0"),
    ],
)
def test_scale_offset_encode_errors(dtype, offset, scale, values, error, match) -> None:
    codec = ScaleOffsetCodec(offset=offset, scale=scale)
    array = np.array(values, dtype=dtype)
    if error is None:
        codec.encode(array, spec_of(dtype, shape=array.shape))
        return
    with pytest.raises(error, match=match):
        codec.encode(array, spec_of(dtype, shape=array.shape))


def test_scale_offset_decode_errors() -> None:
    codec = ScaleOffsetCodec(offset=100, scale=4)
    spec = spec_of("int16", fill_value=100)
    same(codec.decode(np.array([-400, 0, 4], dtype="int16"), spec), np.array([0, 100, 101], dtype="int16"))
    with pytest.raises(ChunkDecodeError, match="x / 4 is not representable in int16 for x = 5"):
        codec.decode(np.array([5], dtype="int16"), spec)  # 5 / 4 is not an integer
    with pytest.raises(ChunkDecodeError, match=r"x \+ 30000 is not representable in int16 for x = 5000"):
        ScaleOffsetCodec(offset=30000).decode(np.array([5000], dtype="int16"), spec_of("int16", 30000, (1,)))
    with pytest.raises(ChunkDecodeError, match=r"x / scale \+ offset is not representable in float32"):
        ScaleOffsetCodec(scale=1e-30).decode(np.array([1e30], dtype="float32"), spec_of("float32"))


@settings(max_examples=200, deadline=None)
@given(
    dtype=st.sampled_from(["int8", "int16", "int32", "int64", "uint8", "uint16", "uint64"]),
    offset=st.integers(-100, 100),
    scale=st.integers(-7, 7).filter(bool),
    data=st.data(),
)
def test_scale_offset_integer_round_trip(dtype, offset, scale, data) -> None:
    info = np.iinfo(dtype)
    if info.min == 0:
        offset, scale = abs(offset), abs(scale)
    values = data.draw(st.lists(st.integers(int(info.min), int(info.max)), min_size=1, max_size=8))
    values = np.array(values, dtype=dtype)
    codec = ScaleOffsetCodec(offset=offset, scale=scale)
    spec = spec_of(dtype, fill_value=offset, shape=values.shape)
    exact = [(int(x) - offset) * scale for x in values]
    if all(info.min <= e <= info.max for e in exact) and all(info.min <= int(x) - offset <= info.max for x in values):
        encoded = codec.encode(values, spec)
        assert encoded.tolist() == exact
        same(codec.decode(encoded, spec), values)
    else:
        with pytest.raises(ChunkEncodeError):
            codec.encode(values, spec)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_scale_offset_float_round_trip(dtype) -> None:
    values = np.array([0, 1.5, -2.25, 100, np.nan, np.inf, -np.inf, -0.0], dtype=dtype)
    array = make_array(dtype, [{"name": "scale_offset", "configuration": {"offset": 0.5, "scale": 4}}])
    array[...] = values
    decoded = array[...]
    np.testing.assert_array_equal(decoded[:4], values[:4])  # exact here: scale is a power of two
    assert np.isnan(decoded[4]) and list(decoded[5:7]) == [np.inf, -np.inf]


def test_scale_offset_transforms_the_fill_value() -> None:
    codec = {"name": "scale_offset", "configuration": {"offset": 10, "scale": 2}}
    array = make_array("float64", [codec], fill_value=1.0)
    pipeline: CodecPipeline = array.metadata.codecs
    assert pipeline.resolve_specs(array.metadata.chunk_spec)[-1].fill_value == -18.0
    assert array[0] == 1.0
