"""The one description of an array for I/O: :class:`ArrayHandle`.

A handle is the store, the node path and the parsed metadata -- and what follows from them: the
codec pipeline, the grid selections are projected onto (inner chunks of a sharded array), the key
of every stored object. It is small, immutable and picklable (a kilobyte, never data), so
:class:`zarrx.Array`, the planner and executor, and every dask task use the same value.

On a rectilinear grid stored objects differ in shape: :meth:`ArrayHandle.object_spec` is the
decoded representation of one (one :class:`ChunkSpec` per distinct shape, so codec plans are
reused), and a sharded array's inner chunks -- which divide every shard edge, so they tile the
array regularly -- find their shard with :meth:`ArrayHandle.locate`.
"""

from __future__ import annotations

import bisect
import itertools
import math
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import numpy as np

from zarrx.codecs.base import ChunkSpec
from zarrx.codecs.pipeline import CodecPipeline
from zarrx.codecs.sharding import ShardingCodec
from zarrx.errors import StoreError
from zarrx.metadata.protocol import ArrayMetadataLike
from zarrx.storage.store import Store

__all__ = ["ArrayHandle", "max_encoded_size", "compressed_bound"]


def compressed_bound(size: int) -> int:
    """The most bytes a bytes -> bytes codec of no fixed size (a compressor) may turn ``size``
    bytes into: twice as many, and 64 KiB for headers -- above every real compressor's worst
    case (zstd, gzip, blosc, lz4, bz2, lzma add well under 1 %; base64 a third).

    Examples
    --------
    >>> compressed_bound(16)
    65568
    """
    return 2 * size + 64 * 1024


def max_encoded_size(pipeline: CodecPipeline, spec: ChunkSpec) -> int | None:
    """The most bytes a chunk of ``spec`` encoded by ``pipeline`` may hold, or None when the data
    type has no fixed size (strings): what a store may read for it before it refuses the value.

    A shard may hold each inner chunk at its largest, and as much again (a shard written in
    place may keep bytes no index entry points to), and its index.
    """
    specs = pipeline.resolve_specs(spec)
    codec, encoded_spec = pipeline.array_bytes, specs[-1]
    size = codec.encoded_size(encoded_spec)
    if size is None and isinstance(codec, ShardingCodec):
        inner = max_encoded_size(codec.codecs, codec.inner_spec(encoded_spec))
        if inner is not None:
            size = 2 * inner * math.prod(codec.chunks_per_shard(encoded_spec)) + codec.index_size(encoded_spec)
    if size is None:
        return None
    for bytes_codec in pipeline.bytes_bytes:
        exact = bytes_codec.encoded_size(size)
        size = exact if exact is not None else compressed_bound(size)
    return size


@dataclass(frozen=True, eq=False)
class ArrayHandle:
    """Where an array lives and how it is coded.

    Examples
    --------
    >>> import zarrx, pickle
    >>> array = zarrx.create_array({}, "t", shape=(10, 10), chunks=(5, 5), shards=(10, 10), dtype="u1")
    >>> handle = ArrayHandle(array.store, array.path, array.metadata)
    >>> handle.io_chunk_shape, handle.object_key((0, 0))
    ((5, 5), 't/c/0/0')
    """

    store: Store
    path: str
    metadata: ArrayMetadataLike
    #: store chunks that are all fill value (zarrx leaves them out by default)
    write_empty_chunks: bool = False
    #: the handle of a write task: it refuses to be pickled with an in-memory store
    for_writing: bool = False

    # -- what the metadata implies, computed once ---------------------------------------
    @cached_property
    def pipeline(self) -> CodecPipeline:
        return self.metadata.codecs

    @property
    def spec(self) -> ChunkSpec:
        """The decoded representation of one stored object (a shard, for a sharded array)."""
        return self.metadata.chunk_spec

    @cached_property
    def sharding(self) -> ShardingCodec | None:
        """The sharding codec when shards are read and written in parts: it is the only codec
        (array -> array codecs before it change the shard's layout; such arrays use whole shards)."""
        pipeline = self.pipeline
        if isinstance(pipeline.array_bytes, ShardingCodec) and not pipeline.array_array and not pipeline.bytes_bytes:
            return pipeline.array_bytes
        return None

    @cached_property
    def inner_spec(self) -> ChunkSpec | None:
        """The spec of a sharded array's inner chunks (one object, so the pipeline's plan is reused)."""
        return self.sharding.inner_spec(self.spec) if self.sharding is not None else None

    @cached_property
    def max_object_size(self) -> int | None:
        """The most bytes a stored object (chunk or shard) may hold: stores refuse larger
        values (a hostile server cannot make a read allocate more); None: not known."""
        return max_encoded_size(self.pipeline, self.spec)

    @cached_property
    def regular(self) -> bool:
        """Whether every stored object has one shape (a regular grid)."""
        return self.metadata.chunk_grid.is_regular

    @cached_property
    def io_chunk_shape(self) -> tuple[Any, ...]:
        """The grid selections are projected onto: inner chunks for sharded arrays, else chunks --
        per dimension a chunk length, or a rectilinear dimension's chunk offsets (see
        :mod:`zarrx.io.selection`)."""
        if self.sharding is not None:
            return self.sharding.chunk_shape
        if self.regular:
            return self.metadata.chunks
        return self._grid_dimensions

    @cached_property
    def _grid_dimensions(self) -> tuple[Any, ...]:
        return self.metadata.chunk_grid.dimensions(self.metadata.shape)

    @cached_property
    def chunks_per_object(self) -> tuple[int, ...]:
        """Inner chunks per stored object along each axis (all ones without sharding; the largest
        object's on a rectilinear grid)."""
        if self.sharding is None:
            return (1,) * len(self.metadata.shape)
        return self.sharding.chunks_per_shard(self.spec)

    def object_shape(self, coords: tuple[int, ...]) -> tuple[int, ...]:
        """The stored (declared) shape of the object at ``coords``."""
        return self.spec.shape if self.regular else self.metadata.chunk_grid.chunk_shape_at(coords)

    def object_spec(self, coords: tuple[int, ...]) -> ChunkSpec:
        """The decoded representation of the object at ``coords`` (:attr:`spec` on a regular grid)."""
        if self.regular:
            return self.spec
        shape = self.metadata.chunk_grid.chunk_shape_at(coords)
        spec = self._specs.get(shape)
        if spec is None:
            if len(self._specs) > 256:
                self._specs.clear()
            spec = self._specs[shape] = ChunkSpec(shape, self.metadata.data_type, self.metadata.fill_value)
        return spec

    @cached_property
    def _specs(self) -> dict[tuple[int, ...], ChunkSpec]:
        return {}

    @cached_property
    def _object_starts(self) -> tuple[list[int], ...]:
        """Per dimension, the first inner chunk of each shard (rectilinear sharded arrays)."""
        inner = self.sharding.chunk_shape  # type: ignore[union-attr]
        return tuple(
            [0, *itertools.accumulate(edge // size for edge in edges)]
            for edges, size in zip(self.metadata.chunk_grid.chunk_edges(self.metadata.shape), inner)
        )

    def locate(self, inner_coords: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """``(shard coordinates, coordinates in the shard)`` of an inner chunk of a sharded array."""
        if self.regular:
            per_object = self.chunks_per_object
            return tuple(c // n for c, n in zip(inner_coords, per_object)), tuple(c % n for c, n in zip(inner_coords, per_object))
        shard = tuple(bisect.bisect_right(starts, c) - 1 for c, starts in zip(inner_coords, self._object_starts))
        return shard, tuple(c - starts[k] for c, k, starts in zip(inner_coords, shard, self._object_starts))

    @cached_property
    def fill_value(self) -> Any:
        return self.metadata.fill_value

    @property
    def dtype(self) -> np.dtype:
        return self.metadata.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self.metadata.shape

    @property
    def name(self) -> str:
        return "/" + self.path

    def object_key(self, coords: tuple[int, ...]) -> str:
        """The store key of the stored object (chunk or shard) at ``coords``."""
        return self.metadata.storage_key(self.path, coords)

    def object_region(self, coords: tuple[int, ...]) -> tuple[slice, ...]:
        """The in-bounds part of a stored object, in its own coordinates."""
        if self.regular:
            return tuple(
                slice(0, min(size, length - index * size))
                for index, size, length in zip(coords, self.metadata.chunks, self.metadata.shape)
            )
        starts = (int(d[k]) if not isinstance(d, int) else k * d for d, k in zip(self._grid_dimensions, coords))
        shape = self.object_shape(coords)
        return tuple(slice(0, min(size, length - start)) for size, start, length in zip(shape, starts, self.shape))

    def evolve(self, **changes: Any) -> "ArrayHandle":
        """A handle with other fields (``metadata=``, ``write_empty_chunks=``...)."""
        return replace(self, **changes)

    # -- pickling and tokenizing -----------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        if self.for_writing and self.store.process_local:
            # Pickling copies an in-memory store (MemoryStore, memory://, or a wrapper of one) or an
            # Icechunk session's changes: a worker process would write into its copy and the data
            # would be lost without a word. Refuse instead (threads never pickle).
            raise StoreError(
                f"cannot send a write of array {self.name!r} in {self.store!r} to another process: the store keeps "
                "its writes in this process (an in-memory store, an Icechunk session), so the writes would be lost "
                "there; use dask's threaded scheduler, a LocalStore / fsspec URL, or for an Icechunk session "
                "zarrx.dask.icechunk.to_icechunk(x, session, ...), or give each worker a session.fork() and merge "
                "the forks it returns (docs: 'With Icechunk, obstore and references')"
            )
        return {name: getattr(self, name) for name in ("store", "path", "metadata", "write_empty_chunks", "for_writing")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __dask_tokenize__(self) -> tuple[Any, ...]:
        # the store by its repr (root or URL; a MemoryStore by its dict's id), never by its contents
        return (type(self.store).__qualname__, repr(self.store), self.path, self.metadata.to_json())
