"""Zarr v2 metadata: ``.zarray``, ``.zgroup``, ``.zattrs`` and consolidated ``.zmetadata`` (v2 spec).

:class:`ArrayMetadataV2` and :class:`GroupMetadataV2` are frozen dataclasses offering what
the array machinery uses from the v3 classes (``shape``, ``dtype``, ``data_type``,
``chunks``, ``chunk_grid``, ``chunk_spec``, ``codecs``, ``chunk_key``, ``fill_value``,
``dimension_names``, ``attributes``, ``evolve``, ``to_json``, ``documents``), so an
:class:`~zarrx.Array` of either format reads, writes, resizes and becomes a dask array the
same way. ``codecs`` is a pipeline of one :class:`~zarrx.codecs.v2.V2Codec`.

* ``fill_value`` is the value missing chunks read as. A ``null`` v2 fill value (allowed by
  the spec: "the contents of the chunk are undefined") reads as the data type's default
  (zero, empty string...), as zarr-python reads it; :attr:`ArrayMetadataV2.declared_fill_value`
  is then None and ``null`` is written back.
* ``dimension_names`` come from the ``_ARRAY_DIMENSIONS`` attribute (the convention xarray
  and zarr-python use for v2). The attribute stays in ``attributes``, as zarr-python and
  xarray's zarr backend expect to find it there; setting ``dimension_names`` writes it. A
  value that is not a list of one string per dimension is ignored (dimension_names None).
* Unknown ``.zarray`` members are kept and written back (the spec says implementations
  "SHOULD ignore" them); ``filters``, ``compressor``, ``order`` and ``fill_value`` may be
  absent (read as null, null, "C", null), as zarr-python reads them.

Errors are :class:`~zarrx.errors.MetadataError` naming the key and the field
(``a/.zarray: dtype: ...``); codecs that could run code from the store are refused before
anything else is read (see :mod:`zarrx.codecs.v2`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Mapping

import numpy as np

from zarrx.codecs.base import ChunkSpec
from zarrx.codecs.pipeline import CodecPipeline, check_chunk_size
from zarrx.codecs.v2 import V2Codec, check_codec_config, object_codec_id
from zarrx.dtypes.base import DataType
from zarrx.dtypes.v2 import (
    VLenArrayType,
    parse_v2_dtype,
    parse_v2_fill_value,
    v2_data_type,
    v2_dtype_to_json,
    v2_fill_value_to_json,
)
from zarrx.errors import MetadataError
from zarrx.metadata.chunk_grid import RegularChunkGrid, parse_shape
from zarrx.metadata.chunk_key_encoding import V2ChunkKeyEncoding
from zarrx.metadata.node import _naming, decode_json, encode_json
from zarrx.storage.paths import join_key

__all__ = [
    "ZARRAY",
    "ZGROUP",
    "ZATTRS",
    "ZMETADATA",
    "DIMENSIONS_ATTRIBUTE",
    "ArrayMetadataV2",
    "GroupMetadataV2",
    "ConsolidatedMetadataV2",
    "parse_v2_node",
    "parse_attributes_document",
]

ZARRAY, ZGROUP, ZATTRS, ZMETADATA = ".zarray", ".zgroup", ".zattrs", ".zmetadata"
#: the attribute holding dimension names in v2 (xarray's convention)
DIMENSIONS_ATTRIBUTE = "_ARRAY_DIMENSIONS"
ARRAY_FIELDS = ("zarr_format", "shape", "chunks", "dtype", "compressor", "fill_value", "order", "filters",
                "dimension_separator")  # fmt: skip


def _require(document: Mapping[str, Any], name: str) -> Any:
    if name not in document:
        raise MetadataError(f"{name}: missing required field")
    return document[name]


def parse_zarr_format_v2(value: Any) -> int:
    if type(value) is not int or value != 2:
        raise MetadataError(f"zarr_format: expected 2, found {value!r}")
    return 2


def parse_filters(value: Any) -> tuple[dict[str, Any], ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise MetadataError(f"filters: expected a list of codec objects or null, found {value!r}")
    return tuple(check_codec_config(item, f"filters[{index}]") for index, item in enumerate(value))


def parse_compressor(value: Any) -> dict[str, Any] | None:
    return None if value is None else check_codec_config(value, "compressor")


def parse_order(value: Any) -> str:
    if value not in ("C", "F"):
        raise MetadataError(f"order: expected 'C' or 'F', found {value!r}")
    return value


def parse_dimension_separator(value: Any) -> str:
    if value is None:
        return "."
    if value not in (".", "/"):
        raise MetadataError(f"dimension_separator: expected '.' or '/', found {value!r}")
    return value


def parse_attributes_document(document: Any, key: str) -> dict[str, Any]:
    """A ``.zattrs`` document (bytes or parsed JSON; None when absent) as a dict."""
    if document is None:
        return {}
    if isinstance(document, (bytes, bytearray, memoryview)):
        return decode_json(bytes(document), key)
    if not isinstance(document, dict):
        raise MetadataError(f"{key}: expected a JSON object, found {type(document).__name__}")
    return dict(document)


def _as_document(document: Any, key: str) -> dict[str, Any]:
    if isinstance(document, (bytes, bytearray, memoryview)):
        return decode_json(bytes(document), key)
    if not isinstance(document, Mapping):
        raise MetadataError(f"{key}: expected a JSON object, found {type(document).__name__}")
    return dict(document)


def dimension_names_from(attributes: Mapping[str, Any], ndim: int) -> tuple[str, ...] | None:
    names = attributes.get(DIMENSIONS_ATTRIBUTE)
    if isinstance(names, list) and len(names) == ndim and all(isinstance(name, str) for name in names):
        return tuple(names)
    return None


class V2StyleArray:
    """What an array described the v2 way -- a NumPy dtype, the C/F order, numcodecs filters and
    a compressor, a regular grid -- derives from its fields (Zarr v2 and the 2022 draft).

    The class using it has the fields ``shape``, ``chunks``, ``stored_dtype``, ``fill_value``,
    ``fill_value_is_null``, ``order``, ``filters`` and ``compressor``.
    """

    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    stored_dtype: np.dtype
    fill_value: Any
    fill_value_is_null: bool
    order: str
    filters: tuple[dict[str, Any], ...]
    compressor: dict[str, Any] | None

    @cached_property
    def data_type(self) -> DataType:
        return v2_data_type(self.stored_dtype, object_codec_id(self.filters, self.compressor))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def dtype(self) -> np.dtype:
        return self.data_type.numpy_dtype

    @property
    def declared_fill_value(self) -> Any:
        """The fill value as the document states it: None for ``null``."""
        return None if self.fill_value_is_null else self.fill_value

    @cached_property
    def chunk_grid(self) -> RegularChunkGrid:
        return RegularChunkGrid(self.chunks)

    @property
    def grid_shape(self) -> tuple[int, ...]:
        return self.chunk_grid.grid_shape(self.shape)

    @property
    def nchunks(self) -> int:
        return math.prod(self.grid_shape)

    @cached_property
    def chunk_spec(self) -> ChunkSpec:
        return ChunkSpec(self.chunks, self.data_type, self.fill_value)

    @cached_property
    def codecs(self) -> CodecPipeline:
        codec = V2Codec(self.stored_dtype, self.order, self.filters, self.compressor)
        return CodecPipeline.from_codecs([codec])


@dataclass(frozen=True)
class ArrayMetadataV2(V2StyleArray):
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    stored_dtype: np.dtype
    fill_value: Any
    order: str = "C"
    filters: tuple[dict[str, Any], ...] = ()
    compressor: dict[str, Any] | None = None
    dimension_separator: str = "."
    attributes: dict[str, Any] = field(default_factory=dict)
    #: the document said ``null``: missing chunks read as ``fill_value``, the type's default
    fill_value_is_null: bool = False
    extra_fields: dict[str, Any] = field(default_factory=dict)
    zarr_format: int = 2
    node_type: str = "array"

    def __post_init__(self) -> None:
        if len(self.chunks) != len(self.shape):
            raise MetadataError(
                f"chunks: expected {len(self.shape)} chunk lengths to match shape {list(self.shape)}, "
                f"found {list(self.chunks)}"
            )
        self.codecs  # noqa: B018 (checks the filters and compressor)
        check_chunk_size(self.chunk_spec)  # before anything allocates a chunk

    @classmethod
    def from_json(
        cls, document: Mapping[str, Any], attributes: Mapping[str, Any] | None = None, key: str = ZARRAY
    ) -> "ArrayMetadataV2":
        """Build from a parsed ``.zarray`` and ``.zattrs`` (``key`` names the ``.zarray`` in errors)."""
        with _naming(key):
            parse_zarr_format_v2(_require(document, "zarr_format"))
            # codecs first: a refused codec is reported before anything else is looked at
            filters = parse_filters(document.get("filters"))
            compressor = parse_compressor(document.get("compressor"))
            shape = parse_shape(_require(document, "shape"), "shape")
            chunks = parse_shape(_require(document, "chunks"), "chunks", minimum=1)
            stored = parse_v2_dtype(_require(document, "dtype"))
            data_type = v2_data_type(stored, object_codec_id(filters, compressor))
            fill_value = parse_v2_fill_value(document.get("fill_value"), stored, data_type)
            metadata = cls(
                shape=shape,
                chunks=chunks,
                stored_dtype=stored,
                fill_value=data_type.default_fill_value() if fill_value is None else fill_value,
                order=parse_order(document.get("order", "C")),
                filters=filters,
                compressor=compressor,
                dimension_separator=parse_dimension_separator(document.get("dimension_separator")),
                attributes=dict(attributes or {}),
                fill_value_is_null=fill_value is None,
                extra_fields={name: value for name, value in document.items() if name not in ARRAY_FIELDS},
            )
        return metadata

    def to_json(self) -> dict[str, Any]:
        """The ``.zarray`` document (attributes go to ``.zattrs``)."""
        document = {
            "shape": list(self.shape),
            "chunks": list(self.chunks),
            "dtype": v2_dtype_to_json(self.stored_dtype),
            "fill_value": None if self.fill_value_is_null
            else v2_fill_value_to_json(self.fill_value, self.stored_dtype, self.data_type),
            "order": self.order,
            "filters": list(self.filters) or None,
            "dimension_separator": self.dimension_separator,
            "compressor": self.compressor,
            "zarr_format": 2,
        }
        document.update(self.extra_fields)
        return document

    def to_bytes(self) -> bytes:
        return encode_json(self.to_json())

    def documents(self) -> dict[str, bytes]:
        """What to store beside the array, by name: ``.zarray`` and ``.zattrs``."""
        return {ZARRAY: self.to_bytes(), ZATTRS: encode_json(self.attributes)}

    def metadata_keys(self, path: str) -> tuple[str, ...]:
        return (join_key(path, ZARRAY), join_key(path, ZATTRS))

    @property
    def chunk_key_encoding(self) -> V2ChunkKeyEncoding:
        return V2ChunkKeyEncoding(self.dimension_separator)

    def chunk_key(self, chunk_coords: tuple[int, ...]) -> str:
        return self.chunk_key_encoding.encode(chunk_coords)

    def storage_key(self, path: str, chunk_coords: tuple[int, ...]) -> str:
        return join_key(path, self.chunk_key(chunk_coords))

    def chunk_prefix(self, path: str) -> str:
        return join_key(path, "")

    @property
    def dimension_names(self) -> tuple[str, ...] | None:
        return dimension_names_from(self.attributes, len(self.shape))

    @property
    def read_only_reason(self) -> str | None:
        if isinstance(self.data_type, VLenArrayType):
            return "zarrx reads vlen-array object arrays but does not write them"
        return None

    def evolve(self, **changes: Any) -> "ArrayMetadataV2":
        if "dimension_names" in changes:
            names = changes.pop("dimension_names")
            attributes = dict(changes.get("attributes", self.attributes))
            if names is None:
                attributes.pop(DIMENSIONS_ATTRIBUTE, None)
            else:
                attributes[DIMENSIONS_ATTRIBUTE] = list(names)
            changes["attributes"] = attributes
        if "fill_value" in changes:
            changes.setdefault("fill_value_is_null", changes["fill_value"] is None)
            if changes["fill_value"] is None:
                changes["fill_value"] = self.data_type.default_fill_value()
        return replace(self, **changes)


@dataclass(frozen=True)
class ConsolidatedMetadataV2:
    """zarr-python 2's ``.zmetadata``: every document below a group, grouped by node path.

    ``metadata`` maps a node's path relative to the group (never ``""``, the group itself)
    to its documents by name (``{".zarray": {...}, ".zattrs": {...}}``).
    """

    metadata: dict[str, dict[str, Any]]

    @classmethod
    def from_json(cls, document: Any, key: str = ZMETADATA) -> "ConsolidatedMetadataV2":
        document = _as_document(document, key)
        version = document.get("zarr_consolidated_format")
        if version != 1:
            raise MetadataError(f"{key}: zarr_consolidated_format: expected 1, found {version!r}")
        entries = document.get("metadata")
        if not isinstance(entries, Mapping):
            raise MetadataError(f"{key}: metadata: expected an object of documents, found {entries!r}")
        nodes: dict[str, dict[str, Any]] = {}
        for entry_key, value in entries.items():
            parent, _, name = str(entry_key).rpartition("/")
            if name not in (ZARRAY, ZGROUP, ZATTRS) or not parent:
                continue  # the group's own documents are read from the store; others are not v2 metadata
            nodes.setdefault(parent, {})[name] = value
        return cls({path: documents for path, documents in nodes.items() if ZARRAY in documents or ZGROUP in documents})

    def to_json(self, root: Mapping[str, Any]) -> dict[str, Any]:
        """The ``.zmetadata`` document, with ``root`` (the group's own documents) first."""
        entries = dict(root)
        for path, documents in self.metadata.items():
            for name, value in documents.items():
                entries[f"{path}/{name}"] = value
        return {"metadata": entries, "zarr_consolidated_format": 1}


@dataclass(frozen=True)
class GroupMetadataV2:
    attributes: dict[str, Any] = field(default_factory=dict)
    #: the ``.zmetadata`` found beside the group, when it was read (not written by documents())
    consolidated_metadata: ConsolidatedMetadataV2 | None = None
    zarr_format: int = 2
    node_type: str = "group"

    @classmethod
    def from_json(
        cls, document: Mapping[str, Any], attributes: Mapping[str, Any] | None = None, key: str = ZGROUP
    ) -> "GroupMetadataV2":
        with _naming(key):
            parse_zarr_format_v2(_require(document, "zarr_format"))
        return cls(attributes=dict(attributes or {}))

    def to_json(self) -> dict[str, Any]:
        """The ``.zgroup`` document."""
        return {"zarr_format": 2}

    def to_bytes(self) -> bytes:
        return encode_json(self.to_json())

    def documents(self) -> dict[str, bytes]:
        return {ZGROUP: self.to_bytes(), ZATTRS: encode_json(self.attributes)}

    def metadata_keys(self, path: str) -> tuple[str, ...]:
        return (join_key(path, ZGROUP), join_key(path, ZATTRS))

    read_only_reason = None

    def evolve(self, **changes: Any) -> "GroupMetadataV2":
        return replace(self, **changes)


def parse_v2_node(documents: Mapping[str, Any], path: str) -> ArrayMetadataV2 | GroupMetadataV2 | None:
    """The node whose ``.zarray`` / ``.zgroup`` / ``.zattrs`` (bytes or parsed JSON, None when
    absent) are given by name; None when neither ``.zarray`` nor ``.zgroup`` exists."""
    zarray, zgroup = documents.get(ZARRAY), documents.get(ZGROUP)
    if zarray is None and zgroup is None:
        return None
    if zarray is not None and zgroup is not None:
        raise MetadataError(
            f"{join_key(path, ZARRAY)}: both {ZARRAY} and {ZGROUP} exist at {'/' + path!r}; a node is one or the other"
        )
    attributes = parse_attributes_document(documents.get(ZATTRS), join_key(path, ZATTRS))
    if zarray is not None:
        key = join_key(path, ZARRAY)
        return ArrayMetadataV2.from_json(_as_document(zarray, key), attributes, key)
    key = join_key(path, ZGROUP)
    return GroupMetadataV2.from_json(_as_document(zgroup, key), attributes, key)
