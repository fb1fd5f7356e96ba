"""Zarr arrays as dask arrays, and dask arrays written to Zarr: graph building only.

Reading (:func:`from_zarr`, :meth:`zarrx.Array.to_dask`) gives one task per
stored object: per chunk, or per shard for a sharded array. ``chunks=`` may ask
for any multiple of the (inner) chunk shape instead. Each task holds an
:class:`ArrayHandle` -- the store, the node path and the parsed metadata, about
a kilobyte pickled, never data -- and its block's selection, and reads it with
:meth:`zarrx.Array.get_basic_selection`, the batched path ``arr[...]`` takes.

The graph is one dask ``Blockwise`` layer whose block selections come from a
:class:`BlockSelections` (a ``BlockwiseDep``): building it costs next to
nothing for a million chunks, and a task (with its selection) exists only for
the blocks a computation needs, made when dask culls the graph. (A graph with
one of dask's reductions in it still lists every block's key while culling,
about half a second per million blocks, as for any dask array.)

Writing (:func:`to_zarr`) creates the array (or opens it, for ``region=``) at
once and writes every block in its own task, without locks. That is only safe
when no two blocks touch one stored object (chunk, or shard), so the block
boundaries are checked against the chunk grid first: a write that would make
two tasks rewrite one chunk raises :class:`~zarrx.errors.ChunkAlignmentError`
naming the blocks and the chunk, or, with ``align="rechunk"``, the dask array
is rechunked onto the grid first.

Tasks need only picklable stores to run on ``dask.distributed`` worker
processes: a :class:`~zarrx.storage.LocalStore` or an fsspec URL. A
:class:`~zarrx.storage.MemoryStore` works with dask's threaded scheduler;
pickling it copies the data, so a read in another process sees a snapshot, and
a write task refuses to be sent to another process at all (its writes would be
lost there).
"""

from __future__ import annotations

import dataclasses
import math
import uuid
from dataclasses import dataclass
from typing import Any

import dask
import dask.array as da
import numpy as np
from dask.array.core import normalize_chunks
from dask.base import tokenize
from dask.blockwise import blockwise
from dask.delayed import Delayed
from dask.highlevelgraph import HighLevelGraph
from dask.layers import ArrayBlockwiseDep

from zarrx.array import Array
from zarrx.block_alignment import align_blocks, first_bad_boundary, regular_size
from zarrx.errors import ReadOnlyError, StoreError, UsageError
from zarrx.metadata.node import ArrayMetadata
from zarrx.storage.store import Store

__all__ = ["ArrayHandle", "BlockSelections", "array_to_dask", "from_zarr", "to_zarr"]

ALIGN_CHOICES = ("error", "rechunk")


@dataclass(frozen=True, eq=False)
class ArrayHandle:
    """Where an array lives and how it is coded: all a task needs to reach it.

    Pickles to the store (a path or URL for file stores), the node path and the
    metadata; each task makes its :class:`~zarrx.Array` from it, which costs no
    store access.
    """

    store: Store
    path: str
    metadata: ArrayMetadata
    write_empty_chunks: bool = False
    #: a handle write tasks use; it refuses to be pickled with an in-memory store
    for_writing: bool = False

    def __getstate__(self) -> dict[str, Any]:
        if self.for_writing and self.store.process_local:
            # Pickling copies an in-memory store (MemoryStore, memory://, or a wrapper of one): a
            # worker process would write into its copy and the data would be lost without a word.
            # Refuse instead (threads never pickle).
            raise StoreError(
                f"cannot send a write of array {'/' + self.path!r} in an in-memory store to another process "
                "(the writes would be lost there); use dask's threaded scheduler, or a LocalStore / fsspec URL"
            )
        return self.__dict__.copy()

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    @classmethod
    def from_array(cls, array: Array) -> "ArrayHandle":
        return cls(array.store, array.path, array.metadata, array.write_empty_chunks)

    def open(self, *, writable: bool = False) -> Array:
        return Array(
            self.store, self.path, self.metadata, read_only=not writable, write_empty_chunks=self.write_empty_chunks
        )

    def __dask_tokenize__(self) -> tuple[Any, ...]:
        # the store by its repr (root or URL; a MemoryStore by its dict's id), never by its contents
        return (type(self.store).__qualname__, repr(self.store), self.path, self.metadata.to_bytes())


def _chunks_token(chunks: tuple[tuple[int, ...], ...]) -> tuple[Any, ...]:
    """A short stand-in for ``chunks`` when tokenizing: a regular axis by its size, count and last block."""
    return tuple(
        (size, len(sizes), sizes[-1]) if (size := regular_size(sizes)) is not None else sizes for sizes in chunks
    )


class BlockSelections(ArrayBlockwiseDep):
    """The selection (a tuple of slices) of each dask block, made only when dask asks for it.

    Like ``dask.layers.ArraySliceDep``, without its Python cumulative sum over every block:
    on a regular axis block ``i`` starts at ``i * size``; other axes keep a NumPy table of starts.
    """

    def __init__(self, chunks: tuple[tuple[int, ...], ...]) -> None:
        super().__init__(chunks)
        self.sizes = tuple(regular_size(sizes) for sizes in chunks)
        self.starts = tuple(
            None if size is not None else np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
            for size, sizes in zip(self.sizes, chunks)
        )

    def __getitem__(self, idx: tuple[int, ...]) -> tuple[slice, ...]:
        selection = []
        for index, size, starts, sizes in zip(idx, self.sizes, self.starts, self.chunks):
            start = index * size if starts is None else int(starts[index])
            selection.append(slice(start, start + sizes[index]))
        return tuple(selection)

    def __dask_tokenize__(self) -> tuple[Any, ...]:
        return ("zarrx.dask.BlockSelections", _chunks_token(self.chunks))


# -- tasks ---------------------------------------------------------------------------------
def read_block(handle: ArrayHandle, selection: tuple[slice, ...]) -> np.ndarray:
    """A dask task: the block of the array at ``selection``."""
    # Ellipsis, not (), for a 0-d array: the array layer answers () with a scalar
    return handle.open().get_basic_selection(selection or Ellipsis)


def write_block(
    block: np.ndarray, handle: ArrayHandle, selection: tuple[slice, ...], offset: tuple[int, ...]
) -> np.ndarray:
    """A dask task: write ``block`` (at ``selection`` in the dask array) at ``offset`` + selection."""
    target = tuple(slice(s.start + o, s.stop + o) for s, o in zip(selection, offset))
    handle.open(writable=True).set_basic_selection(target or Ellipsis, block)
    return np.ones((1,) * block.ndim, dtype=bool)


def _finish(written: Any) -> None:
    return None


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
    chunks = _read_chunks(array, chunks)
    handle = ArrayHandle.from_array(array)
    name = f"zarrx-from-zarr-{tokenize(handle, _chunks_token(chunks))}"
    indices = tuple(range(array.ndim))
    layer = blockwise(
        read_block,
        name,
        indices,
        handle,
        None,
        BlockSelections(chunks),
        indices,
        numblocks={},
        _data_producer=True,
    )
    graph = HighLevelGraph.from_collections(name, layer, dependencies=())
    return da.Array(graph, name, chunks, meta=np.empty((0,) * array.ndim, dtype=array.dtype))


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
    if isinstance(store, Array):
        array = store
    else:
        from zarrx.api import open_array

        array = open_array(store, path, mode="r", storage_options=storage_options)
    return array_to_dask(array, chunks)


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


# -- writing -------------------------------------------------------------------------------
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
    shape of ``x``'s first block unless ``chunks`` is given; with ``shards`` give ``chunks``
    (the inner chunks) too, and the blocks must line up with the shards. With ``region`` (a
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
        if isinstance(store, Array):
            array = store
        else:
            from zarrx.api import open_array

            array = open_array(store, path, mode="r+", storage_options=storage_options)
        if array.read_only:
            raise ReadOnlyError(f"array {array.name!r} was opened read-only; open it with mode='r+' to write to it")
        offsets = _parse_region(() if region is None else region, array, x.shape)
    x = align_blocks(x, array, offsets, align)

    handle = dataclasses.replace(ArrayHandle.from_array(array), for_writing=True)
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
    from zarrx.api import create_array

    if "shape" in create_kwargs:
        raise UsageError(f"shape: to_zarr takes the shape from the dask array ({x.shape}); do not pass shape=")
    if create_kwargs.get("shards") is not None and create_kwargs.get("chunks") is None:
        raise UsageError(
            f"shards={create_kwargs['shards']!r} needs chunks= too (the inner chunk shape, dividing the shard "
            "shape); the dask blocks then have to line up with the shards"
        )
    kwargs = {"dtype": x.dtype, **create_kwargs}
    if kwargs.get("chunks") is None:
        # the first block along each axis; a 0-length axis still needs a chunk length of at least 1
        kwargs["chunks"] = tuple(max(1, int(sizes[0])) for sizes in x.chunks)
    return create_array(store, path, shape=x.shape, overwrite=overwrite, storage_options=storage_options, **kwargs)


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
