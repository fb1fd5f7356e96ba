"""Selections -> chunk projections (the first step of every plan, :mod:`zarrx.io.plan`).

An indexer turns a user selection into the output shape and an iterable of
:class:`ChunkProjection` ``(chunk_coords, chunk_selection, out_selection)``:
read chunk ``chunk_coords``, take ``chunk[chunk_selection]`` and put it at
``out[out_selection]``. Three kinds, as in NumPy and zarr-python:

* :class:`BasicIndexer` -- ints, slices with any step (negative too), Ellipsis;
* :class:`OrthogonalIndexer` -- ``oindex``: per dimension an int, slice, int
  array or boolean mask, applied independently (outer indexing);
* :class:`VectorizedIndexer` -- ``vindex``: coordinate arrays broadcast together
  (or one boolean mask of the array's shape); output has the broadcast shape.

Everything is computed with NumPy per dimension and per chunk, never per
element in Python.

The grid is given per dimension (``chunk_shape``): an int, the chunk length of a regular
dimension -- integer division, the fast path -- or a NumPy array of chunk offsets (each chunk's
start, then the last one's end) for a dimension of a rectilinear grid, located with
``searchsorted`` (``ChunkGrid.dimensions`` gives either).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import itertools

import numpy as np

from zarrx.errors import BoundsCheckError, SelectionError

__all__ = [
    "is_basic",
    "ChunkProjection",
    "DimProjection",
    "BasicIndexer",
    "OrthogonalIndexer",
    "VectorizedIndexer",
    "normalize_selection",
]

Selection = tuple[Any, ...]
#: one dimension of the grid: a chunk length, or chunk offsets (starts, then the last end)
DimensionGrid = Any


@dataclass(frozen=True)
class ChunkProjection:
    chunk_coords: tuple[int, ...]
    chunk_selection: tuple[Any, ...]
    out_selection: tuple[Any, ...]
    #: the selection covers every in-bounds element of the chunk exactly once, in order
    is_complete_chunk: bool


@dataclass(frozen=True)
class DimProjection:
    chunk_index: int
    chunk_selection: int | slice | np.ndarray
    out_selection: slice | np.ndarray | None  # None: the dimension is dropped (integer index)
    is_complete: bool


def is_basic(selection: Any) -> bool:
    """Whether ``selection`` is a basic one (ints, slices, Ellipsis): what ``arr[selection]`` reads
    with :class:`BasicIndexer`; anything else it reads as outer indexing, as NumPy would."""
    items = selection if isinstance(selection, tuple) else (selection,)
    return all(
        item is Ellipsis or isinstance(item, slice) or (np.ndim(item) == 0 and not isinstance(item, (list, np.ndarray)))
        for item in items
    )


def _is_integer(value: Any) -> bool:
    return isinstance(value, (numbers.Integral, np.integer)) and not isinstance(value, (bool, np.bool_))


def normalize_selection(selection: Any, ndim: int) -> Selection:
    """A tuple of length ``ndim`` with Ellipsis expanded and missing trailing dims as full slices."""
    if not isinstance(selection, tuple):
        selection = (selection,)
    ellipses = sum(1 for item in selection if item is Ellipsis)
    if ellipses > 1:
        raise SelectionError(f"a selection may contain at most one Ellipsis, found {ellipses}: {selection!r}")
    if ellipses:
        at = next(i for i, item in enumerate(selection) if item is Ellipsis)
        fill = ndim - (len(selection) - 1)
        selection = selection[:at] + (slice(None),) * max(fill, 0) + selection[at + 1 :]
    if len(selection) > ndim:
        raise SelectionError(f"too many indices for an array of {ndim} dimensions: {selection!r}")
    return selection + (slice(None),) * (ndim - len(selection))


def _out_of_bounds(index: int, length: int, dim: int) -> BoundsCheckError:
    """The error for ``index`` as the caller wrote it (``-100``, not the ``-92`` it counts from the end as)."""
    valid = f"-{length} to {length - 1}" if length else "none: the dimension is empty"
    return BoundsCheckError(
        f"index {index} is out of bounds for dimension {dim} of length {length} (valid indices: {valid})"
    )


def _normalize_index(index: int, length: int, dim: int) -> int:
    index = int(index)
    normalized = index + length if index < 0 else index
    if not 0 <= normalized < length:
        raise _out_of_bounds(index, length, dim)
    return normalized


def _normalize_indices(indices: np.ndarray, length: int, dim: int) -> np.ndarray:
    """Integer ``indices`` as int64 counted from the start; an index outside ``[-length, length)``
    is a BoundsCheckError naming it as given."""
    bad = (indices >= length) | (indices < -length) if indices.dtype.kind == "i" else indices >= length
    if bad.any():
        raise _out_of_bounds(int(indices[bad].flat[0]), length, dim)
    normalized = indices.astype(np.int64, copy=True)  # in range now: uint64 cannot wrap around
    normalized[normalized < 0] += length
    return normalized


def _int_dim(index: int, length: int, chunk: DimensionGrid, dim: int) -> list[DimProjection]:
    index = _normalize_index(index, length, dim)
    if isinstance(chunk, np.ndarray):
        located = int(np.searchsorted(chunk, index, side="right")) - 1
        return [DimProjection(located, index - int(chunk[located]), None, is_complete=False)]
    return [DimProjection(index // chunk, index % chunk, None, is_complete=False)]


def _chunk_length(chunk: DimensionGrid, index: int) -> int:
    """The declared length of chunk ``index`` of a dimension."""
    return int(chunk[index + 1] - chunk[index]) if isinstance(chunk, np.ndarray) else chunk


def _slice_count(selection: slice, length: int, dim: int) -> int:
    """How many elements ``selection`` takes from a dimension of ``length``."""
    if selection.step == 0:
        raise SelectionError(f"slice step cannot be zero (dimension {dim})")
    return len(range(*selection.indices(length)))


class _LazySliceDim:
    """The projections of a slice along one dimension, computed when first iterated.

    An indexer can so report its output shape before it builds anything per chunk: a slice
    over 2**60 chunks costs nothing until a reader that checked the output size iterates it.
    """

    def __init__(self, selection: slice, length: int, chunk: DimensionGrid, dim: int) -> None:
        self._args = (selection, length, chunk, dim)
        self._projections: list[DimProjection] | None = None

    def _get(self) -> list[DimProjection]:
        if self._projections is None:
            project = _slice_dim_variable if isinstance(self._args[2], np.ndarray) else _slice_dim
            self._projections = project(*self._args)[1]
        return self._projections

    def __iter__(self) -> Iterator[DimProjection]:
        return iter(self._get())

    def __getitem__(self, index: Any) -> Any:
        return self._get()[index]

    def __len__(self) -> int:
        """The number of chunks the slice touches, computed without building the projections."""
        selection, length, chunk, _ = self._args
        if isinstance(chunk, np.ndarray):  # a rectilinear dimension: as many chunks as it has, bounded
            return len(self._get())
        start, stop, step = selection.indices(length)
        count = len(range(start, stop, step))
        if count == 0:
            return 0
        if abs(step) >= chunk:  # every element in a chunk of its own
            return count
        last = start + (count - 1) * step
        return abs(last // chunk - start // chunk) + 1


def _slice_dim(selection: slice, length: int, chunk: int, dim: int) -> tuple[int, list[DimProjection]]:
    count = _slice_count(selection, length, dim)
    if count == 0:
        return 0, []
    start, stop, step = selection.indices(length)
    # Walk the chunks in the order the output visits them; within each chunk the
    # local slice keeps the user's step (negative steps walk the chunk backwards).
    last = start + (count - 1) * step
    first_chunk, last_chunk = start // chunk, last // chunk
    direction = 1 if step > 0 else -1
    projections = []
    out_start = 0
    for chunk_index in range(first_chunk, last_chunk + direction, direction):
        chunk_lo, chunk_hi = chunk_index * chunk, min((chunk_index + 1) * chunk, length)
        if step > 0:
            first = start if chunk_index == first_chunk else start + (-(-(chunk_lo - start) // step)) * step
            if first >= chunk_hi:
                continue
            n = (min(chunk_hi, stop) - first + step - 1) // step if chunk_index == last_chunk else (chunk_hi - first + step - 1) // step
        else:
            first = start if chunk_index == first_chunk else start - (-(-(start - (chunk_hi - 1)) // -step)) * -step
            if first < chunk_lo:
                continue
            n = (first - chunk_lo) // -step + 1
        n = min(n, count - out_start)
        local_first = first - chunk_lo
        local_stop = local_first + n * step
        local = slice(local_first, local_stop if local_stop >= 0 else None, step)
        complete = step == 1 and local_first == 0 and n == chunk_hi - chunk_lo
        projections.append(DimProjection(chunk_index, local, slice(out_start, out_start + n), complete))
        out_start += n
    return count, projections


def _slice_dim_variable(selection: slice, length: int, offsets: np.ndarray, dim: int) -> tuple[int, list[DimProjection]]:
    """:func:`_slice_dim` on a rectilinear dimension: every chunk the slice crosses at once, with NumPy."""
    count = _slice_count(selection, length, dim)
    if count == 0:
        return 0, []
    start, _, step = selection.indices(length)
    last = start + (count - 1) * step
    low, high = sorted((start, last))
    first_chunk, last_chunk = (int(np.searchsorted(offsets, position, side="right")) - 1 for position in (low, high))
    chunks = np.arange(first_chunk, last_chunk + 1)
    lo, hi = offsets[chunks], np.minimum(offsets[chunks + 1], length)
    span = abs(step)
    if step > 0:  # the first position at or after lo, and how many fit below hi (and up to last)
        first = start + -(-(np.maximum(lo - start, 0)) // span) * span
        counts = np.where(first <= np.minimum(hi - 1, last), (np.minimum(hi - 1, last) - first) // span + 1, 0)
    else:  # walking down: the first position at or below hi - 1, down to lo (and to last)
        first = start - -(-(np.maximum(start - (hi - 1), 0)) // span) * span
        floor = np.maximum(lo, last)
        counts = np.where(first >= floor, (first - floor) // span + 1, 0)
        chunks, lo, hi, first, counts = chunks[::-1], lo[::-1], hi[::-1], first[::-1], counts[::-1]
    taken = counts > 0
    chunks, lo, hi, first, counts = chunks[taken], lo[taken], hi[taken], first[taken], counts[taken]
    out_starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    projections = []
    for chunk_index, chunk_lo, chunk_hi, position, n, out_start in zip(
        chunks.tolist(), lo.tolist(), hi.tolist(), first.tolist(), counts.tolist(), out_starts.tolist()
    ):
        local_first = position - chunk_lo
        local_stop = local_first + n * step
        local = slice(local_first, local_stop if local_stop >= 0 else None, step)
        complete = step == 1 and local_first == 0 and n == chunk_hi - chunk_lo
        projections.append(DimProjection(chunk_index, local, slice(out_start, out_start + n), complete))
    return count, projections


def _array_dim(indices: np.ndarray, length: int, chunk: DimensionGrid, dim: int) -> tuple[int, list[DimProjection]]:
    if indices.dtype == bool:
        if indices.shape != (length,):
            raise SelectionError(
                f"boolean selection for dimension {dim} must have length {length}, found shape {indices.shape}"
            )
        indices = np.flatnonzero(indices)
    elif indices.dtype.kind not in "iu":
        raise SelectionError(f"unsupported index array dtype {indices.dtype} for dimension {dim}")
    if indices.ndim != 1:
        raise SelectionError(f"orthogonal index arrays must be 1-d, found {indices.ndim}-d for dimension {dim}")
    indices = _normalize_indices(indices, length, dim)
    count = len(indices)
    variable = isinstance(chunk, np.ndarray)
    chunk_ids = np.searchsorted(chunk, indices, side="right") - 1 if variable else indices // chunk
    if count and np.all(chunk_ids[1:] >= chunk_ids[:-1]):
        order = None
        sorted_ids, sorted_indices = chunk_ids, indices
    else:
        order = np.argsort(chunk_ids, kind="stable")
        sorted_ids, sorted_indices = chunk_ids[order], indices[order]
    boundaries = np.flatnonzero(np.diff(sorted_ids)) + 1
    projections = []
    for lo, hi in zip(np.concatenate([[0], boundaries]), np.concatenate([boundaries, [count]])):
        if hi <= lo:
            continue
        chunk_index = int(sorted_ids[lo])
        local = sorted_indices[lo:hi] - (int(chunk[chunk_index]) if variable else chunk_index * chunk)
        out = slice(int(lo), int(hi)) if order is None else order[lo:hi]
        projections.append(DimProjection(chunk_index, local, out, is_complete=False))
    return count, projections


def _ix(selection: Sequence[Any], shape: Sequence[int]) -> tuple[Any, ...]:
    """Turn a mixed int/slice/array selection into an open mesh when NumPy would otherwise reorder
    dimensions (several arrays, or an array beside an int).

    Slices become ranges and ints stay scalars, so every index is "advanced" and
    NumPy keeps the dimensions in order.
    """
    arrays = sum(isinstance(item, np.ndarray) for item in selection)
    if arrays == 0 or (arrays == 1 and not any(_is_integer(item) for item in selection)):
        return tuple(selection)
    positions = [i for i, item in enumerate(selection) if not _is_integer(item)]
    ranges = [
        np.arange(*selection[i].indices(shape[i])) if isinstance(selection[i], slice) else np.asarray(selection[i])
        for i in positions
    ]
    result = list(selection)
    for i, mesh in zip(positions, np.ix_(*ranges)):
        result[i] = mesh
    return tuple(result)


class _ProductIndexer:
    """Indexers whose selection is a product of independent per-dimension selections."""

    def __init__(self, dims: list[Any], counts: list[int | None], chunk_shape: tuple[DimensionGrid, ...], shape: tuple[int, ...]):
        self._dims = dims
        self._chunk_shape = chunk_shape
        self._variable = any(isinstance(chunk, np.ndarray) for chunk in chunk_shape)
        self._array_shape = shape
        self.shape = tuple(count for count in counts if count is not None)
        self._out_dims = [count for count in counts if count is not None]
        # slices are lazy (_LazySliceDim); ints and index arrays are lists, bounded by the selection
        self._has_arrays = any(
            isinstance(p.chunk_selection, np.ndarray) for dim in dims if isinstance(dim, list) for p in dim[:1]
        )

    def __iter__(self) -> Iterator[ChunkProjection]:
        for combo in itertools.product(*self._dims):
            chunk_coords = tuple(p.chunk_index for p in combo)
            chunk_selection = tuple(p.chunk_selection for p in combo)
            out_selection = tuple(p.out_selection for p in combo if p.out_selection is not None)
            if self._has_arrays:
                chunk_sizes = self._chunk_shape
                if self._variable:
                    chunk_sizes = tuple(_chunk_length(chunk, index) for chunk, index in zip(chunk_sizes, chunk_coords))
                chunk_selection = _ix(chunk_selection, chunk_sizes)
                out_selection = _ix(out_selection, self._out_dims)
            yield ChunkProjection(chunk_coords, chunk_selection, out_selection, all(p.is_complete for p in combo))

    @property
    def nchunks(self) -> int:
        return math.prod(len(d) for d in self._dims)

    def dimensions(self) -> list[Sequence[DimProjection]] | None:
        """The projections of each dimension, whose product :meth:`__iter__` yields; None when
        an index array makes the chunk selections more than a product of per-dimension parts."""
        return None if self._has_arrays else self._dims


def _dims_of(
    selection: Any, shape: tuple[int, ...], chunk_shape: tuple[DimensionGrid, ...], *, arrays: bool
) -> tuple[list[Any], list[int | None]]:
    """Per-dimension projections (lazy for slices) and output lengths (None: dimension dropped by an int)."""
    dims, counts = [], []
    for dim, (item, length, chunk) in enumerate(zip(normalize_selection(selection, len(shape)), shape, chunk_shape)):
        if _is_integer(item):
            dims.append(_int_dim(item, length, chunk, dim))
            counts.append(None)
            continue
        if isinstance(item, slice):
            count, projections = _slice_count(item, length, dim), _LazySliceDim(item, length, chunk, dim)
        elif arrays:
            try:
                array = np.asarray(item)
            except (TypeError, ValueError) as error:
                raise SelectionError(f"unsupported selection {item!r} for dimension {dim}") from error
            count, projections = _array_dim(array, length, chunk, dim)
        else:
            raise SelectionError(
                f"unsupported selection {item!r} for dimension {dim}: basic indexing takes ints, slices "
                "and Ellipsis; use .oindex for arrays/masks per dimension or .vindex for coordinates"
            )
        dims.append(projections)
        counts.append(count)
    return dims, counts


class BasicIndexer(_ProductIndexer):
    def __init__(self, selection: Any, shape: tuple[int, ...], chunk_shape: tuple[DimensionGrid, ...]):
        super().__init__(*_dims_of(selection, shape, chunk_shape, arrays=False), chunk_shape, shape)


class OrthogonalIndexer(_ProductIndexer):
    def __init__(self, selection: Any, shape: tuple[int, ...], chunk_shape: tuple[DimensionGrid, ...]):
        super().__init__(*_dims_of(selection, shape, chunk_shape, arrays=True), chunk_shape, shape)


class VectorizedIndexer:
    """Coordinate (point) selection: arrays broadcast together, one output element per point."""

    def __init__(self, selection: Any, shape: tuple[int, ...], chunk_shape: tuple[DimensionGrid, ...]):
        if not isinstance(selection, tuple):
            selection = (selection,)
        if len(selection) == 1 and np.asarray(selection[0]).dtype == bool and len(shape) > 1:
            mask = np.asarray(selection[0])
            if mask.shape != shape:
                raise SelectionError(f"boolean mask selection must have the array's shape {shape}, found {mask.shape}")
            selection = tuple(np.nonzero(mask))
        if len(selection) != len(shape):
            raise SelectionError(
                f"vindex needs one coordinate array per dimension ({len(shape)}), found {len(selection)}"
            )
        arrays = []
        for dim, (item, length) in enumerate(zip(selection, shape)):
            array = np.asarray(item)
            if array.dtype == bool:
                if array.shape != (length,):
                    raise SelectionError(f"boolean selection for dimension {dim} must have length {length}")
                array = np.flatnonzero(array)
            if array.dtype.kind not in "iu":
                raise SelectionError(f"vindex takes integer coordinate arrays, found {array.dtype} for dimension {dim}")
            arrays.append(_normalize_indices(array, length, dim))
        try:
            arrays = np.broadcast_arrays(*arrays)
        except ValueError as error:
            raise SelectionError(f"vindex coordinate arrays do not broadcast: {error}") from None
        self.shape = arrays[0].shape if arrays else ()
        coords = [a.reshape(-1) for a in arrays]
        self._chunk_shape = chunk_shape
        self._points = coords
        if coords:
            chunk_ids = [
                np.searchsorted(cs, c, side="right") - 1 if isinstance(cs, np.ndarray) else c // cs
                for c, cs in zip(coords, chunk_shape)
            ]
            grid = [max(int(ids.max()) + 1, 1) if ids.size else 1 for ids in chunk_ids]
            flat = np.ravel_multi_index(chunk_ids, grid) if coords[0].size else np.zeros(0, np.int64)
            self._order = np.argsort(flat, kind="stable")
            sorted_flat = flat[self._order]
            self._bounds = np.flatnonzero(np.diff(sorted_flat)) + 1
            self._sorted_flat = sorted_flat
            self._grid = grid

    def __iter__(self) -> Iterator[ChunkProjection]:
        if not self._points or self._points[0].size == 0:
            return
        count = self._points[0].size
        starts = np.concatenate([[0], self._bounds])
        stops = np.concatenate([self._bounds, [count]])
        for lo, hi in zip(starts, stops):
            positions = self._order[lo:hi]
            chunk_coords = tuple(int(c) for c in np.unravel_index(int(self._sorted_flat[lo]), self._grid))
            chunk_selection = tuple(
                points[positions] - (int(size[index]) if isinstance(size, np.ndarray) else index * size)
                for points, index, size in zip(self._points, chunk_coords, self._chunk_shape)
            )
            yield ChunkProjection(chunk_coords, chunk_selection, (positions,), False)
