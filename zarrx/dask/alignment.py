"""Dask blocks against a Zarr chunk grid: which block boundaries fall inside a stored object.

Parallel writes are only safe when no two dask blocks touch one stored object (a chunk, or a
shard for a sharded array), so :func:`align_blocks` checks a dask array's block boundaries
against the grid: it returns the array as it is when they line up (no rechunk, no cost), or
rechunks it onto the grid as dask 2026.8's ``to_zarr`` does (``align="rechunk"``: along the
axes that need it, ``"auto"`` blocks near dask's ``array.chunk-size`` in multiples of the shard
or chunk shape, with dask's PerformanceWarning when that setting is smaller than one shard), or
raises :class:`~zarrx.errors.ChunkAlignmentError` naming a few of the conflicting block pairs,
the object they share and the keyword that aligns instead (``align="error"``).
:func:`first_bad_boundary` is the check alone.

The grid is given per axis as a chunk length, or -- for a rectilinear grid -- as the tuple of
its chunks' edge lengths, whose running sums are the boundaries blocks may end on (there the
chunks themselves are the aligned blocks).
"""

from __future__ import annotations

import itertools

import math
import warnings
from dataclasses import dataclass
from typing import Sequence

import dask
import dask.array as da
import numpy as np
from dask.array.core import PerformanceWarning, normalize_chunks

from zarrx.metadata.rectilinear import grid_blocks
from zarrx.nodes.array import Array
from zarrx.errors import ChunkAlignmentError

__all__ = ["align_blocks", "first_bad_boundary", "regular_size", "grid_blocks", "warn_partial_objects"]

#: conflicting block pairs spelled out in a ChunkAlignmentError message
MAX_CONFLICTS_SHOWN = 3


def regular_size(sizes: tuple[int, ...]) -> int | None:
    """The block size along an axis whose blocks are all that size but a smaller last one, else None."""
    first, same = sizes[0], sizes.count(sizes[0])
    if same == len(sizes) or (same == len(sizes) - 1 and sizes[-1] < first):
        return first
    return None


def _boundaries(sizes: Sequence[int], offset: int) -> np.ndarray:
    """Positions (in the array) where one block ends and the next begins."""
    return offset + np.cumsum(np.asarray(sizes[:-1], dtype=np.int64))


#: one axis of a grid: a chunk length, or a rectilinear axis' edge lengths
Axis = int | tuple[int, ...]


def _inside(boundaries: np.ndarray, chunk: Axis) -> np.ndarray:
    """Which of ``boundaries`` fall inside a chunk of the axis (not on a chunk boundary)."""
    if isinstance(chunk, tuple):
        return ~np.isin(boundaries, np.cumsum(np.asarray(chunk, dtype=np.int64)))
    return boundaries % chunk != 0


def _chunk_of(position: int, chunk: Axis) -> int:
    """The chunk of the axis holding ``position``."""
    if isinstance(chunk, tuple):
        return int(np.searchsorted(np.cumsum(np.asarray(chunk, dtype=np.int64)), position, side="right"))
    return position // chunk


def first_bad_boundary(sizes: tuple[int, ...], offset: int, chunk: Axis) -> int | None:
    """The first block boundary that falls inside a chunk, or None."""
    if len(sizes) < 2:
        return None
    size = regular_size(sizes)
    if not isinstance(chunk, tuple) and size is not None and size % chunk == 0 and offset % chunk == 0:
        return None  # the common case, without a table of boundaries
    boundaries = _boundaries(sizes, offset)
    bad = np.flatnonzero(_inside(boundaries, chunk))
    return int(boundaries[bad[0]]) if bad.size else None


@dataclass(frozen=True)
class _Conflict:
    """Two blocks, adjacent along ``axis``, whose boundary ``position`` falls inside a chunk."""

    axis: int
    block: int  # the boundary is between blocks ``block`` and ``block + 1`` along the axis
    position: int


def _conflicts(
    blocks: tuple[tuple[int, ...], ...], offsets: tuple[int, ...], unit: tuple[Axis, ...]
) -> tuple[list[_Conflict], int]:
    """Block boundaries that fall inside chunks (a few of them) and how many block pairs share a chunk."""
    found, pairs = [], 0
    numblocks = [len(sizes) for sizes in blocks]
    for axis, (sizes, offset, chunk) in enumerate(zip(blocks, offsets, unit)):
        if first_bad_boundary(sizes, offset, chunk) is None:
            continue
        boundaries = _boundaries(sizes, offset)
        bad = np.flatnonzero(_inside(boundaries, chunk))
        pairs += int(bad.size) * math.prod(n for i, n in enumerate(numblocks) if i != axis)
        found += [_Conflict(axis, int(i), int(boundaries[i])) for i in bad[:MAX_CONFLICTS_SHOWN]]
    return found, pairs


def _describe(conflict: _Conflict, offsets: tuple[int, ...], unit: tuple[Axis, ...], kind: str) -> str:
    axis, ndim = conflict.axis, len(unit)
    first = tuple(conflict.block if i == axis else 0 for i in range(ndim))
    second = tuple(conflict.block + 1 if i == axis else 0 for i in range(ndim))
    shared = tuple(_chunk_of(conflict.position if i == axis else offsets[i], unit[i]) for i in range(ndim))
    where = f"their boundary is at {conflict.position} on axis {axis}"
    return f"blocks {first} and {second} both write {kind} {shared} ({where})"


def _aligned_sizes(sizes: tuple[int, ...], offset: int, chunk: Axis, step: int | None = None) -> tuple[int, ...]:
    """Block sizes covering ``sum(sizes)`` elements from ``offset`` whose boundaries are multiples of
    ``step`` (a multiple of ``chunk``; by default the largest block in ``sizes`` rounded down to
    one); on a rectilinear axis, the chunks themselves."""
    length = sum(sizes)
    if isinstance(chunk, tuple):
        ends = np.cumsum(np.asarray(chunk, dtype=np.int64))
        cuts = [int(end) - offset for end in ends if offset < end < offset + length]
        return tuple(np.diff([0, *cuts, length]).tolist()) or (0,)
    if step is None:
        step = chunk * max(1, max(sizes) // chunk)
    out, position, stop = [], offset, offset + length
    while position < stop:
        end = min(stop, (position // step + 1) * step)
        out.append(end - position)
        position = end
    return tuple(out) or (0,)


def _dask_steps(x: da.Array, array: Array, unit: tuple[Axis, ...], axes: list[int]) -> dict[int, int]:
    """The block length dask's ``to_zarr`` would choose along each of ``axes``: ``"auto"`` blocks over
    the whole array (near ``array.chunk-size``, in multiples of the shard or chunk shape, the other
    axes keeping ``x``'s blocks), rounded down to a multiple of the grid -- never below one shard
    or chunk, with dask's PerformanceWarning when ``array.chunk-size`` asked for less. For object
    data, whose size dask cannot tell, none: the blocks stay near their own size."""
    regular = [axis for axis in axes if not isinstance(unit[axis], tuple)]
    if not regular:
        return {}
    request = tuple("auto" if axis in regular else max(1, max(sizes)) for axis, sizes in enumerate(x.chunks))
    previous = tuple(max(size) if isinstance(size, tuple) else size for size in unit)
    try:
        auto = normalize_chunks(request, array.shape, dtype=x.dtype, previous_chunks=previous)
    except NotImplementedError:  # object data (strings): dask cannot size "auto" blocks of it
        return {}
    steps, warned = {}, False
    for axis in regular:
        nominal, size = auto[axis][0], unit[axis]
        if len(auto[axis]) == 1:  # one block along the whole axis: nothing to share
            steps[axis] = max(nominal, array.shape[axis])
            continue
        steps[axis] = size * max(1, nominal // size)
        if nominal % size and not warned:  # dask warns once, for the first such axis
            _warn_small_chunk_size(x, array, axis, nominal, steps[axis], unit)
            warned = True
    return steps


def _warn_small_chunk_size(
    x: da.Array, array: Array, axis: int, nominal: int, step: int, unit: tuple[Axis, ...]
) -> None:
    """dask's PerformanceWarning when ``array.chunk-size`` asks for blocks that are no multiple of
    the shard (chunk) shape, smaller than one shard at most: dask then writes racing blocks;
    zarrx writes ``step`` long blocks (whole shards) instead."""
    kind = "shard" if array.shards else "chunk"
    safe = math.prod(max(size) if isinstance(size, tuple) else size for size in unit) * max(1, x.dtype.itemsize)
    warnings.warn(
        f"The input Dask array will be rechunked along axis {axis} with chunk size {step}: dask's "
        f"\"array.chunk-size\" ({dask.config.get('array.chunk-size')}) asks for {nominal}, but a chunk size "
        f"divisible by {unit[axis]} is required to write safely to the Zarr array {array.name!r} (whole {kind}s "
        f"per task), so zarrx writes blocks of {step} instead. Set the \"array.chunk-size\" configuration parameter "
        f"to at least the size in bytes of a single {kind} of the array, {safe} bytes, e.g. "
        f'dask.config.set({{"array.chunk-size": {safe}}})',
        PerformanceWarning,
        stacklevel=5,
    )


def align_blocks(x: da.Array, array: Array, offsets: tuple[int, ...], align: str) -> da.Array:
    """``x`` itself when no two blocks share a stored object (chunk, or shard), else -- for
    ``align="rechunk"`` -- rechunked onto the grid as dask's ``to_zarr`` does: along the axes
    that need it, blocks near dask's ``array.chunk-size`` in multiples of the shard (chunk)
    shape, cut at the region's start and end; for ``align="error"`` a
    :class:`~zarrx.errors.ChunkAlignmentError` naming a few of the blocks and what they share."""
    unit = array.shards or array.chunks
    if x.size == 0:
        return x
    conflicts, pairs = _conflicts(x.chunks, offsets, unit)
    if not conflicts:
        return x
    kind = "shard" if array.shards else "chunk"
    if align == "rechunk":
        bad_axes = sorted({conflict.axis for conflict in conflicts})
        steps = _dask_steps(x, array, unit, bad_axes)
        return x.rechunk(
            tuple(
                _aligned_sizes(sizes, offset, chunk, steps.get(axis)) if axis in bad_axes else sizes
                for axis, (sizes, offset, chunk) in enumerate(zip(x.chunks, offsets, unit))
            )
        )
    examples = "; ".join(_describe(conflict, offsets, unit, kind) for conflict in conflicts)
    where = f" starting at {offsets}" if any(offsets) else ""
    raise ChunkAlignmentError(
        f"cannot write the dask array to {array.name!r} in parallel: {pairs} pair(s) of its blocks would write "
        f"the same {kind} ({kind} shape {unit}), e.g. {examples}. Rechunk the dask array so that its blocks "
        f"are multiples of {unit} on the {kind} grid{where}, or pass align_chunks=True to have zarrx rechunk "
        f"it as dask's to_zarr does (safe_chunks=True or align_chunks=False ask for this error instead)"
    )


def warn_partial_objects(array: Array, offsets: tuple[int, ...], shape: tuple[int, ...]) -> None:
    """dask's PerformanceWarning when a region starts or ends inside a stored object: the tasks
    writing there read the object, merge and rewrite it (safe, one task per object, but slower)."""
    unit = array.shards or array.chunks
    kind = "shard" if array.shards else "chunk"
    for axis, (start, length, size, extent) in enumerate(zip(offsets, shape, unit, array.shape)):
        stop = start + length
        if isinstance(size, tuple):  # a rectilinear axis: the bounds must be chunk boundaries
            bounds = {0, *itertools.accumulate(size)}
            inside = start not in bounds or (stop not in bounds and stop != extent)
        else:
            inside = bool(start % size or (stop % size and stop != extent))
        if length and inside:
            warnings.warn(
                f"The input Dask array writes part of a {kind} along axis {axis} of {array.name!r} (region "
                f"{start}:{stop}, {kind} length {size}): those {kind}s are read, merged and rewritten. A region "
                f"on the {kind} grid writes whole {kind}s.",
                PerformanceWarning,
                stacklevel=3,
            )
            return
