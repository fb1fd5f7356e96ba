"""Dask arrays whose graph cost follows the selection, not the number of chunks.

:func:`lazy_array` builds a ``dask.array.Array`` that reads a stored array block by block and
knows *what* it reads: a :class:`Layout` -- the :class:`Source` (a task function and its
argument, such as an :class:`~zarrx.io.handle.ArrayHandle`) and, for each axis of the source,
either the blocks shown along it (:mod:`zarrx.dask.axes`: a few numbers, or a table of block
boundaries for an irregular axis) or the one position an integer index picked. From that:

* building the array and its ``shape``, ``numblocks``, ``npartitions`` and ``size`` cost
  O(ndim), whatever the number of blocks (dask's constructor walks every block in Python); its
  ``chunks`` -- dask's tuple per block -- are made in C, and shared by arrays with equal axes;
* the graph is one ``Blockwise`` layer whose tasks exist only once dask culls it for the blocks
  a computation needs (:class:`BlockSelections` makes each block's selection on demand), so it
  fuses with elementwise work like any dask read;
* indexing with integers, slices (any step), ``Ellipsis`` and ``None`` first cuts the bounding
  box of the selection as a *new*, small read layer over the touched blocks only -- the result
  no longer refers to the million-block layer, so computing it culls a graph of its own size --
  and then applies what is left (steps, new axes) with dask's own slicing on the small array.
  The blocks are dask's (``tests/test_dask_lazy_properties.py`` checks chunks and values
  against plain dask and NumPy on random chains of selections), with one difference: an empty
  negative-step slice starting before the array is empty, as in NumPy (dask issue 10555).

The array is of dask's own class (xarray refuses to mix array types in one dataset), so the
slicing is reached through it: the first :func:`lazy_array` wraps ``dask.array.Array.__getitem__``
once, and the wrapper hands every array :func:`lazy_array` did not build -- and every index
other than the above (lists, arrays, masks, dask arrays) -- to dask's own method unchanged.
Anything else is plain dask on the same graph, with plain dask's results and costs; an array
changed in place (``x[...] = v``) is plain dask from then on.
"""

from __future__ import annotations

import functools
import math
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

__all__ = ["BlockSelections", "Layout", "Source", "layout_of", "lazy_array"]


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
        if len(idx) == len(self.axes):  # no axis dropped: the common case, once per task
            return tuple([slice(*axis.span(block)) for axis, block in zip(self.axes, idx)])
        blocks = iter(idx)
        return tuple(axis if isinstance(axis, int) else slice(*axis.span(next(blocks))) for axis in self.axes)

    def __dask_tokenize__(self) -> tuple[Any, ...]:
        return ("zarrx.dask.BlockSelections", tokenize(self.axes))


# -- the array ---------------------------------------------------------------------------------
#: where a dask array built by :func:`lazy_array` keeps its layout (in the instance's ``__dict__``)
LAYOUT_KEY = "_zarrx_layout"


def lazy_array(
    layout: Layout, dtype: Any, name: str | None = None, chunks: tuple[tuple[int, ...], ...] | None = None
) -> da.Array:
    """A ``dask.array.Array`` reading ``layout``: one ``Blockwise`` layer, its shape and sizes set
    from the layout (no walk over the blocks); a basic index makes a new read layer over the
    blocks it touches (see the module docstring).

    ``chunks`` may give the block sizes when the caller has them (they must be the layout's).

    Examples
    --------
    >>> import zarrx, numpy as np
    >>> arr = zarrx.create_array({}, shape=(1_000_000, 4), chunks=(1, 4), dtype="int32", fill_value=7)
    >>> x = arr.to_dask()
    >>> type(x).__name__, x.numblocks, x.chunksize
    ('Array', (1000000, 1), (1, 4))
    >>> y = x[10:13, 1]           # a new read layer: one layer, three tasks
    >>> y.chunks, len(y.dask.layers), len(y.dask), y.compute()
    (((1, 1, 1),), 1, 3, array([7, 7, 7], dtype=int32))
    """
    _wrap_dask_getitem()
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
    # dask.array.Array's constructor walks every block in Python (its shape is a running sum of
    # the block sizes): the attributes are set here instead, the ones it derives from the layout
    array = object.__new__(da.Array)
    array.dask = HighLevelGraph.from_collections(name, layer, dependencies=())
    array._name = name
    array._meta = np.empty((0,) * len(indices), dtype=dtype)
    array._chunks = chunks if chunks is not None else tuple(_axis_chunks(axis) for axis in layout.block_axes)
    shape = layout.shape
    numblocks = layout.numblocks
    array.__dict__.update(
        shape=shape,
        ndim=len(shape),
        size=math.prod(shape),
        numblocks=numblocks,
        npartitions=math.prod(numblocks),
    )
    array.__dict__[LAYOUT_KEY] = (layout, name)
    for plugin in dask.config.get("array_plugins", ()):  # as dask.array.Array's constructor does
        result = plugin(array)
        if result is not None:
            array = result
    return array


@functools.lru_cache(maxsize=16)
def _axis_chunks(axis: Axis) -> tuple[int, ...]:
    """An axis' block sizes, one tuple for equal axes (the variables of a dataset share their time axis)."""
    return axis.chunks


def layout_of(array: Any) -> Layout | None:
    """The layout ``array`` reads, if :func:`lazy_array` built it and it was not changed since
    (``x[...] = v`` changes a dask array in place: it is plain dask from then on).

    Examples
    --------
    >>> import dask.array as da, zarrx
    >>> layout_of(zarrx.create_array({}, shape=(4,), chunks=(2,), dtype="i1").to_dask()) is not None
    True
    >>> layout_of(da.ones(4)) is None
    True
    """
    entry = getattr(array, "__dict__", {}).get(LAYOUT_KEY)
    if entry is None or not isinstance(array, da.Array) or entry[1] != array.name:
        return None
    return entry[0]


def _getitem(self: da.Array, index: Any, dask_getitem: Callable[[da.Array, Any], da.Array]) -> da.Array:
    """``dask.array.Array.__getitem__`` (``dask_getitem``), by a new read layer for the arrays
    :func:`lazy_array` built."""
    layout = layout_of(self)
    plan = _plan(index, layout.block_axes) if layout is not None and layout.sliceable else None
    if plan is None:
        return dask_getitem(self, index)
    box, rest = plan
    if all(not isinstance(pick, int) and pick == (0, axis.length) for pick, axis in zip(box, layout.block_axes)):
        part = self
    else:
        part = lazy_array(layout.region(box), self.dtype)
    if all(item == slice(None) for item in rest):
        return part
    return dask_getitem(part, rest)  # steps and new axes, on the small array


def _wrap_dask_getitem() -> None:
    """Wrap ``dask.array.Array.__getitem__`` -- whatever it is by then -- unless it already is.

    The arrays zarrx builds are dask's own class (xarray refuses to mix array types in one
    dataset, and code tests ``type(x) is da.Array``), so their slicing is reached through the
    class; an array :func:`lazy_array` did not build goes straight to the method wrapped."""
    wrapped = da.Array.__getitem__
    if getattr(wrapped, "_zarrx_lazy", False):
        return

    @functools.wraps(wrapped)
    def __getitem__(self: da.Array, index: Any) -> da.Array:
        return _getitem(self, index, wrapped)

    __getitem__._zarrx_lazy = True  # type: ignore[attr-defined]
    da.Array.__getitem__ = __getitem__  # type: ignore[method-assign]


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
