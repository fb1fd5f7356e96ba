"""Finding nodes in a store, whatever format they are stored in.

A node at path ``P`` is one of:

* Zarr v3: ``P/zarr.json``;
* Zarr v2: ``P/.zarray`` or ``P/.zgroup``, with ``P/.zattrs`` (and, for a consolidated
  group, ``P/.zmetadata``);
* the 2022 draft layout (read-only): a root ``zarr.json`` whose ``zarr_format`` is a URI,
  and ``meta/root/P.array.json`` / ``.group.json`` (or nothing: an implicit group).

:func:`read_node` finds the node at a path. With ``zarr_format=None`` it reads
``P/zarr.json`` first, so opening a v3 node -- consolidated or not -- costs exactly the one
request it cost before v2 support; when there is none it reads ``.zarray``, ``.zgroup``,
``.zattrs`` (and ``.zmetadata`` when consolidated metadata may be used; and, below the root,
the root's ``zarr.json``, the entry point of a draft hierarchy) in one more batch. (Asking
for the v2 documents in the first batch too would save v2 a round trip but add requests to
every v3 open; v3 is the format zarrx is for.) ``zarr_format=2`` reads only the v2 batch,
``zarr_format=3`` only ``zarr.json``. When both formats are present
(after an in-place migration), v3 wins, as in zarr-python.

Once a group is open its format is known, so its children are found with one listing and one
batched read of their documents (:meth:`NodeFormat.list_children`), and one child with one
batch (:meth:`NodeFormat.read_child`). The children of many groups -- a level of a hierarchy
being walked -- take two rounds whatever their number (:func:`list_children_many`): every
listing at once, then one batch of every child's documents; a walk that reads each group as
soon as it is found, beside the others, runs on :func:`expand_requests`. Each format is a
:class:`NodeFormat`; :func:`format_of` picks the one a node's metadata belongs to.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence, TypeVar

from zarrx.errors import MetadataError, StoreError
from zarrx.metadata.draft import (
    DRAFT_FORMAT,
    DraftGroupMetadata,
    DraftHierarchy,
    is_draft_entry_point,
    parse_draft_node,
)
from zarrx.metadata.node import ZARR_JSON, decode_json, parse_node_metadata
from zarrx.metadata.protocol import NodeMetadata
from zarrx.metadata.v2 import ZARRAY, ZATTRS, ZGROUP, ZMETADATA, ConsolidatedMetadataV2, parse_v2_node
from zarrx.storage.paths import is_node_name, join_key
from zarrx.storage.store import Store

__all__ = [
    "read_node", "write_node", "format_of", "NodeFormat", "ZARR_JSON", "node_keys", "list_children_many", "map_requests",
    "expand_requests",
]  # fmt: skip

T = TypeVar("T")

_V2_DOCUMENTS = (ZARRAY, ZGROUP, ZATTRS)
#: most store calls (listings) :func:`map_requests` makes side by side
MAX_CONCURRENT_CALLS = 64
_FORMATS = (None, 2, 3)


class NodeFormat:
    """Where one format keeps the metadata of a node and of its children."""

    def keys(self, path: str) -> list[str]:
        """The keys whose presence makes a node at ``path`` (for messages)."""
        raise NotImplementedError

    def read_child(self, store: Store, path: str) -> NodeMetadata | None:
        """The metadata of the node at ``path``, or None."""
        raise NotImplementedError

    def list_children(self, store: Store, path: str, listed: Sequence[str] | None = None) -> dict[str, NodeMetadata]:
        """Metadata of the direct children of the group at ``path``, by name (``listed``: what
        ``store.list_dir`` gave for the group's prefix, when that was done already; formats
        whose children are not listed there ignore it)."""
        keys = self.child_keys(store, path, listed)
        assert keys is not None  # formats that cannot say which keys override this
        return self.parse_children(store.get_many([key for names in keys.values() for key in names]), keys, path)

    def child_keys(self, store: Store, path: str, listed: Sequence[str] | None = None) -> dict[str, list[str]] | None:
        """The documents to read for each child of the group at ``path`` (one listing, unless
        ``listed`` gives it), or None when the format cannot say before reading (then
        :meth:`list_children` is used)."""
        return None

    def parse_children(
        self, documents: Mapping[str, bytes | None], keys: Mapping[str, list[str]], path: str
    ) -> dict[str, NodeMetadata]:
        """The children's metadata from their documents (read for :meth:`child_keys`)."""
        raise NotImplementedError

    def parse_consolidated(self, entry: Any, path: str) -> NodeMetadata:
        """A child's metadata from an entry of its ancestor's consolidated metadata."""
        raise NotImplementedError


class V3Format(NodeFormat):
    def keys(self, path: str) -> list[str]:
        return [join_key(path, ZARR_JSON)]

    def read_child(self, store: Store, path: str) -> NodeMetadata | None:
        key = join_key(path, ZARR_JSON)
        raw = store.get(key)
        return None if raw is None else parse_node_metadata(raw, key)

    def child_keys(self, store: Store, path: str, listed: Sequence[str] | None = None) -> dict[str, list[str]]:
        listed = store.list_dir(join_key(path, "")) if listed is None else listed
        if ZARR_JSON not in listed:
            # the group's own document is in its folder: a listing without it is not one (a web
            # server answering 404 for folder pages, a listing cut short), and its "no children"
            # would be a silent wrong answer
            raise StoreError(
                f"cannot list the children of the group {path or '/'!r} in {store!r}: the listing of its "
                f"folder does not show its own {ZARR_JSON} (a web server without folder pages, or one "
                "answering 404 for them?); open the hierarchy through its consolidated metadata"
            )
        # names that cannot be nodes are not children, nor folders without a zarr.json
        names = sorted(name for name in listed if name != ZARR_JSON and is_node_name(name))
        return {name: [join_key(path, f"{name}/{ZARR_JSON}")] for name in names}

    def parse_children(
        self, documents: Mapping[str, bytes | None], keys: Mapping[str, list[str]], path: str
    ) -> dict[str, NodeMetadata]:
        return {
            name: parse_node_metadata(documents[key], key)
            for name, (key,) in keys.items()
            if documents.get(key) is not None
        }

    def parse_consolidated(self, entry: Any, path: str) -> NodeMetadata:
        return parse_node_metadata(entry, join_key(path, ZARR_JSON))


class V2Format(NodeFormat):
    def keys(self, path: str) -> list[str]:
        return [join_key(path, ZARRAY), join_key(path, ZGROUP)]

    def read_child(self, store: Store, path: str) -> NodeMetadata | None:
        keys = {name: join_key(path, name) for name in _V2_DOCUMENTS}
        documents = store.get_many(list(keys.values()))
        return parse_v2_node({name: documents.get(key) for name, key in keys.items()}, path)

    def child_keys(self, store: Store, path: str, listed: Sequence[str] | None = None) -> dict[str, list[str]]:
        listed = store.list_dir(join_key(path, "")) if listed is None else listed
        names = sorted(
            name for name in listed
            if name not in (*_V2_DOCUMENTS, ZMETADATA, ZARR_JSON) and is_node_name(name)
        )  # fmt: skip
        return {name: [join_key(path, f"{name}/{document}") for document in _V2_DOCUMENTS] for name in names}

    def parse_children(
        self, documents: Mapping[str, bytes | None], keys: Mapping[str, list[str]], path: str
    ) -> dict[str, NodeMetadata]:
        children = {}
        for name in keys:
            child = join_key(path, name)
            metadata = parse_v2_node({d: documents.get(join_key(child, d)) for d in _V2_DOCUMENTS}, child)
            if metadata is not None:
                children[name] = metadata
        return children

    def parse_consolidated(self, entry: Any, path: str) -> NodeMetadata:
        metadata = parse_v2_node(entry, path)
        if metadata is None:
            raise MetadataError(f"{join_key(path, ZARRAY)}: the consolidated metadata has no .zarray or .zgroup here")
        return metadata


@dataclass(frozen=True)
class DraftFormat(NodeFormat):
    hierarchy: DraftHierarchy

    def keys(self, path: str) -> list[str]:
        return [self.hierarchy.node_key(path, "array"), self.hierarchy.node_key(path, "group")]

    def read_child(self, store: Store, path: str) -> NodeMetadata | None:
        array_key, group_key = self.keys(path)
        documents = store.get_many([array_key, group_key])
        metadata = parse_draft_node(documents.get(array_key), documents.get(group_key), self.hierarchy, path)
        if metadata is None and (not path or store.list_dir(self.hierarchy.children_prefix(path))):
            return DraftGroupMetadata(explicit=False, hierarchy=self.hierarchy)  # implicit
        return metadata

    def list_children(self, store: Store, path: str, listed: Sequence[str] | None = None) -> dict[str, NodeMetadata]:
        suffix = self.hierarchy.metadata_key_suffix
        documented: dict[str, str] = {}  # name -> "array" or "group"
        implicit: set[str] = set()
        for entry in store.list_dir(self.hierarchy.children_prefix(path)):
            for kind in ("array", "group"):
                ending = f".{kind}{suffix}"
                if entry.endswith(ending) and len(entry) > len(ending):
                    documented.setdefault(entry[: -len(ending)], kind)
                    break
            else:
                implicit.add(entry)
        children: dict[str, NodeMetadata] = {}
        names = sorted(name for name in {*documented, *implicit} if is_node_name(name))
        keys = {
            name: self.hierarchy.node_key(join_key(path, name), documented[name]) for name in names if name in documented
        }
        documents = store.get_many(list(keys.values()))
        for name in names:
            child = join_key(path, name)
            key = keys.get(name)
            raw = documents.get(key) if key is not None else None
            metadata = None
            if raw is not None:
                is_array = documented[name] == "array"
                metadata = parse_draft_node(raw if is_array else None, None if is_array else raw, self.hierarchy, child)
            children[name] = metadata or DraftGroupMetadata(explicit=False, hierarchy=self.hierarchy)
        return children

    def parse_consolidated(self, entry: Any, path: str) -> NodeMetadata:
        raise MetadataError("the 2022 draft layout has no consolidated metadata")


FORMATS: dict[int, NodeFormat] = {3: V3Format(), 2: V2Format()}


def list_children_many(store: Store, groups: Sequence[tuple[str, NodeFormat]]) -> dict[str, dict[str, NodeMetadata]]:
    """The children of several groups (``(path, format)`` pairs) by group path, in two rounds:
    every group listed at once (concurrently on a remote store), then every child's documents in
    one batch -- not a listing and a batch per group. Formats that cannot say which documents to
    read before reading them (the draft layout) are listed one group at a time."""
    paths = [path for path, _ in groups]
    formats = dict(groups)
    listed = map_requests(lambda path: formats[path].child_keys(store, path), paths, store)
    keys = [key for path in paths if listed[path] is not None for names in listed[path].values() for key in names]
    documents = store.get_many(keys) if keys else {}
    return {
        path: formats[path].list_children(store, path)
        if listed[path] is None
        else formats[path].parse_children(documents, listed[path], path)
        for path in paths
    }


def map_requests(function: Callable[[str], T], items: Sequence[str], store: Store) -> dict[str, T]:
    """``{item: function(item)}``, the calls made side by side when each is a request to a remote
    store (one round trip for all), one after another on a local one."""
    if len(items) < 2 or store.reads_are_local:
        return {item: function(item) for item in items}
    workers = min(len(items), MAX_CONCURRENT_CALLS)
    with ThreadPoolExecutor(workers, thread_name_prefix="zarrx-requests") as pool:
        return dict(zip(items, pool.map(function, items)))


def expand_requests(function: Callable[[T], Iterable[T]], items: Iterable[T]) -> None:
    """Call ``function`` on each of ``items`` and on every item those calls yield, and so on until
    none is yielded, each call on a thread of its own as soon as its item is yielded (up to
    :data:`MAX_CONCURRENT_CALLS` at once): for calls that make requests to a remote store. The
    first error raised is raised once the calls in flight have ended; no call starts after it."""
    errors: list[BaseException] = []
    pending = 0
    idle = threading.Condition()

    def run(item: T) -> None:
        nonlocal pending
        try:
            if not errors:
                for found in function(item):
                    submit(found)
                    if errors:
                        break
        except BaseException as error:  # noqa: BLE001 (raised by the caller below)
            errors.append(error)
        finally:
            with idle:
                pending -= 1
                idle.notify_all()

    def submit(item: T) -> None:
        nonlocal pending
        with idle:
            pending += 1
        pool.submit(run, item)

    pool = ThreadPoolExecutor(MAX_CONCURRENT_CALLS, thread_name_prefix="zarrx-requests")
    try:
        for item in items:
            submit(item)
        with idle:
            idle.wait_for(lambda: pending == 0)
    except BaseException as error:  # an interrupt: the calls in flight yield nothing more
        errors.append(error)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    if errors:
        raise errors[0]


def format_of(metadata: NodeMetadata) -> NodeFormat:
    """The layout the node described by ``metadata`` (and its children) is stored in."""
    if metadata.zarr_format == DRAFT_FORMAT:
        return DraftFormat(metadata.hierarchy)
    return FORMATS[metadata.zarr_format]


def node_keys(path: str, zarr_format: int | None) -> str:
    """The keys looked for at ``path``, for "not found" messages."""
    formats = [3, 2] if zarr_format is None else [zarr_format]
    return " or ".join(repr(key) for fmt in formats for key in FORMATS[fmt].keys(path))


def write_node(store: Store, path: str, metadata: NodeMetadata) -> dict[str, bytes]:
    """Store the documents of ``metadata`` (any format) for the node at ``path``: one ``set``
    for a single document, one batch for several (v2's ``.zarray`` and ``.zattrs``); returns
    them by key."""
    documents = {join_key(path, name): data for name, data in metadata.documents().items()}
    if len(documents) == 1:
        store.set(*next(iter(documents.items())))
    else:
        store.set_many(documents)
    return documents


def read_node(
    store: Store, path: str, *, zarr_format: int | None = None, consolidated: bool = False
) -> NodeMetadata | None:
    """The metadata of the node at ``path`` in any format (or ``zarr_format`` only), or None.

    With ``consolidated`` a v2 group's ``.zmetadata`` is read in the same batch and attached
    as its ``consolidated_metadata``.
    """
    if zarr_format not in _FORMATS:
        raise MetadataError(f"zarr_format: expected 2, 3 or None (detect), found {zarr_format!r}")
    if zarr_format == 2:
        return _read_v2(store, path, consolidated)[0]
    key = join_key(path, ZARR_JSON)
    raw = store.get(key)
    if raw is not None:
        if path:
            return parse_node_metadata(raw, key)
        try:  # decoded once: a consolidated root document can be large
            document = decode_json(raw, key)
        except MetadataError:
            return parse_node_metadata(raw, key)  # reports what is wrong with it
        if not is_draft_entry_point(document):
            return parse_node_metadata(document, key)
        if zarr_format == 3:
            raise MetadataError(
                f"{ZARR_JSON}: the hierarchy is stored in the 2022 draft layout of Zarr v3, not in Zarr "
                "format 3; open it with zarr_format=None (it is read-only) or convert it with zarrx.convert"
            )
        return _read_draft(store, path, raw)
    if zarr_format == 3:
        return None
    # no zarr.json: v2, or a node below the root of a draft hierarchy (whose entry point is the
    # root's zarr.json, read in the same batch only now, as it may be large and is rarely needed)
    metadata, root = _read_v2(store, path, consolidated, with_root=bool(path))
    if metadata is None and root is not None and _is_draft(root):
        return _read_draft(store, path, root)
    return metadata


def _read_draft(store: Store, path: str, entry_point: bytes) -> NodeMetadata | None:
    hierarchy = DraftHierarchy.from_json(decode_json(entry_point, ZARR_JSON), ZARR_JSON)
    return DraftFormat(hierarchy).read_child(store, path)


def _is_draft(raw: bytes) -> bool:
    try:
        return is_draft_entry_point(decode_json(raw, ZARR_JSON))
    except MetadataError:
        return False  # not JSON: parse_node_metadata reports it


def _read_v2(
    store: Store, path: str, consolidated: bool, with_root: bool = False
) -> tuple[NodeMetadata | None, bytes | None]:
    """The v2 node at ``path`` (None when absent) and, ``with_root``, the root's ``zarr.json``."""
    names = [*_V2_DOCUMENTS, *([ZMETADATA] if consolidated else [])]
    keys = {name: join_key(path, name) for name in names}
    documents = store.get_many([*keys.values(), *([ZARR_JSON] if with_root else [])])
    found: Mapping[str, Any] = {name: documents.get(key) for name, key in keys.items()}
    metadata = parse_v2_node(found, path)
    if metadata is not None and metadata.node_type == "group" and found.get(ZMETADATA) is not None:
        metadata = metadata.evolve(consolidated_metadata=ConsolidatedMetadataV2.from_json(found[ZMETADATA], keys[ZMETADATA]))
    return metadata, documents.get(ZARR_JSON) if with_root else None
