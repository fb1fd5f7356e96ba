"""Checking a stored hierarchy: decode every stored chunk and say, by key, what is wrong.

:func:`verify` walks every array and group below a node, reads every stored chunk
(shard) of every array in batches and decodes it on zarrx's thread pool -- for a
sharded array the index and every inner chunk, one at a time, so memory stays at a
few chunks per thread -- and returns a :class:`VerifyReport`:

* ``corrupt``: chunks that cannot be read or decoded -- truncated, random bytes, a
  checksum mismatch, a wrong decoded size, a bad shard index, a store error -- each
  with its key and the error (a :class:`Problem`);
* ``bad_metadata``: metadata documents that do not parse (the node's subtree cannot
  be checked);
* ``missing``: chunks of an array's grid that are not stored. They read as the fill
  value, which is legal (zarrx does not store all-fill chunks by default), so this is
  information, not an error; the keys are listed for arrays of up to
  :data:`MAX_LISTED_MISSING` missing chunks, and counted for all;
* ``unknown``: keys below the node that are neither a node's metadata nor a chunk
  inside an array's grid (stray files, chunks left outside an array's shape,
  folders that are not nodes);
* ``temporary``: temporary files of :class:`~zarrx.storage.LocalStore` writes that
  were interrupted (a killed process); never read as data, safe to delete;
* ``external_links``: symbolic links below the node that lead out of the store's root
  folder (:meth:`Store.external_links <zarrx.storage.Store.external_links>`). The store refuses
  to read through them -- the data behind them is not checked -- unless it was opened with
  ``follow_external_links=True``;
* ``stale_consolidated``: consolidated metadata (a v3 group's inline
  ``consolidated_metadata``, a v2 ``.zmetadata``) whose copy of a member disagrees with the
  member's own documents, copies members that no longer exist, or lacks members: readers of
  the copy would see another hierarchy. ``zarrx consolidate URL`` rewrites it.

* ``incomplete``: the mark of an unfinished :func:`zarrx.convert` at or above the node
  (:mod:`zarrx.tools.convert_job`): chunks and metadata may be missing.
* ``past_edge``: chunks (shards) stored wholly past an array's shape -- the trace of an append
  (or a growing resize) that was interrupted: zarrx writes new chunks before the metadata that
  shows them, and a shrinking resize deletes them only after. Invisible to readers, but another
  library growing the array would show them. Running the append again, or ``resize`` to the
  current shape, clears them.
* ``past_edge_values``: boundary chunks whose part past the array's edge holds values other
  than the fill value: also left by an interrupted append (and by other libraries' shrinking
  resizes, which keep them), so information only.

``report.ok`` is true when no chunk is corrupt, every metadata document parses, every
consolidated copy agrees with its member, no link leaves the store root (unless the store
follows such links), no convert is unfinished and no chunk lies past an array's shape; missing chunks (shards, for sharded arrays),
unknown keys and temporary files do not change it. ``str(report)`` is a readable summary (what
``zarrx verify URL`` prints).

The metadata read is the store's own documents, never consolidated metadata, so a
stale consolidated document does not hide a node.
"""

from __future__ import annotations

import itertools
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from zarrx.codecs.sharding import ShardingCodec
from zarrx.concurrency import map_concurrent
from zarrx.errors import NodeNotFoundError, StoreError, ZarrxError
from zarrx.dtypes.fill import is_all_fill
from zarrx.io.decode import decode_stored
from zarrx.io.execute import read_selection
from zarrx.io.handle import ArrayHandle
from zarrx.io.plan import decoded_nbytes, split_batches
from zarrx.metadata.protocol import ArrayMetadataLike, GroupMetadataLike, NodeMetadata
from zarrx.nodes.consolidated import find_stale
from zarrx.nodes.hierarchy import format_of, node_keys, read_node
from zarrx.nodes.node import Node
from zarrx.storage import MemoryStore, make_store
from zarrx.storage.local import is_temporary_name
from zarrx.storage.paths import is_node_name, join_key, normalize_path
from zarrx.storage.store import Store
from zarrx.tools.convert_job import incomplete_marks
from zarrx.tools.progress import ProgressCallback, progress_callback
from zarrx.tools.verify_report import ArrayCheck, Problem, VerifyReport

__all__ = ["verify", "VerifyReport", "Problem", "ArrayCheck", "MAX_LISTED_MISSING"]

#: missing chunk keys listed per array (all are counted)
MAX_LISTED_MISSING = 1000
#: grids larger than this are not walked to list their missing keys (they are still counted)
MAX_GRID_WALKED = 10**6
#: decoded bytes' worth of chunks fetched from the store in one batch
BATCH_BYTES = 64 * 2**20


# -- walking the hierarchy -------------------------------------------------------------------
@dataclass
class _Walk:
    """The nodes found below the verified node."""

    arrays: dict[str, ArrayMetadataLike] = field(default_factory=dict)  # path -> metadata
    groups: dict[str, GroupMetadataLike] = field(default_factory=dict)
    #: key prefixes of nodes whose metadata failed: their keys are not judged
    skipped_prefixes: list[str] = field(default_factory=list)


def _walk(store: Store, root_path: str, root_metadata: NodeMetadata, report: VerifyReport) -> _Walk:
    walk = _Walk()
    stack = [(root_path, root_metadata)]
    while stack:
        path, metadata = stack.pop()
        if metadata.node_type == "array":
            walk.arrays[path] = metadata
            continue
        walk.groups[path] = metadata
        stack.extend(sorted(_children(store, path, metadata, report, walk).items(), reverse=True))
    return walk


def _children(
    store: Store, path: str, metadata: GroupMetadataLike, report: VerifyReport, walk: _Walk
) -> dict[str, NodeMetadata]:
    """The child nodes of the group at ``path`` by path; a child whose metadata fails is reported."""
    node_format = format_of(metadata)
    try:
        return {join_key(path, name): child for name, child in node_format.list_children(store, path).items()}
    except ZarrxError:
        pass  # one bad document fails the whole batch: find it child by child
    children = {}
    try:
        names = [name for name in store.list_dir(join_key(path, "")) if is_node_name(name)]
    except ZarrxError as error:
        report.bad_metadata.append(Problem(join_key(path, ""), "/" + path, f"cannot list the group: {error}"))
        walk.skipped_prefixes.append(join_key(path, ""))
        return {}
    for name in names:
        child = join_key(path, name)
        try:
            found = node_format.read_child(store, child)
        except ZarrxError as error:
            report.bad_metadata.append(Problem(node_format.keys(child)[0], "/" + child, str(error)))
            walk.skipped_prefixes.append(join_key(child, ""))
            continue
        if found is not None:
            children[child] = found
    return children


# -- classifying the stored keys ----------------------------------------------------------------
def _claimed_metadata_keys(walk: _Walk) -> set[str]:
    keys: set[str] = set()
    for path, metadata in itertools.chain(walk.arrays.items(), walk.groups.items()):
        keys.update(metadata.metadata_keys(path))
        if metadata.zarr_format == 2 and metadata.node_type == "group":
            keys.add(join_key(path, ".zmetadata"))  # consolidated metadata of a v2 group
        if not isinstance(metadata.zarr_format, int):
            keys.add("zarr.json")  # the entry point of a 2022 draft hierarchy
    return keys


def _chunk_coords(
    key: str, prefixes: dict[str, tuple[str, ArrayMetadataLike]]
) -> tuple[str, tuple[int, ...], bool] | None:
    """``(array path, chunk coordinates, inside the grid)`` when ``key`` is a chunk key of an array."""
    ends = [0] + [position + 1 for position, character in enumerate(key) if character == "/"]
    for end in ends:
        found = prefixes.get(key[:end])
        if found is None:
            continue
        path, metadata = found
        coords = metadata.chunk_key_encoding.decode(key[end:])
        if coords is None or len(coords) != len(metadata.shape):
            continue
        return path, coords, all(c < g for c, g in zip(coords, metadata.grid_shape))
    return None


def _stored_chunks(
    store: Store, root_path: str, walk: _Walk, report: VerifyReport
) -> dict[str, list[tuple[str, tuple[int, ...]]]]:
    """Every stored chunk key of every array, ``(key, coords)`` by array path; unknown keys go to the report."""
    metadata_keys = _claimed_metadata_keys(walk)
    prefixes = {metadata.chunk_prefix(path): (path, metadata) for path, metadata in walk.arrays.items()}
    stored: dict[str, list[tuple[str, tuple[int, ...]]]] = {path: [] for path in walk.arrays}
    listed = {join_key(root_path, "")} | set(prefixes)
    seen: set[str] = set()
    for prefix in sorted(listed, key=len):
        if any(prefix.startswith(done) for done in seen if done != prefix):
            continue  # a longer prefix inside one already listed
        seen.add(prefix)
        try:
            keys = list(store.list_prefix(prefix))
        except ZarrxError as error:
            report.corrupt.append(Problem(prefix, "/" + root_path, f"cannot list the store: {error}"))
            continue
        for key in keys:
            if key in metadata_keys:
                continue
            chunk = _chunk_coords(key, prefixes)
            if chunk is not None and chunk[2]:
                stored[chunk[0]].append((key, chunk[1]))
            elif chunk is not None:
                shape = list(walk.arrays[chunk[0]].shape)
                report.past_edge.append(Problem(key, "/" + chunk[0], f"stored past the array's shape {shape}"))
            elif not any(key.startswith(skipped) for skipped in walk.skipped_prefixes):
                report.unknown.append(key)
    report.unknown.sort()
    return stored


def _past_edge(metadata: ArrayMetadataLike, coords: tuple[int, ...]) -> tuple[Any, list[tuple[slice, ...]]] | None:
    """For a boundary object of a regular grid: the array grown to whole objects and the parts of
    the object past the array's edge (selections in it); None for any other object."""
    if not metadata.chunk_grid.is_regular or metadata.read_only_reason is not None:
        return None
    shape, size = tuple(metadata.shape), tuple(metadata.chunks)
    starts = [c * length for c, length in zip(coords, size)]
    ends = [start + length for start, length in zip(starts, size)]
    cut = [d for d in range(len(shape)) if ends[d] > shape[d]]
    if not cut:
        return None
    edge = tuple(grid * length for grid, length in zip(metadata.grid_shape, size))
    parts = [tuple(slice(shape[d], ends[d]) if d == dim else slice(starts[d], ends[d]) for d in range(len(shape))) for dim in cut]
    return metadata.evolve(shape=edge), parts


def _holds_values_past_edge(job: "_Job", raw: bytes) -> bool:
    """Whether the decoded object ``raw`` holds values other than the fill value past the edge
    (read from memory, through the array grown to whole objects: no second request)."""
    grown, parts = job.past_edge
    handle = ArrayHandle(MemoryStore({job.key: raw}), job.path, grown)
    return not all(is_all_fill(read_selection(handle, part), handle.fill_value) for part in parts)


def _missing_keys(metadata: ArrayMetadataLike, path: str, stored: set[tuple[int, ...]], limit: int) -> Iterator[str]:
    """Keys of up to ``limit`` grid chunks that are not stored (for grids of up to MAX_GRID_WALKED chunks)."""
    if metadata.nchunks > MAX_GRID_WALKED:
        return
    for coords in itertools.product(*(range(n) for n in metadata.grid_shape)):
        if coords not in stored:
            yield metadata.storage_key(path, coords)
            limit -= 1
            if limit <= 0:
                return


def _temporary_files(store: Store, root_path: str) -> list[str]:
    """Leftover temporary files of interrupted LocalStore writes below the node, as key-like paths."""
    marker = store.local_path(join_key(root_path, "zarr.json"))  # any key: where its folder is
    if marker is None:
        return []
    top, root = os.path.dirname(marker), os.path.dirname(store.local_path("zarr.json"))
    found = []
    for folder, _, files in os.walk(top):
        for name in files:
            if is_temporary_name(name):
                found.append(os.path.relpath(os.path.join(folder, name), root).replace(os.sep, "/"))
    return sorted(found)


def _check_consolidated(store: Store, walk: _Walk, report: VerifyReport) -> None:
    """Compare the consolidated metadata of every group with its members' own documents."""
    skipped = lambda path: any(join_key(path, "").startswith(prefix) for prefix in walk.skipped_prefixes)  # noqa: E731
    stale, invalid = find_stale(store, walk.groups, {**walk.arrays, **walk.groups}, skipped)
    report.stale_consolidated += [Problem(key, "/" + path, text) for key, path, text in stale]
    report.bad_metadata += [Problem(key, "/" + path, text) for key, path, text in invalid]


# -- decoding -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Job:
    key: str
    path: str
    handle: ArrayHandle
    #: the chunk's grid coordinates (its shape, on a rectilinear grid)
    coords: tuple[int, ...] | None = None
    #: for a boundary object: the grown metadata and its parts past the edge (see _past_edge)
    past_edge: tuple[Any, list[tuple[slice, ...]]] | None = None


def _check(job: _Job, raw: bytes | None, report: VerifyReport) -> int:
    """Decode one stored chunk; a failure is added to the report. Returns the bytes checked."""
    if raw is None:
        return 0  # deleted since it was listed: now missing, which is legal
    try:
        decode_stored(job.handle, job.key, raw, job.coords)
        if job.past_edge is not None and _holds_values_past_edge(job, raw):
            report.past_edge_values.append(Problem(job.key, "/" + job.path, f"holds values past the array's shape {list(job.handle.shape)}"))
    except ZarrxError as error:
        report.corrupt.append(Problem(job.key, "/" + job.path, str(error)))
    except Exception as error:  # a bug or an exhausted resource: still a chunk that cannot be read
        report.corrupt.append(Problem(job.key, "/" + job.path, f"{type(error).__name__}: {error}"))
    return len(raw)


def _fetch(store: Store, keys: list[str], report: VerifyReport, node_of: Callable[[str], str]) -> dict[str, bytes | None]:
    """The stored bytes of ``keys`` in one batch; when the batch fails, key by key, reporting the
    failures (as unreadable chunks of the node ``node_of(key)``) and leaving their keys out."""
    try:
        return store.get_many(keys)
    except Exception:  # stores raise StoreError; anything else is reported all the same
        pass
    values: dict[str, bytes | None] = {}
    for key in keys:
        try:
            values[key] = store.get(key)
        except Exception as error:
            report.corrupt.append(Problem(key, "/" + node_of(key), f"cannot read it: {type(error).__name__}: {error}"))
    return values


def _absent(store: Store, keys: list[str], path: str, report: VerifyReport) -> list[str]:
    """Those of ``keys`` (not listed as stored) that read as absent; the others -- a folder at a
    chunk's key, say -- are reported as chunks that cannot be read."""
    values = _fetch(store, keys, report, lambda key: path)
    return [key for key in keys if key in values and values[key] is None]


def verify(
    store: Any,
    path: str = "",
    *,
    storage_options: dict[str, Any] | None = None,
    progress: bool | ProgressCallback = False,
) -> VerifyReport:
    """Decode every stored chunk of every array below ``path`` and report what is wrong.

    Parameters
    ----------
    store
        Anything :func:`zarrx.open` takes (a path, a URL, a Store, ...), or an open
        :class:`zarrx.Array` / :class:`zarrx.Group` (then ``path`` is relative to it).
    path
        The node to check, with everything below it (the root by default).
    storage_options
        fsspec options for a URL.
    progress
        True to show progress on stderr, or a callable ``progress(done, total)`` called
        after each batch of chunks.

    Returns
    -------
    VerifyReport
        ``report.ok`` when every stored chunk decodes and every metadata document parses;
        ``str(report)`` is a summary.

    Raises
    ------
    NodeNotFoundError
        There is no array or group at ``path``.

    Examples
    --------
    >>> import zarrx
    >>> from zarrx.storage import MemoryStore
    >>> store = MemoryStore()
    >>> arr = zarrx.create_array(store, "a", shape=(4, 4), chunks=(2, 2), dtype="int16")
    >>> arr[:2] = 1
    >>> store.set("a/c/0/1", b"garbage")
    >>> report = verify(store)
    >>> report.ok, [problem.key for problem in report.corrupt], report.missing
    (False, ['a/c/0/1'], ['a/c/1/0', 'a/c/1/1'])
    """
    started = time.perf_counter()
    if isinstance(store, Node):  # an open Array or Group
        path = join_key(store.path, normalize_path(path, allow_reserved=True)).strip("/")
        store = store.store
    zstore = make_store(store, mode="r", storage_options=storage_options)
    path = normalize_path(path, allow_reserved=True)
    report = VerifyReport(store=repr(zstore), path=path)
    report.incomplete = [Problem(key, "/" + path, "an unfinished zarrx convert") for key in incomplete_marks(zstore, path)]
    try:
        root = read_node(zstore, path)
    except ZarrxError as error:
        if isinstance(error, StoreError):
            raise
        report.bad_metadata.append(Problem(node_keys(path, None), "/" + path, str(error)))
        report.seconds = time.perf_counter() - started
        return report
    if root is None and report.incomplete:
        report.seconds = time.perf_counter() - started
        return report  # nothing to decode yet: the convert writes the metadata last
    if root is None:
        raise NodeNotFoundError(f"no array or group at {'/' + path!r} in {zstore!r} (key {node_keys(path, None)} is absent)")

    walk = _walk(zstore, path, root, report)
    report.groups = sorted("/" + group for group in walk.groups)
    stored = _stored_chunks(zstore, path, walk, report)
    jobs: dict[str, _Job] = {}
    for array_path, metadata in sorted(walk.arrays.items()):
        chunks = stored[array_path]
        handle = ArrayHandle(zstore, array_path, metadata)
        jobs.update((key, _Job(key, array_path, handle, coords, _past_edge(metadata, coords))) for key, coords in sorted(chunks))
        missing = metadata.nchunks - len(chunks)
        listed = list(_missing_keys(metadata, array_path, {c for _, c in chunks}, min(missing, MAX_LISTED_MISSING))) if missing else []
        unreadable = 0
        if listed and zstore.reads_are_local:  # a folder (say) at a chunk's key: not listed, not missing either
            absent = _absent(zstore, listed, array_path, report)
            unreadable, listed = len(listed) - len(absent), absent
        report.missing.extend(listed)
        sharding = metadata.codecs.array_bytes if isinstance(metadata.codecs.array_bytes, ShardingCodec) else None
        report.arrays.append(
            ArrayCheck(
                path=array_path,
                shape=tuple(metadata.shape),
                chunks=tuple(metadata.chunks if sharding is None else sharding.chunk_shape),
                dtype=str(metadata.dtype),
                nchunks=metadata.nchunks,
                stored=len(chunks) + unreadable,  # a stored object, if a corrupt one
                shards=None if sharding is None else tuple(metadata.chunks),
                missing_keys=tuple(listed),
            )
        )
    report.temporary = _temporary_files(zstore, path)
    report.external_links_followed = zstore.follow_external_links
    report.external_links = [
        Problem(key, "/" + path, f"a symbolic link to {target!r}, outside the store root")
        for key, target in zstore.external_links(join_key(path, ""))
    ]
    _check_consolidated(zstore, walk, report)

    show = progress_callback(progress, "verify")
    total, done = len(jobs), 0
    weight = lambda key: decoded_nbytes(jobs[key].handle.spec)  # noqa: E731
    for batch in split_batches(list(jobs), weight, BATCH_BYTES):
        values = _fetch(zstore, batch, report, lambda key: jobs[key].path)
        checked = map_concurrent(lambda key: _check(jobs[key], values.get(key), report), [k for k in batch if k in values])
        report.bytes_checked += sum(checked)
        report.chunks_checked += sum(1 for key in batch if values.get(key) is not None)
        done += len(batch)
        if show is not None:
            show(done, total)
    if show is not None and not total:
        show(0, 0)
    report.corrupt.sort(key=lambda problem: problem.key)
    report.past_edge_values.sort(key=lambda problem: problem.key)
    report.bad_metadata.sort(key=lambda problem: problem.key)
    report.seconds = time.perf_counter() - started
    return report
