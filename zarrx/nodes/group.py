"""The user-facing Zarr group.

A :class:`Group` is a node whose children are arrays and groups. Children are
found by listing the group's prefix and reading every candidate's metadata in
one concurrent batch (a walk of many groups -- :meth:`Group.members` with ``max_depth``,
:meth:`Group.descendants` -- reads each group as soon as it is found, beside the others)
(``zarr.json`` for v3, ``.zarray``/``.zgroup``/``.zattrs`` for
v2, ``meta/root/…`` documents for the 2022 draft layout; see
:mod:`zarrx.nodes.hierarchy`) -- or, when the group was opened from consolidated
metadata, from that document alone without touching the store. Children are in
the group's format; groups and arrays created below a v2 group are v2.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any, Callable, Iterator

import numpy as np

from zarrx.errors import ContainsArrayError, InvalidPathError, NodeNotFoundError
from zarrx.metadata.protocol import GroupMetadataLike, NodeMetadata
from zarrx.nodes import conveniences
from zarrx.nodes.array import Array
from zarrx.nodes.consolidated import update_copies
from zarrx.nodes.create import new_array, new_group_metadata
from zarrx.nodes.hierarchy import NodeFormat, expand_requests, format_of, list_children_many
from zarrx.nodes.node import Node
from zarrx.storage.paths import normalize_path
from zarrx.storage.store import Store

__all__ = ["Group", "node_from_metadata"]


def node_from_metadata(
    store: Store,
    path: str,
    metadata: NodeMetadata,
    *,
    read_only: bool,
    consolidated: dict[str, dict[str, Any]] | None = None,
) -> "Array | Group":
    if metadata.node_type == "array":
        return Array(store, path, metadata, read_only=read_only)
    return Group(store, path, metadata, read_only=read_only, consolidated=consolidated)


class Group(Node[GroupMetadataLike]):
    """A Zarr group in a store.

    Open or create one with :func:`zarrx.open_group` / :func:`zarrx.create_group`.

    Examples
    --------
    >>> import zarrx
    >>> root = zarrx.create_group({})
    >>> temperature = root.create_array("weather/t2m", shape=(365, 90), chunks=(30, 90), dtype="float32")
    >>> sorted(root["weather"])
    ['t2m']
    """

    _kind = "group"

    def __init__(
        self,
        store: Store,
        path: str,
        metadata: GroupMetadataLike,
        *,
        read_only: bool = False,
        consolidated: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        super().__init__(store, path, metadata, read_only=read_only)
        #: child documents keyed by path relative to this group, when read from consolidated metadata
        self._consolidated = consolidated
        #: those documents by child name, then path below the child (:meth:`_below_children`)
        self._below: dict[str, dict[str, Any]] | None = None
        #: the listing of the group's prefix, sent beside its document (:func:`zarrx.open_group`)
        #: and used by the first look at its children
        self._listing: Future[list[str]] | None = None

    # -- description ------------------------------------------------------------------------
    @property
    def is_consolidated(self) -> bool:
        return self._consolidated is not None

    # -- children ---------------------------------------------------------------------------
    def _child_path(self, name: str) -> str:
        """The path of a descendant given relative to this group ("a" or "a/b")."""
        if not isinstance(name, str):
            raise InvalidPathError(f"a child of group {self.name!r} is named by a string, found {name!r}")
        if name.startswith("/"):
            # an absolute name would silently mean a path under this group, not from the root
            raise InvalidPathError(
                f"child names are relative to group {self.name!r}; found the absolute name {name!r} "
                "(open the root group to address nodes from the root)"
            )
        relative = normalize_path(name, allow_reserved=True)  # creating one is refused later
        if not relative:
            raise InvalidPathError(f"a child of group {self.name!r} needs a non-empty name, found {name!r}")
        return f"{self._path}/{relative}" if self._path else relative

    @property
    def _format(self) -> NodeFormat:
        return format_of(self._metadata)

    def _child_documents(self) -> dict[str, NodeMetadata]:
        """Metadata of the direct children, by name (one listing + one batched read)."""
        if self._consolidated is not None:
            return {
                name: self._format.parse_consolidated(document, self._child_path(name))
                for name, document in sorted(self._consolidated.items())
                if "/" not in name
            }
        return self._format.list_children(self._store, self._path, self._listed())

    def _listed(self) -> list[str] | None:
        """The listing sent beside the group's document, the first time (None after: a later
        look lists afresh), or None."""
        listing, self._listing = self._listing, None
        return None if listing is None else listing.result()

    def _child_nodes(self, documents: dict[str, NodeMetadata]) -> dict[str, "Array | Group"]:
        """The children described by ``documents`` (:meth:`_child_documents`), by name."""
        return {name: self._node(self._child_path(name), metadata) for name, metadata in documents.items()}

    def _below_children(self) -> dict[str, dict[str, Any]]:
        """The consolidated documents below each child, by child name then path below it: sorted
        out once, not scanned for each child group (a tree of N groups in O(N), not O(N^2))."""
        below = self._below
        if below is None:
            below = {}
            for key, document in (self._consolidated or {}).items():
                name, separator, rest = key.partition("/")
                if separator:
                    below.setdefault(name, {})[rest] = document
            self._below = below
        return below

    def _node(self, path: str, metadata: NodeMetadata) -> "Array | Group":
        consolidated = None
        if self._consolidated is not None and metadata.node_type == "group":
            relative = path[len(self._path) + 1 :] if self._path else path
            if "/" not in relative:
                consolidated = dict(self._below_children().get(relative, {}))
            else:
                consolidated = {
                    key[len(relative) + 1 :]: document
                    for key, document in self._consolidated.items()
                    if key.startswith(relative + "/")
                }
        return node_from_metadata(self._store, path, metadata, read_only=self._opened_read_only, consolidated=consolidated)

    def __getitem__(self, name: str) -> "Array | Group":
        path = self._child_path(name)
        relative = path[len(self._path) + 1 :] if self._path else path
        node_format = self._format
        if self._consolidated is not None:
            document = self._consolidated.get(relative)
            if document is None:
                raise NodeNotFoundError(f"no array or group {relative!r} in group {self.name!r} (consolidated metadata)")
            return self._node(path, node_format.parse_consolidated(document, path))
        metadata = node_format.read_child(self._store, path)
        if metadata is None:
            keys = " or ".join(repr(key) for key in node_format.keys(path))
            raise NodeNotFoundError(f"no array or group {relative!r} in group {self.name!r} (key {keys} is absent)")
        return self._node(path, metadata)

    def get(self, name: str, default: Any = None) -> Any:
        try:
            return self[name]
        except NodeNotFoundError:
            return default

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        try:
            self[name]
        except NodeNotFoundError:
            return False
        return True

    def __iter__(self) -> Iterator[str]:
        return iter(self._child_documents())

    def __len__(self) -> int:
        return len(self._child_documents())

    def keys(self) -> list[str]:
        return list(self._child_documents())

    def members(self, max_depth: int | None = 0) -> list[tuple[str, "Array | Group"]]:
        """``(name, node)`` for each child; with ``max_depth`` None (or > 0) also deeper
        descendants, named by their path relative to this group (depth first).

        Deeper levels are read as :meth:`descendants` reads them: each group as soon as it is
        found, beside the others (at most two rounds per level, whatever the number of groups;
        none when the group came from consolidated metadata)."""
        children = self.descendants(max_depth)
        result: list[tuple[str, Array | Group]] = []

        def visit(relative: str) -> None:
            for name, node in children.get(relative, {}).items():
                path = f"{relative}/{name}" if relative else name
                result.append((path, node))
                if path in children:
                    visit(path)

        visit("")
        return result

    def descendants(
        self, max_depth: int | None = None, *, then: "Callable[[str, dict[str, Array | Group]], None] | None" = None
    ) -> dict[str, dict[str, "Array | Group"]]:
        """The children of this group and of every group below it (down to ``max_depth`` levels
        below the children; None: all), keyed by the group's path relative to this one ("" for
        this group), each ``{name: node}``.

        On a remote store each group is read as soon as it is found -- its listing, then its
        children's documents in one batch -- beside the others (up to
        :data:`~zarrx.nodes.hierarchy.MAX_CONCURRENT_CALLS` at once): the walk waits for its
        longest chain of groups, two requests per level, not for the slowest group of every
        level. On a local store (and from consolidated metadata) they are read a level at a time,
        the documents of each level in one batch. ``then(relative, nodes)`` is
        called for each group whose children were read from the store (not from consolidated
        metadata), in the thread that read them, once its child groups are on their way: what
        else to fetch for it while the walk goes on."""
        found: dict[str, dict[str, Array | Group]] = {}

        def read(item: tuple[str, Group, int]) -> Iterator[tuple[str, Group, int]]:
            relative, group, depth = item
            nodes = found[relative] = group._child_nodes(group._child_documents())
            if max_depth is None or depth < max_depth:
                for path, child in _child_groups(relative, nodes):
                    yield path, child, depth + 1  # read from now on, beside what follows
            if then is not None:  # this walk starts below no consolidated metadata
                then(relative, nodes)

        if self._store.reads_are_local or self._consolidated is not None:
            # from consolidated metadata no request is made; on a local store a level's documents
            # are one batch, which the store reads side by side (a cold disk wants many in flight)
            return self._descendants_by_level(max_depth, then)
        expand_requests(read, [("", self, 0)])
        return found

    def _descendants_by_level(
        self, max_depth: int | None, then: "Callable[[str, dict[str, Array | Group]], None] | None"
    ) -> dict[str, dict[str, "Array | Group"]]:
        """:meth:`descendants` a level at a time: every group of a level listed, then all their
        children's documents in one batch."""
        found: dict[str, dict[str, Array | Group]] = {}
        level: list[tuple[str, Group]] = [("", self)]
        depth = 0
        while level:
            stored = [group for _, group in level if group._consolidated is None]
            read = list_children_many(self._store, [(group._path, group._format) for group in stored]) if stored else {}
            next_level: list[tuple[str, Group]] = []
            for relative, group in level:
                documents = read[group._path] if group._consolidated is None else group._child_documents()
                nodes = found[relative] = group._child_nodes(documents)
                if then is not None and group._consolidated is None:
                    then(relative, nodes)
                next_level.extend(_child_groups(relative, nodes))
            if max_depth is not None and depth >= max_depth:
                break
            level, depth = next_level, depth + 1
        return found

    def arrays(self) -> list[tuple[str, Array]]:
        return [(name, node) for name, node in self.members() if isinstance(node, Array)]

    def groups(self) -> list[tuple[str, "Group"]]:
        return [(name, node) for name, node in self.members() if isinstance(node, Group)]

    def array_keys(self) -> list[str]:
        return [name for name, _ in self.arrays()]

    def group_keys(self) -> list[str]:
        return [name for name, _ in self.groups()]

    def tree(self) -> str:
        """The hierarchy below this group as text, one node per line (shapes, data types, chunks,
        shards, codecs); a group that cannot be read raises (``zarrx tree`` shows it instead)."""
        return conveniences.call("tree", self)

    # -- changes ----------------------------------------------------------------------------
    def create_array(self, name: str, **kwargs: Any) -> Array:
        """Create an array below this group (in the group's Zarr format unless ``zarr_format``
        says otherwise); takes :func:`zarrx.create_array`'s keywords."""
        self._check_writable()
        kwargs.setdefault("zarr_format", self._metadata.zarr_format)
        return new_array(self._store, normalize_path(self._child_path(name)), **kwargs)

    def create_group(self, name: str, **kwargs: Any) -> "Group":
        """Create a group below this group (in the group's Zarr format by default); takes
        :func:`zarrx.create_group`'s keywords."""
        self._check_writable()
        return self._new_group(self._child_path(name), **kwargs)

    def _new_group(
        self, path: str, attributes: dict[str, Any] | None = None, zarr_format: Any = None, overwrite: bool = False
    ) -> "Group":
        path = normalize_path(path)  # refuses reserved names, which other writers' nodes may have
        zarr_format = self._metadata.zarr_format if zarr_format is None else zarr_format
        return Group(self._store, path, new_group_metadata(self._store, path, attributes, zarr_format, overwrite))

    def require_group(self, name: str, **kwargs: Any) -> "Group":
        """The child group ``name``, created when absent."""
        self._check_writable()
        path = self._child_path(name)
        metadata = self._format.read_child(self._store, path)
        if metadata is None:
            return self._new_group(path, **kwargs)
        if metadata.node_type == "array":
            raise ContainsArrayError(f"expected a group at {'/' + path!r} but found an array")
        return Group(self._store, path, metadata)

    def __delitem__(self, name: str) -> None:
        self._check_writable()
        path = self._child_path(name)
        child = self._format.read_child(self._store, path)
        if child is None:
            raise NodeNotFoundError(f"no array or group {name!r} in group {self.name!r}")
        self._store.delete_prefix(path + "/")
        if isinstance(child.zarr_format, int):
            update_copies(self._store, [(path, None, child.zarr_format)])

    def __setitem__(self, name: str, value: Any) -> None:
        self._check_writable()
        data = np.asarray(value)
        array = self.create_array(name, shape=data.shape, dtype=data.dtype, overwrite=True)
        array[...] = data


def _child_groups(relative: str, nodes: dict[str, "Array | Group"]) -> list[tuple[str, Group]]:
    """``(path relative to the walk's start, group)`` for the groups among a group's ``nodes``
    (the group at ``relative``)."""
    return [
        (f"{relative}/{name}" if relative else name, node) for name, node in nodes.items() if isinstance(node, Group)
    ]
