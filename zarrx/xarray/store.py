"""One Zarr group as an xarray data store: undecoded variables over lazy zarrx arrays.

:class:`ZarrxDataStore` is an ``xarray.backends.AbstractDataStore`` over one
:class:`zarrx.Group`. It lists the group once (one listing and one batched metadata read, or
nothing at all when the group came from consolidated metadata) and turns each array into an
undecoded ``xarray.Variable``: dimension names from v3 ``dimension_names`` (or the
``_ARRAY_DIMENSIONS`` attribute), attributes, and an ``encoding`` with ``chunks``,
``preferred_chunks``, ``shards``, ``compressors``, ``filters``, ``serializer`` and
``fill_value``. :class:`ZarrxBackendArray` is the lazy array behind each variable. CF decoding
is left to xarray; :mod:`zarrx.xarray.backend` (the ``engine="zarrx"`` entry point) and the
writer use this store.
"""

from __future__ import annotations

import asyncio
import struct
import threading
from collections.abc import Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

import numpy as np
from xarray import Variable
from xarray.backends import AbstractDataStore, BackendArray
from xarray.backends.common import NONE_VAR_NAME  # no public equivalent
from xarray.backends.zarr import FillValueCoder  # no public equivalent: engine="zarr"'s own decoding
from xarray.core import indexing  # no public equivalent: the indexing classes xarray's backend guide names

from zarrx.concurrency import task_threads
from zarrx.metadata.rectilinear import grid_blocks
from zarrx.errors import ConflictingDimensionsError, MetadataError
from zarrx.nodes.array import Array
from zarrx.nodes.group import Group
from zarrx.nodes.prefetch import fetch_together, read_together
from zarrx.xarray.encoding import codec_encoding

__all__ = [
    "DIMENSION_KEY",
    "NONE_NAME_ATTRIBUTE",
    "NONE_VARIABLE",
    "MissingDimensionsError",
    "ZarrxBackendArray",
    "ZarrxDataStore",
    "dimensions_and_attributes",
    "read_indexes_together",
]

#: the attribute xarray stores Zarr v2 dimension names in
DIMENSION_KEY = "_ARRAY_DIMENSIONS"
#: a variable named None is stored under this name with this attribute set to true (xarray's zarr
#: engine uses "__values__", a name the Zarr spec reserves; both read back as None)
NONE_VARIABLE = "xarray_none_variable"
NONE_NAME_ATTRIBUTE = "_xarray_name_is_none"


class MissingDimensionsError(MetadataError, KeyError):
    """An array has neither v3 ``dimension_names`` nor a ``_ARRAY_DIMENSIONS`` attribute.

    Also a ``KeyError``, which xarray's zarr engine raises in this case."""


def _zarr_format(node: Array | Group) -> int:
    return getattr(node.metadata, "zarr_format", 3)


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
    ``async_getitem`` serves xarray's asynchronous loading (``ds.load_async()``). A read on a
    thread other than the main one (a task xarray made with dask's chunk manager) runs in
    :func:`zarrx.concurrency.task_threads`, as zarrx's own dask tasks do.
    """

    __slots__ = ("_array", "dtype", "shape")

    def __init__(self, array: Array) -> None:
        self._array = array
        self.shape = array.shape
        self.dtype = array.dtype

    def get_array(self) -> Array:
        return self._array

    def __getitem__(self, key: indexing.ExplicitIndexer) -> np.ndarray:
        if threading.current_thread() is threading.main_thread():
            return self._read(key)
        # on another thread -- a task of dask's (xarray makes the tasks with dask's chunk manager,
        # through its own getter, so zarrx cannot mark them) or the caller's own parallel work --
        # the read runs on that thread, as a zarrx dask task does (zarrx.threads-per-task)
        with task_threads():
            return self._read(key)

    def _read(self, key: indexing.ExplicitIndexer) -> np.ndarray:
        kind = type(key)
        support = indexing.IndexingSupport.VECTORIZED
        if kind is indexing.VectorizedIndexer and any(isinstance(item, slice) for item in key.tuple):
            kind, support = indexing.OuterIndexer, indexing.IndexingSupport.OUTER
        method = getattr(self._array, _SELECTIONS[kind])
        result = indexing.explicit_indexing_adapter(key, self.shape, support, lambda raw: method(raw or Ellipsis))
        # integer-only keys give NumPy scalars (or str); xarray wants arrays of the array's dtype
        return result if isinstance(result, np.ndarray) else np.asarray(result, dtype=self.dtype)

    async def async_getitem(self, key: indexing.ExplicitIndexer) -> np.ndarray:
        """``self[key]`` for xarray's ``load_async``: the read runs on a worker thread, so the
        variables loaded together (``asyncio.gather``) read concurrently, each in one batch."""
        return await asyncio.to_thread(self.__getitem__, key)


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
    attributes.pop(NONE_NAME_ATTRIBUTE, None)
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
    missing = "`dimension_names` metadata" if _zarr_format(array) == 3 else f"attribute `{DIMENSION_KEY}`,"
    raise MissingDimensionsError(
        f"Zarr object is missing the {missing} which is required for xarray to determine variable dimensions: "
        f"array {array.name!r} in {array.store!r} (shape {array.shape}) has {found}. Give it one name per "
        f"dimension (v3 dimension_names, or the {DIMENSION_KEY} attribute for Zarr v2), "
        f"or skip it with drop_variables=[{array.basename!r}]"
    )


def _index_arrays(members: Mapping[str, Array | Group], drop: set[str]) -> dict[str, Array]:
    """The arrays among a group's ``members`` that xarray reads whole on opening it: its
    dimension coordinates (which become indexes), those not in ``drop``."""
    return {
        name: node
        for name, node in members.items()
        if isinstance(node, Array) and name not in drop and _is_dimension_coordinate(name, node)
    }


def _is_dimension_coordinate(name: str, array: Array) -> bool:
    """Whether ``array`` is a 1-d coordinate named after its dimension (xarray makes it an index)."""
    if array.ndim != 1:
        return False
    try:
        dimensions, _ = dimensions_and_attributes(array)
    except MetadataError:
        return False
    return dimensions == (name,)


def _variable_key(name: str, array: Array) -> str:
    """The variable's key for xarray: its name, or xarray's stand-in for None (which xarray decodes)."""
    return NONE_VAR_NAME if array.attrs.get(NONE_NAME_ATTRIBUTE) is True else name


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
    cache_members
        List the group's children once (True, engine="zarr"'s default) or at every look (False),
        to see arrays another writer adds meanwhile.
    """

    __slots__ = (
        "group", "use_zarr_fill_value_as_mask", "cache_members", "_drop", "_members", "_codec_encodings", "_indexes",
    )  # fmt: skip

    def __init__(
        self,
        group: Group,
        *,
        use_zarr_fill_value_as_mask: bool | None = None,
        drop_variables: str | Iterable[str] | None = None,
        cache_members: bool = True,
    ) -> None:
        self.group = group
        self.cache_members = bool(cache_members)
        if use_zarr_fill_value_as_mask is None:
            use_zarr_fill_value_as_mask = _zarr_format(group) == 2
        self.use_zarr_fill_value_as_mask = bool(use_zarr_fill_value_as_mask)
        self._drop = {drop_variables} if isinstance(drop_variables, str) else set(drop_variables or ())
        self._members: dict[str, Array | Group] | None = None
        #: codec_encoding by pipeline: the variables of a store mostly share one parsed pipeline
        self._codec_encodings: dict[int, tuple[Any, dict[str, Any]]] = {}
        #: the index arrays over a store shared with other groups' (:func:`read_indexes_together`)
        self._indexes: dict[str, Array] | None = None

    @property
    def zarr_format(self) -> int:
        return _zarr_format(self.group)

    @property
    def members(self) -> dict[str, Array | Group]:
        """The group's children by name, read once (at every look without ``cache_members``)."""
        if self._members is None or not self.cache_members:
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
        if stored and isinstance(stored[0], tuple):  # a rectilinear grid: its chunks, cut at the array's end
            stored = grid_blocks(stored, array.shape)
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

    def index_arrays(self) -> dict[str, Array]:
        """The arrays xarray reads whole when it opens the group: its dimension coordinates
        (which become indexes), those not dropped."""
        return _index_arrays(self.members, self._drop)

    def get_variables(self) -> Mapping[str, Variable]:
        self.get_dimensions()  # conflicting lengths: a zarrx error naming them, not xarray's bare ValueError
        arrays = {name: array for name, array in self.arrays.items() if name not in self._drop}
        # xarray reads every dimension coordinate to build its indexes, one after another:
        # the first of those reads fetches them all in one batch (one round trip, not one each) --
        # with those of the other groups of a tree when the store was given them
        indexes = self._indexes
        if indexes is None or not self.cache_members:
            names = list(self.index_arrays())
            indexes = dict(zip(names, read_together([arrays[name] for name in names])))
        arrays.update((name, array) for name, array in indexes.items() if name in arrays)
        return MappingProxyType(
            {_variable_key(name, array): self.open_store_variable(name, array) for name, array in arrays.items()}
        )

    def get_attrs(self) -> dict[str, Any]:
        return {k: v for k, v in self.group.attrs.asdict().items() if not _is_nc_attribute(k)}

    def get_dimensions(self) -> dict[str, int]:
        """The length of each dimension of the group's arrays (those not dropped).

        Raises :class:`~zarrx.errors.ConflictingDimensionsError` (a ValueError) naming the
        dimension and the arrays when two arrays give one dimension different lengths.
        """
        dimensions: dict[str, tuple[int, str]] = {}
        for name, array in self.arrays.items():
            if name in self._drop:
                continue
            names, _ = dimensions_and_attributes(array)
            for dim, size in zip(names, array.shape):
                length, first = dimensions.setdefault(dim, (size, name))
                if length != size:
                    raise ConflictingDimensionsError(
                        f"dimension {dim!r} has length {length} in array {first!r} but {size} in array {name!r} "
                        f"of group {self.group.name!r} in {self.group.store!r}; xarray needs one length per "
                        f"dimension: resize one of them, or skip it with drop_variables=[{name!r}]"
                    )
        return {dim: length for dim, (length, _) in dimensions.items()}

    def walk(self, path: str = "/") -> Iterator[tuple[str, "ZarrxDataStore"]]:
        """``(path, store)`` for this group and every group below it, depth first.

        The hierarchy is read first (:meth:`zarrx.Group.descendants`: each group as soon as it
        is found, beside the others; no request from consolidated metadata). When that reads a
        remote store, each group's index arrays are fetched as soon as its arrays are known, by
        the thread that read them, while the walk goes on: the opening thread only waits, so the
        GIL is free for the event loop reading the answers. (xarray reads them whole to build its
        indexes; with ``create_default_indexes=False`` it does not, but no public hook tells a
        backend, so they are read anyway: a request per index chunk.) Other groups' indexes
        are left to :func:`read_indexes_together`."""
        members = None
        fetched: dict[str, dict[str, Array]] = {}
        if self._members is None or not self.cache_members:

            def fetch_indexes(relative: str, nodes: dict[str, Array | Group]) -> None:
                indexes = _index_arrays(nodes, self._drop)
                fetched[relative] = dict(zip(indexes, fetch_together(list(indexes.values()))))

            # a fresh look at every use (cache_members=False) would not use what was fetched
            fetch = self.cache_members and not self.group.store.reads_are_local
            members = self.group.descendants(then=fetch_indexes if fetch else None)
        yield from self._walk(path, "", members, fetched)

    def _walk(
        self, path: str, relative: str, members: dict[str, dict[str, Array | Group]] | None,
        fetched: dict[str, dict[str, Array]],
    ) -> Iterator[tuple[str, "ZarrxDataStore"]]:
        if members is not None:
            self._members = members.get(relative, {})
        if relative in fetched:
            self._indexes = fetched[relative]
        yield path, self
        for name, child in self.groups.items():
            store = ZarrxDataStore(
                child,
                use_zarr_fill_value_as_mask=self.use_zarr_fill_value_as_mask,
                drop_variables=self._drop,
                cache_members=self.cache_members,
            )
            yield from store._walk(
                f"{path.rstrip('/')}/{name}", f"{relative}/{name}" if relative else name, members, fetched
            )


def read_indexes_together(stores: Iterable[ZarrxDataStore]) -> None:
    """Give ``stores`` (the groups of a tree) their index arrays over one shared prefetch: the
    first index xarray reads fetches the indexes of every group in one batch, and waits for it.
    Stores whose indexes the walk fetched already (:meth:`ZarrxDataStore.walk`) keep them.

    Examples
    --------
    >>> import numpy as np, zarrx
    >>> from zarrx.storage import MemoryStore, MetricsStore
    >>> store = MetricsStore(MemoryStore())
    >>> root = zarrx.create_group(store)
    >>> for group in ("a", "b", "c"):
    ...     root.create_array(f"{group}/x", shape=(3,), dtype="i4", dimension_names=["x"])[:] = np.arange(3)
    >>> stores = [data_store for _, data_store in ZarrxDataStore(zarrx.open_group(store)).walk()]
    >>> store.reset()
    >>> read_indexes_together(stores)  # nothing read yet
    >>> [data_store.get_variables()["x"].values.tolist() for data_store in stores[1:]]
    [[0, 1, 2], [0, 1, 2], [0, 1, 2]]
    >>> store.summary().rounds  # the three coordinates: one batch
    1
    """
    stores = [store for store in stores if store._indexes is None]
    indexes = [(store, name, array) for store in stores for name, array in store.index_arrays().items()]
    # fetched by the first index read, in the opening thread, which waits for the whole batch:
    # decoding the groups beside it would hold the GIL the event loop needs after every system
    # call: a 200-group tree at 20 ms per request opened about 40 % slower that way (docs/remote.md)
    together = read_together([array for _, _, array in indexes])
    for store in stores:
        store._indexes = {}
    for (store, name, _), array in zip(indexes, together):
        store._indexes[name] = array
