"""Reading and writing selections chunk by chunk: the one place chunk I/O happens.

:func:`read_selection` fetches every chunk a selection touches in one batched
store call, decodes them on the thread pool and copies each straight into the
output array; absent chunks become the fill value. :func:`write_selection`
encodes every touched chunk (reading, merging and rewriting the partially
covered ones) and stores them in one batch; a chunk that ends up all fill value
is deleted instead of stored unless ``write_empty_chunks`` is set.

Both work on a :class:`ChunkLayout`: where an array's chunks live (store, key
prefix, key encoding) and how they are coded (pipeline, chunk spec) -- exactly
what a dask task needs, and light to pickle.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable, Iterable, Iterator, TypeVar

import numpy as np

from zarrx.codecs.base import ChunkSpec
from zarrx.codecs.pipeline import CodecPipeline
from zarrx.codecs.sharding import ShardingCodec
from zarrx.concurrency import map_concurrent
from zarrx.errors import ChunkEncodeError, SelectionError
from zarrx.indexing import ChunkProjection
from zarrx.metadata.node import ArrayMetadata
from zarrx.shard_io import read_sharded, write_sharded
from zarrx.storage.store import Store

__all__ = [
    "ChunkLayout", "read_selection", "write_selection", "is_all_fill", "as_array_of",
    "batch_limit", "split_batches", "decoded_nbytes",
]  # fmt: skip

T = TypeVar("T")

_UINT_BY_SIZE = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


#: chunks smaller than this decode faster on one thread: per-chunk Python work holds
#: the GIL longer than the codec releases it (measured: 2.5 KiB float32 zstd chunks,
#: 0.60 s on one thread vs 0.98 s on two for 6,400 chunks)
MIN_THREADED_CHUNK_BYTES = 64 * 1024
#: smallest store batch of a large read (see batch_limit)
MIN_BATCH_BYTES = 8 * 2**20
#: assumed in-memory bytes per element of variable-length types when sizing batches
VARIABLE_ITEM_BYTES = 16


@dataclass(frozen=True)
class ChunkLayout:
    store: Store
    path: str
    metadata: ArrayMetadata

    @property
    def spec(self) -> ChunkSpec:
        return self.metadata.chunk_spec

    @property
    def pipeline(self) -> CodecPipeline:
        return self.metadata.codecs

    @cached_property
    def sharding(self) -> ShardingCodec | None:
        """The sharding codec when shards can be read and written in parts (it is the only codec;
        array -> array codecs before it change the shard's layout, and such arrays use whole shards)."""
        pipeline = self.pipeline
        if isinstance(pipeline.array_bytes, ShardingCodec) and not pipeline.array_array and not pipeline.bytes_bytes:
            return pipeline.array_bytes
        return None

    @property
    def io_chunk_shape(self) -> tuple[int, ...]:
        """The grid selections are projected onto: inner chunks for sharded arrays, else chunks."""
        return self.sharding.chunk_shape if self.sharding is not None else self.metadata.chunks

    def worth_threads(self, spec: ChunkSpec) -> bool:
        """Whether chunks of ``spec`` are big enough to decode on the pool (see MIN_THREADED_CHUNK_BYTES)."""
        nbytes = spec.nbytes
        return nbytes is None or nbytes >= MIN_THREADED_CHUNK_BYTES

    def chunk_key(self, chunk_coords: tuple[int, ...]) -> str:
        # the metadata knows where its format keeps chunks (the draft layout: under data/root/)
        return self.metadata.storage_key(self.path, chunk_coords)

    def chunk_region(self, chunk_coords: tuple[int, ...]) -> tuple[slice, ...]:
        """The in-bounds part of a chunk, in chunk-local coordinates."""
        return tuple(
            slice(0, min(size, length - index * size))
            for index, size, length in zip(chunk_coords, self.metadata.chunks, self.metadata.shape)
        )

    def decode_chunk(self, raw: bytes, key: str) -> np.ndarray:
        return self.pipeline.decode(raw, self.spec, key=key)

    def empty_chunk(self) -> np.ndarray:
        return np.full(self.metadata.chunks, self.metadata.fill_value, dtype=self.metadata.dtype)


def as_array_of(value: Any, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """``value`` cast to ``dtype`` and broadcast to ``shape`` (a view; never copies needlessly)."""
    try:
        array = value if isinstance(value, np.ndarray) and value.dtype == dtype else np.asarray(value, dtype=dtype)
    except (TypeError, ValueError, OverflowError) as error:
        raise ChunkEncodeError(f"cannot store {type(value).__name__} value as {dtype}: {error}") from None
    try:
        return np.broadcast_to(array, shape)
    except ValueError:
        raise SelectionError(
            f"cannot assign a value of shape {array.shape} to a selection of shape {shape}"
        ) from None


def is_all_fill(chunk: np.ndarray, fill_value: Any) -> bool:
    """Whether every element equals the fill value bit for bit (so -0.0 is not 0.0, NaN payloads count)."""
    if chunk.dtype.kind in "OT" or chunk.dtype.itemsize == 0:
        return bool(np.all(chunk == fill_value))
    itemsize = chunk.dtype.itemsize
    flat = np.ascontiguousarray(chunk).reshape(-1)
    fill = np.asarray(fill_value, dtype=chunk.dtype).reshape(1)
    uint = _UINT_BY_SIZE.get(itemsize)
    if uint is not None:
        return bool(np.all(flat.view(uint) == fill.view(uint)[0]))
    return bool(np.all(flat.view(np.uint8).reshape(-1, itemsize) == fill.view(np.uint8)))



def batch_limit(out_nbytes: int) -> int:
    """Most decoded bytes' worth of chunks one store batch fetches for an output of ``out_nbytes``.

    Fetching every chunk of a large read at once would hold all its compressed
    bytes beside the output (2x the output for poorly compressible data); a
    tenth of the output (at least 8 MiB) keeps the peak near the output size
    while each batch stays large enough to keep a remote store busy.
    """
    return max(MIN_BATCH_BYTES, out_nbytes // 10)


def split_batches(items: Iterable[T], weight: Callable[[T], int], limit: int) -> Iterator[list[T]]:
    """Consecutive runs of ``items`` whose total weight stays within ``limit`` (one item at least)."""
    batch: list[T] = []
    total = 0
    for item in items:
        size = weight(item)
        if batch and total + size > limit:
            yield batch
            batch, total = [], 0
        batch.append(item)
        total += size
    if batch:
        yield batch


def decoded_nbytes(spec: ChunkSpec) -> int:
    """Bytes a decoded chunk of ``spec`` takes (variable-length types: an estimate)."""
    return spec.nbytes if spec.nbytes is not None else spec.size * VARIABLE_ITEM_BYTES


def read_selection(
    layout: ChunkLayout, projections: Iterable[ChunkProjection], out: np.ndarray
) -> np.ndarray:
    """Fill ``out`` from every chunk the projections touch; returns ``out``."""
    if layout.sharding is not None:
        return read_sharded(layout, projections, out)
    chunk_bytes = decoded_nbytes(layout.spec)
    for batch in split_batches(projections, lambda _: chunk_bytes, batch_limit(out.nbytes)):
        _read_batch(layout, batch, out)
    return out


def _read_batch(layout: ChunkLayout, projections: list[ChunkProjection], out: np.ndarray) -> None:
    keys = [layout.chunk_key(p.chunk_coords) for p in projections]
    blobs = layout.store.get_many(list(dict.fromkeys(keys)))
    fill_value = layout.metadata.fill_value

    def read_one(item: tuple[ChunkProjection, str]) -> None:
        projection, key = item
        raw = blobs.get(key)
        if raw is None:
            out[projection.out_selection] = fill_value
        else:
            chunk = layout.decode_chunk(raw, key)
            out[projection.out_selection] = chunk[projection.chunk_selection]

    items = list(zip(projections, keys))
    if layout.worth_threads(layout.spec):
        map_concurrent(read_one, items)
    else:
        for item in items:
            read_one(item)


def write_selection(
    layout: ChunkLayout,
    projections: Iterable[ChunkProjection],
    value: np.ndarray,
    *,
    write_empty_chunks: bool = False,
) -> None:
    """Write ``value`` (already of the selection's shape and the array's dtype) chunk by chunk."""
    if layout.sharding is not None:
        return write_sharded(layout, projections, value, write_empty_chunks=write_empty_chunks)
    projections = list(projections)
    keys = [layout.chunk_key(p.chunk_coords) for p in projections]
    partial_keys = [key for p, key in zip(projections, keys) if not p.is_complete_chunk]
    existing = layout.store.get_many(partial_keys) if partial_keys else {}
    chunk_shape = layout.metadata.chunks

    def encode_one(item: tuple[ChunkProjection, str]) -> tuple[str, bytes | None]:
        projection, key = item
        new_data = value[projection.out_selection]
        region = layout.chunk_region(projection.chunk_coords)
        if projection.is_complete_chunk and all(r.stop == size for r, size in zip(region, chunk_shape)):
            chunk = np.asarray(new_data)  # codecs take any layout; the serializer copies as it must
        else:
            raw = existing.get(key)
            if raw is None:
                chunk = layout.empty_chunk()
            else:
                chunk = np.array(layout.decode_chunk(raw, key), copy=True)
            chunk[projection.chunk_selection] = new_data
        if not write_empty_chunks and is_all_fill(chunk, layout.metadata.fill_value):
            return key, None
        return key, layout.pipeline.encode(chunk, layout.spec)

    items = list(zip(projections, keys))
    results = map_concurrent(encode_one, items) if layout.worth_threads(layout.spec) else [encode_one(i) for i in items]
    to_store = {key: data for key, data in results if data is not None}
    to_delete = [key for key, data in results if data is None]
    if to_store:
        layout.store.set_many(to_store)
    if to_delete:
        layout.store.delete_many(to_delete)
