"""The ``rectilinear`` chunk grid (zarr-extensions chunk-grids/rectilinear): chunk edges per dimension.

``{"name": "rectilinear", "configuration": {"kind": "inline", "chunk_shapes": [...]}}``, one entry
per dimension: an integer (chunks of that length along the dimension, as in a regular grid) or a
list of edge lengths, where ``[v, n]`` stands for ``n`` edges of length ``v`` (run-length
encoding). The edges of a dimension must add up to at least its length; chunks past it are
permitted and hold nothing. A chunk is stored at its declared size: the part of an edge chunk
past the array's end holds the fill value, as with a regular grid.

In memory a dimension is its step (an int) or its edges (a tuple), and the I/O layer asks for
:meth:`RectilinearChunkGrid.dimensions`: the step, or the chunks' start offsets as a NumPy array
-- a dimension whose edges are all equal is a step, so it takes the regular fast path. Written
back as ``chunk_shapes`` with runs of equal edges encoded ``[v, n]``. A dimension may list at
most :data:`MAX_EDGES` edges (every read keeps their offsets in memory).

A resize that grows a dimension past its edges repeats the last edge, as a regular grid would;
:meth:`RectilinearChunkGrid.with_appended` instead adds one chunk of the appended length (what
``Array.append`` does when the edges end at the array's end).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Iterator

import numpy as np

from zarrx.errors import MetadataError
from zarrx.extension import parse_extension

__all__ = ["RectilinearChunkGrid", "MAX_EDGES", "is_edge_list", "grid_blocks"]

#: most explicit chunk edges one dimension may list (their offsets are kept in memory)
MAX_EDGES = 2**22
_FIELD = "chunk_grid.configuration.chunk_shapes"

Dimension = int | tuple[int, ...]


def _positive(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise MetadataError(f"{where}: expected a positive integer, found {value!r}")
    return int(value)


def _parse_dimension(value: Any, where: str) -> Dimension:
    """One ``chunk_shapes`` entry: a step, or the edges with run-length pairs expanded."""
    if not isinstance(value, (list, tuple)):
        return _positive(value, where)
    edges: list[int] = []
    for position, item in enumerate(value):
        if isinstance(item, (list, tuple)):
            if len(item) != 2:
                raise MetadataError(f"{where}[{position}]: a run is [edge length, count], found {item!r}")
            edge, count = _positive(item[0], f"{where}[{position}][0]"), _positive(item[1], f"{where}[{position}][1]")
        else:
            edge, count = _positive(item, f"{where}[{position}]"), 1
        if len(edges) + count > MAX_EDGES:
            raise MetadataError(f"{where}: more than {MAX_EDGES} chunk edges; zarrx keeps every edge's offset in memory")
        edges.extend([edge] * count)
    if not edges:
        raise MetadataError(f"{where}: expected at least one edge length, found []")
    return tuple(edges)


def _run_length(edges: tuple[int, ...]) -> list[Any]:
    """Edges as JSON: runs of two or more equal edges as ``[edge, count]``."""
    return [edge if count == 1 else [edge, count] for edge, count in ((e, len(list(g))) for e, g in itertools.groupby(edges))]


def is_edge_list(value: Any) -> bool:
    """Whether a user's ``chunks`` lists edges for some dimension (``((3, 3, 4), 5)``): a rectilinear grid."""
    return isinstance(value, (list, tuple)) and any(isinstance(item, (list, tuple)) for item in value)


@dataclass(frozen=True)
class RectilinearChunkGrid:
    """Chunk edges per dimension: an int (a step) or a tuple of edge lengths.

    Examples
    --------
    >>> grid = RectilinearChunkGrid.from_json(
    ...     {"name": "rectilinear", "configuration": {"kind": "inline", "chunk_shapes": [[[3, 2], 4], 5]}})
    >>> grid.chunk_shapes, grid.grid_shape((10, 12))
    (((3, 3, 4), 5), (3, 3))
    >>> grid.chunk_shape_at((2, 0)), grid.to_json()["configuration"]["chunk_shapes"]
    ((4, 5), [[[3, 2], 4], 5])
    """

    chunk_shapes: tuple[Dimension, ...]

    name = "rectilinear"
    is_regular = False

    def __post_init__(self) -> None:
        dimensions = tuple(
            _parse_dimension(value, f"{_FIELD}[{dim}]") for dim, value in enumerate(self.chunk_shapes)
        )
        object.__setattr__(self, "chunk_shapes", dimensions)

    @classmethod
    def from_json(cls, value: Any) -> "RectilinearChunkGrid":
        extension = parse_extension(value, "chunk_grid")
        configuration = extension.configuration
        unexpected = set(configuration) - {"kind", "chunk_shapes"}
        if unexpected:
            raise MetadataError(f"chunk_grid.configuration: unexpected members {sorted(unexpected)}")
        if configuration.get("kind") != "inline":
            raise MetadataError(f"chunk_grid.configuration.kind: expected 'inline', found {configuration.get('kind')!r}")
        shapes = configuration.get("chunk_shapes")
        if not isinstance(shapes, list):
            raise MetadataError(f"{_FIELD}: expected a list with one entry per dimension, found {shapes!r}")
        return cls(tuple(shapes))

    def to_json(self) -> dict[str, Any]:
        shapes = [d if isinstance(d, int) else _run_length(d) for d in self.chunk_shapes]
        return {"name": self.name, "configuration": {"kind": "inline", "chunk_shapes": shapes}}

    def validate(self, shape: tuple[int, ...]) -> None:
        if len(self.chunk_shapes) != len(shape):
            raise MetadataError(
                f"{_FIELD}: expected {len(shape)} entries to match shape {list(shape)}, found {len(self.chunk_shapes)}"
            )
        for dim, (dimension, length) in enumerate(zip(self.chunk_shapes, shape)):
            if isinstance(dimension, tuple) and sum(dimension) < length:
                raise MetadataError(
                    f"{_FIELD}[{dim}]: the edges add up to {sum(dimension)}, less than the dimension's length {length}"
                )

    @property
    def ndim(self) -> int:
        return len(self.chunk_shapes)

    # -- per dimension -----------------------------------------------------------------------
    @cached_property
    def _offsets(self) -> tuple[np.ndarray | None, ...]:
        """The start of every declared chunk and the end of the last, per listed dimension."""
        return tuple(
            None if isinstance(d, int) else np.concatenate([[0], np.cumsum(d, dtype=np.int64)]) for d in self.chunk_shapes
        )

    def _count(self, dim: int, length: int) -> int:
        """How many chunks of dimension ``dim`` hold elements of an array ``length`` long."""
        dimension = self.chunk_shapes[dim]
        if isinstance(dimension, int):
            return -(-length // dimension)
        return int(np.searchsorted(self._offsets[dim], length, side="left"))  # chunks starting before length

    @cached_property
    def _steps(self) -> tuple[int | None, ...]:
        """Per dimension, the step when every edge is alike (or an int was given), else None."""
        return tuple(d if isinstance(d, int) else (d[0] if len(set(d)) == 1 else None) for d in self.chunk_shapes)

    def dimensions(self, shape: tuple[int, ...]) -> tuple[int | np.ndarray, ...]:
        """Per dimension, the step (every edge alike: the regular fast path) or the offsets (starts,
        then the last chunk's end) of the chunks holding elements: what the I/O layer projects
        selections onto."""
        return tuple(
            step if step is not None else offsets[: self._count(dim, length) + 1]  # type: ignore[index]
            for dim, (step, offsets, length) in enumerate(zip(self._steps, self._offsets, shape))
        )

    def grid_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """Number of chunks holding elements along each dimension."""
        return tuple(self._count(dim, length) for dim, length in enumerate(shape))

    def all_chunk_coords(self, shape: tuple[int, ...]) -> Iterator[tuple[int, ...]]:
        return itertools.product(*(range(n) for n in self.grid_shape(shape)))

    def nchunks(self, shape: tuple[int, ...]) -> int:
        return math.prod(self.grid_shape(shape))

    def chunk_shape_at(self, coords: tuple[int, ...]) -> tuple[int, ...]:
        """The declared (stored) shape of the chunk at ``coords`` (within the declared edges)."""
        return tuple(d if isinstance(d, int) else d[index] for d, index in zip(self.chunk_shapes, coords))

    def chunk_starts(self, coords: tuple[int, ...]) -> tuple[int, ...] | None:
        """Where the chunk at ``coords`` starts along each dimension; None past the declared edges."""
        starts = []
        for d, offsets, index in zip(self.chunk_shapes, self._offsets, coords):
            if offsets is None:
                starts.append(index * d)  # type: ignore[operator]
            elif index >= len(d):  # type: ignore[arg-type]
                return None
            else:
                starts.append(int(offsets[index]))
        return tuple(starts)

    def chunk_edges(self, shape: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
        """The declared edges of the chunks holding elements, per dimension."""
        return tuple(
            (d,) * self._count(dim, length) if isinstance(d, int) else d[: self._count(dim, length)]
            for dim, (d, length) in enumerate(zip(self.chunk_shapes, shape))
        )

    def largest_chunk_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """The largest edge of each dimension among the chunks holding elements (at least 1)."""
        return tuple(max(edges, default=1) for edges in self.chunk_edges(shape))

    # -- growing ----------------------------------------------------------------------------------
    def resized(self, shape: tuple[int, ...]) -> "RectilinearChunkGrid":
        """The grid of an array resized to ``shape``: dimensions whose edges fall short repeat their last edge."""
        dimensions = []
        for d, length in zip(self.chunk_shapes, shape):
            if isinstance(d, tuple) and sum(d) < length:
                d = d + (d[-1],) * -(-(length - sum(d)) // d[-1])
            dimensions.append(d)
        return RectilinearChunkGrid(tuple(dimensions))

    def with_appended(self, axis: int, length: int, added: int) -> "RectilinearChunkGrid":
        """The grid after ``added`` elements are appended along ``axis`` to an array ``length`` long:
        one chunk of exactly ``added`` when the edges end at ``length``, else :meth:`resized`'s rule."""
        edges = self.chunk_shapes[axis]
        if isinstance(edges, tuple) and added > 0:
            kept = edges[: self._count(axis, length)]
            if sum(kept) == length:
                dimensions = list(self.chunk_shapes)
                dimensions[axis] = kept + (added,)
                return RectilinearChunkGrid(tuple(dimensions))
        shape = [0] * len(self.chunk_shapes)
        shape[axis] = length + added
        return self.resized(tuple(shape))


def grid_blocks(edges: tuple[tuple[int, ...], ...], shape: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """The sizes of a rectilinear grid's chunks along each dimension, the last of each cut at the
    array's end (dask's ``chunks`` form: the grid's blocks).

    >>> grid_blocks(((4, 4, 8), (5, 5)), (10, 10))
    ((4, 4, 2), (5, 5))
    """
    blocks = []
    for axis_edges, length in zip(edges, shape):
        sizes, position = [], 0
        for edge in axis_edges:
            if position >= length:
                break
            sizes.append(min(edge, length - position))
            position += edge
        blocks.append(tuple(sizes) or (0,))
    return tuple(blocks)
