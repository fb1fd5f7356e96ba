"""Reading and writing parts of shards (``sharding_indexed``) with as few requests as possible.

Selections on a sharded array are projected onto the *inner* chunk grid; the
projections are grouped by shard. Reading then takes at most two batched store
calls:

1. one :meth:`~zarrx.storage.Store.get_ranges` batch with, per touched shard,
   either the whole object (when every inner chunk of the shard is wanted) or
   just its index (a suffix range when the index is at the end);
2. one batch with the byte ranges of the wanted, non-empty inner chunks of the
   partially read shards, neighbours coalesced (:mod:`zarrx.byte_ranges`).

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
from zarrx.concurrency import map_concurrent
from zarrx.indexing import ChunkProjection
from zarrx.storage.store import OffsetByteRequest, RangeByteRequest

if TYPE_CHECKING:
    from zarrx.chunk_io import ChunkLayout

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
    inner_spec = codec.inner_spec(spec)
    shards = list(groups)
    keys = [layout.chunk_key(shard) for shard in shards]
    whole = [len(groups[shard]) == _inner_chunks_in_bounds(layout, shard) for shard in shards]
    first = layout.store.get_ranges(
        [(key, OffsetByteRequest(0) if is_whole else codec.index_range(spec)) for key, is_whole in zip(keys, whole)]
    )

    # (inner chunk bytes or None, projection, key) for every wanted inner chunk
    jobs: list[tuple[Any, ChunkProjection, str]] = []
    wanted: dict[str, list[tuple[int, int, ChunkProjection]]] = defaultdict(list)
    for shard, key, is_whole, raw in zip(shards, keys, whole, first):
        if raw is None:  # the shard does not exist: all fill value
            jobs.extend((None, projection, key) for _, projection in groups[shard])
            continue
        index = codec.decode_index(_slice_index(raw, codec, layout), spec, key, shard_size=len(raw) if is_whole else None)
        for inner, projection in groups[shard]:
            offset, nbytes = (int(v) for v in index[inner])
            if index[inner][0] == EMPTY and index[inner][1] == EMPTY:
                jobs.append((None, projection, key))
            elif is_whole:
                jobs.append((memoryview(raw)[offset : offset + nbytes], projection, key))
            else:
                wanted[key].append((offset, offset + nbytes, projection))

    requests, cuts = [], []
    for key, ranges in wanted.items():
        for merged in coalesce([(lo, hi) for lo, hi, _ in ranges]):
            requests.append((key, RangeByteRequest(merged.start, merged.end)))
            cuts.append((key, merged, [ranges[position][2] for position, _, _ in merged.members]))
    if requests:
        for raw, (key, merged, members) in zip(layout.store.get_ranges(requests), cuts):
            view = memoryview(raw if raw is not None else b"")
            for (position, lo, hi), projection in zip(merged.members, members):
                jobs.append((view[lo - merged.start : hi - merged.start], projection, key))

    fill_value = layout.metadata.fill_value

    def decode_one(job: tuple[Any, ChunkProjection, str]) -> None:
        data, projection, key = job
        if data is None:
            out[projection.out_selection] = fill_value
        else:
            name = f"{key} inner chunk {projection.chunk_coords}"
            chunk = codec.codecs.decode(data, inner_spec, key=name)
            out[projection.out_selection] = chunk[projection.chunk_selection]

    if layout.worth_threads(inner_spec):
        map_concurrent(decode_one, jobs)
    else:
        for job in jobs:
            decode_one(job)


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
        return key, (codec.assemble(encoded, spec) if encoded else None)

    results = map_concurrent(build, shards) if layout.worth_threads(spec) else [build(s) for s in shards]
    to_store = {key: data for key, data in results if data is not None}
    to_delete = [key for key, data in results if data is None]
    if to_store:
        layout.store.set_many(to_store)
    if to_delete:
        layout.store.delete_many(to_delete)
