"""The thin adapter that runs xarray's and dask's own zarr tests against zarrx.

The peers' tests call their own entry points by name: ``ds.to_zarr(...)``,
``xr.open_dataset(..., engine="zarr")``, ``xr.open_zarr(...)``, ``da.from_zarr(...)``,
``x.to_zarr(...)``. While one of those tests runs, :func:`route_xarray_to_zarrx` and
:func:`route_dask_to_zarrx` point these names at zarrx -- ``ds.zarrx.to_zarr``,
``engine="zarrx"``, :func:`zarrx.from_zarr`, :func:`zarrx.to_zarr` -- and put them back after
it. Nothing else is changed: the tests' data, calls and assertions are the peers' own, and
where a test inspects a store with zarr-python (``zarr.open_group(store)``) it reads what
zarrx wrote.

xarray's zarr classes choose the Zarr format with zarr-python's ``default_zarr_format``
setting (their ``default_zarr_format`` fixture); the adapter passes that format to zarrx's
writer when a test gives none, as xarray's writer takes it from zarr-python.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import dask.array as da
import xarray as xr
import zarr
from xarray.backends import plugins

import zarrx

__all__ = ["route_xarray_to_zarrx", "route_dask_to_zarrx", "with_default_format"]


def with_default_format(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with zarr-python's default Zarr format when they give none and the write creates
    the group (modes ``w``, ``w-``): xarray's writer takes that default from zarr-python, and
    finds an existing group's format itself, as zarrx's does."""
    appends = kwargs.get("append_dim") is not None or kwargs.get("region") is not None
    creates = kwargs.get("mode") in ("w", "w-") or (kwargs.get("mode") is None and not appends)
    if kwargs.get("zarr_format") is None and creates:
        kwargs["zarr_format"] = zarr.config.get("default_zarr_format")
    return kwargs


def _keywords(method: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The keywords of a ``to_zarr`` call (positional arguments named as ``method`` names them)."""
    return with_default_format(dict(inspect.signature(method).bind_partial(*args, **kwargs).arguments))


def _dataset_to_zarr(self: xr.Dataset, *args: Any, **kwargs: Any) -> Any:
    return self.zarrx.to_zarr(**_keywords(self.zarrx.to_zarr, args, kwargs))


def _dataarray_to_zarr(self: xr.DataArray, *args: Any, **kwargs: Any) -> Any:
    return self.zarrx.to_zarr(**_keywords(self.zarrx.to_zarr, args, kwargs))


def _datatree_to_zarr(self: xr.DataTree, *args: Any, **kwargs: Any) -> Any:
    return self.zarrx.to_zarr(**_keywords(self.zarrx.to_zarr, args, kwargs))


def _zarrx_for_zarr(get_backend: Any) -> Any:
    @functools.wraps(get_backend)
    def get(engine: Any) -> Any:
        # zarrx's entry point as xarray loads it (with its open_dataset_parameters filled in)
        return plugins.list_engines()["zarrx"] if engine == "zarr" else get_backend(engine)

    return get


def route_xarray_to_zarrx(monkeypatch: Any) -> None:
    """``Dataset/DataArray/DataTree.to_zarr`` -> ``.zarrx.to_zarr``; ``engine="zarr"`` -> zarrx."""
    monkeypatch.setattr(xr.Dataset, "to_zarr", _dataset_to_zarr)
    monkeypatch.setattr(xr.DataArray, "to_zarr", _dataarray_to_zarr)
    monkeypatch.setattr(xr.DataTree, "to_zarr", _datatree_to_zarr)
    monkeypatch.setattr(plugins, "get_backend", _zarrx_for_zarr(plugins.get_backend))


def route_dask_to_zarrx(monkeypatch: Any) -> None:
    """``da.from_zarr`` -> :func:`zarrx.from_zarr`; ``da.to_zarr`` and ``x.to_zarr`` ->
    :func:`zarrx.to_zarr`, with zarrx's defaults (it lines the blocks up with the shards, as
    dask's ``to_zarr`` does)."""
    monkeypatch.setattr(da, "from_zarr", zarrx.from_zarr)
    monkeypatch.setattr(da, "to_zarr", zarrx.to_zarr)
    monkeypatch.setattr(da.Array, "to_zarr", zarrx.to_zarr)
