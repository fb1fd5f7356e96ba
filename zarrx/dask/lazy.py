"""Dask arrays that read a stored array block by block, built with dask's public constructors.

:func:`lazy_array` makes an ordinary ``dask.array.Array`` reading a :class:`Layout`: the
:class:`Source` (a task function and its argument, such as an
:class:`~zarrx.io.handle.ArrayHandle`) and, for each axis of the source, either the blocks shown
along it (:mod:`zarrx.dask.axes`: a few numbers, or a table of block boundaries for an irregular
axis) or the one position an integer index picked. The graph is one ``Blockwise`` layer whose
tasks are made only when dask culls it for the blocks a computation needs
(:class:`BlockSelections`, a ``dask.layers.ArrayBlockwiseDep``, makes each block's selection on
demand), so it fuses with elementwise work like any dask read (:func:`read_layer` finds it in a
graph).

Everything done to the array afterwards is dask's own: a slice of it is dask's slice, sharing the
read tasks of the array it came from, so ``x[1:] - x[:-1]`` reads each chunk once. What follows
the selection instead of the array is chosen when the array is made: :func:`select` (the
``region=`` of :func:`zarrx.from_zarr` and :meth:`zarrx.Array.to_dask`) builds the read of a
basic selection's bounding box only -- a graph of the touched blocks, whatever the array's size --
and applies what is left (steps, new axes) with dask's slicing. With dask's array expressions
(``array.query-planning``) the read is an input expression that takes the slices dask's optimiser
pushes into it (:mod:`zarrx.dask.expression`).

Nothing of dask is replaced or wrapped: the arrays are dask's own class, made by its constructor.
"""

from __future__ import annotations

from typing import Any

import dask.array as da
import numpy as np
from dask.task_spec import TaskRef
from dask.blockwise import Blockwise, blockwise
from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

from zarrx.dask.layout import BlockSelections, Layout, Source, original_key, plan_selection

__all__ = ["lazy_array", "read_layer", "select"]


# -- the array ---------------------------------------------------------------------------------
def lazy_array(
    layout: Layout, dtype: Any, name: str | None = None, chunks: tuple[tuple[int, ...], ...] | None = None
) -> da.Array:
    """A ``dask.array.Array`` reading ``layout``: one ``Blockwise`` layer, made by dask's own
    constructor (with dask's array expressions, an input expression: :mod:`zarrx.dask.expression`).

    ``chunks`` may give the block sizes when the caller has them (they must be the layout's).

    Examples
    --------
    >>> import zarrx, numpy as np
    >>> arr = zarrx.create_array({}, shape=(1_000, 4), chunks=(1, 4), dtype="int32", fill_value=7)
    >>> x = arr.to_dask()
    >>> type(x).__name__, x.numblocks, x.chunksize
    ('Array', (1000, 1), (1, 4))
    >>> y = x[10:13, 1]           # dask's own slice, over x's read tasks
    >>> y.chunks, y.compute()
    (((1, 1, 1),), array([7, 7, 7], dtype=int32))
    """
    name = name or layout.name
    meta = np.empty((0,) * len(layout.block_axes), dtype=dtype)
    if da.array_expr_enabled():
        from zarrx.dask.expression import read_expression_array

        return read_expression_array(layout, meta, name)
    if chunks is None:
        chunks = tuple(axis.chunks for axis in layout.block_axes)
    indices = tuple(range(len(chunks)))
    source = layout.source
    argument = source.argument if source.inline else TaskRef(original_key(name))
    layer = blockwise(
        source.read, name, indices, argument, None, BlockSelections(layout.axes, chunks), indices, numblocks={}
    )
    if source.inline:
        graph = HighLevelGraph.from_collections(name, layer, dependencies=())
    else:  # the argument as a key of its own, as dask's from_array(..., inline_array=False) makes it
        original = original_key(name)
        layers = {original: MaterializedLayer({original: source.argument}), name: layer}
        graph = HighLevelGraph(layers, {original: set(), name: {original}})
    return da.Array(graph, name, chunks, meta=meta)


def select(layout: Layout, dtype: Any, index: Any) -> da.Array:
    """The dask array of ``layout`` selected by a basic ``index``, built over the touched blocks only.

    The index is what ``x[index]`` takes -- integers, slices (any step), ``Ellipsis``, ``None``
    -- and the result is what dask's ``x[index]`` gives (its blocks and values), but the graph
    holds only the blocks of the selection's bounding box.

    Examples
    --------
    >>> import zarrx
    >>> arr = zarrx.create_array({}, shape=(10**6, 4), chunks=(10, 4), dtype="int8", fill_value=1)
    >>> y = arr.to_dask(region=(slice(25, 50), 2))
    >>> y.chunks, len(y.dask), int(y.sum())
    (((5, 10, 10),), 3, 25)
    """
    plan = plan_selection(index, layout.block_axes) if layout.sliceable else None
    if plan is None:
        raise TypeError(f"a region is a basic selection (integers, slices, Ellipsis, None), not {index!r}")
    box, rest = plan
    part = lazy_array(layout.region(box), dtype)
    if all(item == slice(None) for item in rest):
        return part
    return part[rest]  # steps and new axes: dask's slicing, on the small array


def read_layer(x: Any) -> Blockwise | None:
    """The read layer of zarrx's in the graph of dask array ``x``, if there is one.

    Examples
    --------
    >>> import dask.array as da, zarrx
    >>> read_layer(zarrx.create_array({}, shape=(4,), chunks=(2,), dtype="i1").to_dask()) is not None
    True
    >>> read_layer(da.ones(4)) is None
    True
    """
    layers = getattr(getattr(x, "dask", None), "layers", {})
    for layer in layers.values():
        if isinstance(layer, Blockwise) and any(isinstance(dep, BlockSelections) for dep in layer.io_deps.values()):
            return layer
    return None
