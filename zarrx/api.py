"""Opening and creating arrays and groups: the functions users call first.

``store`` is anything :func:`zarrx.storage.make_store` takes: a path, a URL
(``"s3://bucket/x.zarr"``, ``"memory://x"``, ``"https://…"``), a zarrx Store, an
fsspec ``FSMap`` or a dict. Modes follow zarr-python: ``r`` read-only, must
exist; ``r+`` read/write, must exist; ``a`` read/write, created when absent;
``w`` created, replacing what is there; ``w-`` created, failing if anything is
there.
"""

from __future__ import annotations

from typing import Any

from zarrx.array import Array
from zarrx.creation import build_array_metadata
from zarrx.errors import (
    ContainsArrayError,
    ContainsGroupError,
    MetadataError,
    NodeNotFoundError,
    UsageError,
)
from zarrx.group import Group
from zarrx.metadata.node import (
    ArrayMetadata,
    ConsolidatedMetadata,
    GroupMetadata,
    parse_node_metadata,
)
from zarrx.storage import make_store
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

MODES = ("r", "r+", "a", "w", "w-")


def _check_mode(mode: str) -> str:
    if mode not in MODES:
        raise UsageError(f"mode: expected one of {MODES}, found {mode!r}")
    return mode


def _check_format(zarr_format: Any) -> None:
    if zarr_format not in (None, 3):
        raise MetadataError(f"zarr_format: zarrx writes and opens Zarr format 3 here, found {zarr_format!r}")


def _read_metadata(store: Store, path: str) -> ArrayMetadata | GroupMetadata | None:
    key = join_key(path, "zarr.json")
    raw = store.get(key)
    return None if raw is None else parse_node_metadata(raw, key)


def _ensure_parents(store: Store, path: str) -> None:
    """Create the missing groups above ``path``; an array in the way is an error."""
    parts = path.split("/")[:-1] if path else []
    parents = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    keys = [join_key(parent, "zarr.json") for parent in ["", *parents]]
    documents = store.get_many(keys)
    missing = {}
    for parent, key in zip(["", *parents], keys):
        raw = documents.get(key)
        if raw is None:
            missing[key] = GroupMetadata().to_bytes()
        elif isinstance(parse_node_metadata(raw, key), ArrayMetadata):
            raise ContainsArrayError(f"cannot create a node at {path!r}: an array exists at {'/' + parent!r}")
    if missing:
        store.set_many(missing)


def _clear(store: Store, path: str, existing: ArrayMetadata | GroupMetadata | None, overwrite: bool) -> None:
    if existing is None:
        return
    if not overwrite:
        error = ContainsArrayError if isinstance(existing, ArrayMetadata) else ContainsGroupError
        kind = "an array" if isinstance(existing, ArrayMetadata) else "a group"
        raise error(f"{kind} already exists at {'/' + path!r}; pass overwrite=True (or mode='w') to replace it")
    store.delete_prefix(join_key(path, ""))


def open(
    store: Any = None,
    path: str = "",
    mode: str = "r",
    storage_options: dict[str, Any] | None = None,
    *,
    zarr_format: int | None = None,
    use_consolidated: bool | None = None,
) -> Array | Group:
    """Open the array or group at ``path``.

    In modes ``a``, ``w`` and ``w-`` a group is created when nothing is there.

    Examples
    --------
    >>> import zarrx
    >>> root = zarrx.open("memory://example-open", mode="w")
    >>> zarrx.open("memory://example-open").attrs.asdict()
    {}
    """
    _check_mode(mode)
    _check_format(zarr_format)
    zstore = make_store(store, mode=mode, storage_options=storage_options)
    path = normalize_path(path)
    if mode in ("w", "w-"):
        return open_group(zstore, path, mode=mode)
    metadata = _read_metadata(zstore, path)
    if metadata is None:
        if mode == "a":
            return open_group(zstore, path, mode=mode)
        raise NodeNotFoundError(f"no array or group at {'/' + path!r} in {zstore!r} (key {join_key(path, 'zarr.json')!r} is absent)")
    if isinstance(metadata, GroupMetadata):
        return _group(zstore, path, metadata, mode, use_consolidated)
    return Array(zstore, path, metadata, read_only=mode == "r")


def _group(store: Store, path: str, metadata: GroupMetadata, mode: str, use_consolidated: bool | None) -> Group:
    consolidated = None
    if use_consolidated is not False and metadata.consolidated_metadata is not None and mode == "r":
        consolidated = metadata.consolidated_metadata.metadata
    if use_consolidated and metadata.consolidated_metadata is None:
        raise MetadataError(f"{join_key(path, 'zarr.json')}: use_consolidated=True but the group has no consolidated metadata")
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

    A read-only group (mode ``r``) whose ``zarr.json`` holds consolidated metadata
    answers every question about its descendants from that one document
    (``use_consolidated=False`` lists the store instead). Writable modes always
    look at the store, so a group never shows a stale listing while it is changed.

    Examples
    --------
    >>> import zarrx
    >>> group = zarrx.open_group("memory://example-group", mode="w", attributes={"title": "demo"})
    >>> zarrx.open_group("memory://example-group", mode="r").attrs["title"]
    'demo'
    """
    _check_mode(mode)
    _check_format(zarr_format)
    zstore = make_store(store, mode=mode, storage_options=storage_options)
    path = normalize_path(path)
    if mode in ("w", "w-"):
        return create_group(zstore, path, attributes=attributes, overwrite=mode == "w")
    metadata = _read_metadata(zstore, path)
    if metadata is None:
        if mode == "a":
            return create_group(zstore, path, attributes=attributes)
        raise NodeNotFoundError(f"no group at {'/' + path!r} in {zstore!r} (key {join_key(path, 'zarr.json')!r} is absent)")
    if isinstance(metadata, ArrayMetadata):
        raise ContainsArrayError(f"expected a group at {'/' + path!r} but found an array")
    return _group(zstore, path, metadata, mode, use_consolidated)


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
    _check_mode(mode)
    _check_format(zarr_format)
    zstore = make_store(store, mode=mode, storage_options=storage_options)
    path = normalize_path(path)
    if mode in ("w", "w-"):
        return create_array(zstore, path, overwrite=mode == "w", write_empty_chunks=write_empty_chunks, **create_kwargs)
    metadata = _read_metadata(zstore, path)
    if metadata is None:
        if mode == "a" and "shape" in create_kwargs:
            return create_array(zstore, path, write_empty_chunks=write_empty_chunks, **create_kwargs)
        raise NodeNotFoundError(f"no array at {'/' + path!r} in {zstore!r} (key {join_key(path, 'zarr.json')!r} is absent)")
    if isinstance(metadata, GroupMetadata):
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
) -> Array:
    """Create an array at ``path`` (and any missing parent groups).

    ``compressors="auto"`` is zstd; ``None`` stores raw bytes. Codecs may be
    codec objects or their JSON dicts. Chunks that are all fill value are not
    stored unless ``write_empty_chunks=True``.

    Examples
    --------
    >>> import zarrx
    >>> from zarrx.codecs import GzipCodec
    >>> arr = zarrx.create_array({}, shape=(100, 100), chunks=(10, 50), dtype="<f4",
    ...                          compressors=[GzipCodec(level=5)], dimension_names=["y", "x"])
    >>> arr.chunks, arr.dimension_names
    ((10, 50), ('y', 'x'))
    """
    _check_format(zarr_format)
    zstore = make_store(store, mode="a", storage_options=storage_options)
    path = normalize_path(path)
    metadata = build_array_metadata(
        shape=shape,
        dtype=dtype,
        chunks=chunks,
        shards=shards,
        fill_value=fill_value,
        filters=filters,
        serializer=serializer,
        compressors=compressors,
        chunk_key_encoding=chunk_key_encoding,
        dimension_names=dimension_names,
        attributes=attributes,
    )
    _clear(zstore, path, _read_metadata(zstore, path), overwrite)
    _ensure_parents(zstore, path)
    zstore.set(join_key(path, "zarr.json"), metadata.to_bytes())
    return Array(zstore, path, metadata, write_empty_chunks=write_empty_chunks)


def create_group(
    store: Any = None,
    path: str = "",
    attributes: dict[str, Any] | None = None,
    zarr_format: int = 3,
    overwrite: bool = False,
    storage_options: dict[str, Any] | None = None,
) -> Group:
    """Create a group at ``path`` (and any missing parent groups).

    Examples
    --------
    >>> import zarrx
    >>> root = zarrx.create_group({}, attributes={"institution": "example"})
    >>> _ = root.create_group("a/b")
    >>> root.tree()
    '/\\n└── a\\n    └── b'
    """
    _check_format(zarr_format)
    if attributes is not None and not isinstance(attributes, dict):
        raise MetadataError(f"attributes: expected a dict, found {type(attributes).__name__}")
    zstore = make_store(store, mode="a", storage_options=storage_options)
    path = normalize_path(path)
    _clear(zstore, path, _read_metadata(zstore, path), overwrite)
    _ensure_parents(zstore, path)
    metadata = GroupMetadata(attributes=dict(attributes or {}))
    zstore.set(join_key(path, "zarr.json"), metadata.to_bytes())
    return Group(zstore, path, metadata)


def consolidate_metadata(store: Any, path: str = "", storage_options: dict[str, Any] | None = None) -> Group:
    """Gather the metadata of every node below the group at ``path`` into its ``zarr.json``
    (zarr-python 3's inline ``consolidated_metadata``), so the hierarchy opens in one read.

    Examples
    --------
    >>> import zarrx
    >>> root = zarrx.create_group("memory://example-consolidated", overwrite=True)
    >>> _ = root.create_array("x", shape=(2,), dtype="int8")
    >>> zarrx.consolidate_metadata("memory://example-consolidated").is_consolidated
    True
    """
    zstore = make_store(store, mode="r+", storage_options=storage_options)
    path = normalize_path(path)
    group = open_group(zstore, path, mode="r+")
    members = dict(group.members(max_depth=None))
    documents = {}
    for name, node in members.items():
        document = node.metadata.to_json()
        document.pop("consolidated_metadata", None)
        documents[name] = document
    metadata = group.metadata.evolve(consolidated_metadata=ConsolidatedMetadata(documents))
    zstore.set(join_key(path, "zarr.json"), metadata.to_bytes())
    return open_group(zstore, path, mode="r")
