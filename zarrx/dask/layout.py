"""What a zarrx dask array reads: a :class:`Source`, the :class:`Layout` of its blocks, each
block's selection (:class:`BlockSelections`) and the bounding box of a basic selection
(:func:`plan_selection`) -- the values :mod:`zarrx.dask.lazy` (dask's arrays) and
:mod:`zarrx.dask.expression` (dask's array expressions) both build from.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable

import numpy as np
from dask.array.slicing import normalize_index, replace_ellipsis
from dask.base import tokenize
from dask.layers import ArrayBlockwiseDep

from zarrx.dask.axes import Axis, axis_from_sizes, sliceable

__all__ = ["BlockSelections", "Layout", "Source", "original_key", "plan_selection"]


@dataclass(frozen=True, eq=False)
class Source:
    """What blocks are read from: task ``read(argument, selection)`` returns the block at ``selection``.

    ``read`` is a module-level function (tasks run on other processes); ``selection`` holds a
    slice for each block axis and an integer for each axis an integer index dropped. ``token``
    identifies the data (names of arrays over it derive from it), ``prefix`` starts those names.
    ``inline`` False puts ``argument`` in the graph as a key of its own that every task refers
    to, as ``dask.array.from_array(..., inline_array=False)`` puts its array; True (the default)
    gives each task the argument itself.
    """

    read: Callable[[Any, tuple[slice | int, ...]], np.ndarray]
    argument: Any
    token: str
    prefix: str
    inline: bool = True


def original_key(name: str) -> str:
    """The graph key of a non-inline :class:`Source`'s argument in the dask array ``name`` (the
    key ``dask.array.from_array(..., inline_array=False)`` gives its array)."""
    return f"original-{name}"


@dataclass(frozen=True, eq=False)
class Layout:
    """The part of a :class:`Source` an array of :func:`lazy_array` shows, and its blocks.

    ``axes`` has one entry per axis of the source: an :data:`~zarrx.dask.axes.Axis` (the array
    shows that axis, in those blocks) or an ``int`` (an integer index picked that position and
    dropped the axis).
    """

    source: Source
    axes: tuple[Axis | int, ...]

    @cached_property
    def block_axes(self) -> tuple[Axis, ...]:
        return tuple(axis for axis in self.axes if not isinstance(axis, int))

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(axis.length for axis in self.block_axes)

    @property
    def numblocks(self) -> tuple[int, ...]:
        return tuple(axis.numblocks for axis in self.block_axes)

    @cached_property
    def sliceable(self) -> bool:
        return all(sliceable(axis) for axis in self.block_axes)

    @cached_property
    def name(self) -> str:
        return f"{self.source.prefix}-{tokenize(self.source.token, self.axes)}"

    def __dask_tokenize__(self) -> str:
        return self.name

    def region(self, box: tuple[int | tuple[int, int], ...]) -> Layout:
        """The layout of ``box`` (per block axis: an integer position, or ``(begin, end)``)."""
        picks = iter(box)
        axes: list[Axis | int] = []
        for axis in self.axes:
            if isinstance(axis, int):
                axes.append(axis)
                continue
            pick = next(picks)
            axes.append(axis.position(pick) if isinstance(pick, int) else axis.sliced(*pick))
        return Layout(self.source, tuple(axes))


class BlockSelections(ArrayBlockwiseDep):
    """The selection of each dask block, made only when dask asks for it (an ``ArrayBlockwiseDep``).

    Like ``dask.layers.ArraySliceDep`` without its cumulative sum over every block: a block's
    slices come from the axis descriptions; axes an integer dropped get that integer. Built from
    a :class:`Layout`'s ``axes`` or from dask ``chunks`` (``chunks`` may be given beside the axes
    when the caller has them: they must be the axes').

    Examples
    --------
    >>> selections = BlockSelections(((4, 4, 2), (3, 5, 1)))
    >>> selections[(2, 1)], selections.numblocks
    ((slice(8, 10, None), slice(3, 8, None)), (3, 3))
    """

    def __init__(
        self, axes: tuple[Axis | int | tuple[int, ...], ...], chunks: tuple[tuple[int, ...], ...] | None = None
    ) -> None:
        self.axes = tuple(axis_from_sizes(axis) if isinstance(axis, (tuple, list)) else axis for axis in axes)
        if chunks is None:
            chunks = tuple(axis.chunks for axis in self.axes if not isinstance(axis, int))
        super().__init__(chunks)

    def __getitem__(self, idx: tuple[int, ...]) -> tuple[slice | int, ...]:
        if len(idx) == len(self.axes):  # no axis dropped: the common case, once per task
            return tuple([slice(*axis.span(block)) for axis, block in zip(self.axes, idx)])
        blocks = iter(idx)
        return tuple(axis if isinstance(axis, int) else slice(*axis.span(next(blocks))) for axis in self.axes)

    def __dask_tokenize__(self) -> tuple[Any, ...]:
        return ("zarrx.dask.BlockSelections", tokenize(self.axes))


#: index items the bounding box handles (anything else goes to dask)
_SIMPLE = (int, np.integer, slice, type(Ellipsis), type(None))


def plan_selection(index: Any, axes: tuple[Axis, ...]) -> tuple[tuple[int | tuple[int, int], ...], tuple[Any, ...]] | None:
    """The box to read for a basic ``index`` (per axis: a position or ``(begin, end)``) and what is
    left to apply to it (steps, new axes) with dask's slicing; None for other indices.

    The box is the selection's bounding box, but for a positive step it reaches the end of the
    block holding the slice's stop: dask keeps that block (empty) when the next element the step
    would pick lies in it, and the box keeps dask's blocks exact.
    """
    items = index if isinstance(index, tuple) else (index,)
    if not all(isinstance(item, _SIMPLE) and not isinstance(item, (bool, np.bool_)) for item in items):
        return None
    shape = tuple(axis.length for axis in axes)
    checked = normalize_index(items, shape)  # dask's checks and IndexErrors
    # ... but each slice's own bounds: dask's normalized form of an empty negative-step slice
    # starting before the array selects elements (dask issue 10555); NumPy's answer is kept here
    given = replace_ellipsis(len(shape), items)
    given += (slice(None),) * (len(checked) - len(given))
    box: list[int | tuple[int, int]] = []
    rest: list[Any] = []
    remaining = iter(axes)
    for item, original in zip(checked, given):
        if item is None:
            rest.append(None)
            continue
        axis = next(remaining)
        length = axis.length
        if not isinstance(item, slice):
            box.append(operator.index(item))
            continue
        start, stop, step = original.indices(length)
        count = len(range(start, stop, step))
        if count == 0:
            box.append((0, 0))
            rest.append(slice(None))
        elif step == 1:
            box.append((start, stop))
            rest.append(slice(None))
        elif step > 0:
            box.append((start, axis.block_end(stop - 1)))
            rest.append(slice(None, stop - start, step))
        else:
            box.append((start + (count - 1) * step, start + 1))
            rest.append(slice(None, None, step))
    return tuple(box), tuple(rest)
