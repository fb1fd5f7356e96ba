"""A writable xarray data store over one zarrx group: xarray's ``dump_to_store`` protocol.

:class:`ZarrxWritableDataStore` is to zarrx what ``xarray.backends.ZarrStore`` is to
zarr-python: an ``AbstractWritableDataStore`` that reads like :class:`ZarrxDataStore` and whose
``store(variables, attributes, ...)`` writes CF-encoded variables with the steps of
``ds.zarrx.to_zarr`` (:class:`~zarrx.xarray.dataset_writer.DatasetWriter`). Code written against
xarray's store objects -- ``ds.dump_to_store(store)``, ``xr.decode_cf(store)``,
``xr.open_dataset(store=...)`` -- works with it unchanged.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from typing import Any

import dask
from xarray.backends.common import AbstractWritableDataStore
from xarray import Variable

from zarrx.errors import ReadOnlyError
from zarrx.nodes.group import Group
from zarrx.storage import make_store
from zarrx.xarray.backend import open_data_store
from zarrx.xarray.dataset_writer import DatasetWriter, WriteOptions
from zarrx.xarray.store import NONE_NAME_ATTRIBUTE, NONE_VARIABLE, ZarrxDataStore
from zarrx.xarray.writer import choose_mode, consolidate_after_write, open_target

__all__ = ["ZarrxWritableDataStore"]


class ZarrxWritableDataStore(ZarrxDataStore, AbstractWritableDataStore):
    """One zarrx group as a readable and writable xarray data store.

    Open one with :meth:`open_group`; ``ds.dump_to_store(store)`` then writes a Dataset into
    the group (dask-backed variables block by block, at once), ``store.ds`` is the
    :class:`zarrx.Group`, and reading it back (``xr.decode_cf(store)``) sees what was written.

    Examples
    --------
    >>> import numpy as np, xarray as xr
    >>> store = ZarrxWritableDataStore.open_group("memory://example-writable", mode="w")
    >>> xr.Dataset({"t": ("x", np.arange(3.0))}).dump_to_store(store)
    >>> store.ds["t"].dimension_names, xr.decode_cf(store).t.values
    (('x',), array([0., 1., 2.]))
    """

    __slots__ = ("mode", "options", "_consolidate_on_close")

    def __init__(
        self,
        group: Group,
        *,
        mode: str = "a",
        write_empty_chunks: bool | None = None,
        safe_chunks: bool = True,
        align_chunks: bool = False,
        consolidate_on_close: bool = False,
        **read_options: Any,
    ) -> None:
        super().__init__(group, **read_options)
        self.mode = mode
        self.options = WriteOptions(mode, None, safe_chunks, align_chunks, write_empty_chunks)
        self._consolidate_on_close = consolidate_on_close

    @classmethod
    def open_group(
        cls,
        store: Any,
        group: str | None = None,
        mode: str = "r",
        *,
        consolidated: bool | None = None,
        consolidate_on_close: bool = False,
        storage_options: Mapping[str, Any] | None = None,
        zarr_format: int | None = None,
        cache_members: bool = True,
        use_zarr_fill_value_as_mask: bool | None = None,
        write_empty_chunks: bool | None = None,
        safe_chunks: bool = True,
        align_chunks: bool = False,
        drop_variables: str | Iterable[str] | None = None,
    ) -> "ZarrxWritableDataStore":
        """The store of ``group`` in ``store``, opened as ``xarray.backends.ZarrStore.open_group`` opens
        one: ``mode`` ``r`` (read-only), ``r+``, ``a``, ``a-``, ``w`` (replace), ``w-`` (create)."""
        read_options = {
            "use_zarr_fill_value_as_mask": use_zarr_fill_value_as_mask,
            "cache_members": cache_members,
            "drop_variables": drop_variables,
        }
        if mode == "r":
            reader = open_data_store(
                store,
                group=group,
                consolidated=consolidated,
                storage_options=storage_options,
                zarr_format=zarr_format,
                **read_options,
            )
            zgroup = reader.group
        else:
            mode = choose_mode(mode, None, None)
            zstore = make_store(store, mode="a" if mode == "a-" else mode, storage_options=storage_options)
            zgroup = open_target(zstore, group, mode, zarr_format)
        return cls(
            zgroup,
            mode=mode,
            write_empty_chunks=write_empty_chunks,
            safe_chunks=safe_chunks,
            align_chunks=align_chunks,
            consolidate_on_close=consolidate_on_close,
            **read_options,
        )

    @property
    def ds(self) -> Group:
        """The :class:`zarrx.Group` (``ZarrStore.ds`` is its zarr-python group)."""
        return self.group

    zarr_group = ds

    def store(
        self,
        variables: Mapping[Hashable, Variable],
        attributes: Mapping[Hashable, Any],
        check_encoding_set: Iterable[Hashable] = frozenset(),
        writer: Any = None,
        unlimited_dims: Any = None,
    ) -> None:
        """Write CF-encoded ``variables`` and ``attributes`` (what ``dump_to_store`` passes) into the group.

        ``writer`` (xarray's ``ArrayWriter``) is not needed: dask-backed data is written here,
        one task per block. ``unlimited_dims`` mean nothing to Zarr and are ignored, as in
        xarray's zarr engine."""
        if self.mode == "r":
            raise ReadOnlyError(f"the data store of group {self.group.name!r} was opened with mode='r'")
        variables = dict(variables)
        if None in variables:
            variable = variables.pop(None).copy(deep=False)
            variable.attrs = {**variable.attrs, NONE_NAME_ATTRIBUTE: True}
            variables[NONE_VARIABLE] = variable
        self.options.writes.clear()
        writer_ = DatasetWriter(self.group, self.options, append_dim=None)
        writer_.store_variables(variables, dict(attributes), check_encoding=set(check_encoding_set))
        if self.options.writes:
            dask.compute(*self.options.writes)
        self._members = None  # the group changed

    def sync(self) -> None:
        """Nothing is buffered: every ``store`` call has written its data when it returns."""

    def close(self) -> None:
        """Write consolidated metadata when the store was opened with ``consolidate_on_close``."""
        if self._consolidate_on_close and self.mode != "r":
            consolidate_after_write(self.group.store, True, self.mode)
