"""Turning :func:`zarrx.create_array`'s keywords into :class:`ArrayMetadata`.

Users say ``dtype="float32", chunks="auto", compressors="auto"``; the metadata
needs a data type, a chunk grid, a codec pipeline with every default recorded
(the spec requires the chosen defaults to be written down), and a fill value.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from zarrx.codecs import (
    BytesCodec,
    CodecPipeline,
    ShardingCodec,
    VLenBytesCodec,
    VLenUTF8Codec,
    ZstdCodec,
    parse_codecs,
)
from zarrx.codecs.base import ChunkSpec
from zarrx.dtypes import DataType, resolve_data_type
from zarrx.errors import MetadataError, ZarrxError
from zarrx.metadata.chunk_grid import RegularChunkGrid, parse_shape
from zarrx.metadata.chunk_key_encoding import DefaultChunkKeyEncoding, parse_chunk_key_encoding
from zarrx.metadata.node import ArrayMetadata, parse_dimension_names

__all__ = ["build_array_metadata", "guess_chunks"]

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


def default_serializer(data_type: DataType) -> Any:
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
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = (shape,)
    shape = parse_shape(list(shape) if isinstance(shape, (list, tuple)) else shape, "shape")
    data_type = resolve_data_type(dtype)
    chunk_shape = parse_chunks(chunks, shape, data_type)
    if shards is not None:
        shards = parse_shards(shards, chunk_shape)
    if fill_value is None:
        fill_value = data_type.default_fill_value()
    else:
        try:
            fill_value = data_type.cast_scalar(fill_value)
        except ZarrxError:
            raise
        except (TypeError, ValueError, OverflowError) as error:
            raise MetadataError(f"fill_value: cannot use {fill_value!r} as a {data_type.to_json()} value ({error})") from None
    if isinstance(serializer, str) and serializer == "auto":
        serializer = default_serializer(data_type)
    if isinstance(compressors, str) and compressors == "auto":
        compressors = [ZstdCodec(level=0, checksum=False)]
    codecs = parse_codecs([*_codec_list(filters), serializer, *_codec_list(compressors)])
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
        chunk_grid=RegularChunkGrid(chunk_shape),
        chunk_key_encoding=encoding,
        fill_value=fill_value,
        codecs=pipeline,
        attributes=dict(attributes or {}),
        dimension_names=parse_dimension_names(
            list(dimension_names) if dimension_names is not None else None, len(shape)
        ),
    )
