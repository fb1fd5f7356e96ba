"""The Zarr v2 chunk encoding as one array -> bytes codec (v2 spec, "Chunks" and "Filters").

A v2 chunk is encoded by laying the chunk out in ``order`` (C or F) as the stored ``dtype``
(byte order included), passing it through the numcodecs ``filters`` in order, then through
the ``compressor``; decoding runs the other way. :class:`V2Codec` holds all four, so a v2
array's :class:`~zarrx.codecs.pipeline.CodecPipeline` is this one codec and the array
machinery (chunk I/O, dask, resize) works unchanged. The 2022 draft layout uses it too
(``chunk_memory_layout`` and a compressor; no filters).

Safety. Codec configurations come from the store, so they are checked when the metadata is
parsed, before any chunk is read: the ``pickle`` object codec is refused
(:data:`REFUSED_CODECS`: unpickling runs code chosen by whoever wrote the store), and so are
``json2`` / ``msgpack2`` (they do not run code, but hold arbitrary Python objects that zarrx
does not represent). Object arrays are read only through ``vlen-utf8``, ``vlen-bytes`` and
``vlen-array``, whose element count is checked against the chunk before numcodecs decodes.

Bounded decoding, as for v3 chunks. The size the compressor must produce is known when the
dtype has a fixed size and every filter's output size follows from its input
(:data:`FILTER_SIZES`); the compressor is then decoded by zarrx's bounded codecs --
``blosc``, ``zstd`` and ``gzip`` here, ``zlib``, ``lz4``, ``bz2``, ``lzma``, ``shuffle`` and the
checksums through the registered ``numcodecs.*`` codecs -- with that expected size (or, for
variable-length chunks, the pipeline's maximum). Any other numcodecs compressor decodes into
a buffer of exactly the expected size, and is refused when the size is unknown. The decoded
chunk must have exactly the chunk's size. Encoding is numcodecs' own, exactly as
zarr-python 3 calls it, so zarrx writes the bytes zarr-python writes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Mapping

import numcodecs
import numpy as np
from numcodecs.abc import Codec as NumcodecsCodec

from zarrx.codecs.base import ArrayBytesCodec, Buffer, BytesBytesCodec, ChunkSpec, as_uint8
from zarrx.codecs.blosc import BloscCodec
from zarrx.codecs.gzip import GzipCodec
from zarrx.codecs.pipeline import DEFAULT_MAX_SIZE
from zarrx.codecs.registry import codec_registry
from zarrx.codecs.zstd import ZstdCodec
from zarrx.errors import ChunkDecodeError, ChunkEncodeError, MetadataError, UnknownCodecError, UnsupportedExtensionError

__all__ = [
    "V2Codec",
    "OBJECT_CODEC_IDS",
    "REFUSED_CODECS",
    "FILTER_SIZES",
    "check_codec_config",
    "object_codec_id",
]

#: object codecs zarrx reads: numcodecs id -> what the objects are
OBJECT_CODEC_IDS = ("vlen-utf8", "vlen-bytes", "vlen-array")
#: codec ids refused wherever they appear, and why
REFUSED_CODECS: dict[str, str] = {
    "pickle": (
        "the 'pickle' object codec is refused: unpickling data from a store can run arbitrary code "
        "chosen by whoever wrote it (zarrx never unpickles). Rewrite the array with the writer that "
        "made it, using vlen-utf8, vlen-bytes or vlen-array"
    ),
    "json2": (
        "the 'json2' object codec stores arbitrary Python objects, which zarrx does not represent; "
        "zarrx reads object arrays written with vlen-utf8, vlen-bytes or vlen-array"
    ),
    "msgpack2": (
        "the 'msgpack2' object codec stores arbitrary Python objects, which zarrx does not represent; "
        "zarrx reads object arrays written with vlen-utf8, vlen-bytes or vlen-array"
    ),
}
_COUNT_SIZE = 4


def check_codec_config(config: Any, field_name: str) -> dict[str, Any]:
    """A v2 codec configuration (``{"id": ..., ...}``) checked for safety and known to numcodecs."""
    if not isinstance(config, Mapping) or not isinstance(config.get("id"), str):
        raise MetadataError(f"{field_name}: expected a codec object with a string 'id', found {config!r}")
    codec_id = config["id"]
    if codec_id in REFUSED_CODECS:
        raise UnsupportedExtensionError(f"{field_name}: {REFUSED_CODECS[codec_id]}")
    codec = _numcodec(dict(config), field_name)
    if isinstance(codec, numcodecs.Pickle):  # a pickle codec registered under another id
        raise UnsupportedExtensionError(f"{field_name}: {REFUSED_CODECS['pickle']}")
    return dict(config)


def _numcodec(config: dict[str, Any], field_name: str) -> NumcodecsCodec:
    try:
        return numcodecs.get_codec(dict(config))
    except (KeyError, ValueError, TypeError) as error:
        if "id" in config and config["id"] not in numcodecs.registry.codec_registry:
            raise UnknownCodecError(
                f"{field_name}: numcodecs has no codec {config['id']!r} (install the package that provides it)"
            ) from None
        raise MetadataError(f"{field_name}: numcodecs refuses the configuration {config}: {error}") from None


def object_codec_id(filters: tuple[dict[str, Any], ...], compressor: dict[str, Any] | None) -> str | None:
    """The id of the first object codec among the filters and the compressor (zarr-python's search)."""
    for config in (*filters, *([compressor] if compressor else [])):
        codec_id = config.get("id")
        if codec_id in OBJECT_CODEC_IDS or codec_id in REFUSED_CODECS:
            return codec_id
    return None


# -- sizes of filter outputs ------------------------------------------------------------------

#: numcodecs filter id -> (codec, element count, dtype in) -> (element count, dtype out)
FILTER_SIZES: dict[str, Callable[[Any, int, np.dtype], tuple[int, np.dtype]]] = {
    "delta": lambda codec, count, dtype: (count, np.dtype(codec.astype)),
    "fixedscaleoffset": lambda codec, count, dtype: (count, np.dtype(codec.astype)),
    "quantize": lambda codec, count, dtype: (count, np.dtype(codec.astype)),
    "categorize": lambda codec, count, dtype: (count, np.dtype(codec.astype)),
    "astype": lambda codec, count, dtype: (count, np.dtype(codec.encode_dtype)),
    "bitround": lambda codec, count, dtype: (count, dtype),
    "shuffle": lambda codec, count, dtype: (count, dtype),
    "packbits": lambda codec, count, dtype: (1 + math.ceil(count / 8), np.dtype(np.uint8)),
}


# -- bounded compressor decoding --------------------------------------------------------------

#: numcodecs id -> zarrx's bounded codec for the same stream, built from the v2 configuration
_ZARRX_DECODERS: dict[str, Callable[[dict[str, Any]], BytesBytesCodec]] = {
    "blosc": lambda c: BloscCodec(cname=c.get("cname", "lz4"), clevel=c.get("clevel", 5), blocksize=c.get("blocksize", 0)),
    "zstd": lambda c: ZstdCodec(level=c.get("level", 0), checksum=bool(c.get("checksum", False))),
    "gzip": lambda c: GzipCodec(level=c.get("level", 5)),
}


def _bounded_decoder(config: dict[str, Any], field_name: str) -> Callable[..., Buffer]:
    """How to decode the compressor's stream within a size bound: ``decode(data, expected_size,
    max_size, dtype)``, ``dtype`` the elements the filters hand the compressor (uint8 when unknown)."""
    codec_id = config["id"]
    options = {key: value for key, value in config.items() if key != "id"}
    build = _ZARRX_DECODERS.get(codec_id)
    if build is None and f"numcodecs.{codec_id}" in codec_registry:
        cls = codec_registry[f"numcodecs.{codec_id}"]
        if issubclass(cls, BytesBytesCodec):
            build = lambda c: cls.from_json(options)  # noqa: E731
    if build is not None:
        try:
            codec = build(config)
        except MetadataError as error:
            raise MetadataError(f"{field_name}: {str(error).removeprefix('codecs: ')}") from None
        return lambda data, expected_size, max_size, dtype=None: codec.decode(data, expected_size, max_size)
    numcodec = _numcodec(config, field_name)

    def decode(data: np.ndarray, expected_size: int | None, max_size: int, dtype: np.dtype | None = None) -> Buffer:
        if expected_size is None:
            raise ChunkDecodeError(
                f"cannot bound the output of compressor {codec_id!r}: the chunk's decoded size is not fixed "
                "(zarrx decodes it only when it is)"
            )
        # the buffer has the elements' type: compressors that store typed numbers (pcodec)
        # refuse a buffer of bytes ("does not match chunk's number type")
        dtype = np.dtype(np.uint8) if dtype is None or expected_size % dtype.itemsize else dtype
        return numcodec.decode(data, out=np.empty(expected_size // dtype.itemsize, dtype=dtype))

    return decode


@dataclass(frozen=True, eq=False)
class V2Codec(ArrayBytesCodec):
    """A Zarr v2 chunk encoding: stored ``dtype``, ``order``, numcodecs ``filters`` and ``compressor``.

    Not registered: it is never named in v3 metadata. ``filters`` and ``compressor`` are the
    v2 JSON configurations (checked by :func:`check_codec_config`).

    Examples
    --------
    >>> from zarrx.dtypes import resolve_data_type
    >>> codec = V2Codec(np.dtype(">i2"), "F", compressor={"id": "zlib", "level": 1})
    >>> spec = ChunkSpec((2, 3), resolve_data_type("int16"), 0)
    >>> data = np.arange(6, dtype="int16").reshape(2, 3)
    >>> codec.decode(codec.encode(data, spec), spec)
    array([[0, 1, 2],
           [3, 4, 5]], dtype=int16)
    """

    name = "zarr-v2"

    dtype: np.dtype
    order: str = "C"
    filters: tuple[dict[str, Any], ...] = ()
    compressor: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.order not in ("C", "F"):
            raise MetadataError(f"order: expected 'C' or 'F', found {self.order!r}")
        filters = tuple(check_codec_config(config, f"filters[{i}]") for i, config in enumerate(self.filters))
        object.__setattr__(self, "filters", filters)
        if self.compressor is not None:
            object.__setattr__(self, "compressor", check_codec_config(self.compressor, "compressor"))
        codec_id = self.object_codec_id
        if (codec_id is not None) != (self.dtype.kind == "O"):
            raise MetadataError(
                f"filters: the object codec {codec_id!r} needs dtype '|O'" if codec_id
                else "dtype: '|O' (objects) needs an object codec (vlen-utf8, vlen-bytes or vlen-array) among the filters"
            )
        self._decoders  # noqa: B018 (build the compressor's decoder now: bad configurations fail at open)

    def __reduce__(self) -> tuple[Any, ...]:
        # rebuilt from the configuration: the cached numcodecs objects and decoders stay behind
        return V2Codec, (self.dtype, self.order, self.filters, self.compressor)

    @property
    def object_codec_id(self) -> str | None:
        return object_codec_id(self.filters, self.compressor)

    def configuration(self) -> dict[str, Any]:
        from zarrx.dtypes.v2 import v2_dtype_to_json

        return {"dtype": v2_dtype_to_json(self.dtype), "order": self.order,
                "filters": list(self.filters) or None, "compressor": self.compressor}  # fmt: skip

    # -- the numcodecs objects, built once ------------------------------------------------
    @cached_property
    def _chain(self) -> tuple[list[tuple[str, NumcodecsCodec]], NumcodecsCodec | None]:
        """(filters as (id, codec), compressor); an object codec given as compressor is a filter."""
        configs = list(self.filters)
        compressor = self.compressor
        if compressor is not None and compressor["id"] in OBJECT_CODEC_IDS:
            configs, compressor = [*configs, compressor], None
        filters = [(config["id"], _numcodec(config, "filters")) for config in configs]
        return filters, (_numcodec(compressor, "compressor") if compressor is not None else None)

    @cached_property
    def _decoders(self) -> Callable[..., Buffer] | None:
        compressor = self.compressor
        if compressor is None or compressor["id"] in OBJECT_CODEC_IDS:
            return None
        return _bounded_decoder(compressor, "compressor")

    def filtered_size(self, spec: ChunkSpec) -> int | None:
        """Bytes the filters turn a chunk into (what the compressor must decode to), None when it varies."""
        layout = self.filtered_layout(spec)
        return None if layout is None else layout[0] * layout[1].itemsize

    def filtered_layout(self, spec: ChunkSpec) -> tuple[int, np.dtype] | None:
        """The element count and stored dtype the filters turn a chunk into, None when it varies."""
        if self.dtype.kind == "O":
            return None
        count, dtype = spec.size, self.dtype
        for codec_id, codec in self._chain[0]:
            size_rule = FILTER_SIZES.get(codec_id)
            if size_rule is None:
                return None
            count, dtype = size_rule(codec, count, dtype)
        return count, dtype

    def encoded_size(self, spec: ChunkSpec) -> int | None:
        return self.filtered_size(spec) if self.compressor is None else None

    # -- encoding -------------------------------------------------------------------------
    def encode(self, array: np.ndarray, spec: ChunkSpec) -> Buffer:
        # as zarr-python's V2Codec: the chunk in the stored dtype and order, then numcodecs
        if self.dtype.kind == "O":
            chunk: Any = np.array(array, dtype=object, order=self.order)
        else:
            chunk = np.asarray(array).astype(self.dtype, order=self.order)
        filters, compressor = self._chain
        for _, codec in filters:
            chunk = codec.encode(chunk)
        if isinstance(chunk, np.ndarray) and chunk.dtype == object:
            raise ChunkEncodeError("the filters left an object array; an object codec must encode it")
        if compressor is not None:
            return bytes(compressor.encode(chunk))
        if isinstance(chunk, np.ndarray):  # memory order: an F-ordered chunk stays F-ordered
            return chunk.reshape(-1, order="A").view(np.uint8).tobytes()
        return bytes(chunk)

    # -- decoding -------------------------------------------------------------------------
    def decode(self, data: Buffer, spec: ChunkSpec) -> np.ndarray:
        source = as_uint8(data)
        layout = self.filtered_layout(spec)
        expected = None if layout is None else layout[0] * layout[1].itemsize
        if self._decoders is not None:
            dtype = None if layout is None else layout[1]
            decoded: Any = self._decoders(source, expected, DEFAULT_MAX_SIZE if expected is None else expected, dtype)
        else:
            if expected is not None and source.nbytes != expected:
                raise ChunkDecodeError(f"expected {expected} bytes, found {source.nbytes}")
            decoded = source
        filters, _ = self._chain
        for codec_id, codec in reversed(filters):
            if codec_id in OBJECT_CODEC_IDS:
                _check_element_count(as_uint8(decoded), spec.size, codec_id)
            try:
                decoded = codec.decode(decoded)
            except UnicodeDecodeError as error:
                raise ChunkDecodeError(f"filter {codec_id!r}: invalid UTF-8 in an element: {error}") from None
            except (ValueError, TypeError, RuntimeError, OverflowError) as error:
                raise ChunkDecodeError(f"filter {codec_id!r} failed to decode: {error}") from None
        return self._as_chunk(decoded, spec)

    def _as_chunk(self, decoded: Any, spec: ChunkSpec) -> np.ndarray:
        if self.dtype.kind == "O":
            elements = np.asarray(decoded)
            if elements.dtype != object or elements.size != spec.size:
                raise ChunkDecodeError(
                    f"the object codec gave {elements.size} {elements.dtype} elements, expected {spec.size} objects"
                )
            chunk = elements.reshape(spec.shape, order=self.order)
            return chunk if spec.dtype == object else chunk.astype(spec.dtype)
        if isinstance(decoded, np.ndarray) and decoded.dtype == object:
            raise ChunkDecodeError("the filters produced objects for a fixed-size dtype")
        raw = decoded.reshape(-1, order="A").view(np.uint8) if isinstance(decoded, np.ndarray) else as_uint8(decoded)
        expected = spec.size * self.dtype.itemsize
        if raw.nbytes != expected:
            raise ChunkDecodeError(
                f"decoded to {raw.nbytes} bytes, expected {expected} ({spec.shape} x {self.dtype.itemsize} bytes)"
            )
        chunk = raw.view(self.dtype).reshape(spec.shape, order=self.order)
        return chunk if self.dtype == spec.dtype else chunk.astype(spec.dtype)


def _check_element_count(data: np.ndarray, size: int, codec_id: str) -> None:
    """The u32le element count every numcodecs vlen encoding starts with must be the chunk's."""
    if data.nbytes < _COUNT_SIZE:
        raise ChunkDecodeError(f"filter {codec_id!r}: {data.nbytes} bytes is too short for the element count")
    count = int(data[:_COUNT_SIZE].view("<u4")[0])
    if count != size:
        raise ChunkDecodeError(f"filter {codec_id!r}: expected {size} elements, found a count of {count}")
    if data.nbytes < _COUNT_SIZE * (count + 1):
        raise ChunkDecodeError(f"filter {codec_id!r}: {data.nbytes} bytes cannot hold {count} elements (truncated)")
