"""Consolidated metadata that stays true when members change.

A group's consolidated metadata copies the documents of every node below it, so a reader opens
the whole hierarchy with one request: for Zarr v3 the ``consolidated_metadata`` inside the group's
``zarr.json`` (zarr-python 3's inline form), for Zarr v2 the ``.zmetadata`` beside its
``.zgroup``. A copy is stale as soon as a member's own document changes -- and a reader of the
copy would silently see the old shape, attributes or members. So every metadata write zarrx makes
updates each consolidated copy of the node it changes (:func:`write_metadata` for an existing
node's attributes, ``resize`` and ``append``; :func:`update_copies` after creating, overwriting or
deleting nodes):

1. **Where the copies are.** A node opened by its path knows nothing of its ancestors, and any of
   them may hold a copy (the root, and any group consolidated on its own). So the ancestors'
   documents are read, in one batch, when a node's metadata is written: v3 the ``zarr.json`` of
   each ancestor, v2 the ``.zmetadata`` of each ancestor (and of a group itself, whose own
   ``.zattrs`` is copied there). Creating a node reads the ancestors' documents anyway (to find
   the groups to add above it), so creation costs no extra request. Chunk writes never touch
   metadata and cost nothing; a hierarchy without consolidated metadata pays one batched read
   of small documents per metadata write.
2. **Order.** A new node's own documents are written first, then each consolidated document
   that holds a copy, rewritten whole (one atomic ``set`` each) with the copy replaced, added or
   removed and everything else kept as it was. A failure of that second step is a
   :class:`~zarrx.errors.StoreError` saying which document is stale and how to refresh it. An
   existing node's copies are written *before* its own documents (:func:`write_metadata`,
   :func:`write_many`): a copy may run ahead of the member, never behind it. Writers (an append,
   a resize) read the member's own documents; so a process killed in between leaves a writer
   looking at the older shape -- running the append again rewrites the same rows -- and never
   one past what a reader of the copy saw (which would append twice).
3. **What is stored now.** A metadata write of an existing node is a read-modify-write of its
   own documents as stored now (read in the same batch as the ancestors'): an attribute change
   keeps the shape and a resize keeps the attributes another process may have written, and a v3
   group keeps the ``consolidated_metadata`` its ``zarr.json`` holds now, not the one it was
   opened with, which member writes may have updated since.

Consolidated documents are JSON edited in place: unknown fields and other writers' entries stay.
A writer of many nodes wraps its writes in :func:`batched_updates`, which rewrites each
consolidated document once at the end instead of once per node (the xarray writer does).

**Other writers.** Every metadata update (creating or deleting a node, attributes, ``resize`` and
``append``, the consolidated copies, :func:`zarrx.consolidate_metadata`) is a read-modify-write of
shared documents, so it runs under :func:`metadata_lock`: within a process a lock per store, and
across processes the store's own lock where it offers one (``locks_metadata``: an advisory file
lock on a local folder, :mod:`zarrx.storage.metadata_updates`). A store offering conditional
writes instead (``conditional_writes``: S3's ETag preconditions) has each consolidated document
rewritten only over the version it was read at, read again and retried when another process
wrote it first. On a store offering neither, two processes changing metadata of one hierarchy at
the same moment can each rewrite a consolidated document from the version before the other's
change, leaving it stale: :func:`disagreements` finds such copies (``zarrx verify`` names every
member a copy misses) and :func:`zarrx.consolidate_metadata` rewrites them.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from typing import Any, Callable, Iterable, Iterator, Mapping

from zarrx.errors import MetadataError, StoreError
from zarrx.metadata.node import decode_json, encode_json, parse_node_metadata
from zarrx.metadata.protocol import NodeMetadata
from zarrx.metadata.v2 import ZARRAY, ZATTRS, ZGROUP, ZMETADATA
from zarrx.nodes.consolidated_check import disagreements, find_stale, parse_copies
from zarrx.nodes.hierarchy import ZARR_JSON, read_node, write_node
from zarrx.storage.metadata_updates import ATTEMPTS, update_conditionally
from zarrx.storage.paths import join_key
from zarrx.storage.store import Store

__all__ = [
    "write_metadata", "write_many", "update_copies", "copy_keys", "find_stale", "disagreements", "parse_copies", "Change",
    "metadata_lock", "batched_updates", "needs_conditional_writes", "ATTEMPTS",
]  # fmt: skip

#: a change to one node: its path, its new metadata (None: it and everything below it were
#: deleted) and its Zarr format (2 or 3; which consolidated documents may copy it)
Change = tuple[str, "NodeMetadata | None", int]

#: the document that may hold consolidated copies, by Zarr format
_DOCUMENT = {3: ZARR_JSON, 2: ZMETADATA}
#: locks serializing the metadata writes of one store within this process, picked by the store's
#: location (a fixed pool: two stores sharing a lock only wait for each other)
_LOCKS = tuple(threading.RLock() for _ in range(64))


def _store_key(store: Store) -> Any:
    """What identifies ``store``'s data in this process: its location, or the object itself."""
    try:
        hash(store.location)
    except TypeError:  # an unhashable location
        return ("object", id(store))
    return store.location


#: how deep this process is inside metadata_lock, by _store_key (changed only under the lock)
_DEPTH: dict[Any, int] = {}


@contextlib.contextmanager
def metadata_lock(store: Store) -> Iterator[None]:
    """A ``with`` block serializing the metadata updates of ``store``'s hierarchy: against the other
    threads of this process, and against other processes where the store has a lock
    (``store.locks_metadata``). Re-entrant: an update inside another takes the store's lock once.

    Examples
    --------
    >>> from zarrx.storage import MemoryStore
    >>> store = MemoryStore()
    >>> with metadata_lock(store):
    ...     with metadata_lock(store):  # nested blocks wait for nothing
    ...         store.set("zarr.json", b"{}")
    """
    key = _store_key(store)
    with _LOCKS[hash(key) % len(_LOCKS)]:
        depth = _DEPTH.get(key, 0)
        _DEPTH[key] = depth + 1
        try:
            if depth:
                yield
            else:
                with store.lock_metadata():
                    yield
        finally:
            if depth:
                _DEPTH[key] = depth
            else:
                del _DEPTH[key]


#: the changes recorded for each store inside :func:`batched_updates`, by _store_key
_BATCHES: dict[Any, list[Change]] = {}
_BATCHES_GUARD = threading.Lock()


@contextlib.contextmanager
def batched_updates(store: Store) -> Iterator[None]:
    """Bring the consolidated copies up to date once, at the end, for all the metadata writes to
    ``store`` inside the block (also when it fails half-way).

    A writer of many nodes -- the xarray writer appending to every variable of a dataset -- would
    otherwise rewrite each consolidated document once per node: quadratic in the members. Inside
    the block the documents are stale; nested blocks update at the outermost end.

    Examples
    --------
    >>> import zarrx
    >>> root = zarrx.create_group({})
    >>> arrays = [root.create_array(f"v{i}", shape=(1,), dtype="int8") for i in range(3)]
    >>> _ = zarrx.consolidate_metadata(root.store)
    >>> with batched_updates(root.store):
    ...     for array in arrays:
    ...         _ = array.append([1])
    >>> [zarrx.open_group(root.store)[f"v{i}"].shape for i in range(3)]
    [(2,), (2,), (2,)]
    """
    key = _store_key(store)
    with _BATCHES_GUARD:
        outermost = key not in _BATCHES
        if outermost:
            _BATCHES[key] = []
    try:
        yield
    finally:
        if outermost:
            with _BATCHES_GUARD:
                changes = _BATCHES.pop(key)
            if changes:
                update_copies(store, changes)


def _batching(store: Store) -> bool:
    """Whether metadata writes to ``store`` are inside a :func:`batched_updates` block."""
    with _BATCHES_GUARD:
        return _store_key(store) in _BATCHES


def _recorded(store: Store, changes: list[Change]) -> bool:
    """Whether ``changes`` were recorded for the end of a :func:`batched_updates` block."""
    with _BATCHES_GUARD:
        pending = _BATCHES.get(_store_key(store))
        if pending is not None:
            pending.extend(changes)
    return pending is not None


def _ancestors(path: str) -> list[str]:
    """The groups above ``path``: ``""`` first, its parent last."""
    parts = path.split("/")[:-1] if path else []
    return ["", *("/".join(parts[: i + 1]) for i in range(len(parts)))] if path else []


def _relative(path: str, group: str) -> str:
    return path[len(group) + 1 :] if group else path


def copy_keys(path: str, zarr_format: int, is_group: bool) -> list[str]:
    """The keys of the documents that may hold a consolidated copy of the node at ``path``:
    each ancestor's ``zarr.json`` (v3) or ``.zmetadata`` (v2, and a group's own, which copies
    its ``.zattrs``).

    Examples
    --------
    >>> copy_keys("a/b/x", 3, is_group=False)
    ['zarr.json', 'a/zarr.json', 'a/b/zarr.json']
    >>> copy_keys("a", 2, is_group=True)
    ['.zmetadata', 'a/.zmetadata']
    """
    document = _DOCUMENT.get(zarr_format)
    if document is None:
        return []
    groups = _ancestors(path) + ([path] if is_group and zarr_format == 2 else [])
    return [join_key(group, document) for group in groups]


# -- writing ------------------------------------------------------------------------------------
def write_metadata(
    store: Store,
    path: str,
    metadata: NodeMetadata,
    change: Callable[[NodeMetadata], NodeMetadata] | None = None,
    *,
    now: bool = False,
) -> NodeMetadata:
    """Write the documents of the existing node at ``path`` and update its consolidated copies;
    returns the metadata written.

    ``change`` makes the write a read-modify-write of what is stored *now*, under
    :func:`metadata_lock` (or as a conditional write): given the node's metadata as stored, it
    returns what to write -- so an attribute set keeps the shape another process stored meanwhile,
    and a resize keeps its attributes. Without it ``metadata`` is written as it is (a v3 group
    keeping the ``consolidated_metadata`` stored now).

    Examples
    --------
    >>> import zarrx
    >>> root = zarrx.create_group({})
    >>> x = root.create_array("x", shape=(2,), dtype="int8")
    >>> _ = zarrx.consolidate_metadata(root.store)
    >>> _ = write_metadata(root.store, "x", x.metadata, lambda stored: stored.evolve(attributes={"units": "m"}))
    >>> zarrx.open_group(root.store)["x"].attrs["units"]  # the consolidated copy
    'm'
    """
    zarr_format = metadata.zarr_format
    if change is None:
        change = (lambda stored: metadata.evolve(consolidated_metadata=getattr(stored, "consolidated_metadata", None))) \
            if zarr_format == 3 and metadata.node_type == "group" else (lambda stored: metadata)  # fmt: skip
    keys = [] if _batching(store) and not now else copy_keys(path, zarr_format, metadata.node_type == "group")
    own = join_key(path, ZARR_JSON)
    with metadata_lock(store):
        if zarr_format == 3 and needs_conditional_writes(store):
            return _write_conditionally(store, path, metadata, change, now)
        documents = store.get_many([*keys, own] if zarr_format == 3 else keys)
        raw = documents.pop(own, None)
        stored = _parsed(store, own, raw) if raw is not None else read_node(store, path, zarr_format=zarr_format)
        metadata = change(metadata if stored is None else stored)
        _copies_first(store, [(path, metadata, zarr_format)], documents, now=now)
        written = write_node(store, path, metadata)
        if own in written:
            _remember(store, own, written[own], metadata)
    return metadata


#: per store (weakly), the ``zarr.json`` documents this process wrote last and the metadata they
#: hold: a read-modify-write that finds its own last write stored (appends: every time) skips
#: parsing it again
_WRITTEN: "weakref.WeakKeyDictionary[Store, dict[str, tuple[bytes, NodeMetadata]]]" = weakref.WeakKeyDictionary()
_WRITTEN_KEPT = 64


def _parsed(store: Store, key: str, raw: bytes) -> NodeMetadata:
    """The metadata in ``raw``, the document stored at ``key``."""
    written = _WRITTEN.get(store, {}).get(key)
    if written is not None and written[0] == raw:
        return written[1]
    return parse_node_metadata(raw, key)


def _remember(store: Store, key: str, raw: bytes, metadata: NodeMetadata) -> None:
    try:
        kept = _WRITTEN.setdefault(store, {})
    except TypeError:  # a store that cannot be referenced weakly
        return
    if len(kept) >= _WRITTEN_KEPT and key not in kept:
        kept.clear()
    kept[key] = (bytes(raw), metadata)


def write_many(store: Store, nodes: list[tuple[str, NodeMetadata]]) -> None:
    """Write the shapes (and the rest but the attributes) of several existing arrays: their
    consolidated copies first, each document rewritten once for all of them (also inside
    :func:`batched_updates`), then each array's own documents -- so a reader of the copies sees
    every array changed, or none. The attributes stored now are kept.

    Examples
    --------
    >>> import zarrx
    >>> root = zarrx.create_group({})
    >>> x, y = (root.create_array(name, shape=(2,), dtype="int8") for name in "xy")
    >>> _ = zarrx.consolidate_metadata(root.store)
    >>> write_many(root.store, [("x", x.metadata.evolve(shape=(4,))), ("y", y.metadata.evolve(shape=(4,)))])
    >>> [zarrx.open_group(root.store)[name].shape for name in "xy"]
    [(4,), (4,)]
    """
    with metadata_lock(store):
        own = {path: join_key(path, ZARR_JSON) for path, metadata in nodes if metadata.zarr_format == 3}
        documents = store.get_many(list(own.values()))  # one batch for v3 (thousands of variables)
        kept = []
        for path, metadata in nodes:
            raw = documents.get(own.get(path, ""))
            stored = parse_node_metadata(raw, own[path]) if raw is not None else read_node(
                store, path, zarr_format=metadata.zarr_format
            )  # fmt: skip
            kept.append((path, metadata if stored is None else metadata.evolve(attributes=stored.attributes)))
        _copies_first(store, [(path, metadata, metadata.zarr_format) for path, metadata in kept], None, now=True)
        for path, metadata in kept:
            write_node(store, path, metadata)


def _write_conditionally(
    store: Store, path: str, metadata: NodeMetadata, change: Callable[[NodeMetadata], NodeMetadata], now: bool
) -> NodeMetadata:
    """:func:`write_metadata` on a store with conditional writes: the node's ``zarr.json`` is read
    with its version, changed, its copies updated, and written only over that version; all again
    when another writer came first."""
    own = join_key(path, ZARR_JSON)
    written: list[NodeMetadata] = []  # what the attempt that was stored made

    def changed(raw: bytes | None) -> bytes:
        updated = change(metadata if raw is None else parse_node_metadata(raw, own))
        _copies_first(store, [(path, updated, 3)], None, now=now)
        written[:] = [updated]
        return updated.documents()[ZARR_JSON]

    update_conditionally(store, own, changed)
    return written[0]


def _copies_first(
    store: Store, changes: list[Change], documents: Mapping[str, bytes | None] | None, now: bool = False
) -> None:
    """Update the consolidated copies of existing nodes before their own documents; a failure says
    that the nodes' own metadata is unchanged."""
    try:
        update_copies(store, changes, documents, current=documents is not None, now=now)
    except StoreError as error:
        nodes = ", ".join(repr("/" + path) for path, _, _ in changes)
        raise StoreError(
            f"the metadata of {nodes} was not changed: its consolidated copies are written first, and "
            f"{str(error).partition('but the ')[2] or error}"
        ) from error


def needs_conditional_writes(store: Store) -> bool:
    """Whether updates of shared documents of ``store`` need conditional writes: other processes
    may write them, and the store has no lock but conditional writes."""
    return store.conditional_writes and not store.locks_metadata and not store.process_local


def update_copies(
    store: Store,
    changes: Iterable[Change],
    documents: Mapping[str, bytes | None] | None = None,
    *,
    current: bool = False,
    now: bool = False,
) -> None:
    """Bring every consolidated copy of the changed nodes up to date (their own documents are
    written already).

    ``documents`` are the documents that may hold copies, read before (by key): those that do hold
    copies are read again under :func:`metadata_lock` unless ``current`` says they were read under
    it, and the keys missing from them are read in the same batch. A hierarchy without
    consolidated metadata so needs no read at all when ``documents`` has every key. Inside
    :func:`batched_updates` the copies are updated at the end of the block, unless ``now``.
    """
    changes = list(changes)
    if not now and _recorded(store, changes):
        return  # brought up to date at the end of the batch
    keys = list(dict.fromkeys(key for path, metadata, zarr_format in changes for key in copy_keys(
        path, zarr_format, metadata is not None and metadata.node_type == "group"
    )))  # fmt: skip
    with metadata_lock(store):
        found = dict(documents or {})
        stale = [] if current else [key for key in keys if found.get(key) and _editable(found[key], key) is not None]
        missing = [key for key in keys if key not in found or key in stale]
        if missing:
            found.update(store.get_many(missing))
        if needs_conditional_writes(store):
            # the documents holding copies now, each rewritten only over the version it is read at
            for key in [key for key in keys if found.get(key) and _editable(found[key], key) is not None]:
                update_conditionally(store, key, lambda raw, key=key: _with_changes(raw, key, changes))
            return
        _write_copies(store, changes, keys, found)


def _with_changes(raw: bytes | None, key: str, changes: list[Change]) -> bytes | None:
    """The consolidated document ``raw`` at ``key`` with ``changes`` applied; None when unchanged."""
    document = None if raw is None else _editable(raw, key)
    return encode_json(document) if document is not None and _apply(document, key, changes) else None


def _write_copies(store: Store, changes: list[Change], keys: list[str], found: Mapping[str, bytes | None]) -> None:
    """Apply ``changes`` to the consolidated documents ``found`` under ``keys`` and write those changed."""
    updated = {}
    for key in keys:
        raw = found.get(key)
        if raw is None:
            continue
        document = _editable(raw, key)
        if document is not None and _apply(document, key, changes):
            updated[key] = encode_json(document)
    if not updated:
        return
    try:
        store.set_many(updated)
    except StoreError as error:
        groups = ", ".join(repr("/" + key.rpartition("/")[0]) for key in updated)
        raise StoreError(
            f"the metadata of {', '.join(repr('/' + path) for path, _, _ in changes)} was written, but the "
            f"consolidated metadata of {groups} could not be updated and is stale until "
            f"zarrx.consolidate_metadata runs on it (zarrx verify reports it): {error}"
        ) from error


def _editable(raw: bytes, key: str) -> dict[str, Any] | None:
    """The consolidated document at ``key`` as JSON to edit, or None when it holds no copies
    (a group without consolidated metadata) or cannot be read (left for verify to report)."""
    try:
        document = decode_json(raw, key)
    except MetadataError:
        return None
    entries = _entries(document, key)
    return document if isinstance(entries, dict) else None


def _entries(document: dict[str, Any], key: str) -> Any:
    if key.endswith(ZMETADATA):
        return document.get("metadata")
    consolidated = document.get("consolidated_metadata")
    return consolidated.get("metadata") if isinstance(consolidated, dict) else None


def _apply(document: dict[str, Any], key: str, changes: list[Change]) -> bool:
    """Apply the changes below the group of ``key`` to its copies; whether anything changed."""
    group = key.rpartition("/")[0]
    v2 = key.endswith(ZMETADATA)
    entries = _entries(document, key)
    before = dict(entries)
    for path, metadata, zarr_format in changes:
        inside = path == group or (path.startswith(group + "/") if group else bool(path))
        if not inside or zarr_format != (2 if v2 else 3):
            continue
        relative = _relative(path, group)
        if metadata is None:
            _remove(entries, relative, v2)
        elif v2:
            _remove(entries, relative, v2, documents_only=True)
            for name, raw in metadata.documents().items():
                entries[join_key(relative, name)] = decode_json(raw, join_key(path, name))
        elif relative:
            copy = metadata.to_json()
            copy.pop("consolidated_metadata", None)  # a member's own copies are not copied
            entries[relative] = copy
    return entries != before


def _remove(entries: dict[str, Any], relative: str, v2: bool, documents_only: bool = False) -> None:
    """Drop the copies of the node ``relative`` (and, unless ``documents_only``, of everything below it)."""
    if not relative:
        return  # a group's own documents in its .zmetadata: it was deleted with them
    names = [join_key(relative, name) for name in (ZARRAY, ZGROUP, ZATTRS)] if v2 else [relative]
    for name in names:
        entries.pop(name, None)
    if not documents_only:
        below = relative + "/"
        for name in [name for name in entries if name.startswith(below)]:
            del entries[name]
