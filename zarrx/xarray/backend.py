"""The xarray backend ``engine="zarrx"``: Zarr groups as lazy, CF-decoded Datasets and DataTrees.

:class:`ZarrxBackendEntrypoint` is registered under the ``xarray.backends`` entry point
group, so ``xr.open_dataset(url, engine="zarrx")``, ``xr.open_datatree(url, engine="zarrx")``
and ``xr.open_groups(url, engine="zarrx")`` work once zarrx is installed.

The backend is an adapter, nothing more:

* :class:`ZarrxDataStore` (:mod:`zarrx.xarray.store`) is an
  ``xarray.backends.AbstractDataStore`` over one :class:`zarrx.Group`. It lists the group
  once (one listing and one batched metadata read, or nothing at all when the group came
  from consolidated metadata) and turns each array into an undecoded ``xarray.Variable``:
  dimension names from v3 ``dimension_names`` (or the ``_ARRAY_DIMENSIONS`` attribute),
  attributes, and an ``encoding`` with ``chunks``, ``preferred_chunks``, ``shards``,
  ``compressors``, ``filters``, ``serializer`` and ``fill_value``.
* CF decoding is xarray's own (``StoreBackendEntrypoint`` calls
  ``xarray.conventions.decode_cf_variables``), so every decoding keyword behaves as with
  ``engine="zarr"``. The Zarr ``fill_value`` is a CF ``_FillValue`` (masks data) only when
  ``use_zarr_fill_value_as_mask`` says so: by default for Zarr v2, not for v3 -- xarray's
  rules. For v3 the ``_FillValue`` attribute xarray writes (base64 for floats) is decoded.
* :class:`ZarrxBackendArray` is the lazy array: basic, outer (``oindex``) and vectorized
  (``vindex``) keys go straight to :class:`zarrx.Array`, so ``.isel``/``.sel`` with lists or
  arrays read only the chunks they touch.
* Dimension coordinates, which xarray reads one by one to build its indexes, are read
  together (:func:`zarrx.nodes.prefetch.read_together`): the first read fetches all their chunks in
  one batch, so opening a dataset costs one round trip for them, not one each.
* A DataTree (``open_datatree``, ``open_groups``) is read before anything is decoded. From
  consolidated metadata the hierarchy costs no request, and the dimension coordinates of *every*
  group come in one batch (:func:`zarrx.xarray.store.read_indexes_together`). Otherwise each
  group is read as soon as it is found, beside the others (its listing, its children's documents
  in one batch, then its dimension coordinates in one more; :meth:`ZarrxDataStore.walk`), and
  ``consolidated=False`` sends the root's listing beside its document. An open costs a few
  round trips per level of nesting, not a few per group; wrap the store in
  :class:`zarrx.storage.MetricsStore` to count them (``summary().rounds``).

Where zarrx differs from ``engine="zarr"`` on purpose: ``preferred_chunks`` are the shards of
a sharded array (dask tasks then never share a stored object), ``use_zarr_fill_value_as_mask``
is honoured (engine="zarr" ignores it in ``open_dataset``), ``drop_variables`` are never
opened (so an array without dimension names can be dropped), a 0-d array needs no dimension
names, and codecs in ``encoding`` are their JSON form, which both zarrx's and xarray's own
writers accept.
"""

from __future__ import annotations

import importlib
import os
import sys
import warnings
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from xarray import Dataset, DataTree
from xarray.backends import BackendEntrypoint, StoreBackendEntrypoint

import zarrx.xarray.accessor  # noqa: F401 (registers .zarrx: opening with engine="zarrx" gives the accessors)
from zarrx.errors import MetadataError, NodeNotFoundError, StoreTypeError, UsageError

if TYPE_CHECKING:
    from zarrx.nodes.group import Group
    from zarrx.xarray.store import ZarrxDataStore

#: the store's names, re-exported (they were defined here first) and loaded on first use: xarray
#: imports this module whenever it lists its engines, so it imports neither the store nor dask
_FROM_STORE = ("DIMENSION_KEY", "MissingDimensionsError", "ZarrxBackendArray", "ZarrxDataStore")

__all__ = [
    "DIMENSION_KEY",
    "MissingDimensionsError",
    "ZarrxBackendArray",
    "ZarrxBackendEntrypoint",
    "ZarrxDataStore",
    "open_data_store",
    "open_zarrx_group",
]

#: metadata documents whose path names a Zarr node (``guess_can_open`` and opening a document path)
METADATA_NAMES = ("zarr.json", ".zgroup", ".zarray", ".zmetadata", ".zattrs")


def __getattr__(name: str) -> Any:
    if name in _FROM_STORE:
        return getattr(importlib.import_module("zarrx.xarray.store"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _is_zarrx_object(obj: Any) -> bool:
    """Whether ``obj`` is a zarrx Group or Store, asked without importing them: an object of a
    class whose module is not imported yet cannot exist."""
    for module, name in (("zarrx.nodes.group", "Group"), ("zarrx.storage.store", "Store")):
        cls = getattr(sys.modules.get(module), name, None)
        if cls is not None and isinstance(obj, cls):
            return True
    return False


# -- opening ---------------------------------------------------------------------------------------
def _group_path(group: str | None) -> str:
    return "" if group is None else str(group).strip("/")


def open_zarrx_group(
    store: Any,
    group: str | None = None,
    *,
    consolidated: bool | None = None,
    storage_options: Mapping[str, Any] | None = None,
    zarr_format: int | None = None,
) -> Group:
    """The read-only group at ``group`` in ``store``, read from consolidated metadata when asked.

    ``consolidated=None`` uses the consolidated metadata of the store's root (or of the group
    itself) when there is some and lists the store otherwise, silently; ``True`` requires it
    (:class:`~zarrx.errors.MetadataError` when there is none); ``False`` always lists, and so does
    a store that keeps no consolidated metadata (an Icechunk session), as xarray's engine does.

    Examples
    --------
    >>> import zarrx
    >>> root = zarrx.create_group("memory://example-backend-open", overwrite=True)
    >>> _ = root.create_group("a")
    >>> open_zarrx_group("memory://example-backend-open", "a").name
    '/a'
    """
    from zarrx.nodes.api import open_group
    from zarrx.nodes.group import Group
    from zarrx.storage import make_store

    if isinstance(store, Group):
        store, group = store.store, "/".join(p for p in (store.path, _group_path(group)) if p)
    zstore = make_store(_store_argument(store), mode="r", storage_options=storage_options)
    path = _group_path(group)
    if consolidated is False or not zstore.supports_consolidated_metadata:  # Icechunk keeps none (as xarray)
        return open_group(zstore, path, mode="r", zarr_format=zarr_format, use_consolidated=False)
    # Consolidated metadata usually sits in the root's document (zarr-python and zarrx write it
    # there): one read opens the whole hierarchy, whatever group is asked for.
    if path:
        try:
            root = open_group(zstore, "", mode="r", zarr_format=zarr_format, use_consolidated=None)
        except (NodeNotFoundError, MetadataError):
            root = None
        if root is not None and root.is_consolidated:
            node = root[path]
            if not isinstance(node, Group):
                raise NodeNotFoundError(f"expected a group at {'/' + path!r} in {zstore!r}, found an array")
            return node
    opened = open_group(zstore, path, mode="r", zarr_format=zarr_format, use_consolidated=None)
    if consolidated and not opened.is_consolidated:
        where = f"neither the root group nor group {'/' + path!r} has" if path else "the root group has no"
        raise MetadataError(
            f"consolidated=True, but {where} consolidated metadata in {zstore!r}; "
            "pass consolidated=None (use it when present) or False, or write it with "
            "zarrx.consolidate_metadata(store)"
        )
    return opened


def _store_argument(store: Any) -> Any:
    """A path naming a metadata document (``x.zarr/zarr.json``) stands for its folder."""
    if isinstance(store, os.PathLike):
        store = os.fspath(store)
    if isinstance(store, str):
        head, _, tail = store.rstrip("/").rpartition("/")
        if tail in METADATA_NAMES and head:
            return head
    return store


# -- the entry point -------------------------------------------------------------------------------
#: open modes: every one that reads an existing group (engine="zarr" also takes "w" and "w-",
#: which would replace the store before reading it)
READ_MODES = ("r", "r+", "a")

#: the text of xarray's warning when consolidated metadata is missing (users filter on it)
UNCONSOLIDATED_WARNING = (
    "Failed to open Zarr store with consolidated metadata, but successfully read with non-consolidated "
    "metadata. This is typically much slower for opening a dataset. To silence this warning, consider:\n"
    "1. Consolidating metadata in this existing store with zarrx.consolidate_metadata().\n"
    "2. Explicitly setting consolidated=False, to avoid trying to read consolidated metadata, or\n"
    "3. Explicitly setting consolidated=True, to raise an error in this case instead of falling back to "
    "try reading non-consolidated metadata."
)


def open_data_store(
    filename_or_obj: Any,
    *,
    group: str | None = None,
    mode: str = "r",
    consolidated: bool | None = None,
    storage_options: Mapping[str, Any] | None = None,
    zarr_format: int | None = None,
    store: ZarrxDataStore | None = None,
    use_zarr_fill_value_as_mask: bool | None = None,
    cache_members: bool = True,
    drop_variables: str | Iterable[str] | None = None,
    synchronizer: Any = None,
    chunk_store: Any = None,
    zarr_version: int | None = None,
) -> ZarrxDataStore:
    """The :class:`ZarrxDataStore` of ``group`` in ``filename_or_obj``, with engine="zarr"'s keywords.

    ``store`` is one already opened (returned as it is). ``consolidated=None`` falls back to
    listing the store, with xarray's ``RuntimeWarning``, when there is no consolidated
    metadata. ``synchronizer`` and ``chunk_store`` (keywords of older xarray versions) are
    refused unless None; ``zarr_version`` is the old name of ``zarr_format``.

    Examples
    --------
    >>> import zarrx
    >>> root = zarrx.create_group("memory://example-data-store", overwrite=True)
    >>> sorted(open_data_store("memory://example-data-store", consolidated=False).arrays)
    []
    """
    from zarrx.xarray.store import ZarrxDataStore

    if synchronizer is not None:
        raise UsageError(
            f"synchronizer={synchronizer!r}: zarrx takes no synchronizer; its parallel writes never share a "
            "chunk (or shard), and reads need no lock"
        )
    if chunk_store is not None:
        raise UsageError(
            f"chunk_store={chunk_store!r}: zarrx reads chunks from the store that holds the metadata; "
            "a separate chunk store is not supported"
        )
    zarr_format = _zarr_format_argument(zarr_format, zarr_version)
    if store is not None:
        if not isinstance(store, ZarrxDataStore):
            raise StoreTypeError(
                f"store: expected a zarrx.xarray.ZarrxDataStore (or None), found {type(store).__name__}"
            )
        return store
    if mode not in READ_MODES:
        raise UsageError(
            f"mode: opening a dataset reads an existing group, so mode is one of {READ_MODES}, found {mode!r}"
        )
    try:
        zgroup = open_zarrx_group(
            filename_or_obj,
            group,
            consolidated=consolidated,
            storage_options=storage_options,
            zarr_format=zarr_format,
        )
    except NodeNotFoundError as error:
        # xarray's words for it, which users (and xarray's tests) match
        where = "/" + _group_path(group)
        raise NodeNotFoundError(f"No group found in store {filename_or_obj!r} at {where!r}: {error}") from None
    if consolidated is None and not zgroup.is_consolidated and zgroup.store.supports_consolidated_metadata:
        warnings.warn(f"{UNCONSOLIDATED_WARNING} (group {zgroup.name!r} in {zgroup.store!r})", RuntimeWarning, stacklevel=2)
    return ZarrxDataStore(
        zgroup,
        use_zarr_fill_value_as_mask=use_zarr_fill_value_as_mask,
        drop_variables=drop_variables,
        cache_members=cache_members,
    )


def _zarr_format_argument(zarr_format: int | None, zarr_version: int | None) -> int | None:
    if zarr_version is None:
        return zarr_format
    if zarr_format is not None and zarr_format != zarr_version:
        raise UsageError(f"zarr_version={zarr_version!r} and zarr_format={zarr_format!r} disagree; pass zarr_format only")
    warnings.warn("zarr_version is deprecated, use zarr_format", FutureWarning, stacklevel=3)
    return zarr_version


class ZarrxBackendEntrypoint(BackendEntrypoint):
    """Open Zarr v3 (and v2) hierarchies with zarrx: ``xr.open_dataset(store, engine="zarrx")``.

    ``store`` is anything :func:`zarrx.open_group` takes (a path, an fsspec URL, a zarrx Store,
    an ``FSMap``, a dict) or a :class:`zarrx.Group`. The keywords are engine="zarr"'s
    (see :func:`open_data_store` for ``mode``, ``store``, ``cache_members`` and the old ones).

    Examples
    --------
    >>> import numpy as np, xarray as xr, zarrx
    >>> root = zarrx.create_group("memory://example-engine", overwrite=True)
    >>> t = root.create_array("t", shape=(4,), chunks=(2,), dtype="float32", dimension_names=["x"],
    ...                       attributes={"units": "K"})
    >>> t[:] = np.arange(4)
    >>> ds = xr.open_dataset("memory://example-engine", engine="zarrx", consolidated=False)
    >>> ds.t.attrs["units"], ds.t.encoding["preferred_chunks"]
    ('K', {'x': 2})
    """

    description = "Open Zarr v3 (and v2) stores lazily with zarrx: sharding-aware chunks, batched metadata reads"
    #: xarray's guide to Zarr I/O: engine="zarrx" keeps its semantics
    url = "https://docs.xarray.dev/en/stable/user-guide/io.html#zarr"
    supports_groups = True

    def guess_can_open(self, filename_or_obj: Any) -> bool:
        if _is_zarrx_object(filename_or_obj):
            return True
        if not isinstance(filename_or_obj, (str, os.PathLike)):
            return False
        path = os.fspath(filename_or_obj).rstrip("/")
        name = path.rpartition("/")[2]
        if name in METADATA_NAMES or os.path.splitext(name)[1] == ".zarr":
            return True
        return os.path.isdir(path) and any(os.path.exists(os.path.join(path, n)) for n in METADATA_NAMES[:3])

    def open_dataset(
        self,
        filename_or_obj: Any,
        *,
        mask_and_scale: bool = True,
        decode_times: bool = True,
        concat_characters: bool = True,
        decode_coords: bool | str = True,
        drop_variables: str | Iterable[str] | None = None,
        use_cftime: bool | None = None,
        decode_timedelta: bool | None = None,
        group: str | None = None,
        mode: str = "r",
        consolidated: bool | None = None,
        storage_options: Mapping[str, Any] | None = None,
        zarr_format: int | None = None,
        store: ZarrxDataStore | None = None,
        engine: Any = None,
        use_zarr_fill_value_as_mask: bool | None = None,
        cache_members: bool = True,
        synchronizer: Any = None,
        chunk_store: Any = None,
        zarr_version: int | None = None,
    ) -> Dataset:
        data_store = open_data_store(
            filename_or_obj,
            group=group,
            mode=mode,
            consolidated=consolidated,
            storage_options=storage_options,
            zarr_format=zarr_format,
            store=store,
            use_zarr_fill_value_as_mask=use_zarr_fill_value_as_mask,
            cache_members=cache_members,
            drop_variables=drop_variables,
            synchronizer=synchronizer,
            chunk_store=chunk_store,
            zarr_version=zarr_version,
        )
        return _decode(
            data_store,
            mask_and_scale=mask_and_scale,
            decode_times=decode_times,
            concat_characters=concat_characters,
            decode_coords=decode_coords,
            drop_variables=drop_variables,
            use_cftime=use_cftime,
            decode_timedelta=decode_timedelta,
        )

    def open_groups_as_dict(
        self,
        filename_or_obj: Any,
        *,
        mask_and_scale: bool = True,
        decode_times: bool = True,
        concat_characters: bool = True,
        decode_coords: bool | str = True,
        drop_variables: str | Iterable[str] | None = None,
        use_cftime: bool | None = None,
        decode_timedelta: bool | None = None,
        **open_options: Any,
    ) -> dict[str, Dataset]:
        """Every group at or below ``group`` as a Dataset, keyed ``"/"``, ``"/a"``, ``"/a/b"`` ...
        relative to ``group``. ``open_options`` are :func:`open_data_store`'s (``group``, ``mode``,
        ``consolidated``, ``cache_members``, ...)."""
        from zarrx.xarray.store import read_indexes_together

        root = open_data_store(filename_or_obj, drop_variables=drop_variables, **open_options)
        # the hierarchy first, then the indexes the walk did not fetch, in one batch
        stores = list(root.walk())
        read_indexes_together(store for _, store in stores)
        return {
            path: _decode(
                store,
                mask_and_scale=mask_and_scale,
                decode_times=decode_times,
                concat_characters=concat_characters,
                decode_coords=decode_coords,
                drop_variables=drop_variables,
                use_cftime=use_cftime,
                decode_timedelta=decode_timedelta,
            )
            for path, store in stores
        }

    def open_datatree(self, filename_or_obj: Any, **kwargs: Any) -> DataTree:
        """The groups of :meth:`open_groups_as_dict` (same keywords) as one DataTree."""
        from xarray.backends.common import datatree_from_dict_with_io_cleanup  # no public equivalent

        return datatree_from_dict_with_io_cleanup(self.open_groups_as_dict(filename_or_obj, **kwargs))


def _decode(store: ZarrxDataStore, **decoders: Any) -> Dataset:
    """xarray's own CF decoding of the store's variables (the path engine="zarr" takes)."""
    return StoreBackendEntrypoint().open_dataset(store, **decoders)

