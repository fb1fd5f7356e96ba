"""The ``.zarrx`` accessors of xarray objects: ``ds.zarrx.to_zarr``, ``da.zarrx.to_zarr``,
``dt.zarrx.to_zarr``, and ``ds.zarrx.chunk()`` / ``da.zarrx.chunk()`` / ``dt.zarrx.chunk()``.

Each ``to_zarr`` has the signature of the xarray method it stands in for (``Dataset.to_zarr``,
``DataArray.to_zarr``, ``DataTree.to_zarr``), so switching is a matter of adding ``.zarrx``;
the parameters are described in :func:`zarrx.xarray.writer.to_zarr` and
:func:`zarrx.xarray.writer.datatree_to_zarr`. ``chunk()`` makes dask blocks that follow the
stored chunks (or shards) of a selection (:mod:`zarrx.xarray.stored_chunks`).

Importing this module registers them (xarray's public ``register_*_accessor``), as
``import rioxarray`` registers ``.rio``: ``import zarrx.xarray`` imports it, so does the
``engine="zarrx"`` entry point that xarray loads (:mod:`zarrx.xarray.backend`), and
``import zarrx`` does when xarray is already imported. Since an entry point module must stay
light, this module imports nothing but xarray: the writers and the chunking are imported when
called.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import TYPE_CHECKING, Any, Literal

import xarray as xr

if TYPE_CHECKING:
    from zarrx.nodes.group import Group

__all__ = ["ZarrxDatasetAccessor", "ZarrxDataArrayAccessor", "ZarrxDataTreeAccessor"]

Region = Mapping[Hashable, slice | Literal["auto"]] | Literal["auto"] | None


@xr.register_dataset_accessor("zarrx")
class ZarrxDatasetAccessor:
    """``ds.zarrx``: zarrx's writer for a Dataset."""

    def __init__(self, obj: xr.Dataset) -> None:
        self._obj = obj

    def _write(self, *args: Any, **kwargs: Any) -> Any:
        from zarrx.xarray.writer import to_zarr

        return to_zarr(self._obj, *args, **kwargs)

    def to_zarr(
        self,
        store: Any = None,
        mode: str | None = None,
        group: str | None = None,
        encoding: Mapping[Hashable, Mapping[str, Any]] | None = None,
        *,
        compute: bool = True,
        consolidated: bool | None = None,
        append_dim: Hashable | None = None,
        region: Region = None,
        safe_chunks: bool = True,
        align_chunks: bool = False,
        storage_options: Mapping[str, Any] | None = None,
        zarr_format: int | None = None,
        write_empty_chunks: bool | None = None,
        chunkmanager_store_kwargs: Mapping[str, Any] | None = None,
        rectilinear: bool = False,
    ) -> "Group | Any":
        """Write the Dataset to a Zarr group with zarrx: ``Dataset.to_zarr``'s signature (and
        ``DataArray.to_zarr``'s signature for ``da.zarrx.to_zarr``, which stores the array as a
        one-variable Dataset that ``xr.open_dataarray(store, engine="zarrx")`` gives back).

        ``store`` is a path, an fsspec URL, a dict, a zarrx Store or a zarr-python store;
        ``mode`` is ``w``, ``w-``, ``a``, ``a-`` or ``r+`` (None: ``w-``, ``a`` with
        ``append_dim``, ``r+`` with ``region``). Dask-backed variables are written in parallel,
        one task per block, never two tasks into one chunk (``safe_chunks`` refuses such a
        layout, ``align_chunks=True`` rechunks it; zarrx's own ``rectilinear=True`` stores irregular
        dask blocks as they are, on a rectilinear chunk grid). Every parameter is described in
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
        >>> xr.DataArray([1, 2], dims="x", name="n").zarrx.to_zarr("memory://example-da", mode="w")["n"][:]
        array([1, 2])
        """
        return self._write(
            store,
            mode,
            group,
            encoding,
            compute=compute,
            consolidated=consolidated,
            append_dim=append_dim,
            region=region,
            safe_chunks=safe_chunks,
            align_chunks=align_chunks,
            storage_options=storage_options,
            zarr_format=zarr_format,
            write_empty_chunks=write_empty_chunks,
            chunkmanager_store_kwargs=chunkmanager_store_kwargs,
            rectilinear=rectilinear,
        )

    def chunk(self, multiples: Mapping[Hashable, int] | None = None, **chunk_options: Any) -> Any:
        """The object with dask blocks along the stored chunks (shards of a sharded array).

        Select first, then chunk: on a dataset opened with ``engine="zarrx"`` and no
        ``chunks``, ``.isel``/``.sel`` only record the selection, and ``chunk()`` then builds
        the graph of the selected blocks alone, each cut at the stored boundaries (after
        ``isel(time=slice(5, 100))`` over chunks of 10: blocks of 5, 10, 10, ...), so no stored
        object is read by two tasks. Index variables stay in memory; variables that are already
        chunked stay as they are.

        Parameters
        ----------
        multiples
            Stored objects per block, by dimension (default 1); -1 for one block along the
            dimension.
        **chunk_options
            Passed to ``Variable.chunk`` (``chunked_array_type``, ``from_array_kwargs``,
            ``inline_array``, ``lock``).

        Examples
        --------
        >>> import numpy as np, xarray as xr, zarrx
        >>> root = zarrx.create_group("memory://example-accessor-chunk", overwrite=True)
        >>> t = root.create_array("t", shape=(100,), chunks=(10,), dtype="f4", dimension_names=["time"])
        >>> ds = xr.open_dataset("memory://example-accessor-chunk", engine="zarrx", consolidated=False)
        >>> ds.isel(time=slice(5, 40)).zarrx.chunk().t.chunks
        ((5, 10, 10, 10),)
        >>> ds.t[5:40].zarrx.chunk({"time": 2}).chunks
        ((15, 20),)
        """
        from zarrx.xarray.stored_chunks import chunk_dataset

        return chunk_dataset(self._obj, multiples, **chunk_options)


@xr.register_dataarray_accessor("zarrx")
class ZarrxDataArrayAccessor(ZarrxDatasetAccessor):
    """``da.zarrx``: zarrx's writer for a DataArray (stored as a one-variable Dataset)."""

    def _write(self, *args: Any, **kwargs: Any) -> Any:
        from zarrx.xarray.writer import dataarray_to_zarr

        return dataarray_to_zarr(self._obj, *args, **kwargs)

    def chunk(self, multiples: Mapping[Hashable, int] | None = None, **chunk_options: Any) -> Any:
        """The DataArray (and its coordinates but indexes) with dask blocks along the stored
        chunks: see :meth:`ZarrxDatasetAccessor.chunk`."""
        from zarrx.xarray.stored_chunks import check_multiples, chunk_dataset, chunk_variable

        array = self._obj
        multiples = dict(multiples or {})
        check_multiples(multiples, set(array.dims))
        coords = array.coords.to_dataset()
        coords = chunk_dataset(coords, {d: m for d, m in multiples.items() if d in coords.dims}, **chunk_options)
        data = chunk_variable(array.variable, multiples, **chunk_options)
        return array.copy(data=data.data, deep=False).assign_coords(
            {name: variable for name, variable in coords.variables.items() if name not in coords.xindexes}
        )


@xr.register_datatree_accessor("zarrx")
class ZarrxDataTreeAccessor:
    """``dt.zarrx``: zarrx's writer for a DataTree (one group per node)."""

    def __init__(self, tree: xr.DataTree) -> None:
        self._tree = tree

    def to_zarr(
        self,
        store: Any = None,
        mode: str | None = None,
        encoding: Mapping[str, Mapping[Hashable, Mapping[str, Any]]] | None = None,
        consolidated: bool | None = True,
        group: str | None = None,
        write_inherited_coords: bool = False,
        compute: bool = True,
        *,
        append_dim: Hashable | None = None,
        region: Region = None,
        safe_chunks: bool = True,
        align_chunks: bool = False,
        storage_options: Mapping[str, Any] | None = None,
        zarr_format: int | None = None,
        write_empty_chunks: bool | None = None,
        chunkmanager_store_kwargs: Mapping[str, Any] | None = None,
        rectilinear: bool = False,
    ) -> "Group | Any":
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
        """
        from zarrx.xarray.writer import datatree_to_zarr

        return datatree_to_zarr(
            self._tree,
            store,
            mode,
            encoding,
            consolidated,
            group,
            write_inherited_coords,
            compute,
            append_dim=append_dim,
            region=region,
            safe_chunks=safe_chunks,
            align_chunks=align_chunks,
            storage_options=storage_options,
            zarr_format=zarr_format,
            write_empty_chunks=write_empty_chunks,
            chunkmanager_store_kwargs=chunkmanager_store_kwargs,
            rectilinear=rectilinear,
        )

    def chunk(self, multiples: Mapping[Hashable, int] | None = None, **chunk_options: Any) -> Any:
        """The tree with every node's variables in dask blocks along their stored chunks: see
        :meth:`ZarrxDatasetAccessor.chunk` (``multiples`` may name any dimension of the tree)."""
        from zarrx.xarray.stored_chunks import chunk_dataset, check_multiples

        multiples = dict(multiples or {})
        check_multiples(multiples, {dim for node in self._tree.subtree for dim in node.dataset.dims})

        def chunk_node(dataset: xr.Dataset) -> xr.Dataset:
            return chunk_dataset(dataset, {d: m for d, m in multiples.items() if d in dataset.dims}, **chunk_options)

        return self._tree.map_over_datasets(chunk_node)
