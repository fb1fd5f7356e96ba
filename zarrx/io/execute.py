"""Running read plans against a store: batched fetches, decoding into the output.

:func:`read_into` fills an output array from every stored object a selection touches
(:func:`zarrx.io.plan.plan_objects`); absent objects and empty inner chunks become the fill
value. How it fetches:

* **Chunks.** On stores whose reads cost no round trip (``store.reads_are_local``: a folder, a
  dict) large chunks are read, decoded and copied one per pool task -- no batch of compressed
  bytes held, no barrier between reading and decoding. Otherwise the chunks come in batched
  ``get_many`` calls of about a tenth of the output (:func:`zarrx.io.plan.batches`), then are
  decoded on the pool; small chunks (decoded on the calling thread anyway) come through
  ``iter_many`` and are decoded as they arrive, while the rest of the batch is in flight.
* **Shards** read in parts take two batched ``get_ranges`` calls per batch of shards: the whole
  object when every inner chunk of it is wanted, else just its index; then the merged byte
  ranges of the wanted, non-empty inner chunks (:func:`zarrx.io.plan.inner_reads`) and each of
  those shards' index once more. A store reads the ranges of one key in a call from one version
  of it (``consistent_ranges``), so an index equal to the first one proves the offsets belong to
  the bytes read with it; a shard replaced between the two calls is read again whole.

Every request goes through a :class:`Fetcher`. :class:`Trace` is the fetcher of ``explain()``: it
records the requests, batch by batch, and reads only what planning needs (the indexes of
partially read shards), so what ``explain()`` shows is what this module does.
"""

from __future__ import annotations

import contextlib
import math
import queue
import sys
import threading
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from zarrx.errors import ChunkEncodeError, SelectionError
from zarrx.concurrency import in_pool, map_runs, pool_size, start_beside
from zarrx.io.decode import ChunkDecoder, caller_can_work
from zarrx.io.handle import ArrayHandle
from zarrx.io.plan import ChunkRow, ObjectPlan, batches, chunk_table, inner_reads, plan_objects, split_batches
from zarrx.io.selection import BasicIndexer, ChunkProjection, OrthogonalIndexer, VectorizedIndexer
from zarrx.sizes import count_text
from zarrx.storage.store import (
    ByteRequest, OffsetByteRequest, RangeByteRequest, Store, SuffixByteRequest, bounded_get_many, bounded_get_ranges,
)

__all__ = [
    "INDEXERS", "Fetcher", "Trace", "PlannedRequest", "read_into", "read_selection", "allocate_output",
    "as_array_of", "CHUNK", "SHARD", "SHARD_INDEX", "INNER_CHUNKS", "DIRECT_BATCH_ITEMS",
]  # fmt: skip

#: the kinds of selection, by the name ``explain()`` and the dask layer use
INDEXERS = {"basic": BasicIndexer, "oindex": OrthogonalIndexer, "vindex": VectorizedIndexer}
#: what a request fetches
CHUNK, SHARD, SHARD_INDEX, INNER_CHUNKS = "chunk", "shard", "shard index", "inner chunks"
#: objects handed to the pool at once by a chunk-by-chunk read (bounds what the lazy
#: projections of a huge selection turn into at a time)
DIRECT_BATCH_ITEMS = 4096


# -- the requests ------------------------------------------------------------------------------
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


#: (key, byte range or None for the whole object, kind, chunks served)
Request = tuple[str, "ByteRequest | None", str, tuple[tuple[int, ...], ...]]


class Fetcher:
    """How the executor asks a store for bytes: one method call per batch (round trip).

    ``max_size`` is the most bytes a stored object may hold (``ArrayHandle.max_object_size``):
    the store refuses a larger value rather than read it.
    """

    #: a dry run decodes nothing (explain)
    dry = False

    def __init__(self, store: Store, max_size: int | None = None) -> None:
        self.store = store
        self.max_size = max_size

    def objects(self, requests: Sequence[Request]) -> dict[str, bytes | None]:
        """Whole objects, one ``get_many``; missing ones map to None."""
        keys = list(dict.fromkeys(key for key, _, _, _ in requests))
        return bounded_get_many(self.store, keys, self.max_size)

    def arriving(self, requests: Sequence[Request]) -> Iterable[tuple[str, bytes | None]]:
        """Whole objects as they arrive (one ``iter_many``, the batch of :meth:`objects`)."""
        keys = list(dict.fromkeys(key for key, _, _, _ in requests))
        return self.store.iter_many(keys, max_size=self.max_size)

    def ranges(self, requests: Sequence[Request]) -> list[bytes | None]:
        """Byte ranges (whole objects as ``OffsetByteRequest(0)``), one ``get_ranges``."""
        ranges = [(key, byte_range or OffsetByteRequest(0)) for key, byte_range, _, _ in requests]
        return bounded_get_ranges(self.store, ranges, self.max_size)

    def one(self, request: Request) -> bytes | None:
        """A whole object, one ``get`` (from a pool task)."""
        return self.store.get(request[0])


class Trace(Fetcher):
    """The fetcher of ``explain()``: records every request by batch, fetches nothing but shard
    indexes (and those only with ``read_index``), decodes nothing."""

    dry = True

    def __init__(self, store: Store, read_index: bool = True) -> None:
        super().__init__(store)
        self.read_index = read_index
        self.requests: list[PlannedRequest] = []
        self.batches = 0
        #: index ranges read for planning
        self.index_requests = 0
        #: False when partial shards' inner chunks were not planned (``read_index=False``)
        self.exact = True

    def _record(self, requests: Sequence[Request]) -> None:
        self.requests.extend(
            PlannedRequest(self.batches, key, byte_range, kind, tuple(dict.fromkeys(chunks)))
            for key, byte_range, kind, chunks in requests
        )
        self.batches += 1

    def objects(self, requests: Sequence[Request]) -> dict[str, bytes | None]:
        self._record(_merge_by_key(requests))
        return {}

    def ranges(self, requests: Sequence[Request]) -> list[bytes | None]:
        self._record(requests)
        results: list[bytes | None] = [None] * len(requests)
        if any(kind == INNER_CHUNKS for _, _, kind, _ in requests):
            return results  # a shard read's second call: the indexes it holds are only re-checks
        indexes = [position for position, (_, _, kind, _) in enumerate(requests) if kind == SHARD_INDEX]
        if not indexes:
            return results
        if not self.read_index:
            self.exact = False  # the inner chunks of these shards cannot be planned
            return results
        found = self.store.get_ranges([(requests[p][0], requests[p][1]) for p in indexes])
        self.index_requests += len(indexes)
        for position, raw in zip(indexes, found):
            results[position] = raw
        return results

    def one(self, request: Request) -> bytes | None:
        self._record([request])
        return None


def _merge_by_key(requests: Sequence[Request]) -> list[Request]:
    """One request per distinct key, serving the chunks of all of them (a batch's ``get_many``)."""
    merged: dict[str, Request] = {}
    for key, byte_range, kind, chunks in requests:
        if key in merged:
            merged[key] = (key, byte_range, kind, merged[key][3] + chunks)
        else:
            merged[key] = (key, byte_range, kind, chunks)
    return list(merged.values())


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
        return np.empty(shape, dtype=dtype)
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
        _read_shards(handle, projections, out, fetcher)
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
      :data:`PIPELINE_ROWS` files while this thread decodes the run before in one call, which
      lets the reader run meanwhile, and puts it in place;
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

    if decoder.threaded:  # the table in batches: a huge selection's rows are never all in memory
        for batch in split_batches(rows, lambda _: 1, DIRECT_BATCH_ITEMS):
            map_runs(run, batch, caller_works=caller_can_work(decoder.pipeline))
    elif count >= 2 * PIPELINE_ROWS and decoder.decodes_many and pool_size() > 1 and not in_pool():
        _read_pipelined(store, max_size, rows, decoder)
    else:
        run(rows)


#: files the reader of the small-chunk pipeline hands over at a time (and at most 4 runs ahead)
PIPELINE_ROWS = 256


def _read_pipelined(store: Store, max_size: int | None, rows: Iterator[ChunkRow], decoder: ChunkDecoder) -> None:
    ready: queue.Queue[tuple[list[ChunkRow], list[Any]] | BaseException | None] = queue.Queue(maxsize=4)
    stop = threading.Event()

    def read_runs() -> None:
        try:
            with store.batch_reader(max_size) as read:
                for run in split_batches(rows, lambda _: 1, PIPELINE_ROWS):
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


#: an inner chunk to decode: its bytes (None: fill value), its projection, the shard's key
_Job = tuple[Any, ChunkProjection, str]


def _read_shards(handle: ArrayHandle, projections: Iterable[ChunkProjection], out: np.ndarray, fetcher: Fetcher) -> None:
    decoder = ChunkDecoder(handle.sharding.codecs, handle.inner_spec, out, handle.fill_value, inner=True)
    # large reads go in batches of whole shards, so no shard's index is read twice
    for batch in batches(handle, list(plan_objects(handle, projections)), out.nbytes):
        jobs = _read_shard_batch(handle, batch, fetcher)
        if not fetcher.dry:
            decoder.run_items([decoder.item(raw, projection, key) for raw, projection, key in jobs])


def _read_shard_batch(handle: ArrayHandle, batch: list[ObjectPlan], fetcher: Fetcher) -> list[_Job]:
    codec = handle.sharding
    spec_of, index_ranges = handle.object_spec, {}
    for plan in batch:  # one index size per shard shape (one shape on a regular grid)
        spec = spec_of(plan.coords)
        if spec.shape not in index_ranges:
            index_ranges[spec.shape] = codec.index_range(spec)
    first = fetcher.ranges([
        (plan.key, OffsetByteRequest(0), SHARD, tuple(p.chunk_coords for _, p in plan.pieces)) if plan.whole
        else (plan.key, index_ranges[spec_of(plan.coords).shape], SHARD_INDEX, ())
        for plan in batch
    ])  # fmt: skip
    jobs: list[_Job] = []
    partial: list[tuple[ObjectPlan, Any, list]] = []  # (plan, index bytes, its range reads)
    for plan, raw in zip(batch, first):
        if raw is None:  # absent: all fill value (a dry run fetched nothing)
            jobs.extend((None, projection, plan.key) for _, projection in plan.pieces)
        elif plan.whole:
            jobs.extend(_whole_shard_jobs(handle, plan, raw))
        else:
            reads, fills = inner_reads(plan, codec.read_index(raw, spec_of(plan.coords), plan.key, whole=False))
            jobs.extend((None, projection, plan.key) for projection in fills)
            if reads:
                partial.append((plan, raw, reads))
    if not partial:
        return jobs
    # the inner chunks, and each shard's index again (see the module docstring)
    requests: list[Request] = []
    for plan, _, reads in partial:
        requests.append((plan.key, index_ranges[spec_of(plan.coords).shape], SHARD_INDEX, ()))
        requests.extend((read.key, read.byte_range, INNER_CHUNKS, tuple(p.chunk_coords for _, _, p in read.members)) for read in reads)
    second = iter(fetcher.ranges(requests))
    changed: list[ObjectPlan] = []
    for plan, first_index, reads in partial:
        index_again = next(second)
        pieces = [next(second) for _ in reads]
        if fetcher.dry:
            continue
        if index_again is None or bytes(index_again) != bytes(first_index):
            changed.append(plan)  # replaced between the two calls: read it again, whole
            continue
        for read, raw in zip(reads, pieces):
            view = memoryview(raw if raw is not None else b"")
            base = read.byte_range.start
            jobs.extend((view[start - base : end - base], projection, read.key) for start, end, projection in read.members)
    if changed:
        again = fetcher.ranges([(plan.key, OffsetByteRequest(0), SHARD, ()) for plan in changed])
        for plan, raw in zip(changed, again):
            if raw is None:
                jobs.extend((None, projection, plan.key) for _, projection in plan.pieces)
            else:
                jobs.extend(_whole_shard_jobs(handle, plan, raw))
    return jobs


def _whole_shard_jobs(handle: ArrayHandle, plan: ObjectPlan, raw: Any) -> list[_Job]:
    """The wanted inner chunks of the complete shard ``raw``."""
    index = handle.sharding.read_index(raw, handle.object_spec(plan.coords), plan.key, whole=True)
    return [(index.cut(raw, inner), projection, plan.key) for inner, projection in plan.pieces]
