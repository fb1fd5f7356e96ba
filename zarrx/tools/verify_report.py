"""What :func:`zarrx.verify` found: :class:`VerifyReport`, :class:`Problem`, :class:`ArrayCheck`.

The fields are described in :mod:`zarrx.tools.verify`, which fills them; ``str(report)`` is what
``zarrx verify URL`` prints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from zarrx.sizes import human_bytes

__all__ = ["VerifyReport", "Problem", "ArrayCheck", "SHOWN"]

#: problems and keys of each kind shown by ``str(report)``
SHOWN = 20


@dataclass(frozen=True)
class Problem:
    """Something wrong with one stored object: its key, the node it belongs to and the error."""

    key: str
    node: str
    error: str

    def __str__(self) -> str:
        # metadata errors already start with their key
        return self.error if self.error.startswith(f"{self.key}: ") else f"{self.key}: {self.error}"


@dataclass(frozen=True)
class ArrayCheck:
    """What was found for one array: stored objects (chunks, or shards) in its grid, stored, missing."""

    path: str
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    dtype: str
    #: stored objects in the grid: chunks, or shards when ``shards`` is set
    nchunks: int
    stored: int
    #: the shard shape of a sharded array (``chunks`` are then its inner chunks)
    shards: tuple[int, ...] | None = None
    #: keys of missing objects, as many as are listed
    missing_keys: tuple[str, ...] = ()

    @property
    def missing(self) -> int:
        return self.nchunks - self.stored

    @property
    def objects(self) -> str:
        """What the array stores: "chunks" or "shards"."""
        return "chunks" if self.shards is None else "shards"

    def __str__(self) -> str:
        shards = "" if self.shards is None else f" shards={self.shards}"
        return (
            f"/{self.path} {self.dtype} shape={self.shape} chunks={self.chunks}{shards}: "
            f"{self.stored} of {self.nchunks} {self.objects} stored"
        )


@dataclass
class VerifyReport:
    """The outcome of :func:`verify` (see the module docstring for each field)."""

    store: str
    path: str
    arrays: list[ArrayCheck] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)
    corrupt: list[Problem] = field(default_factory=list)
    bad_metadata: list[Problem] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    temporary: list[str] = field(default_factory=list)
    #: marks of an unfinished convert at the node or above it
    incomplete: list[Problem] = field(default_factory=list)
    external_links: list[Problem] = field(default_factory=list)
    #: whether the store reads through the external links (then they are information)
    external_links_followed: bool = False
    stale_consolidated: list[Problem] = field(default_factory=list)
    #: chunks stored past an array's shape: an interrupted append or resize
    past_edge: list[Problem] = field(default_factory=list)
    #: boundary chunks holding values past the array's shape (information)
    past_edge_values: list[Problem] = field(default_factory=list)
    #: stored chunks (shards) read and decoded
    chunks_checked: int = 0
    #: their stored bytes
    bytes_checked: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """True when every stored chunk decodes, every metadata document parses, consolidated
        metadata agrees with the members, no link leaves the store root (unless followed), no
        convert into the node is unfinished and no chunk is stored past an array's shape."""
        refused_links = self.external_links and not self.external_links_followed
        return not (
            self.corrupt or self.bad_metadata or self.stale_consolidated or refused_links or self.incomplete
            or self.past_edge
        )  # fmt: skip

    @property
    def missing_count(self) -> int:
        """Chunks of the arrays' grids that are not stored (they read as the fill value)."""
        return sum(array.missing for array in self.arrays)

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        lines = [f"verify {self.store} {'/' + self.path!r}"]
        shards = sum(array.stored for array in self.arrays if array.shards is not None)
        checked = f"{self.chunks_checked - shards} stored chunk(s)" + (f" and {shards} shard(s)" if shards else "")
        lines.append(
            f"  {len(self.arrays)} array(s), {len(self.groups)} group(s); {checked} "
            f"checked ({human_bytes(self.bytes_checked)}) in {self.seconds:.1f} s"
        )
        lines += [f"  {array}" for array in self.arrays[:SHOWN]]
        if len(self.arrays) > SHOWN:
            lines.append(f"  ... and {len(self.arrays) - SHOWN} more arrays")
        if self.ok:
            lines.append("OK: every stored chunk decodes and every metadata document parses")
        else:
            lines.append(
                f"FAILED: {len(self.corrupt)} corrupt chunk(s), {len(self.bad_metadata)} invalid metadata document(s)"
                + (", an unfinished convert" if self.incomplete else "")
                + (f", {len(self.past_edge)} chunk(s) past an array's shape" if self.past_edge else "")
                + (f", {len(self.stale_consolidated)} stale consolidated entr(ies)" if self.stale_consolidated else "")
                + (f", {len(self.external_links)} link(s) out of the store root"
                   if self.external_links and not self.external_links_followed else "")
            )
        links = (
            "links out of the store root (followed: the store was opened with follow_external_links)"
            if self.external_links_followed
            else "links out of the store root (reads through them are refused; the data behind them is not checked)"
        )
        sections = [
            ("INCOMPLETE: an interrupted (or running) zarrx convert is writing here; chunks and metadata may be "
             "missing. Rerun the same convert to resume it, or convert again with --overwrite",
             self.incomplete, len(self.incomplete)),  # fmt: skip
            ("UNFINISHED APPEND: chunks stored past the array's shape, left by an append or resize that was "
             "interrupted (readers do not see them); run the append again, or resize to the current shape to "
             "clear them", self.past_edge, len(self.past_edge)),  # fmt: skip
            ("invalid metadata documents", self.bad_metadata, len(self.bad_metadata)),
            ("corrupt chunks", self.corrupt, len(self.corrupt)),
            (links, self.external_links, len(self.external_links)),
            ("consolidated metadata that disagrees with the members' own documents (run `zarrx consolidate`)",
             self.stale_consolidated, len(self.stale_consolidated)),
            *((f"missing {kind} (they read as the fill value; not an error)",
               [key for array in self.arrays if array.objects == kind for key in array.missing_keys],
               sum(array.missing for array in self.arrays if array.objects == kind)) for kind in ("chunks", "shards")),  # fmt: skip
            ("values past the array's shape in boundary chunks (an interrupted append, or another library's "
             "resize, left them; not read, not an error; resize to the current shape clears them)",
             self.past_edge_values, len(self.past_edge_values)),  # fmt: skip
            ("unknown keys (neither metadata nor a chunk inside an array's grid)", self.unknown, len(self.unknown)),
            ("temporary files of interrupted writes (never read; safe to delete)", self.temporary, len(self.temporary)),
        ]
        for title, items, count in sections:
            if not count:
                continue
            lines.append(f"{title}: {count}")
            lines += [f"  {item}" for item in items[:SHOWN]]
            if count > min(len(items), SHOWN):
                lines.append(f"  ... and {count - min(len(items), SHOWN)} more")
        return "\n".join(lines)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))


