"""Reading sharded arrays: the shards a selection touches, their indexes, their inner chunks.

Two ways, by what the store can do:

* **Opened shards** (stores with ``range_readers``: a local folder). A selection of slices and
  ints is planned per dimension (:func:`zarrx.io.plan.shard_table`: no projection object per
  inner chunk, a shard's index entries looked up in one call). Each shard of a batch is
  opened once; its index is read from the open file and checked against the file's size, and
  the wanted inner chunks are read from the open file -- so the index and inner chunks come from
  one version of the shard, whoever renames another over it. Neighbouring wanted inner chunks
  (gaps up to :data:`~zarrx.io.byte_ranges.DEFAULT_MAX_GAP`) go in **parts** of up to
  :data:`~zarrx.storage.local.IO_RANGE_BYTES` read ahead on the I/O pool, a bounded number at
  a time, and decoded from memory (:mod:`zarrx.io.spans`): many reads in flight on cold
  storage. A read of less than :data:`MIN_READ_IN_PARTS` decoded, a shard wanting less than
  :data:`MIN_SPAN_BYTES`, and arrays whose inner chunks are stored as they are in memory (read
  straight into the output) read each inner chunk on the thread decoding it (a
  :class:`~zarrx.io.decode.StoredRange`).
* **Batched requests** (every other store). Two batched ``get_ranges`` calls per batch of
  shards: the whole object when every inner chunk of it is wanted, else just its index; then
  the merged byte ranges of the wanted, non-empty inner chunks (:func:`zarrx.io.plan.inner_reads`)
  and each of those shards' index once more. A store reads the ranges of one key in a call from
  one version of it (``consistent_ranges``), so an index equal to the first one proves the
  offsets belong to the bytes read with it; a shard replaced between the two calls is read
  again whole.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from zarrx.codecs.sharding import EMPTY
from zarrx.concurrency import call_io_depth, map_io, start_io
from zarrx.io.byte_ranges import coalesce
from zarrx.io.decode import ChunkDecoder, Item, StoredRange
from zarrx.io.fetch import INNER_CHUNKS, SHARD, SHARD_INDEX, Fetcher, Request
from zarrx.io.handle import ArrayHandle
from zarrx.io.plan import ObjectPlan, ShardRows, batches, decoded_nbytes, inner_reads, plan_objects, shard_table, split_batches, table_rows
from zarrx.io.selection import ChunkProjection
from zarrx.io.spans import SpanPiece, SpanReads
from zarrx.storage.local import IO_RANGE_BYTES
from zarrx.storage.store import OffsetByteRequest, RangeByteRequest, RangeReader

__all__ = ["read_shards", "OPEN_SHARD_PIECES", "MIN_SPAN_BYTES", "MIN_READ_IN_PARTS"]

#: inner chunks an opened-shards batch plans at once; a shard counts as 64 at least, so a batch
#: keeps at most 256 shards open
OPEN_SHARD_PIECES = 16384

#: a shard's wanted inner chunks are read in parts ahead of the decoders from this many bytes
#: (fewer: each read by the thread decoding it, no hand-off to the I/O pool)
MIN_SPAN_BYTES = 256 * 1024
#: reads of fewer decoded bytes read no parts: each inner chunk read by its decoding thread has
#: no hand-off to wait for (warm: 86-91 ms instead of 79 ms for benchmarks/bench_suite.py's case d,
#: 30 regions of 2 MiB, when their inner chunks went in parts)
MIN_READ_IN_PARTS = 8 * 2**20
#: a shard's wanted inner chunks are read in at least this many parts (each of MIN_SPAN_BYTES or more)
PARTS_PER_SHARD = 4
#: inner chunks a decoding thread takes at once, in order, when they are read in parts
IN_ORDER_RUN = 32
#: shards from this many on have their indexes read on the I/O pool, many in flight
PARALLEL_INDEXES = 8
#: inner chunks planned at once (see _read_opened)
PLAN_AHEAD_PIECES = 2048

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
        inner_bytes = decoded_nbytes(handle.inner_spec)
        for part in split_batches(shards, lambda shard: max(shard[4], 64), OPEN_SHARD_PIECES):
            # in parts: a large read of inner chunks not stored as they are in memory (those are
            # read straight into the output), with reads to keep in flight (not in a dask task given
            # one thread: there the kernel's read-ahead of its inner chunk reads overlaps decoding,
            # a part read by the decoding thread would not -- dask read all, 3.1 s, was 4.1 s in parts)
            in_parts = (not decoder.read_into_out and call_io_depth() > 1
                        and sum(shard[4] for shard in part) * inner_bytes >= MIN_READ_IN_PARTS)  # fmt: skip
            with fetcher.value_readers() as open_value:
                _read_opened(handle, part, fetcher, open_value, decoder, in_parts)
        return
    # large reads go in batches of whole shards, so no shard's index is read twice
    for batch in batches(handle, list(plan_objects(handle, projections)), out.nbytes):
        jobs = _read_shard_batch(handle, batch, fetcher)
        if not fetcher.dry:
            decoder.run_items([decoder.item(raw, projection, key) for raw, projection, key in jobs])


def _read_opened(handle: ArrayHandle, part: list[_Shard], fetcher: Fetcher, open_value: Callable[[str], RangeReader | None],
                 decoder: ChunkDecoder, in_parts: bool) -> None:  # fmt: skip
    """Read the shards of ``part`` (one batch) from their open files: planned in groups of about
    :data:`PLAN_AHEAD_PIECES` inner chunks, the next group planned on the I/O pool (its shards
    opened, their indexes read, their parts started) while the decoders decode the one before.
    A read in parts plans its first shard alone: the decoders start on it while the rest of its
    group is planned (planning a first group of four shards took 15-35 ms of a 1 GiB read, cold
    or warm, with no decoding begun)."""
    spans = SpanReads() if in_parts and not fetcher.dry else None
    groups = list(split_batches(part, lambda shard: shard[4], PLAN_AHEAD_PIECES))
    if spans is not None and len(groups[0]) > 1:
        groups[:1] = [groups[0][:1], groups[0][1:]]
    plan = functools.partial(_opened_shard_items, handle, fetcher=fetcher, open_value=open_value, decoder=decoder,
                             in_parts=in_parts, spans=spans)  # fmt: skip
    ahead = not fetcher.dry and len(groups) > 1 and call_io_depth() > 1
    pending = start_io(plan, groups[0]) if ahead else None
    try:
        for position, group in enumerate(groups):
            if pending is None:
                items = plan(group)
            else:
                items = pending.result()
                pending = start_io(plan, groups[position + 1]) if position + 1 < len(groups) else None
            if not fetcher.dry:
                decoder.run_items(items, in_order=IN_ORDER_RUN if spans is not None and spans.parts else None)
    finally:
        if pending is not None and not pending.cancel():
            pending.exception()  # (its error, if any, is not this read's first)
        if spans is not None:
            spans.close()  # before the files its reads use are closed


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
    handle: ArrayHandle, part: list[_Shard], *, fetcher: Fetcher, open_value: Callable[[str], RangeReader | None],
    decoder: ChunkDecoder, in_parts: bool, spans: SpanReads | None,
) -> list[Item]:
    """What :meth:`ChunkDecoder.put_many` takes for the inner chunks of ``part``, each shard opened
    and its index read; a wanted inner chunk is a :class:`SpanPiece` of a part read ahead
    (``in_parts``; registered with ``spans``) or a :class:`StoredRange` of its open shard."""
    codec, spec_of, index_ranges = handle.sharding, handle.object_spec, {}
    specs = [spec_of(coords) for _, coords, _, _, _ in part]
    for spec in specs:  # one index size per shard shape (one on a regular grid)
        if spec.shape not in index_ranges:
            index_ranges[spec.shape] = codec.index_range(spec)
    requests = [(shard[0], index_ranges[spec.shape], SHARD_INDEX, ()) for shard, spec in zip(part, specs)]
    read_index = functools.partial(fetcher.shard_index, open_value)
    # many shards opened and their indexes read on the I/O pool (many small reads in flight on
    # cold storage), but not in a dry run, which records them in order
    parallel = len(requests) >= PARALLEL_INDEXES and not fetcher.dry
    indexes = map_io(read_index, requests) if parallel else map(read_index, requests)
    items: list[Item] = []
    for (key, coords, where, rows, _), spec, (value, raw) in zip(part, specs, indexes):
        if value is None or raw is None:  # absent: all fill value (or a dry run reading no index)
            items.extend((None, key, outs, selection, chunk_coords) for chunk_coords, outs, selection in rows)
            continue
        entries = codec.read_index(raw, spec, key, whole=False, shard_size=value.size).entries[where].reshape(-1, 2)
        located = entries.tolist()
        stored: list[Any] = [None if offset == _EMPTY and nbytes == _EMPTY else StoredRange(value, offset, offset + nbytes)
                             for offset, nbytes in located]  # fmt: skip
        parts = _parts(entries, located) if in_parts else []
        if spans is not None:
            for start, end, members in parts:
                span = spans.part(value, start, end, len(members))
                for member in members:
                    stored[member] = SpanPiece(span, stored[member].start, stored[member].end)
        shard_items = [(raw, key, outs, selection, chunk_coords) for raw, (chunk_coords, outs, selection) in zip(stored, rows)]
        if fetcher.dry:
            in_a_part = {member for _, _, members in parts for member in members}
            fetcher.inner_chunks([
                *((key, RangeByteRequest(start, end), INNER_CHUNKS, tuple(shard_items[m][4] for m in members))
                  for start, end, members in parts),
                *((key, RangeByteRequest(raw.start, raw.end), INNER_CHUNKS, (chunk_coords,))
                  for position, (raw, _, _, _, chunk_coords) in enumerate(shard_items)
                  if raw is not None and position not in in_a_part),
            ])  # fmt: skip
        items.extend(shard_items)
    return items


def _parts(entries: np.ndarray, located: list[list[int]]) -> list[tuple[int, int, list[int]]]:
    """The parts a shard's wanted inner chunks are read in (``entries``: their index entries, as
    ``located`` too): ``(start, end, positions of its inner chunks)`` each; none when they hold
    fewer than :data:`MIN_SPAN_BYTES` together.

    Neighbours (gaps up to :data:`~zarrx.io.byte_ranges.DEFAULT_MAX_GAP`) are merged, and each
    merged range cut between inner chunks into parts of about the same size, a target of
    :data:`IO_RANGE_BYTES` at most -- less for :data:`PARTS_PER_SHARD` parts of a shard, while
    each holds :data:`MIN_SPAN_BYTES`: the first part of a shard is decoded while the next are
    read. A merged range of less than :data:`MIN_SPAN_BYTES` is no part (its inner chunks are
    read by the threads decoding them).
    """
    present = ~((entries[:, 0] == _EMPTY) & (entries[:, 1] == _EMPTY))
    wanted = int(entries[present, 1].sum())
    if wanted < MIN_SPAN_BYTES:
        return []
    target = min(IO_RANGE_BYTES, max(MIN_SPAN_BYTES, wanted // PARTS_PER_SHARD))
    positions = np.flatnonzero(present).tolist()
    parts = []
    for run in coalesce([(located[p][0], located[p][0] + located[p][1]) for p in positions]):
        if run.end - run.start < MIN_SPAN_BYTES:  # (a few inner chunks: read by their decoding threads)
            continue
        count = max(1, (run.end - run.start) // target)  # parts of this run, cut at the inner chunk
        members, first = run.members, 0              # ending nearest each multiple of its size
        for cut in range(1, count + 1):
            last = len(members) if cut == count else first + 1 + int(np.searchsorted(
                [end for _, _, end in members[first + 1 :]], run.start + (run.end - run.start) * cut // count))
            if last > first:
                parts.append((members[first][1], max(end for _, _, end in members[first:last]),
                              [positions[member] for member, _, _ in members[first:last]]))
                first = last
    return parts


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
