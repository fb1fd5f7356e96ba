"""The xarray chunk manager ``"zarrx"``: dask arrays whose graph cost follows the selection.

With ``chunks=``, xarray makes a dask array of each variable itself -- it calls its chunk
manager's ``from_array`` on the lazily indexed, CF-decoding wrapper of the backend array and
ignores any dask array a backend would offer (xarray issue 8810). The default manager, dask's,
builds an array whose shape, slicing and culling walk every block in Python: seconds and a
gigabyte for a few variables of a million chunks, even to compute on ten.

:class:`ZarrxChunkManager` is registered under the ``xarray.chunkmanagers`` entry point as
``"zarrx"`` and chosen per call::

    ds = xr.open_dataset(store, engine="zarrx", chunks={}, chunked_array_type="zarrx")
    ds.isel(time=slice(0, 10)).mean().compute()      # a graph of ten blocks per variable

It is dask's manager (:class:`xarray.namedarray.daskmanager.DaskManager`) in every respect but
one: ``from_array`` of lazily indexed data returns a dask array built by
:func:`~zarrx.dask.lazy.lazy_array` (its shape, slicing and culling follow the selection) whose
tasks read their block through xarray's wrapper, exactly the block ``dask.array.from_array``
would read -- so CF decoding (masking with ``_FillValue``, ``scale_factor``/``add_offset``,
times) runs lazily per block, for any backend (Zarr v2 stores with fill-value masking, Zarr v3,
``engine="zarr"`` too). Every other input (NumPy data, dask arrays, other keywords) goes to
dask's own ``from_array`` / ``rechunk``. The arrays are plain ``dask.array.Array`` objects: every
operation, ``compute``, ``persist`` and writing is dask's, and ``is_chunked_array`` leaves
recognising them to dask's manager (xarray refuses an array two managers claim).
"""

from __future__ import annotations

import functools
import uuid
from dataclasses import dataclass
from typing import Any

import dask.array as da
import numpy as np
from dask.array.core import getter, normalize_chunks
from dask.base import tokenize
from dask.utils import SerializableLock
from xarray.core.indexing import ImplicitToExplicitIndexingAdapter
from xarray.namedarray.daskmanager import DaskManager

from zarrx.dask.axes import Axis, axis_from_sizes
from zarrx.dask.lazy import Layout, Source, lazy_array

__all__ = ["ExplicitRead", "ZarrxChunkManager", "read_explicitly"]

#: keywords of ``from_array`` honoured here (the ones xarray passes); others go to dask's own
_KEYWORDS = frozenset({"name", "lock", "inline_array", "meta"})


@dataclass(frozen=True, eq=False)
class ExplicitRead:
    """The argument of a read task: xarray's lazily indexed array and the lock around reads."""

    array: ImplicitToExplicitIndexingAdapter
    lock: Any = None


def read_explicitly(source: ExplicitRead, selection: tuple[slice | int, ...]) -> np.ndarray:
    """A dask task: the block at ``selection``, read as ``dask.array.from_array`` reads it.

    An integer is read as a slice of one element, then dropped: the block dask reads before
    its own indexing picks the element."""
    slices = tuple(slice(item, item + 1) if isinstance(item, int) else item for item in selection)
    block = getter(source.array, slices, asarray=True, lock=source.lock)
    if len(slices) != sum(isinstance(item, slice) for item in selection):
        block = np.asarray(block[tuple(0 if isinstance(item, int) else slice(None) for item in selection)])
    return block


class ZarrxChunkManager(DaskManager):
    """dask's chunk manager, with ``from_array`` returning :func:`~zarrx.dask.lazy.lazy_array` arrays.

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

    def normalize_chunks(
        self,
        chunks: Any,
        shape: tuple[int, ...] | None = None,
        limit: int | None = None,
        dtype: Any = None,
        previous_chunks: Any = None,
    ) -> Any:
        """dask's ``normalize_chunks``, remembered: the variables of a dataset mostly share their
        shape and chunks, and a million-block result is a tuple of a million sizes to make and check."""
        if all(map(_rememberable, (chunks, shape, limit, previous_chunks))):
            return _normalize_chunks(chunks, shape, limit, None if dtype is None else np.dtype(dtype), previous_chunks)
        return super().normalize_chunks(chunks, shape, limit, dtype, previous_chunks)

    def from_array(self, data: Any, chunks: Any, **kwargs: Any) -> Any:
        if isinstance(data, da.Array):  # already chunked: as dask's manager does for its arrays
            return self.rechunk(data, chunks)
        if not isinstance(data, ImplicitToExplicitIndexingAdapter) or not _KEYWORDS.issuperset(kwargs):
            return super().from_array(data, chunks, **kwargs)
        if isinstance(chunks, tuple) and "auto" in chunks and any(size == 0 for size in data.shape):
            chunks = data.shape  # as DaskManager.from_array
        blocks = self.normalize_chunks(chunks, data.shape, dtype=data.dtype)
        lock = SerializableLock() if kwargs.get("lock") is True else kwargs.get("lock") or None
        name = _array_name(kwargs.get("name"), data, blocks, lock)
        source = Source(read_explicitly, ExplicitRead(data, lock), name, name.rpartition("-")[0] or "array")
        return lazy_array(Layout(source, _axes(blocks)), data.dtype, name, chunks=blocks)


def _rememberable(argument: Any) -> bool:
    """Whether normalize_chunks' result for ``argument`` can be remembered: xarray's forms (sizes,
    -1, None, "auto", tuples of them, tuples of sizes), compared as they are by value."""
    if argument is None or type(argument) in (int, str):
        return True
    return type(argument) is tuple and all(item is None or type(item) in (int, str, tuple) for item in argument)


@functools.lru_cache(maxsize=8)
def _normalize_chunks(chunks: Any, shape: Any, limit: Any, dtype: Any, previous_chunks: Any) -> Any:
    return normalize_chunks(chunks, shape=shape, limit=limit, dtype=dtype, previous_chunks=previous_chunks)


#: the last block sizes described and their description: variables mostly share them (one
#: tuple, from the remembered normalize_chunks), so most need no walk over their blocks
_last_axes: tuple[Any, Any] = (None, None)


def _axes(blocks: tuple[tuple[int, ...], ...]) -> tuple[Axis, ...]:
    global _last_axes
    last = _last_axes
    if last[0] is blocks:
        return last[1]
    axes = tuple(axis_from_sizes(sizes) for sizes in blocks)
    _last_axes = (blocks, axes)
    return axes


def _array_name(name: Any, data: Any, blocks: tuple[tuple[int, ...], ...], lock: Any) -> str:
    """The name ``dask.array.from_array`` would give (a token of the data for None, a random one for False)."""
    if name is False:
        return f"array-{uuid.uuid4().hex}"
    if name in (None, True):
        return f"array-{tokenize(data, blocks, lock)}"
    return str(name)
