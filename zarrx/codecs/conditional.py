"""The ``conditional`` codec (zarr-extensions codecs/conditional): bytes -> bytes codecs, each applied
to a chunk or not, as a header in front of the chunk says.

``configuration``: ``codecs``, bytes -> bytes codecs; ``header_bits``, a multiple of 8 at least
their number (default: the smallest). An encoded chunk is ``header_bits / 8`` bytes of bitmask --
bit ``i`` (least significant bit of the first byte first) set when ``codecs[i]`` was applied, the
bits past the codecs zero -- then the data, encoded by the applied codecs in order. Decoding reads
the mask and undoes the applied codecs in reverse; a mask with a reserved bit set (a chunk written
with codecs this configuration does not list) is a :class:`~zarrx.errors.ChunkDecodeError`.

Which codecs zarrx applies when it writes: each one whose output is no larger than its input
(the page's ``compress_if_smaller``; a size-preserving codec such as a shuffle is always applied).
So a chunk that does not compress is stored as it is, plus the header.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from zarrx.codecs.base import Buffer, BytesBytesCodec, ChunkSpec, as_uint8, parse_int, raise_unexpected, require_member
from zarrx.codecs.registry import parse_codecs, register_codec
from zarrx.errors import ChunkDecodeError, MetadataError

__all__ = ["ConditionalCodec"]


@register_codec
@dataclass(frozen=True, eq=False)
class ConditionalCodec(BytesBytesCodec):
    """Apply each of ``codecs`` to a chunk only where it makes the chunk no larger.

    Examples
    --------
    >>> from zarrx.codecs import ZstdCodec
    >>> codec = ConditionalCodec(codecs=[ZstdCodec(level=3)])
    >>> encoded = codec.encode(bytes(1000))
    >>> encoded[0], len(encoded) < 1000, bytes(codec.decode(encoded, 1000, 1000)) == bytes(1000)
    (1, True, True)
    >>> codec.encode(b"xyz")  # zstd would make three bytes larger: stored as they are
    b'\\x00xyz'
    """

    name = "conditional"

    codecs: Any
    header_bits: int | None = None

    def __post_init__(self) -> None:
        codecs = parse_codecs(self.codecs, "codecs: conditional.codecs")
        wrong = [codec.name for codec in codecs if not isinstance(codec, BytesBytesCodec)]
        if wrong:
            raise MetadataError(f"codecs: codec 'conditional': codecs must be bytes -> bytes codecs, found {wrong}")
        object.__setattr__(self, "codecs", codecs)
        if self.header_bits is not None:
            bits = parse_int(self.name, "header_bits", self.header_bits, len(codecs), 2**16)
            if bits % 8:
                raise MetadataError(f"codecs: codec 'conditional': header_bits must be a multiple of 8, found {bits}")
            object.__setattr__(self, "header_bits", bits)

    @classmethod
    def from_json(cls, configuration: Mapping[str, Any]) -> "ConditionalCodec":
        raise_unexpected(cls.name, configuration, ("codecs", "header_bits"))
        codecs = require_member(cls.name, configuration, "codecs")
        if not isinstance(codecs, list):
            raise MetadataError(f"codecs: codec 'conditional': codecs must be a list, found {codecs!r}")
        return cls(codecs=codecs, header_bits=configuration.get("header_bits"))

    def configuration(self) -> dict[str, Any]:
        configuration: dict[str, Any] = {"codecs": [codec.to_json() for codec in self.codecs]}
        if self.header_bits is not None:
            configuration["header_bits"] = self.header_bits
        return configuration

    @property
    def header_size(self) -> int:
        """Bytes of bitmask in front of every chunk."""
        bits = self.header_bits if self.header_bits is not None else -(-len(self.codecs) // 8) * 8
        return bits // 8

    def evolve_from_spec(self, spec: ChunkSpec) -> "ConditionalCodec":
        return ConditionalCodec(codecs=[codec.evolve_from_spec(spec) for codec in self.codecs], header_bits=self.header_bits)

    def validate(self, spec: ChunkSpec) -> None:
        for codec in self.codecs:
            codec.validate(spec)

    def encode(self, data: Buffer) -> Buffer:
        mask = 0
        for position, codec in enumerate(self.codecs):
            encoded = codec.encode(data)
            if memoryview(encoded).nbytes <= memoryview(data).nbytes:
                data, mask = encoded, mask | (1 << position)
        return mask.to_bytes(self.header_size, "little") + bytes(data)

    def decode(self, data: Buffer, expected_size: int | None, max_size: int) -> Buffer:
        raw = as_uint8(data)
        if raw.nbytes < self.header_size:
            raise ChunkDecodeError(f"a chunk of {raw.nbytes} bytes cannot hold the {self.header_size}-byte header")
        mask = int.from_bytes(raw[: self.header_size].tobytes(), "little")
        if mask >> len(self.codecs):
            raise ChunkDecodeError(
                f"the header {mask:#x} marks codecs past the {len(self.codecs)} this configuration lists"
            )
        payload: Buffer = raw[self.header_size :]
        applied = [position for position in range(len(self.codecs)) if mask >> position & 1]
        for position in reversed(applied):
            innermost = position == applied[0]
            size = expected_size if innermost else None
            payload = self.codecs[position].decode(payload, size, max_size if size is None else size)
        if expected_size is not None and as_uint8(payload).nbytes != expected_size:
            raise ChunkDecodeError(f"decoded to {as_uint8(payload).nbytes} bytes, expected {expected_size}")
        return payload
