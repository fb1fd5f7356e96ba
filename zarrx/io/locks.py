"""In-process locks on stored objects: partial writes from many threads never lose each other's values.

A write that covers a chunk (or, for a sharded array, a shard) only in part reads the
stored object, merges the new values in and stores it again. Two threads doing that
to one object at the same time would each read the old object, and the one that
stores last would drop the other's values. So :mod:`zarrx.io.write` holds
:func:`object_locks` of the partial objects of a batch from before it reads them until
they are stored (or deleted): threads of one process writing parts of one chunk or
shard -- ``arr[i] = v`` from 8 threads into one chunk of 8 -- keep every value. Writes
of whole objects read nothing and take no lock.

The locks belong to the stored object -- the store's ``location`` and the key -- not to
the :class:`~zarrx.Array` instance: arrays opened separately on one folder, dict or URL
share them. They are striped (:data:`STRIPES` re-entrant locks for every object of every
store, chosen by a hash: no table grows), taken in one global order, each batch's at once
and released before the next, so writers cannot deadlock one another. They are held by the
thread that called the write, never by zarrx's pool threads (which do no writes of their
own), so the pool work a write waits for never waits on them.

:func:`chunk_lock` is for a caller's compound update (read, compute, write back: ``arr[i]
+= 1``) of the chunks a selection touches; a plain write needs none::

    with zarrx.io.locks.chunk_lock(arr, np.s_[10:20]):
        arr[10:20] += 1

Its locks are re-entrant, taken in one global order, and separate from the writes' own
(the writes' are always taken last), so overlapping selections locked from many threads
cannot deadlock.

Other processes are excluded where the store can do it (its ``lock_objects``, see
:mod:`zarrx.storage.metadata_updates`): a store of local files locks each partial object
against every process of the machine (dask's worker processes, a ``multiprocessing``
pool), so ``da.store(x, arr, lock=False)`` with blocks that share chunks keeps every value;
a store with conditional writes (S3, GCS, Azure) needs no lock: :mod:`zarrx.io.write` stores
its partial objects over the version read only; on a network or cluster file system (NFS,
Lustre, GPFS, ...) a local store also locks them in a lock file in its folder, against the other
machines mounting it. Elsewhere (file systems without locks, plain fsspec file systems) writers
in several processes must write disjoint chunks, as :func:`zarrx.to_zarr` makes sure. A write
of a *whole* object takes no lock, so one racing a partial write of the same object from another
thread can end as the partial write's merge into the object as it was before (the whole write
undone outside the partial selection): writes that overlap need :func:`chunk_lock` or an order.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterable, Iterator

from zarrx.io.selection import BasicIndexer, OrthogonalIndexer

__all__ = ["chunk_lock", "object_locks", "STRIPES"]

#: how many locks the chunks of all arrays are spread over
STRIPES = 4096
_LOCKS = [threading.RLock() for _ in range(STRIPES)]
#: the writes' own locks (:func:`object_locks`), apart from the callers' (:func:`chunk_lock`)
_OBJECT_LOCKS = [threading.RLock() for _ in range(STRIPES)]


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
    with _holding(_LOCKS, {hash((identity, coords)) % STRIPES for coords in _stored_units(array, selection)}):
        yield


@contextlib.contextmanager
def _holding(table: Any, stripes: Iterable[int]) -> Iterator[None]:
    """Hold the locks ``stripes`` of ``table``, taken in one global order (no deadlock between
    two holders of overlapping sets) and released in the reverse one."""
    taken = []
    try:
        for stripe in sorted(stripes):
            table[stripe].acquire()
            taken.append(stripe)
        yield
    finally:
        for stripe in reversed(taken):
            table[stripe].release()


@contextlib.contextmanager
def object_locks(store: Any, keys: Iterable[str]) -> Iterator[None]:
    """Hold the locks of the stored objects ``keys`` of ``store`` (see the module docstring).

    Parameters
    ----------
    store
        A :class:`~zarrx.storage.store.Store`; stores of one ``location`` share the locks.
    keys
        The keys of the objects about to be read, merged and stored again.

    Examples
    --------
    >>> from zarrx.storage.memory import MemoryStore
    >>> store = MemoryStore()
    >>> with object_locks(store, ["c/0", "c/1"]):
    ...     store.set("c/0", b"merged")
    >>> store.get("c/0")
    b'merged'
    """
    keys = list(keys)
    try:
        identity = store.location
        hash(identity)
    except TypeError:  # a location that cannot be hashed: the store object itself
        identity = ("object", id(store))
    # this process's threads first, then other processes' (a store of local files locks them)
    with _holding(_OBJECT_LOCKS, {hash((identity, key)) % STRIPES for key in keys}), store.lock_objects(keys):
        yield
