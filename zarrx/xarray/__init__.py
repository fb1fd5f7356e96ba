"""zarrx in xarray: the ``engine="zarrx"`` backend and the ``.zarrx`` accessors.

Reading::

    ds = xr.open_dataset("s3://bucket/data.zarr", engine="zarrx", chunks={})
    tree = xr.open_datatree("data.zarr", engine="zarrx")
    part = xr.open_dataset("data.zarr", engine="zarrx").isel(time=slice(0, 10)).zarrx.chunk()

Writing::

    ds.zarrx.to_zarr("out.zarr", mode="w")          # also DataArray.zarrx and DataTree.zarrx

Importing this package registers the accessors (``ds.zarrx``, ``da.zarrx``, ``dt.zarrx``) by a
plain import of :mod:`zarrx.xarray.accessor`, as ``import rioxarray`` registers ``.rio``. The
``engine="zarrx"`` entry point imports it too, so opening a dataset with zarrx (or xarray listing
its engines) registers them, and ``import zarrx`` does when xarray is already imported. Importing
this package imports nothing but xarray and the accessors; the backend, the store and the
writers (which import zarrx's core and dask) load on first use of their names, or when xarray
loads the ``zarrx`` entry point (``zarrx.xarray.backend:ZarrxBackendEntrypoint``, which itself
imports the rest only when a dataset is opened).
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
