"""The codec pipeline and registry: order validation, unknown codecs, must_understand, spec
threading (evolve/validate), the bounded-decoding sizes and error messages."""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib.metadata import EntryPoint
from typing import Any

import numpy as np
import pytest

from zarrx.codecs import (
    ArrayArrayCodec,
    BloscCodec,
    BytesBytesCodec,
    BytesCodec,
    ChunkSpec,
    CodecPipeline,
    Crc32cCodec,
    GzipCodec,
    TransposeCodec,
    VLenBytesCodec,
    VLenUTF8Codec,
    ZstdCodec,
    codec_from_json,
    get_codec_class,
    parse_codecs,
    register_codec,
)
from zarrx.codecs import registry
from zarrx.codecs.pipeline import DEFAULT_MAX_SIZE
from zarrx.dtypes import resolve_data_type
from zarrx.errors import ChunkDecodeError, ChunkEncodeError, MetadataError, UnknownCodecError

KEY = "c/3/1"


def make_spec(dtype, shape) -> ChunkSpec:
    data_type = resolve_data_type(dtype)
    return ChunkSpec(tuple(shape), data_type, data_type.default_fill_value())


@dataclass(frozen=True, eq=False)
class Spy(BytesBytesCodec):
    """Wraps a bytes -> bytes codec and records the sizes the pipeline passes to decode."""

    name = "spy"
    inner: BytesBytesCodec = field(default_factory=Crc32cCodec)
    calls: list = field(default_factory=list)

    def encoded_size(self, decoded_size: int) -> int | None:
        return self.inner.encoded_size(decoded_size)

    def encode(self, data):
        return self.inner.encode(data)

    def decode(self, data, expected_size, max_size):
        self.calls.append((expected_size, max_size))
        return self.inner.decode(data, expected_size, max_size)


@dataclass(frozen=True, eq=False)
class Failing(BytesBytesCodec):
    """Raises a foreign exception, as numcodecs does on corrupt input."""

    name = "failing"
    error: Exception = field(default_factory=lambda: RuntimeError("blosc said no"))

    def encode(self, data):
        return data

    def decode(self, data, expected_size, max_size):
        raise self.error


class Reshaping(ArrayArrayCodec):
    """A buggy array -> array codec that decodes to the wrong shape."""

    name = "reshaping"

    def encode(self, array, spec):
        return array

    def decode(self, array, spec):
        return array.reshape(-1)


# -- order and JSON -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("codecs", "match"),
    [
        ([], r"exactly one array -> bytes codec.*found 0 in \[no codecs\]"),
        ([GzipCodec()], r"found 0 in \[gzip \(bytes -> bytes\)\]"),
        ([BytesCodec(), VLenUTF8Codec()], "found 2"),
        (
            [GzipCodec(), BytesCodec()],
            "array -> bytes codec 'bytes' at position 1 comes after the bytes -> bytes codec 'gzip'",
        ),
        ([BytesCodec(), TransposeCodec(order=(0,))], "array -> array codec 'transpose' at position 1 comes after"),
        ([TransposeCodec(order=(0,)), BytesCodec(), Crc32cCodec(), TransposeCodec(order=(0,))], "position 3"),
    ],
)
def test_order_is_validated(codecs, match) -> None:
    with pytest.raises(MetadataError, match=match) as info:
        CodecPipeline.from_codecs(codecs)
    assert str(info.value).startswith("codecs: ")


def test_from_json_errors_name_the_field() -> None:
    with pytest.raises(MetadataError, match="codecs: expected a list"):
        CodecPipeline.from_json({"name": "bytes"})
    with pytest.raises(MetadataError, match=r"^codecs\[1\]: .*level"):
        CodecPipeline.from_json(["bytes", {"name": "gzip", "configuration": {"level": 99}}])
    with pytest.raises(MetadataError, match=r"^index_codecs: expected exactly one"):
        CodecPipeline.from_json([{"name": "crc32c"}], field_name="index_codecs")
    with pytest.raises(MetadataError, match=r"codecs\[0\]"):
        CodecPipeline.from_json([42])
    with pytest.raises(MetadataError, match="expected a codec"):
        CodecPipeline.from_codecs([BytesCodec(), "gzip"])


def test_unknown_codec() -> None:
    with pytest.raises(UnknownCodecError, match=r"codecs\[2\]: unknown codec 'lzma-9000'") as info:
        CodecPipeline.from_json(["bytes", "crc32c", {"name": "lzma-9000", "configuration": {}}])
    assert isinstance(info.value, MetadataError)
    with pytest.raises(UnknownCodecError, match="lzma-9000"):
        CodecPipeline.from_json(["bytes", {"name": "lzma-9000", "must_understand": True}])
    with pytest.raises(UnknownCodecError):
        get_codec_class("lzma-9000")


def test_must_understand_false() -> None:
    document = [
        {"name": "bytes", "configuration": {"endian": "little"}},
        {"name": "some-checksum", "configuration": {"x": 1}, "must_understand": False},
        {"name": "crc32c", "must_understand": False},  # known: used, not ignored
    ]
    pipeline = CodecPipeline.from_json(document)
    assert pipeline.codecs == (BytesCodec(endian="little"), Crc32cCodec())
    assert codec_from_json(document[1], "codecs[1]") is None
    with pytest.raises(MetadataError, match="must_understand"):
        CodecPipeline.from_json(["bytes", {"name": "crc32c", "must_understand": "no"}])


def test_json_round_trip() -> None:
    document = [
        {"name": "transpose", "configuration": {"order": [1, 0]}},
        {"name": "bytes", "configuration": {"endian": "big"}},
        {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 1, "shuffle": "shuffle", "typesize": 2,
                                            "blocksize": 0}},  # fmt: skip
        {"name": "zstd", "configuration": {"level": 3, "checksum": True}},
        {"name": "crc32c"},
    ]
    pipeline = CodecPipeline.from_json(document)
    assert pipeline.to_json() == document
    assert CodecPipeline.from_json(pipeline.to_json()) == pipeline
    assert pipeline.array_array == (TransposeCodec(order=(1, 0)),)
    assert pipeline.array_bytes == BytesCodec(endian="big")
    assert [codec.name for codec in pipeline.bytes_bytes] == ["blosc", "zstd", "crc32c"]


def test_parse_codecs_takes_json_instances_and_mixes() -> None:
    expected = (BytesCodec(), ZstdCodec(level=3))
    assert parse_codecs([BytesCodec(), {"name": "zstd", "configuration": {"level": 3}}]) == expected
    assert parse_codecs(["bytes", ZstdCodec(level=3)]) == expected
    assert parse_codecs(ZstdCodec(level=3)) == (ZstdCodec(level=3),)
    assert parse_codecs({"name": "gzip", "configuration": {"level": 1}}) == (GzipCodec(level=1),)
    assert parse_codecs(None) == ()
    assert parse_codecs([{"name": "nope", "must_understand": False}]) == ()
    with pytest.raises(UnknownCodecError, match=r"compressors\[0\]"):
        parse_codecs(["nope"], "compressors")
    with pytest.raises(MetadataError):
        parse_codecs(3)


# -- registry -----------------------------------------------------------------------------


def test_register_codec_and_aliases(monkeypatch) -> None:
    monkeypatch.setattr(registry, "codec_registry", dict(registry.codec_registry))

    @register_codec
    @dataclass(frozen=True, eq=False)
    class Identity(BytesBytesCodec):
        name = "test.identity"
        aliases = ("test-identity-old",)

        def encode(self, data):
            return data

        def decode(self, data, expected_size, max_size):
            return data

    assert get_codec_class("test.identity") is Identity
    assert codec_from_json({"name": "test-identity-old"}, "codecs[1]") == Identity()
    assert get_codec_class("endian") is BytesCodec  # the bytes codec's old name


class EntryPointCodec(Failing):
    name = "test-entry-point"


def test_entry_point_codecs_load_lazily(monkeypatch) -> None:
    monkeypatch.setattr(registry, "codec_registry", dict(registry.codec_registry))
    monkeypatch.setattr(registry, "_entry_points", {
        "test-entry-point": EntryPoint("test-entry-point", f"{__name__}:EntryPointCodec", "zarrx.codecs"),
        "test-broken": EntryPoint("test-broken", "zarrx_no_such_module:Codec", "zarrx.codecs"),
    })  # fmt: skip
    assert "test-entry-point" not in registry.codec_registry
    assert get_codec_class("test-entry-point") is EntryPointCodec
    assert registry.codec_registry["test-entry-point"] is EntryPointCodec
    with pytest.raises(UnknownCodecError, match=r"codecs\[0\]: codec 'test-broken': the plugin .* failed to load"):
        codec_from_json("test-broken", "codecs[0]")


def test_entry_points_are_read_on_first_miss(monkeypatch) -> None:
    monkeypatch.setattr(registry, "_entry_points", None)
    assert get_codec_class("zstd") is ZstdCodec
    assert registry._entry_points is None  # a hit does not scan the entry points
    with pytest.raises(UnknownCodecError):
        get_codec_class("not-installed-anywhere")
    assert registry._entry_points is not None


# -- evolve and validate ------------------------------------------------------------------


def test_evolve_threads_the_spec() -> None:
    spec = make_spec("int16", (4, 6))
    pipeline = CodecPipeline.from_codecs([TransposeCodec(order="F"), BytesCodec(), BloscCodec(), Crc32cCodec()])
    evolved = pipeline.evolve_from_spec(spec)
    assert evolved.to_json() == [
        {"name": "transpose", "configuration": {"order": [1, 0]}},
        {"name": "bytes", "configuration": {"endian": "little"}},
        {"name": "blosc", "configuration": {"cname": "zstd", "clevel": 5, "shuffle": "shuffle", "typesize": 2,
                                            "blocksize": 0}},  # fmt: skip
        {"name": "crc32c"},
    ]
    evolved.validate(spec)
    assert evolved.resolve_specs(spec)[-1].shape == (6, 4)
    strings = CodecPipeline.from_codecs([VLenUTF8Codec(), BloscCodec()]).evolve_from_spec(make_spec("string", (3,)))
    assert strings.bytes_bytes[0].typesize == 1


@pytest.mark.parametrize(
    ("codecs", "dtype", "shape", "match"),
    [
        ([BytesCodec()], "string", (3,), "variable-length data type 'string'; use vlen-utf8"),
        ([BytesCodec(endian="little")], "bytes", (3,), "variable-length"),
        ([VLenUTF8Codec()], "float32", (3,), "vlen-utf8 codec encodes variable-length strings.*use the bytes codec"),
        ([VLenBytesCodec()], "string", (3,), "vlen-bytes"),
        ([BytesCodec()], "uint16", (3,), "needs 'endian'"),
        ([TransposeCodec(order=(1, 0)), BytesCodec()], "uint8", (3,), "1 dimensions"),
        ([TransposeCodec(order=(1, 0)), TransposeCodec(order=(0, 1, 2)), BytesCodec()], "uint8", (2, 2), "3 entries"),
    ],
)
def test_validate(codecs, dtype, shape, match) -> None:
    with pytest.raises(MetadataError, match=match):
        CodecPipeline.from_codecs(codecs).validate(make_spec(dtype, shape))


# -- sizes --------------------------------------------------------------------------------


def test_expected_sizes_thread_through_crc32c_and_zstd() -> None:
    spec = make_spec("int32", (10,))  # 40 bytes
    data = np.arange(10, dtype="int32")

    zstd, crc = Spy(ZstdCodec()), Spy(Crc32cCodec())
    pipeline = CodecPipeline.from_codecs([BytesCodec(), crc, zstd]).evolve_from_spec(spec)
    pipeline.decode(pipeline.encode(data, spec), spec, KEY)
    assert zstd.calls == [(44, 44)]  # decodes to the checksummed 40 bytes
    assert crc.calls == [(40, 40)]

    zstd, crc = Spy(ZstdCodec()), Spy(Crc32cCodec())
    pipeline = CodecPipeline.from_codecs([BytesCodec(), zstd, crc], max_size=1000).evolve_from_spec(spec)
    pipeline.decode(pipeline.encode(data, spec), spec, KEY)
    assert crc.calls == [(None, 1000)]  # the compressed size varies
    assert zstd.calls == [(40, 40)]

    gzip = Spy(GzipCodec())
    strings = make_spec("string", (2,))
    pipeline = CodecPipeline.from_codecs([VLenUTF8Codec(), gzip]).evolve_from_spec(strings)
    pipeline.decode(pipeline.encode(np.array(["a", "b"], dtype=strings.dtype), strings), strings, KEY)
    assert gzip.calls == [(None, DEFAULT_MAX_SIZE)]


def test_encoded_size() -> None:
    spec = make_spec("float64", (3, 5))
    assert CodecPipeline.from_codecs([BytesCodec()]).encoded_size(spec) == 120
    checksummed = [TransposeCodec(order=(1, 0)), BytesCodec(), Crc32cCodec(), Crc32cCodec()]
    assert CodecPipeline.from_codecs(checksummed).encoded_size(spec) == 128
    assert CodecPipeline.from_codecs([BytesCodec(), ZstdCodec()]).encoded_size(spec) is None
    assert CodecPipeline.from_codecs([VLenUTF8Codec()]).encoded_size(make_spec("string", (3,))) is None


def test_max_size_bounds_variable_length_chunks() -> None:
    strings = make_spec("string", (1,))
    big = np.array(["x" * 5000], dtype=strings.dtype)
    for compressor in [GzipCodec(), ZstdCodec(), BloscCodec()]:
        pipeline = CodecPipeline.from_codecs([VLenUTF8Codec(), compressor], max_size=4096).evolve_from_spec(strings)
        with pytest.raises(ChunkDecodeError, match=f"{KEY}.*{compressor.name}"):
            pipeline.decode(pipeline.encode(big, strings), strings, KEY)


# -- errors -------------------------------------------------------------------------------


def test_decode_errors_name_key_and_codec() -> None:
    spec = make_spec("int32", (10,))
    pipeline = CodecPipeline.from_codecs([BytesCodec(), ZstdCodec(), Crc32cCodec()]).evolve_from_spec(spec)
    encoded = bytearray(pipeline.encode(np.arange(10, dtype="int32"), spec))
    encoded[-1] ^= 0xFF
    with pytest.raises(ChunkDecodeError, match=r"^chunk 'c/3/1': codec 'crc32c': checksum mismatch"):
        pipeline.decode(bytes(encoded), spec, KEY)
    with pytest.raises(ChunkDecodeError, match=r"^chunk 'c/3/1': codec 'zstd': "):
        pipeline.decode(Crc32cCodec().encode(b"not zstd at all"), spec, KEY)


def test_foreign_exceptions_become_chunk_decode_errors() -> None:
    spec = make_spec("uint8", (4,))
    for error in [RuntimeError("blosc said no"), ValueError("bad"), KeyError("x"), MemoryError()]:
        pipeline = CodecPipeline.from_codecs([BytesCodec(), Failing(error=error)])
        match = f"chunk 'c/3/1': codec 'failing' failed to decode: {type(error).__name__}"
        with pytest.raises(ChunkDecodeError, match=match) as info:
            pipeline.decode(b"abcd", spec, KEY)
        assert info.value.__cause__ is error


def test_decoded_shape_is_checked() -> None:
    spec = make_spec("uint8", (2, 2))
    pipeline = CodecPipeline.from_codecs([Reshaping(), BytesCodec()])
    with pytest.raises(ChunkDecodeError, match=r"chunk 'c/3/1': decoded to shape \(4,\).*expected shape \(2, 2\)"):
        pipeline.decode(bytes(4), spec, KEY)


def test_encode_errors() -> None:
    strings = make_spec("string", (1,))
    pipeline = CodecPipeline.from_codecs([VLenUTF8Codec()])
    with pytest.raises(ChunkEncodeError, match="chunk 'c/0': codec 'vlen-utf8' cannot encode"):
        pipeline.encode(np.array(["\udc80"], dtype=object), strings, key="c/0")  # a lone surrogate
    with pytest.raises(ChunkEncodeError, match=r"shape \(1,\), found \(2,\)"):
        pipeline.encode(np.array(["a", "b"], dtype=strings.dtype), strings)


def test_decode_result_is_exactly_the_spec() -> None:
    spec = make_spec("float32", (2, 3))
    pipeline = CodecPipeline.from_codecs([TransposeCodec(order=(1, 0)), BytesCodec(endian="big"), GzipCodec()])
    data = np.arange(6, dtype="float32").reshape(2, 3)
    decoded = pipeline.decode(pipeline.encode(data, spec), spec, KEY)
    assert decoded.shape == (2, 3) and decoded.dtype == np.dtype("float32")
    np.testing.assert_array_equal(decoded, data)
    # bytes-like inputs of every kind
    encoded = pipeline.encode(data, spec)
    for variant in (bytearray(encoded), memoryview(encoded), np.frombuffer(encoded, np.uint8)):
        np.testing.assert_array_equal(pipeline.decode(variant, spec, KEY), data)


def test_any_object_configuration_is_passed(monkeypatch) -> None:
    # a third-party codec whose from_json raises a builtin error is reported as MetadataError
    monkeypatch.setattr(registry, "codec_registry", dict(registry.codec_registry))

    @register_codec
    class Picky(Failing):
        name = "test-picky"

        @classmethod
        def from_json(cls, configuration: dict[str, Any]) -> "Picky":
            raise KeyError("needs 'foo'")

    with pytest.raises(MetadataError, match=r"codecs\[1\]: invalid configuration for codec 'test-picky'"):
        codec_from_json({"name": "test-picky", "configuration": {}}, "codecs[1]")
