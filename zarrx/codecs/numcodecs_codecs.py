"""The ``numcodecs.*`` codecs, as zarr-python 3 writes them (``zarr.codecs.numcodecs``).

zarr-python stores a numcodecs codec in v3 metadata as ``{"name": "numcodecs.<id>",
"configuration": <the numcodecs config without "id">}``. Here each kind of codec is one
generic wrapper class, parameterised by the numcodecs id and a small rules object; the
tables :data:`FILTERS`, :data:`SERIALIZERS` and :data:`COMPRESSORS` list the ids, and
one subclass per id is registered under ``"numcodecs.<id>"``
(:data:`NUMCODECS_CODECS`). The algorithms are always numcodecs' own.

* Array -> array (filters): zarr-python fills the decoded data type in from the array
  (``dtype`` of quantize and fixedscaleoffset, ``decode_dtype`` of astype) when writing
  *and* reading; so do we, and we also fill in delta's ``dtype``. The encoded
  representation follows zarr-python's ``resolve_metadata``: ``astype`` /
  ``encode_dtype`` when given, packbits gives ``uint8`` of shape ``(1 + ceil(n / 8),)``.
  zarr-python does not resolve quantize's ``astype`` (its arrays fail to read back); we
  do. numcodecs results are given the encoded representation as zarr-python's ``bytes``
  codec stores them: raw bits (bitround returns its floats as integers).
* ``numcodecs.fixedscaleoffset`` is specified in the ``scale_offset`` extension
  (zarr-extensions codecs/scale_offset, "Legacy numcodecs.fixedscaleoffset codec"):
  ``dtype`` and ``astype`` are required Zarr V2 data types and ``offset`` / ``scale``
  JSON numbers. zarr-python writes ``"dtype": "float64"`` and omits ``astype``; we read
  both forms but write what the spec says (``"<f8"``, ``astype`` filled in).
* Array -> bytes (``numcodecs.zfpy``, ``numcodecs.pcodec``): optional; they need the
  ``zfpy`` / ``pcodec`` packages, and say so when used without them. Decoding checks the
  zfp header's shape and type before decompressing (and pads the input to the most zfp
  may read: zfp streams carry no length, so a truncated one decodes to wrong values,
  not an error); pcodec decodes into the chunk's buffer and must fill it exactly.
* Bytes -> bytes: encoding is numcodecs'; decoding is bounded (never more than the
  expected or maximum size is produced): lz4's size header is checked, then numcodecs
  decompresses into a buffer of that size; zlib, bz2 and lzma (numcodecs calls the
  standard library modules) are decoded with the incremental decompressors and
  ``max_length`` (zlib's streams with ISA-L's, as the gzip codec: faster, same streams);
  shuffle and the checksums are size preserving, checked up front.
"""

from __future__ import annotations

import bz2
import json
import lzma
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

import numcodecs
import numcodecs.lz4
import numpy as np
from isal import isal_zlib

from zarrx.codecs.base import ArrayArrayCodec, ArrayBytesCodec, Buffer, BytesBytesCodec, ChunkSpec, Codec, as_uint8
from zarrx.codecs.registry import get_codec_class, register_codec
from zarrx.dtypes import resolve_data_type
from zarrx.errors import ChunkDecodeError, ChunkEncodeError, MetadataError

__all__ = [
    "COMPRESSORS",
    "FILTERS",
    "NUMCODECS_CODECS",
    "SERIALIZERS",
    "NumcodecsArrayArrayCodec",
    "NumcodecsArrayBytesCodec",
    "NumcodecsBytesBytesCodec",
]

#: numcodecs ids whose backend is a separate, optional package
_OPTIONAL_PACKAGES = {"zfpy": "zfpy", "pcodec": "pcodec"}


class _Numcodec(Codec):
    """A numcodecs codec by id; the configuration is numcodecs' keyword arguments."""

    codec_id: ClassVar[str]
    #: configuration members zarr-python (and we) fill in from the chunk spec when absent
    spec_members: ClassVar[tuple[str, ...]] = ()

    def __init__(self, **configuration: Any) -> None:
        configuration = dict(configuration)
        if configuration.get("id", self.codec_id) != self.codec_id:
            raise MetadataError(f"codecs: codec {self.name!r}: configuration id {configuration['id']!r} does not match")
        configuration.pop("id", None)  # as zarr-python: the name says it
        try:
            json.dumps(configuration)
        except (TypeError, ValueError) as error:
            raise MetadataError(f"codecs: codec {self.name!r}: the configuration must be JSON ({error})") from None
        self._configuration = configuration
        self._numcodecs: dict[str, Any] = {}
        if not set(self.spec_members) - set(configuration):
            self.numcodec(None)  # a complete configuration is checked now; others in validate()

    @classmethod
    def from_json(cls, configuration: Mapping[str, Any]) -> "_Numcodec":
        return cls(**configuration)

    def configuration(self) -> dict[str, Any]:
        return dict(self._configuration)

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuild, (self.name, self._configuration)

    def fill_in(self, spec: ChunkSpec) -> dict[str, Any]:
        """Values for :attr:`spec_members` taken from ``spec``."""
        return {}

    def numcodec(self, spec: ChunkSpec | None) -> Any:
        """The numcodecs codec for chunks of ``spec`` (missing spec members filled in)."""
        configuration = {**(self.fill_in(spec) if spec is not None else {}), **self._configuration}
        key = json.dumps(configuration, sort_keys=True)
        codec = self._numcodecs.get(key)
        if codec is None:
            try:
                codec = numcodecs.get_codec({"id": self.codec_id, **configuration})
            except (TypeError, ValueError, KeyError) as error:
                package = _OPTIONAL_PACKAGES.get(self.codec_id)
                hint = f" (is the {package!r} package installed? pip install {package})" if package else ""
                raise MetadataError(
                    f"codecs: codec {self.name!r}: numcodecs refuses the configuration {configuration}: {error}{hint}"
                ) from None
            self._numcodecs[key] = codec
        return codec

    def evolve_from_spec(self, spec: ChunkSpec) -> "_Numcodec":
        missing = {k: v for k, v in self.fill_in(spec).items() if k not in self._configuration}
        return type(self)(**self._configuration, **missing) if missing else self


def _rebuild(name: str, configuration: dict[str, Any]) -> Codec:
    return get_codec_class(name)(**configuration)  # type: ignore[call-arg]


def _fit(array: Any, shape: tuple[int, ...], dtype: np.dtype, error: type[Exception], what: str) -> np.ndarray:
    """``array`` as ``shape`` and ``dtype``, as zarr-python's bytes codec would store it (raw bits)."""
    array = np.asarray(array)
    if array.size != math.prod(shape):
        raise error(f"{what} {array.size} values, expected {math.prod(shape)}")
    if array.dtype.newbyteorder("=") == dtype:  # byte order only: the values count
        array = array.astype(dtype)
    elif array.dtype.itemsize == dtype.itemsize:  # numcodecs handed back the bits as another type
        array = np.ascontiguousarray(array).view(dtype)
    else:
        raise error(f"{what} data type {array.dtype}, expected {dtype}")
    return array.reshape(shape)


# -- array -> array ----------------------------------------------------------------------


def _dtype_name(dtype: np.dtype) -> str:
    return str(dtype)  # what zarr-python writes: "float64"


def _dtype_v2(dtype: np.dtype) -> str:
    return dtype.str  # a Zarr V2 data type: "<f8"


@dataclass(frozen=True)
class FilterRules:
    """How an array -> array numcodecs codec relates to the chunk spec."""

    #: member holding the decoded (array) data type, filled in from the spec
    decoded_dtype: str | None = None
    #: member holding the encoded data type (the decoded one when absent)
    encoded_dtype: str | None = None
    #: how a filled-in data type is written
    dtype_json: Callable[[np.dtype], str] = _dtype_name
    #: also write the encoded data type when absent (the spec requires fixedscaleoffset's astype)
    fill_encoded: bool = False
    #: NumPy kinds the codec takes, if not all (numcodecs checks more when validate() tries it)
    kinds: str | None = None
    #: bool -> bits, encoded as uint8 of shape (1 + ceil(n / 8),) (packbits)
    packs_bits: bool = False

    @property
    def spec_members(self) -> tuple[str, ...]:
        return (self.decoded_dtype,) if self.decoded_dtype else ()


FILTERS: dict[str, FilterRules] = {
    "delta": FilterRules("dtype", "astype"),
    "fixedscaleoffset": FilterRules("dtype", "astype", dtype_json=_dtype_v2, fill_encoded=True),
    "quantize": FilterRules("dtype", "astype"),
    "bitround": FilterRules(),
    "packbits": FilterRules(kinds="b", packs_bits=True),
    "astype": FilterRules("decode_dtype", "encode_dtype"),
}


class NumcodecsArrayArrayCodec(_Numcodec, ArrayArrayCodec):
    """A numcodecs filter; subclasses set ``name``, ``codec_id`` and ``rules`` (see :data:`FILTERS`).

    Examples
    --------
    >>> from zarrx.dtypes import resolve_data_type
    >>> delta = NUMCODECS_CODECS["numcodecs.delta"](dtype="<i4")
    >>> spec = ChunkSpec((3,), resolve_data_type("int32"), 0)
    >>> delta.encode(np.array([5, 7, 10], dtype="int32"), spec)
    array([5, 2, 3], dtype=int32)
    """

    rules: ClassVar[FilterRules]

    def fill_in(self, spec: ChunkSpec) -> dict[str, Any]:
        rules, values = self.rules, {}
        if rules.decoded_dtype:
            values[rules.decoded_dtype] = rules.dtype_json(spec.dtype)
            if rules.fill_encoded:
                values[rules.encoded_dtype] = values[rules.decoded_dtype]
        return values

    def _dtype(self, member: str | None) -> np.dtype | None:
        value = self._configuration.get(member) if member else None
        try:
            return None if value is None else np.dtype(value)
        except TypeError as error:
            message = f"codecs: codec {self.name!r}: {member} {value!r} is not a data type ({error})"
            raise MetadataError(message) from None

    def _encoded_layout(self, spec: ChunkSpec) -> tuple[tuple[int, ...], np.dtype]:
        if self.rules.packs_bits:
            return (1 + math.ceil(spec.size / 8),), np.dtype(np.uint8)
        encoded = self._dtype(self.rules.encoded_dtype)
        return spec.shape, spec.dtype if encoded is None else encoded.newbyteorder("=")

    def _check(self, spec: ChunkSpec) -> Any:
        """The numcodecs codec for ``spec``, once the data types in the configuration fit it."""
        codec = self.numcodec(spec)
        prefix = f"codecs: codec {self.name!r}"
        if self.rules.kinds is not None and spec.dtype.kind not in self.rules.kinds:
            raise MetadataError(f"{prefix} cannot encode the data type {spec.data_type.to_json()!r}")
        for member in (self.rules.decoded_dtype, self.rules.encoded_dtype):
            dtype = self._dtype(member)
            if dtype is not None and not dtype.isnative:
                raise MetadataError(f"{prefix}: {member} {dtype.str!r} must have the native byte order")
        declared = self._dtype(self.rules.decoded_dtype)
        if declared is not None and declared != spec.dtype:
            raise MetadataError(
                f"{prefix}: {self.rules.decoded_dtype} {self._configuration[self.rules.decoded_dtype]!r} "
                f"differs from the data type it receives, {spec.data_type.to_json()!r}"
            )
        return codec

    def _try_encode(self, codec: Any, values: np.ndarray, spec: ChunkSpec) -> Any:
        try:  # numcodecs' own checks (bitround's keepbits, quantize's float types...)
            with np.errstate(all="ignore"):
                return codec.encode(values)
        except Exception as error:
            raise MetadataError(
                f"codecs: codec {self.name!r} cannot encode the data type {spec.data_type.to_json()!r}: {error}"
            ) from None

    def validate(self, spec: ChunkSpec) -> None:
        self._try_encode(self._check(spec), np.zeros(2, dtype=spec.dtype), spec)
        self.resolve_spec(spec)

    def resolve_spec(self, spec: ChunkSpec) -> ChunkSpec:
        codec = self._check(spec)
        shape, dtype = self._encoded_layout(spec)
        data_type = resolve_data_type(dtype)
        if self.rules.packs_bits:
            return ChunkSpec(shape, data_type, data_type.default_fill_value())
        # the fill value is encoded like any element (every filter here is elementwise)
        fill = self._try_encode(codec, np.full(1, spec.fill_value, dtype=spec.dtype), spec)
        return ChunkSpec(shape, data_type, _fit(fill, (1,), dtype, MetadataError, "the fill value encodes to")[0])

    def encode(self, array: np.ndarray, spec: ChunkSpec) -> np.ndarray:
        shape, dtype = self._encoded_layout(spec)
        encoded = self.numcodec(spec).encode(np.ascontiguousarray(array))
        return _fit(encoded, shape, dtype, ChunkEncodeError, "numcodecs encoded")

    def decode(self, array: np.ndarray, spec: ChunkSpec) -> np.ndarray:
        decoded = self.numcodec(spec).decode(np.ascontiguousarray(array))
        return _fit(decoded, spec.shape, spec.dtype, ChunkDecodeError, "decoded to")


# -- array -> bytes ----------------------------------------------------------------------

#: zfp's largest header (zfp.h ZFP_HEADER_MAX_BITS) and stream word, in bits
_ZFP_HEADER_BITS = 148
_ZFP_STREAM_WORD_BITS = 64
#: the most a valid stream can exceed the raw data: a block of 4**4 values holding one real
#: value row, as chunks like (1, 1, 1, n) give (zfp pads partial blocks), is ~66 times larger
_ZFP_MAX_EXPANSION = 80


def _decode_zfpy(codec: Any, data: np.ndarray, spec: ChunkSpec) -> np.ndarray:
    import zfpy

    try:
        header = zfpy.header(data[:32].tobytes().ljust(32, b"\0"))
    except Exception as error:
        raise ChunkDecodeError(f"not a zfp stream with a header: {error}") from None
    sizes = [header[axis] for axis in ("nw", "nz", "ny", "nx") if header[axis]]
    dtype = np.dtype(header["type"])
    if math.prod(sizes) != spec.size or dtype != spec.dtype:
        raise ChunkDecodeError(
            f"the zfp header declares {sizes} {dtype} values, expected {list(spec.shape)} {spec.dtype}"
        )
    # the most zfp may read (zfp.c zfp_stream_maximum_size: type and exponent bits, then every
    # bit plane of every value, per block of 4**d values; more if the header sets minbits)
    values = 4 ** len(sizes)
    blocks = math.prod(math.ceil(size / 4) for size in sizes)
    block_bits = max(16 + values * (dtype.itemsize * 8 + 1), header["config"]["expert"]["minbits"])
    bound = (_ZFP_HEADER_BITS + blocks * block_bits) // _ZFP_STREAM_WORD_BITS * 8 + 16
    if data.nbytes < bound:  # zfp does not check the end of its input: give it zeros to read
        if bound > _ZFP_MAX_EXPANSION * spec.nbytes + 2**20:
            raise ChunkDecodeError(f"the zfp header asks for up to {bound} bytes of stream, found {data.nbytes}")
        data = np.concatenate([data, np.zeros(bound - data.nbytes, dtype=np.uint8)])
    return codec.decode(data)


def _decode_pcodec(codec: Any, data: np.ndarray, spec: ChunkSpec) -> np.ndarray:
    from pcodec import standalone

    # pcodec's own call (numcodecs' decode drops the progress, which says if the data fit)
    output = np.empty(spec.size, dtype=spec.dtype)
    progress = standalone.simple_decompress_into(data.tobytes(), output)
    if progress.n_processed != spec.size or not progress.finished:
        raise ChunkDecodeError(
            f"the pcodec data holds {'more' if progress.n_processed == spec.size else 'fewer'} "
            f"than the chunk's {spec.size} values"
        )
    return output


#: numcodecs id -> bounded decoder (codec, data as uint8, spec) -> array
SERIALIZERS: dict[str, Callable[[Any, np.ndarray, ChunkSpec], np.ndarray]] = {
    "zfpy": _decode_zfpy,
    "pcodec": _decode_pcodec,
}


class NumcodecsArrayBytesCodec(_Numcodec, ArrayBytesCodec):
    """A numcodecs codec that serializes whole arrays (zfpy, pcodec; see :data:`SERIALIZERS`)."""

    def validate(self, spec: ChunkSpec) -> None:
        try:  # numcodecs' checks of the data type and dimensions, on a one-element sample
            self.numcodec(spec).encode(np.zeros((1,) * len(spec.shape), dtype=spec.dtype))
        except MetadataError:
            raise
        except Exception as error:
            raise MetadataError(
                f"codecs: codec {self.name!r} cannot encode {len(spec.shape)}-d chunks of "
                f"{spec.data_type.to_json()!r}: {error}"
            ) from None

    def encode(self, array: np.ndarray, spec: ChunkSpec) -> Buffer:
        return bytes(self.numcodec(spec).encode(np.ascontiguousarray(array)))

    def decode(self, data: Buffer, spec: ChunkSpec) -> np.ndarray:
        decoded = SERIALIZERS[self.codec_id](self.numcodec(spec), as_uint8(data), spec)
        return _fit(decoded, spec.shape, spec.dtype, ChunkDecodeError, "decoded to")


# -- bytes -> bytes ----------------------------------------------------------------------


def _check_size(size: int, expected_size: int | None, limit: int, what: str) -> None:
    if expected_size is not None and size != expected_size:
        raise ChunkDecodeError(f"{what} {size} bytes, expected {expected_size}")
    if size > limit:
        raise ChunkDecodeError(f"{what} {size} bytes, over the limit of {limit}")


def _decode_same_size(codec: Any, data: np.ndarray, expected_size: int | None, limit: int) -> Buffer:
    _check_size(data.nbytes, expected_size, limit, "the data has")
    return codec.decode(data, np.empty(data.nbytes, dtype=np.uint8))


def _decode_checksum(codec: Any, data: np.ndarray, expected_size: int | None, limit: int) -> Buffer:
    if data.nbytes < 4:
        raise ChunkDecodeError(f"{data.nbytes} bytes is too short to hold a 4-byte checksum")
    _check_size(data.nbytes - 4, expected_size, limit, "the payload has")
    try:
        return codec.decode(data)
    except (RuntimeError, ValueError) as error:
        raise ChunkDecodeError(f"checksum mismatch: {error}") from None


def _decode_lz4(codec: Any, data: np.ndarray, expected_size: int | None, limit: int) -> Buffer:
    if data.nbytes < 4:
        raise ChunkDecodeError(f"{data.nbytes} bytes is too short for the 4-byte lz4 size header")
    declared = int.from_bytes(data[:4].tobytes(), "little")
    _check_size(declared, expected_size, limit, "the lz4 header declares")
    output = np.empty(declared, dtype=np.uint8)
    if output.nbytes:  # numcodecs refuses an empty destination
        try:  # LZ4_decompress_safe: never writes past the buffer
            numcodecs.lz4.decompress(data, output)
        except (RuntimeError, ValueError) as error:
            raise ChunkDecodeError(f"corrupt lz4 data: {error}") from None
    return output


def _stream_decoder(new_decompressor: Callable[[Any], Any], kind: str) -> Callable[..., Buffer]:
    """Bounded decoding of (concatenated) streams, as ``bz2.decompress`` / ``lzma.decompress``."""

    def decode(codec: Any, data: np.ndarray, expected_size: int | None, limit: int) -> Buffer:
        pending, output = memoryview(data), bytearray()
        if not pending:
            raise ChunkDecodeError(f"empty input, expected a {kind} stream")
        while pending:
            decompressor = new_decompressor(codec)
            try:  # never asked for more than one byte past the limit
                output += decompressor.decompress(pending, limit - len(output) + 1)
            except (OSError, EOFError, ValueError, lzma.LZMAError, isal_zlib.error) as error:
                raise ChunkDecodeError(f"corrupt {kind} stream: {error}") from None
            if len(output) > limit:
                bound = "the limit of" if expected_size is None else "the expected"
                raise ChunkDecodeError(f"decoded data is larger than {bound} {limit} bytes")
            if not decompressor.eof:
                raise ChunkDecodeError(f"truncated {kind} stream (no end of stream marker)")
            pending = memoryview(decompressor.unused_data)
        _check_size(len(output), expected_size, limit, "decoded to")
        return output

    return decode


@dataclass(frozen=True)
class CompressorRules:
    """How to decode a bytes -> bytes numcodecs codec within a size bound."""

    #: (numcodecs codec, data as uint8, expected size or None, most bytes allowed) -> bytes
    decode: Callable[[Any, np.ndarray, int | None, int], Buffer]
    #: encoded size minus decoded size when fixed (None: varies, as for compressors)
    size_change: int | None = None
    #: configuration members set to the data type's element size when absent (shuffle)
    spec_members: tuple[str, ...] = ()


_CHECKSUM = CompressorRules(_decode_checksum, size_change=4)

COMPRESSORS: dict[str, CompressorRules] = {
    "shuffle": CompressorRules(_decode_same_size, size_change=0, spec_members=("elementsize",)),
    "lz4": CompressorRules(_decode_lz4),
    "zlib": CompressorRules(_stream_decoder(lambda codec: isal_zlib.decompressobj(), "zlib")),
    "bz2": CompressorRules(_stream_decoder(lambda codec: bz2.BZ2Decompressor(), "bz2")),
    "lzma": CompressorRules(
        _stream_decoder(lambda codec: lzma.LZMADecompressor(format=codec.format, filters=codec.filters), "lzma")
    ),
    "crc32": _CHECKSUM,
    "adler32": _CHECKSUM,
    "fletcher32": _CHECKSUM,
    "jenkins_lookup3": _CHECKSUM,
}


class NumcodecsBytesBytesCodec(_Numcodec, BytesBytesCodec):
    """A numcodecs compressor, shuffle or checksum (see :data:`COMPRESSORS`)."""

    rules: ClassVar[CompressorRules]

    def fill_in(self, spec: ChunkSpec) -> dict[str, Any]:
        # zarr-python's Shuffle.evolve_from_array_spec: the element size of the data type
        item_size = spec.data_type.item_size
        return {member: item_size for member in self.spec_members} if item_size else {}

    def validate(self, spec: ChunkSpec) -> None:
        missing = set(self.spec_members) - set(self._configuration)
        if missing:  # decode() has no spec to fill them in from
            raise MetadataError(
                f"codecs: codec {self.name!r} needs the configuration members {sorted(missing)} "
                f"(zarr-python writes them; for this array: {self.fill_in(spec)})"
            )

    def encoded_size(self, decoded_size: int) -> int | None:
        change = self.rules.size_change
        return None if change is None else decoded_size + change

    def encode(self, data: Buffer) -> Buffer:
        return bytes(self.numcodec(None).encode(as_uint8(data)))

    def decode(self, data: Buffer, expected_size: int | None, max_size: int) -> Buffer:
        limit = max_size if expected_size is None else expected_size
        return self.rules.decode(self.numcodec(None), as_uint8(data), expected_size, limit)


# -- registration ----------------------------------------------------------------------


def _register(base: type[_Numcodec], codec_id: str, rules: Any = None) -> type[Codec]:
    class_name = "Numcodecs" + codec_id.title().replace("_", "") + "Codec"
    cls = type(class_name, (base,), {
        "name": f"numcodecs.{codec_id}", "codec_id": codec_id, "rules": rules, "__module__": __name__,
        "spec_members": rules.spec_members if rules else (),
        "__doc__": f"``numcodecs.{codec_id}``: numcodecs' {codec_id!r} codec, as zarr-python writes it.",
    })  # fmt: skip
    return register_codec(cls)


#: "numcodecs.<id>" -> registered class, for every numcodecs codec zarrx reads and writes
NUMCODECS_CODECS: dict[str, type[Codec]] = {
    cls.name: cls
    for cls in (
        *(_register(NumcodecsArrayArrayCodec, codec_id, rules) for codec_id, rules in FILTERS.items()),
        *(_register(NumcodecsArrayBytesCodec, codec_id) for codec_id in SERIALIZERS),
        *(_register(NumcodecsBytesBytesCodec, codec_id, rules) for codec_id, rules in COMPRESSORS.items()),
    )
}
