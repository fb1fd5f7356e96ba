"""Running write plans: encode every touched stored object, read-modify-write the partial ones.

:func:`write_from` writes a value (already of the selection's shape and the array's dtype) into
every stored object a selection touches (:func:`zarrx.io.plan.plan_objects` with ``write=True``):

* an object the selection covers **whole** is encoded from the new values alone, never read;
* a **partial** one is read, decoded, merged and encoded again; for a shard only the touched
  inner chunks are re-encoded and the others keep their stored bytes;
* an object (or inner chunk) that ends up all fill value is deleted (left out of the shard)
  unless ``write_empty_chunks``.

Each object is stored atomically. The partial objects of a batch are locked
(:func:`zarrx.io.locks.object_locks`) from before they are read until they are stored, so
threads of one process (and, for a store of local files, the processes of the machine) writing
parts of one object never drop each other's values; whole objects take no lock. On a store with
conditional writes (S3, GCS, Azure) a partial object is also stored only over the version read,
and read and merged again when another process wrote it first (:func:`_update_conditionally`).
On stores whose writes cost no round trip (``reads_are_local``) every object large enough for
the thread pool is stored by the pool task that encoded it, while its bytes are still in the
core's cache; with ``ZARRX_WRITE_DEPTH`` (:func:`write_depth`) above 1 the task hands the write
to the I/O pool instead
(:func:`zarrx.concurrency.writes_behind`) and encodes the next: that many writes in flight, for
a device that makes writes wait (NFS, a parallel file system), with no more than
:data:`HELD_BYTES_PER_THREAD` of encoded objects per thread waiting (at least one); small chunks of a store of local files go in a few runs, each encoded and written
by one thread in one loop through the store's ``batch_writer`` (partial ones read through its
``batch_reader``). Otherwise objects go out in one batched ``set_many`` per batch of about
:data:`~zarrx.io.plan.MIN_BATCH_BYTES` of input. A batch of fewer shards than threads (a
streaming copy's step, :mod:`zarrx.io.copy`) has each shard's inner chunks encoded on the pool
instead, and each shard stored in one write.
:func:`trim_past_edge` is the read-modify-write of a shrinking ``resize``.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Iterable

import numpy as np

from zarrx.codecs.base import ChunkSpec
from zarrx.codecs.bytes import BytesCodec
from zarrx.codecs.pipeline import CodecPipeline
from zarrx.dtypes.fill import is_all_fill
from zarrx.errors import StoreError
from zarrx.concurrency import call_threads, count_setting, map_io, map_runs, scratch_array, writes_behind
from zarrx.scratch import copy_values
from zarrx.io.decode import caller_can_work, run_maybe_threaded, worth_threads
from zarrx.io.execute import DIRECT_BATCH_ITEMS, as_array_of
from zarrx.io.handle import ArrayHandle
from zarrx.io.locks import object_locks
from zarrx.io.plan import MIN_BATCH_BYTES, ObjectPlan, decoded_nbytes, plan_objects, split_batches
from zarrx.io.selection import BasicIndexer, ChunkProjection
from zarrx.storage.metadata_updates import update_conditionally
from zarrx.storage.store import bounded_get_many

__all__ = ["write_from", "write_selection", "trim_past_edge", "write_depth", "HELD_BYTES_PER_THREAD"]

#: bytes of encoded objects per thread of the pool handed to the I/O pool and not written yet
#: (local stores): many small objects in flight, one 32 MiB chunk per thread (a few more held
#: 32 MiB buffers measured slower on a cold copy here: fresh memory is what writes cost most)
HELD_BYTES_PER_THREAD = 32 << 20


def write_depth() -> int:
    """Writes of one call kept in flight on a local store (``ZARRX_WRITE_DEPTH``; default 1: each
    object stored by the thread that encoded it). On the page cache of the machine measured,
    more in flight gained nothing on a cold copy and cost 10-30% on a warm write (the encoded
    bytes leave the core's cache before they are written); a device that makes writes wait
    (NFS, a parallel file system) gains from 8 or 16.

    Examples
    --------
    >>> import os
    >>> os.environ["ZARRX_WRITE_DEPTH"] = "16"
    >>> write_depth()
    16
    >>> del os.environ["ZARRX_WRITE_DEPTH"]
    >>> write_depth()
    1
    """
    return count_setting("ZARRX_WRITE_DEPTH", 1, "writes in flight")


def write_selection(handle: ArrayHandle, selection: Any, value: Any) -> None:
    """``array[selection] = value`` for a basic selection (what a dask write task does)."""
    indexer = BasicIndexer(selection, handle.shape, handle.io_chunk_shape)
    write_from(handle, indexer, as_array_of(value, handle.dtype, indexer.shape))


def write_from(handle: ArrayHandle, projections: Iterable[ChunkProjection], value: np.ndarray) -> None:
    """Write ``value`` (of the selection's shape and the array's dtype) object by object."""
    # objects big enough for the pool go to a local store from the task that encoded them;
    # small ones in batches (one dict update, or files written concurrently by the store)
    direct = handle.store.reads_are_local and worth_threads(handle.spec)
    if handle.sharding is None and handle.store.reads_are_local and not handle.store.process_local and not direct:
        for batch in split_batches(plan_objects(handle, projections, write=True), lambda _: 1, DIRECT_BATCH_ITEMS):
            _write_in_loops(handle, batch, value)
        return
    if handle.sharding is not None:
        limit = DIRECT_BATCH_ITEMS if direct else 1 << 62  # shards are grouped whole, in one batch
        build = _build_shard
        objects: Iterable[ObjectPlan] = list(plan_objects(handle, projections, write=True))
    else:
        limit = DIRECT_BATCH_ITEMS if direct else max(1, MIN_BATCH_BYTES // max(1, decoded_nbytes(handle.spec)))
        build = _build_chunk
        objects = plan_objects(handle, projections, write=True)
    for batch in split_batches(objects, lambda _: 1, limit):
        _write_batch(handle, batch, value, build, direct)


def _write_batch(handle: ArrayHandle, batch: list[ObjectPlan], value: np.ndarray, build: Any, direct: bool) -> None:
    partial = [plan.key for plan in batch if not plan.whole]
    with _locked(handle, partial):
        _store_batch(handle, batch, value, build, direct, partial)


def _locked(handle: ArrayHandle, partial: list[str]) -> Any:
    """The locks of the ``partial`` objects, held while each is read, merged and stored (or
    deleted); nothing to hold for whole objects."""
    return object_locks(handle.store, partial) if partial else contextlib.nullcontext()


def _store_batch(handle: ArrayHandle, batch: list[ObjectPlan], value: np.ndarray, build: Any, direct: bool,
                 partial: list[str]) -> None:  # fmt: skip
    store = handle.store
    if partial and _conditional(store):
        whole = [plan for plan in batch if plan.whole]
        if whole:
            _store_batch(handle, whole, value, build, direct, [])
        map_io(functools.partial(_update_conditionally, handle, value, build), [p for p in batch if not p.whole])
        return
    existing = bounded_get_many(store, partial, handle.max_object_size) if partial else {}
    # with a write depth, a local store's writes go behind the encoding (done when the block ends)
    held = HELD_BYTES_PER_THREAD * call_threads()
    depth = write_depth()
    # stored by the thread that built it, before it builds the next: scratch memory may hold it
    at_once = {"stored_at_once": True} if direct and depth == 1 and build is _build_chunk else {}
    with writes_behind(held, depth) if direct else contextlib.nullcontext(None) as write:

        def encode_one(plan: ObjectPlan) -> tuple[str, bytes | None]:
            encoded = build(handle, plan, value, existing.get(plan.key), **at_once)
            if encoded is not None and direct:
                write(functools.partial(store.set, plan.key, encoded), memoryview(encoded).nbytes)
                return plan.key, b""
            return plan.key, encoded

        if build is _build_shard and len(batch) < call_threads():
            # fewer shards than threads (a streaming copy writes one at a time): the shards one
            # after the other, each one's inner chunks encoded on the pool, each written once
            build = functools.partial(_build_shard, inner_threads=True)
            results = [encode_one(plan) for plan in batch]
        else:
            results = run_maybe_threaded(encode_one, batch, worth_threads(handle.spec), handle.pipeline)
    if not direct:
        to_store = {key: data for key, data in results if data is not None}
        if to_store:
            store.set_many(to_store)
    to_delete = [key for key, data in results if data is None]
    if to_delete:
        store.delete_many(to_delete)


def _conditional(store: Any) -> bool:
    """Whether partial objects of ``store`` are stored only over the version read: other processes
    may write them (its values are not this process's own), it locks nothing for them, and it
    has conditional writes (S3, GCS and Azure)."""
    return store.conditional_writes and not store.locks_objects and not store.process_local


def _update_conditionally(handle: ArrayHandle, value: np.ndarray, build: Any, plan: ObjectPlan) -> None:
    """Store the partial object ``plan`` over the version read only (:func:`update_conditionally`:
    read with its version, merged, written if still that version, else again). An object left
    all fill value is written as one (S3 has no conditional delete); one absent stays absent."""

    def merged(old: bytes | None) -> bytes | None:
        if old is not None and handle.max_object_size is not None and len(old) > handle.max_object_size:
            raise StoreError(f"{plan.key}: {len(old)} bytes stored, more than its {handle.max_object_size} may be")
        encoded = build(handle, plan, value, old)
        if encoded is None and old is not None:
            encoded = _encoded_fill(handle, plan)
        return None if encoded is None else bytes(encoded)

    update_conditionally(handle.store, plan.key, merged)


def _encoded_fill(handle: ArrayHandle, plan: ObjectPlan) -> bytes:
    """The object ``plan`` all fill value, encoded (a shard: one of no inner chunks)."""
    spec = handle.object_spec(plan.coords)
    if handle.sharding is not None:
        return handle.sharding.assemble({}, spec)
    return handle.pipeline.encode(np.full(spec.shape, handle.fill_value, dtype=spec.dtype), spec, key=plan.key)


def _write_in_loops(handle: ArrayHandle, batch: list[ObjectPlan], value: np.ndarray) -> None:
    """Small chunks of a store of local files: a few runs of the batch, each encoded and written
    (or read, merged and written) by one thread; chunks left all fill value deleted at the end."""
    store = handle.store

    def run(part: list[ObjectPlan]) -> list[str]:
        empty = []
        with store.batch_reader(handle.max_object_size) as read, store.batch_writer() as write:
            for plan in part:
                encoded = _build_chunk(handle, plan, value, None if plan.whole else read(plan.key), stored_at_once=True)
                if encoded is None:
                    empty.append(plan.key)
                else:
                    write(plan.key, encoded)
        return empty

    with _locked(handle, [plan.key for plan in batch if not plan.whole]):
        to_delete = [key for empty in map_runs(run, batch, caller_works=caller_can_work(handle.pipeline)) for key in empty]
        if to_delete:
            store.delete_many(to_delete)


def _merged(chunk_shape: tuple[int, ...], full_size: bool, projection: ChunkProjection, new_data: np.ndarray,
            old: Any, decode: Any, fill_value: Any, dtype: np.dtype) -> np.ndarray:
    """The chunk after writing ``new_data`` at ``projection``: the new values alone when they cover
    a full-size chunk, else merged into the old chunk (or the fill value when there is none)."""
    if projection.is_complete_chunk and full_size:
        return np.asarray(new_data)  # codecs take any layout; the serializer copies as it must
    chunk = np.full(chunk_shape, fill_value, dtype=dtype) if old is None else np.array(decode(old), copy=True)
    chunk[projection.chunk_selection] = new_data
    return chunk


def _build_chunk(handle: ArrayHandle, plan: ObjectPlan, value: np.ndarray, old: Any, stored_at_once: bool = False) -> bytes | None:
    """The encoded chunk (None: all fill value, to delete); ``stored_at_once``: the caller stores
    it before this thread builds another, so an uncompressed strided chunk may be gathered into
    the thread's scratch buffer rather than fresh memory (whose first touch costs more than the copy)."""
    projection = plan.pieces[0][1]
    spec, pipeline = handle.object_spec(plan.coords), handle.pipeline
    region = handle.object_region(plan.coords)
    full_size = all(r.stop == size for r, size in zip(region, spec.shape))
    chunk = _merged(spec.shape, full_size, projection, value[projection.out_selection], old,
                    lambda raw: pipeline.decode(raw, spec, key=plan.key), handle.fill_value, spec.dtype)  # fmt: skip
    chunk = _gathered(pipeline, spec, chunk)
    if not handle.write_empty_chunks and is_all_fill(chunk, handle.fill_value):
        return None
    if chunk.dtype == spec.dtype and _stored_as_is(pipeline, spec):
        # an uncompressed chunk in memory order: stored from its own bytes (gathered once when it
        # is a strided piece), not copied into new bytes again (stores copy what they keep; local
        # files are written from it)
        if stored_at_once and not chunk.flags.c_contiguous:
            chunk = _into_scratch(spec, chunk)
        return memoryview(np.ascontiguousarray(chunk).reshape(-1).view(np.uint8))
    return pipeline.encode(chunk, spec, key=plan.key)


def _stored_as_is(pipeline: CodecPipeline, spec: ChunkSpec) -> bool:
    """Whether a chunk of ``spec`` is stored as its bytes in memory: the ``bytes`` codec alone, in
    native order (what :meth:`~zarrx.codecs.pipeline.CodecPipeline.encode` would copy out)."""
    codec = pipeline.array_bytes
    return (not pipeline.array_array and not pipeline.bytes_bytes and type(codec) is BytesCodec
            and spec.nbytes is not None and not spec.dtype.hasobject and codec.stores_memory_layout(spec))  # fmt: skip


def _build_shard(handle: ArrayHandle, plan: ObjectPlan, value: np.ndarray, old: Any, inner_threads: bool = False) -> bytes | None:
    """The assembled shard: untouched inner chunks keep their stored bytes (None: nothing left);
    ``inner_threads``: its inner chunks encoded on the pool."""
    codec, spec, inner_spec = handle.sharding, handle.object_spec(plan.coords), handle.inner_spec
    encoded: dict[tuple[int, ...], Any] = {}
    if old is not None:
        index = codec.read_index(old, spec, plan.key, whole=True)
        view = memoryview(old)
        encoded = {inner: view[start:end] for inner, start, end in index.stored()}

    def encode_piece(piece: tuple[tuple[int, ...], ChunkProjection]) -> bytes | None:
        inner, projection = piece
        name = f"{plan.key} inner chunk {projection.chunk_coords}"
        full_size = all(
            (index + 1) * size <= length
            for index, size, length in zip(projection.chunk_coords, codec.chunk_shape, handle.shape)
        )
        chunk = _merged(codec.chunk_shape, full_size, projection, value[projection.out_selection], encoded.get(inner),
                        lambda raw: codec.codecs.decode(raw, inner_spec, key=name), handle.fill_value, spec.dtype)  # fmt: skip
        chunk = _gathered(codec.codecs, inner_spec, chunk)
        if not handle.write_empty_chunks and is_all_fill(chunk, handle.fill_value):
            return None
        return codec.codecs.encode(chunk, inner_spec, key=plan.key)

    threaded = inner_threads and worth_threads(inner_spec)
    for (inner, _), data in zip(plan.pieces, run_maybe_threaded(encode_piece, plan.pieces, threaded, codec.codecs)):
        if data is None:
            encoded.pop(inner, None)
        else:
            encoded[inner] = data
    return codec.assemble(encoded, spec) if encoded else None


def _gathered(pipeline: CodecPipeline, spec: ChunkSpec, chunk: np.ndarray) -> np.ndarray:
    """``chunk``, gathered into the thread's scratch buffer when it is a strided piece its one
    compressor would read from contiguous memory: checked for fill and encoded from there, never
    from a fresh copy (a fresh copy per 64 KiB inner chunk and a fill check of the strided piece
    cost 20 us more each). The result is only valid until this thread's next chunk."""
    if chunk.flags.c_contiguous or chunk.dtype != spec.dtype or not pipeline.decodes_into(spec):
        return chunk
    return _into_scratch(spec, chunk)


def _into_scratch(spec: ChunkSpec, chunk: np.ndarray) -> np.ndarray:
    """``chunk`` copied into this thread's scratch buffer (valid until the thread's next chunk)."""
    gathered = scratch_array(spec.shape, spec.dtype)
    copy_values(gathered, chunk)
    return gathered


def trim_past_edge(handle: ArrayHandle, chunk_coords: list[tuple[int, ...]]) -> tuple[dict[str, bytes], list[str]]:
    """Each stored object at ``chunk_coords`` reset to the fill value past the edge of
    ``handle``'s (new) shape: ``(encoded objects, keys of objects now all fill value)``.

    Nothing is written: a shrinking resize prepares these before it changes the shape.
    """
    pipeline = handle.pipeline
    keys = [handle.object_key(coords) for coords in chunk_coords]
    stored = bounded_get_many(handle.store, keys, handle.max_object_size)
    updates, deletes = {}, []
    for coords, key in zip(chunk_coords, keys):
        raw = stored.get(key)
        if raw is None:
            continue
        spec = handle.object_spec(coords)
        chunk = pipeline.decode(raw, spec, key=key)
        keep = handle.object_region(coords)
        trimmed = np.full(spec.shape, handle.fill_value, dtype=spec.dtype)
        trimmed[keep] = chunk[keep]
        if not handle.write_empty_chunks and is_all_fill(trimmed, handle.fill_value):
            deletes.append(key)
        else:
            updates[key] = pipeline.encode(trimmed, spec, key=key)
    return updates, deletes
