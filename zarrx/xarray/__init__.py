"""zarrx in xarray: the ``engine="zarrx"`` backend and the ``.zarrx`` writers.

Reading::

    ds = xr.open_dataset("s3://bucket/data.zarr", engine="zarrx", chunks={})
    tree = xr.open_datatree("data.zarr", engine="zarrx")

Writing::

    ds.zarrx.to_zarr("out.zarr", mode="w")          # also DataArray.zarrx and DataTree.zarrx

The accessors are registered when this package is imported, and ``import zarrx`` imports it
as soon as xarray is imported (or at once, when it already is): ``ds.zarrx`` exists in every
session that uses xarray, while ``import zarrx`` alone never imports xarray. xarray may be
imported from inside another library's import (dask's ``dask.array`` does), so importing this
package imports nothing but xarray and the accessors; the backend and writers (which import
dask) load on first use of their names, or when xarray loads the ``zarrx`` entry point
(``zarrx.xarray.backend:ZarrxBackendEntrypoint``).
"""

import importlib
from typing import Any

from zarrx.xarray.accessor import ZarrxDataArrayAccessor, ZarrxDatasetAccessor, ZarrxDataTreeAccessor

#: the other public names, and the module each is loaded from on first use
_LAZY = {
    "MissingDimensionsError": "zarrx.xarray.store",
    "ZarrxBackendArray": "zarrx.xarray.store",
    "ZarrxDataStore": "zarrx.xarray.store",
    "ZarrxBackendEntrypoint": "zarrx.xarray.backend",
    "open_zarrx_group": "zarrx.xarray.backend",
    "ZarrxWritableDataStore": "zarrx.xarray.writable",
    "dataarray_to_zarr": "zarrx.xarray.writer",
    "datatree_to_zarr": "zarrx.xarray.writer",
    "to_zarr": "zarrx.xarray.writer",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'zarrx.xarray' has no attribute {name!r}")


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
