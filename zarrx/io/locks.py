"""In-process locks on chunks, for threads that write parts of the same chunk.

A write that covers a chunk (or, for a sharded array, a shard) only in part reads the
stored object, merges the new values in and stores it again. Two threads doing that
to one object at the same time can each read the old object, and the one that stores
last silently drops the other's values. zarrx does not lock by itself: writes of whole
chunks -- what :func:`zarrx.to_zarr` checks for its dask tasks, refusing blocks that
share a chunk with :class:`~zarrx.errors.ChunkAlignmentError` -- need no lock, and
most writers make only those. Threads of one process that may write parts of one chunk
hold its lock while writing::

    with zarrx.io.locks.chunk_lock(arr, np.s_[10:20]):
        arr[10:20] = values

:func:`chunk_lock` locks every stored object (chunk or shard) the selection touches.
Locks belong to the stored object, not to the :class:`~zarrx.Array` instance: two
arrays opened separately on one store (equal stores: one folder, one dict, one URL)
share them. They are re-entrant, and taken in one global order, so overlapping
selections locked from many threads cannot deadlock. They are striped
(:data:`STRIPES` locks for every chunk of every array), so holding many is cheap and
two unrelated chunks may now and then share a lock, which only costs a little waiting.

Locks are per process: writers in several processes (dask workers, a cluster) must
write disjoint chunks, as :func:`zarrx.to_zarr` makes sure.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator

from zarrx.io.selection import BasicIndexer, OrthogonalIndexer

__all__ = ["chunk_lock", "STRIPES"]

#: how many locks the chunks of all arrays are spread over
STRIPES = 4096
_LOCKS = [threading.RLock() for _ in range(STRIPES)]


def _stored_units(array: Any, selection: Any) -> set[tuple[int, ...]]:
    """The coordinates of every stored object (chunk, or shard) ``selection`` touches."""
    # the stored objects' grid (shards for a sharded array): lengths, or a rectilinear grid's offsets
    grid = array.metadata.chunk_grid.dimensions(array.shape)
    try:
        indexer = BasicIndexer(selection, array.shape, grid)
    except Exception:  # not a basic selection: let the orthogonal indexer judge it
        indexer = OrthogonalIndexer(selection, array.shape, grid)
    return {projection.chunk_coords for projection in indexer}


@contextlib.contextmanager
def chunk_lock(array: Any, selection: Any = Ellipsis) -> Iterator[None]:
    """Hold the locks of every chunk (shard) ``selection`` of ``array`` touches.

    Parameters
    ----------
    array
        A :class:`zarrx.Array`.
    selection
        What will be written: a basic or orthogonal selection (the whole array by default).

    Examples
    --------
    >>> import zarrx, numpy as np
    >>> arr = zarrx.create_array({}, shape=(10,), chunks=(5,), dtype="int8", fill_value=0)
    >>> with chunk_lock(arr, np.s_[3:7]):  # touches chunks 0 and 1
    ...     arr[3:7] = 1
    >>> arr[:]
    array([0, 0, 0, 1, 1, 1, 1, 0, 0, 0], dtype=int8)
    """
    identity = (array.store, array.path)
    stripes = sorted({hash((identity, coords)) % STRIPES for coords in _stored_units(array, selection)})
    taken = []
    try:
        for stripe in stripes:  # one global order: no deadlock between overlapping selections
            _LOCKS[stripe].acquire()
            taken.append(stripe)
        yield
    finally:
        for stripe in reversed(taken):
            _LOCKS[stripe].release()
