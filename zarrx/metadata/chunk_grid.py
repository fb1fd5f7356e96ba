"""Chunk grids (core spec, "Chunk grids"; zarr-extensions ``chunk-grids``).

The ``regular`` grid of the accepted spec: every chunk has ``chunk_shape``, and chunks at the
upper edge of the array are stored at full size (the part past the array's end holds the fill
value). The registry's ``rectilinear`` grid (:mod:`zarrx.metadata.rectilinear`) lists edges per
dimension. :func:`parse_chunk_grid` reads either; both answer the same questions --
``grid_shape``, ``chunk_shape_at``, ``chunk_edges``, ``largest_chunk_shape``, ``resized`` and
``dimensions`` (per dimension the step, or the chunks' offsets: what :mod:`zarrx.io.selection`
projects selections onto) -- and ``is_regular`` says which one it is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterator, Union

import itertools

from zarrx.errors import MetadataError, UnsupportedExtensionError
from zarrx.extension import parse_extension
from zarrx.metadata.rectilinear import RectilinearChunkGrid

__all__ = ["RegularChunkGrid", "ChunkGrid", "parse_chunk_grid", "parse_shape", "MAX_LENGTH"]

#: the longest dimension (and chunk) there is: what int64 indexing -- NumPy's, dask's, every
#: peer's -- can address; a longer one could not be indexed past that point, or would wrap around
MAX_LENGTH = 2**63 - 1


def parse_shape(value: Any, field_name: str, *, minimum: int = 0) -> tuple[int, ...]:
    """A JSON array of integers from ``minimum`` to :data:`MAX_LENGTH`.

    Examples
    --------
    >>> parse_shape([10, 20], "shape")
    (10, 20)
    >>> parse_shape([2**64], "shape")
    Traceback (most recent call last):
    ...
    zarrx.errors.MetadataError: shape: 18446744073709551616 is longer than int64 indexing can address ...
    """
    if not isinstance(value, (list, tuple)):
        raise MetadataError(f"{field_name}: expected a list of integers, found {type(value).__name__} {value!r}")
    for item in value:
        if isinstance(item, bool) or not isinstance(item, int) or item < minimum:
            raise MetadataError(f"{field_name}: expected integers >= {minimum}, found {item!r} in {list(value)!r}")
        if item > MAX_LENGTH:
            raise MetadataError(
                f"{field_name}: {item} is longer than int64 indexing can address (at most 2**63 - 1 = {MAX_LENGTH}), "
                f"found in {list(value)!r}"
            )
    return tuple(int(item) for item in value)


@dataclass(frozen=True)
class RegularChunkGrid:
    name = "regular"
    is_regular = True
    chunk_shape: tuple[int, ...]

    @classmethod
    def from_json(cls, value: Any) -> "RegularChunkGrid":
        extension = parse_extension(value, "chunk_grid")
        if extension.name != cls.name:
            raise UnsupportedExtensionError(
                f"chunk_grid: unknown chunk grid {extension.name!r}; zarrx supports 'regular' and 'rectilinear'"
            )
        unexpected = set(extension.configuration) - {"chunk_shape"}
        if unexpected:
            raise MetadataError(f"chunk_grid.configuration: unexpected members {sorted(unexpected)}")
        if "chunk_shape" not in extension.configuration:
            raise MetadataError("chunk_grid.configuration.chunk_shape: missing")
        chunk_shape = parse_shape(
            extension.configuration["chunk_shape"], "chunk_grid.configuration.chunk_shape", minimum=1
        )
        return cls(chunk_shape)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "configuration": {"chunk_shape": list(self.chunk_shape)}}

    def validate(self, shape: tuple[int, ...]) -> None:
        if len(self.chunk_shape) != len(shape):
            raise MetadataError(
                f"chunk_grid.configuration.chunk_shape: expected {len(shape)} dimensions to match shape "
                f"{list(shape)}, found {list(self.chunk_shape)}"
            )

    def grid_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """Number of chunks along each dimension."""
        return tuple(math.ceil(s / c) for s, c in zip(shape, self.chunk_shape))

    def all_chunk_coords(self, shape: tuple[int, ...]) -> Iterator[tuple[int, ...]]:
        return itertools.product(*(range(n) for n in self.grid_shape(shape)))

    def nchunks(self, shape: tuple[int, ...]) -> int:
        return math.prod(self.grid_shape(shape))

    @property
    def ndim(self) -> int:
        return len(self.chunk_shape)

    def dimensions(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """The step of every dimension (see the module docstring)."""
        return self.chunk_shape

    def chunk_shape_at(self, coords: tuple[int, ...]) -> tuple[int, ...]:
        return self.chunk_shape

    def chunk_edges(self, shape: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
        return tuple((c,) * n for c, n in zip(self.chunk_shape, self.grid_shape(shape)))

    def chunk_starts(self, coords: tuple[int, ...]) -> tuple[int, ...]:
        """Where the chunk at ``coords`` starts along each dimension."""
        return tuple(index * size for index, size in zip(coords, self.chunk_shape))

    def largest_chunk_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return self.chunk_shape

    def resized(self, shape: tuple[int, ...]) -> "RegularChunkGrid":
        return self

    def with_appended(self, axis: int, length: int, added: int) -> "RegularChunkGrid":
        return self


def parse_chunk_grid(value: Any) -> "ChunkGrid":
    """The chunk grid of a ``chunk_grid`` JSON value: ``regular`` or ``rectilinear``.

    Examples
    --------
    >>> parse_chunk_grid({"name": "regular", "configuration": {"chunk_shape": [4]}})
    RegularChunkGrid(chunk_shape=(4,))
    """
    extension = parse_extension(value, "chunk_grid")
    grid = _GRIDS.get(extension.name)
    if grid is None:
        raise UnsupportedExtensionError(
            f"chunk_grid: unknown chunk grid {extension.name!r}; zarrx supports {sorted(_GRIDS)}"
        )
    return grid.from_json(value)


#: either chunk grid
ChunkGrid = Union[RegularChunkGrid, RectilinearChunkGrid]
#: chunk grid name -> class
_GRIDS: dict[str, Any] = {"regular": RegularChunkGrid, "rectilinear": RectilinearChunkGrid}
