"""Opening and creating arrays and groups: the functions users call first.

``store`` is anything :func:`zarrx.storage.make_store` takes: a path, a URL
(``"s3://bucket/x.zarr"``, ``"memory://x"``, ``"https://…"``), a zarrx Store, an
fsspec ``FSMap`` or a dict. Modes follow zarr-python: ``r`` read-only, must
exist; ``r+`` read/write, must exist; ``a`` read/write, created when absent;
``w`` created, replacing what is there; ``w-`` created, failing if anything is
there.

Formats: the ``open*`` functions find the node in any format zarrx reads -- Zarr v3
(``zarr.json``), Zarr v2 (``.zarray``/``.zgroup``, consolidated ``.zmetadata``) and the
2022 draft layout (read-only) -- unless ``zarr_format`` (2 or 3) asks for one; see
:mod:`zarrx.nodes.hierarchy` for what is read. ``create_array`` / ``create_group`` write v3
unless ``zarr_format=2``; nodes created from a v2 group are v2.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from zarrx.concurrency import call_threads, start_beside
from zarrx.errors import ContainsArrayError, ContainsGroupError, MetadataError, NodeNotFoundError, StoreError, StoreTypeError
from zarrx.metadata.node import ConsolidatedMetadata, decode_json, encode_json
from zarrx.metadata.protocol import GroupMetadataLike, NodeMetadata
from zarrx.metadata.v2 import ZMETADATA, ConsolidatedMetadataV2
from zarrx.nodes.array import Array
from zarrx.nodes.consolidated import ATTEMPTS, metadata_lock, needs_conditional_writes
from zarrx.nodes.create import WRITE_FORMATS, check_format, new_array, new_group_metadata
from zarrx.nodes.group import Group
from zarrx.nodes.hierarchy import ZARR_JSON, node_keys, read_node
from zarrx.storage import check_mode, make_store
from zarrx.storage.paths import join_key, normalize_path
from zarrx.storage.store import Store

__all__ = [
    "open",
    "open_array",
    "open_group",
    "create_array",
    "create_group",
    "consolidate_metadata",
]


def _absent(what: str, path: str, store: Store, zarr_format: int | None) -> NodeNotFoundError:
    return NodeNotFoundError(f"no {what} at {'/' + path!r} in {store!r} (key {node_keys(path, zarr_format)} is absent)")


def open(
    store: Any = None,
    path: str = "",
    mode: str = "r",
    storage_options: dict[str, Any] | None = None,
    *,
    zarr_format: int | None = None,
    use_consolidated: bool | None = None,
) -> Array | Group:
    """Open the array or group at ``path``, in whatever format it is stored (or ``zarr_format``).

    In modes ``a``, ``w`` and ``w-`` a group is created when nothing is there (Zarr v3
    unless ``zarr_format=2``).

    Examples
    --------
    >>> import zarrx
    >>> root = zarrx.open("memory://example-open", mode="w")
    >>> zarrx.open("memory://example-open").attrs.asdict()
    {}
    """
    check_mode(mode)
    check_format(zarr_format)
    zstore = make_store(store, mode=mode, storage_options=storage_options)
    path = normalize_path(path, allow_reserved=True)
    if mode in ("w", "w-"):
        return open_group(zstore, path, mode=mode, zarr_format=zarr_format)
    metadata = read_node(zstore, path, zarr_format=zarr_format, consolidated=_may_consolidate(mode, use_consolidated))
    if metadata is None:
        if mode == "a":
            return open_group(zstore, path, mode=mode, zarr_format=zarr_format)
        raise _absent("array or group", path, zstore, zarr_format)
    if metadata.node_type == "group":
        return _group(zstore, path, metadata, mode, use_consolidated)
    return Array(zstore, path, metadata, read_only=mode == "r")


def _may_consolidate(mode: str, use_consolidated: bool | None) -> bool:
    """Whether consolidated metadata may be used (read-only opens), so a v2 ``.zmetadata`` is worth reading."""
    return mode == "r" and use_consolidated is not False


def _group(store: Store, path: str, metadata: GroupMetadataLike, mode: str, use_consolidated: bool | None) -> Group:
    consolidated = None
    if use_consolidated is not False and metadata.consolidated_metadata is not None and mode == "r":
        consolidated = metadata.consolidated_metadata.metadata
    if use_consolidated and metadata.consolidated_metadata is None:
        key = metadata.metadata_keys(path)[0] if metadata.metadata_keys(path) else join_key(path, ZARR_JSON)
        raise MetadataError(f"{key}: use_consolidated=True but the group has no consolidated metadata")
    return Group(store, path, metadata, read_only=mode == "r", consolidated=consolidated)


def open_group(
    store: Any = None,
    path: str = "",
    mode: str = "r",
    storage_options: dict[str, Any] | None = None,
    *,
    attributes: dict[str, Any] | None = None,
    zarr_format: int | None = None,
    use_consolidated: bool | None = None,
) -> Group:
    """Open (or, by ``mode``, create) the group at ``path``.

    A read-only group (mode ``r``) with consolidated metadata (v3 ``consolidated_metadata``
    in its ``zarr.json``, or a v2 ``.zmetadata``) answers every question about its
    descendants from that one document (``use_consolidated=False`` lists the store
    instead; on a remote store, read-only, the listing of the group's children is sent beside
    its document, and used by the first look at them). Writable modes always look at the store,
    so a group never shows a stale listing while it is changed. Groups are created in Zarr v3
    unless ``zarr_format=2``.

    Examples
    --------
    >>> import zarrx
    >>> group = zarrx.open_group("memory://example-group", mode="w", attributes={"title": "demo"})
    >>> zarrx.open_group("memory://example-group", mode="r").attrs["title"]
    'demo'
    """
    check_mode(mode)
    check_format(zarr_format)
    zstore = make_store(store, mode=mode, storage_options=storage_options)
    path = normalize_path(path, allow_reserved=True)
    create_format = 3 if zarr_format is None else zarr_format
    if mode in ("w", "w-"):
        return create_group(zstore, path, attributes=attributes, overwrite=mode == "w", zarr_format=create_format)
    listing = None
    if mode == "r" and use_consolidated is False and not zstore.reads_are_local and call_threads() > 1:
        # its children will be listed: the listing goes beside the document, not a round trip after
        listing = start_beside(partial(zstore.list_dir, join_key(path, "")))
    metadata = read_node(zstore, path, zarr_format=zarr_format, consolidated=_may_consolidate(mode, use_consolidated))
    if metadata is None:
        if mode == "a":
            return create_group(zstore, path, attributes=attributes, zarr_format=create_format)
        raise _absent("group", path, zstore, zarr_format)
    if metadata.node_type == "array":
        raise ContainsArrayError(f"expected a group at {'/' + path!r} but found an array")
    group = _group(zstore, path, metadata, mode, use_consolidated)
    if metadata.zarr_format in (2, 3):  # formats whose children are listed under the group's prefix
        group._listing = listing
    return group


def open_array(
    store: Any = None,
    path: str = "",
    mode: str = "r",
    storage_options: dict[str, Any] | None = None,
    *,
    zarr_format: int | None = None,
    write_empty_chunks: bool = False,
    **create_kwargs: Any,
) -> Array:
    """Open the array at ``path``; in modes ``w``/``w-`` (or ``a`` when absent) create it from
    :func:`create_array`'s keywords.

    Examples
    --------
    >>> import zarrx
    >>> _ = zarrx.create_array("memory://example-array", shape=(3,), dtype="int8", fill_value=5, overwrite=True)
    >>> zarrx.open_array("memory://example-array")[:]
    array([5, 5, 5], dtype=int8)
    """
    check_mode(mode)
    check_format(zarr_format)
    zstore = make_store(store, mode=mode, storage_options=storage_options)
    path = normalize_path(path, allow_reserved=True)
    if zarr_format is not None:
        create_kwargs["zarr_format"] = zarr_format
    if mode in ("w", "w-"):
        return create_array(zstore, path, overwrite=mode == "w", write_empty_chunks=write_empty_chunks, **create_kwargs)
    metadata = read_node(zstore, path, zarr_format=zarr_format)
    if metadata is None:
        if mode == "a" and "shape" in create_kwargs:
            return create_array(zstore, path, write_empty_chunks=write_empty_chunks, **create_kwargs)
        raise _absent("array", path, zstore, zarr_format)
    if metadata.node_type == "group":
        raise ContainsGroupError(f"expected an array at {'/' + path!r} but found a group")
    return Array(zstore, path, metadata, read_only=mode == "r", write_empty_chunks=write_empty_chunks)


def create_array(
    store: Any = None,
    path: str = "",
    *,
    shape: Any,
    dtype: Any = "float64",
    chunks: Any = "auto",
    shards: Any = None,
    fill_value: Any = None,
    filters: Any = (),
    serializer: Any = "auto",
    compressors: Any = "auto",
    chunk_key_encoding: Any = None,
    dimension_names: Any = None,
    attributes: dict[str, Any] | None = None,
    zarr_format: int = 3,
    overwrite: bool = False,
    storage_options: dict[str, Any] | None = None,
    write_empty_chunks: bool = False,
    order: str | None = None,
    dimension_separator: str | None = None,
) -> Array:
    """Create an array at ``path`` (and any missing parent groups).

    ``compressors="auto"`` is zstd; ``None`` stores raw bytes. Codecs may be
    codec objects or their JSON dicts. Chunks that are all fill value are not
    stored unless ``write_empty_chunks=True``.

    With ``zarr_format=2`` a Zarr v2 array is written (``.zarray`` + ``.zattrs``):
    ``filters`` and ``compressors`` (one at most) are numcodecs codecs or their
    configuration dicts, ``order`` is ``"C"`` or ``"F"``, ``dimension_separator``
    (or ``chunk_key_encoding={"name": "v2", "separator": "/"}``) picks the chunk
    keys, ``dimension_names`` are stored as the ``_ARRAY_DIMENSIONS`` attribute;
    ``fill_value=None`` writes ``null`` (no fill value; missing chunks read as the
    type's default); ``shards`` and ``serializer`` do not exist in v2.

    Examples
    --------
    >>> import zarrx
    >>> from zarrx.codecs import GzipCodec
    >>> arr = zarrx.create_array({}, shape=(100, 100), chunks=(10, 50), dtype="<f4",
    ...                          compressors=[GzipCodec(level=5)], dimension_names=["y", "x"])
    >>> arr.chunks, arr.dimension_names
    ((10, 50), ('y', 'x'))
    >>> import numcodecs
    >>> v2 = zarrx.create_array({}, shape=(4, 4), dtype=">i4", zarr_format=2, order="F",
    ...                         compressors=numcodecs.Zlib(level=1))
    >>> v2.metadata.to_json()["dtype"], v2.metadata.to_json()["compressor"]
    ('>i4', {'id': 'zlib', 'level': 1})
    """
    check_format(zarr_format, WRITE_FORMATS)
    zstore = make_store(store, mode="a", storage_options=storage_options)
    return new_array(
        zstore, normalize_path(path), zarr_format=zarr_format, overwrite=overwrite,
        write_empty_chunks=write_empty_chunks, order=order, dimension_separator=dimension_separator,
        shape=shape, dtype=dtype, chunks=chunks, shards=shards, fill_value=fill_value, filters=filters,
        serializer=serializer, compressors=compressors, chunk_key_encoding=chunk_key_encoding,
        dimension_names=dimension_names, attributes=attributes,
    )  # fmt: skip


def create_group(
    store: Any = None,
    path: str = "",
    attributes: dict[str, Any] | None = None,
    zarr_format: int = 3,
    overwrite: bool = False,
    storage_options: dict[str, Any] | None = None,
) -> Group:
    """Create a group at ``path`` (and any missing parent groups); ``zarr_format=2`` writes
    ``.zgroup`` + ``.zattrs``.

    Examples
    --------
    >>> import zarrx
    >>> root = zarrx.create_group({}, attributes={"institution": "example"})
    >>> _ = root.create_group("a/b")
    >>> root.tree()
    '/\\n└── a\\n    └── b'
    """
    check_format(zarr_format, WRITE_FORMATS)
    if attributes is not None and not isinstance(attributes, dict):
        raise MetadataError(f"attributes: expected a dict, found {type(attributes).__name__}")
    zstore = make_store(store, mode="a", storage_options=storage_options)
    path = normalize_path(path)
    return Group(zstore, path, new_group_metadata(zstore, path, attributes, zarr_format, overwrite))


def consolidate_metadata(store: Any, path: str = "", storage_options: dict[str, Any] | None = None) -> Group:
    """Gather the metadata of every node below the group at ``path`` in one document, so the
    hierarchy opens in one read: for Zarr v3 the group's ``zarr.json`` (zarr-python 3's
    inline ``consolidated_metadata``), for Zarr v2 a ``.zmetadata`` beside the group
    (zarr-python 2's format, ``{"zarr_consolidated_format": 1, "metadata": {...}}``).

    Examples
    --------
    >>> import zarrx
    >>> root = zarrx.create_group("memory://example-consolidated", overwrite=True)
    >>> _ = root.create_array("x", shape=(2,), dtype="int8")
    >>> zarrx.consolidate_metadata("memory://example-consolidated").is_consolidated
    True
    """
    zstore = make_store(store, mode="r+", storage_options=storage_options)
    if not zstore.supports_consolidated_metadata:  # zarr-python raises a TypeError too
        raise StoreTypeError(f"the store {zstore!r} keeps no consolidated metadata (an Icechunk session lists "
                             "its metadata itself): there is nothing to consolidate")  # fmt: skip
    path = normalize_path(path, allow_reserved=True)
    key = join_key(path, ZARR_JSON)
    with metadata_lock(zstore):  # no metadata write of another writer between the reads and the write
        # on a store with conditional writes instead of a lock, written over the version read before
        # the members were listed: a member added meanwhile makes the write fail, and it is redone
        for _ in range(ATTEMPTS):
            version = zstore.get_versioned(key)[1] if needs_conditional_writes(zstore) else None
            group = open_group(zstore, path, mode="r+")
            group._check_writable()
            members = dict(group.members(max_depth=None))
            if group.metadata.zarr_format == 2:
                _consolidate_v2(zstore, path, group, members)
                return open_group(zstore, path, mode="r")
            documents = {}
            for name, node in members.items():
                if node.metadata.zarr_format != 3:
                    continue  # v3 consolidated metadata holds v3 documents only
                document = node.metadata.to_json()
                document.pop("consolidated_metadata", None)
                documents[name] = document
            metadata = group.metadata.evolve(consolidated_metadata=ConsolidatedMetadata(documents))
            if not needs_conditional_writes(zstore):
                zstore.set(key, metadata.to_bytes())
                break
            if zstore.set_if(key, metadata.to_bytes(), version):
                break
        else:
            raise StoreError(f"{key}: other writers changed it at each of {ATTEMPTS} attempts to consolidate; try again")
    return open_group(zstore, path, mode="r")


def _consolidate_v2(store: Store, path: str, group: Group, members: dict[str, Array | Group]) -> None:
    """Write ``.zmetadata``: the group's own ``.zgroup``/``.zattrs`` and every member's documents."""
    nodes = {}
    for name, node in members.items():
        nodes[name] = {key: decode_json(value, key) for key, value in node.metadata.documents().items()}
    root = {key: decode_json(value, key) for key, value in group.metadata.documents().items()}
    document = ConsolidatedMetadataV2(nodes).to_json(root)
    store.set(join_key(path, ZMETADATA), encode_json(document))
