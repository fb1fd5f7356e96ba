"""Converting what zarrx reads -- Zarr v2, the 2022 draft layout, Zarr v3 -- to Zarr v3.

Two ways:

* :func:`convert` copies a hierarchy (or one array) into a new Zarr v3 store, in parallel
  with dask (one task per new shard, or per few new chunks: each task reads its part of the
  source and writes it, so memory holds a few of them per worker, never an array), with a
  progress bar.
  The chunks, shards, compressors and filters may be changed on the way, which also makes it
  the tool to re-chunk, shard or re-compress v3 data.
* :func:`~zarrx.tools.migration.migrate_v2_to_v3` rewrites only the metadata of a v2
  hierarchy, in place (:mod:`zarrx.tools.migration`).

**Values never change.** The copy holds the source's values, attributes and dimension names,
and xarray decodes it as it decodes the source (the CF rules of :func:`v3_attributes`: a v2
fill value becomes the ``_FillValue`` attribute xarray masks by in v3). Consolidated metadata
is consolidated again (or on request, ``consolidate=True``).

**Nothing is written before everything is checked.** Every array's new metadata is built
first, by the code :func:`zarrx.create_array` runs, so shards that are not a multiple of the
chunks, shapes of the wrong rank and unknown compressors are refused with the errors
``create_array`` gives (naming the array), before the destination is touched.

**An interrupted convert never looks complete** (:mod:`zarrx.tools.convert_job`): the
destination carries a mark until its last chunk and document are written, its metadata is
written last, ``zarrx verify`` reports it incomplete, and running the same convert again
resumes it, copying only what is not already stored and verified.

Both refuse data types that exist only in v2 (structured types with subarray fields,
``vlen-array``) with :class:`~zarrx.errors.UnsupportedExtensionError`.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import itertools
import math
import os
import posixpath
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from zarrx.codecs.base import Codec
from zarrx.codecs.normalize import codec_from_numcodecs
from zarrx.codecs.sharding import ShardingCodec
from zarrx.codecs.v2 import OBJECT_CODEC_IDS
from zarrx.errors import ContainsArrayError, ContainsGroupError, MetadataError, UsageError
from zarrx.metadata.node import ArrayMetadata, GroupMetadata, decode_json
from zarrx.nodes.api import open as open_node
from zarrx.nodes.array import Array
from zarrx.nodes.group import Group
from zarrx.nodes.hierarchy import ZARR_JSON, read_node
from zarrx.nodes.metadata_builder import build_array_metadata, parse_chunks, parse_shards
from zarrx.storage import make_store
from zarrx.storage.paths import join_key, normalize_path
from zarrx.storage.store import Store
from zarrx.tools.convert_job import JOB_KEY, ConvertJob, read_job, remove_temporary_files, verified_objects
from zarrx.tools.migration import check_v3_type, consolidated_root, migrate_v2_to_v3, v3_attributes, v3_metadata_for_v2

__all__ = ["convert", "migrate_v2_to_v3", "v3_metadata_for_v2"]


# -- the new metadata of every array, checked before anything is written ---------------------


def _lengths(value: Any, array: Array, current: tuple[int, ...]) -> tuple[Any, ...] | None:
    """``value`` for this array as one length per axis (-1 kept), None when it says nothing for it.

    A mapping gives lengths by dimension name (``{"time": 24}``), the array's other dimensions
    keeping ``current``; an int is every axis."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        names = array.dimension_names or (None,) * array.ndim
        if not any(dim in value for dim in names):
            return None
        return tuple(value.get(dim, length) if dim is not None else length for dim, length in zip(names, current))
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return (int(value),) * array.ndim
    return tuple(value) if isinstance(value, (list, tuple)) else value


def _whole_axes(lengths: tuple[Any, ...], sizes: tuple[int, ...]) -> tuple[Any, ...]:
    """-1 (a whole axis) replaced by the axis size (at least 1)."""
    if not isinstance(lengths, tuple) or len(lengths) != len(sizes):
        return lengths  # create_array says what is wrong with it
    return tuple(max(1, size) if length == -1 else length for length, size in zip(lengths, sizes))


def _cut(lengths: tuple[int, ...], unit: tuple[int, ...], shape: tuple[int, ...]) -> tuple[int, ...]:
    """Lengths past the shape cut to the smallest multiple of ``unit`` covering it."""
    return tuple(min(length, max(1, math.ceil(size / step)) * step) for length, step, size in zip(lengths, unit, shape))


def _grid(array: Array, chunks: Any, shards: Any) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    """The new chunk and shard shapes, checked as :func:`zarrx.create_array` checks them."""
    shape = array.shape
    if chunks is None and shards is None and any(isinstance(c, tuple) for c in array.chunks):
        return array.chunks, array.shards  # a rectilinear grid kept as it is (create_array checks it)
    given_chunks = _lengths(chunks, array, array.chunks)
    new_chunks = _whole_axes(given_chunks, shape) if given_chunks is not None else array.chunks
    new_chunks = parse_chunks(new_chunks, shape, array.metadata.data_type)
    given_shards = _lengths(shards, array, array.shards or new_chunks)
    if given_shards is None:
        # the chunks kept, the shards too; new chunks alone are not sharded
        return _cut(new_chunks, (1,) * len(shape), shape), array.shards if given_chunks is None else None
    new_shards = _whole_axes(given_shards, tuple(max(1, math.ceil(s / c)) * c for s, c in zip(shape, new_chunks)))
    new_shards = parse_shards(new_shards, new_chunks)
    cut_chunks = _cut(new_chunks, (1,) * len(shape), shape)
    return cut_chunks, _cut(new_shards, cut_chunks, shape)


def _kept_codecs(array: Array) -> tuple[list[Codec], list[Codec]]:
    """The source's array -> array and bytes -> bytes codecs, as v3 codecs (inner ones when sharded)."""
    metadata = array.metadata
    if metadata.zarr_format == 3:
        pipeline = metadata.codecs
        if isinstance(pipeline.array_bytes, ShardingCodec):
            pipeline = pipeline.array_bytes.codecs
        return list(pipeline.array_array), list(pipeline.bytes_bytes)
    try:
        filters = [codec_from_numcodecs(c, "filters") for c in metadata.filters if c["id"] not in OBJECT_CODEC_IDS]
    except MetadataError:
        filters = []  # the values are copied decoded: filters no v3 codec reproduces are not needed
    compressors: list[Codec] = []
    if metadata.compressor is not None and metadata.compressor["id"] not in OBJECT_CODEC_IDS:
        try:
            compressors = [codec_from_numcodecs(metadata.compressor, "compressor")]
        except MetadataError:
            compressors = [codec_from_numcodecs({"id": "zstd", "level": 0}, "compressor")]
    return filters, compressors


def _is_keep(value: Any) -> bool:
    return isinstance(value, str) and value == "keep"


def target_metadata(array: Array, name: str, chunks: Any, shards: Any, compressors: Any, filters: Any) -> ArrayMetadata:
    """The Zarr v3 metadata of the copy of ``array``; create_array's errors, naming the array."""
    where = f"array {'/' + name!r}"
    metadata = array.metadata
    check_v3_type(metadata.data_type, where)
    kept_filters, kept_compressors = _kept_codecs(array)
    try:
        new_chunks, new_shards = _grid(array, chunks, shards)
        attributes, dimension_names = v3_attributes(metadata, where)
        return build_array_metadata(
            shape=array.shape,
            dtype=metadata.data_type,
            chunks=new_chunks,
            shards=new_shards,
            fill_value=metadata.fill_value,
            filters=kept_filters if _is_keep(filters) else filters,
            compressors=kept_compressors if _is_keep(compressors) else compressors,
            attributes=attributes,
            dimension_names=dimension_names,
        )
    except MetadataError as error:
        hint = ""
        if any(isinstance(v, (list, tuple)) and len(v) != array.ndim for v in (chunks, shards)):
            hint = " (for arrays of different ranks, give lengths by dimension name: {'time': 24, ...})"
        raise type(error)(f"{where} (shape {array.shape}): {error}{hint}") from None


@dataclass
class _Plan:
    """Everything a convert writes, worked out before it writes anything."""

    arrays: list[tuple[str, Array, ArrayMetadata]]
    #: store key -> metadata document, the members' first and the root's last
    documents: dict[str, bytes]

    def job(self, source: str) -> ConvertJob:
        return ConvertJob(source=source, documents={key: decode_json(raw, key) for key, raw in self.documents.items()})


def _plan(source: Array | Group, consolidate: bool, **settings: Any) -> _Plan:
    nodes: list[tuple[str, Array | Group]] = [("", source)]
    if isinstance(source, Group):
        nodes += list(source.members(max_depth=None))
    arrays, documents = [], {}
    for name, node in nodes:
        if isinstance(node, Array):
            metadata: Any = target_metadata(node, name, **settings)
            arrays.append((name, node, metadata))
        else:
            metadata = GroupMetadata(attributes=v3_attributes(node.metadata, f"group {'/' + name!r}")[0])
        documents[join_key(name, ZARR_JSON)] = metadata
    encoded = {key: metadata.to_bytes() for key, metadata in documents.items()}
    if consolidate and isinstance(source, Group):
        members = {key: raw for key, raw in encoded.items() if key != ZARR_JSON}
        encoded[ZARR_JSON] = consolidated_root(documents[ZARR_JSON], members, "").to_bytes()
    root = encoded.pop(ZARR_JSON)
    return _Plan(arrays, {**dict(sorted(encoded.items())), ZARR_JSON: root})


# -- the destination --------------------------------------------------------------------------


def _where(store: Store, path: str) -> tuple[Any, str | None]:
    """What holds the node at ``path`` of ``store``: the location the store's root path is part
    of (a file system: ``("file",)``, or ``("fsspec", fs)``) and the node's normalized path, or
    the store's whole location and None (a mapping, anything else: no paths to compare)."""
    location = store.location
    if not (isinstance(location, tuple) and location and isinstance(location[-1], str)):
        return location, None
    *head, root = location
    if head == ["file"]:  # a folder: links and relative parts resolved, as the file system will
        return tuple(head), os.path.normcase(os.path.realpath(os.path.join(root, *path.split("/"))))
    joined = "/".join(part.strip("/") for part in (root, path) if part.strip("/"))
    return tuple(head), posixpath.normpath("/" + joined)  # one leading slash (normpath keeps two)


def _overlap(source: Store, path: str, target: Store) -> str | None:
    """How ``target``'s root overlaps the node at ``path`` of ``source`` (is it, is inside it,
    holds it), in words; None when they are apart."""
    (source_holder, source_path), (target_holder, target_path) = _where(source, path), _where(target, "")
    if source_holder != target_holder:
        return None
    if source_path is None or target_path is None:
        return "is the source store itself" if source_path == target_path else None
    if source_path == target_path:
        return "is the source node itself" if path else "is the source store itself"
    common = os.path.commonpath([source_path, target_path]) if source_holder == ("file",) else posixpath.commonpath(
        [source_path, target_path])  # fmt: skip
    if common == source_path:
        return "is inside the source"
    if common == target_path:
        return "holds the source (it is a parent of it)"
    return None


def _start(store: Store, job: ConvertJob, overwrite: bool) -> bool:
    """Make ``store`` ready for ``job``; True when it resumes an interrupted run of the same job."""
    if overwrite:
        store.delete_prefix("")
        store.set(JOB_KEY, job.to_bytes())
        return False
    unfinished = read_job(store)
    if unfinished is not None:
        difference = unfinished.difference(job)
        if difference is None:
            remove_temporary_files(store)
            return True
        raise ContainsGroupError(
            f"the destination {store!r} is an incomplete convert ({JOB_KEY} is there: it was interrupted), "
            f"not this one: {difference}. Rerun it with its own source and settings to resume it, or pass "
            "overwrite=True (--overwrite) to start over"
        )
    existing = read_node(store, "")
    if existing is not None:
        error = ContainsArrayError if existing.node_type == "array" else ContainsGroupError
        raise error(
            f"the destination {store!r} already holds a Zarr {existing.node_type}; "
            "pass overwrite=True (--overwrite) to replace it"
        )
    stray = next(iter(store.list_prefix("")), None)
    if stray is not None:
        raise ContainsGroupError(
            f"the destination {store!r} is not empty (it holds {stray!r}, and no Zarr node); "
            "pass overwrite=True (--overwrite) to replace what it holds"
        )
    store.set(JOB_KEY, job.to_bytes())
    return False


def _finish(store: Store, documents: dict[str, bytes]) -> None:
    """The metadata, the root's last, then the mark goes: the destination is complete."""
    members = {key: raw for key, raw in documents.items() if key != ZARR_JSON}
    if members:
        store.set_many(members)
    store.set(ZARR_JSON, documents[ZARR_JSON])
    store.delete(JOB_KEY)


# -- copying the chunks -----------------------------------------------------------------------


def _copy_step(source: Any, target: Any, box: tuple[slice, ...]) -> None:
    """A dask task of a convert: read ``box`` of the source array and write it to the target (two
    :class:`~zarrx.io.handle.ArrayHandle`), within :func:`~zarrx.concurrency.task_threads` -- one
    task holds one step's values, never more."""
    from zarrx.concurrency import task_threads
    from zarrx.io.execute import read_selection
    from zarrx.io.transcode import transcode_step, transcodes
    from zarrx.io.write import write_selection

    with task_threads():
        if box and transcodes(source, target):  # the same chunks: each decoded and encoded again on its own
            transcode_step(source, target, box)
        else:
            write_selection(target, box or Ellipsis, read_selection(source, box or Ellipsis))


def _copy_tasks(name: str, source: Array, target: Array, done: set[tuple[int, ...]]) -> list[Any]:
    """One dask task per step of the target (:func:`zarrx.io.plan.object_steps`: whole stored
    objects of the target, at least :data:`~zarrx.io.copy.MIN_STEP_BYTES` of them, one shard
    when sharded), each reading its part of the source and writing it: no task holds more than
    its step, so a copy's memory is a few steps per worker, never the array. Steps whose objects
    are all stored and verified already (``done``) are left out."""
    import dask

    from zarrx.io.copy import MIN_STEP_BYTES
    from zarrx.io.plan import decoded_nbytes, object_steps

    handle = target.handle.evolve(for_writing=True)
    per_step = max(1, MIN_STEP_BYTES // max(1, decoded_nbytes(handle.spec)))
    edges = [list(itertools.accumulate(axis_edges, initial=0)) for axis_edges in handle.metadata.chunk_grid.chunk_edges(handle.shape)]
    # the handles bound outside the arguments, which dask would walk through (dataclasses) per task
    copy = dask.delayed(functools.partial(_copy_step, source.handle, handle), pure=False)

    def missing(box: tuple[slice, ...]) -> list[bool]:
        """Per stored object of ``box``: whether it is still to be copied."""
        covered = [range(bisect.bisect_right(axis, part.start) - 1, bisect.bisect_left(axis, part.stop))
                   for part, axis in zip(box, edges)]  # fmt: skip
        return [coords not in done for coords in itertools.product(*covered)]

    boxes = []
    for box in object_steps(handle, tuple(slice(0, length, 1) for length in target.shape), per_step):
        if any(part.stop == part.start for part in box):
            continue  # an empty array
        todo = missing(box) if done else [True]
        if all(todo):
            boxes.append(box)
        elif any(todo):  # a step partly copied already: its missing objects one by one
            boxes += [one for one in object_steps(handle, box, 1) if all(missing(one))]
    return [copy(box, dask_key_name=f"zarrx-convert-{name}-" + "-".join(str(part.start) for part in box)) for box in boxes]


def _compute(tasks: list[Any], progress: bool) -> None:
    """Run the copy tasks. With dask's default threaded scheduler they run on a pool of this call,
    shut down before the first error is raised: dask raises it at once while tasks already
    running go on writing, and a convert that has failed must have stopped writing (a resumed
    or overwriting convert would race with them)."""
    import dask
    import dask.threaded

    if not tasks:
        return
    with contextlib.ExitStack() as stack:
        if progress:
            from dask.diagnostics import ProgressBar

            stack.enter_context(ProgressBar())
        if dask.base.get_scheduler(collections=tasks) is dask.threaded.get:
            workers = dask.config.get("num_workers", None) or dask.threaded.CPU_COUNT
            pool = stack.enter_context(ThreadPoolExecutor(workers))  # its exit waits for every task
            dask.compute(*tasks, scheduler="threads", pool=pool)
        else:
            dask.compute(*tasks)


def _is_consolidated(store: Store, path: str) -> bool:
    metadata = read_node(store, path, consolidated=True)
    return getattr(metadata, "consolidated_metadata", None) is not None


def convert(
    src: Any,
    dst: Any,
    *,
    path: str = "",
    chunks: Any = None,
    shards: Any = None,
    compressors: Any = "keep",
    filters: Any = "keep",
    consolidate: bool | None = None,
    storage_options: dict[str, Any] | None = None,
    dst_storage_options: dict[str, Any] | None = None,
    overwrite: bool = False,
    progress: bool = True,
) -> Array | Group:
    """Copy the node at ``path`` of ``src`` (any format zarrx reads) to the root of ``dst`` as Zarr v3.

    Groups are copied with everything below them (their members as stored, never as a stale
    consolidated document lists them). Chunks are copied in parallel by dask. See the module
    docstring for what is kept, checked and how an interrupted convert resumes.

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
        Shard shape, a multiple of the chunks (-1: one shard along an axis; a mapping by
        dimension name as for ``chunks``); None keeps the source's shards when an array's
        chunks are kept, and writes no shards otherwise.
    compressors, filters
        ``"keep"`` (default) keeps the source's (a v2 compressor or filter without a v3 codec
        becomes zstd / is dropped: the values are copied decoded); otherwise anything
        :func:`zarrx.create_array` takes (``"auto"``, None, codecs in any form, ``"zstd"``).
    consolidate
        Consolidate the destination's metadata; None (default) does when the source was.
    storage_options, dst_storage_options
        fsspec options for ``src`` and ``dst`` (``dst`` uses ``storage_options`` unless given).
    overwrite
        Delete what ``dst`` holds first; otherwise a ``dst`` holding anything but an interrupted
        run of this same convert (which is resumed) is an error.
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
    source_store = make_store(src, mode="r", storage_options=storage_options)
    target_store = make_store(dst, mode="a", storage_options=dst_storage_options or storage_options)
    path = normalize_path(path, allow_reserved=True)
    overlap = _overlap(source_store, path, target_store)
    if overlap is not None:  # before anything is read or written: overwrite would delete the source
        node = f" (node {'/' + path!r})" if path else ""
        raise UsageError(
            f"cannot convert {source_store!r}{node} into {target_store!r}: the destination {overlap}; "
            "convert into a location apart from the source (or use migrate_v2_to_v3 to add v3 metadata in place)"
        )
    source = open_node(source_store, path, mode="r", use_consolidated=False)
    if consolidate is None:
        consolidate = isinstance(source, Group) and _is_consolidated(source_store, path)
    settings = dict(chunks=chunks, shards=shards, compressors=compressors, filters=filters)
    plan = _plan(source, consolidate, **settings)  # every refusal happens here: dst is untouched
    resumed = _start(target_store, plan.job(f"{source_store!r} {'/' + path!r}"), overwrite)
    tasks = []
    for name, array, metadata in plan.arrays:
        done = verified_objects(target_store, name, metadata) if resumed else set()
        tasks += _copy_tasks(name, array, Array(target_store, name, metadata), done)
    _compute(tasks, progress)
    _finish(target_store, plan.documents)
    return open_node(target_store, "", mode="r+")
