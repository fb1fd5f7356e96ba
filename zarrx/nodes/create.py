"""Writing new nodes: what :func:`zarrx.create_array`, :func:`zarrx.create_group` and a group's
``create_array``/``create_group`` have in common.

A new node replaces what is at its path only when asked (``overwrite``), gets the missing groups
above it (in its own format: a hierarchy keeps one), and is refused below an array, in a draft
hierarchy (read-only) or where a parent is stored only in the other format.
"""

from __future__ import annotations

from typing import Any

from zarrx.errors import ContainsArrayError, ContainsGroupError, MetadataError, ReadOnlyError, UsageError
from zarrx.metadata.draft import READ_ONLY_REASON, is_draft_entry_point
from zarrx.metadata.node import GroupMetadata, decode_json, parse_node_metadata
from zarrx.metadata.protocol import GroupMetadataLike, NodeMetadata
from zarrx.metadata.v2 import ZARRAY, ZGROUP, ZMETADATA, GroupMetadataV2
from zarrx.nodes.array import Array
from zarrx.nodes.consolidated import Change, metadata_lock, update_copies
from zarrx.nodes.hierarchy import ZARR_JSON, read_node, write_node
from zarrx.nodes.metadata_builder import build_array_metadata, build_array_metadata_v2
from zarrx.storage.paths import join_key
from zarrx.storage.store import Store

__all__ = ["OPEN_FORMATS", "WRITE_FORMATS", "check_format", "new_array", "new_group_metadata"]

#: the formats zarrx opens (None: detect the format) and writes
OPEN_FORMATS = (None, 2, 3)
WRITE_FORMATS = (2, 3)


def check_format(zarr_format: Any, allowed: tuple[Any, ...] = OPEN_FORMATS) -> None:
    if zarr_format not in allowed:
        described = "2, 3 or None (detect the format)" if None in allowed else "2 or 3"
        raise MetadataError(f"zarr_format: expected {described}, found {zarr_format!r}")


def new_array(
    store: Store,
    path: str,
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
    write_empty_chunks: bool = False,
    order: str | None = None,
    dimension_separator: str | None = None,
) -> Array:
    """Create the array at ``path`` of ``store`` (a normalized path) from :func:`zarrx.create_array`'s keywords."""
    check_format(zarr_format, WRITE_FORMATS)
    arguments = dict(
        shape=shape, dtype=dtype, chunks=chunks, shards=shards, fill_value=fill_value, filters=filters,
        serializer=serializer, compressors=compressors, chunk_key_encoding=chunk_key_encoding,
        dimension_names=dimension_names, attributes=attributes,
    )  # fmt: skip
    if zarr_format == 2:
        metadata = build_array_metadata_v2(**arguments, order=order, dimension_separator=dimension_separator)
    else:
        if order not in (None, "C"):
            raise MetadataError(
                f"order: Zarr format 3 stores chunks in C order, found {order!r}; "
                "use filters=[TransposeCodec(order=...)] to store them transposed"
            )
        if dimension_separator is not None:
            raise MetadataError(
                "dimension_separator: a Zarr v2 keyword; for Zarr format 3 pass "
                f"chunk_key_encoding={{'name': 'default', 'separator': {dimension_separator!r}}}"
            )
        metadata = build_array_metadata(**arguments)
    _place(store, path, metadata, overwrite, zarr_format)
    return Array(store, path, metadata, write_empty_chunks=write_empty_chunks)


def new_group_metadata(
    store: Store, path: str, attributes: dict[str, Any] | None, zarr_format: int, overwrite: bool
) -> GroupMetadataLike:
    """Create the group at ``path`` of ``store``; its metadata."""
    check_format(zarr_format, WRITE_FORMATS)
    if attributes is not None and not isinstance(attributes, dict):
        raise MetadataError(f"attributes: expected a dict, found {type(attributes).__name__}")
    group_class = GroupMetadataV2 if zarr_format == 2 else GroupMetadata
    metadata = group_class(attributes=dict(attributes or {}))
    _place(store, path, metadata, overwrite, zarr_format)
    return metadata


def _place(store: Store, path: str, metadata: NodeMetadata, overwrite: bool, zarr_format: int) -> None:
    """Replace what is at ``path`` (when ``overwrite``), create the parents, write the documents,
    then update the consolidated metadata above that copies them: all under the hierarchy's
    metadata lock, so that writers creating nodes at once never drop each other's."""
    with metadata_lock(store):
        _place_locked(store, path, metadata, overwrite, zarr_format)


def _place_locked(store: Store, path: str, metadata: NodeMetadata, overwrite: bool, zarr_format: int) -> None:
    existing = read_node(store, path)
    changes: list[Change] = []
    if existing is not None:
        if not overwrite:
            is_array = existing.node_type == "array"
            error = ContainsArrayError if is_array else ContainsGroupError
            kind = "an array" if is_array else "a group"
            raise error(f"{kind} already exists at {'/' + path!r}; pass overwrite=True (or mode='w') to replace it")
        store.delete_prefix(join_key(path, ""))
        if isinstance(existing.zarr_format, int):
            changes.append((path, None, existing.zarr_format))
    created, documents = _ensure_parents(store, path, zarr_format)
    documents[join_key(path, ZMETADATA)] = None  # a new node has no consolidated metadata of its own
    write_node(store, path, metadata)
    changes += [(parent, NEW_GROUP[zarr_format](), zarr_format) for parent in created]
    update_copies(store, [*changes, (path, metadata, zarr_format)], documents)


#: zarr_format -> the metadata of a new group without attributes
NEW_GROUP = {3: GroupMetadata, 2: GroupMetadataV2}


def _ensure_parents(store: Store, path: str, zarr_format: int = 3) -> tuple[list[str], dict[str, bytes | None]]:
    """Create the missing groups above ``path`` (in ``zarr_format``); an array in the way is an error.

    Returns the groups created and the documents read above ``path`` (by key; the consolidated
    metadata that may copy the new node is among them).
    """
    if not path:
        return [], {}  # the root has no parents
    parts = path.split("/")[:-1]
    parents = ["", *("/".join(parts[: i + 1]) for i in range(len(parts)))]
    created, documents = ENSURE_PARENTS[zarr_format](store, path, parents)
    if created:
        store.set_many({
            join_key(parent, name): data for parent in created for name, data in NEW_GROUP[zarr_format]().documents().items()
        })  # fmt: skip
    return created, documents


def _missing_parents_v3(store: Store, path: str, parents: list[str]) -> tuple[list[str], dict[str, bytes | None]]:
    keys = [join_key(parent, ZARR_JSON) for parent in parents]
    documents = store.get_many([*keys, *(join_key(parent, name) for parent in parents for name in (ZARRAY, ZGROUP))])
    _refuse_draft(documents.get(ZARR_JSON), path)
    missing = []
    for parent, key in zip(parents, keys):
        raw = documents.get(key)
        if raw is None:
            _refuse_other_format(documents, parent, path, found=2, wanted=3)
            missing.append(parent)
            continue
        if parse_node_metadata(raw, key).node_type == "array":
            raise ContainsArrayError(f"cannot create a node at {path!r}: an array exists at {'/' + parent!r}")
    return missing, documents


def _missing_parents_v2(store: Store, path: str, parents: list[str]) -> tuple[list[str], dict[str, bytes | None]]:
    # the parents' .zmetadata in the same batch: the consolidated metadata that may copy the node
    keys = [join_key(parent, name) for parent in parents for name in (ZARRAY, ZGROUP, ZARR_JSON, ZMETADATA)]
    documents = store.get_many(keys)
    _refuse_draft(documents.get(ZARR_JSON), path)
    missing = []
    for parent in parents:
        if documents.get(join_key(parent, ZARRAY)) is not None:
            raise ContainsArrayError(f"cannot create a node at {path!r}: an array exists at {'/' + parent!r}")
        if documents.get(join_key(parent, ZGROUP)) is None:
            _refuse_other_format(documents, parent, path, found=3, wanted=2)
            missing.append(parent)
    return missing, documents


def _refuse_draft(root_document: bytes | None, path: str) -> None:
    """A root ``zarr.json`` that is the 2022 draft's entry point: that hierarchy is read-only."""
    if root_document is not None and is_draft_entry_point(decode_json(root_document, ZARR_JSON)):
        raise ReadOnlyError(f"cannot create a node at {path!r}: the hierarchy {READ_ONLY_REASON.removeprefix('it ')}")


def _refuse_other_format(documents: dict[str, bytes | None], parent: str, path: str, found: int, wanted: int) -> None:
    """A parent stored only in the other format: adding this format's group there would give one
    node two formats (each reader seeing a different hierarchy), so refuse."""
    names = (ZARR_JSON,) if found == 3 else (ZARRAY, ZGROUP)
    if any(documents.get(join_key(parent, name)) is not None for name in names):
        raise UsageError(
            f"cannot create a Zarr v{wanted} node at {path!r}: {'/' + parent!r} is a Zarr v{found} node, and a "
            f"hierarchy keeps one format; create it with zarr_format={found}, or convert the hierarchy first "
            "(zarrx.convert)"
        )


#: zarr_format -> the documents of the groups missing above a new node
ENSURE_PARENTS = {3: _missing_parents_v3, 2: _missing_parents_v2}
