"""The read as an input expression of dask's array expressions (``array.query-planning``).

With ``DASK_ARRAY__QUERY_PLANNING=True`` (dask's config ``array.query-planning``, read when
``dask.array`` is first imported) a dask array is an expression that dask's optimiser rewrites
before it builds a graph. :class:`ReadExpression` is zarrx's read in that world: an input
expression over a :class:`~zarrx.dask.layout.Layout` that, when its only user is a slice, takes
the slice in (:meth:`ReadExpression._simplify_up`) and becomes the read of the slice's bounding
box -- so ``from_zarr(store)[:10].sum()`` builds the tasks of ten blocks, whatever the array's
size, with no patch of anything. When the read has other users (``x[1:] - x[:-1]``,
``compute(x.sum(), x[:10].sum())``) nothing is pushed in: the slices stay dask's, over the one
read, and every chunk is read once.

dask offers no public base class for input expressions yet: this module uses
``dask.array._array_expr._io.IO`` and ``dask._collections.new_collection``, as dask's own
``from_array`` does, and is the one place that does (docs/giant-datasets.md names the upstream
change that would make it public).
"""

from __future__ import annotations

import functools
import itertools
from typing import Any

import numpy as np
from dask._collections import new_collection
from dask.task_spec import Task, TaskRef
from dask.array._array_expr._io import IO
from dask.array._array_expr._slicing import SliceSlicesIntegers

from zarrx.dask.layout import BlockSelections, Layout, original_key, plan_selection

__all__ = ["ReadExpression", "read_expression_array"]


class ReadExpression(IO):
    """Reading ``layout`` block by block: one task per block, ``read(argument, selection)``."""

    _parameters = ["layout", "meta", "name"]

    @functools.cached_property
    def _name(self) -> str:
        return self.operand("name")

    @functools.cached_property
    def _meta(self) -> np.ndarray:
        return self.operand("meta")

    @functools.cached_property
    def chunks(self) -> tuple[tuple[int, ...], ...]:
        # not an operand: operands are tokenized, and a million-block axis is a million sizes
        return tuple(axis.chunks for axis in self.operand("layout").block_axes)

    @functools.cached_property
    def shape(self) -> tuple[int, ...]:
        return self.operand("layout").shape  # not a running sum over the blocks

    @functools.cached_property
    def numblocks(self) -> tuple[int, ...]:
        return self.operand("layout").numblocks

    def _layer(self) -> dict:
        layout: Layout = self.operand("layout")
        selections = BlockSelections(layout.axes)
        read, argument, name = layout.source.read, layout.source.argument, self._name
        graph: dict = {}
        if not layout.source.inline:  # the argument as a key of its own (inline_array=False)
            graph[original_key(name)] = argument
            argument = TaskRef(original_key(name))
        for block in itertools.product(*(range(count) for count in selections.numblocks)):
            key = (name, *block)
            graph[key] = Task(key, read, argument, selections[block])
        return graph

    def _simplify_up(self, parent: Any, dependents: Any) -> Any:
        """A slice that is the read's only user becomes the read of its bounding box."""
        if type(parent) is not SliceSlicesIntegers or len(dependents[self._name]) > 1:
            return None
        layout: Layout = self.operand("layout")
        plan = plan_selection(parent.index, layout.block_axes) if layout.sliceable else None
        if plan is None:
            return None
        box, rest = plan
        if all(not isinstance(pick, int) and pick == (0, axis.length) for pick, axis in zip(box, layout.block_axes)):
            return None  # the whole read already
        part = layout.region(box)
        meta = np.empty((0,) * len(part.block_axes), dtype=self._meta.dtype)
        read = ReadExpression(part, meta, part.name)
        if all(item == slice(None) for item in rest):
            return read
        return new_collection(read)[rest].expr  # steps: dask's slicing of the small read

    def __str__(self) -> str:
        return f"ReadExpression({self._name})"


def read_expression_array(layout: Layout, meta: np.ndarray, name: str) -> Any:
    """The dask (expression) array reading ``layout``."""
    return new_collection(ReadExpression(layout, meta, name))
