"""Planning a read or a write: which stored objects, which bytes of them, where each piece goes.

Pure functions of an :class:`~zarrx.io.handle.ArrayHandle` and a selection's projections
(:mod:`zarrx.io.selection`); nothing here touches a store. The executor
(:mod:`zarrx.io.execute`) runs what they describe, and ``explain()`` and ``zarrx verify``
render and run the same plans.

* :func:`plan_objects` groups the projections by *stored object* -- a chunk, or a shard of a
  sharded array -- into :class:`ObjectPlan` values: the object's key and grid coordinates, its
  pieces (an inner chunk or chunk, the part of it the selection takes and the part of the output
  it fills) and whether the object is needed **whole**. A read fetches a whole object in one
  request; a write replaces it without reading it. Otherwise the object is **partial**: a read
  fetches the shard's index, then only the inner chunks it needs; a write reads, merges and
  rewrites.
* :func:`inner_reads` is the second step of a partial shard read: given the shard's index, the
  byte ranges of the wanted inner chunks, neighbours merged (:mod:`zarrx.io.byte_ranges`), and
  the pieces that are **fill only** (empty inner chunks, which need no request).
* :func:`batches` cuts a plan into store batches of bounded decoded size, so a large read holds
  the compressed bytes of a bounded part of it at a time.
* :func:`object_steps` cuts a region into boxes of whole stored objects (cut at the region's
  edges), the steps of a streaming copy (:mod:`zarrx.io.copy`) and of ``zarrx convert``'s tasks.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, TypeVar

from zarrx.codecs.base import ChunkSpec
from zarrx.codecs.sharding import ShardIndex
from zarrx.io.byte_ranges import coalesce
from zarrx.io.handle import ArrayHandle
from zarrx.io.selection import ChunkProjection
from zarrx.storage.store import RangeByteRequest

__all__ = [
    "ObjectPlan", "RangeRead", "ChunkRow", "ShardRows", "plan_objects", "chunk_table", "shard_table", "table_rows", "inner_reads", "batches", "split_batches", "batch_limit",
    "decoded_nbytes", "MIN_BATCH_BYTES", "object_steps",
]  # fmt: skip

T = TypeVar("T")

#: smallest store batch of a large read (see batch_limit)
MIN_BATCH_BYTES = 8 * 2**20
#: assumed in-memory bytes per element of variable-length types when sizing batches
VARIABLE_ITEM_BYTES = 16


@dataclass(frozen=True, slots=True)
class ObjectPlan:
    """One stored object (chunk or shard) a read or write touches."""

    key: str
    #: coordinates in the grid of stored objects
    coords: tuple[int, ...]
    #: ``(inner coordinates in the object, projection)`` per piece; the projection's coordinates
    #: are in the grid selections are projected onto (inner chunks for sharded arrays)
    pieces: tuple[tuple[tuple[int, ...], ChunkProjection], ...]
    #: read: fetch it whole; write: replace it without reading it
    whole: bool


@dataclass(frozen=True, slots=True)
class RangeRead:
    """One request of a partial shard read: a merged byte range and the pieces inside it."""

    key: str
    byte_range: RangeByteRequest
    #: ``(start, end, projection)`` of each inner chunk, offsets in the shard
    members: tuple[tuple[int, int, ChunkProjection], ...]


def decoded_nbytes(spec: ChunkSpec) -> int:
    """Bytes a decoded chunk of ``spec`` takes (variable-length types: an estimate)."""
    return spec.nbytes if spec.nbytes is not None else spec.size * VARIABLE_ITEM_BYTES


def batch_limit(out_nbytes: int) -> int:
    """Most decoded bytes' worth of chunks one store batch fetches for an output of ``out_nbytes``.

    Fetching every chunk of a large read at once would hold all its compressed bytes beside the
    output (2x the output for poorly compressible data); a tenth of the output (at least 8 MiB)
    keeps the peak near the output size while each batch stays large enough to keep a remote
    store busy.
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


def _inner_chunks_in_bounds(handle: ArrayHandle, coords: tuple[int, ...]) -> int:
    """How many inner chunks of the shard at ``coords`` hold at least one element of the array."""
    inner = handle.io_chunk_shape
    if not handle.regular:  # the in-bounds part of this shard, in inner chunks
        return math.prod(-(-region.stop // c) for region, c in zip(handle.object_region(coords), inner))
    shard_shape = handle.metadata.chunks
    return math.prod(
        min(s // c, -(-(length - index * s) // c))
        for index, s, c, length in zip(coords, shard_shape, inner, handle.metadata.shape)
    )


def plan_objects(handle: ArrayHandle, projections: Iterable[ChunkProjection], *, write: bool = False) -> Iterator[ObjectPlan]:
    """The stored objects ``projections`` touch, lazily for unsharded arrays (one per projection).

    ``write`` decides what *whole* means: a read needs every in-bounds inner chunk of a shard
    (then one request fetches it all), a write must also cover each of them completely (then
    nothing stored is kept). A chunk read is always whole; a chunk write is whole when its
    projection covers all of its in-bounds part.
    """
    if handle.sharding is None:
        key = handle.object_key
        for projection in projections:
            coords = projection.chunk_coords
            yield ObjectPlan(key(coords), coords, (((), projection),), projection.is_complete_chunk or not write)
        return
    per_object = handle.chunks_per_object
    groups: dict[tuple[int, ...], list[tuple[tuple[int, ...], ChunkProjection]]] = defaultdict(list)
    if not handle.regular:  # shards of several shapes: each inner chunk finds its shard
        for projection in projections:
            shard, inner = handle.locate(projection.chunk_coords)
            groups[shard].append((inner, projection))
    for projection in projections if handle.regular else ():
        coords = projection.chunk_coords
        shard = tuple(c // n for c, n in zip(coords, per_object))
        groups[shard].append((tuple(c % n for c, n in zip(coords, per_object)), projection))
    for shard, pieces in groups.items():
        whole = len(pieces) == _inner_chunks_in_bounds(handle, shard)
        if write:
            whole = whole and all(projection.is_complete_chunk for _, projection in pieces)
        yield ObjectPlan(handle.object_key(shard), shard, tuple(pieces), whole)


#: one row of a chunk table: key, chunk coordinates, where it goes in the output, and what part of
#: the chunk goes there (None: the whole chunk, exactly the output piece's shape)
ChunkRow = tuple[str, tuple[int, ...], tuple[Any, ...], "tuple[Any, ...] | None"]


def chunk_table(handle: ArrayHandle, projections: Iterable[ChunkProjection]) -> Iterator[ChunkRow] | None:
    """:func:`plan_objects` of an unsharded array for a product selection (slices and ints), as
    rows computed per dimension and combined lazily, in C order -- no projection object per
    chunk: the plan of the executor's small-chunk loop. None for any other array or selection.

    Examples
    --------
    >>> import zarrx
    >>> from zarrx.io.selection import BasicIndexer
    >>> array = zarrx.create_array(zarrx.storage.MemoryStore(), "t", shape=(10,), chunks=(4,), dtype="i1")
    >>> list(chunk_table(array.handle, BasicIndexer(slice(2, 9), (10,), (4,))))  # doctest: +NORMALIZE_WHITESPACE
    [('t/c/0', (0,), (slice(0, 2, None),), (slice(2, 4, 1),)),
     ('t/c/1', (1,), (slice(2, 6, None),), None),
     ('t/c/2', (2,), (slice(6, 7, None),), (slice(0, 1, 1),))]
    """
    if handle.sharding is not None or not handle.regular:
        return None
    dimensions = getattr(projections, "dimensions", lambda: None)()
    if dimensions is None:
        return None
    per_dimension, kept = [], []
    for dimension, (projected, length) in enumerate(zip(dimensions, handle.io_chunk_shape)):
        if projected and projected[0].out_selection is not None:
            kept.append(dimension)
        # a piece is the whole chunk when it takes all of it in order, up to the array's edge
        per_dimension.append([
            (p.chunk_index, p.out_selection, p.chunk_selection,
             p.is_complete and p.out_selection is not None and p.out_selection.stop - p.out_selection.start == length)
            for p in projected
        ])  # fmt: skip
    return _rows(handle.object_key, per_dimension, None if len(kept) == len(per_dimension) else kept)


#: the rows of one shard in a shard table: its key, its coordinates in the shard grid, the wanted
#: inner chunks along each dimension (as :func:`chunk_table` keeps them: index in the inner-chunk
#: grid, output slice, chunk slice, whether whole), their indexes within the shard along each
#: dimension, and the output's dimensions (None: all, else those an int did not drop)
ShardRows = tuple[str, tuple[int, ...], list[list[Any]], list[list[int]], "list[int] | None"]


def shard_table(handle: ArrayHandle, projections: Iterable[ChunkProjection]) -> Iterator[ShardRows] | None:
    """:func:`plan_objects` of a sharded array for a product selection (slices and ints), shard by
    shard, with each shard's inner chunks kept per dimension -- no projection object per inner
    chunk; :func:`table_rows` combines them. None for any other array or selection.

    Examples
    --------
    >>> import zarrx
    >>> from zarrx.io.selection import BasicIndexer
    >>> store = zarrx.storage.MemoryStore()
    >>> array = zarrx.create_array(store, "t", shape=(10,), chunks=(4,), shards=(8,), dtype="i1")
    >>> [(key, coords, local) for key, coords, _, local, _ in shard_table(array.handle, BasicIndexer(slice(2, 9), (10,), (4,)))]
    [('t/c/0', (0,), [[0, 1]]), ('t/c/1', (1,), [[0]])]
    """
    if handle.sharding is None or not handle.regular or not handle.shape:
        return None
    dimensions = getattr(projections, "dimensions", lambda: None)()
    if dimensions is None:
        return None
    per_shard = handle.chunks_per_object
    groups: list[dict[int, tuple[list[Any], list[int]]]] = []
    kept = []
    for dimension, (projected, length, count) in enumerate(zip(dimensions, handle.io_chunk_shape, per_shard)):
        if projected and projected[0].out_selection is not None:
            kept.append(dimension)
        by_shard: dict[int, tuple[list[Any], list[int]]] = {}
        for p in projected:
            shard, local = divmod(p.chunk_index, count)
            rows, locals_ = by_shard.setdefault(shard, ([], []))
            whole = p.is_complete and p.out_selection is not None and p.out_selection.stop - p.out_selection.start == length
            rows.append((p.chunk_index, p.out_selection, p.chunk_selection, whole))
            locals_.append(local)
        groups.append(by_shard)
    kept_or_all = None if len(kept) == len(groups) else kept
    return (
        (handle.object_key(coords := tuple(shard for shard, _ in combination)), coords,
         [rows for _, (rows, _) in combination], [locals_ for _, (_, locals_) in combination], kept_or_all)
        for combination in itertools.product(*(by_shard.items() for by_shard in groups))
    )  # fmt: skip


def table_rows(per_dimension: list[list[Any]], kept: list[int] | None) -> Iterator[ChunkRow]:
    """The rows of a chunk table's (or one shard's) dimensions in C order, as :func:`chunk_table`
    yields them, with an empty key (the shard's key is the caller's)."""
    return _rows(lambda coords: "", per_dimension, kept)


def _rows(key: Callable[[tuple[int, ...]], str], per_dimension: list[list[Any]], kept: list[int] | None) -> Iterator[ChunkRow]:
    if kept is not None or not per_dimension:  # an int dropped a dimension of the output, or 0-d
        for combination in itertools.product(*per_dimension):
            coords, outs, selections, whole = zip(*combination) if combination else ((), (), (), ())
            if kept is not None:
                outs = tuple(outs[dimension] for dimension in kept)
            # (a 0-d chunk is never "whole": out[()] = chunk would store the array in an object slot)
            yield key(coords), coords, outs, None if whole and all(whole) else selections
        return
    # the last dimension innermost, its pieces joined to each combination of the others (C order)
    *leading, last = per_dimension
    for combination in itertools.product(*leading):
        lead_coords, lead_outs, lead_selections, lead_whole = zip(*combination) if combination else ((), (), (), ())
        lead_whole = all(lead_whole)
        for index, out_selection, chunk_selection, whole in last:
            coords = (*lead_coords, index)
            yield (key(coords), coords, (*lead_outs, out_selection),
                   None if whole and lead_whole else (*lead_selections, chunk_selection))  # fmt: skip


def object_weight(handle: ArrayHandle) -> Callable[[ObjectPlan], int]:
    """Decoded bytes an object plan brings into memory (its pieces' chunks)."""
    chunk_bytes = decoded_nbytes(handle.inner_spec or handle.spec)
    return lambda plan: len(plan.pieces) * chunk_bytes


def batches(handle: ArrayHandle, objects: Iterable[ObjectPlan], out_nbytes: int) -> Iterator[list[ObjectPlan]]:
    """The objects in store batches of about :func:`batch_limit` decoded bytes (whole shards per batch)."""
    return split_batches(objects, object_weight(handle), batch_limit(out_nbytes))


def inner_reads(plan: ObjectPlan, index: ShardIndex) -> tuple[list[RangeRead], list[ChunkProjection]]:
    """The requests of a partially read shard (merged byte ranges of its wanted inner chunks) and
    the projections that are fill only (empty inner chunks), from the shard's index."""
    wanted: list[tuple[int, int, ChunkProjection]] = []
    fills: list[ChunkProjection] = []
    for inner, projection in plan.pieces:
        found = index.location(inner)
        if found is None:
            fills.append(projection)
        else:
            wanted.append((found[0], found[1], projection))
    reads = [
        RangeRead(plan.key, RangeByteRequest(merged.start, merged.end), tuple(wanted[p] for p, _, _ in merged.members))
        for merged in coalesce([(start, end) for start, end, _ in wanted])
    ]
    return reads, fills


def object_steps(handle: ArrayHandle, region: tuple[slice, ...], max_objects: int) -> Iterator[tuple[slice, ...]]:
    """Boxes covering ``region`` (slices of step 1, one per axis), in C order, each made of whole
    stored objects (chunks, or shards) cut at the region's edges, at most ``max_objects`` of them:
    objects are grouped along the first axis first, then along the next ones -- so each object's
    part of a box is a contiguous piece of it (read into and encoded from without a copy).

    Two boxes never share a stored object, so each may be written on its own without reading
    another's objects.

    Examples
    --------
    >>> import zarrx
    >>> array = zarrx.create_array({}, shape=(5, 10), chunks=(2, 4), dtype="u1")
    >>> [(box[0].start, box[0].stop, box[1].start, box[1].stop) for box in object_steps(array.handle, (slice(1, 5), slice(0, 10)), 2)]
    [(1, 4, 0, 4), (1, 4, 4, 8), (1, 4, 8, 10), (4, 5, 0, 4), (4, 5, 4, 8), (4, 5, 8, 10)]
    """
    per_axis = []
    for part, edges in zip(region, handle.metadata.chunk_grid.chunk_edges(handle.shape)):
        cuts, position = [], 0
        for edge in edges:  # the objects along this axis that the region touches, cut to it
            start, stop = max(position, part.start), min(position + edge, part.stop)
            if start < stop:
                cuts.append((start, stop))
            position += edge
        per_axis.append(cuts)
    left = max(1, max_objects)
    groups = [1] * len(per_axis)
    for axis in range(len(per_axis)):  # the first axis first: contiguous pieces of each object
        groups[axis] = max(1, min(len(per_axis[axis]), left))
        if groups[axis] < len(per_axis[axis]):
            break
        left //= max(1, len(per_axis[axis]))
    merged = [
        [slice(cuts[i][0], cuts[min(i + group, len(cuts)) - 1][1]) for i in range(0, len(cuts), group)]
        for cuts, group in zip(per_axis, groups)
    ]
    return itertools.product(*merged)
