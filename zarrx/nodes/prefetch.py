"""Reading several small arrays in one round trip: :func:`read_together`.

Opening a dataset, xarray reads every dimension coordinate (``time``, ``lat``, ``lon``, ...) to
build its indexes, one after another: on an object store each is a round trip of its own.
``read_together(arrays)`` returns the same arrays over a shared
:class:`~zarrx.storage.PrefetchStore` that knows every stored object a whole read of each of them
needs (planned by :mod:`zarrx.io.plan`): the first read of any of those keys fetches all of them
in one batch, and later reads are answered from it (in another thread, each as soon as its own
value has arrived). Nothing is fetched until something is read, so arrays that are never read cost nothing. The
reading thread waits for the whole batch: it is not sent from a pool thread while the caller goes
on, because Python work beside it holds the GIL that the event loop reading the answers needs after
every system call (a 200-group DataTree at 20 ms per request opened in 1.16-1.31 s that way,
0.87-0.92 s waiting; docs/remote.md).

The fetched values stay in memory as long as the returned arrays do; use it for what is read
whole and is small (coordinates), not for data variables.
"""

from __future__ import annotations

from typing import Sequence

from zarrx.io.plan import plan_objects
from zarrx.io.selection import BasicIndexer
from zarrx.nodes.array import Array
from zarrx.storage.prefetch import PrefetchStore

__all__ = ["read_together", "MAX_PREFETCH_BYTES"]

#: the most bytes (decoded) read_together fetches in one batch
MAX_PREFETCH_BYTES = 64 * 2**20


def read_together(arrays: Sequence[Array]) -> list[Array]:
    """The same arrays, read-only, whose stored objects all come in one batch (in the order of
    ``arrays``) on the first read of any of them.

    Arrays on different stores get one :class:`~zarrx.storage.PrefetchStore` per store, and
    those of one store more than one when they hold more than :data:`MAX_PREFETCH_BYTES` in all
    (each batch fetched on the first read of one of its arrays). A lone array, or one larger than
    that alone, is returned unchanged.

    Examples
    --------
    >>> import zarrx
    >>> root = zarrx.create_group({})
    >>> for name in ("lat", "lon"):
    ...     root.create_array(name, shape=(4,), chunks=(2,), dtype="f4")[:] = 1
    >>> lat, lon = read_together([root["lat"], root["lon"]])
    >>> lat.store
    PrefetchStore(MemoryStore(<7 keys at ...>), 4 keys)
    """
    by_store: dict[int, list[int]] = {}
    for position, array in enumerate(arrays):
        by_store.setdefault(id(array.store), []).append(position)
    result = list(arrays)
    for positions in (pack for positions in by_store.values() for pack in _packs(arrays, positions)):
        members = [arrays[p] for p in positions]
        if len(members) < 2:
            continue
        # a whole-array read touches every chunk, or every shard whole; in the arrays' order,
        # so the first array read is the first whose values arrive
        keys = list(dict.fromkeys(
            plan.key
            for array in members
            for plan in plan_objects(array.handle, BasicIndexer(Ellipsis, array.shape, array.handle.io_chunk_shape))
        ))  # fmt: skip
        store = PrefetchStore(members[0].store, keys)
        for position, array in zip(positions, members):
            result[position] = Array(store, array.path, array.metadata, read_only=True)
    return result


def _packs(arrays: Sequence[Array], positions: list[int]) -> list[list[int]]:
    """``positions`` in runs of at most :data:`MAX_PREFETCH_BYTES` (decoded) each, in order; an
    array larger than that is a run of its own."""
    packs: list[list[int]] = [[]]
    size = 0
    for position in positions:
        nbytes = arrays[position].nbytes
        if packs[-1] and size + nbytes > MAX_PREFETCH_BYTES:
            packs.append([])
            size = 0
        packs[-1].append(position)
        size += nbytes
    return packs
