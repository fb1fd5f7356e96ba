"""The xarray backend ``engine="zarrx"``: Zarr groups as lazy, CF-decoded Datasets and DataTrees.

:class:`ZarrxBackendEntrypoint` is registered under the ``xarray.backends`` entry point
group, so ``xr.open_dataset(url, engine="zarrx")``, ``xr.open_datatree(url, engine="zarrx")``
and ``xr.open_groups(url, engine="zarrx")`` work once zarrx is installed.

The backend is an adapter, nothing more:

* :class:`ZarrxDataStore` is an ``xarray.backends.AbstractDataStore`` over one
  :class:`zarrx.Group`. It lists the group once (one listing and one batched metadata read,
  or nothing at all when the group came from consolidated metadata) and turns each array
  into an undecoded ``xarray.Variable``: dimension names from v3 ``dimension_names`` (or
  the ``_ARRAY_DIMENSIONS`` attribute), attributes, and an ``encoding`` with ``chunks``,
  ``preferred_chunks``, ``shards``, ``compressors``, ``filters``, ``serializer`` and
  ``fill_value``.
* CF decoding is xarray's own (``StoreBackendEntrypoint`` calls
  ``xarray.conventions.decode_cf_variables``), so every decoding keyword behaves as with
  ``engine="zarr"``. The Zarr ``fill_value`` is a CF ``_FillValue`` (masks data) only when
  ``use_zarr_fill_value_as_mask`` says so: by default for Zarr v2, not for v3 -- xarray's
  rules. For v3 the ``_FillValue`` attribute xarray writes (base64 for floats) is decoded.
* :class:`ZarrxBackendArray` is the lazy array: basic, outer (``oindex``) and vectorized
  (``vindex``) keys go straight to :class:`zarrx.Array`, so ``.isel``/``.sel`` with lists or
  arrays read only the chunks they touch.
* Dimension coordinates, which xarray reads one by one to build its indexes, are read
  together (:func:`zarrx.prefetch.read_together`): the first read fetches all their chunks in
  one batch, so opening a dataset costs one round trip for them, not one each.

Where zarrx differs from ``engine="zarr"`` on purpose: ``preferred_chunks`` are the shards of
a sharded array (dask tasks then never share a stored object), ``use_zarr_fill_value_as_mask``
is honoured (engine="zarr" ignores it in ``open_dataset``), ``drop_variables`` are never
opened (so an array without dimension names can be dropped), a 0-d array needs no dimension
names, and codecs in ``encoding`` are their JSON form, which both zarrx's and xarray's own
writers accept.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np
from xarray.backends.common import AbstractDataStore, BackendArray, BackendEntrypoint
from xarray.backends.store import StoreBackendEntrypoint
from xarray.backends.zarr import FillValueCoder
from xarray.core import indexing
from xarray.core.dataset import Dataset
from xarray.core.datatree import DataTree
from xarray.core.utils import FrozenDict
from xarray.core.variable import Variable

import zarrx
from zarrx.array import Array
from zarrx.errors import MetadataError, NodeNotFoundError
from zarrx.group import Group
from zarrx.prefetch import read_together
from zarrx.storage import make_store
from zarrx.storage.store import Store
from zarrx.xarray.encoding import codec_encoding

__all__ = [
    "DIMENSION_KEY",
    "MissingDimensionsError",
    "ZarrxBackendArray",
    "ZarrxBackendEntrypoint",
    "ZarrxDataStore",
    "open_zarrx_group",
]

#: the attribute xarray stores Zarr v2 dimension names in
DIMENSION_KEY = "_ARRAY_DIMENSIONS"
#: metadata documents whose path names a Zarr node (``guess_can_open`` and opening a document path)
METADATA_NAMES = ("zarr.json", ".zgroup", ".zarray", ".zmetadata", ".zattrs")


class MissingDimensionsError(MetadataError):
    """An array has neither v3 ``dimension_names`` nor a ``_ARRAY_DIMENSIONS`` attribute."""


# -- opening ---------------------------------------------------------------------------------------
def _group_path(group: str | None) -> str:
    return "" if group is None else str(group).strip("/")


def _zarr_format(node: Array | Group) -> int:
    return getattr(node.metadata, "zarr_format", 3)


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
    (:class:`~zarrx.errors.MetadataError` when there is none); ``False`` always lists.

    Examples
    --------
    >>> import zarrx
    >>> root = zarrx.create_group("memory://example-backend-open", overwrite=True)
    >>> _ = root.create_group("a")
    >>> open_zarrx_group("memory://example-backend-open", "a").name
    '/a'
    """
    if isinstance(store, Group):
        store, group = store.store, "/".join(p for p in (store.path, _group_path(group)) if p)
    zstore = make_store(_store_argument(store), mode="r", storage_options=storage_options)
    path = _group_path(group)
    if consolidated is False:
        return zarrx.open_group(zstore, path, mode="r", zarr_format=zarr_format, use_consolidated=False)
    # Consolidated metadata usually sits in the root's document (zarr-python and zarrx write it
    # there): one read opens the whole hierarchy, whatever group is asked for.
    if path:
        try:
            root = zarrx.open_group(zstore, "", mode="r", zarr_format=zarr_format, use_consolidated=None)
        except (NodeNotFoundError, MetadataError):
            root = None
        if root is not None and root.is_consolidated:
            node = root[path]
            if not isinstance(node, Group):
                raise NodeNotFoundError(f"expected a group at {'/' + path!r} in {zstore!r}, found an array")
            return node
    opened = zarrx.open_group(zstore, path, mode="r", zarr_format=zarr_format, use_consolidated=None)
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


# -- arrays ----------------------------------------------------------------------------------------
#: the zarrx method for each kind of key xarray hands a backend array
_SELECTIONS = {
    indexing.BasicIndexer: "get_basic_selection",
    indexing.OuterIndexer: "get_orthogonal_selection",
    indexing.VectorizedIndexer: "get_coordinate_selection",
}


class ZarrxBackendArray(BackendArray):
    """A :class:`zarrx.Array` as an xarray backend array (wrapped in ``LazilyIndexedArray``).

    Outer and vectorized keys are read natively (``oindex``/``vindex``); only a vectorized key
    mixing slices and arrays is read as its outer bounding selection, then indexed in memory.
    """

    __slots__ = ("_array", "dtype", "shape")

    def __init__(self, array: Array) -> None:
        self._array = array
        self.shape = array.shape
        self.dtype = array.dtype

    def get_array(self) -> Array:
        return self._array

    def __getitem__(self, key: indexing.ExplicitIndexer) -> np.ndarray:
        kind = type(key)
        support = indexing.IndexingSupport.VECTORIZED
        if kind is indexing.VectorizedIndexer and any(isinstance(item, slice) for item in key.tuple):
            kind, support = indexing.OuterIndexer, indexing.IndexingSupport.OUTER
        method = getattr(self._array, _SELECTIONS[kind])
        result = indexing.explicit_indexing_adapter(key, self.shape, support, lambda raw: method(raw or Ellipsis))
        # integer-only keys give NumPy scalars (or str); xarray wants arrays of the array's dtype
        return result if isinstance(result, np.ndarray) else np.asarray(result, dtype=self.dtype)


# -- variables -------------------------------------------------------------------------------------
def _is_nc_attribute(name: str) -> bool:
    return name.lower().startswith("_nc")


def dimensions_and_attributes(array: Array) -> tuple[tuple[str, ...], dict[str, Any]]:
    """The array's dimension names and its user attributes (``_ARRAY_DIMENSIONS`` hidden).

    Dimension names come from v3 ``dimension_names`` when every dimension has one, else from
    the ``_ARRAY_DIMENSIONS`` attribute (v2, and v3 data written by v2-minded tools); a 0-d
    array needs none. Otherwise :class:`MissingDimensionsError` names the array.
    """
    attributes = dict(array.attrs)
    stored = attributes.pop(DIMENSION_KEY, None)
    if _zarr_format(array) == 2:
        attributes = {k: v for k, v in attributes.items() if not _is_nc_attribute(k)}
    names = array.dimension_names
    if names is not None and len(names) == array.ndim and all(isinstance(n, str) for n in names):
        return tuple(names), attributes
    if isinstance(stored, (list, tuple)) and len(stored) == array.ndim and all(isinstance(n, str) for n in stored):
        return tuple(stored), attributes
    if array.ndim == 0:
        return (), attributes
    found = f"dimension_names={list(names)!r}" if names is not None else "no dimension_names"
    if stored is not None:
        found += f" and {DIMENSION_KEY}={stored!r}"
    raise MissingDimensionsError(
        f"array {array.name!r} in {array.store!r} (shape {array.shape}) has {found}: xarray needs one name per "
        f"dimension. Give it v3 dimension_names (or the {DIMENSION_KEY} attribute for Zarr v2), "
        f"or skip it with drop_variables=[{array.basename!r}]"
    )


def _is_dimension_coordinate(name: str, array: Array) -> bool:
    """Whether ``array`` is a 1-d coordinate named after its dimension (xarray makes it an index)."""
    if array.ndim != 1:
        return False
    try:
        dimensions, _ = dimensions_and_attributes(array)
    except MetadataError:
        return False
    return dimensions == (name,)


def _decode_fill_value_attribute(value: Any, dtype: np.dtype) -> Any:
    """The ``_FillValue`` attribute as xarray's zarr engine decodes it for v3 (floats are base64).

    A value in another form (a plain number written by another tool) is kept as it is, where
    xarray would raise."""
    try:
        return FillValueCoder.decode(value, dtype)
    except (TypeError, ValueError, struct.error):
        return value


class ZarrxDataStore(AbstractDataStore):
    """One :class:`zarrx.Group` as an xarray data store (undecoded variables and attributes).

    Parameters
    ----------
    group
        The group; its children are listed once, on first use.
    use_zarr_fill_value_as_mask
        Treat each array's Zarr ``fill_value`` as its CF ``_FillValue``. None: True for Zarr v2,
        False for v3 (xarray's defaults).
    drop_variables
        Arrays never opened (nor checked for dimension names).
    """

    __slots__ = ("group", "use_zarr_fill_value_as_mask", "_drop", "_members", "_codec_encodings")

    def __init__(
        self,
        group: Group,
        *,
        use_zarr_fill_value_as_mask: bool | None = None,
        drop_variables: str | Iterable[str] | None = None,
    ) -> None:
        self.group = group
        if use_zarr_fill_value_as_mask is None:
            use_zarr_fill_value_as_mask = _zarr_format(group) == 2
        self.use_zarr_fill_value_as_mask = bool(use_zarr_fill_value_as_mask)
        self._drop = {drop_variables} if isinstance(drop_variables, str) else set(drop_variables or ())
        self._members: dict[str, Array | Group] | None = None
        #: codec_encoding by pipeline: the variables of a store mostly share one parsed pipeline
        self._codec_encodings: dict[int, tuple[Any, dict[str, Any]]] = {}

    @property
    def zarr_format(self) -> int:
        return _zarr_format(self.group)

    @property
    def members(self) -> dict[str, Array | Group]:
        """The group's children by name, read once."""
        if self._members is None:
            self._members = dict(self.group.members())
        return self._members

    @property
    def arrays(self) -> dict[str, Array]:
        return {name: node for name, node in self.members.items() if isinstance(node, Array)}

    @property
    def groups(self) -> dict[str, Group]:
        return {name: node for name, node in self.members.items() if isinstance(node, Group)}

    def open_store_variable(self, name: str, array: Array | None = None) -> Variable:
        """The array ``name`` as an undecoded, lazily indexed ``xarray.Variable``."""
        array = self.arrays[name] if array is None else array
        dimensions, attributes = dimensions_and_attributes(array)
        data = indexing.LazilyIndexedArray(ZarrxBackendArray(array))
        # dask blocks follow the stored objects: the shards of a sharded array, else its chunks
        stored = array.shards or array.chunks
        encoding: dict[str, Any] = {
            "chunks": array.chunks,
            "preferred_chunks": dict(zip(dimensions, stored)),
        }
        if array.dtype.kind == "T":
            encoding["dtype"] = array.dtype
        encoding.update(self._codec_encoding(array))
        if self.use_zarr_fill_value_as_mask:
            if array.fill_value is not None:
                attributes["_FillValue"] = array.fill_value
        else:
            if self.zarr_format == 3:
                encoding["fill_value"] = array.fill_value
            if "_FillValue" in attributes:
                attributes["_FillValue"] = _decode_fill_value_attribute(attributes["_FillValue"], array.dtype)
        return Variable(dimensions, data, attributes, encoding)

    def _codec_encoding(self, array: Array) -> dict[str, Any]:
        pipeline = array.metadata.codecs
        key = (id(pipeline), array.shards, _zarr_format(array))
        cached = self._codec_encodings.get(key)
        if cached is None or cached[0] is not pipeline:
            cached = self._codec_encodings[key] = (pipeline, codec_encoding(array))
        return dict(cached[1])

    def get_variables(self) -> FrozenDict:
        arrays = {name: array for name, array in self.arrays.items() if name not in self._drop}
        # xarray reads every dimension coordinate to build its indexes, one after another:
        # the first of those reads fetches them all in one batch (one round trip, not one each)
        indexes = [name for name, array in arrays.items() if _is_dimension_coordinate(name, array)]
        arrays.update(zip(indexes, read_together([arrays[name] for name in indexes])))
        return FrozenDict((name, self.open_store_variable(name, array)) for name, array in arrays.items())

    def get_attrs(self) -> dict[str, Any]:
        return {k: v for k, v in self.group.attrs.asdict().items() if not _is_nc_attribute(k)}

    def get_dimensions(self) -> dict[str, int]:
        dimensions: dict[str, int] = {}
        for name, array in self.arrays.items():
            names, _ = dimensions_and_attributes(array)
            for dim, size in zip(names, array.shape):
                if dimensions.setdefault(dim, size) != size:
                    raise ValueError(
                        f"found conflicting lengths for dimension {dim!r} ({size} in array {name!r} != "
                        f"{dimensions[dim]})"
                    )
        return dimensions

    def walk(self, path: str = "/") -> Iterator[tuple[str, "ZarrxDataStore"]]:
        """``(path, store)`` for this group and every group below it, depth first."""
        yield path, self
        for name, child in self.groups.items():
            store = ZarrxDataStore(
                child, use_zarr_fill_value_as_mask=self.use_zarr_fill_value_as_mask, drop_variables=self._drop
            )
            yield from store.walk(f"{path.rstrip('/')}/{name}")


# -- the entry point -------------------------------------------------------------------------------
class ZarrxBackendEntrypoint(BackendEntrypoint):
    """Open Zarr v3 (and v2) hierarchies with zarrx: ``xr.open_dataset(store, engine="zarrx")``.

    ``store`` is anything :func:`zarrx.open_group` takes (a path, an fsspec URL, a zarrx Store,
    an ``FSMap``, a dict) or a :class:`zarrx.Group`.

    Examples
    --------
    >>> import numpy as np, xarray as xr, zarrx
    >>> root = zarrx.create_group("memory://example-engine", overwrite=True)
    >>> t = root.create_array("t", shape=(4,), chunks=(2,), dtype="float32", dimension_names=["x"],
    ...                       attributes={"units": "K"})
    >>> t[:] = np.arange(4)
    >>> ds = xr.open_dataset("memory://example-engine", engine="zarrx")
    >>> ds.t.attrs["units"], ds.t.encoding["preferred_chunks"]
    ('K', {'x': 2})
    """

    description = "Open Zarr v3 (and v2) stores lazily with zarrx: sharding-aware chunks, batched metadata reads"
    #: xarray's guide to Zarr I/O: engine="zarrx" keeps its semantics
    url = "https://docs.xarray.dev/en/stable/user-guide/io.html#zarr"
    supports_groups = True

    def guess_can_open(self, filename_or_obj: Any) -> bool:
        if isinstance(filename_or_obj, (Group, Store)):
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
        consolidated: bool | None = None,
        storage_options: Mapping[str, Any] | None = None,
        zarr_format: int | None = None,
        use_zarr_fill_value_as_mask: bool | None = None,
    ) -> Dataset:
        zgroup = open_zarrx_group(
            filename_or_obj,
            group,
            consolidated=consolidated,
            storage_options=storage_options,
            zarr_format=zarr_format,
        )
        store = ZarrxDataStore(
            zgroup, use_zarr_fill_value_as_mask=use_zarr_fill_value_as_mask, drop_variables=drop_variables
        )
        return _decode(
            store,
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
        group: str | None = None,
        consolidated: bool | None = None,
        storage_options: Mapping[str, Any] | None = None,
        zarr_format: int | None = None,
        use_zarr_fill_value_as_mask: bool | None = None,
    ) -> dict[str, Dataset]:
        """Every group at or below ``group`` as a Dataset, keyed ``"/"``, ``"/a"``, ``"/a/b"`` ...
        relative to ``group``."""
        zgroup = open_zarrx_group(
            filename_or_obj,
            group,
            consolidated=consolidated,
            storage_options=storage_options,
            zarr_format=zarr_format,
        )
        root = ZarrxDataStore(
            zgroup, use_zarr_fill_value_as_mask=use_zarr_fill_value_as_mask, drop_variables=drop_variables
        )
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
            for path, store in root.walk()
        }

    def open_datatree(
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
        consolidated: bool | None = None,
        storage_options: Mapping[str, Any] | None = None,
        zarr_format: int | None = None,
        use_zarr_fill_value_as_mask: bool | None = None,
    ) -> DataTree:
        from xarray.backends.common import datatree_from_dict_with_io_cleanup

        groups = self.open_groups_as_dict(
            filename_or_obj,
            mask_and_scale=mask_and_scale,
            decode_times=decode_times,
            concat_characters=concat_characters,
            decode_coords=decode_coords,
            drop_variables=drop_variables,
            use_cftime=use_cftime,
            decode_timedelta=decode_timedelta,
            group=group,
            consolidated=consolidated,
            storage_options=storage_options,
            zarr_format=zarr_format,
            use_zarr_fill_value_as_mask=use_zarr_fill_value_as_mask,
        )
        return datatree_from_dict_with_io_cleanup(groups)


def _decode(store: ZarrxDataStore, **decoders: Any) -> Dataset:
    """xarray's own CF decoding of the store's variables (the path engine="zarr" takes)."""
    return StoreBackendEntrypoint().open_dataset(store, **decoders)

