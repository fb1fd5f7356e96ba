"""Reading and writing selections chunk by chunk: the one place chunk I/O happens.

:func:`read_selection` reads every chunk a selection touches, decodes it on the
thread pool and copies it into the output array; absent chunks become the fill
value. Large chunks of local and in-memory stores are read one chunk per pool
step (read, decode, copy); otherwise chunks come in batched store calls of
about a tenth of the output. A chunk that is a contiguous piece of the output is decoded straight
into it; others go through a scratch buffer each thread keeps (no fresh memory
per chunk). :func:`write_selection` encodes every touched chunk (reading,
merging and rewriting the partially covered ones) and stores each atomically,
from the pool task that encoded it on local and in-memory stores; a chunk that
ends up all fill value is deleted instead of stored unless
``write_empty_chunks`` is set. :func:`allocate_output` refuses outputs no
array in memory can hold before allocating anything.

Both work on a :class:`ChunkLayout`: where an array's chunks live (store, key
prefix, key encoding) and how they are coded (pipeline, chunk spec) -- exactly
what a dask task needs, and light to pickle.
"""

from __future__ import annotations

import math
import sys
import threading
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable, Iterable, Iterator, TypeVar

import numpy as np

from zarrx.codecs.base import ChunkSpec
from zarrx.codecs.pipeline import CodecPipeline
from zarrx.codecs.sharding import ShardingCodec
from zarrx.concurrency import map_concurrent, scratch_array
from zarrx.errors import ChunkEncodeError, SelectionError
from zarrx.indexing import ChunkProjection
from zarrx.metadata.node import ArrayMetadata
from zarrx.shard_io import read_sharded, write_sharded
from zarrx.storage.local import LocalStore
from zarrx.storage.memory import MemoryStore
from zarrx.storage.store import Store

__all__ = [
    "ChunkLayout", "read_selection", "write_selection", "is_all_fill", "as_array_of",
    "batch_limit", "split_batches", "decoded_nbytes", "scratch_array", "reads_directly", "allocate_output",
    "caller_can_work",
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

    @cached_property
    def inner_spec(self) -> ChunkSpec | None:
        """The spec of a sharded array's inner chunks (one object, so the pipeline's plan is reused)."""
        return self.sharding.inner_spec(self.spec) if self.sharding is not None else None

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
    fill = np.asarray(fill_value, dtype=chunk.dtype).reshape(1)
    uint = _UINT_BY_SIZE.get(itemsize)
    if uint is not None and chunk.size:
        # real data rarely starts with the fill value: answer from the first and last elements
        # before comparing (and, for a strided chunk, copying) the whole chunk
        ends = np.array([chunk[(0,) * chunk.ndim], chunk[(-1,) * chunk.ndim]], dtype=chunk.dtype)  # no copy of the chunk
        if not np.all(ends.view(uint) == fill.view(uint)[0]):
            return False
    flat = np.ascontiguousarray(chunk).reshape(-1)
    if uint is not None:
        return bool(np.all(flat.view(uint) == fill.view(uint)[0]))
    return bool(np.all(flat.view(np.uint8).reshape(-1, itemsize) == fill.view(np.uint8)))


#: store classes whose single-key reads and writes are cheap (no round trip): their chunks are
#: read, decoded and copied one by one in pool tasks rather than fetched in batches first
DIRECT_STORES = (LocalStore, MemoryStore)
#: projections handed to the pool at once by a chunk-by-chunk read (bounds what the lazy
#: projections of a huge selection turn into at a time)
DIRECT_BATCH_ITEMS = 4096


def caller_can_work(pipeline: CodecPipeline) -> bool:
    """Whether the calling thread may decode beside the pool (see map_concurrent's caller_works):
    not the main thread when a codec would start threads of its own there."""
    return not (pipeline.threads_on_main_thread and threading.current_thread() is threading.main_thread())


def reads_directly(store: Store) -> bool:
    """Whether chunks of ``store`` are best read one ``get`` at a time inside pool tasks."""
    return type(store) in DIRECT_STORES


def allocate_output(shape: tuple[int, ...], dtype: np.dtype, path: str) -> np.ndarray:
    """An uninitialized output array for a read of ``shape`` from the array at ``path``.

    The size is computed with Python integers first: a selection larger than NumPy can address
    (``arr[...]`` of an array of 2**62 elements), or than the allocator can provide, is refused
    with a SelectionError naming the array and the size, before anything is allocated.
    """
    size = math.prod(shape)
    nbytes = size * max(1, dtype.itemsize)
    if nbytes > sys.maxsize:
        raise SelectionError(
            f"array {path or '/'!r}: a selection of shape {shape} holds {_count(size)} elements of {dtype} "
            f"({_count(nbytes)} bytes), more than an array in memory can hold; read it in parts "
            "(smaller selections, or Array.to_dask())"
        )
    try:
        return np.empty(shape, dtype=dtype)
    except (MemoryError, ValueError) as error:
        raise SelectionError(
            f"array {path or '/'!r}: cannot allocate {_count(nbytes)} bytes for a selection of shape {shape} "
            f"and data type {dtype} ({type(error).__name__}: {error}); read it in parts "
            "(smaller selections, or Array.to_dask())"
        ) from None


def _count(number: int) -> str:
    """``number``, with its power of two when it is one (sizes from metadata often are)."""
    if number >= 2**20 and number & (number - 1) == 0:
        return f"{number} (2**{number.bit_length() - 1})"
    return str(number)


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
    """Fill ``out`` from every chunk the projections touch; returns ``out``.

    ``projections`` may be lazy: they are consumed in bounded batches. Chunks big enough to
    decode on the pool are read from local and in-memory stores chunk by chunk inside the pool
    tasks (read, decode, copy: no batch of compressed bytes held, no barrier between reading and
    decoding); otherwise the chunks are fetched in one batched request per batch of about a
    tenth of the output (:func:`batch_limit`), then decoded.
    """
    if layout.sharding is not None:
        return read_sharded(layout, projections, out)
    reader = _ChunkReader(layout, out)
    # small chunks decode on the calling thread (see MIN_THREADED_CHUNK_BYTES); their reads
    # still go to the pool, as one batch
    if reads_directly(layout.store) and reader.threaded:
        for batch in split_batches(projections, lambda _: 1, DIRECT_BATCH_ITEMS):
            reader.run(reader.read_one, batch)
        return out
    chunk_bytes = decoded_nbytes(layout.spec)
    for batch in split_batches(projections, lambda _: chunk_bytes, batch_limit(out.nbytes)):
        keys = [layout.chunk_key(p.chunk_coords) for p in batch]
        blobs = layout.store.get_many(list(dict.fromkeys(keys)))
        reader.run(lambda item: reader.place(item[0], item[1], blobs.get(item[1])), list(zip(batch, keys)))
    return out


class _ChunkReader:
    """Decodes chunks into ``out``: straight into it where a chunk is a contiguous piece of it,
    else through the thread's scratch buffer."""

    def __init__(self, layout: ChunkLayout, out: np.ndarray) -> None:
        self.layout, self.out = layout, out
        self.spec = layout.spec
        self.pipeline = layout.pipeline
        self.fill_value = layout.metadata.fill_value
        self.threaded = layout.worth_threads(self.spec)
        self.decodes_into = self.pipeline.decodes_into(self.spec)
        self.direct_out = (
            self.decodes_into and out.flags.c_contiguous and out.flags.writeable and out.dtype == self.spec.dtype
        )

    def run(self, function: Callable[[T], None], items: list[T]) -> None:
        if self.threaded:
            map_concurrent(function, items, caller_works=caller_can_work(self.pipeline))
        else:
            for item in items:
                function(item)

    def read_one(self, projection: ChunkProjection) -> None:
        key = self.layout.chunk_key(projection.chunk_coords)
        self.place(projection, key, self.layout.store.get(key))

    def place(self, projection: ChunkProjection, key: str, raw: Any) -> None:
        out = self.out
        if raw is None:
            out[projection.out_selection] = self.fill_value
            return
        spec = self.spec
        if projection.is_complete_chunk and self.direct_out:
            # whole chunk into a slice-only piece of out (is_complete_chunk rules out index arrays)
            target = out[(*projection.out_selection, Ellipsis)]  # a view even for 0-d output
            if target.shape == spec.shape and target.flags.c_contiguous:
                chunk = self.pipeline.decode(raw, spec, key, out=target)
                if chunk is not target:
                    target[...] = chunk
                return
        scratch = scratch_array(spec.shape, spec.dtype) if self.decodes_into else None
        chunk = self.pipeline.decode(raw, spec, key, out=scratch)
        out[projection.out_selection] = chunk[projection.chunk_selection]


def write_selection(
    layout: ChunkLayout,
    projections: Iterable[ChunkProjection],
    value: np.ndarray,
    *,
    write_empty_chunks: bool = False,
) -> None:
    """Write ``value`` (already of the selection's shape and the array's dtype) chunk by chunk.

    Each chunk is stored atomically. Local and in-memory stores get every chunk from the pool
    task that encoded it, so compression and file writes overlap and no more than one encoded
    chunk per thread is held; other stores get one batched ``set_many`` per batch of about
    :data:`MIN_BATCH_BYTES` of encoded input.
    """
    if layout.sharding is not None:
        return write_sharded(layout, projections, value, write_empty_chunks=write_empty_chunks)
    direct = reads_directly(layout.store)
    limit = DIRECT_BATCH_ITEMS if direct else max(1, MIN_BATCH_BYTES // max(1, decoded_nbytes(layout.spec)))
    for batch in split_batches(projections, lambda _: 1, limit):
        _write_batch(layout, batch, value, write_empty_chunks, direct)


def _write_batch(
    layout: ChunkLayout, projections: list[ChunkProjection], value: np.ndarray, write_empty_chunks: bool, direct: bool
) -> None:
    keys = [layout.chunk_key(p.chunk_coords) for p in projections]
    partial_keys = [key for p, key in zip(projections, keys) if not p.is_complete_chunk]
    existing = layout.store.get_many(partial_keys) if partial_keys else {}
    chunk_shape = layout.metadata.chunks
    spec = layout.spec
    store = layout.store

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
        encoded = layout.pipeline.encode(chunk, spec, key=key, scratch=_scratch_for(layout.pipeline, spec, chunk))
        if direct:
            store.set(key, encoded)
            return key, b""
        return key, encoded

    items = list(zip(projections, keys))
    if layout.worth_threads(spec):
        results = map_concurrent(encode_one, items, caller_works=caller_can_work(layout.pipeline))
    else:
        results = [encode_one(item) for item in items]
    if not direct:
        to_store = {key: data for key, data in results if data is not None}
        if to_store:
            store.set_many(to_store)
    to_delete = [key for key, data in results if data is None]
    if to_delete:
        store.delete_many(to_delete)


def _scratch_for(pipeline: CodecPipeline, spec: ChunkSpec, chunk: np.ndarray) -> np.ndarray | None:
    """The thread's scratch buffer to gather a strided chunk into before encoding it, if needed."""
    if chunk.flags.c_contiguous or chunk.dtype != spec.dtype or not pipeline.decodes_into(spec):
        return None
    return scratch_array(spec.shape, spec.dtype)
