"""The blocks of a dask array along one axis, described by a few numbers instead of a tuple per block.

A dask array keeps its blocks as ``chunks``: one tuple of block sizes per axis, a million
entries for a million blocks, walked in Python to find a shape or a block's position. Reading
a Zarr array needs much less: along an axis the blocks are either *regular* -- every block
``size`` elements long, their boundaries at ``origin + k * size`` -- or given by a table of
block boundaries (an irregular grid, or explicit ``chunks=``). This module describes an axis
either way, as the part ``[start, stop)`` of the stored array's axis that a dask array shows:

* :class:`RegularAxis` -- ``start``, ``stop``, ``size``, ``origin``: four integers whatever
  the number of blocks; a block's position, the number of blocks and the largest block are
  arithmetic, and so is slicing.
* :class:`TableAxis` -- ``edges``, a NumPy table of block boundaries; slicing is a binary
  search and a copy of the boundaries kept.

Both give dask's block sizes (:attr:`chunks`, made only when asked) and the same blocks dask's
own step-1 slicing gives: the blocks a selection touches, cut at its ends; an empty selection
is one block of length 0. :func:`axis_from_sizes` turns dask block sizes into an axis
description.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence, Union

import numpy as np

from zarrx.dask.alignment import regular_size

__all__ = ["Axis", "RegularAxis", "TableAxis", "axis_from_sizes", "regular_axis", "sliceable"]


@dataclass(frozen=True)
class RegularAxis:
    """Blocks of ``size`` elements over ``[start, stop)`` of a stored axis, boundaries at ``origin + k * size``.

    Examples
    --------
    >>> axis = RegularAxis(0, 10, 4)
    >>> axis.chunks, axis.numblocks, axis.span(2)
    ((4, 4, 2), 3, (8, 10))
    >>> part = axis.sliced(3, 9)           # elements 3..8: the blocks it touches, cut at its ends
    >>> part.chunks, part.span(0)
    ((1, 4, 1), (3, 4))
    """

    start: int
    stop: int
    size: int
    origin: int = 0

    @property
    def length(self) -> int:
        return self.stop - self.start

    @property
    def _first(self) -> int:
        """The index, on the whole grid, of the block holding ``start``."""
        return (self.start - self.origin) // self.size

    @property
    def numblocks(self) -> int:
        if self.stop <= self.start:
            return 1  # dask's empty axis: one block of length 0
        return (self.stop - 1 - self.origin) // self.size - self._first + 1

    def span(self, block: int) -> tuple[int, int]:
        """``(first, end)`` of block ``block`` on the stored axis (a task each: kept to arithmetic)."""
        start, stop, size, origin = self.start, self.stop, self.size, self.origin
        if stop <= start:
            return start, start
        low = origin + ((start - origin) // size + block) * size
        high = low + size
        return (low if low > start else start), (high if high < stop else stop)

    @property
    def chunks(self) -> tuple[int, ...]:
        count = self.numblocks
        if count == 1:
            return (self.length,)
        first, last = self.span(0), self.span(count - 1)
        return (first[1] - first[0],) + (self.size,) * (count - 2) + (last[1] - last[0],)

    def block_end(self, index: int) -> int:
        """Where the block holding element ``index`` of this axis ends (an index of this axis)."""
        block = (self.start + index - self.origin) // self.size
        return min(self.stop, self.origin + (block + 1) * self.size) - self.start

    def shifted(self, offset: int) -> RegularAxis:
        """The same blocks ``offset`` elements further along the stored axis."""
        return RegularAxis(self.start + offset, self.stop + offset, self.size, self.origin + offset)

    def sliced(self, begin: int, end: int) -> RegularAxis:
        """The blocks of elements ``begin:end`` of this axis (``0 <= begin <= end <= length``)."""
        return RegularAxis(self.start + begin, self.start + end, self.size, self.origin)

    def position(self, index: int) -> int:
        """Element ``index`` of this axis on the stored axis."""
        return self.start + index


@dataclass(frozen=True, eq=False)
class TableAxis:
    """Blocks between consecutive ``edges`` (block boundaries on a stored axis, increasing).

    ``edges[0]`` is the first element shown, ``edges[-1]`` the end; ``[p, p]`` is an empty
    axis (one block of length 0).

    Examples
    --------
    >>> axis = TableAxis(np.array([0, 2, 7, 10]))
    >>> axis.chunks, axis.span(1)
    ((2, 5, 3), (2, 7))
    >>> axis.sliced(1, 8).chunks
    (1, 5, 1)
    """

    edges: np.ndarray

    @property
    def start(self) -> int:
        return int(self.edges[0])

    @property
    def stop(self) -> int:
        return int(self.edges[-1])

    @property
    def length(self) -> int:
        return self.stop - self.start

    @property
    def numblocks(self) -> int:
        return len(self.edges) - 1

    def span(self, block: int) -> tuple[int, int]:
        return int(self.edges[block]), int(self.edges[block + 1])

    @property
    def chunks(self) -> tuple[int, ...]:
        return tuple(np.diff(self.edges).tolist())

    def block_end(self, index: int) -> int:
        return int(self.edges[np.searchsorted(self.edges, self.start + index, "right")]) - self.start

    def shifted(self, offset: int) -> TableAxis:
        """The same blocks ``offset`` elements further along the stored axis."""
        return TableAxis(self.edges + offset)

    def sliced(self, begin: int, end: int) -> TableAxis:
        first, last = self.start + begin, self.start + end
        if first == last:
            return TableAxis(np.array([first, first], dtype=np.int64))
        inside = self.edges[np.searchsorted(self.edges, first, "right") : np.searchsorted(self.edges, last, "left")]
        return TableAxis(np.concatenate([[first], inside, [last]]).astype(np.int64))

    def position(self, index: int) -> int:
        return self.start + index

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TableAxis) and np.array_equal(self.edges, other.edges)

    def __hash__(self) -> int:
        return hash(self.edges.tobytes())

    def __dask_tokenize__(self) -> Any:
        return ("zarrx.TableAxis", self.edges.tobytes())


Axis = Union[RegularAxis, TableAxis]


def regular_axis(length: int, size: int) -> RegularAxis:
    """Blocks of ``size`` over a whole axis of ``length`` elements (the last one may be shorter).

    Examples
    --------
    >>> regular_axis(10, 4).chunks, regular_axis(0, 4).chunks
    ((4, 4, 2), (0,))
    """
    return RegularAxis(0, length, max(1, size))


def axis_from_sizes(sizes: Sequence[int]) -> Axis:
    """The description of dask block sizes ``sizes`` along an axis.

    Blocks all of one size but a smaller last one are regular; anything else keeps a table
    (blocks of size 0 among others too, though such an axis is not :func:`sliceable`).

    Examples
    --------
    >>> axis_from_sizes((4, 4, 2))
    RegularAxis(start=0, stop=10, size=4, origin=0)
    >>> axis_from_sizes((2, 5, 3)).chunks
    (2, 5, 3)
    >>> sliceable(axis_from_sizes((5, 0, 5)))
    False
    """
    sizes = tuple(sizes)
    size = regular_size(sizes)
    if size is not None and (size or len(sizes) == 1):
        return regular_axis(sum(sizes), size)
    table = np.fromiter(sizes, dtype=np.int64, count=len(sizes))
    return TableAxis(np.concatenate([[0], np.cumsum(table)]))


def sliceable(axis: Axis) -> bool:
    """Whether slicing ``axis`` gives dask's blocks: dask's slicing drops blocks of size 0, this
    module keeps them, so an axis with such blocks among others is left to dask."""
    return isinstance(axis, RegularAxis) or axis.numblocks == 1 or bool(np.diff(axis.edges).all())
