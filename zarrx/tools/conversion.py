"""Converting what zarrx reads -- Zarr v2, the 2022 draft layout, Zarr v3 -- to Zarr v3.

Two ways:

* :func:`convert` copies a hierarchy (or one array) into a new Zarr v3 store, in parallel
  with dask (one task per chunk, see :mod:`zarrx.dask`), with a progress bar. Values,
  attributes and dimension names are kept (a v2 ``_ARRAY_DIMENSIONS`` attribute becomes the
  array's ``dimension_names``); the chunks, shards, compressors and filters may be changed on
  the way, which also makes it the tool to re-chunk, shard or re-compress v3 data.
* :func:`migrate_v2_to_v3` rewrites only the metadata of a v2 hierarchy, in place: a
  ``zarr.json`` beside every ``.zarray``/``.zgroup`` (which stay, so v2 readers still work),
  describing the chunks that are already stored -- the ``v2`` chunk key encoding with the
  array's separator, a ``transpose`` for ``order: "F"``, the v2 filters and compressor as v3
  codecs (``blosc``, ``zstd``, ``gzip`` as themselves, everything else as the
  ``numcodecs.<id>`` codecs zarr-python writes), the ``bytes`` codec with the stored byte
  order, or ``vlen-utf8`` / ``vlen-bytes`` for object arrays. This is what zarr-python's
  ``zarr migrate v3`` does. When some array has no v3 equivalent (``vlen-array`` objects,
  mixed byte orders in a structured type, a filter no v3 codec reproduces) nothing is
  written and the error names the array and the reason.

Both refuse data types that exist only in v2 (structured types with subarray fields,
``vlen-array``) with :class:`~zarrx.errors.UnsupportedExtensionError`.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import numpy as np

from zarrx.codecs import BloscCodec, BytesCodec, GzipCodec, TransposeCodec, VLenBytesCodec, VLenUTF8Codec, ZstdCodec
from zarrx.codecs.base import ChunkSpec, Codec
from zarrx.codecs.pipeline import CodecPipeline
from zarrx.codecs.registry import codec_from_json
from zarrx.codecs.sharding import ShardingCodec
from zarrx.codecs.v2 import OBJECT_CODEC_IDS
from zarrx.dtypes.base import DataType
from zarrx.dtypes.v2 import NumpyV2Type, VLenArrayType
from zarrx.errors import ContainsArrayError, ContainsGroupError, MetadataError, UnsupportedExtensionError, UsageError
from zarrx.metadata.chunk_grid import RegularChunkGrid
from zarrx.metadata.chunk_key_encoding import V2ChunkKeyEncoding
from zarrx.metadata.node import ArrayMetadata, GroupMetadata
from zarrx.metadata.protocol import NodeMetadata
from zarrx.metadata.v2 import DIMENSIONS_ATTRIBUTE, ArrayMetadataV2
from zarrx.nodes.api import create_group, open as open_node
from zarrx.nodes.array import Array
from zarrx.nodes.group import Group
from zarrx.nodes.hierarchy import ZARR_JSON, read_node
from zarrx.storage import make_store
from zarrx.storage.paths import join_key, normalize_path
from zarrx.storage.store import Store

__all__ = ["convert", "migrate_v2_to_v3", "v3_metadata_for_v2"]

#: blosc's shuffle as numcodecs numbers it -> the v3 name (-1, AUTOSHUFFLE, is resolved by item size)
_BLOSC_SHUFFLES = {0: "noshuffle", 1: "shuffle", 2: "bitshuffle"}


# -- v2 codecs as v3 codecs -----------------------------------------------------------------


def _blosc(config: dict[str, Any], item_size: int) -> Codec:
    shuffle = config.get("shuffle", 1)
    name = _BLOSC_SHUFFLES.get(shuffle, "bitshuffle" if item_size == 1 else "shuffle")
    return BloscCodec(cname=config.get("cname", "lz4"), clevel=config.get("clevel", 5), shuffle=name,
                      typesize=max(1, item_size), blocksize=config.get("blocksize", 0))  # fmt: skip


#: v2 compressors with a core v3 codec of the same bytes (as zarr-python's ``migrate v3`` maps them)
V3_COMPRESSORS = {
    "blosc": _blosc,
    "zstd": lambda config, item_size: ZstdCodec(level=config.get("level", 0), checksum=bool(config.get("checksum", False))),
    "gzip": lambda config, item_size: GzipCodec(level=config.get("level", 5)),
}


def _numcodecs_codec(config: dict[str, Any], field_name: str) -> Codec:
    """The ``numcodecs.<id>`` v3 codec for a v2 codec configuration."""
    name = f"numcodecs.{config['id']}"
    configuration = {key: value for key, value in config.items() if key != "id"}
    try:
        codec = codec_from_json({"name": name, "configuration": configuration}, field_name)
    except UnsupportedExtensionError:
        raise UnsupportedExtensionError(
            f"{field_name}: the v2 codec {config['id']!r} has no Zarr v3 codec in zarrx ({name})"
        ) from None
    if codec is None:  # codec_from_json drops only codecs marked must_understand: false
        raise UnsupportedExtensionError(f"{field_name}: no Zarr v3 codec for {config!r}")
    return codec


def v2_compressor_as_v3(config: dict[str, Any], item_size: int, field_name: str = "compressor") -> Codec:
    build = V3_COMPRESSORS.get(config["id"])
    return build(config, item_size) if build is not None else _numcodecs_codec(config, field_name)


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


def v3_metadata_for_v2(metadata: ArrayMetadataV2, where: str = "array") -> ArrayMetadata:
    """Zarr v3 metadata that reads the chunks of a v2 array as they are stored.

    Raises UnsupportedExtensionError (naming ``where``) when the chunks cannot be described in v3.
    """
    _check_v3_type(metadata.data_type, where)
    codecs: list[Codec] = []
    if metadata.order == "F" and metadata.ndim > 1:
        # v2 F order lays a chunk out as its transpose in C order (zarr-python's migrate does the same)
        codecs.append(TransposeCodec(order=tuple(reversed(range(metadata.ndim)))))
    serializer, filters = _serializer(metadata, where)
    codecs += [_numcodecs_codec(config, f"{where}: filters[{i}]") for i, config in enumerate(filters)]
    codecs.append(serializer)
    if metadata.compressor is not None:
        codecs.append(v2_compressor_as_v3(metadata.compressor, metadata.stored_dtype.itemsize, f"{where}: compressor"))
    spec = ChunkSpec(metadata.chunks, metadata.data_type, metadata.fill_value)
    try:
        pipeline = CodecPipeline.from_codecs(codecs).evolve_from_spec(spec)
        attributes, dimension_names = _v3_attributes(metadata)
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


def _check_v3_type(data_type: DataType, where: str) -> None:
    if isinstance(data_type, (NumpyV2Type, VLenArrayType)):
        raise UnsupportedExtensionError(f"{where}: the v2 data type {data_type.to_json()!r} has no Zarr v3 equivalent")


def _v3_attributes(metadata: NodeMetadata) -> tuple[dict[str, Any], tuple[str | None, ...] | None]:
    """Attributes and dimension names for v3: a valid v2 ``_ARRAY_DIMENSIONS`` becomes ``dimension_names``."""
    attributes = dict(metadata.attributes)
    names = getattr(metadata, "dimension_names", None)  # groups have none
    if metadata.zarr_format == 2 and names is not None:
        attributes.pop(DIMENSIONS_ATTRIBUTE, None)
    return attributes, names


# -- migrate in place -------------------------------------------------------------------------


def migrate_v2_to_v3(store: Any, path: str = "", *, storage_options: dict[str, Any] | None = None) -> Array | Group:
    """Write Zarr v3 metadata beside the v2 metadata of the hierarchy at ``path``, keeping every chunk.

    Every node below ``path`` gets a ``zarr.json`` (written in one batch, after all of them
    were worked out); ``.zarray``, ``.zgroup``, ``.zattrs`` and the chunks are untouched.
    Returns the node opened as v3.

    Raises
    ------
    UnsupportedExtensionError
        Some array has no v3 equivalent (see the module docstring); nothing is written.
    ContainsArrayError, ContainsGroupError
        A ``zarr.json`` already exists there (migrated before?); nothing is written.

    Examples
    --------
    >>> import zarrx, numcodecs
    >>> store = {}
    >>> arr = zarrx.create_array(store, "x", shape=(4,), chunks=(2,), dtype="<i2", zarr_format=2,
    ...                          compressors=numcodecs.Zlib(level=1), fill_value=0)
    >>> arr[:] = [1, 2, 3, 4]
    >>> root = zarrx.migrate_v2_to_v3(store)
    >>> root["x"].metadata.codecs.to_json()[-1]["name"], root["x"][:].tolist()
    ('numcodecs.zlib', [1, 2, 3, 4])
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
        if metadata.node_type == "array":
            new: Any = v3_metadata_for_v2(metadata, f"array {'/' + node_path!r}")
        else:
            new = GroupMetadata(attributes=dict(metadata.attributes))
        documents[join_key(node_path, ZARR_JSON)] = new.to_bytes()
    existing = [key for key, value in zstore.get_many(list(documents)).items() if value is not None]
    if existing:
        raise (ContainsArrayError if node.metadata.node_type == "array" else ContainsGroupError)(
            f"{existing[0]}: Zarr v3 metadata already exists (the hierarchy was migrated before?); "
            f"{len(existing)} node(s) have a zarr.json; remove them to migrate again"
        )
    zstore.set_many(documents)
    return open_node(zstore, path, mode="r", zarr_format=3)


# -- convert by copying -----------------------------------------------------------------------


def _normalize_chunks(
    value: Any, array: Array, name: str, current: tuple[int, ...] | None = None
) -> tuple[int, ...] | None:
    """``value`` for this array: an int for every axis, -1 for a whole axis, lengths past the shape
    cut to it. A mapping gives lengths by dimension name (``{"time": 24}``), the array's other
    dimensions keeping ``current``; None when ``value`` says nothing for this array."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        names = array.dimension_names or (None,) * array.ndim
        if current is None or not any(dim in value for dim in names):
            return None
        value = tuple(value.get(dim, length) if dim is not None else length for dim, length in zip(names, current))
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value,) * array.ndim
    value = tuple(value)
    if len(value) != array.ndim:
        raise UsageError(
            f"{name}: {value} has {len(value)} lengths but array {array.name!r} has {array.ndim} dimensions "
            f"(for arrays of different ranks, give lengths by dimension name: {{'time': 24, ...}})"
        )
    if any(isinstance(c, bool) or not isinstance(c, (int, np.integer)) or (c < 1 and c != -1) for c in value):
        raise UsageError(f"{name}: expected positive lengths (or -1 for a whole axis), found {value}")
    return tuple(max(1, s) if c == -1 else min(int(c), max(1, s)) for c, s in zip(value, array.shape))


def _kept_codecs(array: Array) -> tuple[list[Codec], list[Codec]]:
    """The source's array -> array and bytes -> bytes codecs, as v3 codecs (inner ones when sharded)."""
    metadata = array.metadata
    if metadata.zarr_format == 3:
        pipeline = metadata.codecs
        if isinstance(pipeline.array_bytes, ShardingCodec):
            pipeline = pipeline.array_bytes.codecs
        return list(pipeline.array_array), list(pipeline.bytes_bytes)
    filters: list[Codec] = []
    try:
        filters = [_numcodecs_codec(c, "filters") for c in metadata.filters if c["id"] not in OBJECT_CODEC_IDS]
    except MetadataError:
        filters = []  # the values are copied decoded: filters no v3 codec reproduces are not needed
    compressors: list[Codec] = []
    if metadata.compressor is not None and metadata.compressor["id"] not in OBJECT_CODEC_IDS:
        try:
            compressors = [v2_compressor_as_v3(metadata.compressor, metadata.stored_dtype.itemsize)]
        except MetadataError:
            compressors = [ZstdCodec(level=0)]
    return filters, compressors


def _create_kwargs(array: Array, chunks: Any, shards: Any, compressors: Any, filters: Any) -> dict[str, Any]:
    metadata = array.metadata
    _check_v3_type(metadata.data_type, f"array {array.name!r}")
    new_chunks = _normalize_chunks(chunks, array, "chunks", array.chunks) or array.chunks
    new_shards = _normalize_chunks(shards, array, "shards", array.shards or new_chunks)
    if new_shards is not None:  # a shard cut to the shape still holds whole chunks
        new_shards = tuple(-(-s // c) * c for s, c in zip(new_shards, new_chunks))
    elif tuple(new_chunks) == tuple(array.chunks):
        new_shards = array.shards  # the chunks are kept, and so are the shards
    kept_filters, kept_compressors = _kept_codecs(array)
    attributes, dimension_names = _v3_attributes(metadata)
    return dict(
        dtype=metadata.data_type,
        chunks=new_chunks,
        shards=new_shards,
        fill_value=metadata.fill_value,
        filters=kept_filters if _is_keep(filters) else filters,
        compressors=kept_compressors if _is_keep(compressors) else compressors,
        attributes=attributes,
        dimension_names=dimension_names,
    )


def _is_keep(value: Any) -> bool:
    return isinstance(value, str) and value == "keep"


def convert(
    src: Any,
    dst: Any,
    *,
    path: str = "",
    chunks: Any = None,
    shards: Any = None,
    compressors: Any = "keep",
    filters: Any = "keep",
    storage_options: dict[str, Any] | None = None,
    dst_storage_options: dict[str, Any] | None = None,
    overwrite: bool = False,
    progress: bool = True,
) -> Array | Group:
    """Copy the node at ``path`` of ``src`` (any format zarrx reads) to the root of ``dst`` as Zarr v3.

    Groups are copied with everything below them. Chunks are copied in parallel by dask, one
    task per (new) chunk or shard.

    Parameters
    ----------
    src, dst
        Anything :func:`zarrx.open` takes (paths, URLs, stores).
    path
        The node of ``src`` to copy; it becomes the root of ``dst``.
    chunks
        New chunk shape for every array (an int for all dimensions; -1 for a whole axis), or
        lengths by dimension name for hierarchies of arrays of different ranks
        (``{"time": 24, "lat": 90}``: other dimensions, and arrays without those names, keep
        theirs); None keeps each array's chunks (its inner chunks when sharded).
    shards
        Shard shape (a multiple of the chunks; a mapping by dimension name as for ``chunks``);
        None keeps the source's shards when an array's chunks are kept, and writes no shards
        otherwise.
    compressors, filters
        ``"keep"`` (default) keeps the source's (a v2 compressor or filter without a v3 codec
        becomes zstd / is dropped: the values are copied decoded); otherwise as for
        :func:`zarrx.create_array` (``"auto"``, None, codecs or their JSON).
    storage_options, dst_storage_options
        fsspec options for ``src`` and ``dst`` (``dst`` uses ``storage_options`` unless given).
    overwrite
        Replace what is at the root of ``dst``; otherwise a non-empty ``dst`` is an error.
    progress
        Show dask's progress bar.

    Examples
    --------
    >>> import zarrx, numcodecs
    >>> v2 = zarrx.create_array({}, shape=(6,), chunks=(2,), dtype="f4", zarr_format=2,
    ...                         dimension_names=["t"], compressors=numcodecs.Zlib())
    >>> v2[:] = range(6)
    >>> v3 = zarrx.convert(v2.store, {}, chunks=3, progress=False)
    >>> v3.metadata.zarr_format, v3.chunks, v3.dimension_names, v3[:].tolist()
    (3, (3,), ('t',), [0.0, 1.0, 2.0, 3.0, 4.0, 5.0])
    """
    from zarrx.dask.write import to_zarr  # a layer below the tools; imported here so that import zarrx does not import dask

    source_store = make_store(src, mode="r", storage_options=storage_options)
    target_store = make_store(dst, mode="a", storage_options=dst_storage_options or storage_options)
    if _same_location(source_store, target_store):
        raise UsageError(
            f"dst is the source store itself ({target_store!r}); convert into a new location "
            "(or use migrate_v2_to_v3 to add v3 metadata in place)"
        )
    source = open_node(source_store, normalize_path(path, allow_reserved=True), mode="r")
    arrays: list[tuple[str, Array]] = []
    groups: list[tuple[str, Group]] = []
    if isinstance(source, Array):
        arrays.append(("", source))
    else:
        groups.append(("", source))
        for name, node in source.members(max_depth=None):
            (arrays if isinstance(node, Array) else groups).append((name, node))
    # every array's settings first: a refusal leaves dst untouched
    plans = [(name, array, _create_kwargs(array, chunks, shards, compressors, filters)) for name, array in arrays]
    _check_target(target_store, overwrite)
    for name, group in groups:
        attributes, _ = _v3_attributes(group.metadata)
        create_group(target_store, name, attributes=attributes, overwrite=overwrite and not name)
    writes = []
    for name, array, kwargs in plans:
        writes.append(
            to_zarr(array.to_dask(), target_store, name, compute=False, align="rechunk",
                    overwrite=overwrite and not name, **kwargs)  # fmt: skip
        )
    _compute(writes, progress)
    return open_node(target_store, "", mode="r+")


def _same_location(a: Store, b: Store) -> bool:
    """Whether two stores hold the same data (one folder, one in-memory mapping, one URL)."""
    return a.location == b.location


def _check_target(store: Store, overwrite: bool) -> None:
    existing = read_node(store, "")
    if existing is not None and not overwrite:
        error = ContainsArrayError if existing.node_type == "array" else ContainsGroupError
        raise error(
            f"the destination {store!r} already holds a Zarr {existing.node_type}; "
            "pass overwrite=True (--overwrite) to replace it"
        )


def _compute(writes: Iterable[Any], progress: bool) -> None:
    import dask

    writes = list(writes)
    if not writes:
        return
    if progress:
        from dask.diagnostics import ProgressBar

        with ProgressBar():
            dask.compute(*writes)
    else:
        dask.compute(*writes)
