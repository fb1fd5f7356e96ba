"""zarrx in xarray: the ``engine="zarrx"`` backend and the ``.zarrx`` writers.

Reading::

    ds = xr.open_dataset("s3://bucket/data.zarr", engine="zarrx", chunks={})
    tree = xr.open_datatree("data.zarr", engine="zarrx")

Writing::

    ds.zarrx.to_zarr("out.zarr", mode="w")          # also DataArray.zarrx and DataTree.zarrx

The accessors are registered when this package is imported. xarray imports it itself when
it loads its backend plugins -- the first ``open_dataset``/``open_datatree``/``open_groups``
with ``engine="zarrx"`` or with no engine (auto-detection), or ``xr.backends.list_engines()``
-- because the ``xarray.backends`` entry point ``zarrx`` is
``zarrx.xarray.backend:ZarrxBackendEntrypoint``. Before that (in a process that only writes,
or only uses built-in engines such as ``engine="zarr"``), ``import zarrx.xarray`` makes them
available. ``import zarrx`` alone never imports xarray.
"""

from zarrx.xarray.accessor import ZarrxDataArrayAccessor, ZarrxDatasetAccessor, ZarrxDataTreeAccessor
from zarrx.xarray.backend import (
    MissingDimensionsError,
    ZarrxBackendArray,
    ZarrxBackendEntrypoint,
    ZarrxDataStore,
    open_zarrx_group,
)
from zarrx.xarray.writable import ZarrxWritableDataStore
from zarrx.xarray.writer import dataarray_to_zarr, datatree_to_zarr, to_zarr

__all__ = [
    "MissingDimensionsError",
    "ZarrxBackendArray",
    "ZarrxBackendEntrypoint",
    "ZarrxDataArrayAccessor",
    "ZarrxDataStore",
    "ZarrxDataTreeAccessor",
    "ZarrxDatasetAccessor",
    "ZarrxWritableDataStore",
    "dataarray_to_zarr",
    "datatree_to_zarr",
    "open_zarrx_group",
    "to_zarr",
]
