"""Reading sharded arrays: the shards a selection touches, their indexes, their inner chunks.

Two ways, by what the store can do:

* **Opened shards** (stores with ``range_readers``: a local folder). A selection of slices and
  ints is planned per dimension (:func:`zarrx.io.plan.shard_table`: no projection object per
  inner chunk, a shard's index entries looked up in one call). Each shard of a batch is
  opened once; its index is read from the open file and checked against the file's size, and
  each wanted inner chunk becomes a :class:`~zarrx.io.decode.StoredRange` that the thread
  decoding it reads itself, into a buffer it reuses -- reading overlaps decoding, no compressed
  bytes are held for a batch, and the index and inner chunks come from one version of the
  shard, whoever renames another over it, since they are read from one open file.
* **Batched requests** (every other store). Two batched ``get_ranges`` calls per batch of
  shards: the whole object when every inner chunk of it is wanted, else just its index; then
  the merged byte ranges of the wanted, non-empty inner chunks (:func:`zarrx.io.plan.inner_reads`)
  and each of those shards' index once more. A store reads the ranges of one key in a call from
  one version of it (``consistent_ranges``), so an index equal to the first one proves the
  offsets belong to the bytes read with it; a shard replaced between the two calls is read
  again whole.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from zarrx.codecs.sharding import EMPTY
from zarrx.io.decode import ChunkDecoder, Item, StoredRange
from zarrx.io.fetch import INNER_CHUNKS, SHARD, SHARD_INDEX, Fetcher, Request
from zarrx.io.handle import ArrayHandle
from zarrx.io.plan import ObjectPlan, ShardRows, batches, inner_reads, plan_objects, shard_table, split_batches, table_rows
from zarrx.io.selection import ChunkProjection
from zarrx.storage.store import OffsetByteRequest, RangeByteRequest, RangeReader

__all__ = ["read_shards", "OPEN_SHARD_PIECES"]

#: inner chunks an opened-shards batch plans at once; a shard counts as 64 at least, so a batch
#: keeps at most 256 shards open
OPEN_SHARD_PIECES = 16384

#: an index entry's offset and size when the inner chunk is empty
_EMPTY = int(EMPTY)

#: an inner chunk to decode: its bytes (None: fill value), its projection, the shard's key
_Job = tuple[Any, ChunkProjection, str]


#: a shard to read from its open file: key, coordinates in the shard grid, which entries of its
#: index its wanted inner chunks have (a NumPy index into the index's entries, C order), their
#: rows (chunk coordinates, output selection, chunk selection or None: whole) and their number
_Shard = tuple[str, tuple[int, ...], Any, Iterable[tuple[tuple[int, ...], Any, Any]], int]


def read_shards(handle: ArrayHandle, projections: Iterable[ChunkProjection], out: np.ndarray, fetcher: Fetcher) -> None:
    """Fill ``out`` from the shards ``projections`` touch (see the module docstring)."""
    decoder = ChunkDecoder(handle.sharding.codecs, handle.inner_spec, out, handle.fill_value, inner=True)
    with fetcher.value_readers() as open_value:
        opened = open_value is not None
    if opened:
        table = shard_table(handle, projections)
        shards = _table_shards(table) if table is not None else map(
            lambda plan: _plan_shard(plan, decoder), plan_objects(handle, projections))
        for part in split_batches(shards, lambda shard: max(shard[4], 64), OPEN_SHARD_PIECES):
            with fetcher.value_readers() as open_value:
                items = _opened_shard_items(handle, part, fetcher, open_value, decoder)
                if not fetcher.dry:
                    decoder.run_items(items)
        return
    # large reads go in batches of whole shards, so no shard's index is read twice
    for batch in batches(handle, list(plan_objects(handle, projections)), out.nbytes):
        jobs = _read_shard_batch(handle, batch, fetcher)
        if not fetcher.dry:
            decoder.run_items([decoder.item(raw, projection, key) for raw, projection, key in jobs])


def _table_shards(table: Iterator[ShardRows]) -> Iterator[_Shard]:
    for key, coords, per_dimension, local, kept in table:
        rows = ((chunk_coords, outs, selection) for _, chunk_coords, outs, selection in table_rows(per_dimension, kept))
        yield key, coords, _entries_of(local), rows, math.prod(map(len, local))


def _entries_of(local: list[list[int]]) -> Any:
    """The index entries of the product of ``local`` (indexes within the shard per dimension):
    slices where each is a run of consecutive indexes (a slice selection's), else ``np.ix_``."""
    if all(indexes[-1] - indexes[0] == len(indexes) - 1 for indexes in local):
        return tuple(slice(indexes[0], indexes[-1] + 1) for indexes in local)
    return np.ix_(*local)


def _plan_shard(plan: ObjectPlan, decoder: ChunkDecoder) -> _Shard:
    where = tuple(np.array(inner, dtype=np.intp) for inner in zip(*(inner for inner, _ in plan.pieces)))
    rows = ((coords, outs, selection) for _, _, outs, selection, coords in
            (decoder.item(None, projection, plan.key) for _, projection in plan.pieces))  # fmt: skip
    return plan.key, plan.coords, where, rows, len(plan.pieces)


def _opened_shard_items(
    handle: ArrayHandle, part: list[_Shard], fetcher: Fetcher, open_value: Callable[[str], RangeReader | None],
    decoder: ChunkDecoder,
) -> list[Item]:
    """What :meth:`ChunkDecoder.put_many` takes for the inner chunks of ``part``, each shard opened
    and its index read; a wanted inner chunk is a :class:`StoredRange` of its open shard."""
    codec, spec_of, index_ranges = handle.sharding, handle.object_spec, {}
    items: list[Item] = []
    for key, coords, where, rows, _ in part:
        spec = spec_of(coords)
        if spec.shape not in index_ranges:  # one index size per shard shape (one on a regular grid)
            index_ranges[spec.shape] = codec.index_range(spec)
        value, raw = fetcher.shard_index(open_value, (key, index_ranges[spec.shape], SHARD_INDEX, ()))
        if value is None or raw is None:  # absent: all fill value (or a dry run reading no index)
            items.extend((None, key, outs, selection, chunk_coords) for chunk_coords, outs, selection in rows)
            continue
        entries = codec.read_index(raw, spec, key, whole=False, shard_size=value.size).entries
        shard_items = [
            (None if offset == _EMPTY and nbytes == _EMPTY else StoredRange(value, offset, offset + nbytes),
             key, outs, selection, chunk_coords)
            for (offset, nbytes), (chunk_coords, outs, selection) in zip(entries[where].reshape(-1, 2).tolist(), rows)
        ]  # fmt: skip
        if fetcher.dry:
            fetcher.inner_chunks([
                (key, RangeByteRequest(stored.start, stored.end), INNER_CHUNKS, (chunk_coords,))
                for stored, _, _, _, chunk_coords in shard_items if stored is not None
            ])  # fmt: skip
        items.extend(shard_items)
    return items


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
