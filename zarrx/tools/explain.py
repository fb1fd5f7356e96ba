"""What a read would ask the store for, without reading it: :func:`explain`.

``explain(array, selection)`` runs ``array[selection]`` through the executor
(:mod:`zarrx.io.execute`) with a :class:`~zarrx.io.execute.Trace` in place of the store: the
same plan, the same batches, the same requests, recorded instead of sent. It returns an
:class:`Explanation`: every store request the read would make (key, byte range, the chunks it
serves), grouped into the batches (store calls) that carry them. Each batch is one round trip:
its requests go to the store together, concurrently on remote stores.

* Unsharded arrays: one request per distinct chunk key, no store access at all. On stores whose
  reads cost no round trip (a folder, a dict) large chunks are read one ``get`` at a time, each
  its own call; otherwise a large read is split into batches of about a tenth of its output.
* Sharded arrays: per batch of shards, one request per shard -- the whole shard when every inner
  chunk of it is wanted, else its index -- and then one batch of the wanted inner chunks' byte
  ranges, neighbours merged. Those ranges are written in the shard indexes, so **explain reads
  the indexes of the partially read shards** (index-sized ranges; never a chunk nor a whole
  shard) and reports that as :attr:`Explanation.index_requests`. With ``read_index=False`` it
  reads nothing and leaves the inner-chunk batch out (:attr:`Explanation.exact` is then False).

Example::

    >>> import zarrx, numpy as np
    >>> array = zarrx.create_array({}, shape=(100, 100), chunks=(10, 10), dtype="i2")
    >>> array[:] = 1
    >>> plan = explain(array, np.s_[5:25, 0:10])
    >>> plan.keys, plan.nrequests, plan.nbatches  # a store of local reads: a get per chunk
    (('c/0/0', 'c/1/0', 'c/2/0'), 3, 3)
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from zarrx.errors import UsageError
from zarrx.io.execute import INDEXERS, PlannedRequest, Trace, read_into
from zarrx.io.selection import is_basic
from zarrx.nodes import conveniences
from zarrx.nodes.array import Array
from zarrx.storage.store import ByteRequest, OffsetByteRequest, RangeByteRequest, SuffixByteRequest

__all__ = ["explain", "Explanation", "PlannedRequest"]


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


class _Counted:
    """Projections passed through while their chunks are counted (the plan consumes them lazily)."""

    def __init__(self, projections: Any) -> None:
        self.projections = projections
        self.chunks: set[tuple[int, ...]] = set()

    def __iter__(self) -> Any:
        for projection in self.projections:
            self.chunks.add(projection.chunk_coords)
            yield projection

    @property
    def nchunks(self) -> int:
        return self.projections.nchunks

    def dimensions(self) -> Any:
        """The indexer's per-dimension projections (a plan made from them, a chunk table, takes
        every combination of them: those are counted here)."""
        dimensions = getattr(self.projections, "dimensions", lambda: None)()
        if dimensions is not None:
            self.chunks.update(itertools.product(*([p.chunk_index for p in dimension] for dimension in dimensions)))
        return dimensions


def explain(array: Array, selection: Any = Ellipsis, *, indexing: str = "auto", read_index: bool = True) -> Explanation:
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
        byte ranges (index-sized requests). False reads nothing.

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
    if indexing == "auto":
        indexing = "basic" if is_basic(selection) else "oindex"
    if indexing not in INDEXERS:
        raise UsageError(f"indexing must be 'auto', {', '.join(map(repr, INDEXERS))}; found {indexing!r}")
    handle = array.handle
    indexer = INDEXERS[indexing](selection, array.shape, handle.io_chunk_shape)
    shape = (math.prod(indexer.shape),) if indexing == "vindex" else tuple(indexer.shape)
    # the output is never written: a zero-strided stand-in of the read's shape and dtype
    out = np.lib.stride_tricks.as_strided(np.empty(1, dtype=array.dtype), shape=shape, strides=(0,) * len(shape))
    trace = Trace(array.store, read_index=read_index)
    counted = _Counted(indexer)
    read_into(handle, counted, out, trace)
    return Explanation(
        path=array.path,
        shape=tuple(indexer.shape),
        nchunks=len(counted.chunks),
        requests=tuple(trace.requests),
        index_requests=trace.index_requests,
        exact=trace.exact,
    )


conveniences.provide("explain", explain)
