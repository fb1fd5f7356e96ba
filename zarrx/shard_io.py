"""Reading and writing parts of shards (``sharding_indexed``) with as few requests as possible.

Selections on a sharded array are projected onto the *inner* chunk grid; the
projections are grouped by shard. Reading then takes two batched store calls:

1. one :meth:`~zarrx.storage.Store.get_ranges` batch with, per touched shard,
   either the whole object (when every inner chunk of the shard is wanted) or
   just its index (a suffix range when the index is at the end);
2. one batch with the byte ranges of the wanted, non-empty inner chunks of the
   partially read shards, neighbours coalesced (:mod:`zarrx.byte_ranges`), and
   each of those shards' index once more. A store reads all the ranges of one
   key in a call from one version of it, so an index equal to the first one
   proves the offsets belong to the bytes read with it; a shard replaced
   between the two calls is read again whole (a third call, only then).

Writing reads only the shards it does not overwrite completely, keeps the
encoded bytes of untouched inner chunks as they are, re-encodes the touched
ones, leaves all-fill inner chunks out, and deletes a shard left empty. Each
shard is written as one object, atomically: the shard is the unit of parallel
writes.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import TYPE_CHECKING, Any, Iterable

import numpy as np

from zarrx.byte_ranges import coalesce
from zarrx.codecs.sharding import EMPTY, ShardingCodec
from zarrx.concurrency import map_concurrent, scratch_array
from zarrx.errors import ChunkDecodeError
from zarrx.indexing import ChunkProjection
from zarrx.storage.store import OffsetByteRequest, RangeByteRequest

if TYPE_CHECKING:
    from zarrx.chunk_io import ChunkLayout


def reads_directly(store: Any) -> bool:
    from zarrx.chunk_io import reads_directly as direct

    return direct(store)


__all__ = ["read_sharded", "write_sharded"]


def _group_by_shard(
    layout: "ChunkLayout", projections: Iterable[ChunkProjection]
) -> dict[tuple[int, ...], list[tuple[tuple[int, ...], ChunkProjection]]]:
    per_shard = layout.sharding.chunks_per_shard(layout.spec)
    groups: dict[tuple[int, ...], list] = defaultdict(list)
    for projection in projections:
        shard = tuple(c // n for c, n in zip(projection.chunk_coords, per_shard))
        inner = tuple(c % n for c, n in zip(projection.chunk_coords, per_shard))
        groups[shard].append((inner, projection))
    return groups


def _inner_chunks_in_bounds(layout: "ChunkLayout", shard: tuple[int, ...]) -> int:
    """How many inner chunks of ``shard`` hold at least one element of the array."""
    shard_shape, inner = layout.metadata.chunks, layout.sharding.chunk_shape
    return math.prod(
        min(s // c, -(-(length - index * s) // c))
        for index, s, c, length in zip(shard, shard_shape, inner, layout.metadata.shape)
    )


def _inner_region(layout: "ChunkLayout", global_inner: tuple[int, ...]) -> tuple[slice, ...]:
    """The in-bounds part of an inner chunk, in its own coordinates."""
    return tuple(
        slice(0, min(c, length - index * c))
        for index, c, length in zip(global_inner, layout.sharding.chunk_shape, layout.metadata.shape)
    )


def _slice_index(raw: Any, codec: ShardingCodec, layout: "ChunkLayout") -> memoryview:
    size = codec.index_size(layout.spec)
    view = memoryview(raw)
    return view[-size:] if codec.index_location == "end" else view[:size]


def read_sharded(layout: "ChunkLayout", projections: Iterable[ChunkProjection], out: np.ndarray) -> np.ndarray:
    from zarrx.chunk_io import batch_limit, decoded_nbytes, split_batches

    groups = _group_by_shard(layout, projections)
    inner_bytes = decoded_nbytes(layout.sharding.inner_spec(layout.spec))
    # large reads go in batches of whole shards, so no shard's index is read twice
    for shards in split_batches(groups, lambda shard: len(groups[shard]) * inner_bytes, batch_limit(out.nbytes)):
        _read_shards(layout, {shard: groups[shard] for shard in shards}, out)
    return out


def _read_shards(
    layout: "ChunkLayout", groups: dict[tuple[int, ...], list[tuple[tuple[int, ...], ChunkProjection]]], out: np.ndarray
) -> None:
    codec, spec = layout.sharding, layout.spec
    shards = list(groups)
    keys = [layout.chunk_key(shard) for shard in shards]
    whole = [len(groups[shard]) == _inner_chunks_in_bounds(layout, shard) for shard in shards]
    index_range = codec.index_range(spec)
    first = layout.store.get_ranges(
        [(key, OffsetByteRequest(0) if is_whole else index_range) for key, is_whole in zip(keys, whole)]
    )

    # (inner chunk bytes or None, projection, key) for every wanted inner chunk
    jobs: list[tuple[Any, ChunkProjection, str]] = []
    wanted: dict[str, list[tuple[int, int, ChunkProjection]]] = defaultdict(list)
    first_index: dict[str, Any] = {}
    shard_of: dict[str, tuple[int, ...]] = {}
    for shard, key, is_whole, raw in zip(shards, keys, whole, first):
        if raw is None:  # the shard does not exist: all fill value
            jobs.extend((None, projection, key) for _, projection in groups[shard])
        elif is_whole:
            _whole_shard_jobs(layout, key, raw, groups[shard], jobs)
        else:
            index = codec.decode_index(_slice_index(raw, codec, layout), spec, key)
            for inner, projection in groups[shard]:
                offset, nbytes = (int(v) for v in index[inner])
                if offset == EMPTY and nbytes == EMPTY:
                    jobs.append((None, projection, key))
                else:
                    wanted[key].append((offset, offset + nbytes, projection))
            if key in wanted:
                first_index[key], shard_of[key] = raw, shard

    # The inner chunks, and each shard's index again: the store reads all ranges of one key from
    # one version of it (Store.get_ranges), so an index equal to the first proves the offsets
    # belong to the bytes read with it. A shard replaced between the two reads is read again
    # whole, with the index it carries.
    decoder = _InnerDecoder(layout, out)
    changed = _read_pieces_batched(layout, first_index, _pieces(wanted), jobs)
    if changed:
        changed = list(dict.fromkeys(changed))
        for key, raw in zip(changed, layout.store.get_ranges([(key, OffsetByteRequest(0)) for key in changed])):
            projections = groups[shard_of[key]]
            if raw is None:
                jobs.extend((None, projection, key) for _, projection in projections)
            else:
                _whole_shard_jobs(layout, key, raw, projections, jobs)
    decoder.run(jobs)


#: a coalesced byte range of a partly read shard: its key, the range and the inner chunks in
#: it as (start, end, projection), offsets in the shard
_Piece = tuple[str, RangeByteRequest, list[tuple[int, int, ChunkProjection]]]


def _pieces(wanted: dict[str, list[tuple[int, int, ChunkProjection]]]) -> list[_Piece]:
    """The wanted inner chunks as coalesced byte ranges."""
    pieces: list[_Piece] = []
    for key, ranges in wanted.items():
        for merged in coalesce([(lo, hi) for lo, hi, _ in ranges]):
            members = [ranges[position] for position, _, _ in merged.members]
            pieces.append((key, RangeByteRequest(merged.start, merged.end), members))
    return pieces


def _cut(raw: Any, piece: _Piece) -> list[tuple[Any, ChunkProjection, str]]:
    key, byte_range, members = piece
    view = memoryview(raw if raw is not None else b"")
    return [(view[lo - byte_range.start : hi - byte_range.start], projection, key) for lo, hi, projection in members]


def _read_pieces_batched(
    layout: "ChunkLayout", first_index: dict[str, Any], pieces: list[_Piece], jobs: list
) -> list[str]:
    """Read every piece, and each shard's index once more, in one request; the changed keys."""
    index_range = layout.sharding.index_range(layout.spec)
    requests: list[tuple[str, Any]] = []
    parts: list[_Piece | None] = []
    seen: set[str] = set()
    for piece in pieces:
        if piece[0] not in seen:
            seen.add(piece[0])
            requests.append((piece[0], index_range))
            parts.append(None)
        requests.append((piece[0], piece[1]))
        parts.append(piece)
    changed: list[str] = []
    if not requests:
        return changed
    for raw, (key, _), piece in zip(layout.store.get_ranges(requests), requests, parts):
        if piece is None:  # the index, read again
            if raw is None or bytes(raw) != bytes(first_index[key]):
                changed.append(key)
        elif key not in changed:
            jobs.extend(_cut(raw, piece))
    return changed


def _whole_shard_jobs(
    layout: "ChunkLayout", key: str, raw: Any, wanted: list[tuple[tuple[int, ...], ChunkProjection]], jobs: list
) -> None:
    """Add the wanted inner chunks of the complete shard ``raw`` to ``jobs``."""
    codec = layout.sharding
    index = codec.decode_index(_slice_index(raw, codec, layout), layout.spec, key, shard_size=len(raw))
    view = memoryview(raw)
    for inner, projection in wanted:
        offset, nbytes = (int(v) for v in index[inner])
        if offset == EMPTY and nbytes == EMPTY:
            jobs.append((None, projection, key))
        else:
            jobs.append((view[offset : offset + nbytes], projection, key))


class _InnerDecoder:
    """Decodes inner chunks into ``out``: straight into it where an inner chunk is a contiguous
    piece of it, else through the thread's scratch buffer."""

    def __init__(self, layout: "ChunkLayout", out: np.ndarray) -> None:
        self.layout, self.out = layout, out
        self.spec = layout.inner_spec
        self.pipeline = layout.sharding.codecs
        self.decodes_into = self.pipeline.decodes_into(self.spec)
        self.direct_out = (
            self.decodes_into and out.flags.c_contiguous and out.flags.writeable and out.dtype == self.spec.dtype
        )
        self.fill_value = layout.metadata.fill_value

    def decode_one(self, job: tuple[Any, ChunkProjection, str]) -> None:
        data, projection, key = job
        out, spec = self.out, self.spec
        if data is None:
            out[projection.out_selection] = self.fill_value
            return
        target = None
        if self.direct_out and projection.is_complete_chunk:
            target = out[(*projection.out_selection, Ellipsis)]  # a view even for 0-d output
            if target.shape != spec.shape or not target.flags.c_contiguous:
                target = None
        buffer = target if target is not None else scratch_array(spec.shape, spec.dtype) if self.decodes_into else None
        try:
            chunk = self.pipeline.decode(data, spec, key, out=buffer)
        except ChunkDecodeError:
            # decode again for an error naming the inner chunk (the name is built only on failure)
            self.pipeline.decode(data, spec, f"{key} inner chunk {projection.chunk_coords}")
            raise
        if chunk is not target:
            out[projection.out_selection] = chunk[projection.chunk_selection]

    def run(self, jobs: list[tuple[Any, ChunkProjection, str]]) -> None:
        if self.layout.worth_threads(self.spec):
            from zarrx.chunk_io import caller_can_work

            map_concurrent(self.decode_one, jobs, caller_works=caller_can_work(self.pipeline))
        else:
            for job in jobs:
                self.decode_one(job)


def write_sharded(
    layout: "ChunkLayout", projections: Iterable[ChunkProjection], value: np.ndarray, *, write_empty_chunks: bool
) -> None:
    codec, spec = layout.sharding, layout.spec
    inner_spec = codec.inner_spec(spec)
    per_shard = codec.chunks_per_shard(spec)
    groups = _group_by_shard(layout, projections)
    shards = list(groups)
    keys = {shard: layout.chunk_key(shard) for shard in shards}
    overwritten = {
        shard
        for shard in shards
        if len(groups[shard]) == _inner_chunks_in_bounds(layout, shard) and all(p.is_complete_chunk for _, p in groups[shard])
    }
    existing = layout.store.get_many([keys[s] for s in shards if s not in overwritten])
    fill_value = layout.metadata.fill_value

    def build(shard: tuple[int, ...]) -> tuple[str, bytes | None]:
        from zarrx.chunk_io import is_all_fill

        key = keys[shard]
        raw = existing.get(key)
        encoded: dict[tuple[int, ...], Any] = {}
        index = None
        if raw is not None:
            index = codec.decode_index(_slice_index(raw, codec, layout), spec, key, shard_size=len(raw))
            view = memoryview(raw)
            for inner in np.ndindex(*per_shard):
                offset, nbytes = index[inner]
                if not (offset == EMPTY and nbytes == EMPTY):
                    encoded[inner] = view[int(offset) : int(offset) + int(nbytes)]
        for inner, projection in groups[shard]:
            new_data = value[projection.out_selection]
            region = _inner_region(layout, projection.chunk_coords)
            if projection.is_complete_chunk and all(r.stop == c for r, c in zip(region, codec.chunk_shape)):
                chunk = np.asarray(new_data)
            else:
                old = encoded.get(inner)
                if old is None:
                    chunk = np.full(codec.chunk_shape, fill_value, dtype=spec.dtype)
                else:
                    name = f"{key} inner chunk {projection.chunk_coords}"
                    chunk = np.array(codec.codecs.decode(old, inner_spec, key=name), copy=True)
                chunk[projection.chunk_selection] = new_data
            if not write_empty_chunks and is_all_fill(chunk, fill_value):
                encoded.pop(inner, None)
            else:
                encoded[inner] = codec.codecs.encode(chunk, inner_spec, key=key)
        if not encoded:
            return key, None
        shard_bytes = codec.assemble(encoded, spec)
        if direct:  # local and in-memory stores: stored by the task that built it, not held
            layout.store.set(key, shard_bytes)
            return key, b""
        return key, shard_bytes

    direct = reads_directly(layout.store)
    results = map_concurrent(build, shards) if layout.worth_threads(spec) else [build(s) for s in shards]
    to_store = {key: data for key, data in results if data is not None and not direct}
    to_delete = [key for key, data in results if data is None]
    if to_store:
        layout.store.set_many(to_store)
    if to_delete:
        layout.store.delete_many(to_delete)
