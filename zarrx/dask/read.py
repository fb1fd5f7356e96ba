"""Zarr arrays as dask arrays: graph building only.

Reading (:func:`from_zarr`, :meth:`zarrx.Array.to_dask`) gives one task per stored object: per
chunk, or per shard for a sharded array. ``chunks=`` may ask for any multiple of the (inner)
chunk shape instead. Each task holds the array's :class:`~zarrx.io.handle.ArrayHandle` -- the
store, the node path and the parsed metadata, about a kilobyte pickled, never data -- and its
block's selection, and reads it with :func:`zarrx.io.execute.read_selection`, the batched path
``arr[...]`` takes.

The result is a dask array built by :func:`~zarrx.dask.lazy.lazy_array`: its blocks are
described by a few numbers per axis (:mod:`zarrx.dask.axes`), so building it, its shape and its
slicing cost the same for ten chunks or a million, and a slice is a new read layer over the
chunks it touches: ``from_zarr(store, "t2m")[:10].sum()`` builds, culls and runs a graph of ten
blocks.
Whole-array work costs what it costs in dask (one ``Blockwise`` layer, tasks made when dask
culls it).

Tasks need only picklable stores to run on ``dask.distributed`` worker processes: a
:class:`~zarrx.storage.LocalStore` or an fsspec URL. A :class:`~zarrx.storage.MemoryStore`
works with dask's threaded scheduler; pickling it copies the data, so a read in another process
sees a snapshot.
"""

from __future__ import annotations

import operator
from typing import Any

import dask.array as da
import numpy as np
from dask.array.core import normalize_chunks
from dask.base import tokenize

from zarrx.dask.alignment import first_bad_boundary
from zarrx.dask.axes import Axis, axis_from_sizes, regular_axis
from zarrx.dask.lazy import BlockSelections, Layout, Source, lazy_array
from zarrx.errors import UsageError
from zarrx.io.execute import read_selection
from zarrx.io.handle import ArrayHandle
from zarrx.nodes.api import open_array
from zarrx.nodes.array import Array

__all__ = ["BlockSelections", "array_to_dask", "from_zarr", "read_block"]


# -- tasks ---------------------------------------------------------------------------------
def read_block(handle: ArrayHandle, selection: tuple[slice | int, ...]) -> np.ndarray:
    """A dask task: the block of the array at ``selection`` (an integer drops its axis, as in NumPy)."""
    return np.asarray(read_selection(handle, selection or Ellipsis))


# -- reading -------------------------------------------------------------------------------
def array_to_dask(array: Array, chunks: Any = None) -> da.Array:
    """The array as a lazy dask array, one task per block.

    Parameters
    ----------
    array
        A zarrx array.
    chunks
        The dask block shape: by default the shard shape for a sharded array, else the chunk
        shape. Anything ``dask.array.normalize_chunks`` takes (ints, -1 or None for a whole
        axis, explicit block sizes per axis, ``"auto"``), as long as every block but the last
        along each axis is a multiple of the (inner) chunk shape.

    Raises
    ------
    UsageError
        ``chunks`` would cut through a chunk.

    Examples
    --------
    >>> import zarrx, numpy as np
    >>> arr = zarrx.create_array({}, shape=(6, 4), chunks=(2, 2), dtype="int32")
    >>> arr[...] = np.arange(24).reshape(6, 4)
    >>> x = array_to_dask(arr)
    >>> x.chunks
    ((2, 2, 2), (2, 2))
    >>> int(x.sum().compute())
    276
    >>> array_to_dask(arr, chunks=(4, -1)).chunks
    ((4, 2), (4,))
    """
    handle = array.handle
    source = Source(read_block, handle, tokenize(handle), "zarrx-from-zarr")
    return lazy_array(Layout(source, _read_axes(array, chunks)), array.dtype)


def from_zarr(
    store: Any, path: str = "", chunks: Any = None, storage_options: dict[str, Any] | None = None
) -> da.Array:
    """Open the array at ``path`` as a lazy dask array (see :func:`array_to_dask` for ``chunks``).

    ``store`` is anything :func:`zarrx.open_array` takes, or a :class:`zarrx.Array`.

    Examples
    --------
    >>> import zarrx
    >>> _ = zarrx.create_array("memory://example-from-zarr", shape=(10,), chunks=(5,), dtype="int8",
    ...                        fill_value=1, overwrite=True)
    >>> x = zarrx.from_zarr("memory://example-from-zarr")
    >>> x.chunks, int(x.sum())
    (((5, 5),), 10)
    """
    array = store if isinstance(store, Array) else open_array(store, path, mode="r", storage_options=storage_options)
    return array_to_dask(array, chunks)


def _read_axes(array: Array, chunks: Any) -> tuple[Axis, ...]:
    """The blocks along each axis for reading ``array``: regular ones straight from a regular chunk
    grid (no tuple per block is made), anything else -- irregular sizes, ``"auto"``, blocks that
    cut chunks (refused there) -- from :func:`_read_chunks`, as a table of block edges if need be."""
    sizes = _block_sizes(array.shards or array.chunks if chunks is None else chunks, array.ndim)
    inner, shape = _block_sizes(array.chunks, array.ndim), array.shape
    if sizes is not None and inner is not None and all(s % c == 0 or s >= n for s, c, n in zip(sizes, inner, shape)):
        return tuple(regular_axis(length, min(size, length)) for length, size in zip(shape, sizes))
    return tuple(axis_from_sizes(blocks) for blocks in _read_chunks(array, chunks))


def _block_sizes(chunks: Any, ndim: int) -> tuple[int, ...] | None:
    """``chunks`` as one block size per axis (-1 and None: the whole axis, as a size larger than it),
    or None when it is another form (explicit sizes, ``"auto"``, a mapping, a wrong length)."""
    items = (chunks,) * ndim if isinstance(chunks, (int, np.integer)) and not isinstance(chunks, bool) else chunks
    if not isinstance(items, tuple) or len(items) != ndim:
        return None
    sizes = []
    for item in items:
        if item is None or (isinstance(item, (int, np.integer)) and not isinstance(item, bool) and item == -1):
            sizes.append(np.iinfo(np.int64).max)
        elif isinstance(item, (int, np.integer)) and not isinstance(item, bool) and item > 0:
            sizes.append(operator.index(item))
        else:
            return None
    return tuple(sizes)


def _read_chunks(array: Array, chunks: Any) -> tuple[tuple[int, ...], ...]:
    """Dask block sizes for reading ``array``: ``chunks`` normalized and checked against the chunk grid."""
    stored = array.shards or array.chunks
    try:
        blocks = normalize_chunks(
            stored if chunks is None else chunks, array.shape, dtype=array.dtype, previous_chunks=stored
        )
    except (TypeError, ValueError) as error:
        raise UsageError(f"chunks: cannot use {chunks!r} for an array of shape {array.shape}: {error}") from None
    inner = array.chunks
    for axis, (sizes, chunk) in enumerate(zip(blocks, inner)):
        boundary = first_bad_boundary(sizes, 0, chunk)
        if boundary is not None:
            multiple = tuple(max(c, (b[0] // c) * c) for b, c in zip(blocks, inner))
            raise UsageError(
                f"chunks: every dask block but the last along an axis must be a multiple of the chunk shape "
                f"{inner} of array {array.name!r}, found a block boundary at {boundary} along axis {axis} "
                f"(inside chunk {boundary // chunk}) with chunks={chunks!r}; "
                f"use a multiple such as chunks={multiple}"
            )
    return blocks


