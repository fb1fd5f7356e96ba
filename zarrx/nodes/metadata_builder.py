"""Turning :func:`zarrx.create_array`'s keywords into :class:`ArrayMetadata`.

Users say ``dtype="float32", chunks="auto", compressors="auto"``; the metadata
needs a data type, a chunk grid, a codec pipeline with every default recorded
(the spec requires the chosen defaults to be written down), and a fill value.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from zarrx.codecs import BytesCodec, CodecPipeline, ShardingCodec, VLenBytesCodec, VLenUTF8Codec, ZstdCodec
from zarrx.codecs.base import ArrayBytesCodec, ChunkSpec
from zarrx.codecs.normalize import as_codecs, v2_codec_config
from zarrx.dtypes import DataType, resolve_data_type
from zarrx.dtypes.v2 import v2_data_type, v2_dtype_for
from zarrx.errors import MetadataError, ZarrxError
from zarrx.metadata.chunk_grid import RegularChunkGrid, parse_shape
from zarrx.metadata.rectilinear import RectilinearChunkGrid, is_edge_list
from zarrx.metadata.chunk_key_encoding import DefaultChunkKeyEncoding, parse_chunk_key_encoding
from zarrx.metadata.node import ArrayMetadata, parse_dimension_names
from zarrx.metadata.v2 import DIMENSIONS_ATTRIBUTE, ArrayMetadataV2

__all__ = ["build_array_metadata", "build_array_metadata_v2", "guess_chunks"]

#: auto chunks aim at this many bytes per chunk (compressed chunks are then ~0.2-2 MiB)
TARGET_CHUNK_BYTES = 4 * 2**20
#: assumed bytes per element of variable-length types when guessing chunks
VARIABLE_ITEM_SIZE = 16


def guess_chunks(shape: tuple[int, ...], item_size: int) -> tuple[int, ...]:
    """Chunks of at most :data:`TARGET_CHUNK_BYTES`, halving the longest dimension first."""
    chunks = [max(1, length) for length in shape]
    while math.prod(chunks) * item_size > TARGET_CHUNK_BYTES:
        longest = max(range(len(chunks)), key=lambda dim: chunks[dim])
        if chunks[longest] == 1:
            break
        chunks[longest] = math.ceil(chunks[longest] / 2)
    return tuple(chunks)


def parse_chunks(chunks: Any, shape: tuple[int, ...], data_type: DataType) -> tuple[int, ...]:
    if chunks is None or (isinstance(chunks, str) and chunks == "auto"):
        return guess_chunks(shape, data_type.item_size or VARIABLE_ITEM_SIZE)
    if isinstance(chunks, int) and not isinstance(chunks, bool):
        chunks = (chunks,) * len(shape)
    chunks = parse_shape(list(chunks) if isinstance(chunks, (list, tuple)) else chunks, "chunks", minimum=1)
    if len(chunks) != len(shape):
        raise MetadataError(f"chunks: expected {len(shape)} chunk lengths for shape {shape}, found {chunks}")
    return chunks


def parse_shards(shards: Any, chunks: tuple[int, ...]) -> tuple[int, ...]:
    """The shard shape: a multiple of the inner chunk shape along every dimension."""
    if isinstance(shards, int) and not isinstance(shards, bool):
        shards = (shards,) * len(chunks)
    shards = parse_shape(list(shards) if isinstance(shards, (list, tuple)) else shards, "shards", minimum=1)
    if len(shards) != len(chunks) or any(s % c for s, c in zip(shards, chunks)):
        raise MetadataError(
            f"shards: expected a multiple of the chunk shape {chunks} along each dimension, found {shards}"
        )
    return shards


def default_serializer(data_type: DataType) -> ArrayBytesCodec:
    if data_type.is_variable_length:
        if data_type.name == "string":
            return VLenUTF8Codec()
        return VLenBytesCodec()
    return BytesCodec()


def _codec_list(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


def _parse_array_shape(shape: Any) -> tuple[int, ...]:
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = (shape,)
    return parse_shape(list(shape) if isinstance(shape, (list, tuple)) else shape, "shape")


def _cast_fill_value(data_type: DataType, fill_value: Any, described: str | None = None) -> Any:
    """``fill_value`` as a value of ``data_type``; ``described`` names the type in the error."""
    try:
        return data_type.cast_scalar(fill_value)
    except ZarrxError:
        raise
    except (TypeError, ValueError, OverflowError) as error:
        described = described or str(data_type.to_json())
        raise MetadataError(f"fill_value: cannot use {fill_value!r} as a {described} value ({error})") from None


def build_array_metadata(
    *,
    shape: Any,
    dtype: Any,
    chunks: Any = "auto",
    shards: Any = None,
    fill_value: Any = None,
    filters: Sequence[Any] | Any = (),
    serializer: Any = "auto",
    compressors: Any = "auto",
    chunk_key_encoding: Any = None,
    dimension_names: Sequence[str | None] | None = None,
    attributes: dict[str, Any] | None = None,
) -> ArrayMetadata:
    shape = _parse_array_shape(shape)
    data_type = resolve_data_type(dtype)
    # edges listed for a dimension (``chunks=((3, 3, 4), 5)``, or so for shards): a rectilinear grid
    rectilinear = RectilinearChunkGrid(tuple(shards if shards is not None else chunks)) if is_edge_list(
        shards if shards is not None else chunks) else None  # fmt: skip
    if rectilinear is not None:
        rectilinear.validate(shape)
    chunk_shape = rectilinear.largest_chunk_shape(shape) if rectilinear and shards is None else parse_chunks(chunks, shape, data_type)
    if shards is not None:
        shards = rectilinear.largest_chunk_shape(shape) if rectilinear else parse_shards(shards, chunk_shape)
    fill_value = data_type.default_fill_value() if fill_value is None else _cast_fill_value(data_type, fill_value)
    if isinstance(serializer, str) and serializer == "auto":
        serializer = default_serializer(data_type)
    if isinstance(compressors, str) and compressors == "auto":
        compressors = [ZstdCodec(level=0, checksum=False)]
    # codecs in any form users hold them (zarrx, JSON, zarr-python, numcodecs, short names)
    codecs = [
        *as_codecs(filters, "filters", "array_to_array"),
        *as_codecs(serializer, "serializer", "array_to_bytes"),
        *as_codecs(compressors, "compressors", "bytes_to_bytes"),
    ]
    if shards is not None:
        # as zarr-python does: every codec applies to inner chunks; the index is bytes + crc32c
        codecs = (ShardingCodec(chunk_shape=chunk_shape, codecs=codecs),)
        chunk_shape = shards
    spec = ChunkSpec(chunk_shape, data_type, fill_value)
    pipeline = CodecPipeline.from_codecs(codecs).evolve_from_spec(spec)
    encoding = (
        DefaultChunkKeyEncoding()
        if chunk_key_encoding is None
        else parse_chunk_key_encoding(chunk_key_encoding, allow_short_form=True)
    )
    if attributes is not None and not isinstance(attributes, dict):
        raise MetadataError(f"attributes: expected a dict, found {type(attributes).__name__}")
    return ArrayMetadata(
        shape=shape,
        data_type=data_type,
        chunk_grid=rectilinear or RegularChunkGrid(chunk_shape),
        chunk_key_encoding=encoding,
        fill_value=fill_value,
        codecs=pipeline,
        attributes=dict(attributes or {}),
        dimension_names=parse_dimension_names(
            list(dimension_names) if dimension_names is not None else None, len(shape)
        ),
    )


# -- Zarr v2 ------------------------------------------------------------------------------------

#: what ``compressors="auto"`` means for a v2 array (zarr-python 3's default)
DEFAULT_V2_COMPRESSOR = {"id": "zstd", "level": 0}


def _v2_codec_config(codec: Any, field_name: str) -> dict[str, Any]:
    """A codec in any form users hold it as a checked v2 (numcodecs) configuration."""
    config = v2_codec_config(codec, field_name)
    if config["id"] == "zstd" and config.get("checksum") is False:
        del config["checksum"]  # as zarr-python writes it (zarr-python issue 2647)
    return config


def _v2_data_type(dtype: Any) -> tuple[DataType, Any]:
    """The data type and stored NumPy dtype for a v2 array (byte order kept as the user gave it)."""
    try:
        data_type = resolve_data_type(dtype)
    except MetadataError:
        given = _numpy_dtype(dtype)
        if given is None or given.kind not in "biufcmMSUV" or given.itemsize == 0:
            raise  # zero-size strings ('U', 'S', 'str') could store nothing: refused as in v3
        # NumPy types without a v3 equivalent (structured types with subarray fields) are v2 types
        return v2_data_type(given, None), given
    stored, _ = v2_dtype_for(data_type)
    given = None if data_type.is_variable_length else _numpy_dtype(dtype)
    if given is not None and given.newbyteorder("=") == data_type.numpy_dtype:
        stored = given  # '>i4' stays big-endian, as v2 allows
    return data_type, stored


def _numpy_dtype(dtype: Any) -> np.dtype | None:
    if isinstance(dtype, (DataType, dict)):
        return None
    try:
        return np.dtype(dtype)
    except (TypeError, ValueError):
        return None


def build_array_metadata_v2(
    *,
    shape: Any,
    dtype: Any,
    chunks: Any = "auto",
    shards: Any = None,
    fill_value: Any = None,
    filters: Sequence[Any] | Any = (),
    serializer: Any = "auto",
    compressors: Any = "auto",
    chunk_key_encoding: Any = None,
    dimension_separator: str | None = None,
    order: str | None = None,
    dimension_names: Sequence[str | None] | None = None,
    attributes: dict[str, Any] | None = None,
) -> ArrayMetadataV2:
    """:func:`zarrx.create_array`'s keywords as Zarr v2 metadata (``.zarray`` + ``.zattrs``).

    Filters and the compressor are numcodecs codecs or their configuration dicts; ``str``
    (or ``"string"``) and ``bytes`` arrays are stored as ``|O`` with the ``vlen-utf8`` /
    ``vlen-bytes`` object codec first among the filters, as zarr-python writes them;
    ``dimension_names`` go to the ``_ARRAY_DIMENSIONS`` attribute. Without a
    ``fill_value`` the array has none (``null``, as zarr-python writes for
    ``fill_value=None``): missing chunks read as the type's default (zero, ``""``...).
    """
    if shards is not None:
        raise MetadataError(f"shards: Zarr format 2 has no sharding, found shards={shards!r}; use zarr_format=3")
    if not (isinstance(serializer, str) and serializer == "auto"):
        raise MetadataError("serializer: Zarr format 2 arrays have none (the dtype and filters say how to store elements)")
    shape = _parse_array_shape(shape)
    data_type, stored = _v2_data_type(dtype)
    _, object_codec = v2_dtype_for(data_type) if data_type.is_variable_length else (None, None)
    chunk_shape = parse_chunks(chunks, shape, data_type)
    null_fill = fill_value is None  # v2 can say "no fill value": null, which reads as the type's default
    fill_value = data_type.default_fill_value() if null_fill else _cast_fill_value(data_type, fill_value, str(stored))
    filter_configs = [_v2_codec_config(codec, f"filters[{i}]") for i, codec in enumerate(_codec_list(filters))]
    if object_codec is not None:
        filter_configs.insert(0, {"id": object_codec})
    if isinstance(compressors, str) and compressors == "auto":
        compressors = [DEFAULT_V2_COMPRESSOR]
    compressor_list = _codec_list(compressors)
    if len(compressor_list) > 1:
        raise MetadataError(f"compressors: Zarr format 2 takes one compressor, found {len(compressor_list)}")
    compressor = _v2_codec_config(compressor_list[0], "compressors[0]") if compressor_list else None
    separator = _v2_separator(chunk_key_encoding, dimension_separator)
    if attributes is not None and not isinstance(attributes, dict):
        raise MetadataError(f"attributes: expected a dict, found {type(attributes).__name__}")
    attributes = dict(attributes or {})
    if dimension_names is not None:
        names = parse_dimension_names(list(dimension_names), len(shape))
        if any(name is None for name in names):
            raise MetadataError(
                f"dimension_names: Zarr format 2 keeps them in the {DIMENSIONS_ATTRIBUTE} attribute, "
                f"which needs a string for every dimension, found {list(names)}"
            )
        attributes[DIMENSIONS_ATTRIBUTE] = list(names)
    if order not in (None, "C", "F"):
        raise MetadataError(f"order: expected 'C' or 'F', found {order!r}")
    return ArrayMetadataV2(
        shape=shape,
        chunks=chunk_shape,
        stored_dtype=stored,
        fill_value=fill_value,
        order=order or "C",
        filters=tuple(filter_configs),
        compressor=compressor,
        dimension_separator=separator,
        attributes=attributes,
        fill_value_is_null=null_fill,
    )


def _v2_separator(chunk_key_encoding: Any, dimension_separator: str | None) -> str:
    separator = dimension_separator
    if chunk_key_encoding is not None:
        encoding = parse_chunk_key_encoding(chunk_key_encoding, allow_short_form=True)
        if encoding.name != "v2":
            raise MetadataError(
                f"chunk_key_encoding: Zarr format 2 arrays use the 'v2' encoding, found {encoding.name!r}; "
                "pass {'name': 'v2', 'separator': '/'} or dimension_separator='/'"
            )
        if separator is not None and separator != encoding.separator:
            raise MetadataError(
                f"dimension_separator: {separator!r} contradicts chunk_key_encoding's separator {encoding.separator!r}"
            )
        separator = encoding.separator
    if separator not in (None, ".", "/"):
        raise MetadataError(f"dimension_separator: expected '.' or '/', found {separator!r}")
    return separator or "."
