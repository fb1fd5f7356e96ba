"""What every format's node metadata offers: the one interface the layers above use.

Zarr v3 (:class:`zarrx.metadata.node.ArrayMetadata`), Zarr v2
(:class:`zarrx.metadata.v2.ArrayMetadataV2`) and the 2022 draft layout
(:class:`zarrx.metadata.draft.DraftArrayMetadata`) describe arrays differently on disk, and
alike in memory: a shape, a data type, a chunk grid, a codec pipeline that reads and writes the
stored chunks, a fill value, the keys of the chunks and of the documents. Code that reads and
writes arrays takes an :class:`ArrayMetadataLike`, code that walks hierarchies a
:class:`NodeMetadata`; none of it asks which format it has, except to write documents.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, Union, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from zarrx.codecs.base import ChunkSpec
    from zarrx.codecs.pipeline import CodecPipeline
    from zarrx.dtypes.base import DataType
    from zarrx.metadata.chunk_grid import ChunkGrid
    from zarrx.metadata.chunk_key_encoding import ChunkKeyEncoding

__all__ = ["ArrayMetadataLike", "GroupMetadataLike", "NodeMetadata", "ZarrFormat"]

#: 2, 3, or the 2022 draft's URI (``zarrx.metadata.draft.DRAFT_FORMAT``)
ZarrFormat = Union[int, str]


@runtime_checkable
class _Documented(Protocol):
    """What arrays and groups share: the documents that describe them and their attributes."""

    @property
    def zarr_format(self) -> ZarrFormat: ...

    @property
    def node_type(self) -> str: ...

    @property
    def attributes(self) -> dict[str, Any]: ...

    @property
    def read_only_reason(self) -> str | None:
        """Why the node cannot be written (the draft layout, a v2 type zarrx only reads); None when it can."""

    def to_json(self) -> dict[str, Any]: ...

    def documents(self) -> dict[str, bytes]:
        """The documents to store beside the node, by name (``zarr.json``; ``.zarray`` and ``.zattrs``)."""

    def metadata_keys(self, path: str) -> tuple[str, ...]:
        """The store keys of the node's documents when it is at ``path``."""

    def evolve(self, **changes: Any) -> Any:
        """A copy with ``changes`` (``attributes=``, ``shape=``, ...)."""


@runtime_checkable
class ArrayMetadataLike(_Documented, Protocol):
    """An array's metadata in any format zarrx reads."""

    @property
    def shape(self) -> tuple[int, ...]: ...

    @property
    def ndim(self) -> int: ...

    @property
    def data_type(self) -> DataType: ...

    @property
    def dtype(self) -> np.dtype: ...

    @property
    def chunk_grid(self) -> ChunkGrid: ...

    @property
    def chunks(self) -> tuple[int, ...] | tuple[tuple[int, ...], ...]:
        """The shape of the stored objects (shards, for a sharded array); for a rectilinear grid the
        edges of each dimension's objects."""

    @property
    def grid_shape(self) -> tuple[int, ...]: ...

    @property
    def nchunks(self) -> int: ...

    @property
    def chunk_spec(self) -> ChunkSpec: ...

    @property
    def codecs(self) -> CodecPipeline: ...

    @property
    def chunk_key_encoding(self) -> ChunkKeyEncoding: ...

    @property
    def fill_value(self) -> Any:
        """The value of missing chunks (a value of ``dtype``; arbitrary for structured types)."""

    @property
    def declared_fill_value(self) -> Any:
        """The fill value as the document states it: None for a Zarr v2 ``null``."""

    @property
    def dimension_names(self) -> tuple[str | None, ...] | None: ...

    def storage_key(self, path: str, chunk_coords: tuple[int, ...]) -> str:
        """The store key of a chunk of the array at ``path``."""

    def chunk_prefix(self, path: str) -> str:
        """The prefix every chunk key of the array at ``path`` starts with."""


@runtime_checkable
class GroupMetadataLike(_Documented, Protocol):
    """A group's metadata in any format zarrx reads."""

    @property
    def consolidated_metadata(self) -> Any:
        """The format's consolidated metadata of the members, or None."""


NodeMetadata = Union[ArrayMetadataLike, GroupMetadataLike]
