"""The ``bitround`` codec (zarr-extensions codecs/bitround): keep ``keepbits`` significant bits.

An array -> array codec that reduces precision so that a compressor after it does better; decoding
returns the rounded values as they are. On the bits of each value (each component of a complex
value), with ``maxbits`` the bits that can be dropped:

* floats (``float16``/``32``/``64``, ``bfloat16``, their complex forms, ``complex64``/``128``):
  ``maxbits`` is the mantissa's width (10, 23, 52, 7); sign and exponent are kept, a carry out of
  the mantissa rounds into the exponent;
* integers (``int8``...``uint64``; ``numpy.datetime64`` / ``timedelta64`` as int64): ``maxbits`` is
  the position of the most significant set bit of the value's bits, plus one (a negative value's
  top bit is its sign bit, so it keeps its ``keepbits`` top two's-complement bits).

The low ``maxbits - keepbits`` bits are rounded to nearest, ties to even, and cleared; the sum
saturates at all ones -- the algorithm of zarrs' ``round_bits`` (and, for floats, numcodecs'
``BitRound``), computed on whole chunks with NumPy.

``numcodecs.bitround`` -- the deprecated alias the registry names -- stays zarr-python's codec
(:mod:`zarrx.codecs.numcodecs_codecs`), so arrays zarr-python wrote keep the name it reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from zarrx.codecs.base import ArrayArrayCodec, ChunkSpec, parse_int, raise_unexpected, require_member
from zarrx.codecs.registry import register_codec
from zarrx.errors import MetadataError

__all__ = ["BitroundCodec", "MANTISSA_BITS", "round_bits"]

#: data type name -> mantissa bits of each component
MANTISSA_BITS = {
    "float16": 10, "float32": 23, "float64": 52, "bfloat16": 7, "complex64": 23, "complex128": 52,
    "complex_float16": 10, "complex_float32": 23, "complex_float64": 52, "complex_bfloat16": 7,
}  # fmt: skip
_INTEGER_NAMES = {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                  "numpy.datetime64", "numpy.timedelta64"}  # fmt: skip


def _bit_length(values: np.ndarray) -> np.ndarray:
    """The number of bits of each unsigned value up to its most significant set bit (0 for 0)."""
    width = 8 * values.dtype.itemsize
    length = np.zeros(values.shape, dtype=np.int64)
    rest = values.copy()
    shift = width // 2
    while shift:
        high = rest >> values.dtype.type(shift)
        above = high != 0
        length += np.where(above, shift, 0)
        rest = np.where(above, high, rest)
        shift //= 2
    return length + (rest != 0)


def round_bits(bits: np.ndarray, keepbits: int, maxbits: np.ndarray | int) -> np.ndarray:
    """Round unsigned ``bits`` to ``keepbits`` of their ``maxbits`` low bits (see the module docstring)."""
    kind, width = bits.dtype.type, 8 * bits.dtype.itemsize
    maskbits = np.maximum(np.asarray(maxbits, dtype=np.int64) - keepbits, 0)
    if not np.any(maskbits):
        return bits
    one, all_set = kind(1), kind(np.iinfo(bits.dtype).max)
    shifts = np.clip(maskbits, 1, width - 1).astype(bits.dtype)  # where maskbits is 0 the result is discarded
    mask = np.where(maskbits >= width, kind(0), (all_set >> shifts) << shifts)
    increment = ((bits >> shifts) & one) + ((one << (shifts - one)) - one)  # ties to even
    total = np.where(bits > all_set - increment, all_set, bits + increment)  # a saturating add
    return np.where(maskbits > 0, total & mask, bits).astype(bits.dtype)


@register_codec
@dataclass(frozen=True, eq=False)
class BitroundCodec(ArrayArrayCodec):
    """Round each value to ``keepbits`` significant bits (mantissa bits for floats).

    Examples
    --------
    >>> from zarrx.dtypes import resolve_data_type
    >>> codec = BitroundCodec(keepbits=2)
    >>> codec.encode(np.array([1.3, 100.0, -0.7], dtype="float32"), ChunkSpec((3,), resolve_data_type("float32"), 0))
    array([ 1.25, 96.  , -0.75], dtype=float32)
    >>> codec.encode(np.array([255, 100, 7], dtype="uint8"), ChunkSpec((3,), resolve_data_type("uint8"), 0))
    array([192,  96,   8], dtype=uint8)
    """

    name = "bitround"

    keepbits: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "keepbits", parse_int(self.name, "keepbits", self.keepbits, 0, 64))

    @classmethod
    def from_json(cls, configuration: Mapping[str, Any]) -> "BitroundCodec":
        raise_unexpected(cls.name, configuration, ("keepbits",))
        return cls(keepbits=require_member(cls.name, configuration, "keepbits"))

    def configuration(self) -> dict[str, Any]:
        return {"keepbits": self.keepbits}

    def validate(self, spec: ChunkSpec) -> None:
        name = spec.data_type.to_json() if isinstance(spec.data_type.to_json(), str) else spec.data_type.name
        if name not in MANTISSA_BITS and name not in _INTEGER_NAMES:
            raise MetadataError(
                f"codecs: codec 'bitround' cannot round the data type {spec.data_type.to_json()!r}: it rounds "
                f"{sorted(MANTISSA_BITS)} and the integer types"
            )

    def encode(self, array: np.ndarray, spec: ChunkSpec) -> np.ndarray:
        values = np.ascontiguousarray(array, dtype=spec.dtype)
        mantissa = MANTISSA_BITS.get(spec.data_type.name)
        components = 2 if spec.dtype.kind == "c" or spec.data_type.name.startswith("complex") else 1
        bits = values.view(f"u{spec.dtype.itemsize // components}")
        maxbits = mantissa if mantissa is not None else _bit_length(bits)
        return round_bits(bits, self.keepbits, maxbits).view(spec.dtype).reshape(values.shape)

    def decode(self, array: np.ndarray, spec: ChunkSpec) -> np.ndarray:
        return array
