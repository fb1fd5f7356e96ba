"""What arrays and groups share: where they live, their metadata documents and attributes.

A node is a store, a path (``""`` for the root) and its parsed metadata, in any
format zarrx reads (v3 ``zarr.json``, v2 ``.zarray``/``.zgroup`` + ``.zattrs``, the
2022 draft layout). Changes to the metadata (attributes, an array's shape) go
through :meth:`Node._write_metadata`, which refuses read-only nodes, updates the consolidated
metadata of the groups above that copies them and stores the documents the metadata names
(``metadata.documents()``) in one batch, each atomically (:mod:`zarrx.nodes.consolidated`).
An attribute change applies to the attributes stored now, under the hierarchy's metadata lock.
Metadata that cannot be written (the draft layout) says why in ``read_only_reason``.
"""

from __future__ import annotations

from typing import Any, Callable, Generic, TypeVar

from zarrx.errors import ReadOnlyError
from zarrx.metadata.protocol import ArrayMetadataLike, GroupMetadataLike, ZarrFormat
from zarrx.nodes import conveniences
from zarrx.nodes.attributes import Attributes
from zarrx.nodes.consolidated import write_metadata
from zarrx.storage.paths import join_key
from zarrx.storage.store import Store

__all__ = ["Node"]

M = TypeVar("M", ArrayMetadataLike, GroupMetadataLike)


class Node(Generic[M]):
    _kind = "node"

    def __init__(self, store: Store, path: str, metadata: M, *, read_only: bool = False) -> None:
        self._store = store
        self._path = path
        self._metadata = metadata
        self._read_only = read_only or store.read_only or metadata.read_only_reason is not None
        self._opened_read_only = read_only  # asked for (mode 'r'), not just inherited from the store

    @property
    def store(self) -> Store:
        return self._store

    @property
    def path(self) -> str:
        """Path from the hierarchy's root, without a leading slash (``""`` for the root)."""
        return self._path

    @property
    def name(self) -> str:
        """Path from the hierarchy's root, with a leading slash."""
        return "/" + self._path

    @property
    def basename(self) -> str:
        return self._path.rsplit("/", 1)[-1]

    @property
    def metadata(self) -> M:
        return self._metadata

    @property
    def read_only(self) -> bool:
        return self._read_only

    @property
    def attrs(self) -> Attributes:
        """User attributes; every change is saved at once."""
        return Attributes(self)

    @property
    def zarr_format(self) -> ZarrFormat:
        """2, 3, or the draft's URI (``zarrx.metadata.draft.DRAFT_FORMAT``)."""
        return self._metadata.zarr_format

    @property
    def _metadata_key(self) -> str:
        keys = self._metadata.metadata_keys(self._path)
        return keys[0] if keys else join_key(self._path, "zarr.json")

    def _check_writable(self) -> None:
        reason = self._metadata.read_only_reason
        if reason is not None:
            raise ReadOnlyError(f"{self._kind} {self.name!r} cannot be changed: {reason}")
        if self._store.read_only and self._store.read_only_reason is not None:
            raise ReadOnlyError(f"{self._kind} {self.name!r} cannot be changed: {self._store!r} is read-only: "
                                f"{self._store.read_only_reason}")  # fmt: skip
        if self._store.read_only and not self._opened_read_only:
            raise ReadOnlyError(
                f"{self._kind} {self.name!r} cannot be changed: its store {self._store!r} is read-only "
                "(make_store's default mode is 'r'; make it with mode='r+' or 'a', or pass the path or URL itself)"
            )
        if self._read_only:
            raise ReadOnlyError(
                f"{self._kind} {self.name!r} was opened read-only; open it with mode='r+' or 'a' to write"
            )

    def _write_metadata(self, metadata: M, change: Callable[[M], M] | None = None, now: bool = False) -> None:
        self._check_writable()
        self._metadata = write_metadata(self._store, self._path, metadata, change, now=now)

    def _get_attributes(self) -> dict[str, Any]:
        return self._metadata.attributes

    def _change_attributes(self, change: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        """Rewrite the attributes as ``change`` makes them from those stored now (another process
        may have changed them, or the node's shape, since this node was opened)."""
        self._write_metadata(self._metadata, lambda stored: stored.evolve(attributes=change(dict(stored.attributes))))

    def __repr__(self) -> str:
        return f"<zarrx.{type(self).__name__} {self._store!r} {self.name!r}>"

    # descriptions for people are zarrx.tools.display's (see zarrx.nodes.conveniences)
    def __str__(self) -> str:
        """An array's description or a group's tree (bounded), from metadata only."""
        return conveniences.call("node_text", self)

    def _repr_html_(self) -> str:
        """Jupyter's rendering: a collapsible tree with shapes, data types, chunks, codecs, attributes."""
        return conveniences.call("node_html", self)
