"""Array and group metadata documents (core spec, "Metadata").

:class:`ArrayMetadata` and :class:`GroupMetadata` are frozen dataclasses built by
``from_json`` from small ``parse_<field>`` helpers; ``to_json`` is the exact
inverse, in canonical form. :func:`parse_node_metadata` reads the raw bytes of a
``zarr.json`` and returns either.

Every error is a :class:`~zarrx.errors.MetadataError` (or a subclass) whose
message names the document key and the field. Unknown top-level members follow
the ``must_understand`` rule: an object with ``"must_understand": false`` is
kept (and written back) but otherwise ignored; anything else unknown refuses
to open with :class:`~zarrx.errors.UnsupportedExtensionError`.

The node layer uses every format's metadata (these, :mod:`zarrx.metadata.v2`,
:mod:`zarrx.metadata.draft`) through one interface: ``zarr_format``, ``node_type``,
``attributes``, ``evolve``, ``to_json``/``to_bytes``, ``documents()`` (the documents to
store beside the node, by name), ``metadata_keys(path)``, ``read_only_reason`` (None
when writable) and, for arrays, ``storage_key(path, chunk_coords)``, ``chunk_prefix(path)``
and ``declared_fill_value``.
"""

from __future__ import annotations

import json
import marshal
import math
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Mapping

import numpy as np

from zarrx.codecs.base import ChunkSpec
from zarrx.codecs.pipeline import CodecPipeline
from zarrx.codecs.sharding import ShardingCodec
from zarrx.dtypes import DataType, parse_data_type
from zarrx.errors import MetadataError, UnsupportedExtensionError, ZarrxError
from zarrx.metadata.chunk_grid import ChunkGrid, parse_chunk_grid, parse_shape
from zarrx.metadata.chunk_key_encoding import ChunkKeyEncoding, parse_chunk_key_encoding
from zarrx.extension import parse_extension
from zarrx.storage.paths import join_key

__all__ = [
    "ArrayMetadata",
    "GroupMetadata",
    "ConsolidatedMetadata",
    "parse_node_metadata",
    "encode_json",
    "decode_json",
]

#: the name of the v3 metadata document of every node
ZARR_JSON = "zarr.json"

ARRAY_FIELDS = (
    "zarr_format", "node_type", "shape", "data_type", "chunk_grid", "chunk_key_encoding",
    "fill_value", "codecs", "attributes", "dimension_names", "storage_transformers",
)  # fmt: skip
GROUP_FIELDS = ("zarr_format", "node_type", "attributes", "consolidated_metadata")


class _DuplicateMember(Exception):
    """A JSON object names one member twice (raised inside ``json.loads``)."""


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook``: the object, unless a member name repeats."""
    document = dict(pairs)
    if len(document) != len(pairs):
        seen: set[str] = set()
        for name, _ in pairs:
            if name in seen:
                raise _DuplicateMember(name)
            seen.add(name)
    return document


def decode_json(raw: bytes, key: str) -> dict[str, Any]:
    """Parse a metadata document's bytes into a JSON object, naming ``key`` on failure.

    A member named twice in one object is refused (RFC 8259 leaves its meaning open; Python's
    ``json`` keeps the last, other readers the first), as are documents that are not JSON objects.

    Examples
    --------
    >>> decode_json(b'{"shape": [4], "shape": [8]}', "x/zarr.json")
    Traceback (most recent call last):
    ...
    zarrx.errors.MetadataError: x/zarr.json: the member 'shape' appears twice in one JSON object; ...
    """
    if not raw:
        raise MetadataError(f"{key}: the metadata document is empty")
    try:
        document = json.loads(raw, object_pairs_hook=_refuse_duplicates)
    except _DuplicateMember as duplicate:
        raise MetadataError(
            f"{key}: the member {duplicate.args[0]!r} appears twice in one JSON object; which one counts is "
            "ambiguous (readers disagree), so the document is refused: keep one"
        ) from None
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise MetadataError(f"{key}: not valid JSON ({error})") from None
    if not isinstance(document, dict):
        raise MetadataError(f"{key}: expected a JSON object, found {type(document).__name__}")
    return document


#: documents longer than this are written without indentation: json's pretty printer is pure
#: Python, several times slower than its compact C encoder (a consolidated document of 10,000
#: members, 9 MiB, takes 0.7 s pretty and 0.12 s compact), and nobody reads such a document by eye
COMPACT_ABOVE = 2**16


def encode_json(document: Mapping[str, Any]) -> bytes:
    """A metadata document as UTF-8 JSON: indented, or compact past :data:`COMPACT_ABOVE` characters.

    Examples
    --------
    >>> encode_json({"zarr_format": 3, "node_type": "group"})
    b'{\\n  "zarr_format": 3,\\n  "node_type": "group"\\n}'
    """
    compact = json.dumps(document, ensure_ascii=False, separators=(",", ":"))
    if len(compact) > COMPACT_ABOVE:
        return compact.encode()
    return json.dumps(document, indent=2, ensure_ascii=False).encode()


def parse_zarr_format(value: Any) -> int:
    if type(value) is not int or value != 3:  # the integer 3: not 3.0, not true
        raise MetadataError(f"zarr_format: expected 3, found {value!r}")
    return 3


def parse_node_type(value: Any, expected: str) -> str:
    if value != expected:
        raise MetadataError(f"node_type: expected {expected!r}, found {value!r}")
    return expected


def parse_attributes(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise MetadataError(f"attributes: expected an object, found {type(value).__name__} {value!r}")
    return value


def parse_dimension_names(value: Any, ndim: int) -> tuple[str | None, ...] | None:
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or not all(v is None or isinstance(v, str) for v in value):
        raise MetadataError(f"dimension_names: expected a list of strings or nulls, found {value!r}")
    if len(value) != ndim:
        raise MetadataError(
            f"dimension_names: expected {ndim} names (one per dimension of shape), found {len(value)}: {list(value)!r}"
        )
    return tuple(value)


def parse_storage_transformers(value: Any) -> tuple[dict[str, Any], ...]:
    """Storage transformers: zarrx knows none, so only optional (``must_understand: false``) ones pass."""
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)):
        raise MetadataError(f"storage_transformers: expected a list, found {value!r}")
    for index, item in enumerate(value):
        extension = parse_extension(item, f"storage_transformers[{index}]")
        if extension.must_understand:
            raise UnsupportedExtensionError(
                f"storage_transformers[{index}]: unknown storage transformer {extension.name!r} "
                "that must be understood"
            )
    return tuple(value)


def parse_extra_fields(document: Mapping[str, Any], known: tuple[str, ...]) -> dict[str, Any]:
    """Unknown top-level members: kept when ``must_understand`` is false, refused otherwise."""
    extra = {name: value for name, value in document.items() if name not in known}
    for name, value in extra.items():
        if not (isinstance(value, Mapping) and value.get("must_understand") is False):
            raise UnsupportedExtensionError(
                f"{name}: unknown metadata field that must be understood "
                "(only fields whose value has \"must_understand\": false may be ignored)"
            )
    return extra


def validate_rectilinear_codecs(grid: Any, shape: tuple[int, ...], codecs: CodecPipeline) -> None:
    """What a rectilinear grid asks of the codecs beyond the largest chunk: a sharding codec's inner
    chunks divide every shard edge (so inner chunks tile the array regularly)."""
    if not isinstance(codecs.array_bytes, ShardingCodec) or codecs.array_array:
        return
    inner = codecs.array_bytes.chunk_shape
    for dim, (edges, size) in enumerate(zip(grid.chunk_edges(shape), inner)):
        uneven = sorted({edge for edge in edges if edge % size})
        if uneven:
            raise MetadataError(
                f"chunk_grid.configuration.chunk_shapes[{dim}]: shard edges {uneven[:5]} are not multiples of the "
                f"inner chunk length {size} (codecs: sharding_indexed chunk_shape)"
            )


def _require(document: Mapping[str, Any], name: str) -> Any:
    if name not in document:
        raise MetadataError(f"{name}: missing required field")
    return document[name]


#: the fields arrays of one hierarchy usually share, parsed, by their JSON (see _parse_shared_fields)
_SHARED_FIELDS = ("data_type", "chunk_grid", "chunk_key_encoding", "fill_value", "codecs")
_shared_cache: dict[bytes, tuple[Any, ...]] = {}
_SHARED_CACHE_SIZE = 256
#: a rectilinear grid listing more chunk edges than this is parsed per array, never kept here: its
#: edges (up to MAX_EDGES per dimension, a tuple entry per chunk) would outlive every array using them
_SHARED_MAX_EDGES = 1024


def _parse_shared_fields(document: Mapping[str, Any]) -> tuple[Any, ...]:
    """data type, chunk grid, chunk key encoding, fill value and codec pipeline of ``document``.

    The many arrays of a hierarchy (200 variables of a dataset) mostly repeat these fields, and
    parsing a codec list is most of the cost of opening an array, so the parsed values are
    memoized by the fields' JSON. Every value is immutable (frozen dataclasses, NumPy scalars;
    a pipeline's plan cache is keyed by chunk spec), so arrays can share them. The key tells JSON
    values apart (1, 1.0, True and "1" differ), so equal keys mean equal documents (the key
    is the fields' ``marshal`` serialization: lossless for JSON values, and 5x faster than repr).
    """
    try:
        key = marshal.dumps(tuple(document[name] for name in _SHARED_FIELDS), 2)
    except (KeyError, ValueError, TypeError):  # a field missing (reported below) or not JSON
        key = None
    cached = _shared_cache.get(key) if key is not None else None
    if cached is not None:
        return cached
    data_type = parse_data_type(_require(document, "data_type"))
    chunk_grid = parse_chunk_grid(_require(document, "chunk_grid"))
    fill_value = data_type.fill_value_from_json(_require(document, "fill_value"))
    codecs = CodecPipeline.from_json(_require(document, "codecs"))
    if getattr(data_type, "legacy", False):
        # legacy "structured" is written back as "struct", whose bytes codec must state
        # the byte order the legacy rule implied (little); otherwise our own rewrite of
        # a zarr-python array would not open
        first_chunk = chunk_grid.chunk_shape_at((0,) * chunk_grid.ndim)
        codecs = codecs.evolve_from_spec(ChunkSpec(first_chunk, data_type, fill_value))
    chunk_key_encoding = parse_chunk_key_encoding(_require(document, "chunk_key_encoding"))
    parsed = (data_type, chunk_grid, chunk_key_encoding, fill_value, codecs)
    edges = sum(len(d) for d in getattr(chunk_grid, "chunk_shapes", ()) if isinstance(d, tuple))
    if key is not None and edges <= _SHARED_MAX_EDGES:
        if len(_shared_cache) >= _SHARED_CACHE_SIZE:
            _shared_cache.clear()
        _shared_cache[key] = parsed
    return parsed


@dataclass(frozen=True)
class ArrayMetadata:
    shape: tuple[int, ...]
    data_type: DataType
    chunk_grid: ChunkGrid
    chunk_key_encoding: ChunkKeyEncoding
    fill_value: Any
    codecs: CodecPipeline
    attributes: dict[str, Any] = field(default_factory=dict)
    dimension_names: tuple[str | None, ...] | None = None
    storage_transformers: tuple[dict[str, Any], ...] = ()
    extra_fields: dict[str, Any] = field(default_factory=dict)
    zarr_format: int = 3
    node_type: str = "array"

    def __post_init__(self) -> None:
        self.chunk_grid.validate(self.shape)
        if self.dimension_names is not None:
            parse_dimension_names(list(self.dimension_names), len(self.shape))
        if not self.chunk_grid.is_regular:
            validate_rectilinear_codecs(self.chunk_grid, self.shape, self.codecs)
        self.codecs.validate(self.chunk_spec)

    @classmethod
    def from_json(cls, document: Mapping[str, Any], key: str = "zarr.json") -> "ArrayMetadata":
        with _naming(key):
            parse_zarr_format(_require(document, "zarr_format"))
            parse_node_type(_require(document, "node_type"), "array")
            shape = parse_shape(_require(document, "shape"), "shape")
            data_type, chunk_grid, chunk_key_encoding, fill_value, codecs = _parse_shared_fields(document)
            return cls(
                shape=shape,
                data_type=data_type,
                chunk_grid=chunk_grid,
                chunk_key_encoding=chunk_key_encoding,
                fill_value=fill_value,
                codecs=codecs,
                attributes=parse_attributes(document.get("attributes")),
                dimension_names=parse_dimension_names(document.get("dimension_names"), len(shape)),
                storage_transformers=parse_storage_transformers(document.get("storage_transformers")),
                extra_fields=parse_extra_fields(document, ARRAY_FIELDS),
            )

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "zarr_format": 3,
            "node_type": "array",
            "shape": list(self.shape),
            "data_type": self.data_type.to_json(),
            "chunk_grid": self.chunk_grid.to_json(),
            "chunk_key_encoding": self.chunk_key_encoding.to_json(),
            "fill_value": self.data_type.fill_value_to_json(self.fill_value),
            "codecs": self.codecs.to_json(),
            "attributes": self.attributes,
        }
        if self.dimension_names is not None:
            document["dimension_names"] = list(self.dimension_names)
        if self.storage_transformers:
            document["storage_transformers"] = list(self.storage_transformers)
        document.update(self.extra_fields)
        return document

    def to_bytes(self) -> bytes:
        return encode_json(self.to_json())

    def documents(self) -> dict[str, bytes]:
        """What to store beside the node, by name: ``zarr.json``."""
        return {ZARR_JSON: self.to_bytes()}

    def metadata_keys(self, path: str) -> tuple[str, ...]:
        return (join_key(path, ZARR_JSON),)

    #: why the node cannot be written (None: it can); see zarrx.metadata.draft
    read_only_reason = None

    # -- derived --------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def declared_fill_value(self) -> Any:
        """The fill value as the document states it (v3 always states one)."""
        return self.fill_value

    @property
    def dtype(self) -> np.dtype:
        return self.data_type.numpy_dtype

    @property
    def chunks(self) -> tuple[int, ...] | tuple[tuple[int, ...], ...]:
        """The chunk shape; for a rectilinear grid the edges of each dimension's chunks."""
        grid = self.chunk_grid
        return grid.chunk_shape if grid.is_regular else grid.chunk_edges(self.shape)

    @cached_property
    def chunk_spec(self) -> ChunkSpec:
        """The decoded representation of a chunk (of the largest one, for a rectilinear grid)."""
        return ChunkSpec(self.chunk_grid.largest_chunk_shape(self.shape), self.data_type, self.fill_value)

    @property
    def grid_shape(self) -> tuple[int, ...]:
        return self.chunk_grid.grid_shape(self.shape)

    @property
    def nchunks(self) -> int:
        return math.prod(self.grid_shape)

    def chunk_key(self, chunk_coords: tuple[int, ...]) -> str:
        return self.chunk_key_encoding.encode(chunk_coords)

    def storage_key(self, path: str, chunk_coords: tuple[int, ...]) -> str:
        """The store key of a chunk of the array at ``path``."""
        return join_key(path, self.chunk_key(chunk_coords))

    def chunk_prefix(self, path: str) -> str:
        """The prefix every chunk key of the array at ``path`` starts with."""
        return join_key(path, "")

    def evolve(self, **changes: Any) -> "ArrayMetadata":
        return replace(self, **changes)


@dataclass(frozen=True)
class ConsolidatedMetadata:
    """zarr-python 3's inline consolidated metadata: child documents keyed by relative path."""

    metadata: dict[str, dict[str, Any]]

    @classmethod
    def from_json(cls, value: Any) -> "ConsolidatedMetadata | None":
        if value is None:
            return None
        if not isinstance(value, Mapping):
            raise MetadataError(f"consolidated_metadata: expected an object, found {value!r}")
        kind = value.get("kind", "inline")
        if kind != "inline":
            raise MetadataError(f"consolidated_metadata.kind: expected 'inline', found {kind!r}")
        metadata = value.get("metadata", {})
        if not isinstance(metadata, Mapping) or not all(isinstance(v, Mapping) for v in metadata.values()):
            raise MetadataError("consolidated_metadata.metadata: expected an object of metadata objects")
        return cls({str(path): dict(document) for path, document in metadata.items()})

    def to_json(self) -> dict[str, Any]:
        return {"kind": "inline", "must_understand": False, "metadata": self.metadata}


@dataclass(frozen=True)
class GroupMetadata:
    attributes: dict[str, Any] = field(default_factory=dict)
    consolidated_metadata: ConsolidatedMetadata | None = None
    extra_fields: dict[str, Any] = field(default_factory=dict)
    zarr_format: int = 3
    node_type: str = "group"

    @classmethod
    def from_json(cls, document: Mapping[str, Any], key: str = "zarr.json") -> "GroupMetadata":
        with _naming(key):
            parse_zarr_format(_require(document, "zarr_format"))
            parse_node_type(_require(document, "node_type"), "group")
            return cls(
                attributes=parse_attributes(document.get("attributes")),
                consolidated_metadata=ConsolidatedMetadata.from_json(document.get("consolidated_metadata")),
                extra_fields=parse_extra_fields(document, GROUP_FIELDS),
            )

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {"zarr_format": 3, "node_type": "group", "attributes": self.attributes}
        if self.consolidated_metadata is not None:
            document["consolidated_metadata"] = self.consolidated_metadata.to_json()
        document.update(self.extra_fields)
        return document

    def to_bytes(self) -> bytes:
        return encode_json(self.to_json())

    def documents(self) -> dict[str, bytes]:
        return {ZARR_JSON: self.to_bytes()}

    def metadata_keys(self, path: str) -> tuple[str, ...]:
        return (join_key(path, ZARR_JSON),)

    read_only_reason = None

    def evolve(self, **changes: Any) -> "GroupMetadata":
        return replace(self, **changes)


NodeMetadata = ArrayMetadata | GroupMetadata

NODE_TYPES: dict[str, type[ArrayMetadata] | type[GroupMetadata]] = {
    "array": ArrayMetadata,
    "group": GroupMetadata,
}


def parse_node_metadata(document: Mapping[str, Any] | bytes, key: str = "zarr.json") -> NodeMetadata:
    """Parse a ``zarr.json`` (bytes or an already decoded object) into array or group metadata."""
    if isinstance(document, (bytes, bytearray, memoryview)):
        document = decode_json(bytes(document), key)
    node_type = document.get("node_type")
    cls = NODE_TYPES.get(node_type) if isinstance(node_type, str) else None
    if cls is None:
        with _naming(key):
            parse_zarr_format(document.get("zarr_format"))
            raise MetadataError(f"node_type: expected 'array' or 'group', found {node_type!r}")
    return cls.from_json(document, key)


class _naming:
    """Prefix MetadataErrors raised inside with the document key, once."""

    def __init__(self, key: str) -> None:
        self.key = key

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type | None, error: BaseException | None, traceback: Any) -> bool:
        if error is None:
            return False
        if isinstance(error, MetadataError):
            if not str(error).startswith(f"{self.key}: "):
                raise type(error)(f"{self.key}: {error}") from None
            return False
        if isinstance(error, ZarrxError):
            return False
        if isinstance(error, (TypeError, ValueError, KeyError, IndexError, OverflowError, AttributeError)):
            # a parse_* helper missed a case: still name the document rather than leak a bare error
            raise MetadataError(f"{self.key}: invalid metadata ({type(error).__name__}: {error})") from error
        return False
