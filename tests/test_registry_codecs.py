"""The registry's codecs: bitround, packbits, reshape, zfp, conditional, n5_default.

Each round-trips through arrays, its JSON is checked against the registry's schema (copied in
``tests/data/zarr-extensions``), and it is checked against another implementation where one
exists: zarrs (packbits, reshape), numcodecs' BitRound (bitround on floats), zfpy (zfp streams,
byte for byte), tensorstore's N5 driver (n5_default).
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import ml_dtypes
import numcodecs
import numpy as np
import pytest
import tensorstore as ts
import zfpy
from referencing import Registry, Resource

import zarrx
from zarrx.codecs import (
    BitroundCodec, BytesCodec, ChunkSpec, ConditionalCodec, Crc32cCodec, GzipCodec, N5DefaultCodec, PackBitsCodec,
    ReshapeCodec, TransposeCodec, ZfpCodec, ZstdCodec, codec_from_json,
)  # fmt: skip
from zarrx.dtypes import resolve_data_type
from zarrx.errors import ChunkDecodeError, ChunkEncodeError, MetadataError

from .test_ml_dtypes import bits_of, in_memory, stored_bits, stored_size
from .zarrs_peer import zarrs_read, zarrs_write

REGISTRY = Path(__file__).parent / "data" / "zarr-extensions"
#: where the schemas' $refs point: the registry's files, served here from the copies
_REGISTRY_URL = "https://raw.githubusercontent.com/zarr-developers/zarr-extensions/refs/heads/main/"
_SCHEMAS = Registry().with_resources(
    (_REGISTRY_URL + path.relative_to(REGISTRY).as_posix(), Resource.from_contents(json.loads(path.read_text())))
    for path in REGISTRY.rglob("schema.json")
)


def schema_errors(name: str, document: dict, kind: str = "codecs") -> list[str]:
    """The messages of the registry schema of ``kind``/``name`` for ``document`` (none: valid)."""
    schema = json.loads((REGISTRY / kind / name / "schema.json").read_text())
    if name == "n5_default":  # the published schema writes "type" where it means "$ref"
        schema["properties"]["configuration"]["properties"]["codecs"]["items"] = {"$ref": "#/$defs/codec"}
    validator = jsonschema.Draft202012Validator(schema, registry=_SCHEMAS)
    return [error.message for error in validator.iter_errors(document)]


def spec(shape, dtype, fill=0):
    return ChunkSpec(tuple(shape), resolve_data_type(dtype), fill)


# -- schemas --------------------------------------------------------------------------------------
SCHEMA_CASES = [
    ("bitround", BitroundCodec(keepbits=3)),
    ("bitround", BitroundCodec(keepbits=0)),
    ("reshape", ReshapeCodec(shape=[[0, 1], -1, 4])),
    ("zfp", ZfpCodec(mode="reversible")),
    ("zfp", ZfpCodec(mode="fixed_rate", rate=4.5)),
    ("zfp", ZfpCodec(mode="fixed_precision", precision=12)),
    ("zfp", ZfpCodec(mode="fixed_accuracy", tolerance=0.001)),
    ("zfp", ZfpCodec(mode="expert", minbits=1, maxbits=4096, maxprec=24, minexp=-1074)),
    ("n5_default", N5DefaultCodec(codecs=[TransposeCodec(order=(1, 0)), BytesCodec(endian="big"), GzipCodec(level=5)])),
    ("packbits", PackBitsCodec()),
]


@pytest.mark.parametrize(("name", "codec"), SCHEMA_CASES, ids=lambda value: getattr(value, "mode", None) or str(value))
def test_written_json_is_valid_for_the_registry_schema(name, codec):
    document = codec.to_json()
    assert schema_errors(name, document) == []
    assert codec_from_json(json.loads(json.dumps(document)), "codecs[0]") == codec


def test_n5_default_schema_is_invalid_as_published():
    """Registry defect: n5_default's schema.json says {"type": "#/$defs/codec"} (schema_errors corrects it)."""
    schema = json.loads((REGISTRY / "codecs" / "n5_default" / "schema.json").read_text())
    with pytest.raises(jsonschema.SchemaError, match="#/\\$defs/codec"):
        jsonschema.Draft202012Validator.check_schema(schema)


def test_packbits_schema_and_page_disagree_zarrx_writes_the_page_names():
    """The registry's packbits page (and zarrs) say first_byte / first_bit / last_bit; its schema.json
    says start_byte / start_bit / end_bit. zarrx writes the page's names (zarrs refuses the schema's:
    test_zarrs_refuses_the_packbits_schema_names) and reads both."""
    written = PackBitsCodec(padding_encoding="first_byte", first_bit=1, last_bit=2).to_json()
    assert written["configuration"] == {"padding_encoding": "first_byte", "first_bit": 1, "last_bit": 2}
    assert schema_errors("packbits", written)  # the schema refuses the page's names
    schema_form = {"name": "packbits", "configuration": {"padding_encoding": "start_byte", "start_bit": 1, "end_bit": 2}}
    assert schema_errors("packbits", schema_form) == []
    assert codec_from_json(schema_form, "codecs[0]") == PackBitsCodec(padding_encoding="first_byte", first_bit=1, last_bit=2)


BAD_CONFIGURATIONS = [
    {"name": "bitround"},
    {"name": "bitround", "configuration": {"keepbits": -1}},
    {"name": "bitround", "configuration": {"keepbits": 3, "x": 1}},
    {"name": "packbits", "configuration": {"padding_encoding": "middle"}},
    {"name": "packbits", "configuration": {"first_bit": 3, "last_bit": 1}},
    {"name": "reshape", "configuration": {"shape": [-1, -1]}},
    {"name": "reshape", "configuration": {"shape": [[1], [0]]}},
    {"name": "reshape", "configuration": {"shape": [0]}},
    {"name": "reshape", "configuration": {}},
    {"name": "zfp", "configuration": {"mode": "fixed_rate"}},
    {"name": "zfp", "configuration": {"mode": "lossless"}},
    {"name": "zfp", "configuration": {"mode": "reversible", "rate": 3}},
    {"name": "zfp", "configuration": {"mode": "fixed_accuracy", "tolerance": "0.1"}},
    {"name": "conditional", "configuration": {"codecs": [{"name": "bytes"}]}},
    {"name": "conditional", "configuration": {"codecs": [{"name": "gzip"}], "header_bits": 12}},
    {"name": "n5_default", "configuration": {"codecs": [{"name": "bytes", "configuration": {"endian": "big"}}]}},
    {"name": "n5_default", "configuration": {"codecs": [{"name": "transpose", "configuration": {"order": [1, 0]}},
                                                        {"name": "bytes", "configuration": {"endian": "little"}}]}},
]  # fmt: skip


@pytest.mark.parametrize("document", BAD_CONFIGURATIONS, ids=lambda document: json.dumps(document))
def test_bad_configurations_are_refused_naming_the_codec(document):
    with pytest.raises(MetadataError, match=rf"^codecs\[0\]: .*{document['name']}"):
        codec_from_json(document, "codecs[0]")


@pytest.mark.parametrize(("codec", "dtype", "shape"), [
    (BitroundCodec(keepbits=3), "string", (4,)),
    (PackBitsCodec(), "string", (4,)),
    (PackBitsCodec(last_bit=9), "uint8", (4,)),
    (ReshapeCodec(shape=[5, -1]), "uint8", (4, 3)),
    (ReshapeCodec(shape=[[0], [2]]), "uint8", (4, 3)),
    (ReshapeCodec(shape=[[1], 12]), "uint8", (4, 3, 1)),
    (ZfpCodec(mode="reversible"), "complex64", (4,)),
    (ZfpCodec(mode="reversible"), "float32", (2, 2, 2, 2, 2)),
    (N5DefaultCodec(codecs=[TransposeCodec(order=(0, 1)), BytesCodec(endian="big")]), "uint16", (2, 3)),
])  # fmt: skip
def test_codecs_refuse_what_they_cannot_encode_at_create(tmp_path, codec, dtype, shape):
    kind = {"array_to_array": "filters", "array_to_bytes": "serializer"}[codec.kind]
    arguments = {kind: [codec] if kind == "filters" else codec}
    if kind == "filters" and dtype == "string":
        arguments["serializer"] = {"name": "vlen-utf8"}
    with pytest.raises(MetadataError, match=codec.name):
        zarrx.create_array(str(tmp_path), shape=shape, chunks=shape, dtype=dtype, **arguments)
    assert not any(tmp_path.iterdir())


# -- bitround ---------------------------------------------------------------------------------------
def _reference_round(value: int, keepbits: int, maxbits: int, width: int) -> int:
    """zarrs' round_bits, one Python integer at a time."""
    if keepbits >= maxbits:
        return value
    maskbits = maxbits - keepbits
    mask = (((1 << width) - 1) >> maskbits) << maskbits
    rounded = min(value + ((value >> maskbits) & 1) + (1 << (maskbits - 1)) - 1, (1 << width) - 1)
    return rounded & mask


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"])
@pytest.mark.parametrize("keepbits", [1, 3, 7])
def test_bitround_integers_match_the_reference_algorithm(dtype, keepbits):
    info = np.iinfo(dtype)
    values = np.random.default_rng(keepbits).integers(info.min, info.max, 200, dtype=dtype, endpoint=True)
    values[:4] = [0, 1, info.max, info.min]
    width = 8 * values.dtype.itemsize
    unsigned = values.view(f"u{values.dtype.itemsize}")
    expected = np.array([_reference_round(int(v), keepbits, int(v).bit_length(), width) for v in unsigned],
                        dtype=unsigned.dtype).view(dtype)  # fmt: skip
    assert bits_of(BitroundCodec(keepbits=keepbits).encode(values, spec(values.shape, dtype))) == bits_of(expected)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("keepbits", [0, 1, 5, 16])
def test_bitround_floats_match_numcodecs(dtype, keepbits):
    values = np.random.default_rng(keepbits).standard_normal(500).astype(dtype) * 1e3
    values[:4] = [np.inf, -0.0, np.finfo(dtype).max, np.finfo(dtype).tiny]
    expected = numcodecs.BitRound(keepbits=keepbits).encode(values).view(dtype)
    assert bits_of(BitroundCodec(keepbits=keepbits).encode(values, spec(values.shape, dtype))) == bits_of(expected)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "complex64", "complex128", "complex_bfloat16", "complex_float16",
                                   "M8[s]", "m8[ms]"])  # fmt: skip
def test_bitround_round_trips_through_arrays(tmp_path, dtype):
    data_type = resolve_data_type(dtype)
    raw = np.random.default_rng(2).standard_normal(60) * 100
    values = (raw + 1j * raw[::-1]).astype(data_type.numpy_dtype) if data_type.numpy_dtype.kind in "cW" else raw.astype(
        data_type.numpy_dtype if data_type.numpy_dtype.kind not in "mM" else np.int64).astype(data_type.numpy_dtype)
    array = zarrx.create_array(str(tmp_path), shape=(60,), chunks=(16,), dtype=dtype, filters=[BitroundCodec(keepbits=4)])
    array[...] = values
    expected = BitroundCodec(keepbits=4).encode(values, spec((60,), dtype))
    assert bits_of(array[...]) == bits_of(expected)
    assert bits_of(expected) != bits_of(values)  # something was rounded
    if data_type.numpy_dtype.kind not in "mM":
        close = np.abs(np.asarray(array[...], dtype=np.complex128) - np.asarray(values, dtype=np.complex128))
        assert close.max() <= np.abs(np.asarray(values, dtype=np.complex128)).max() / 2**4


# -- packbits ---------------------------------------------------------------------------------------
PACKABLE = ["int2", "uint2", "int4", "uint4", "float4_e2m1fn", "float6_e2m3fn", "float6_e3m2fn", "bfloat16",
            "complex_float4_e2m1fn", "complex_float6_e3m2fn", "complex_bfloat16", "float8_e5m2"]  # fmt: skip
PACKBITS_CONFIGURATIONS = [{}, {"padding_encoding": "first_byte"}, {"padding_encoding": "last_byte"}]


@pytest.mark.parametrize("configuration", PACKBITS_CONFIGURATIONS, ids=str)
@pytest.mark.parametrize("name", PACKABLE)
def test_packbits_round_trip_and_size(tmp_path, name, configuration):
    raw = stored_bits(name, (7, 5), seed=6)
    values = in_memory(name, raw)
    codec = PackBitsCodec(**configuration)
    array = zarrx.create_array(str(tmp_path), shape=(7, 5), chunks=(3, 5), dtype=name, serializer=codec, compressors=None)
    array[...] = values
    assert bits_of(array[...]) == bits_of(values)
    bits = resolve_data_type(name).packbits_bits * resolve_data_type(name).packbits_components
    expected_size = -(-15 * bits // 8) + bool(configuration)
    assert (tmp_path / "c" / "0" / "0").stat().st_size == expected_size


@pytest.mark.parametrize(("dtype", "values"), [
    ("bool", [True, False, True, True, False, False, False, True, True]),
    ("int8", [-128, -1, 0, 1, 127]),
    ("uint16", [0, 1, 65535, 300]),
    ("int64", [-(2**63), -1, 2**63 - 1]),
    ("float32", [1.5, -np.inf, np.nan]),
    ("complex64", [1 + 2j, -0.5j]),
    ("float16", [1.0, -2.5]),
])  # fmt: skip
def test_packbits_core_types(dtype, values):
    values = np.array(values, dtype=dtype)
    chunk = spec(values.shape, dtype)
    encoded = PackBitsCodec().encode(values, chunk)
    assert bits_of(PackBitsCodec().decode(encoded, chunk)) == bits_of(values)
    if dtype == "bool":
        assert bytes(encoded) == bytes([0b10001101, 0b1])  # element i is bit i, least significant first


def test_packbits_bit_range_sign_extends_signed_values():
    values = np.array([1, -2, 7, -8, 3], dtype=ml_dtypes.int4)
    codec = PackBitsCodec(first_bit=1, last_bit=2)
    chunk = spec(values.shape, "int4")
    encoded = codec.encode(values, chunk)
    assert bytes(encoded).hex() == "3c01"  # as zarrs writes it (test_packbits_with_zarrs)
    assert codec.decode(encoded, chunk).tolist() == [0, -2, -2, 0, 2]


def test_packbits_refuses_wrong_sizes_and_padding_bytes():
    chunk = spec((5,), "int4")
    with pytest.raises(ChunkDecodeError, match="expected 4 bytes"):
        PackBitsCodec(padding_encoding="first_byte").decode(b"\x04\xe1\x87", chunk)
    with pytest.raises(ChunkDecodeError, match="first_byte says 3 padding bits, expected 4"):
        PackBitsCodec(padding_encoding="first_byte").decode(b"\x03\xe1\x87\x03", chunk)


@pytest.mark.parametrize("configuration", [{}, {"padding_encoding": "first_byte"}, {"padding_encoding": "last_byte"},
                                           {"first_bit": 1, "last_bit": 2}], ids=str)  # fmt: skip
@pytest.mark.parametrize("name", ["int4", "uint2", "float6_e2m3fn", "complex_float4_e2m1fn", "bfloat16"])
def test_packbits_with_zarrs(tmp_path, name, configuration):
    if "last_bit" in configuration:  # a range inside the type's bits
        configuration = {"first_bit": 3, "last_bit": 14} if name == "bfloat16" else {"first_bit": 1, "last_bit": resolve_data_type(name).packbits_bits - 1}
    whole_bytes = name == "bfloat16" and configuration.get("padding_encoding")  # see test_zarrs_drops_the_padding_byte
    raw = stored_bits(name, (6, 5), seed=7)
    metadata = {"shape": [6, 5], "data_type": name, "fill_value": [0, 0] if name.startswith("complex") else 0,
                "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4, 3]}},
                "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
                "codecs": [{"name": "packbits", "configuration": configuration}]}  # fmt: skip
    zarrs_write(tmp_path / "zarrs", metadata, raw)
    from_zarrs = zarrx.open_array(str(tmp_path / "zarrs"))[...]
    array = zarrx.create_array(str(tmp_path / "zarrx"), shape=(6, 5), chunks=(4, 3), dtype=name, compressors=None,
                               serializer=PackBitsCodec(**configuration))  # fmt: skip
    array[...] = in_memory(name, raw)
    assert bits_of(from_zarrs) == bits_of(array[...])
    if not whole_bytes:
        assert zarrs_read(tmp_path / "zarrx", stored_size(name)).tobytes() == zarrs_read(tmp_path / "zarrs", stored_size(name)).tobytes()
        for key in ["c/0/0", "c/1/1"]:
            assert (tmp_path / "zarrx" / key).read_bytes() == (tmp_path / "zarrs" / key).read_bytes()
    if not configuration:
        assert bits_of(from_zarrs) == bits_of(in_memory(name, raw))


def test_zarrs_refuses_the_packbits_schema_names(tmp_path):
    metadata = {"shape": [2], "data_type": "int4", "fill_value": 0,
                "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}},
                "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
                "codecs": [{"name": "packbits", "configuration": {"padding_encoding": "start_byte"}}]}  # fmt: skip
    with pytest.raises(TypeError, match="PackBitsCodecConfiguration"):
        zarrs_write(tmp_path, metadata, np.zeros(2, np.uint8))


def test_zarrs_drops_the_padding_byte_for_whole_byte_elements(tmp_path):
    """Disagreement: the page adds the padding byte whatever the padding; zarrs leaves it out when
    elements are whole bytes (int4 with no padding bits keeps it). zarrx writes it and reads both."""
    metadata = {"shape": [3], "data_type": "uint16", "fill_value": 0,
                "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [3]}},
                "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
                "codecs": [{"name": "packbits", "configuration": {"padding_encoding": "first_byte"}}]}  # fmt: skip
    values = np.array([1, 2, 300], dtype="uint16")
    zarrs_write(tmp_path, metadata, values)
    assert (tmp_path / "c" / "0").read_bytes() == values.tobytes()  # no padding byte
    np.testing.assert_array_equal(zarrx.open_array(str(tmp_path))[...], values)
    encoded = PackBitsCodec(padding_encoding="first_byte").encode(values, spec((3,), "uint16"))
    assert bytes(encoded) == b"\x00" + values.tobytes()


# -- reshape ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("configuration", "chunk", "encoded"), [
    ([[0, 1], [2], 3], (2, 5, 4, 3), (10, 4, 3)),
    ([-1], (2, 5, 4), (40,)),
    ([2, -1, [2]], (4, 3, 5), (2, 6, 5)),
    ([[0], [], [1]], (4, 3), (4, 1, 3)),
])  # fmt: skip
def test_reshape_shapes_and_round_trip(tmp_path, configuration, chunk, encoded):
    codec = ReshapeCodec(shape=configuration)
    assert codec.resolve_spec(spec(chunk, "int16")).shape == encoded
    shape = tuple(2 * n + 1 for n in chunk)
    values = np.arange(np.prod(shape), dtype="int16").reshape(shape)
    array = zarrx.create_array(str(tmp_path), shape=shape, chunks=chunk, dtype="int16", filters=[codec])
    array[...] = values
    np.testing.assert_array_equal(array[...], values)


@pytest.mark.parametrize("order", [None, (1, 0, 2)])
def test_reshape_with_zarrs(tmp_path, order):
    filters = ([{"name": "transpose", "configuration": {"order": list(order)}}] if order else []) + [
        {"name": "reshape", "configuration": {"shape": [[0, 1], -1]}}]
    # a grid of whole chunks: zarrs cannot decode parts of reshaped chunks
    metadata = {"shape": [4, 6, 4], "data_type": "uint16", "fill_value": 7,
                "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 3, 4]}},
                "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
                "codecs": [*filters, {"name": "bytes", "configuration": {"endian": "little"}}]}  # fmt: skip
    values = np.arange(96, dtype="uint16").reshape(4, 6, 4)
    zarrs_write(tmp_path / "zarrs", metadata, values)
    np.testing.assert_array_equal(zarrx.open_array(str(tmp_path / "zarrs"))[...], values)
    array = zarrx.create_array(str(tmp_path / "zarrx"), shape=(4, 6, 4), chunks=(2, 3, 4), dtype="uint16", fill_value=7,
                               filters=filters, compressors=None)  # fmt: skip
    array[...] = values
    np.testing.assert_array_equal(zarrs_read(tmp_path / "zarrx", 2).view("uint16"), values)
    assert (tmp_path / "zarrx" / "c/1/1/0").read_bytes() == (tmp_path / "zarrs" / "c/1/1/0").read_bytes()


# -- zfp -----------------------------------------------------------------------------------------------------
ZFPY_MODES = [
    (ZfpCodec(mode="reversible"), {}),
    (ZfpCodec(mode="fixed_accuracy", tolerance=0.01), {"tolerance": 0.01}),
    (ZfpCodec(mode="fixed_rate", rate=10.0), {"rate": 10}),
    (ZfpCodec(mode="fixed_precision", precision=14), {"precision": 14}),
]


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
@pytest.mark.parametrize("shape", [(13,), (5, 7), (3, 4, 5), (2, 3, 4, 5)], ids=str)
@pytest.mark.parametrize(("codec", "zfpy_arguments"), ZFPY_MODES, ids=lambda value: getattr(value, "mode", ""))
def test_zfp_streams_are_zfpys_byte_for_byte(codec, zfpy_arguments, dtype, shape):
    if dtype.startswith("int") and "tolerance" in zfpy_arguments:
        zfpy_arguments, codec = {"precision": 20}, ZfpCodec(mode="fixed_precision", precision=20)
    values = (np.random.default_rng(len(shape)).standard_normal(shape) * 1000).astype(dtype)
    chunk = spec(shape, dtype)
    encoded = bytes(codec.encode(values, chunk))
    assert encoded == zfpy.compress_numpy(values, write_header=False, **zfpy_arguments)
    decoded = codec.decode(encoded, chunk)
    reference = zfpy._decompress(encoded, zfpy.dtype_to_ztype(values.dtype), list(shape), **zfpy_arguments)
    np.testing.assert_array_equal(decoded, reference)
    if codec.mode == "reversible":
        np.testing.assert_array_equal(decoded, values)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint16", "uint32", "uint64", "float16", "bfloat16"])
def test_zfp_promoted_types_round_trip_reversibly(tmp_path, dtype):
    data_type = resolve_data_type(dtype)
    numpy_dtype = data_type.numpy_dtype
    if numpy_dtype.kind in "iu":
        info = np.iinfo(numpy_dtype)
        high = min(info.max, np.iinfo(np.int64 if info.bits == 64 else np.int32).max)
        values = np.random.default_rng(0).integers(info.min, high, (9, 6), dtype=numpy_dtype, endpoint=True)
    else:
        values = np.random.default_rng(0).standard_normal((9, 6)).astype(numpy_dtype)
    array = zarrx.create_array(str(tmp_path), shape=(9, 6), chunks=(4, 4), dtype=dtype, serializer=ZfpCodec(mode="reversible"))
    array[...] = values
    assert bits_of(array[...]) == bits_of(values)


def test_zfp_promotion_follows_the_registry_page():
    """uint8 is stored as (value - 128) << 23 in an int32 field (the page's zfp_promote_uint8)."""
    values = np.array([0, 1, 128, 255], dtype="uint8")
    encoded = ZfpCodec(mode="reversible").encode(values, spec((4,), "uint8"))
    promoted = (values.astype(np.int32) - 128) << 23
    assert bytes(encoded) == zfpy.compress_numpy(promoted, write_header=False)


def test_zfp_expert_mode_and_bad_streams():
    values = np.linspace(-1, 1, 64).reshape(4, 16)
    chunk = spec(values.shape, "float64")
    codec = ZfpCodec(mode="expert", minbits=0, maxbits=64 * 16, maxprec=20, minexp=-30)
    encoded = codec.encode(values, chunk)
    assert np.abs(codec.decode(encoded, chunk) - values).max() < 1e-4
    with pytest.raises(ChunkDecodeError, match="ends before a chunk"):
        ZfpCodec(mode="reversible").decode(bytes(ZfpCodec(mode="reversible").encode(values, chunk))[:40], chunk)
    with pytest.raises(ChunkEncodeError, match="past 2147483647"):
        ZfpCodec(mode="reversible").encode(np.array([2**31], dtype="uint32"), spec((1,), "uint32"))


def test_zfp_through_arrays_with_sharding_and_reshape(tmp_path):
    values = np.random.default_rng(3).standard_normal((4, 6, 8, 10)).astype("float32")
    array = zarrx.create_array(str(tmp_path), shape=(4, 6, 8, 10, 1), chunks=(2, 3, 4, 5, 1), shards=(4, 6, 8, 10, 1),
                               dtype="float32", filters=[ReshapeCodec(shape=[[0, 1], [2], [3], [4]])],
                               serializer=ZfpCodec(mode="fixed_accuracy", tolerance=1e-3))  # fmt: skip
    array[...] = values[..., None]
    assert np.abs(array[..., 0] - values).max() <= 1e-3


# -- conditional ----------------------------------------------------------------------------------
def test_conditional_applies_what_helps_and_marks_it(tmp_path):
    codec = ConditionalCodec(codecs=[ZstdCodec(level=3), Crc32cCodec()])
    array = zarrx.create_array(str(tmp_path), shape=(2, 1000), chunks=(1, 1000), dtype="uint8", compressors=[codec])
    noise = np.random.default_rng(0).integers(0, 256, 1000, dtype=np.uint8)
    array[0] = 0
    array.attrs["x"] = 1
    array[0] = 5
    array[1] = noise
    smooth, random = (tmp_path / "c/0/0").read_bytes(), (tmp_path / "c/1/0").read_bytes()
    assert smooth[0] == 0b01 and len(smooth) < 100  # zstd helped, crc32c (4 more bytes) did not
    assert random[0] == 0b00 and random[1:] == noise.tobytes()  # stored as is
    np.testing.assert_array_equal(zarrx.open_array(str(tmp_path))[...], np.stack([np.full(1000, 5, np.uint8), noise]))
    assert json.loads((tmp_path / "zarr.json").read_text())["codecs"][1] == {
        "name": "conditional", "configuration": {"codecs": [{"name": "zstd", "configuration": {"level": 3}}, {"name": "crc32c"}]}}


def test_conditional_header_bits_and_bad_headers():
    codec = ConditionalCodec(codecs=[GzipCodec(level=1)], header_bits=16)
    encoded = codec.encode(bytes(64))
    assert encoded[:2] == b"\x01\x00"
    assert bytes(codec.decode(encoded, 64, 64)) == bytes(64)
    with pytest.raises(ChunkDecodeError, match="marks codecs past the 1"):
        codec.decode(b"\x02\x00" + bytes(64), 64, 64)
    with pytest.raises(ChunkDecodeError, match="cannot hold the 2-byte header"):
        codec.decode(b"\x01", 64, 64)
    with pytest.raises(ChunkDecodeError, match="expected 64"):
        codec.decode(b"\x00\x00" + bytes(60), 64, 64)


# -- n5_default ------------------------------------------------------------------------------------------
N5_CODECS = [{"name": "transpose", "configuration": {"order": [1, 0]}}, {"name": "bytes", "configuration": {"endian": "big"}},
             {"name": "gzip", "configuration": {"level": 6}}]  # fmt: skip


def _n5_zarr_json(path: Path, fill_value: int = 0) -> None:
    (path / "zarr.json").write_text(json.dumps({
        "zarr_format": 3, "node_type": "array", "shape": [5, 7], "data_type": "uint16", "fill_value": fill_value,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 3]}},
        "chunk_key_encoding": {"name": "v2", "configuration": {"separator": "/"}},
        "codecs": [{"name": "n5_default", "configuration": {"codecs": N5_CODECS}}],
    }))  # fmt: skip


def _tensorstore_n5(path: Path, create: bool) -> ts.TensorStore:
    spec = {"driver": "n5", "kvstore": {"driver": "file", "path": str(path)}}
    if create:
        spec["metadata"] = {"dimensions": [5, 7], "blockSize": [2, 3], "dataType": "uint16",
                            "compression": {"type": "gzip", "level": 6}}  # fmt: skip
    return ts.open(spec, create=create).result()


def test_n5_default_reads_tensorstore_n5_blocks(tmp_path):
    values = np.arange(35, dtype="uint16").reshape(5, 7) * 7
    store = _tensorstore_n5(tmp_path, create=True)
    store[:4].write(values[:4]).result()
    _n5_zarr_json(tmp_path)
    expected = values.copy()
    expected[4:] = 0
    np.testing.assert_array_equal(zarrx.open_array(str(tmp_path))[...], expected)


def test_n5_default_writes_blocks_tensorstore_reads(tmp_path):
    values = np.arange(35, dtype="uint16").reshape(5, 7) + 1000
    array = zarrx.create_array(str(tmp_path), shape=(5, 7), chunks=(2, 3), dtype="uint16",
                               chunk_key_encoding={"name": "v2", "separator": "/"},
                               serializer={"name": "n5_default", "configuration": {"codecs": N5_CODECS}}, compressors=None)  # fmt: skip
    array[...] = values
    _tensorstore_n5(tmp_path / "n5", create=True)  # its attributes.json beside zarrx's blocks
    (tmp_path / "attributes.json").write_bytes((tmp_path / "n5" / "attributes.json").read_bytes())
    np.testing.assert_array_equal(_tensorstore_n5(tmp_path, create=False).read().result(), values)


def test_n5_default_pads_truncated_edge_blocks(tmp_path):
    """N5's Java writers store edge blocks at their in-bounds size; the header says so."""
    _n5_zarr_json(tmp_path, fill_value=9)
    array = zarrx.open_array(str(tmp_path))
    codec = array.metadata.codecs.array_bytes
    block = codec.encode(np.array([[1, 2]], dtype="uint16"), spec((1, 2), "uint16", 9))  # rows 4, columns 6..7 of 5 x 7
    (tmp_path / "2").mkdir()
    (tmp_path / "2" / "2").write_bytes(bytes(block))
    np.testing.assert_array_equal(array[4, 6:], [1])
    with pytest.raises(ChunkDecodeError, match="default mode"):
        (tmp_path / "2" / "2").write_bytes(b"\x00\x01" + bytes(block)[2:])
        array[4, 6]


def test_codecs_and_types_in_xarray_encodings(tmp_path):
    """The forms users hold, in an xarray encoding: codec objects, registry JSON, ml_dtypes data."""
    import xarray as xr

    import zarrx.xarray  # noqa: F401  (the .zarrx accessor)

    field = np.random.default_rng(0).standard_normal((4, 5)).astype("f4")
    levels = np.array([1, -2, 3, -4], dtype=ml_dtypes.int4)
    dataset = xr.Dataset({"v": (("x", "y"), field), "q": (("x",), levels)})
    dataset.zarrx.to_zarr(str(tmp_path), mode="w", encoding={
        "v": {"filters": [BitroundCodec(keepbits=5)], "serializer": ZfpCodec(mode="reversible"), "compressors": None},
        "q": {"serializer": {"name": "packbits"}, "compressors": None},
    })  # fmt: skip
    assert [c["name"] for c in json.loads((tmp_path / "v" / "zarr.json").read_text())["codecs"]] == ["bitround", "zfp"]
    opened = xr.open_dataset(str(tmp_path), engine="zarrx")
    assert opened["q"].dtype == ml_dtypes.int4 and opened["q"].values.tolist() == [1, -2, 3, -4]
    rounded = BitroundCodec(keepbits=5).encode(field, spec(field.shape, "float32"))
    np.testing.assert_array_equal(opened["v"].values, rounded)
