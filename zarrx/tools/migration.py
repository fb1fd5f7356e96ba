"""Zarr v2 metadata as Zarr v3 metadata, without changing a value anyone reads.

:func:`migrate_v2_to_v3` writes a ``zarr.json`` beside every ``.zarray``/``.zgroup`` of a v2
hierarchy (which stay, so v2 readers still work), describing the chunks that are already
stored: the ``v2`` chunk key encoding with the array's separator, a ``transpose`` for
``order: "F"``, the v2 filters and compressor as v3 codecs (:mod:`zarrx.codecs.normalize`:
``blosc``, ``zstd``, ``gzip`` as themselves, everything else as the ``numcodecs.<id>`` codecs
zarr-python writes), the ``bytes`` codec with the stored byte order, or ``vlen-utf8`` /
``vlen-bytes`` for object arrays -- what zarr-python's ``zarr migrate v3`` does. When some array
has no v3 equivalent (``vlen-array`` objects, mixed byte orders in a structured type, a filter no
v3 codec reproduces) nothing is written and the error names the array and the reason.
:func:`zarrx.convert` uses the same attribute rules for its copies.

**Decoded values stay the same** (:func:`v3_attributes`). A v2 ``_ARRAY_DIMENSIONS`` attribute
becomes ``dimension_names``. xarray reads a v2 array's Zarr ``fill_value`` as its CF
``_FillValue`` -- the value it masks as missing (NaN) -- but a v3 ``fill_value`` only says what
missing chunks hold; there xarray masks the ``_FillValue`` *attribute*, base64 text for floats
(``FillValueCoder`` of xarray's zarr backend). So every v2 array with a fill value gets that
attribute in v3 (booleans, integers, floats, complex), or ``missing_value`` for strings (for
which xarray's v3 reader takes no ``_FillValue``); a v2 fill value of ``null`` masks nothing and
adds nothing. Byte-string and date arrays have no v3 form xarray masks by: their conversion
warns (:class:`MaskLostWarning`) naming the array. ``scale_factor``, ``add_offset``,
``units``, ``calendar``, ``dtype`` and the string encodings are attributes, kept as they are.

**Crash safety.** The documents are worked out first (a refusal writes nothing), then the
members' ``zarr.json`` are written and the root's last: until it exists the hierarchy is v2
only, and a rerun after an interruption finds the members' documents equal to what it would
write and completes them. When the v2 hierarchy had consolidated metadata (``.zmetadata``), the
v3 root gets zarr-python's inline consolidated metadata too.
"""

from __future__ import annotations

import base64
import struct
import warnings
from typing import Any

import numpy as np

from zarrx.codecs import BytesCodec, TransposeCodec, VLenBytesCodec, VLenUTF8Codec
from zarrx.codecs.base import ChunkSpec, Codec
from zarrx.codecs.normalize import codec_from_numcodecs
from zarrx.codecs.pipeline import CodecPipeline
from zarrx.codecs.v2 import OBJECT_CODEC_IDS
from zarrx.dtypes.base import DataType
from zarrx.dtypes.v2 import NumpyV2Type, VLenArrayType
from zarrx.errors import ContainsArrayError, ContainsGroupError, MetadataError, UnsupportedExtensionError
from zarrx.metadata.chunk_grid import RegularChunkGrid
from zarrx.metadata.chunk_key_encoding import V2ChunkKeyEncoding
from zarrx.metadata.node import ArrayMetadata, ConsolidatedMetadata, GroupMetadata, decode_json
from zarrx.metadata.protocol import NodeMetadata
from zarrx.metadata.v2 import DIMENSIONS_ATTRIBUTE, ArrayMetadataV2
from zarrx.nodes.api import open as open_node
from zarrx.nodes.array import Array
from zarrx.nodes.group import Group
from zarrx.nodes.hierarchy import ZARR_JSON, read_node
from zarrx.storage import make_store
from zarrx.storage.paths import join_key, normalize_path
from zarrx.storage.store import Store

__all__ = [
    "MaskLostWarning",
    "check_v3_type",
    "consolidated_root",
    "migrate_v2_to_v3",
    "v3_attributes",
    "v3_fill_value_attribute",
    "v3_metadata_for_v2",
]


class MaskLostWarning(UserWarning):
    """A v2 fill value that xarray masks has no v3 form xarray masks by (byte strings, dates)."""


# -- values xarray decodes the same -----------------------------------------------------------


def _float_text(value: Any) -> str:
    return base64.standard_b64encode(struct.pack("<d", float(value))).decode()


#: NumPy kind -> the v3 ``_FillValue`` attribute xarray's zarr backend decodes (its FillValueCoder)
_FILL_VALUE_FORMS = {
    "b": bool,
    "i": int,
    "u": int,
    "f": _float_text,
    "c": lambda value: [_float_text(complex(value).real), _float_text(complex(value).imag)],
}
#: kinds whose mask goes to ``missing_value`` (xarray's v3 reader refuses a ``_FillValue`` there)
_MISSING_VALUE_KINDS = {"U", "T", "O"}
#: kinds xarray's CF decoding never masks (dates and structures are read as they are)
_UNMASKED_KINDS = {"M", "m", "V"}


def v3_fill_value_attribute(value: Any, dtype: np.dtype) -> tuple[str, Any] | None:
    """``(attribute, value)`` by which xarray masks ``value`` in a v3 array of ``dtype``, or None.

    Examples
    --------
    >>> v3_fill_value_attribute(np.nan, np.dtype("float32")), v3_fill_value_attribute(-32768, np.dtype("int16"))
    (('_FillValue', 'AAAAAAAA+H8='), ('_FillValue', -32768))
    """
    form = _FILL_VALUE_FORMS.get(dtype.kind)
    if form is not None:
        return "_FillValue", form(value)
    if dtype.kind in _MISSING_VALUE_KINDS and isinstance(value, str):
        return "missing_value", value
    return None


def _fill_value_attribute(value: Any, dtype: np.dtype) -> tuple[str, Any] | None:
    try:
        return v3_fill_value_attribute(value, dtype)
    except (TypeError, ValueError, OverflowError):  # a _FillValue attribute that is no value of the type
        return None


def _v2_mask(metadata: ArrayMetadataV2) -> Any:
    """What xarray's v2 reader masks: the Zarr fill value, else a ``_FillValue`` attribute."""
    if not metadata.fill_value_is_null:
        return metadata.fill_value
    return metadata.attributes.get("_FillValue")


def v3_attributes(metadata: NodeMetadata, where: str = "") -> tuple[dict[str, Any], tuple[str | None, ...] | None]:
    """Attributes and dimension names of the v3 copy of a node, read by xarray as the source is.

    A v2 ``_ARRAY_DIMENSIONS`` becomes the dimension names, a v2 array's fill value the CF
    attribute xarray masks by in v3 (see the module docstring). v3 nodes keep theirs.
    """
    attributes = dict(metadata.attributes)
    names = getattr(metadata, "dimension_names", None)  # groups have none
    if metadata.zarr_format != 2:
        return attributes, names
    if names is not None:
        attributes.pop(DIMENSIONS_ATTRIBUTE, None)
    if isinstance(metadata, ArrayMetadataV2):
        attributes.pop("_FillValue", None)
        mask = _v2_mask(metadata)
        dtype = metadata.data_type.numpy_dtype
        if mask is not None and dtype.kind not in _UNMASKED_KINDS:
            attribute = _fill_value_attribute(mask, dtype)
            if attribute is None:
                mask = mask.item() if isinstance(mask, np.generic) else mask
                warnings.warn(
                    f"{where or 'array'}: xarray reads the v2 fill value {mask!r} of this {dtype} array as missing "
                    "(NaN), but has no v3 attribute to mask a value of this type by; after the conversion "
                    f"xarray reads {mask!r} where it read NaN",
                    MaskLostWarning,
                    stacklevel=3,
                )
            else:
                attributes[attribute[0]] = attribute[1]
    return attributes, names


# -- v2 arrays as v3 metadata -----------------------------------------------------------------


def _byte_order(dtype: np.dtype) -> set[str]:
    """The byte orders ('<' or '>') of the multi-byte scalars in a stored dtype."""
    if dtype.names is not None:
        return set().union(*(_byte_order(dtype.fields[name][0]) for name in dtype.names))
    if dtype.subdtype is not None:
        return _byte_order(dtype.subdtype[0])
    return {dtype.str[0]} if dtype.str[0] in "<>" and dtype.itemsize > 1 and dtype.kind != "V" else set()


def _serializer(metadata: ArrayMetadataV2, where: str) -> tuple[Codec, list[dict[str, Any]]]:
    """The v3 array -> bytes codec for the stored dtype, and the filters left to map."""
    filters = list(metadata.filters)
    if metadata.stored_dtype.kind == "O":
        codec_id = metadata.data_type.name
        if filters and filters[0]["id"] in OBJECT_CODEC_IDS and len(filters) == 1 and codec_id in ("string", "bytes"):
            return (VLenUTF8Codec() if codec_id == "string" else VLenBytesCodec()), []
        raise UnsupportedExtensionError(
            f"{where}: object arrays migrate to v3 only with a lone vlen-utf8 or vlen-bytes filter, found "
            f"filters {[f['id'] for f in filters]} (convert copies them instead, where a v3 type exists)"
        )
    orders = _byte_order(metadata.stored_dtype)
    if len(orders) > 1:
        raise UnsupportedExtensionError(
            f"{where}: the fields of dtype {metadata.stored_dtype} have mixed byte orders; the v3 bytes codec "
            "has one (use zarrx.convert to copy the data instead)"
        )
    endian = {"<": "little", ">": "big"}.get(next(iter(orders), ""), None)
    return BytesCodec(endian=endian), filters


def check_v3_type(data_type: DataType, where: str) -> None:
    """Refuse the data types that exist only in Zarr v2."""
    if isinstance(data_type, (NumpyV2Type, VLenArrayType)):
        raise UnsupportedExtensionError(f"{where}: the v2 data type {data_type.to_json()!r} has no Zarr v3 equivalent")


def _v2_codec_as_v3(config: dict[str, Any], field_name: str) -> Codec:
    try:
        return codec_from_numcodecs(config, field_name)
    except UnsupportedExtensionError:
        raise
    except MetadataError as error:
        raise UnsupportedExtensionError(f"{field_name}: the v2 codec {config['id']!r} has no Zarr v3 codec ({error})") from None


def v3_metadata_for_v2(metadata: ArrayMetadataV2, where: str = "array") -> ArrayMetadata:
    """Zarr v3 metadata that reads the chunks of a v2 array as they are stored.

    Raises UnsupportedExtensionError (naming ``where``) when the chunks cannot be described in v3.

    Examples
    --------
    >>> from zarrx.nodes.metadata_builder import build_array_metadata_v2
    >>> v2 = build_array_metadata_v2(shape=(4,), dtype=">i2", chunks=(2,), fill_value=-1, compressors={"id": "zlib"})
    >>> [codec["name"] for codec in v3_metadata_for_v2(v2).to_json()["codecs"]]
    ['bytes', 'numcodecs.zlib']
    """
    check_v3_type(metadata.data_type, where)
    codecs: list[Codec] = []
    if metadata.order == "F" and metadata.ndim > 1:
        # v2 F order lays a chunk out as its transpose in C order (zarr-python's migrate does the same)
        codecs.append(TransposeCodec(order=tuple(reversed(range(metadata.ndim)))))
    serializer, filters = _serializer(metadata, where)
    codecs += [_v2_codec_as_v3(config, f"{where}: filters[{i}]") for i, config in enumerate(filters)]
    codecs.append(serializer)
    if metadata.compressor is not None:
        codecs.append(_v2_codec_as_v3(metadata.compressor, f"{where}: compressor"))
    spec = ChunkSpec(metadata.chunks, metadata.data_type, metadata.fill_value)
    try:
        pipeline = CodecPipeline.from_codecs(codecs).evolve_from_spec(spec)
        attributes, dimension_names = v3_attributes(metadata, where)
        return ArrayMetadata(
            shape=metadata.shape,
            data_type=metadata.data_type,
            chunk_grid=RegularChunkGrid(metadata.chunks),
            chunk_key_encoding=V2ChunkKeyEncoding(metadata.dimension_separator),
            fill_value=metadata.fill_value,
            codecs=pipeline,
            attributes=attributes,
            dimension_names=dimension_names,
        )
    except UnsupportedExtensionError:
        raise
    except MetadataError as error:
        raise UnsupportedExtensionError(f"{where}: no Zarr v3 equivalent of the v2 chunk encoding: {error}") from None


def consolidated_root(root: GroupMetadata, documents: dict[str, bytes], root_path: str) -> GroupMetadata:
    """``root`` with zarr-python's inline consolidated metadata of the member ``documents``
    (``zarr.json`` keys below ``root_path`` -> bytes)."""
    prefix = join_key(root_path, "")
    members = {}
    for key, raw in documents.items():
        member = key.removeprefix(prefix).removesuffix("/" + ZARR_JSON)
        if key != join_key(root_path, ZARR_JSON):
            document = decode_json(raw, key)
            document.pop("consolidated_metadata", None)
            members[member] = document
    return root.evolve(consolidated_metadata=ConsolidatedMetadata(dict(sorted(members.items()))))


# -- migrate in place -------------------------------------------------------------------------


def _is_consolidated(store: Store, path: str) -> bool:
    metadata = read_node(store, path, zarr_format=2, consolidated=True)
    return metadata is not None and getattr(metadata, "consolidated_metadata", None) is not None


def migrate_v2_to_v3(store: Any, path: str = "", *, storage_options: dict[str, Any] | None = None) -> Array | Group:
    """Write Zarr v3 metadata beside the v2 metadata of the hierarchy at ``path``, keeping every chunk.

    Every node below ``path`` gets a ``zarr.json``, the root's last (see the module docstring);
    ``.zarray``, ``.zgroup``, ``.zattrs``, ``.zmetadata`` and the chunks are untouched. A rerun
    after an interruption completes the migration. Returns the node opened as v3.

    Raises
    ------
    UnsupportedExtensionError
        Some array has no v3 equivalent (see the module docstring); nothing is written.
    ContainsArrayError, ContainsGroupError
        The node has Zarr v3 metadata already (migrated before), or a member has a ``zarr.json``
        that is not the one this migration writes; nothing is written.

    Examples
    --------
    >>> import zarrx, numcodecs
    >>> store = {}
    >>> arr = zarrx.create_array(store, "x", shape=(4,), chunks=(2,), dtype="<i2", zarr_format=2,
    ...                          compressors=numcodecs.Zlib(level=1), fill_value=0)
    >>> arr[:] = [1, 2, 3, 4]
    >>> root = zarrx.migrate_v2_to_v3(store)
    >>> root["x"].metadata.codecs.to_json()[-1]["name"], root["x"][:].tolist(), root["x"].attrs["_FillValue"]
    ('numcodecs.zlib', [1, 2, 3, 4], 0)
    """
    zstore = make_store(store, mode="r+", storage_options=storage_options)
    path = normalize_path(path)
    node = open_node(zstore, path, mode="r+", zarr_format=2)
    nodes = [(path, node)]
    if isinstance(node, Group):
        nodes += [(join_key(path, name), child) for name, child in node.members(max_depth=None)]
    documents = {}
    for node_path, child in nodes:
        metadata = child.metadata
        where = f"array {'/' + node_path!r}"
        new: Any = v3_metadata_for_v2(metadata, where) if metadata.node_type == "array" else None
        if new is None:
            new = GroupMetadata(attributes=v3_attributes(metadata, where)[0])
        documents[join_key(node_path, ZARR_JSON)] = new
    root_key = join_key(path, ZARR_JSON)
    if isinstance(node, Group) and _is_consolidated(zstore, path):
        members = {key: value.to_bytes() for key, value in documents.items() if key != root_key}
        documents[root_key] = consolidated_root(documents[root_key], members, path)
    encoded = {key: value.to_bytes() for key, value in documents.items()}
    _check_not_migrated(zstore, encoded, root_key, node.metadata.node_type)
    members = {key: value for key, value in encoded.items() if key != root_key}
    if members:
        zstore.set_many(members)
    zstore.set(root_key, encoded[root_key])  # the commit point: from now on the hierarchy is v3 too
    return open_node(zstore, path, mode="r", zarr_format=3)


def _check_not_migrated(store: Store, documents: dict[str, bytes], root_key: str, node_type: str) -> None:
    """Refuse a node migrated before, and members whose ``zarr.json`` this migration would not write
    (what an interrupted migration left is exactly what it writes again)."""
    existing = {key: value for key, value in store.get_many(list(documents)).items() if value is not None}
    error = ContainsArrayError if node_type == "array" else ContainsGroupError
    if root_key in existing:
        raise error(
            f"{root_key}: Zarr v3 metadata already exists (the hierarchy was migrated before); "
            f"{len(existing)} node(s) have a zarr.json; remove them to migrate again"
        )
    differing = sorted(key for key, value in existing.items() if decode_json(value, key) != decode_json(documents[key], key))
    if differing:
        raise error(
            f"{differing[0]}: a Zarr v3 document that this migration would not write is there "
            f"({len(differing)} such member(s)); the hierarchy mixes formats: remove them to migrate"
        )
