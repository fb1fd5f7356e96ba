"""The 2022 draft layout of Zarr v3 (seeds 001 and 002), read-only.

Before the v3 spec was accepted, drafts (and zarr-python 2.x's experimental v3 API) stored a
hierarchy as:

* an *entry point* ``zarr.json`` whose ``zarr_format`` is a URI
  (``https://purl.org/zarr/spec/core/3.0``; zarr-python 2 wrote ``…/spec/protocol/core/3.0``),
  with ``metadata_key_suffix`` (default ``".json"``) and ``extensions``;
* node documents under ``meta/``: ``meta/root.group.json`` / ``meta/root.array.json`` for
  the root, ``meta/root/<path>.group.json`` / ``.array.json`` below it; a group without a
  document is *implicit*: it exists because something is stored below it;
* chunks under ``data/root/<path>/``, keyed ``c`` + the grid indices joined by the
  ``chunk_grid``'s ``separator`` (``data/root/foo/baz/c1/0``).

Array documents have ``shape``, ``data_type`` (NumPy type strings with byte order --
``"<f8"`` -- or ``"bool"``, ``"i1"``, ``"u1"``; extension types as ``{"extension", "type",
"fallback"}``), ``chunk_grid`` (``{"type": "regular", "chunk_shape", "separator"}``),
``chunk_memory_layout`` (``"C"``/``"F"``), ``fill_value`` (``null``, numbers, ``"NaN"``,
``"+Infinity"``/``"Infinity"``, ``"-Infinity"``, ``"0x…"`` bit patterns, base64 for bytes
as in v2), ``attributes``, and the compressor as a codec URI -- zarr-python 2's
``"compressor": {"codec": URI, "configuration": …}`` or the 2022 draft's ``"codecs": [{"type":
URI, "configuration": …}]`` (gzip, zlib, blosc, bz2, lz4, lzma, zstd; the configuration is
numcodecs'). zarr-python 2 kept filters in ``attributes["filters"]``; they are honoured and
hidden from the attributes.

Chunks are decoded by :class:`~zarrx.codecs.v2.V2Codec` (memory layout, stored dtype,
compressor): the bytes are the same as a v2 chunk's. Extensions and storage transformers
that must be understood are refused. Nothing here writes: writing to a draft hierarchy
raises :class:`~zarrx.errors.ReadOnlyError` (convert it with :func:`zarrx.convert`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping

import numpy as np

from zarrx.codecs.pipeline import check_chunk_size
from zarrx.codecs.v2 import check_codec_config, object_codec_id
from zarrx.dtypes.base import DataType
from zarrx.dtypes.numeric import float_from_json
from zarrx.dtypes.v2 import parse_v2_dtype, parse_v2_fill_value, v2_data_type
from zarrx.errors import MetadataError, ReadOnlyError, UnsupportedExtensionError
from zarrx.metadata.chunk_grid import parse_shape
from zarrx.metadata.chunk_key_encoding import ChunkKeyEncoding, _parse_indices
from zarrx.metadata.node import _naming, decode_json
from zarrx.metadata.v2 import V2StyleArray

__all__ = [
    "DRAFT_FORMAT",
    "DRAFT_URIS",
    "CODEC_URIS",
    "DraftHierarchy",
    "DraftArrayMetadata",
    "DraftGroupMetadata",
    "DraftChunkKeyEncoding",
    "is_draft_entry_point",
    "READ_ONLY_REASON",
]

#: the ``zarr_format`` of draft metadata in zarrx (what ``metadata.zarr_format`` reports)
DRAFT_FORMAT = "https://purl.org/zarr/spec/core/3.0"
#: entry point URIs of the drafts: seed 002 and zarr-python 2.x's experimental API
DRAFT_URIS = (DRAFT_FORMAT, "https://purl.org/zarr/spec/protocol/core/3.0")
#: ``https://purl.org/zarr/spec/codec/<name>/<version>`` -> numcodecs id
CODEC_URIS = {name: name for name in ("gzip", "zlib", "blosc", "bz2", "lz4", "lzma", "zstd")}
_CODEC_URI_PREFIX = "https://purl.org/zarr/spec/codec/"
#: short data type names of the drafts -> NumPy type strings
_DATA_TYPE_NAMES = {
    "bool": "|b1", "i1": "|i1", "u1": "|u1",
    "int8": "|i1", "int16": "<i2", "int32": "<i4", "int64": "<i8",
    "uint8": "|u1", "uint16": "<u2", "uint32": "<u4", "uint64": "<u8",
    "float16": "<f2", "float32": "<f4", "float64": "<f8", "complex64": "<c8", "complex128": "<c16",
}  # fmt: skip
_ENTRY_POINT_FIELDS = ("zarr_format", "metadata_encoding", "metadata_key_suffix", "extensions")
READ_ONLY_REASON = (
    "it is stored in the 2022 draft layout of Zarr v3, which zarrx reads but does not write; "
    "convert it to Zarr v3 with zarrx.convert(src, dst) (or `zarrx convert SRC DST`)"
)


def is_draft_entry_point(document: Any) -> bool:
    return isinstance(document, Mapping) and document.get("zarr_format") in DRAFT_URIS


def _check_extensions(value: Any, field_name: str) -> None:
    if value is None:
        return
    if not isinstance(value, list):
        raise MetadataError(f"{field_name}: expected a list, found {value!r}")
    for index, extension in enumerate(value):
        if not isinstance(extension, Mapping):
            raise MetadataError(f"{field_name}[{index}]: expected an object, found {extension!r}")
        if extension.get("must_understand", True) is not False:
            name = extension.get("extension", extension.get("type"))
            raise UnsupportedExtensionError(f"{field_name}[{index}]: unknown extension {name!r} that must be understood")


@dataclass(frozen=True)
class DraftHierarchy:
    """The entry point: how the documents of this hierarchy are named."""

    metadata_key_suffix: str = ".json"

    @classmethod
    def from_json(cls, document: Mapping[str, Any], key: str = "zarr.json") -> "DraftHierarchy":
        with _naming(key):
            if document.get("zarr_format") not in DRAFT_URIS:
                found = document.get("zarr_format")
                raise MetadataError(f"zarr_format: expected one of {list(DRAFT_URIS)}, found {found!r}")
            suffix = document.get("metadata_key_suffix", ".json")
            if not isinstance(suffix, str) or "/" in suffix:
                raise MetadataError(f"metadata_key_suffix: expected a string without '/', found {suffix!r}")
            _check_extensions(document.get("extensions"), "extensions")
            if document.get("storage_transformers"):
                raise UnsupportedExtensionError("storage_transformers: zarrx supports no storage transformer")
        return cls(suffix)

    def node_key(self, path: str, kind: str) -> str:
        """``meta/root.group.json`` for the root, ``meta/root/a/b.array.json`` below it."""
        return f"meta/root{'/' + path if path else ''}.{kind}{self.metadata_key_suffix}"

    def children_prefix(self, path: str) -> str:
        return f"meta/root/{path + '/' if path else ''}"

    def data_prefix(self, path: str) -> str:
        return f"data/root/{path + '/' if path else ''}"


@dataclass(frozen=True)
class DraftChunkKeyEncoding(ChunkKeyEncoding):
    """Draft chunk identifiers: ``c`` then the indices joined by the separator (``c1/23/45``; ``c`` for 0-d)."""

    name: ClassVar[str] = "draft"
    default_separator: ClassVar[str] = "/"
    separator: str = "/"

    def encode(self, chunk_coords: tuple[int, ...]) -> str:
        return "c" + self.separator.join(str(index) for index in chunk_coords)

    def decode(self, key: str) -> tuple[int, ...] | None:
        if not key.startswith("c"):
            return None
        return () if key == "c" else _parse_indices(key[1:].split(self.separator))


# -- array documents ------------------------------------------------------------------------


def parse_draft_data_type(value: Any) -> np.dtype:
    """A draft ``data_type`` as the stored NumPy dtype."""
    if isinstance(value, Mapping):  # an extension type: its own type string, else the fallback
        try:
            return parse_draft_data_type(value.get("type"))
        except MetadataError:
            if value.get("fallback") is None:
                raise
            return parse_draft_data_type(value["fallback"])
    if isinstance(value, str):
        value = _DATA_TYPE_NAMES.get(value, value)
        if value.startswith("r") and value[1:].isdigit() and int(value[1:]) % 8 == 0:
            value = f"|V{int(value[1:]) // 8}"
    stored = parse_v2_dtype(value, "data_type")
    if stored.kind == "O":
        raise MetadataError("data_type: objects ('|O') need an object codec in attributes.filters")
    return stored


def _draft_fill_value(value: Any, stored: np.dtype, data_type: DataType) -> Any:
    if stored.kind in "fc" and isinstance(value, str) and value.startswith(("0x", "0b")):
        if stored.kind == "f":  # the draft's bit patterns: "0x" + 2 * itemsize hex digits
            if value.startswith("0b"):
                value = "0x" + format(int(value[2:], 2), f"0{stored.itemsize * 2}x")
            return float_from_json(value, stored.newbyteorder("="))
        raise MetadataError(f"fill_value: bit patterns are not supported for complex types, found {value!r}")
    return parse_v2_fill_value(value, stored, data_type)


def parse_draft_compressor(document: Mapping[str, Any]) -> dict[str, Any] | None:
    """The compressor as a numcodecs configuration, from ``compressor`` or ``codecs``."""
    compressor = document.get("compressor")
    codecs = document.get("codecs")
    if compressor is not None and codecs:
        raise MetadataError("codecs: give either 'compressor' or 'codecs', found both")
    if codecs is not None:
        if not isinstance(codecs, list):
            raise MetadataError(f"codecs: expected a list, found {codecs!r}")
        if len(codecs) > 1:
            raise UnsupportedExtensionError(f"codecs: zarrx reads draft arrays with at most one codec, found {len(codecs)}")
        return _codec_config(codecs[0], "codecs[0]", "type") if codecs else None
    return None if compressor is None else _codec_config(compressor, "compressor", "codec")


def _codec_config(value: Any, field_name: str, uri_member: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise MetadataError(f"{field_name}: expected an object, found {value!r}")
    uri = value.get(uri_member, value.get("type", value.get("codec")))
    name = uri[len(_CODEC_URI_PREFIX):].split("/")[0] if isinstance(uri, str) and uri.startswith(_CODEC_URI_PREFIX) else None
    if name not in CODEC_URIS:
        raise UnsupportedExtensionError(
            f"{field_name}.{uri_member}: unknown codec {uri!r}; zarrx reads "
            f"{[_CODEC_URI_PREFIX + n + '/1.0' for n in CODEC_URIS]}"
        )
    configuration = value.get("configuration") or {}
    if not isinstance(configuration, Mapping):
        raise MetadataError(f"{field_name}.configuration: expected an object, found {configuration!r}")
    return check_codec_config({**configuration, "id": CODEC_URIS[name]}, field_name)


def _draft_filters(attributes: dict[str, Any]) -> tuple[tuple[dict[str, Any], ...], dict[str, Any]]:
    """zarr-python 2's filters, kept in ``attributes["filters"]``, and the attributes without them."""
    filters = attributes.get("filters")
    if isinstance(filters, list) and filters and all(isinstance(f, Mapping) and "id" in f for f in filters):
        configs = tuple(check_codec_config(f, f"attributes.filters[{i}]") for i, f in enumerate(filters))
        return configs, {name: value for name, value in attributes.items() if name != "filters"}
    return (), attributes


@dataclass(frozen=True)
class DraftArrayMetadata(V2StyleArray):
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    stored_dtype: np.dtype
    fill_value: Any
    separator: str = "/"
    order: str = "C"
    filters: tuple[dict[str, Any], ...] = ()
    compressor: dict[str, Any] | None = None
    attributes: dict[str, Any] = field(default_factory=dict)
    fill_value_is_null: bool = False
    hierarchy: DraftHierarchy = field(default_factory=DraftHierarchy)
    document: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    zarr_format: str = DRAFT_FORMAT
    node_type: str = "array"

    read_only_reason: ClassVar[str] = READ_ONLY_REASON

    def __post_init__(self) -> None:
        check_chunk_size(self.chunk_spec)  # before anything allocates a chunk

    @classmethod
    def from_json(cls, document: Mapping[str, Any], hierarchy: DraftHierarchy, key: str) -> "DraftArrayMetadata":
        with _naming(key):
            _check_extensions(document.get("extensions"), "extensions")
            if document.get("storage_transformers"):
                raise UnsupportedExtensionError(
                    "storage_transformers: zarrx supports no draft storage transformer (such as sharding)"
                )
            attributes = document.get("attributes") or {}
            if not isinstance(attributes, dict):
                raise MetadataError(f"attributes: expected an object, found {attributes!r}")
            filters, attributes = _draft_filters(attributes)
            compressor = parse_draft_compressor(document)
            shape = parse_shape(document.get("shape"), "shape")
            grid = document.get("chunk_grid")
            if not isinstance(grid, Mapping) or grid.get("type", "regular") != "regular":
                raise UnsupportedExtensionError(f"chunk_grid: zarrx reads the regular grid, found {grid!r}")
            chunks = parse_shape(grid.get("chunk_shape"), "chunk_grid.chunk_shape", minimum=1)
            if len(chunks) != len(shape):
                raise MetadataError(
                    f"chunk_grid.chunk_shape: expected {len(shape)} lengths for shape {list(shape)}, found {list(chunks)}"
                )
            separator = grid.get("separator", document.get("dimension_separator", "/"))
            if separator not in ("/", "."):
                raise MetadataError(f"chunk_grid.separator: expected '/' or '.', found {separator!r}")
            layout = document.get("chunk_memory_layout", "C")
            if layout not in ("C", "F"):
                raise UnsupportedExtensionError(f"chunk_memory_layout: expected 'C' or 'F', found {layout!r}")
            codec_id = object_codec_id(filters, compressor)
            if codec_id is not None:
                stored = np.dtype(object)
            else:
                stored = parse_draft_data_type(document.get("data_type"))
            data_type = v2_data_type(stored, codec_id)
            fill_value = _draft_fill_value(document.get("fill_value"), stored, data_type)
            return cls(
                shape=shape, chunks=chunks, stored_dtype=stored,
                fill_value=data_type.default_fill_value() if fill_value is None else fill_value,
                separator=separator, order=layout, filters=filters, compressor=compressor,
                attributes=attributes, fill_value_is_null=fill_value is None, hierarchy=hierarchy,
                document=dict(document),
            )  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        return dict(self.document)

    def to_bytes(self) -> bytes:
        from zarrx.metadata.node import encode_json

        return encode_json(self.to_json())

    def documents(self) -> dict[str, bytes]:
        raise ReadOnlyError(f"array: {READ_ONLY_REASON}")

    def metadata_keys(self, path: str) -> tuple[str, ...]:
        return (self.hierarchy.node_key(path, "array"),)

    @property
    def chunk_key_encoding(self) -> DraftChunkKeyEncoding:
        return DraftChunkKeyEncoding(self.separator)

    def chunk_key(self, chunk_coords: tuple[int, ...]) -> str:
        return self.chunk_key_encoding.encode(chunk_coords)

    def storage_key(self, path: str, chunk_coords: tuple[int, ...]) -> str:
        return self.hierarchy.data_prefix(path) + self.chunk_key(chunk_coords)

    def chunk_prefix(self, path: str) -> str:
        return self.hierarchy.data_prefix(path)

    @property
    def dimension_names(self) -> None:
        return None

    def evolve(self, **changes: Any) -> "DraftArrayMetadata":
        raise ReadOnlyError(f"array: {READ_ONLY_REASON}")


@dataclass(frozen=True)
class DraftGroupMetadata:
    attributes: dict[str, Any] = field(default_factory=dict)
    #: False for an implicit group (no document; it exists because nodes are stored below it)
    explicit: bool = True
    hierarchy: DraftHierarchy = field(default_factory=DraftHierarchy)
    consolidated_metadata: None = None
    zarr_format: str = DRAFT_FORMAT
    node_type: str = "group"

    read_only_reason: ClassVar[str] = READ_ONLY_REASON

    @classmethod
    def from_json(cls, document: Mapping[str, Any], hierarchy: DraftHierarchy, key: str) -> "DraftGroupMetadata":
        with _naming(key):
            _check_extensions(document.get("extensions"), "extensions")
            attributes = document.get("attributes") or {}
            if not isinstance(attributes, dict):
                raise MetadataError(f"attributes: expected an object, found {attributes!r}")
        return cls(attributes=dict(attributes), hierarchy=hierarchy)

    def to_json(self) -> dict[str, Any]:
        return {"attributes": self.attributes}

    def documents(self) -> dict[str, bytes]:
        raise ReadOnlyError(f"group: {READ_ONLY_REASON}")

    def metadata_keys(self, path: str) -> tuple[str, ...]:
        return (self.hierarchy.node_key(path, "group"),) if self.explicit else ()

    def evolve(self, **changes: Any) -> "DraftGroupMetadata":
        raise ReadOnlyError(f"group: {READ_ONLY_REASON}")


def parse_draft_node(
    array_document: bytes | None, group_document: bytes | None, hierarchy: DraftHierarchy, path: str
) -> DraftArrayMetadata | DraftGroupMetadata | None:
    """The node whose ``.array.json`` / ``.group.json`` bytes are given (None when absent)."""
    if array_document is not None:
        key = hierarchy.node_key(path, "array")
        return DraftArrayMetadata.from_json(decode_json(array_document, key), hierarchy, key)
    if group_document is not None:
        key = hierarchy.node_key(path, "group")
        return DraftGroupMetadata.from_json(decode_json(group_document, key), hierarchy, key)
    return None
