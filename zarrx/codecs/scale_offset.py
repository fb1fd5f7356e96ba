"""The ``scale_offset`` codec (zarr-extensions codecs/scale_offset): ``(x - offset) * scale``.

Encoding computes ``(x - offset) * scale``, decoding ``x / scale + offset``, in the
arithmetic of the array's data type ("Algorithm"); ``offset`` and ``scale`` are JSON
scalars in that type's fill value encoding, absent meaning 0 and 1. A value the type
cannot hold, at any step, is an error (ChunkEncodeError / ChunkDecodeError):

* floats: a finite input giving a non-finite result (overflow); NaN and ±Infinity
  inputs pass through, as the spec's NaN fill value example needs;
* integers: any result outside the type's range, and a division with a remainder
  (the quotient is not an integer, so not representable).

``scale`` must be finite and non-zero and ``offset`` finite (else every chunk would
fail); checked in :meth:`ScaleOffsetCodec.validate`, where the data type is known.
The fill value is transformed like the elements (spec, "Fill value handling"); one
that cannot be is a MetadataError.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from zarrx.codecs.base import ArrayArrayCodec, ChunkSpec, raise_unexpected
from zarrx.codecs.registry import register_codec
from zarrx.errors import ChunkDecodeError, ChunkEncodeError, MetadataError

__all__ = ["ScaleOffsetCodec"]

_PREFIX = "codecs: codec 'scale_offset'"


@register_codec
@dataclass(frozen=True, eq=False)
class ScaleOffsetCodec(ArrayArrayCodec):
    """``(x - offset) * scale``; None (absent) means 0 and 1.

    Examples
    --------
    >>> from zarrx.dtypes import resolve_data_type
    >>> codec = ScaleOffsetCodec(offset=1000)
    >>> spec = ChunkSpec((3,), resolve_data_type("uint16"), 1000)
    >>> codec.encode(np.array([1000, 1100, 1255], dtype="uint16"), spec)
    array([  0, 100, 255], dtype=uint16)
    """

    name = "scale_offset"

    offset: Any = None
    scale: Any = None

    def __post_init__(self) -> None:
        for member in ("offset", "scale"):
            value = getattr(self, member)
            if isinstance(value, np.generic):  # a NumPy scalar from Python code: its JSON number
                object.__setattr__(self, member, value := value.item())
            if value is not None and (isinstance(value, bool) or not isinstance(value, (numbers.Real, str))):
                raise MetadataError(f"{_PREFIX}: {member} must be a number or a fill value string, found {value!r}")

    @classmethod
    def from_json(cls, configuration: Mapping[str, Any]) -> "ScaleOffsetCodec":
        raise_unexpected(cls.name, configuration, ("offset", "scale"))
        return cls(offset=configuration.get("offset"), scale=configuration.get("scale"))

    def configuration(self) -> dict[str, Any] | None:
        members = {key: value for key, value in (("offset", self.offset), ("scale", self.scale)) if value is not None}
        return members or None  # the spec: with neither, the configuration may be omitted

    def parameters(self, spec: ChunkSpec) -> tuple[Any, Any]:
        """``offset`` and ``scale`` as scalars of the array's data type."""
        dtype = spec.dtype
        if dtype.kind not in "iuf":
            raise MetadataError(
                f"{_PREFIX} works on integer and float types, found {spec.data_type.to_json()!r}"
            )
        values = []
        for member, value, identity in (("offset", self.offset, 0), ("scale", self.scale, 1)):
            try:
                values.append(dtype.type(identity) if value is None else spec.data_type.fill_value_from_json(value))
            except MetadataError as error:
                raise MetadataError(f"{_PREFIX}: {member}: {str(error).removeprefix('fill_value: ')}") from None
        offset, scale = values
        if scale == 0 or not np.isfinite(scale) or not np.isfinite(offset):
            raise MetadataError(
                f"{_PREFIX}: scale must be finite and non-zero and offset finite (decoding divides by scale), "
                f"found scale {self.scale!r} and offset {self.offset!r}"
            )
        return offset, scale

    def validate(self, spec: ChunkSpec) -> None:
        self.resolve_spec(spec)

    def resolve_spec(self, spec: ChunkSpec) -> ChunkSpec:
        offset, scale = self.parameters(spec)
        fill = _encode(np.array(spec.fill_value, dtype=spec.dtype), offset, scale, _FillValueError)
        return ChunkSpec(spec.shape, spec.data_type, fill[()])

    def encode(self, array: np.ndarray, spec: ChunkSpec) -> np.ndarray:
        offset, scale = self.parameters(spec)
        return _encode(array, offset, scale, ChunkEncodeError)

    def decode(self, array: np.ndarray, spec: ChunkSpec) -> np.ndarray:
        offset, scale = self.parameters(spec)
        if spec.dtype.kind == "f":
            return _float_step(array, lambda x: x / scale + offset, "x / scale + offset", ChunkDecodeError)
        quotient = _integer_step(array, scale, "divide", ChunkDecodeError)
        return _integer_step(quotient, offset, "add", ChunkDecodeError)


class _FillValueError(MetadataError):
    def __init__(self, message: str) -> None:
        super().__init__(
            f"{_PREFIX}: the fill value is transformed like the data (spec, 'Fill value handling') and "
            f"{message}; choose a fill value inside the range the codec can encode"
        )


def _encode(array: np.ndarray, offset: Any, scale: Any, error: type) -> np.ndarray:
    if array.dtype.kind == "f":
        return _float_step(array, lambda x: (x - offset) * scale, "(x - offset) * scale", error)
    return _integer_step(_integer_step(array, offset, "subtract", error), scale, "multiply", error)


def _float_step(array: np.ndarray, step: Any, formula: str, error: type) -> np.ndarray:
    with np.errstate(all="ignore"):
        result = step(array)  # NumPy keeps the array's float type: scalars are of that type
    overflow = np.isfinite(array) & ~np.isfinite(result)
    if overflow.any():
        raise error(f"{formula} is not representable in {array.dtype} for x = {array[overflow][0]}")
    return result


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


#: operation -> (the inputs x whose exact result lies in [low, high], given the operand v; NumPy's op; symbol)
_INTEGER_OPERATIONS = {
    "subtract": (lambda low, high, v: (low + v, high + v), np.subtract, "-"),
    "add": (lambda low, high, v: (low - v, high - v), np.add, "+"),
    "multiply": (
        lambda low, high, v: (
            (_ceil_div(low, v), high // v) if v > 0 else (_ceil_div(high, v), low // v) if v < 0 else (low, high)
        ),
        np.multiply,
        "*",
    ),
    # v != 0 (validate); x / v must also be a whole number
    "divide": (lambda low, high, v: (low * v, high * v) if v > 0 else (high * v, low * v), np.floor_divide, "/"),
}


def _integer_step(array: np.ndarray, operand: Any, operation: str, error: type) -> np.ndarray:
    """``array`` (op) ``operand`` in the array's integer type, refusing results it cannot hold."""
    info, value = np.iinfo(array.dtype), int(operand)
    input_range, function, symbol = _INTEGER_OPERATIONS[operation]
    first, last = input_range(int(info.min), int(info.max), value)
    bad = (array < max(first, info.min)) | (array > min(last, info.max))
    if operation == "divide":
        bad |= array % value != 0
    if bad.any():
        raise error(f"x {symbol} {value} is not representable in {array.dtype} for x = {array[bad][0]}")
    with np.errstate(all="ignore"):
        return function(array, array.dtype.type(value)).astype(array.dtype, copy=False)
