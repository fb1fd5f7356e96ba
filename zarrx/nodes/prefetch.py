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

:func:`fetch_together` fetches the batch at once in the calling thread instead, for a thread that
has nothing else to do meanwhile (one of the threads walking a hierarchy, whose opening thread
waits for the walk).

The fetched values stay in memory as long as the returned arrays do; use it for what is read
whole and is small (coordinates), not for data variables.
"""

from __future__ import annotations

from typing import Sequence

from zarrx.io.plan import plan_objects
from zarrx.io.selection import BasicIndexer
from zarrx.nodes.array import Array
from zarrx.storage.prefetch import PrefetchStore

__all__ = ["read_together", "fetch_together", "MAX_PREFETCH_BYTES"]

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
    return [array for array, _ in _together(arrays, 2)]


def fetch_together(arrays: Sequence[Array]) -> list[Array]:
    """:func:`read_together`, but the batches fetched now, in this thread, which returns once
    they are in (a lone array too, unless larger than :data:`MAX_PREFETCH_BYTES`): for a thread
    that would otherwise wait idle for something else.

    Examples
    --------
    >>> import zarrx
    >>> from zarrx.storage import MemoryStore, MetricsStore
    >>> store = MetricsStore(MemoryStore())
    >>> zarrx.create_array(store, "x", shape=(2,), dtype="i4")[:] = 7
    >>> array = zarrx.open_array(store, "x")
    >>> store.reset()
    >>> (x,) = fetch_together([array])  # its one chunk, read now
    >>> store.summary().requests, x[:].tolist(), store.summary().requests
    (1, [7, 7], 1)
    """
    together = _together(arrays, 1)
    for store in {id(s): s for _, s in together if s is not None}.values():
        store.fetch()
    return [array for array, _ in together]


def _together(arrays: Sequence[Array], smallest: int) -> list[tuple[Array, PrefetchStore | None]]:
    """Each of ``arrays``, over a shared PrefetchStore (and that store) when it is in a pack of
    at least ``smallest``, else as it is (and None)."""
    by_store: dict[int, list[int]] = {}
    for position, array in enumerate(arrays):
        by_store.setdefault(id(array.store), []).append(position)
    result: list[tuple[Array, PrefetchStore | None]] = [(array, None) for array in arrays]
    for positions in (pack for positions in by_store.values() for pack in _packs(arrays, positions)):
        members = [arrays[p] for p in positions]
        if len(members) < smallest or (len(members) == 1 and members[0].nbytes > MAX_PREFETCH_BYTES):
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
            result[position] = (Array(store, array.path, array.metadata, read_only=True), store)
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
