"""Checking consolidated metadata against the members' own documents (``zarrx verify``).

:func:`find_stale` walks what a hierarchy's groups copy and :func:`disagreements` names each
member whose copy differs, is missing (a member another process added while this one rewrote the
copy, on a store without a lock or conditional writes) or copies a node no longer stored.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from zarrx.errors import MetadataError
from zarrx.metadata.node import decode_json
from zarrx.metadata.protocol import NodeMetadata
from zarrx.metadata.v2 import ZMETADATA, ConsolidatedMetadataV2
from zarrx.nodes.hierarchy import FORMATS, ZARR_JSON
from zarrx.storage.paths import join_key
from zarrx.storage.store import Store

__all__ = ["find_stale", "disagreements", "parse_copies"]


# -- checking -----------------------------------------------------------------------------------
def find_stale(
    store: Store,
    groups: Mapping[str, Any],
    nodes: Mapping[str, NodeMetadata],
    skipped: Callable[[str], bool] = lambda path: False,
) -> tuple[list[tuple[str, str, str]], list[tuple[str, str, str]]]:
    """The consolidated copies of a walked hierarchy that disagree with their members.

    ``groups`` and ``nodes`` (arrays and groups) are metadata by path, as the nodes' own documents
    say; members under a path ``skipped`` says (their documents could not be read) are not judged.
    Returns ``(stale, invalid)``: ``(consolidated document key, member path, what differs)`` for
    each disagreement (:func:`disagreements`), and ``(key, group path, error)`` for each
    consolidated document that does not parse. Reads the v2 groups' ``.zmetadata`` in one batch.
    """
    v2_keys = [join_key(path, ZMETADATA) for path, metadata in groups.items() if metadata.zarr_format == 2]
    zmetadata = store.get_many(v2_keys) if v2_keys else {}
    stale, invalid = [], []
    for group, metadata in sorted(groups.items()):
        key = join_key(group, ZMETADATA if metadata.zarr_format == 2 else ZARR_JSON)
        raw = zmetadata.get(key)
        if raw is None and getattr(metadata, "consolidated_metadata", None) is None:
            continue  # not consolidated (or the draft layout, which has no consolidated metadata)
        try:
            copies = parse_copies(metadata, raw, group)
        except MetadataError as error:
            invalid.append((key, group, str(error)))
            continue
        below = join_key(group, "")
        members = {
            path[len(below) :]: node for path, node in nodes.items()
            if path.startswith(below) and path != group and node.zarr_format == metadata.zarr_format
        }  # fmt: skip
        copies = {relative: copy for relative, copy in copies.items() if not skipped(join_key(group, relative))}
        for relative, difference in disagreements(group, copies, members):
            member = join_key(group, relative)
            stale.append((key, member, f"{'/' + member!r}: {difference}"))
    return stale, invalid


def disagreements(
    group: str, copies: Mapping[str, NodeMetadata | Exception], members: Mapping[str, NodeMetadata]
) -> list[tuple[str, str]]:
    """Where the consolidated metadata of the group at ``group`` disagrees with its members'
    own documents: ``(member path, what differs)``, sorted by path.

    ``copies`` are the parsed consolidated copies by path relative to the group (an exception
    for one that does not parse); ``members`` the nodes below the group as their own documents
    say, by path relative to the group. A copy of a member that no longer exists, a member
    without a copy and a copy that differs (naming the fields) are each reported.

    Examples
    --------
    >>> import zarrx
    >>> a = zarrx.create_array({}, shape=(2,), dtype="int8")
    >>> disagreements("", {"x": a.metadata}, {"x": a.metadata.evolve(shape=(4,)), "y": a.metadata})
    [('x', 'shape: [4] in its zarr.json, [2] in the consolidated metadata'), ('y', 'stored, but missing from the consolidated metadata')]
    """
    found = []
    for path in sorted(set(copies) | set(members)):
        copy, member = copies.get(path), members.get(path)
        if member is None:
            found.append((path, "in the consolidated metadata, but not stored (deleted since?)"))
        elif copy is None:
            found.append((path, "stored, but missing from the consolidated metadata"))
        elif isinstance(copy, Exception):
            found.append((path, f"its consolidated copy is invalid: {copy}"))
        else:
            difference = _difference(_comparable(member), _comparable(copy))
            if difference:
                found.append((path, difference.replace("{document}", _document_name(member))))
    return found


def _comparable(metadata: NodeMetadata) -> dict[str, Any]:
    """The fields of a node's documents, in canonical form (consolidated copies left out)."""
    if metadata.zarr_format == 2:
        merged: dict[str, Any] = {}
        for name, raw in metadata.documents().items():
            merged.update({f"{name}:{field}": value for field, value in decode_json(raw, name).items()})
        return merged
    document = metadata.to_json()
    document.pop("consolidated_metadata", None)
    return document


def _document_name(metadata: NodeMetadata) -> str:
    return ZARR_JSON if metadata.zarr_format == 3 else ("/".join(metadata.documents()))


def _difference(member: dict[str, Any], copy: dict[str, Any]) -> str:
    fields = sorted(name for name in set(member) | set(copy) if member.get(name) != copy.get(name))
    return "; ".join(
        f"{name}: {_shown(member.get(name))} in its {{document}}, {_shown(copy.get(name))} in the consolidated metadata"
        for name in fields[:3]
    ) + (f"; and {len(fields) - 3} more fields" if len(fields) > 3 else "")


def _shown(value: Any) -> str:
    text = "absent" if value is None else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def parse_copies(group_metadata: Any, v2_document: bytes | None, group: str) -> dict[str, NodeMetadata | Exception]:
    """The consolidated copies of the group at ``group`` by relative path, parsed (an exception
    for a copy that does not parse): v3 from its metadata, v2 from its ``.zmetadata`` bytes."""
    if v2_document is not None:  # the formats' own parsers of consolidated entries (FORMATS)
        entries = ConsolidatedMetadataV2.from_json(v2_document, join_key(group, ZMETADATA)).metadata
        node_format = FORMATS[2]
    else:
        consolidated = getattr(group_metadata, "consolidated_metadata", None)
        entries = consolidated.metadata if consolidated is not None else {}
        node_format = FORMATS[3]
    copies: dict[str, NodeMetadata | Exception] = {}
    for relative, entry in entries.items():
        try:
            copies[relative] = node_format.parse_consolidated(entry, join_key(group, relative))
        except MetadataError as error:
            copies[relative] = error
    return copies
