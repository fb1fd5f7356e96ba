"""Writing Datasets, DataArrays and DataTrees to Zarr with zarrx (``ds.zarrx.to_zarr(...)``).

The steps are xarray's zarr engine's, with zarrx underneath:

1. CF encoding is xarray's own (``conventions.encode_dataset_coordinates`` and the zarr
   engine's ``encode_zarr_variable``): datetimes, timedeltas and cftime become numbers with
   ``units``/``calendar``, ``scale_factor``/``add_offset``/``_FillValue`` pack values, strings
   stay variable-length text. Variables that already exist in the store (modes ``a``, ``a-``,
   ``r+``) are encoded with the encoding they were stored with, so appended times keep the
   stored units.
2. Arrays are created as xarray's zarr engine creates them: v3 ``dimension_names`` (v2: the
   ``_ARRAY_DIMENSIONS`` attribute), attributes, and its fill value rules -- for v3 the Zarr
   ``fill_value`` comes from ``encoding["fill_value"]`` (NaN for floats when absent) and a CF
   ``_FillValue`` is an attribute (base64 for floats); for v2 the ``_FillValue`` is the Zarr
   ``fill_value``. Encoding keys: ``chunks``, ``shards``, ``compressors``, ``filters``,
   ``serializer``, ``fill_value``, ``chunk_key_encoding``, ``write_empty_chunks`` and the CF
   ones (``dtype``, ``_FillValue``, ``scale_factor``, ``add_offset``, ``units``, ``calendar``).
3. Data: NumPy-backed variables are written at once; dask-backed ones by
   :func:`zarrx.to_zarr`, one task per block, without locks. A layout where two blocks would
   write one chunk -- one *shard* for a sharded array -- raises
   :class:`~zarrx.errors.ChunkAlignmentError` (``safe_chunks=True``, xarray's default), or is
   rechunked onto the grid first as dask's ``to_zarr`` does -- blocks near ``array.chunk-size``
   in multiples of the shard shape (``align_chunks=True`` or ``safe_chunks=False``: zarrx never
   writes a racing layout). In mode ``r+`` a dask-backed region must also start and end on the grid (or at
   the array's end), since other processes may write the regions beside it.
4. Consolidated metadata is written once all arrays exist (before data is written, which does
   not change metadata), and refreshed by any later write that changes metadata, so it never
   goes stale.
5. A new hierarchy (modes ``w`` and ``w-``) is written through a
   :class:`~zarrx.storage.staged.StagedStore`: the documents and NumPy-backed chunks of every
   group are held, the checks before each write answered from what is held (the target was
   found empty with one listing, or emptied), and everything is sent at the end in three
   concurrent batches -- data, node documents, consolidated copies -- so writing a DataTree of
   many groups takes a handful of sequential request rounds, not a few per node. (Into an
   existing hierarchy the consolidated copies above the target are updated in the store itself
   after the nodes are sent: other writers may share them.) Dask-backed data is written after,
   straight to the store.

Modes: ``w`` replaces the group, ``w-`` fails if it exists, ``a`` creates or updates (and with
``append_dim`` grows along it), ``a-`` appends without rewriting variables that lack
``append_dim``, ``r+`` only writes into existing variables (with ``region``). By default the
mode is ``a`` with ``append_dim``, ``r+`` with ``region``, else ``w-``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Hashable, Iterator, Mapping
from typing import Any, Literal

import dask
from xarray import DataArray, Dataset, DataTree

from zarrx.errors import NodeNotFoundError, UsageError
from zarrx.nodes.api import consolidate_metadata, open_group
from zarrx.nodes.consolidated import batched_updates
from zarrx.nodes.group import Group
from zarrx.storage import MODES as STORE_MODES, make_store
from zarrx.storage.staged import empty_prefixes, staged_writes
from zarrx.storage.store import Store
from zarrx.xarray.dataset_writer import DatasetWriter, WriteOptions
from zarrx.xarray.validation import check_encoding_argument, check_names

__all__ = ["MODES", "to_zarr", "dataarray_to_zarr", "datatree_to_zarr"]

#: the store's writable modes (zarrx.storage.MODES) and xarray's own "a-" (append without rewriting)
MODES = (*(mode for mode, read_only in STORE_MODES.items() if not read_only), "a-")
#: a DataArray is stored as a one-variable Dataset; xarray calls an unnamed one's variable
#: "__xarray_dataarray_variable__", a name Zarr v3 reserves ("__" prefix), so zarrx stores it under
#: this name and keeps the DataArray's name (None too) in the attribute xarray's open_dataarray reads
DATAARRAY_VARIABLE = "xarray_dataarray_variable"
DATAARRAY_NAME = "__xarray_dataarray_name__"


def choose_mode(mode: str | None, append_dim: Hashable | None, region: Any) -> str:
    """The write mode, chosen and checked as xarray's ``to_zarr`` does."""
    if mode is None:
        mode = "a" if append_dim is not None else "r+" if region is not None else "w-"
    if mode not in MODES:
        raise UsageError(f"mode: expected one of {MODES}, found {mode!r}")
    if append_dim is not None and mode not in ("a", "a-"):
        raise UsageError(
            f"cannot set append_dim unless mode='a' or mode=None (or mode='a-'): append_dim={append_dim!r} "
            f"grows the stored arrays, found mode={mode!r}"
        )
    if region is not None and mode not in ("a", "a-", "r+"):
        raise UsageError(
            f"cannot set region unless mode='a', mode='a-', mode='r+' or mode=None: a region is written into "
            f"existing arrays, found mode={mode!r}"
        )
    return mode


# -- public functions ------------------------------------------------------------------------------
def to_zarr(
    dataset: Dataset,
    store: Any = None,
    mode: str | None = None,
    group: str | None = None,
    encoding: Mapping[Hashable, Mapping[str, Any]] | None = None,
    *,
    compute: bool = True,
    consolidated: bool | None = None,
    append_dim: Hashable | None = None,
    region: Mapping[Hashable, slice | Literal["auto"]] | Literal["auto"] | None = None,
    safe_chunks: bool = True,
    align_chunks: bool = False,
    storage_options: Mapping[str, Any] | None = None,
    zarr_format: int | None = None,
    write_empty_chunks: bool | None = None,
    chunkmanager_store_kwargs: Mapping[str, Any] | None = None,
    rectilinear: bool = False,
) -> Group | Any:
    """Write ``dataset`` to the group ``group`` of ``store`` (``ds.zarrx.to_zarr(...)``).

    The parameters are ``xarray.Dataset.to_zarr``'s, in its order; what zarrx does differently
    is in the user guide's "Differences from engine='zarr'".

    Parameters
    ----------
    dataset
        The Dataset; dask-backed variables are written in parallel, one task per block.
    store, storage_options
        Anything :func:`zarrx.open_group` takes (path, fsspec URL, Store, ``FSMap``, dict).
    group
        Path of the group to write (created with its parents when absent).
    mode
        ``w``, ``w-``, ``a``, ``a-`` or ``r+`` (see the module docstring); None chooses ``a``
        with ``append_dim``, ``r+`` with ``region``, else ``w-``.
    append_dim
        Grow the stored variables along this dimension and write the new values at the end.
    region
        ``{dim: slice}`` (or ``"auto"`` per dimension, or ``"auto"`` for all, found from the
        stored coordinates): where in the existing arrays to write. Variables without any of
        the region's dimensions must be dropped first; indexes are not written.
    encoding
        ``{variable: {key: value}}`` with zarr keys (``chunks``, ``shards``, ``compressors``,
        ``filters``, ``serializer``, ``fill_value``, ``chunk_key_encoding``) and CF keys
        (``dtype``, ``_FillValue``, ``scale_factor``, ``add_offset``, ``units``, ``calendar``).
    compute
        False: create the arrays and write NumPy data now, and return a ``dask.delayed``
        object that writes the dask-backed data in parallel when computed. The writes of all
        variables are one computation: work they share upstream runs once.
    consolidated
        Write consolidated metadata at the store's root (True, None). False does not add it,
        but refreshes consolidated metadata that is already there.
    chunkmanager_store_kwargs
        Keywords for ``dask.compute`` of the writes (``scheduler=...``), with ``compute=True``.
    zarr_format
        3 (default for new groups) or 2; None: the existing group's format, else 3.
    write_empty_chunks
        Store chunks that are all fill value (default: leave them out).
    safe_chunks, align_chunks
        See the module docstring: refuse (default) or rechunk layouts that would race.
    rectilinear
        Store a new dask-backed variable whose blocks are irregular (after a filter, a
        concatenation, a groupby) with its blocks as the chunks -- a rectilinear chunk grid --
        instead of refusing them (its ``encoding["chunks"]``, when given, still decides).

    Returns
    -------
    The written :class:`zarrx.Group` (xarray returns its ``ZarrStore``), or a
    ``dask.delayed.Delayed`` when ``compute=False``.

    Examples
    --------
    >>> import numpy as np, xarray as xr, zarrx.xarray
    >>> ds = xr.Dataset({"t": (("x",), np.arange(4.0), {"units": "K"})})
    >>> group = ds.zarrx.to_zarr("memory://example-writer", mode="w")
    >>> group["t"].dimension_names, group["t"][:]
    (('x',), array([0., 1., 2., 3.]))
    """
    mode = choose_mode(mode, append_dim, region)
    # arguments are checked before the store is touched (mode "w" replaces the group)
    check_names(dataset)
    encoding = check_encoding_argument(encoding, dataset)
    options = WriteOptions(mode, append_dim, safe_chunks, align_chunks, write_empty_chunks, rectilinear=rectilinear)
    zstore = make_store(store, mode="a" if mode == "a-" else mode, storage_options=storage_options)
    with writing(zstore, group, mode, consolidated) as wstore:
        target = open_target(wstore, group, mode, zarr_format)
        DatasetWriter(target, options, append_dim=append_dim).write(dataset, region=region, encoding=encoding)
    return _finish(_on(target, zstore), options, compute, chunkmanager_store_kwargs)


def dataarray_to_zarr(array: DataArray, store: Any = None, *args: Any, **kwargs: Any) -> Group | Any:
    """Write a DataArray as a one-variable Dataset; takes :func:`to_zarr`'s arguments.

    ``xr.open_dataarray(store, engine=...)`` gives it back with its name (None included)."""
    if array.name is None or array.name in array.coords or array.name in array.dims:
        # no name, or one a coordinate already has: a generic variable name, the real one in an attribute
        dataset = array.to_dataset(name=DATAARRAY_VARIABLE)
        dataset.attrs[DATAARRAY_NAME] = array.name
    else:
        dataset = array.to_dataset()
    return to_zarr(dataset, store, *args, **kwargs)


def datatree_to_zarr(
    tree: DataTree,
    store: Any = None,
    mode: str | None = None,
    encoding: Mapping[str, Mapping[Hashable, Mapping[str, Any]]] | None = None,
    consolidated: bool | None = True,
    group: str | None = None,
    write_inherited_coords: bool = False,
    compute: bool = True,
    *,
    append_dim: Hashable | None = None,
    region: Mapping[Hashable, slice | Literal["auto"]] | Literal["auto"] | None = None,
    safe_chunks: bool = True,
    align_chunks: bool = False,
    storage_options: Mapping[str, Any] | None = None,
    zarr_format: int | None = None,
    write_empty_chunks: bool | None = None,
    chunkmanager_store_kwargs: Mapping[str, Any] | None = None,
    rectilinear: bool = False,
) -> Group | Any:
    """Write every node of ``tree`` as a group (``dt.zarrx.to_zarr(...)``).

    The arguments are ``xarray.DataTree.to_zarr``'s, in its order, then :func:`to_zarr`'s
    keywords; ``encoding`` is keyed by node path (``"/"``,
    ``"/a/b"``), each value as :func:`to_zarr`'s. Inherited coordinates are written only at the
    node that defines them unless ``write_inherited_coords``. With ``append_dim``, nodes whose
    variables have that dimension are appended to and the others are rewritten as in mode ``a``
    (with ``a-`` only their new variables are added). ``group`` puts the tree's root at that path.

    Examples
    --------
    >>> import numpy as np, xarray as xr, zarrx.xarray
    >>> tree = xr.DataTree.from_dict({"/": xr.Dataset({"a": ("x", [1, 2])}),
    ...                               "/child": xr.Dataset({"b": ("y", [3.0])})})
    >>> root = tree.zarrx.to_zarr("memory://example-tree", mode="w")
    >>> sorted(name for name, _ in root.members(max_depth=None))
    ['a', 'child', 'child/b']
    """
    mode = choose_mode(mode, append_dim, region)
    encoding = dict(encoding or {})
    unknown = set(encoding) - set(tree.groups)
    if unknown:
        raise UsageError(
            f"unexpected encoding group name(s) provided: {unknown}: they are not groups of the tree (its "
            f"groups: {list(tree.groups)})"
        )
    for path, node in tree.subtree_with_keys:
        # arguments are checked before the store is touched (mode "w" replaces the group)
        check_names(node.dataset)
        check_encoding_argument(encoding.get(node.path), node.to_dataset(inherit=True))
    options = WriteOptions(mode, append_dim, safe_chunks, align_chunks, write_empty_chunks, rectilinear=rectilinear)
    zstore = make_store(store, mode="a" if mode == "a-" else mode, storage_options=storage_options)
    with writing(zstore, group, mode, consolidated) as wstore:
        root = open_target(wstore, group, mode, zarr_format)
        for relative, node in tree.subtree_with_keys:
            at_root = node is tree
            dataset = node.to_dataset(inherit=write_inherited_coords or at_root)
            target = root if at_root else _child_group(root, relative, mode)
            # a node without the append dimension has nothing to append: mode 'a' rewrites it, 'a-' adds
            # only its new variables
            node_append_dim = append_dim if append_dim in dataset.dims else None
            writer = DatasetWriter(target, options, append_dim=node_append_dim)
            writer.write(dataset, region=region, encoding=encoding.get(node.path))
    return _finish(_on(root, zstore), options, compute, chunkmanager_store_kwargs)


# -- opening the target ----------------------------------------------------------------------------
def open_target(store: Store, group: str | None, mode: str, zarr_format: int | None) -> Group:
    """The group ``group`` of ``store`` opened (or created) for a write in ``mode``."""
    path = "" if group is None else str(group).strip("/")
    kwargs = {} if zarr_format is None else {"zarr_format": zarr_format}
    return open_group(store, path, mode="a" if mode == "a-" else mode, **kwargs)


@contextlib.contextmanager
def writing(store: Store, group: str | None, mode: str, consolidated: bool | None) -> Iterator[Store]:
    """The store a write in ``mode`` makes its nodes through; on leaving, the consolidated copies
    are brought up to date once (not once per variable) and the consolidated metadata written.

    A new hierarchy (``w``, ``w-``) is written through a :class:`~zarrx.storage.staged.StagedStore`:
    the documents and NumPy-backed chunks of every node are sent in a few concurrent batches
    (data, then node documents) instead of one request each. In a store that held nothing
    (or that mode ``w`` replaces whole) no other writer's documents are involved, so the
    consolidated copies are staged too and sent last; otherwise they are updated in the store
    itself once the nodes are there, with the store's own protection of shared documents.
    Other modes change existing nodes and write directly, and so does every write to a
    transactional store (an Icechunk session: its writes wait for the commit, and a chunk
    needs its node's document first)."""
    if mode not in ("w", "w-") or store.transactional:
        with batched_updates(store):  # consolidated copies rewritten once, not once per variable
            yield store
        consolidate_after_write(store, consolidated, mode)
        return
    path = "" if group is None else str(group).strip("/")
    empty = empty_prefixes(store, f"{path}/" if path else "")
    if "" in empty or (mode == "w" and not path):
        with staged_writes(store, empty=empty) as wstore:
            with batched_updates(wstore):
                yield wstore
            consolidate_after_write(wstore, consolidated, mode)
        return
    with batched_updates(store):  # outermost: the copies are updated after the flush, in the store
        with staged_writes(store, empty=empty) as wstore:
            yield wstore
    consolidate_after_write(store, consolidated, mode)


def _on(group: Group, store: Store) -> Group:
    """``group`` over ``store`` itself (not the staging wrapper it was written through)."""
    return group if group.store is store else Group(store, group.path, group.metadata)


def _child_group(root: Group, relative: str, mode: str) -> Group:
    if mode == "r+":
        node = root[relative]
        if not isinstance(node, Group):
            raise NodeNotFoundError(f"expected a group at {relative!r} below {root.name!r}, found an array")
        return node
    return root.require_group(relative)


def consolidate_after_write(store: Store, consolidated: bool | None, mode: str) -> None:
    """Write (or refresh) the root's consolidated metadata after a write that changed metadata."""
    if mode == "r+" or not store.supports_consolidated_metadata:
        return  # region writes change no metadata; a store like Icechunk keeps no consolidated copy (as xarray)
    if consolidated is False:
        try:
            if not open_group(store, "", mode="r").is_consolidated:
                return
        except NodeNotFoundError:
            return
    consolidate_metadata(store, "")


def _finish(
    group: Group, options: WriteOptions, compute: bool, compute_kwargs: Mapping[str, Any] | None
) -> Group | Any:
    """Run (or, without ``compute``, wrap in one Delayed) the writes of every variable together:
    one graph, so upstream work the variables share is computed once."""
    if not compute:
        # one Delayed over the list of writes: their graphs are optimised together (upstream work
        # the variables share runs once, and fuses as dask's own store does). dask's array
        # expressions cannot unpack such a list yet (xarray's engine="zarr" fails the same way there)
        return dask.delayed(_written, pure=False)(options.writes)
    if options.writes:
        dask.compute(*options.writes, **dict(compute_kwargs or {}))
    return group


def _written(writes: list[Any]) -> None:
    return None
