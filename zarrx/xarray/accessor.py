"""The ``.zarrx`` accessors of xarray objects: ``ds.zarrx.to_zarr``, ``da.zarrx.to_zarr``,
``dt.zarrx.to_zarr``.

Importing this module registers them (xarray's ``register_*_accessor``); the package
:mod:`zarrx.xarray` imports it, so they exist whenever zarrx's backend is loaded.
"""

from __future__ import annotations

from typing import Any

import xarray as xr

from zarrx.xarray.writer import dataarray_to_zarr, datatree_to_zarr, to_zarr

__all__ = ["ZarrxDatasetAccessor", "ZarrxDataArrayAccessor", "ZarrxDataTreeAccessor"]


@xr.register_dataset_accessor("zarrx")
class ZarrxDatasetAccessor:
    """``ds.zarrx``: zarrx's writer for a Dataset."""

    def __init__(self, dataset: xr.Dataset) -> None:
        self._dataset = dataset

    def to_zarr(self, store: Any = None, *args: Any, **kwargs: Any) -> Any:
        """Write the Dataset with zarrx; see :func:`zarrx.xarray.writer.to_zarr`."""
        return to_zarr(self._dataset, store, *args, **kwargs)


@xr.register_dataarray_accessor("zarrx")
class ZarrxDataArrayAccessor:
    """``da.zarrx``: zarrx's writer for a DataArray (stored as a one-variable Dataset)."""

    def __init__(self, array: xr.DataArray) -> None:
        self._array = array

    def to_zarr(self, store: Any = None, *args: Any, **kwargs: Any) -> Any:
        """Write the DataArray with zarrx; see :func:`zarrx.xarray.writer.dataarray_to_zarr`."""
        return dataarray_to_zarr(self._array, store, *args, **kwargs)


@xr.register_datatree_accessor("zarrx")
class ZarrxDataTreeAccessor:
    """``dt.zarrx``: zarrx's writer for a DataTree (one group per node)."""

    def __init__(self, tree: xr.DataTree) -> None:
        self._tree = tree

    def to_zarr(self, store: Any = None, *args: Any, **kwargs: Any) -> Any:
        """Write every node of the tree with zarrx; see :func:`zarrx.xarray.writer.datatree_to_zarr`."""
        return datatree_to_zarr(self._tree, store, *args, **kwargs)
