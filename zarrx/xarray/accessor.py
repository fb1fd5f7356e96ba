"""The ``.zarrx`` accessors of xarray objects: ``ds.zarrx.to_zarr``, ``da.zarrx.to_zarr``,
``dt.zarrx.to_zarr``.

Each ``to_zarr`` has the signature of the xarray method it stands in for (``Dataset.to_zarr``,
``DataArray.to_zarr``, ``DataTree.to_zarr``), so switching is a matter of adding ``.zarrx``.
The signatures are those of :func:`zarrx.xarray.writer.to_zarr` and
:func:`zarrx.xarray.writer.datatree_to_zarr` (without their first argument), which describe
every parameter.

Importing this module registers them (xarray's ``register_*_accessor``). ``import zarrx``
imports it as soon as xarray is imported (or at once when it already is), so ``ds.zarrx``
exists in every session that uses xarray.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

import xarray as xr

from zarrx.xarray.writer import dataarray_to_zarr, datatree_to_zarr, to_zarr

__all__ = ["ZarrxDatasetAccessor", "ZarrxDataArrayAccessor", "ZarrxDataTreeAccessor"]


def _writer_method(write: Callable[..., Any], signature_of: Callable[..., Any], doc: str) -> Callable[..., Any]:
    """A ``to_zarr`` method calling ``write(obj, ...)``, with ``signature_of``'s parameters after its first."""

    def to_zarr(self: Any, *args: Any, **kwargs: Any) -> Any:
        return write(self._obj, *args, **kwargs)

    parameters = list(inspect.signature(signature_of).parameters.values())[1:]
    self_parameter = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    to_zarr.__signature__ = inspect.signature(signature_of).replace(parameters=[self_parameter, *parameters])
    to_zarr.__doc__ = doc
    return to_zarr


class _Accessor:
    def __init__(self, obj: Any) -> None:
        self._obj = obj


@xr.register_dataset_accessor("zarrx")
class ZarrxDatasetAccessor(_Accessor):
    """``ds.zarrx``: zarrx's writer for a Dataset."""

    to_zarr = _writer_method(
        to_zarr,
        to_zarr,
        """Write the Dataset to a Zarr group with zarrx: ``Dataset.to_zarr``'s signature.

        ``store`` is a path, an fsspec URL, a dict, a zarrx Store or a zarr-python store;
        ``mode`` is ``w``, ``w-``, ``a``, ``a-`` or ``r+`` (None: ``w-``, ``a`` with
        ``append_dim``, ``r+`` with ``region``). Dask-backed variables are written in parallel,
        one task per block, never two tasks into one chunk (``safe_chunks`` refuses such a
        layout, ``align_chunks=True`` rechunks it). Every parameter is described in
        :func:`zarrx.xarray.writer.to_zarr`.

        Returns
        -------
        The written :class:`zarrx.Group`, or a ``dask.delayed.Delayed`` when ``compute=False``.

        Examples
        --------
        >>> import numpy as np, xarray as xr, zarrx
        >>> ds = xr.Dataset({"t": ("x", np.arange(4.0))})
        >>> ds.zarrx.to_zarr("memory://example-accessor", mode="w")["t"][:]
        array([0., 1., 2., 3.])
        """,
    )


@xr.register_dataarray_accessor("zarrx")
class ZarrxDataArrayAccessor(_Accessor):
    """``da.zarrx``: zarrx's writer for a DataArray (stored as a one-variable Dataset)."""

    to_zarr = _writer_method(
        dataarray_to_zarr,
        to_zarr,
        """Write the DataArray with zarrx: ``DataArray.to_zarr``'s signature.

        The array is stored as a one-variable Dataset; ``xr.open_dataarray(store,
        engine="zarrx")`` gives it back with its name (None included). The parameters are
        :func:`zarrx.xarray.writer.to_zarr`'s.

        Examples
        --------
        >>> import xarray as xr, zarrx
        >>> group = xr.DataArray([1, 2], dims="x", name="n").zarrx.to_zarr("memory://example-da", mode="w")
        >>> group["n"][:]
        array([1, 2])
        """,
    )


@xr.register_datatree_accessor("zarrx")
class ZarrxDataTreeAccessor(_Accessor):
    """``dt.zarrx``: zarrx's writer for a DataTree (one group per node)."""

    to_zarr = _writer_method(
        datatree_to_zarr,
        datatree_to_zarr,
        """Write every node of the tree as a group with zarrx: ``DataTree.to_zarr``'s signature.

        ``mode`` None is ``w-`` (xarray's default), or ``a`` with ``append_dim``, ``r+`` with
        ``region``. ``encoding`` is keyed by node path (``{"/ocean": {"sst": {...}}}``); inherited
        coordinates are written only where they are defined unless ``write_inherited_coords``.
        The keywords after ``compute`` are those xarray passes on to the zarr engine; all are
        described in :func:`zarrx.xarray.writer.datatree_to_zarr`.

        Examples
        --------
        >>> import xarray as xr, zarrx
        >>> tree = xr.DataTree.from_dict({"/": xr.Dataset({"a": ("x", [1, 2])}), "/child": xr.Dataset()})
        >>> root = tree.zarrx.to_zarr("memory://example-dt", mode="w")
        >>> sorted(root)
        ['a', 'child']
        """,
    )
