"""Chunk key encodings (``chunk-key-encodings/default`` and ``/v2``).

``default``: ``c`` then ``<sep><index>`` per dimension (``c/1/23/45``; a 0-d
array's single chunk is ``c``). ``v2``: indices joined by the separator
(``1.23.45``; a 0-d array's chunk is ``0``). The separator is ``/`` or ``.``;
``default`` defaults to ``/`` and ``v2`` to ``.``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

from zarrx.errors import MetadataError, UnsupportedExtensionError
from zarrx.extension import parse_extension

__all__ = ["ChunkKeyEncoding", "DefaultChunkKeyEncoding", "V2ChunkKeyEncoding", "parse_chunk_key_encoding"]

SEPARATORS = ("/", ".")


@dataclass(frozen=True)
class ChunkKeyEncoding:
    name: ClassVar[str]
    default_separator: ClassVar[str]
    separator: str

    def encode(self, chunk_coords: tuple[int, ...]) -> str:
        raise NotImplementedError

    def decode(self, key: str) -> tuple[int, ...] | None:
        """The chunk coordinates a key names, or None when it is not a chunk key of this encoding."""
        raise NotImplementedError

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "configuration": {"separator": self.separator}}


@dataclass(frozen=True)
class DefaultChunkKeyEncoding(ChunkKeyEncoding):
    name = "default"
    default_separator = "/"
    separator: str = "/"

    def encode(self, chunk_coords: tuple[int, ...]) -> str:
        # map(str): twice as fast as a generator, and a read of many small chunks makes a key per chunk
        return "c" + self.separator + self.separator.join(map(str, chunk_coords)) if chunk_coords else "c"

    def decode(self, key: str) -> tuple[int, ...] | None:
        if key == "c":
            return ()
        if not key.startswith("c" + self.separator):
            return None
        return _parse_indices(key[2:].split(self.separator))


@dataclass(frozen=True)
class V2ChunkKeyEncoding(ChunkKeyEncoding):
    name = "v2"
    default_separator = "."
    separator: str = "."

    def encode(self, chunk_coords: tuple[int, ...]) -> str:
        if not chunk_coords:
            return "0"
        return self.separator.join(map(str, chunk_coords))

    def decode(self, key: str) -> tuple[int, ...] | None:
        return _parse_indices(key.split(self.separator))


def _parse_indices(parts: list[str]) -> tuple[int, ...] | None:
    if not all(part.isascii() and part.isdigit() for part in parts):
        return None
    return tuple(int(part) for part in parts)


ENCODINGS: dict[str, type[ChunkKeyEncoding]] = {
    DefaultChunkKeyEncoding.name: DefaultChunkKeyEncoding,
    V2ChunkKeyEncoding.name: V2ChunkKeyEncoding,
}


def parse_chunk_key_encoding(value: Any, *, allow_short_form: bool = False) -> ChunkKeyEncoding:
    """Parse ``chunk_key_encoding`` (spec JSON; with ``allow_short_form`` also ``{"name", "separator"}``)."""
    if isinstance(value, ChunkKeyEncoding):
        return value
    if allow_short_form and isinstance(value, Mapping) and "separator" in value:
        value = {"name": value.get("name", "default"), "configuration": {"separator": value["separator"]}}
    extension = parse_extension(value, "chunk_key_encoding")
    cls = ENCODINGS.get(extension.name)
    if cls is None:
        raise UnsupportedExtensionError(
            f"chunk_key_encoding: unknown chunk key encoding {extension.name!r}; "
            f"zarrx supports {sorted(ENCODINGS)}"
        )
    unexpected = set(extension.configuration) - {"separator"}
    if unexpected:
        raise MetadataError(f"chunk_key_encoding.configuration: unexpected members {sorted(unexpected)}")
    separator = extension.configuration.get("separator", cls.default_separator)
    if separator not in SEPARATORS:
        raise MetadataError(
            f"chunk_key_encoding.configuration.separator: expected '/' or '.', found {separator!r}"
        )
    return cls(separator)
