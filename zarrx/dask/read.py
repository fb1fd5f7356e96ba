"""Zarr arrays as dask arrays: graph building only.

Reading (:func:`from_zarr`, :meth:`zarrx.Array.to_dask`) gives one task per stored object: per
chunk, or per shard for a sharded array. ``chunks=`` may ask for other blocks: multiples of
the (inner) chunk shape, or -- as in ``dask.array.from_zarr`` -- blocks that cut through chunks,
each task reading the part of a chunk it covers. Each task holds the array's
:class:`~zarrx.io.handle.ArrayHandle` -- the store, the node path and the parsed metadata,
about a kilobyte pickled, never data -- and its block's selection, and reads it with
:func:`zarrx.io.execute.read_selection`, the batched path ``arr[...]`` takes.

The result is an ordinary dask array built by :func:`~zarrx.dask.lazy.lazy_array`: one
``Blockwise`` read layer whose tasks are made when dask culls it, described by a few numbers per
axis (:mod:`zarrx.dask.axes`), so building it costs the same for ten chunks or a million. What
is done to it afterwards is dask's: a slice shares the read tasks of the array it came from. A
graph that follows a selection instead of the array is asked for when the array is made:
``region=`` reads only the blocks the selection touches
(``from_zarr(store, "t2m", region=(slice(0, 10),))``), and with dask's array expressions dask's
optimiser pushes slices into the read itself (:mod:`zarrx.dask.expression`).

Tasks need only picklable stores to run on ``dask.distributed`` worker processes: a
:class:`~zarrx.storage.LocalStore` or an fsspec URL. A :class:`~zarrx.storage.MemoryStore`
works with dask's threaded scheduler; pickling it copies the data, so a read in another process
sees a snapshot.
"""

from __future__ import annotations

import math
import os
import threading
from collections import OrderedDict
from typing import Any

try:
    import resource
except ImportError:  # Windows
    resource = None  # type: ignore[assignment]

import dask.array as da
import numpy as np
from dask.array.core import normalize_chunks
from dask.base import tokenize

from zarrx.concurrency import task_threads
from zarrx.metadata.rectilinear import grid_blocks
from zarrx.dask.axes import Axis, axis_from_sizes, regular_axis
from zarrx.dask.lazy import BlockSelections, Layout, Source, lazy_array, select
from zarrx.errors import GraphTooLargeError, NameNotFoundError, SelectionError, UsageError, UsageTypeError
from zarrx.io.execute import read_selection
from zarrx.io.handle import ArrayHandle
from zarrx.nodes.api import open_array
from zarrx.nodes.array import Array
from zarrx.sizes import count_text, human_bytes
from zarrx.storage.zarr_python import zarr_python_array_location

__all__ = ["BlockSelections", "array_to_dask", "from_zarr", "read_block", "read_peer_block"]


# -- tasks ---------------------------------------------------------------------------------
def read_block(handle: ArrayHandle, selection: tuple[slice | int, ...]) -> np.ndarray:
    """A dask task: the block of the array at ``selection`` (an integer drops its axis, as in NumPy).

    It runs on the thread dask gives it (:func:`zarrx.concurrency.task_threads`: at most
    ``zarrx.threads-per-task`` threads, default 1) and frees its scratch buffers at the end."""
    with task_threads():
        return np.asarray(read_selection(handle, selection or Ellipsis))


#: zarr-python arrays tasks have read through lately (``id`` -> the array, its handle): the
#: array object a graph of ``from_zarr(zarr_array, inline_array=False)`` holds reaches each
#: worker once and is opened once there
_PEER_HANDLES: OrderedDict[int, tuple[Any, ArrayHandle]] = OrderedDict()
_PEER_HANDLES_KEPT = 32
_PEER_LOCK = threading.Lock()


def read_peer_block(peer: Any, selection: tuple[slice | int, ...]) -> np.ndarray:
    """A dask task: :func:`read_block` of a zarr-python array ``peer`` (read through its store)."""
    with _PEER_LOCK:
        kept = _PEER_HANDLES.get(id(peer))
        if kept is not None and kept[0] is peer:
            _PEER_HANDLES.move_to_end(id(peer))
            handle = kept[1]
        else:
            handle = None
    if handle is None:
        store, path = zarr_python_array_location(peer)
        handle = open_array(store, path, mode="r").handle
        with _PEER_LOCK:
            _PEER_HANDLES[id(peer)] = (peer, handle)
            while len(_PEER_HANDLES) > _PEER_HANDLES_KEPT:
                _PEER_HANDLES.popitem(last=False)
    return read_block(handle, selection)


# -- reading -------------------------------------------------------------------------------
def array_to_dask(
    array: Array, chunks: Any = None, name: str | None = None, *, region: Any = None, inline_array: bool | None = None,
    original: Any = None,
) -> da.Array:
    """The array as a lazy dask array, one task per block.

    Parameters
    ----------
    array
        A zarrx array.
    chunks
        The dask block shape: by default the shard shape for a sharded array, else the chunk
        shape. Anything ``dask.array.normalize_chunks`` takes (ints, -1 or None for a whole
        axis, explicit block sizes per axis, ``"auto"``). Blocks that are multiples of the
        (inner) chunk shape read whole chunks; blocks that cut through chunks work too, as in
        ``dask.array.from_zarr`` (each task reads the part of a chunk it needs, so such a chunk
        is fetched and decoded once per block touching it).
    name
        The dask array's name (by default one derived from the array and ``chunks``).
    region
        A basic selection -- integers, slices (any step), ``Ellipsis``, ``None``, or a mapping
        of dimension names (or axis numbers) to slices or integers -- to read instead of the
        whole array: the result is what ``x[region]`` would be, with a graph of the touched
        blocks only, whatever the size of the array. Blocks stay on the stored grid (the first
        along an axis may be shorter).
    inline_array
        As in ``dask.array.from_array``: False puts the array (its handle, or ``original``) in
        the graph as a key of its own (``"original-<name>"``) that every read task refers to;
        True or None (the default) gives each task the handle itself.
    original
        The zarr-python array this one was opened from (by :func:`from_zarr`): with
        ``inline_array=False`` it is that key's value, and tasks read through it.

    Raises
    ------
    UsageError
        ``chunks`` is not something ``dask.array.normalize_chunks`` takes for the array's shape.
    GraphTooLargeError
        The array has so many blocks that the dask array cannot be built (its block sizes
        alone would take more than half the machine's memory); the message suggests ``chunks=``.

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
    >>> array_to_dask(arr, chunks=(3, 3)).compute()[2:4, 2:4]   # blocks that cut through chunks
    array([[10, 11],
           [14, 15]], dtype=int32)
    >>> array_to_dask(arr, region=(slice(1, 5), 0)).compute()
    array([ 4,  8, 12, 16], dtype=int32)
    """
    asked = chunks
    try:
        handle = array.handle
        inline = inline_array is None or bool(inline_array)
        if not inline and original is not None:
            source = Source(read_peer_block, original, tokenize(handle, "original"), "zarrx-from-zarr", inline=False)
        else:
            source = Source(read_block, handle, tokenize(handle, inline), "zarrx-from-zarr", inline=inline)
        layout = Layout(source, _read_axes(array, chunks))
        if region is None:
            return lazy_array(layout, array.dtype, name)
        index = _region_index(array, region)
        try:
            return select(layout, array.dtype, index)
        except IndexError as error:
            raise SelectionError(f"region={region!r} of array {array.name!r} (shape {array.shape}): {error}") from None
        except TypeError as error:
            raise UsageTypeError(f"region={region!r} of array {array.name!r}: {error}") from None
    except GraphTooLargeError:
        raise
    except MemoryError:  # a layout the estimate could not see (explicit or "auto" blocks), or little memory
        raise GraphTooLargeError(
            f"array {array.name!r} in {array.store!r}: a dask array of shape {array.shape} in blocks "
            f"chunks={asked!r} (chunk shape {array.chunks}) does not fit in memory; pass larger blocks with chunks="
        ) from None


def from_zarr(
    store: Any,
    path: str = "",
    chunks: Any = None,
    storage_options: dict[str, Any] | None = None,
    *,
    component: str | None = None,
    name: str | None = None,
    inline_array: bool | None = None,
    region: Any = None,
) -> da.Array:
    """Open the array at ``path`` as a lazy dask array (see :func:`array_to_dask` for ``chunks``).

    ``store`` is anything :func:`zarrx.open_array` takes, a :class:`zarrx.Array`, or a
    zarr-python ``Array`` (read through its store). ``component``, ``name`` and ``inline_array``
    are ``dask.array.from_zarr``'s: ``component`` is another name for ``path``, ``name`` names
    the dask array, and ``inline_array=False`` puts the array in the graph as a key of its own
    that the read tasks refer to -- the zarr-python array given, or else the zarrx array's small
    handle -- where by default (None, or True) each task holds the handle (never the array
    object). ``region`` reads a basic selection only, with a graph of the blocks it touches
    (see :func:`array_to_dask`).

    Examples
    --------
    >>> import zarrx
    >>> _ = zarrx.create_array("memory://example-from-zarr", shape=(10,), chunks=(5,), dtype="int8",
    ...                        fill_value=1, overwrite=True)
    >>> x = zarrx.from_zarr("memory://example-from-zarr")
    >>> x.chunks, int(x.sum())
    (((5, 5),), 10)
    """
    if component is not None:
        if path:
            raise UsageError(f"path={path!r} and component={component!r}: pass one of them (component is dask's name)")
        path = component
    original, peer = None, zarr_python_array_location(store)
    if peer is not None:
        original, (store, path) = store, peer
    array = store if isinstance(store, Array) else open_array(store, path, mode="r", storage_options=storage_options)
    return array_to_dask(array, chunks, name=name, region=region, inline_array=inline_array, original=original)


def _region_index(array: Array, region: Any) -> Any:
    """``region`` as an index: a mapping of dimension names or axis numbers becomes a tuple."""
    if not isinstance(region, dict):
        return region
    names = list(array.dimension_names or ())
    index: list[Any] = [slice(None)] * array.ndim
    for key, item in region.items():
        if isinstance(key, int) and not isinstance(key, bool) and -array.ndim <= key < array.ndim:
            axis = key % array.ndim
        elif key in names:
            axis = names.index(key)
        else:
            raise NameNotFoundError(
                f"region: {key!r} is neither an axis number nor a dimension name of array {array.name!r} "
                f"(dimension names {array.dimension_names})"
            )
        index[axis] = item
    return tuple(index)


#: what a dask array keeps per block along each axis (its ``chunks`` tuples, as normalize_chunks
#: builds them): about 46 bytes measured; a graph whose tuples need more than half the machine's
#: memory cannot be built
BYTES_PER_BLOCK = 48


def _memory() -> int:
    """The memory this process may use: the machine's, or less under an address-space limit
    (16 GiB where the system does not say)."""
    try:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        memory = 16 * 2**30
    if resource is None:
        return memory
    try:
        limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    except (OSError, ValueError):
        return memory
    return memory if limit in (resource.RLIM_INFINITY, -1) or limit <= 0 else min(memory, limit)


def _regular_blocks(array: Array, chunks: Any, stored: tuple[int, ...]) -> tuple[int, ...] | None:
    """The block size along each axis when ``chunks`` gives one (None, ints, -1), else None."""
    sizes = stored if chunks is None else (chunks,) * array.ndim if isinstance(chunks, int) else chunks
    if not isinstance(sizes, (tuple, list)) or len(sizes) != array.ndim:
        return None
    if not all(size is None or (isinstance(size, int) and not isinstance(size, bool)) for size in sizes):
        return None
    return tuple(length if size in (None, -1) or size <= 0 else size for size, length in zip(sizes, array.shape))


def _refuse_huge_graph(array: Array, chunks: Any, blocks: tuple[int, ...]) -> None:
    """A :class:`~zarrx.errors.GraphTooLargeError` when the block sizes alone would not fit in memory."""
    counts = tuple(math.ceil(length / size) if length else 0 for length, size in zip(array.shape, blocks))
    needed, memory = sum(counts) * BYTES_PER_BLOCK, _memory()
    if needed <= memory // 2:
        return
    inner = array.chunks
    suggestion = tuple(
        max(size, chunk * math.ceil(count / 10**5)) if count > 10**5 else size
        for size, chunk, count in zip(blocks, inner, counts)
    )
    raise GraphTooLargeError(
        f"array {array.name!r} in {array.store!r} has {count_text(math.prod(counts))} chunks "
        f"({' x '.join(map(str, counts))} blocks of {blocks} with chunks={chunks!r}): a dask array keeps the size "
        f"of every block along each axis, {human_bytes(needed)} here, more than half this machine's memory "
        f"({human_bytes(memory)}), so its graph cannot be built. Pass larger blocks (multiples of the chunk shape "
        f"{inner}), e.g. chunks={suggestion} -- arr.to_dask(chunks=...) or zarrx.from_zarr(..., chunks=...)"
    )


def _read_axes(array: Array, chunks: Any) -> tuple[Axis, ...]:
    """The blocks along each axis for reading ``array``: regular ones (of any size, whether or not
    they cut through chunks) straight from a regular chunk grid (no tuple per block is made here),
    anything else -- a rectilinear grid, irregular sizes, ``"auto"`` -- from :func:`_read_chunks`,
    as a table of block edges when irregular."""
    stored = array.shards or array.chunks
    given = () if chunks is None else (chunks,) if isinstance(chunks, int) else chunks
    plain = isinstance(given, (tuple, list)) and all(
        item is None or (isinstance(item, int) and not isinstance(item, bool) and (item == -1 or item > 0))
        for item in given
    )
    regular = _regular_blocks(array, chunks, stored) if plain and not _is_rectilinear(stored) else None
    if regular is not None:
        _refuse_huge_graph(array, chunks, regular)
        return tuple(regular_axis(length, min(size, length)) for length, size in zip(array.shape, regular))
    return tuple(axis_from_sizes(blocks) for blocks in _read_chunks(array, chunks))


def _is_rectilinear(stored: tuple[Any, ...]) -> bool:
    """Whether a chunk (or shard) shape is a rectilinear grid's edges (a tuple per axis)."""
    return isinstance(stored[0] if stored else None, tuple)


def _read_chunks(array: Array, chunks: Any) -> tuple[tuple[int, ...], ...]:
    """Dask block sizes for reading ``array``: ``chunks`` normalized (``"auto"`` in multiples of the
    shard or chunk shape). Blocks may end inside a stored chunk, as in ``dask.array.from_zarr``:
    each task reads the part of every chunk its block covers (a chunk cut by a block boundary is
    fetched and decoded by each task that covers part of it)."""
    stored = array.shards or array.chunks
    if _is_rectilinear(stored):  # a rectilinear grid: its chunks are the blocks
        stored = grid_blocks(stored, array.shape)
    else:
        regular = _regular_blocks(array, chunks, stored)
        if regular is not None:
            _refuse_huge_graph(array, chunks, regular)
    try:
        blocks = normalize_chunks(
            stored if chunks is None else chunks, array.shape, dtype=array.dtype,
            previous_chunks=None if _is_rectilinear(stored) else stored,
        )  # fmt: skip
    except (TypeError, ValueError) as error:
        raise UsageError(f"chunks: cannot use {chunks!r} for an array of shape {array.shape}: {error}") from None
    return blocks


