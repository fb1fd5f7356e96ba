"""The ``packbits`` codec (zarr-extensions codecs/packbits): elements of any bit width, packed.

An array -> bytes codec. Each element is ``k = components * b`` bits, ``b = last_bit -
first_bit + 1`` bits of each component (2 components for complex types, else 1) taken from its
``N``-bit value (:attr:`~zarrx.dtypes.base.DataType.packbits_bits`: 4 for ``int4``, 1 for
``bool``, 32 for ``float32``...; the little-endian representation of the ``bytes`` codec).
Element ``i`` is bits ``[i*k, (i+1)*k)`` of one bit sequence, least significant bit first --
within an element and within each byte, as zarrs writes it -- padded with zero bits to whole
bytes. ``padding_encoding`` ``"first_byte"`` / ``"last_byte"`` adds a byte holding the number of
padding bits before / after the data; ``"none"`` (the default) adds nothing. (zarrs leaves that
byte out when elements are whole bytes -- ``int16``, ``bfloat16`` without a bit range; zarrx
writes it, as the page says, and reads chunks without it too.) Decoding shifts the
``b`` bits back to ``first_bit`` and sign-extends signed integers (from ``last_bit``), or
zero-extends everything else, to ``N`` bits.

Configuration names are the registry page's (``padding_encoding``: ``first_byte``,
``last_byte``, ``none``; ``first_bit``, ``last_bit``), which zarrs reads and writes. The page's
``schema.json`` spells them ``start_byte`` / ``end_byte`` / ``start_bit`` / ``end_bit``; those are
read too, and written as the page's names.

Everything is NumPy over whole chunks (``unpackbits`` / ``packbits``, bit order little): no
per-element Python.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Mapping

import numpy as np

from zarrx.codecs.base import ArrayBytesCodec, Buffer, ChunkSpec, as_uint8, parse_choice, parse_int, raise_unexpected
from zarrx.codecs.registry import register_codec
from zarrx.errors import ChunkDecodeError, MetadataError

__all__ = ["PackBitsCodec"]

Padding = Literal["none", "first_byte", "last_byte"]
#: the schema's spellings -> the page's
_SCHEMA_NAMES = {"start_byte": "first_byte", "end_byte": "last_byte", "start_bit": "first_bit", "end_bit": "last_bit"}
_MAX_BIT = 63


@register_codec
@dataclass(frozen=True, eq=False)
class PackBitsCodec(ArrayBytesCodec):
    """Pack ``last_bit - first_bit + 1`` bits of each element component, least significant bit first.

    Examples
    --------
    >>> import ml_dtypes
    >>> from zarrx.dtypes import resolve_data_type
    >>> spec = ChunkSpec((3,), resolve_data_type("int4"), 0)
    >>> codec = PackBitsCodec()
    >>> bytes(codec.encode(np.array([1, -2, 7], dtype=ml_dtypes.int4), spec)).hex()
    'e107'
    >>> codec.decode(b"\\xe1\\x07", spec)
    array([1, -2, 7], dtype=int4)
    """

    name = "packbits"

    padding_encoding: Padding = "none"
    first_bit: int | None = None
    last_bit: int | None = None

    def __post_init__(self) -> None:
        parse_choice(self.name, "padding_encoding", self.padding_encoding, ("none", "first_byte", "last_byte"))
        for member in ("first_bit", "last_bit"):
            value = getattr(self, member)
            if value is not None:
                object.__setattr__(self, member, parse_int(self.name, member, value, 0, _MAX_BIT))
        if self.first_bit is not None and self.last_bit is not None and self.last_bit < self.first_bit:
            raise MetadataError(
                f"codecs: codec 'packbits': last_bit ({self.last_bit}) must not be less than first_bit ({self.first_bit})"
            )

    @classmethod
    def from_json(cls, configuration: Mapping[str, Any]) -> "PackBitsCodec":
        members = {_SCHEMA_NAMES.get(name, name): value for name, value in configuration.items()}
        raise_unexpected(cls.name, members, ("padding_encoding", "first_bit", "last_bit"))
        padding = members.get("padding_encoding", "none")
        return cls(
            padding_encoding=_SCHEMA_NAMES.get(padding, padding) if isinstance(padding, str) else padding,
            first_bit=members.get("first_bit"),
            last_bit=members.get("last_bit"),
        )

    def configuration(self) -> dict[str, Any] | None:
        members = {"padding_encoding": self.padding_encoding, "first_bit": self.first_bit, "last_bit": self.last_bit}
        given = {name: value for name, value in members.items() if value is not None and value != "none"}
        return given or None

    # -- layout ----------------------------------------------------------------------------
    def _layout(self, spec: ChunkSpec) -> tuple[int, int, int, int]:
        """``(components, bytes per component, first bit, bits kept)`` for chunks of ``spec``."""
        data_type = spec.data_type
        bits, components = data_type.packbits_bits or 0, data_type.packbits_components  # validate() checked them
        first = self.first_bit or 0
        last = bits - 1 if self.last_bit is None else self.last_bit
        return components, (data_type.item_size or 0) // components, first, last - first + 1

    def validate(self, spec: ChunkSpec) -> None:
        data_type = spec.data_type
        bits = data_type.packbits_bits
        if bits is None or data_type.item_size is None:
            raise MetadataError(
                f"codecs: codec 'packbits' cannot encode the data type {data_type.to_json()!r}: it packs bool, "
                "integers, floats and complex numbers"
            )
        for member in ("first_bit", "last_bit"):
            value = getattr(self, member)
            if value is not None and value >= bits:
                raise MetadataError(
                    f"codecs: codec 'packbits': {member} {value} is past the {bits} bits of data type {data_type.to_json()!r}"
                )

    def encoded_size(self, spec: ChunkSpec) -> int:
        components, _, _, kept = self._layout(spec)
        return -(-(spec.size * components * kept) // 8) + (self.padding_encoding != "none")

    # -- encoding ----------------------------------------------------------------------------
    def encode(self, array: np.ndarray, spec: ChunkSpec) -> Buffer:
        components, width, first, kept = self._layout(spec)
        stored = as_uint8(spec.data_type.to_stored(np.asarray(array), "<"))
        if first == 0 and kept == 8 * width:
            packed = stored  # every bit of every byte: the bytes codec's little-endian encoding
        else:
            bits = np.unpackbits(stored.reshape(-1, width), axis=1, bitorder="little")
            packed = np.packbits(bits[:, first : first + kept], bitorder="little")
        padding = (-(spec.size * components * kept)) % 8
        return _with_padding(packed, padding, self.padding_encoding)

    def decode(self, data: Buffer, spec: ChunkSpec) -> np.ndarray:
        components, width, first, kept = self._layout(spec)
        raw = as_uint8(data)
        expected = self.encoded_size(spec)
        count = spec.size * components
        padding = (-(count * kept)) % 8
        if self.padding_encoding != "none" and (components * kept) % 8 == 0 and raw.nbytes == expected - 1:
            # zarrs leaves the padding byte out when elements are whole bytes: read that too
            return self._unpack(raw, spec)
        if raw.nbytes != expected:
            raise ChunkDecodeError(f"expected {expected} bytes ({spec.shape} elements of {components * kept} bits), found {raw.nbytes}")
        if self.padding_encoding != "none":
            stated = int(raw[0] if self.padding_encoding == "first_byte" else raw[-1])
            if stated != padding:
                raise ChunkDecodeError(f"the {self.padding_encoding} says {stated} padding bits, expected {padding}")
            raw = raw[1:] if self.padding_encoding == "first_byte" else raw[:-1]
        return self._unpack(raw, spec)

    def _unpack(self, raw: np.ndarray, spec: ChunkSpec) -> np.ndarray:
        """The elements packed in ``raw`` (the data bytes, without a padding byte)."""
        components, width, first, kept = self._layout(spec)
        count = spec.size * components
        if first == 0 and kept == 8 * width:
            stored = raw
        else:
            bits = np.unpackbits(raw, bitorder="little", count=count * kept).reshape(count, kept)
            full = np.zeros((count, 8 * width), dtype=np.uint8)
            full[:, first : first + kept] = bits
            if spec.data_type.packbits_signed:  # extend the sign (the kept top bit) up to N bits
                full[:, first + kept : spec.data_type.packbits_bits] = bits[:, -1:]
            stored = np.packbits(full, axis=1, bitorder="little").reshape(-1)
        return spec.data_type.from_stored(stored, spec.shape, "<")


def _with_padding(packed: np.ndarray, padding: int, encoding: str) -> Buffer:
    if encoding == "none":
        return packed
    marker = np.array([padding], dtype=np.uint8)
    return np.concatenate([marker, packed] if encoding == "first_byte" else [packed, marker])
