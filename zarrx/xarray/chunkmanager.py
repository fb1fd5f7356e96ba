"""The xarray chunk manager ``"zarrx"``: dask's, with a read layer that costs O(ndim) to build.

With ``chunks=``, xarray makes a dask array of each variable itself -- it calls its chunk
manager's ``from_array`` on the lazily indexed, CF-decoding wrapper of the backend array and
ignores any dask array a backend would offer (xarray issue 8810). dask's ``from_array`` walks
every block in Python a few times (its block slices are a running sum over the blocks).

:class:`ZarrxChunkManager` is registered under the ``xarray.chunkmanagers`` entry point as
``"zarrx"`` and chosen per call::

    ds = xr.open_dataset(store, engine="zarrx", chunks={}, chunked_array_type="zarrx")

It is dask's manager (:class:`xarray.namedarray.daskmanager.DaskManager`) in every respect but
one: ``from_array`` of a lazily indexed array returns a dask array built by
:func:`~zarrx.dask.lazy.lazy_array` -- one ``Blockwise`` read layer described by a few numbers
per axis -- whose tasks read their block through xarray's wrapper, exactly the block
``dask.array.from_array`` would read, so CF decoding runs lazily per block, for any backend.
Every other input (NumPy data, dask arrays, other keywords) goes to dask's own ``from_array`` /
``rechunk``. The arrays are plain ``dask.array.Array`` objects: slicing, every operation,
``compute``, ``persist`` and writing are dask's, and ``is_chunked_array`` leaves recognising them
to dask's manager (xarray refuses an array two managers claim). A graph that follows a
selection comes from selecting before chunking (docs/giant-datasets.md).

xarray loads this module whenever it lists its chunk managers, so it imports neither dask nor
zarrx's dask layer until an array is made.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np
from xarray.namedarray.daskmanager import DaskManager

__all__ = ["ExplicitRead", "ZarrxChunkManager", "read_explicitly"]

#: keywords of ``from_array`` honoured here (the ones xarray passes); others go to dask's own
_KEYWORDS = frozenset({"name", "lock", "inline_array", "meta"})


@dataclass(frozen=True, eq=False)
class ExplicitRead:
    """The argument of a read task: xarray's lazily indexed array and the lock around reads."""

    array: Any
    lock: Any = None


def read_explicitly(source: ExplicitRead, selection: tuple[slice | int, ...]) -> np.ndarray:
    """A dask task: the block at ``selection``, read as ``dask.array.from_array`` reads it.

    An integer is read as a slice of one element, then dropped: the block dask reads before
    its own indexing picks the element."""
    from dask.array.core import getter

    slices = tuple(slice(item, item + 1) if isinstance(item, int) else item for item in selection)
    block = getter(source.array, slices, asarray=True, lock=source.lock)
    if len(slices) != sum(isinstance(item, slice) for item in selection):
        block = np.asarray(block[tuple(0 if isinstance(item, int) else slice(None) for item in selection)])
    return block


class ZarrxChunkManager(DaskManager):
    """dask's chunk manager, with ``from_array`` of lazily indexed data building one read layer.

    Select it with ``chunked_array_type="zarrx"`` (``open_dataset``, ``open_zarr``,
    ``Dataset.chunk``, ...).

    Examples
    --------
    >>> import numpy as np, xarray as xr, zarrx
    >>> root = zarrx.create_group("memory://example-chunkmanager", overwrite=True)
    >>> t = root.create_array("t", shape=(100_000,), chunks=(1,), dtype="float32", fill_value=0,
    ...                       dimension_names=["time"])
    >>> ds = xr.open_dataset("memory://example-chunkmanager", engine="zarrx", chunks={},
    ...                      chunked_array_type="zarrx")
    >>> part = ds.t.isel(time=slice(5, 8))
    >>> part.chunks, float(part.sum())
    (((1, 1, 1),), 0.0)
    """

    def is_chunked_array(self, data: Any) -> bool:
        # the arrays are dask arrays: dask's manager recognises them, and xarray refuses an
        # array that two managers claim, so this one claims none
        return False

    def from_array(self, data: Any, chunks: Any, **kwargs: Any) -> Any:
        if super().is_chunked_array(data):  # already chunked (a dask array): as dask's manager does
            return self.rechunk(data, chunks)
        if not _lazily_indexed(data) or not _KEYWORDS.issuperset(kwargs):
            return super().from_array(data, chunks, **kwargs)
        from dask.base import tokenize
        from dask.utils import SerializableLock

        from zarrx.dask.axes import axis_from_sizes
        from zarrx.dask.lazy import Layout, Source, lazy_array

        if isinstance(chunks, tuple) and "auto" in chunks and any(size == 0 for size in data.shape):
            chunks = data.shape  # as DaskManager.from_array
        blocks = self.normalize_chunks(chunks, data.shape, dtype=data.dtype)
        lock = SerializableLock() if kwargs.get("lock") is True else kwargs.get("lock") or None
        name = _array_name(kwargs.get("name"), data, blocks, lock, tokenize)
        source = Source(read_explicitly, ExplicitRead(data, lock), name, name.rpartition("-")[0] or "array")
        axes = tuple(axis_from_sizes(sizes) for sizes in blocks)
        return lazy_array(Layout(source, axes), data.dtype, name, chunks=blocks)


def _lazily_indexed(data: Any) -> bool:
    """Whether ``data`` is a lazily indexed reader -- what xarray hands ``from_array`` for a
    variable read from a backend -- rather than an array in memory: it indexes (``shape``,
    ``dtype``, ``__getitem__``) but is no NumPy-protocol array (no ``__array_function__``: NumPy,
    CuPy, sparse, pint arrays go to dask's own ``from_array``, which keeps their type). This is
    dask's own test for whether blocks need ``np.asarray`` (``from_array(asarray=None)``)."""
    if hasattr(data, "__array_function__"):
        return False
    return all(hasattr(data, name) for name in ("shape", "dtype", "__getitem__"))


def _array_name(name: Any, data: Any, blocks: tuple[tuple[int, ...], ...], lock: Any, tokenize: Any) -> str:
    """The name ``dask.array.from_array`` would give (a token of the data for None, a random one for False)."""
    if name is False:
        return f"array-{uuid.uuid4().hex}"
    if name in (None, True):
        return f"array-{tokenize(data, blocks, lock)}"
    return str(name)
