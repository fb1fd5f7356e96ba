"""What :attr:`zarrx.Array.info` shows: a summary of an array, from its metadata (and, complete,
from a listing of its stored chunks)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zarrx.sizes import human_bytes

__all__ = ["ArrayInfo"]


@dataclass(frozen=True)
class ArrayInfo:
    name: str
    store: str
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    dtype: str
    data_type: Any
    fill_value: Any
    codecs: list[Any]
    dimension_names: Any
    read_only: bool
    nbytes: int
    nchunks: int
    nbytes_stored: int | None = None
    nchunks_initialized: int | None = None
    shards: tuple[int, ...] | None = None

    @classmethod
    def from_array(cls, array: Any, *, complete: bool) -> "ArrayInfo":
        return cls(
            name=array.name,
            store=repr(array.store),
            shape=array.shape,
            chunks=array.chunks,
            dtype=str(array.dtype),
            data_type=array.metadata.data_type.to_json(),
            fill_value=None if array.fill_value is None else array.metadata.data_type.fill_value_to_json(array.fill_value),
            codecs=array.metadata.codecs.to_json(),
            dimension_names=array.dimension_names,
            read_only=array.read_only,
            nbytes=array.nbytes,
            nchunks=array.nchunks,
            nbytes_stored=array.nbytes_stored if complete else None,
            nchunks_initialized=array.nchunks_initialized if complete else None,
            shards=array.shards,
        )

    def __str__(self) -> str:
        rows = [
            ("Type", "zarrx.Array"),
            ("Name", self.name),
            ("Store", self.store),
            ("Shape", self.shape),
            ("Chunk shape", self.chunks),
            *([("Shard shape", self.shards)] if self.shards is not None else []),
            ("Data type", f"{self.data_type} ({self.dtype})"),
            ("Fill value", self.fill_value),
            ("Codecs", self.codecs),
            ("Dimension names", self.dimension_names),
            ("Read-only", self.read_only),
            ("No. bytes", f"{self.nbytes} ({human_bytes(self.nbytes)})"),
            ("Shards" if self.shards is not None else "Chunks", self.nchunks),  # the objects stored
        ]
        if self.nbytes_stored is not None:
            ratio = f"{self.nbytes / self.nbytes_stored:.1f}" if self.nbytes_stored else "-"
            rows += [
                ("No. bytes stored", f"{self.nbytes_stored} ({human_bytes(self.nbytes_stored)})"),
                ("Storage ratio", ratio),
                ("Shards initialized" if self.shards is not None else "Chunks initialized",
                 f"{self.nchunks_initialized}/{self.nchunks}"),
            ]
        width = max(len(label) for label, _ in rows)
        return "\n".join(f"{label:<{width}} : {value}" for label, value in rows)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))
