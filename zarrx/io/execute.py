"""Running read plans against a store: batched fetches, decoding into the output.

:func:`read_into` fills an output array from every stored object a selection touches
(:func:`zarrx.io.plan.plan_objects`); absent objects and empty inner chunks become the fill
value. Shards are read by :mod:`zarrx.io.shards`; chunks here:

* On stores whose reads cost no round trip (``store.reads_are_local``: a folder, a dict) large
  chunks are read, decoded and copied one per pool task -- no batch of compressed bytes held,
  no barrier between reading and decoding -- and small ones from their table
  (:func:`zarrx.io.plan.chunk_table`) through the store's ``batch_reader``.
* Otherwise the chunks come in batched ``get_many`` calls of about a tenth of the output
  (:func:`zarrx.io.plan.batches`), then are decoded on the pool; small chunks (decoded on the
  calling thread anyway) come through ``iter_many`` and are decoded as they arrive, while the
  rest of the batch is in flight.

Every request goes through a :class:`~zarrx.io.fetch.Fetcher`; :class:`~zarrx.io.fetch.Trace`
is the fetcher of ``explain()``.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import queue
import sys
import threading
from typing import Any, Iterable, Iterator

import numpy as np

from zarrx.errors import ChunkEncodeError, SelectionError
from zarrx.concurrency import call_threads, map_runs, start_beside
from zarrx.io.decode import ChunkDecoder, StoredRange, caller_can_work
from zarrx.io.fetch import CHUNK, INNER_CHUNKS, SHARD, SHARD_INDEX, Fetcher, PlannedRequest, Request, Trace
from zarrx.io.handle import ArrayHandle
from zarrx.io.plan import ChunkRow, ObjectPlan, batches, chunk_table, plan_objects, split_batches
from zarrx.io.selection import BasicIndexer, ChunkProjection, OrthogonalIndexer, VectorizedIndexer
from zarrx.io.shards import read_shards
from zarrx.scratch import fresh_array
from zarrx.sizes import count_text
from zarrx.storage.store import Store

__all__ = [
    "INDEXERS", "Fetcher", "Trace", "PlannedRequest", "read_into", "read_selection", "allocate_output",
    "as_array_of", "CHUNK", "SHARD", "SHARD_INDEX", "INNER_CHUNKS", "DIRECT_BATCH_ITEMS",
]  # fmt: skip

#: the kinds of selection, by the name ``explain()`` and the dask layer use
INDEXERS = {"basic": BasicIndexer, "oindex": OrthogonalIndexer, "vindex": VectorizedIndexer}
#: objects handed to the pool at once by a chunk-by-chunk read (bounds what the lazy
#: projections of a huge selection turn into at a time)
DIRECT_BATCH_ITEMS = 4096


# -- outputs ------------------------------------------------------------------------------------
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
            f"array {path or '/'!r}: a selection of shape {shape} holds {count_text(size)} elements of {dtype} "
            f"({count_text(nbytes)} bytes), more than an array in memory can hold; read it in parts "
            "(smaller selections, or Array.to_dask())"
        )
    try:
        return fresh_array(shape, dtype)
    except (MemoryError, ValueError) as error:
        raise SelectionError(
            f"array {path or '/'!r}: cannot allocate {count_text(nbytes)} bytes for a selection of shape {shape} "
            f"and data type {dtype} ({type(error).__name__}: {error}); read it in parts "
            "(smaller selections, or Array.to_dask())"
        ) from None


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


# -- reading ------------------------------------------------------------------------------------
def read_selection(handle: ArrayHandle, selection: Any, kind: str = "basic") -> np.ndarray:
    """``array[selection]`` (``kind``: ``"basic"``, ``"oindex"`` or ``"vindex"``) as a new array."""
    indexer = INDEXERS[kind](selection, handle.shape, handle.io_chunk_shape)
    if kind == "vindex":
        out = allocate_output((math.prod(indexer.shape),), handle.dtype, handle.path)
        return read_into(handle, indexer, out).reshape(indexer.shape)
    return read_into(handle, indexer, allocate_output(indexer.shape, handle.dtype, handle.path))


def read_into(
    handle: ArrayHandle, projections: Iterable[ChunkProjection], out: np.ndarray, fetcher: Fetcher | None = None
) -> np.ndarray:
    """Fill ``out`` from every stored object the projections touch; returns ``out``.

    ``projections`` may be lazy: they are consumed in bounded batches.
    """
    fetcher = fetcher or Fetcher(handle.store, handle.max_object_size)
    if handle.sharding is not None:
        read_shards(handle, projections, out, fetcher)
    else:
        _read_chunks(handle, projections, out, fetcher)
    return out


def _chunk_request(plan: ObjectPlan) -> Request:
    return plan.key, None, CHUNK, (plan.coords,)


def _read_chunks(handle: ArrayHandle, projections: Iterable[ChunkProjection], out: np.ndarray, fetcher: Fetcher) -> None:
    decoder = ChunkDecoder(handle.pipeline, handle.spec, out, handle.fill_value, inner=False,
                           spec_of=None if handle.regular else handle.object_spec)  # fmt: skip
    if handle.store.reads_are_local:
        rows = chunk_table(handle, projections)
        if rows is not None:
            _read_table(handle, rows, projections.nchunks, decoder, fetcher)
            return
    objects = plan_objects(handle, projections)
    if handle.store.reads_are_local and decoder.threaded:
        # small chunks decode on the calling thread (see MIN_THREADED_CHUNK_BYTES): their reads
        # still go to the store as one batch, below
        def read_one(plan: ObjectPlan) -> None:
            raw = fetcher.one(_chunk_request(plan))
            if not fetcher.dry:
                decoder.place(plan.pieces[0][1], plan.key, raw)

        for batch in split_batches(objects, lambda _: 1, DIRECT_BATCH_ITEMS):
            if fetcher.dry:
                for plan in batch:
                    read_one(plan)
            else:
                decoder.run(read_one, batch)
        return
    for batch in batches(handle, objects, out.nbytes):
        requests = [_chunk_request(plan) for plan in batch]
        if not decoder.threaded and not fetcher.dry:
            # small chunks decode on this thread anyway: each as it arrives, while the rest travel
            plans = {plan.key: plan for plan in batch}
            for key, raw in fetcher.arriving(requests):
                decoder.place(plans[key].pieces[0][1], key, raw)
            continue
        blobs = fetcher.objects(requests)
        if not fetcher.dry:
            decoder.run(lambda plan: decoder.place(plan.pieces[0][1], plan.key, blobs.get(plan.key)), batch)


def _read_table(handle: ArrayHandle, rows: Iterator[ChunkRow], count: int, decoder: ChunkDecoder, fetcher: Fetcher) -> None:
    """The chunks of a store whose reads are local, from their table, through ``batch_reader``s:

    * chunks worth the pool: a few runs of rows, each read, decoded and placed by one thread;
    * small chunks whose pipeline decodes many in one call (zstd): one pool thread reads runs of
      up to :data:`PIPELINE_ROWS` files while this thread decodes the run before in one call,
      which lets the reader run meanwhile, and puts it in place;
    * other small chunks: one loop on this thread -- their Python holds the GIL, and a second
      thread would only take it in turns (6,400 zstd chunks of 2.4 KiB: 80 ms on one thread,
      140 ms on two).
    """
    if fetcher.dry:
        for key, coords, _, _ in rows:
            fetcher.one((key, None, CHUNK, (coords,)))
        return
    store, max_size = handle.store, fetcher.max_size

    def run(part: Iterable[ChunkRow]) -> None:
        with store.batch_reader(max_size) as read:
            decoder.put_rows(part, read)

    with fetcher.value_readers() as open_value:
        opened = open_value is not None
    if decoder.threaded and opened:
        # chunks worth the pool, from files opened for range reads: read in ranges with the I/O
        # depth (concurrency.map_io) into scratch bytes, or straight into the output
        for batch in split_batches(rows, lambda _: 1, DIRECT_BATCH_ITEMS):
            map_runs(lambda part: decoder.put_many(_opened_rows(fetcher, part)), batch,
                     caller_works=caller_can_work(decoder.pipeline))  # fmt: skip
    elif decoder.threaded:  # the table in batches: a huge selection's rows are never all in memory
        for batch in split_batches(rows, lambda _: 1, DIRECT_BATCH_ITEMS):
            map_runs(run, batch, caller_works=caller_can_work(decoder.pipeline))
    elif count >= 2 * PIPELINE_ROWS and decoder.decodes_many and call_threads() > 1:
        _read_pipelined(store, max_size, rows, count, decoder)
    else:
        run(rows)


def _opened_rows(fetcher: Fetcher, rows: Iterable[ChunkRow]) -> Iterator[Any]:
    """:meth:`ChunkDecoder.put_many`'s items for ``rows``: each chunk's file opened for range reads
    (a :class:`~zarrx.io.decode.StoredRange` of all of it; None: absent) and closed once the
    decoder asks for the next one."""
    for key, coords, out_selection, chunk_selection in rows:
        with fetcher.value_readers() as open_value:
            value = open_value(key)
            stored = None if value is None else StoredRange(value, 0, value.size)
            yield stored, key, out_selection, chunk_selection, coords


#: files the reader of the small-chunk pipeline hands over at a time (and at most 4 runs ahead)
PIPELINE_ROWS = 256
#: the pipeline's first and last runs: from this many files, doubling up to PIPELINE_ROWS, and halving
#: down to it at the end -- the decoder starts after a short read, the reader idles for a short decode
FIRST_PIPELINE_ROWS = 32


def _read_pipelined(store: Store, max_size: int | None, rows: Iterator[ChunkRow], count: int, decoder: ChunkDecoder) -> None:
    ready: queue.Queue[tuple[list[ChunkRow], list[Any]] | BaseException | None] = queue.Queue(maxsize=4)
    stop = threading.Event()

    def runs() -> Iterator[list[ChunkRow]]:
        taken = 0
        while run := list(itertools.islice(rows, max(FIRST_PIPELINE_ROWS, min(PIPELINE_ROWS, taken, (count - taken) // 2)))):
            taken += len(run)
            yield run

    def read_runs() -> None:
        try:
            with store.batch_reader(max_size) as read:
                for run in runs():
                    if stop.is_set():
                        return
                    ready.put((run, [read(key) for key, _, _, _ in run]))
            ready.put(None)
        except BaseException as error:  # noqa: BLE001 (handed to the decoding thread, which raises it)
            ready.put(error)

    reader = start_beside(read_runs)
    try:
        while (item := ready.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            decoder.put_decoded(*item)
    finally:
        stop.set()
        while not reader.done():  # a reader waiting on a full queue: take its runs until it stops
            with contextlib.suppress(queue.Empty):
                ready.get(timeout=0.01)
