"""Dask arrays whose graph cost follows the selection, not the number of chunks.

A :class:`LazyArray` is a ``dask.array.Array`` that reads a stored array block by block and
knows *what* it reads: a :class:`Layout` -- the :class:`Source` (a task function and its
argument, such as an :class:`~zarrx.io.handle.ArrayHandle`) and, for each axis of the source,
either the blocks shown along it (:mod:`zarrx.dask.axes`: a few numbers, or a table of block
boundaries for an irregular axis) or the one position an integer index picked. From that:

* building the array, its ``shape``, ``chunksize``, ``numblocks`` and ``len`` cost O(ndim),
  whatever the number of blocks; ``chunks`` (a tuple per block, which dask itself walks in
  Python) is made on first use only;
* the graph is one ``Blockwise`` layer whose tasks exist only once dask culls it for the blocks
  a computation needs (:class:`BlockSelections` makes each block's selection on demand), so it
  fuses with elementwise work like any dask read;
* indexing with integers, slices (any step), ``Ellipsis`` and ``None`` first cuts the bounding
  box of the selection as a *new*, small read layer over the touched blocks only -- the result
  no longer refers to the million-block layer, so computing it culls a graph of its own size --
  and then applies what is left (steps, new axes) with dask's own slicing on the small array.
  The blocks are dask's: a step-1 slice gives the touched blocks cut at its ends, an empty one
  a single block of length 0 (``tests/test_dask_lazy.py`` checks chunks and values against
  plain dask and NumPy on random chains of selections).

Anything else -- arrays, lists and boolean masks as indices, assignment, every other
operation -- is plain dask on the same graph, with plain dask's results and costs; an
operation that changes the array in place (``x[...] = v``) turns it into a plain dask array.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable

import dask
import dask.array as da
import numpy as np
from dask.array.slicing import normalize_index, replace_ellipsis
from dask.base import tokenize
from dask.blockwise import blockwise
from dask.highlevelgraph import HighLevelGraph
from dask.layers import ArrayBlockwiseDep

from zarrx.dask.axes import Axis, axis_from_sizes, sliceable

__all__ = ["BlockSelections", "LazyArray", "Layout", "Source"]


@dataclass(frozen=True, eq=False)
class Source:
    """What blocks are read from: task ``read(argument, selection)`` returns the block at ``selection``.

    ``read`` is a module-level function (tasks run on other processes); ``selection`` holds a
    slice for each block axis and an integer for each axis an integer index dropped. ``token``
    identifies the data (names of arrays over it derive from it), ``prefix`` starts those names.
    """

    read: Callable[[Any, tuple[slice | int, ...]], np.ndarray]
    argument: Any
    token: str
    prefix: str


@dataclass(frozen=True, eq=False)
class Layout:
    """The part of a :class:`Source` a :class:`LazyArray` shows, and its blocks.

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

    @property
    def chunks(self) -> tuple[tuple[int, ...], ...]:
        return tuple(axis.chunks for axis in self.block_axes)

    @property
    def chunksize(self) -> tuple[int, ...]:
        return tuple(axis.chunksize for axis in self.block_axes)

    @cached_property
    def sliceable(self) -> bool:
        return all(sliceable(axis) for axis in self.block_axes)

    @cached_property
    def name(self) -> str:
        return f"{self.source.prefix}-{tokenize(self.source.token, self.axes)}"

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
    """The selection of each dask block, made only when dask asks for it (a ``BlockwiseDep``).

    Like ``dask.layers.ArraySliceDep`` without its cumulative sum over every block: a block's
    slices come from the axis descriptions; axes an integer dropped get that integer. Built from
    a :class:`Layout`'s ``axes`` or from dask ``chunks``.

    Examples
    --------
    >>> selections = BlockSelections(((4, 4, 2), (3, 5, 1)))
    >>> selections[(2, 1)], selections.numblocks
    ((slice(8, 10, None), slice(3, 8, None)), (3, 3))
    """

    produces_tasks = False

    def __init__(self, axes: tuple[Axis | int | tuple[int, ...], ...]) -> None:
        # not ArrayBlockwiseDep.__init__: it keeps ``chunks``, a tuple per block
        self.axes = tuple(axis_from_sizes(axis) if isinstance(axis, (tuple, list)) else axis for axis in axes)
        self.numblocks = tuple(axis.numblocks for axis in self.axes if not isinstance(axis, int))

    @property  # type: ignore[override]
    def chunks(self) -> tuple[tuple[int, ...], ...]:
        return tuple(axis.chunks for axis in self.axes if not isinstance(axis, int))

    def __getitem__(self, idx: tuple[int, ...]) -> tuple[slice | int, ...]:
        blocks = iter(idx)
        return tuple(axis if isinstance(axis, int) else slice(*axis.span(next(blocks))) for axis in self.axes)

    def __dask_tokenize__(self) -> tuple[Any, ...]:
        return ("zarrx.dask.BlockSelections", tokenize(self.axes))


# -- the array ---------------------------------------------------------------------------------
class LazyArray(da.Array):
    """A dask array reading a :class:`Layout`: see the module docstring for what it does cheaply.

    Build one with ``LazyArray(layout, dtype)``; :func:`zarrx.from_zarr` and
    :meth:`zarrx.Array.to_dask` return them.

    Examples
    --------
    >>> import zarrx, numpy as np
    >>> arr = zarrx.create_array({}, shape=(1_000_000, 4), chunks=(1, 4), dtype="int32", fill_value=7)
    >>> x = arr.to_dask()
    >>> x.numblocks, x.chunksize
    ((1000000, 1), (1, 4))
    >>> y = x[10:13, 1]           # a new read layer: one layer, three tasks
    >>> y.chunks, len(y.dask.layers), len(y.dask), y.compute()
    (((1, 1, 1),), 1, 3, array([7, 7, 7], dtype=int32))
    """

    #: the layout read; None once the array was changed in place (then it is plain dask)
    _layout: Layout | None = None

    def __new__(cls, layout: Layout, dtype: Any, name: str | None = None) -> LazyArray:
        self = object.__new__(cls)
        name = name or layout.name
        indices = tuple(range(len(layout.block_axes)))
        layer = blockwise(
            layout.source.read,
            name,
            indices,
            layout.source.argument,
            None,
            BlockSelections(layout.axes),
            indices,
            numblocks={},
            _data_producer=True,
        )
        self.dask = HighLevelGraph.from_collections(name, layer, dependencies=())
        self._name = name
        self._meta = np.empty((0,) * len(indices), dtype=dtype)
        self._layout = layout
        self._layout_name = name
        for plugin in dask.config.get("array_plugins", ()):  # as dask.array.Array does
            result = plugin(self)
            if result is not None:
                self = result
        return self

    def _live_layout(self) -> Layout | None:
        """The layout, if this array still reads exactly it."""
        layout = self._layout
        return layout if layout is not None and self._name == self._layout_name else None

    # -- what dask computes from ``chunks``, from the layout instead ---------------------------
    @property
    def chunks(self) -> tuple[tuple[int, ...], ...]:
        try:
            return self._Array__chunks
        except AttributeError:  # made on first use: a tuple per block
            chunks = self._Array__chunks = self._layout.chunks
            return chunks

    @property
    def _chunks(self) -> tuple[tuple[int, ...], ...]:
        return self.chunks

    @_chunks.setter
    def _chunks(self, chunks: tuple[tuple[int, ...], ...]) -> None:
        da.Array._chunks.fset(self, chunks)
        self._layout = None  # changed in place (x[...] = v): plain dask from now on

    @property
    def shape(self) -> tuple[int, ...]:
        layout = self._live_layout()
        return layout.shape if layout is not None else da.Array.shape.__get__(self, type(self))

    @property
    def numblocks(self) -> tuple[int, ...]:
        layout = self._live_layout()
        return layout.numblocks if layout is not None else da.Array.numblocks.__get__(self, type(self))

    @property
    def chunksize(self) -> tuple[int, ...]:
        layout = self._live_layout()
        return layout.chunksize if layout is not None else da.Array.chunksize.__get__(self, type(self))

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    def copy(self) -> da.Array:
        layout = self._live_layout()
        if layout is None or self.npartitions == 1:
            return super().copy()
        return LazyArray(layout, self.dtype, self.name)

    # -- indexing ------------------------------------------------------------------------------
    def __getitem__(self, index: Any) -> da.Array:
        layout = self._live_layout()
        plan = _plan(index, layout.block_axes) if layout is not None and layout.sliceable else None
        if plan is None:
            return super().__getitem__(index)
        box, rest = plan
        if all(not isinstance(pick, int) and pick == (0, length) for pick, length in zip(box, self.shape)):
            part: da.Array = self
        else:
            part = LazyArray(layout.region(box), self.dtype)
        if all(item == slice(None) for item in rest):
            return part
        return da.Array.__getitem__(part, rest)  # steps and new axes, on the small array


#: index items the bounding box handles (anything else goes to dask)
_SIMPLE = (int, np.integer, slice, type(Ellipsis), type(None))


def _plan(index: Any, axes: tuple[Axis, ...]) -> tuple[tuple[int | tuple[int, int], ...], tuple[Any, ...]] | None:
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
