"""Dask arrays written to Zarr: graph building only.

:func:`to_zarr` creates the array (or opens it, for ``region=``) at once and writes every block
in its own task, without locks. That is only safe when no two blocks touch one stored object
(chunk, or shard), so the block boundaries are checked against the chunk grid first
(:mod:`zarrx.dask.alignment`). Blocks that line up are written as they are. Blocks that would
make two tasks rewrite one shard are rechunked onto the grid first, as dask 2026.8's own
``to_zarr`` does (blocks near ``array.chunk-size`` in multiples of the shard shape, dask's
UserWarning for irregular blocks and PerformanceWarning where dask gives them) -- unless the
caller asks for strictness (``safe_chunks=True`` or ``align_chunks=False``, xarray's words, or
``align="error"``): then :class:`~zarrx.errors.ChunkAlignmentError` names the blocks, the chunk
and the keyword that aligns instead. zarrx never writes a racing layout: ``safe_chunks=False``
rechunks too.

What it returns is what ``dask.array.store`` returns: with ``compute=False`` a lazy dask array
whose blocks are the writes (compute it, or several together with ``dask.compute``, and shared
upstream work runs once), with ``return_stored=True`` an array of the stored values.

Write tasks hold the array's :class:`~zarrx.io.handle.ArrayHandle` marked for writing: a
:class:`~zarrx.storage.MemoryStore` works with dask's threaded scheduler, but such a task
refuses to be sent to another process (its writes would be lost there).
"""

from __future__ import annotations

import math
import uuid
import warnings
from typing import Any

import dask
import dask.array as da
import numpy as np

from zarrx.concurrency import task_threads
from zarrx.dask.alignment import align_blocks, regular_size, warn_partial_objects
from zarrx.dask.axes import axis_from_sizes
from zarrx.dask.lazy import Layout, Source, lazy_array
from zarrx.dask.read import BlockSelections, read_block
from zarrx.errors import NodeNotFoundError, ReadOnlyError, UsageError
from zarrx.io.execute import read_selection
from zarrx.io.handle import ArrayHandle
from zarrx.io.write import write_selection
from zarrx.nodes.api import create_array, open_array
from zarrx.nodes.array import Array
from zarrx.storage.zarr_python import zarr_python_array_location

__all__ = ["to_zarr", "write_block", "ALIGN_CHOICES", "IRREGULAR_BLOCKS_WARNING"]

ALIGN_CHOICES = ("error", "rechunk")
#: dask's words when it rechunks irregular blocks before a write (users filter on them)
IRREGULAR_BLOCKS_WARNING = (
    "The array uses irregular chunk sizes. Rechunking to regular (uniform) chunks to ensure the data can be "
    "written safely."
)


def write_block(
    block: np.ndarray,
    handle: ArrayHandle,
    selection: tuple[slice, ...],
    offset: tuple[int, ...],
    return_stored: bool = False,
) -> np.ndarray | None:
    """A dask task: write ``block`` (at ``selection`` in the dask array) at ``offset`` + selection.

    Returns what the store then holds there when ``return_stored``, else None (``dask.array.store``'s
    ``load_store_chunk`` does the same). Like :func:`~zarrx.dask.read.read_block` it uses at most
    ``zarrx.threads-per-task`` threads (:func:`zarrx.concurrency.task_threads`)."""
    target = tuple(slice(s.start + o, s.stop + o) for s, o in zip(selection, offset))
    with task_threads():
        write_selection(handle, target or Ellipsis, block)
        return read_selection(handle, target or Ellipsis) if return_stored else None


def to_zarr(
    x: Any,
    store: Any,
    path: str = "",
    *,
    region: tuple[slice, ...] | None = None,
    compute: bool = True,
    return_stored: bool = False,
    overwrite: bool = False,
    safe_chunks: bool | None = None,
    align_chunks: bool | None = None,
    align: str | None = None,
    storage_options: dict[str, Any] | None = None,
    component: str | None = None,
    mode: str | None = None,
    **create_kwargs: Any,
) -> Array | da.Array:
    """Write a dask array to a new Zarr array, or into a region of an existing one.

    Without ``region`` the array is created at once (like :func:`zarrx.create_array`, with
    ``shape`` and ``dtype`` from ``x``; ``create_kwargs`` such as ``chunks``, ``shards``,
    ``compressors``, ``fill_value``, ``dimension_names``, ``zarr_format`` go to it). Its chunk
    shape is the shape of ``x``'s first block unless ``chunks`` is given (with ``shards``, the
    first block when it divides the shard shape, else the largest chunk that divides both);
    ``chunks="dask"`` makes the chunks ``x``'s own blocks -- a rectilinear chunk grid when they
    are irregular (after a filter, a concatenation, a groupby), so nothing is rechunked and every
    block is one chunk. With ``region`` (a tuple of slices of the existing array's shape, one per
    axis; missing trailing axes are whole) ``x`` is written there; ``store`` may also be a
    :class:`zarrx.Array`, or a zarr-python ``Array``, to write into (all of it, unless
    ``region`` says where).

    Every block is written by its own task, without locks, so no two blocks may touch one
    stored chunk (shard, for a sharded array): when block boundaries, shifted by the region
    start, fall inside one, ``x`` is rechunked onto the grid as ``dask.array.to_zarr`` does,
    unless strictness is asked for (``safe_chunks=True``, ``align_chunks=False`` or
    ``align="error"``).

    Parameters
    ----------
    x
        A dask array (anything else goes through ``dask.array.asarray``).
    store, path, storage_options
        As for :func:`zarrx.open_array`; or ``store`` is a writable :class:`zarrx.Array` (or a
        zarr-python ``Array``). ``component`` is dask's name for ``path``.
    region
        Where to write ``x`` into the existing array at ``path``.
    compute
        Write now (and return the array); False returns a lazy dask array whose computation
        writes (the array's metadata is written at once either way), as ``dask.array.store``.
    return_stored
        Return a dask array of the stored values instead (after writing them when ``compute``).
    overwrite, mode
        Replace what is at ``path`` (without ``region``); dask's ``mode="w"`` is ``overwrite=True``,
        ``mode="r"`` is refused.
    safe_chunks, align_chunks, align
        What to do with blocks that would share a stored object. By default (none given) ``x``
        is rechunked onto the chunk (shard) grid, offset by the region start, as
        ``dask.array.to_zarr`` does: along the axes that need it, blocks near dask's
        ``array.chunk-size`` in multiples of the shard shape (never less than one shard; dask's
        PerformanceWarning says when ``array.chunk-size`` asked for less), and irregular blocks
        of a new array are first made regular with dask's UserWarning. ``align_chunks=True`` (or
        ``safe_chunks=False``) asks for that explicitly; ``safe_chunks=True`` or
        ``align_chunks=False`` (xarray's words) asks for a
        :class:`~zarrx.errors.ChunkAlignmentError` instead, as does ``align="error"`` (the older
        spelling, with ``align="rechunk"``). Blocks that line up are never rechunked.

    Raises
    ------
    ChunkAlignmentError
        Strictness was asked for and two blocks of ``x`` would write the same chunk (or shard);
        the message names them and the keyword that aligns instead.

    Examples
    --------
    >>> import dask.array as da, zarrx
    >>> x = da.arange(12, chunks=4).reshape(3, 4)
    >>> arr = zarrx.to_zarr(x, {})
    >>> arr.chunks, int(arr[2, 3])
    ((1, 4), 11)
    >>> arr = zarrx.create_array({}, shape=(10,), chunks=(5,), dtype="int64", fill_value=0)
    >>> lazy = zarrx.to_zarr(da.ones(4, chunks=2, dtype="int64"), arr, region=(slice(2, 6),), compute=False)
    >>> lazy.chunks   # blocks 2:4 and 4:6 would both write chunk 0: one block 2:6 writes it
    ((4,),)
    >>> _ = lazy.compute()
    >>> arr[:]
    array([0, 0, 1, 1, 1, 1, 0, 0, 0, 0])
    >>> lazy = zarrx.to_zarr(da.ones(4, chunks=2), {}, compute=False)
    >>> lazy.chunks, lazy.compute().size   # writes when computed, as dask.array.store(compute=False)
    (((2, 2),), 0)
    """
    strategy = _alignment(align, safe_chunks, align_chunks)
    path = _path(path, component)
    overwrite = _overwrite(mode, overwrite)
    x = _as_dask_array(x)
    if any(math.isnan(size) for sizes in x.chunks for size in sizes):
        raise UsageError(
            "Saving a dask array with unknown chunk sizes is not currently supported by Zarr: to_zarr needs known "
            "block sizes, found unknown (NaN) ones; call x.compute_chunk_sizes() first"
        )
    peer = zarr_python_array_location(store)
    if peer is not None:
        store = open_array(peer[0], peer[1], mode="r+")
    if region is None and not isinstance(store, Array):
        x, array = _create_target(x, store, path, overwrite, storage_options, create_kwargs, strategy)
        offsets = (0,) * x.ndim
    else:
        if create_kwargs or overwrite:
            given = ", ".join(sorted([*create_kwargs, *(["overwrite"] if overwrite else [])]))
            raise UsageError(f"{given}: only for creating an array; region= writes into the existing one")
        array = store if isinstance(store, Array) else _existing_array(store, path, storage_options, region)
        if array.read_only:
            raise ReadOnlyError(f"array {array.name!r} was opened read-only; open it with mode='r+' to write to it")
        offsets = _parse_region(() if region is None else region, array, x.shape)
        warn_partial_objects(array, offsets, x.shape)
    x = align_blocks(x, array, offsets, strategy)
    written = _write_graph(x, array, offsets, return_stored=return_stored and not compute)
    if not compute:
        return written
    dask.compute(written)
    return _read_graph(x, array, offsets) if return_stored else array


def _existing_array(store: Any, path: str, storage_options: dict[str, Any] | None, region: Any) -> Array:
    try:
        return open_array(store, path, mode="r+", storage_options=storage_options)
    except NodeNotFoundError as error:
        raise UsageError(
            f"Cannot use `region` keyword when there is no array to write into: region={region!r} writes into "
            f"an existing array, and {error}; create the array first, or write without region"
        ) from None


def _alignment(align: str | None, safe_chunks: bool | None, align_chunks: bool | None) -> str:
    """``"error"`` or ``"rechunk"``: what to do with blocks that would share a stored object.

    dask's ``to_zarr`` always rechunks, so that is the default; xarray's ``safe_chunks=True`` and
    ``align_chunks=False``, given explicitly, ask for strictness (``align_chunks=True`` wins, and
    ``safe_chunks=False`` rechunks: zarrx never writes blocks that race)."""
    if align is not None:
        if align not in ALIGN_CHOICES:
            raise UsageError(f"align: expected one of {ALIGN_CHOICES}, found {align!r}")
        return align
    if align_chunks or safe_chunks is False:
        return "rechunk"
    if safe_chunks or align_chunks is False:
        return "error"
    return "rechunk"


def _path(path: str, component: str | None) -> str:
    if component is None:
        return path
    if path:
        raise UsageError(f"path={path!r} and component={component!r}: pass one of them (component is dask's name)")
    return component


def _as_dask_array(x: Any) -> da.Array:
    """``x`` as a ``dask.array.Array``: itself; the graph of another dask array class (the
    ``dask-array`` package's, which xarray hands over when it is xarray's chunk manager) under
    its own name, not wrapped as a block of data by ``from_array``; anything else through
    ``dask.array.asarray``."""
    if isinstance(x, da.Array):
        return x
    if not da.array_expr_enabled() and dask.is_dask_collection(x) and all(
        hasattr(x, name) for name in ("chunks", "name", "_meta")
    ):
        return da.Array(x.__dask_graph__(), x.name, x.chunks, meta=x._meta)
    return da.asarray(x)


def _overwrite(mode: str | None, overwrite: bool) -> bool:
    if mode is None or mode in ("a", "w-", "r+"):
        return overwrite
    if mode == "w":
        return True
    if mode == "r":
        raise UsageError("Cannot use mode 'r' (read-only) when writing to zarr: pass mode 'a', 'w', 'w-' or 'r+'")
    raise UsageError(f"mode: expected one of 'a', 'w', 'w-', 'r+', found {mode!r}")


def _write_graph(x: da.Array, array: Array, offsets: tuple[int, ...], return_stored: bool) -> da.Array:
    """One write task per block of ``x``, as a dask array with ``x``'s blocks."""
    handle = array.handle.evolve(for_writing=True)
    # Writes are side effects: a name of their own each time, so dask never takes a repeated
    # write for one it has already done (as it would a pure computation with the same key). A
    # token, not a name: dask's array expressions never lower a named blockwise over a rechunk.
    token = f"zarrx-to-zarr-{uuid.uuid4().hex}"
    indices = tuple(range(x.ndim))
    return da.blockwise(
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
        return_stored,
        None,
        token=token,
        dtype=x.dtype,
        meta=x._meta,
        align_arrays=False,
        concatenate=True,
    )


def _read_graph(x: da.Array, array: Array, offsets: tuple[int, ...]) -> da.Array:
    """The written values, read back with ``x``'s blocks (``return_stored`` after computing): a
    read of the array's region at ``offsets``, under a name of its own (the values are new)."""
    name = f"zarrx-stored-{uuid.uuid4().hex}"
    source = Source(read_block, array.handle, name, "zarrx-stored")
    axes = tuple(axis_from_sizes(sizes).shifted(offset) for sizes, offset in zip(x.chunks, offsets))
    return lazy_array(Layout(source, axes), array.dtype, name, chunks=x.chunks)


def _create_target(
    x: da.Array,
    store: Any,
    path: str,
    overwrite: bool,
    storage_options: dict[str, Any] | None,
    create_kwargs: dict[str, Any],
    strategy: str,
) -> tuple[da.Array, Array]:
    """The new array (and ``x``, made regular when zarrx chose the chunk grid from irregular blocks)."""
    if "shape" in create_kwargs:
        raise UsageError(f"shape: to_zarr takes the shape from the dask array ({x.shape}); do not pass shape=")
    kwargs = {"dtype": x.dtype, **create_kwargs}
    if isinstance(kwargs.get("chunks"), str) and kwargs["chunks"] == "dask":
        kwargs["chunks"] = dask_chunk_grid(x.chunks)
    if kwargs.get("chunks") is None:
        x = _regular_blocks(x, strategy)
        kwargs["chunks"] = _chunks_from_blocks(x, kwargs.get("shards"))
    array = create_array(store, path, shape=x.shape, overwrite=overwrite, storage_options=storage_options, **kwargs)
    return x, array


def _regular_blocks(x: da.Array, strategy: str) -> da.Array:
    """``x`` whose blocks are all one size along each axis (but a smaller last one), when asked to align.

    zarrx chooses the chunk grid from the blocks; irregular blocks fit no regular grid, so they
    are rechunked to the largest block size, with dask's warning -- or left for the alignment
    check to refuse (``align_chunks=False``)."""
    if strategy != "rechunk" or all(regular_size(sizes) is not None for sizes in x.chunks):
        return x
    warnings.warn(
        f"{IRREGULAR_BLOCKS_WARNING} zarrx rechunks the blocks {x.chunks} to {tuple(map(max, x.chunks))} before "
        "writing; rechunk the array yourself (all blocks one size but a smaller last one) to choose otherwise.",
        UserWarning,
        stacklevel=3,
    )
    return x.rechunk(tuple(map(max, x.chunks)))


def _chunks_from_blocks(x: da.Array, shards: Any) -> tuple[int, ...]:
    """The chunk shape for a new array: the first block along each axis (at least 1), or, for a
    sharded array, the largest divisor of the shard shape that also divides that block."""
    first = tuple(max(1, int(sizes[0])) for sizes in x.chunks)
    if shards is None or isinstance(shards, str):
        return first
    shard_shape = (shards,) * x.ndim if isinstance(shards, int) else tuple(shards)
    if len(shard_shape) != x.ndim:
        return first  # create_array names the mismatch
    return tuple(block if shard % block == 0 else math.gcd(block, shard) for block, shard in zip(first, shard_shape))


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
