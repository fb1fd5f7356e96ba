"""The ``bytes`` codec (v3 codecs/bytes): fixed-size elements, C order, one byte order.

``endian`` is required for data types with a byte order (``needs_endian``);
single-byte types may omit it, and then the codec is written without a
``configuration``. The data type lays its elements out
(:meth:`~zarrx.dtypes.base.DataType.to_stored` / ``from_stored``): NumPy's bytes in the
stored order for most (structured types are swapped field by field), the registry's layout
for the others (``complex_float8_e4m3``: two bytes per element; ``int4``: the upper bits of
its byte ignored). Decoding is zero-copy when the stored layout is the in-memory one: the
result may be a read-only view of the input, which callers copy into their output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Mapping

import numpy as np

from zarrx.codecs.base import ArrayBytesCodec, Buffer, ChunkSpec, as_uint8, parse_choice, raise_unexpected
from zarrx.codecs.registry import register_codec
from zarrx.errors import ChunkDecodeError, MetadataError

__all__ = ["BytesCodec"]

Endian = Literal["little", "big"]
# no endian: single-byte types, where order is moot, and legacy "structured" arrays,
# which the structured spec says to read as little-endian
_BYTE_ORDER = {"little": "<", "big": ">", None: "<"}


@register_codec
@dataclass(frozen=True, eq=False)
class BytesCodec(ArrayBytesCodec):
    """Raw bytes in C order; ``endian`` is "little", "big" or None (single-byte types).

    Examples
    --------
    >>> BytesCodec(endian="big").to_json()
    {'name': 'bytes', 'configuration': {'endian': 'big'}}
    """

    name = "bytes"
    aliases = ("endian",)  # the codec's name before zarr-specs PR #263

    endian: Endian | None = None

    def __post_init__(self) -> None:
        parse_choice(self.name, "endian", self.endian, ("little", "big", None))

    @classmethod
    def from_json(cls, configuration: Mapping[str, Any]) -> "BytesCodec":
        raise_unexpected(cls.name, configuration, ("endian",))
        return cls(endian=configuration.get("endian"))

    def configuration(self) -> dict[str, Any] | None:
        return None if self.endian is None else {"endian": self.endian}

    def evolve_from_spec(self, spec: ChunkSpec) -> "BytesCodec":
        if self.endian is None and spec.data_type.needs_endian:
            return BytesCodec(endian="little")
        return self

    def validate(self, spec: ChunkSpec) -> None:
        if spec.data_type.stored_by is not None:
            raise MetadataError(
                f"codecs: the bytes codec cannot encode the data type {spec.data_type.to_json()!r}; "
                f"use the {spec.data_type.stored_by!r} codec"
            )
        if spec.data_type.item_size is None:
            raise MetadataError(
                f"codecs: the bytes codec cannot encode the variable-length data type "
                f"{spec.data_type.to_json()!r}; use vlen-utf8 (strings) or vlen-bytes"
            )
        legacy = getattr(spec.data_type, "legacy", False)  # zarr-python wrote these without endian
        if self.endian is None and spec.data_type.needs_endian and not legacy:
            raise MetadataError(
                f"codecs: the bytes codec needs 'endian' (\"little\" or \"big\") for data type "
                f"{spec.data_type.to_json()!r}, found none"
            )

    def encoded_size(self, spec: ChunkSpec) -> int | None:
        return spec.nbytes

    def stores_memory_layout(self, spec: ChunkSpec) -> bool:
        """Whether a chunk of ``spec`` is stored as its in-memory bytes (no swap, no conversion)."""
        return spec.data_type.stored_is_memory(_BYTE_ORDER[self.endian])

    def encode(self, array: np.ndarray, spec: ChunkSpec) -> Buffer:
        return as_uint8(spec.data_type.to_stored(np.asarray(array), _BYTE_ORDER[self.endian]))

    def decode(self, data: Buffer, spec: ChunkSpec) -> np.ndarray:
        raw = as_uint8(data)
        expected = spec.nbytes
        if raw.nbytes != expected:
            raise ChunkDecodeError(
                f"expected {expected} bytes ({spec.shape} x {spec.data_type.item_size} bytes), found {raw.nbytes}"
            )
        return spec.data_type.from_stored(raw, spec.shape, _BYTE_ORDER[self.endian])
