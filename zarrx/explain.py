"""What a read would ask the store for, without reading it: :func:`explain`.

``explain(array, selection)`` plans ``array[selection]`` exactly as
:func:`zarrx.chunk_io.read_selection` performs it and returns an
:class:`Explanation`: every store request the read would make (key, byte range,
the chunks it serves), grouped into the batches (store calls) that carry them.
Each batch is one round trip: its requests go to the store together, concurrently
on remote stores.

* Unsharded arrays: one request per distinct chunk key; a large read is split into
  batches of about a tenth of its output (:func:`zarrx.chunk_io.batch_limit`). No
  store access at all.
* Sharded arrays: per batch of shards, one request per shard -- the whole shard when
  every inner chunk of it is wanted, else its index -- and then one batch of the
  wanted inner chunks' byte ranges, neighbours merged (:mod:`zarrx.byte_ranges`).
  Those ranges are written in the shard indexes, so **explain reads the indexes of
  the partially read shards** (in one batch of index-sized ranges; never a chunk nor
  a whole shard) and reports that as :attr:`Explanation.index_requests`. With
  ``read_index=False`` it reads nothing and leaves the inner-chunk batch out
  (:attr:`Explanation.exact` is then False).

Example::

    >>> import zarrx, numpy as np
    >>> array = zarrx.create_array({}, shape=(100, 100), chunks=(10, 10), dtype="i2")
    >>> array[:] = 1
    >>> plan = explain(array, np.s_[5:25, 0:10])
    >>> plan.keys, plan.nrequests, plan.nbatches
    (('c/0/0', 'c/1/0', 'c/2/0'), 3, 1)
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from zarrx.byte_ranges import coalesce
from zarrx.chunk_io import ChunkLayout, batch_limit, decoded_nbytes, split_batches
from zarrx.codecs.sharding import EMPTY
from zarrx.errors import UsageError
from zarrx.indexing import BasicIndexer, ChunkProjection, OrthogonalIndexer, VectorizedIndexer
from zarrx.shard_io import _group_by_shard, _inner_chunks_in_bounds, _slice_index
from zarrx.storage.store import ByteRequest, OffsetByteRequest, RangeByteRequest, SuffixByteRequest

if TYPE_CHECKING:
    from zarrx.array import Array

__all__ = ["explain", "Explanation", "PlannedRequest"]

#: what a request fetches
CHUNK, SHARD, SHARD_INDEX, INNER_CHUNKS = "chunk", "shard", "shard index", "inner chunks"

_INDEXERS = {"basic": BasicIndexer, "oindex": OrthogonalIndexer, "vindex": VectorizedIndexer}


@dataclass(frozen=True)
class PlannedRequest:
    """One store request of a read."""

    #: position of the store call (round trip) that carries it, from 0
    batch: int
    key: str
    #: None: the whole object
    byte_range: ByteRequest | None
    #: ``"chunk"``, ``"shard"`` (whole), ``"shard index"`` or ``"inner chunks"`` (merged ranges)
    kind: str
    #: the chunks it serves (coordinates in the inner-chunk grid for sharded arrays)
    chunks: tuple[tuple[int, ...], ...]

    @property
    def nbytes(self) -> int | None:
        """Bytes asked for, when the request says (a whole object's size is not known)."""
        match self.byte_range:
            case RangeByteRequest(start, end):
                return end - start
            case SuffixByteRequest(suffix):
                return suffix
        return None


@dataclass(frozen=True)
class Explanation:
    """The store requests a read would make (see the module docstring)."""

    path: str
    #: shape of the result
    shape: tuple[int, ...]
    #: chunks the selection touches (inner chunks for sharded arrays)
    nchunks: int
    requests: tuple[PlannedRequest, ...]
    #: requests explain made itself to learn the inner byte ranges (shard indexes)
    index_requests: int
    #: False when ``read_index=False`` left the inner-chunk requests of sharded reads out
    exact: bool = True

    @property
    def keys(self) -> tuple[str, ...]:
        """The distinct store keys touched, in request order."""
        return tuple(dict.fromkeys(request.key for request in self.requests))

    @property
    def nrequests(self) -> int:
        return len(self.requests)

    @property
    def nbatches(self) -> int:
        """Store calls, i.e. sequential round trips."""
        return len({request.batch for request in self.requests})

    @property
    def nbytes(self) -> int | None:
        """Bytes the requests ask for, or None when some fetch whole objects of unknown size."""
        sizes = [request.nbytes for request in self.requests]
        return None if None in sizes else sum(sizes)

    def batch(self, number: int) -> tuple[PlannedRequest, ...]:
        return tuple(request for request in self.requests if request.batch == number)

    def __str__(self) -> str:
        index = f"; explain read {self.index_requests} shard index range(s) to plan it" if self.index_requests else ""
        inexact = "; inner-chunk requests not planned (read_index=False)" if not self.exact else ""
        lines = [
            f"read of {self.shape} from {self.path or '/'!r}: {self.nchunks} chunk(s) in {len(self.keys)} key(s), "
            f"{self.nrequests} request(s) in {self.nbatches} batch(es){index}{inexact}",
            f"{'batch':>5}  {'kind':<12}  {'key':<20}  {'range':<18}  chunks",
        ]
        for request in self.requests:
            chunks = ", ".join(map(str, request.chunks[:4])) + (" ..." if len(request.chunks) > 4 else "")
            byte_range = _describe(request.byte_range)
            line = f"{request.batch:>5}  {request.kind:<12}  {request.key:<20}  {byte_range:<18}  {chunks}"
            lines.append(line.rstrip())
        return "\n".join(lines)


def _describe(byte_range: ByteRequest | None) -> str:
    """A byte range as an HTTP Range header value (``bytes=0-9`` is 10 bytes)."""
    match byte_range:
        case None | OffsetByteRequest(0):
            return "whole"
        case RangeByteRequest(start, end):
            return f"bytes={start}-{end - 1}"
        case OffsetByteRequest(offset):
            return f"bytes={offset}-"
        case SuffixByteRequest(suffix):
            return f"bytes=-{suffix}"
    return repr(byte_range)


def explain(
    array: "Array", selection: Any = Ellipsis, *, indexing: str = "auto", read_index: bool = True
) -> Explanation:
    """The store requests ``array[selection]`` would make, without reading any chunk.

    Parameters
    ----------
    array
        A :class:`zarrx.Array`.
    selection
        What ``array[...]`` would take.
    indexing
        ``"auto"`` (as ``array[selection]``), ``"basic"``, ``"oindex"`` (as
        ``array.oindex[selection]``) or ``"vindex"`` (as ``array.vindex[selection]``).
    read_index
        For sharded arrays, read the indexes of partially read shards to plan the inner
        byte ranges (one batch of index-sized requests). False reads nothing.

    Examples
    --------
    >>> import zarrx
    >>> array = zarrx.create_array({}, shape=(64,), chunks=(4,), shards=(32,), dtype="u1")
    >>> array[:] = 7
    >>> plan = explain(array, slice(0, 6))
    >>> [(r.batch, r.kind, r.key) for r in plan.requests]  # the index again with the chunks: unchanged?
    [(0, 'shard index', 'c/0'), (1, 'shard index', 'c/0'), (1, 'inner chunks', 'c/0')]
    >>> plan.index_requests
    1
    """
    from zarrx.array import _is_basic  # the same rule as Array.__getitem__

    if indexing == "auto":
        indexing = "basic" if _is_basic(selection) else "oindex"
    if indexing not in _INDEXERS:
        raise UsageError(f"indexing must be 'auto', {', '.join(map(repr, _INDEXERS))}; found {indexing!r}")
    layout = ChunkLayout(array.store, array.path, array.metadata)
    indexer = _INDEXERS[indexing](selection, array.shape, layout.io_chunk_shape)
    projections = list(indexer)
    out_nbytes = math.prod(indexer.shape) * np.dtype(array.dtype).itemsize
    if layout.sharding is not None:
        requests, index_requests = _plan_sharded(layout, projections, out_nbytes, read_index)
    else:
        requests, index_requests = _plan_chunks(layout, projections, out_nbytes), 0
    return Explanation(
        path=array.path,
        shape=tuple(indexer.shape),
        nchunks=len({p.chunk_coords for p in projections}),
        requests=tuple(requests),
        index_requests=index_requests,
        exact=read_index or layout.sharding is None,
    )


def _plan_chunks(layout: ChunkLayout, projections: list[ChunkProjection], out_nbytes: int) -> list[PlannedRequest]:
    """Mirror of :func:`zarrx.chunk_io.read_selection`: one ``get_many`` per batch."""
    chunk_bytes = decoded_nbytes(layout.spec)
    requests = []
    for number, batch in enumerate(split_batches(projections, lambda _: chunk_bytes, batch_limit(out_nbytes))):
        served: dict[str, list[tuple[int, ...]]] = defaultdict(list)
        for projection in batch:
            served[layout.chunk_key(projection.chunk_coords)].append(projection.chunk_coords)
        requests.extend(PlannedRequest(number, key, None, CHUNK, tuple(dict.fromkeys(c))) for key, c in served.items())
    return requests


def _plan_sharded(
    layout: ChunkLayout, projections: list[ChunkProjection], out_nbytes: int, read_index: bool
) -> tuple[list[PlannedRequest], int]:
    """Mirror of :func:`zarrx.shard_io.read_sharded`: per batch of shards, whole shards or
    indexes, then the merged inner ranges."""
    codec, spec = layout.sharding, layout.spec
    groups = _group_by_shard(layout, projections)
    inner_bytes = decoded_nbytes(codec.inner_spec(spec))
    batches = list(split_batches(groups, lambda shard: len(groups[shard]) * inner_bytes, batch_limit(out_nbytes)))
    whole = {shard: len(groups[shard]) == _inner_chunks_in_bounds(layout, shard) for shard in groups}
    keys = {shard: layout.chunk_key(shard) for shard in groups}

    # the indexes of the partially read shards, all in one batch (explain's only reads)
    partial = [shard for shard in groups if not whole[shard]]
    indexes: dict[tuple[int, ...], np.ndarray | None] = {}
    if read_index and partial:
        raws = layout.store.get_ranges([(keys[shard], codec.index_range(spec)) for shard in partial])
        for shard, raw in zip(partial, raws):
            key = keys[shard]
            indexes[shard] = None if raw is None else codec.decode_index(_slice_index(raw, codec, layout), spec, key)

    requests: list[PlannedRequest] = []
    number = 0
    for shards in batches:
        for shard in shards:
            coords = tuple(dict.fromkeys(p.chunk_coords for _, p in groups[shard]))
            if whole[shard]:
                requests.append(PlannedRequest(number, keys[shard], OffsetByteRequest(0), SHARD, coords))
            else:
                requests.append(PlannedRequest(number, keys[shard], codec.index_range(spec), SHARD_INDEX, ()))
        number += 1
        inner: list[PlannedRequest] = []
        for shard in shards:
            index = indexes.get(shard)
            if whole[shard] or index is None:  # whole, absent (all fill value) or not planned
                continue
            ranges, served = [], []
            for inner_coords, projection in groups[shard]:
                offset, nbytes = index[inner_coords]
                if offset == EMPTY and nbytes == EMPTY:
                    continue  # an empty inner chunk: the fill value, no request
                ranges.append((int(offset), int(offset) + int(nbytes)))
                served.append(projection.chunk_coords)
            if ranges:  # the index again, to check the shard did not change (shard_io._read_shards)
                inner.append(PlannedRequest(number, keys[shard], codec.index_range(spec), SHARD_INDEX, ()))
            for merged in coalesce(ranges):
                coords = tuple(dict.fromkeys(served[position] for position, _, _ in merged.members))
                byte_range = RangeByteRequest(merged.start, merged.end)
                inner.append(PlannedRequest(number, keys[shard], byte_range, INNER_CHUNKS, coords))
        if inner:
            requests.extend(inner)
            number += 1
    return requests, (len(partial) if read_index and partial else 0)
