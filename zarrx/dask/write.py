"""Dask arrays written to Zarr: graph building only.

:func:`to_zarr` creates the array (or opens it, for ``region=``) at once and writes every block
in its own task, without locks. That is only safe when no two blocks touch one stored object
(chunk, or shard), so the block boundaries are checked against the chunk grid first
(:mod:`zarrx.dask.alignment`): a write that would make two tasks rewrite one chunk raises
:class:`~zarrx.errors.ChunkAlignmentError` naming the blocks and the chunk, or, with
``align="rechunk"``, the dask array is rechunked onto the grid first.

Write tasks hold the array's :class:`~zarrx.io.handle.ArrayHandle` marked for writing: a
:class:`~zarrx.storage.MemoryStore` works with dask's threaded scheduler, but such a task
refuses to be sent to another process (its writes would be lost there).
"""

from __future__ import annotations

import math
import uuid
from typing import Any

import dask
import dask.array as da
import numpy as np
from dask.delayed import Delayed

from zarrx.dask.alignment import align_blocks, regular_size
from zarrx.dask.read import BlockSelections
from zarrx.errors import ReadOnlyError, UsageError
from zarrx.io.handle import ArrayHandle
from zarrx.io.write import write_selection
from zarrx.nodes.api import create_array, open_array
from zarrx.nodes.array import Array

__all__ = ["to_zarr", "write_block", "ALIGN_CHOICES"]

ALIGN_CHOICES = ("error", "rechunk")


def write_block(
    block: np.ndarray, handle: ArrayHandle, selection: tuple[slice, ...], offset: tuple[int, ...]
) -> np.ndarray:
    """A dask task: write ``block`` (at ``selection`` in the dask array) at ``offset`` + selection."""
    target = tuple(slice(s.start + o, s.stop + o) for s, o in zip(selection, offset))
    write_selection(handle, target or Ellipsis, block)
    return np.ones((1,) * block.ndim, dtype=bool)




def _finish(written: Any) -> None:
    return None




def to_zarr(
    x: Any,
    store: Any,
    path: str = "",
    *,
    region: tuple[slice, ...] | None = None,
    compute: bool = True,
    overwrite: bool = False,
    align: str = "error",
    storage_options: dict[str, Any] | None = None,
    **create_kwargs: Any,
) -> Array | Delayed:
    """Write a dask array to a new Zarr array, or into a region of an existing one.

    Without ``region`` the array is created at once (like :func:`zarrx.create_array`, with
    ``shape`` and ``dtype`` from ``x``; ``create_kwargs`` such as ``chunks``, ``shards``,
    ``compressors``, ``fill_value``, ``dimension_names`` go to it). Its chunk shape is the
    shape of ``x``'s first block unless ``chunks`` is given; ``chunks="dask"`` makes the chunks
    ``x``'s own blocks -- a rectilinear chunk grid when they are irregular (after a filter, a
    concatenation, a groupby), so nothing is rechunked and every block is one chunk; with
    ``shards`` give ``chunks`` (the inner chunks) too, and the blocks must line up with the shards. With ``region`` (a
    tuple of slices of the existing array's shape, one per axis; missing trailing axes are
    whole) ``x`` is written there; ``store`` may also be a :class:`zarrx.Array` to write into
    (all of it, unless ``region`` says where).

    Every block is written by its own task, without locks, so no two blocks may touch one
    stored chunk (shard, for a sharded array): block boundaries, shifted by the region start,
    must fall on the chunk grid.

    Parameters
    ----------
    x
        A dask array (anything else goes through ``dask.array.asarray``).
    store, path, storage_options
        As for :func:`zarrx.open_array`; or ``store`` is a writable :class:`zarrx.Array`.
    region
        Where to write ``x`` into the existing array at ``path``.
    compute
        Write now (and return the array); False returns a ``dask.delayed.Delayed`` that writes
        when computed (the array's metadata is written at once either way).
    overwrite
        Replace what is at ``path`` (without ``region``).
    align
        ``"error"``: refuse blocks that share a chunk with :class:`ChunkAlignmentError`;
        ``"rechunk"``: rechunk ``x`` onto the chunk grid (offset by the region start) first.

    Raises
    ------
    ChunkAlignmentError
        Two blocks of ``x`` would write the same chunk (or shard); the message names them.

    Examples
    --------
    >>> import dask.array as da, zarrx
    >>> x = da.arange(12, chunks=4).reshape(3, 4)
    >>> arr = zarrx.to_zarr(x, {})
    >>> arr.chunks, int(arr[2, 3])
    ((1, 4), 11)
    >>> arr = zarrx.create_array({}, shape=(10,), chunks=(5,), dtype="int64", fill_value=0)
    >>> _ = zarrx.to_zarr(da.ones(4, chunks=2, dtype="int64"), arr.store, region=(slice(3, 7),),
    ...                   align="rechunk")
    >>> arr[:]
    array([0, 0, 0, 1, 1, 1, 1, 0, 0, 0])
    """
    if align not in ALIGN_CHOICES:
        raise UsageError(f"align: expected one of {ALIGN_CHOICES}, found {align!r}")
    if not isinstance(x, da.Array):
        x = da.asarray(x)
    if any(math.isnan(size) for sizes in x.chunks for size in sizes):
        raise UsageError(
            "to_zarr needs known block sizes, found unknown (NaN) ones; call x.compute_chunk_sizes() first"
        )
    if region is None and not isinstance(store, Array):
        array, offsets = _create_target(x, store, path, overwrite, storage_options, create_kwargs), (0,) * x.ndim
    else:
        if create_kwargs or overwrite:
            given = ", ".join(sorted([*create_kwargs, *(["overwrite"] if overwrite else [])]))
            raise UsageError(f"{given}: only for creating an array; region= writes into the existing one")
        array = store if isinstance(store, Array) else open_array(store, path, mode="r+", storage_options=storage_options)
        if array.read_only:
            raise ReadOnlyError(f"array {array.name!r} was opened read-only; open it with mode='r+' to write to it")
        offsets = _parse_region(() if region is None else region, array, x.shape)
    x = align_blocks(x, array, offsets, align)

    handle = array.handle.evolve(for_writing=True)
    # Writes are side effects: a name of their own each time, so dask never takes a repeated
    # write for one it has already done (as it would a pure computation with the same key).
    name = f"zarrx-to-zarr-{uuid.uuid4().hex}"
    indices = tuple(range(x.ndim))
    written = da.blockwise(
        write_block,
        indices,
        x,
        indices,
        handle,
        None,
        BlockSelections(x.chunks),
        indices,
        offsets,
        None,
        name=name,
        dtype=bool,
        adjust_chunks={axis: 1 for axis in indices},
        meta=np.empty((0,) * x.ndim, dtype=bool),
        align_arrays=False,
        concatenate=True,
    )
    # A tree reduction gathers the writes, so the final task does not wait on every block directly.
    delayed = dask.delayed(_finish, pure=False)(written.all(), dask_key_name=f"{name}-done")
    if not compute:
        return delayed
    delayed.compute()
    return array


def _create_target(
    x: da.Array,
    store: Any,
    path: str,
    overwrite: bool,
    storage_options: dict[str, Any] | None,
    create_kwargs: dict[str, Any],
) -> Array:
    if "shape" in create_kwargs:
        raise UsageError(f"shape: to_zarr takes the shape from the dask array ({x.shape}); do not pass shape=")
    if create_kwargs.get("shards") is not None and create_kwargs.get("chunks") is None:
        raise UsageError(
            f"shards={create_kwargs['shards']!r} needs chunks= too (the inner chunk shape, dividing the shard "
            "shape); the dask blocks then have to line up with the shards"
        )
    kwargs = {"dtype": x.dtype, **create_kwargs}
    if isinstance(kwargs.get("chunks"), str) and kwargs["chunks"] == "dask":
        kwargs["chunks"] = dask_chunk_grid(x.chunks)
    if kwargs.get("chunks") is None:
        # the first block along each axis; a 0-length axis still needs a chunk length of at least 1
        kwargs["chunks"] = tuple(max(1, int(sizes[0])) for sizes in x.chunks)
    return create_array(store, path, shape=x.shape, overwrite=overwrite, storage_options=storage_options, **kwargs)


def dask_chunk_grid(blocks: tuple[tuple[int, ...], ...]) -> tuple[Any, ...]:
    """The chunks that are a dask array's blocks: a chunk length per axis whose blocks are regular
    (all alike but a smaller last one), the blocks' sizes (a rectilinear grid's edges) otherwise.

    Examples
    --------
    >>> dask_chunk_grid(((4, 4, 2), (3, 1, 5)))
    (4, (3, 1, 5))
    """
    grid: list[Any] = []
    for sizes in blocks:
        sizes = tuple(int(size) for size in sizes if size > 0) or (1,)  # empty axes still need an edge
        size = regular_size(sizes)
        grid.append(size if size is not None else sizes)
    return tuple(grid)


def _parse_region(region: Any, array: Array, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The region's start along each axis, after checking it is slices of ``shape``'s size."""
    items = region if isinstance(region, tuple) else (region,)
    if len(items) > array.ndim or not all(isinstance(item, slice) for item in items):
        raise UsageError(
            f"region: expected a tuple of at most {array.ndim} slices for array {array.name!r}, found {region!r}"
        )
    items = items + (slice(None),) * (array.ndim - len(items))
    starts, lengths = [], []
    for axis, (item, length) in enumerate(zip(items, array.shape)):
        start, stop, step = item.indices(length)
        if step != 1:
            raise UsageError(f"region: slices need step 1, found {item!r} on axis {axis}")
        starts.append(start)
        lengths.append(max(0, stop - start))
    if tuple(lengths) != tuple(shape):
        raise UsageError(
            f"region: {region!r} of array {array.name!r} (shape {array.shape}) has shape {tuple(lengths)}, "
            f"but the dask array has shape {shape}"
        )
    return tuple(starts)
