"""The mark of an unfinished :func:`zarrx.convert`: a destination is incomplete until it is gone.

A convert first writes :data:`JOB_KEY` at the root of the destination -- the source it copies
and every metadata document the destination will hold -- then the chunks (or shards), then
the metadata documents (the members', the root's last), and deletes the mark at the very end.
So, however a convert stops (SIGKILL, power cut, a full disk):

* the destination has no root metadata until every chunk is written: zarr-python, xarray and
  zarrx find no hierarchy there rather than one whose missing chunks read as the fill value;
* :func:`zarrx.verify` reports a destination carrying the mark as incomplete, never OK;
* a rerun with the same source and settings finds its own mark and **resumes**: every stored
  object the destination holds is decoded (:func:`verified_objects`), and only the others are
  copied again; with other settings it is refused, naming the destination as incomplete, and
  ``overwrite=True`` (``--overwrite``) starts over.

Stored objects are written atomically by every store (a local file is renamed into place), so
one that is listed was written whole; the decode also catches one damaged since.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from zarrx.errors import MetadataError, ZarrxError
from zarrx.io.decode import decode_stored
from zarrx.io.handle import ArrayHandle
from zarrx.metadata.protocol import ArrayMetadataLike
from zarrx.storage.local import is_temporary_name
from zarrx.storage.paths import join_key
from zarrx.storage.store import Store

__all__ = ["JOB_KEY", "ConvertJob", "incomplete_marks", "read_job", "remove_temporary_files", "verified_objects"]

#: the key of the mark, at the root of the destination
JOB_KEY = "zarrx-convert-incomplete.json"
#: the format of the mark's document
JOB_FORMAT = 1


@dataclass(frozen=True)
class ConvertJob:
    """What a convert writes: its source and the metadata documents of the destination."""

    source: str
    #: store key -> the metadata document written there when the convert completes
    documents: dict[str, Any] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        document = {"zarrx_convert_incomplete": JOB_FORMAT, "source": self.source, "documents": self.documents}
        return json.dumps(document, indent=1, sort_keys=True, allow_nan=False).encode()

    @classmethod
    def from_bytes(cls, raw: bytes, key: str) -> "ConvertJob":
        try:
            document = json.loads(raw)
        except ValueError as error:
            raise MetadataError(f"{key}: the mark of an unfinished convert is not JSON ({error})") from None
        if not isinstance(document, dict) or document.get("zarrx_convert_incomplete") != JOB_FORMAT:
            raise MetadataError(f"{key}: not the mark of an unfinished zarrx convert (format {JOB_FORMAT})")
        return cls(source=str(document.get("source")), documents=dict(document.get("documents") or {}))

    def difference(self, other: "ConvertJob") -> str | None:
        """How ``other`` (a new convert) differs from this one, in words; None when it is the same."""
        if self.source != other.source:
            return f"it copies {self.source}, not {other.source}"
        for key in sorted(set(self.documents) | set(other.documents)):
            if self.documents.get(key) != other.documents.get(key):
                return f"its {key} differs (other chunks, shards, codecs or attributes)"
        return None


def read_job(store: Store, path: str = "") -> ConvertJob | None:
    """The mark at ``path`` (the destination's root), None when there is none.

    An unreadable mark is still a mark: it comes back with no documents, so it never matches.
    """
    key = join_key(path, JOB_KEY)
    raw = store.get(key)
    if raw is None:
        return None
    try:
        return ConvertJob.from_bytes(raw, key)
    except MetadataError as error:
        return ConvertJob(source=f"(unreadable: {error})")


def incomplete_marks(store: Store, path: str) -> list[str]:
    """The keys of marks at ``path`` and above it: a node inside an unfinished destination is unfinished."""
    parts = [part for part in path.split("/") if part]
    keys = [join_key("/".join(parts[:depth]), JOB_KEY) for depth in range(len(parts) + 1)]
    return [key for key, raw in store.get_many(keys).items() if raw is not None]


def verified_objects(store: Store, path: str, metadata: ArrayMetadataLike) -> set[tuple[int, ...]]:
    """The grid coordinates of the stored objects (chunks or shards) of the array at ``path`` that
    decode; the others (damaged, or outside the grid) are left to be written again."""
    handle = ArrayHandle(store, path, metadata)
    prefix = metadata.chunk_prefix(path)
    grid = metadata.grid_shape
    found: dict[str, tuple[int, ...]] = {}
    for key in store.list_prefix(prefix):
        coords = metadata.chunk_key_encoding.decode(key[len(prefix) :])
        if coords is not None and len(coords) == len(grid) and all(c < g for c, g in zip(coords, grid)):
            found[key] = coords
    verified = set()
    keys = sorted(found)
    for start in range(0, len(keys), 64):  # a batch at a time: memory stays a few objects
        for key, raw in store.get_many(keys[start : start + 64]).items():
            if raw is None:
                continue
            try:
                decode_stored(handle, key, raw)
            except ZarrxError:
                continue  # written again
            verified.add(found[key])
    return verified


def remove_temporary_files(store: Store, path: str = "") -> int:
    """Delete the temporary files interrupted local writes left below ``path``; how many."""
    folder = store.local_path(join_key(path, JOB_KEY))
    if folder is None:
        return 0
    removed = 0
    for directory, _, files in os.walk(os.path.dirname(folder)):
        for name in files:
            if is_temporary_name(name):
                try:
                    os.remove(os.path.join(directory, name))
                    removed += 1
                except FileNotFoundError:
                    pass
    return removed
