"""The core data types (core spec, "Data types" and "Permitted fill values").

``bool``, ``int8``…``uint64``, ``float16``/``float32``/``float64``,
``complex64``/``complex128`` and the raw bits types ``r<N>`` (``N`` a positive
multiple of 8, NumPy ``V{N/8}``).

Fill values follow the core spec exactly:

* ``bool``: a JSON boolean.
* integers: a JSON integer (no fraction, not a boolean) in the type's range.
* floats: a JSON number (rounded to nearest, ties to even), ``"NaN"``,
  ``"Infinity"``, ``"-Infinity"`` or ``"0x…"``: the bit pattern as exactly
  ``2 * itemsize`` hex digits, decoded bit-exactly (NaN payloads survive).
  Written as a JSON number when finite, ``"NaN"`` for the canonical NaN (sign
  0, mantissa MSB only), the hex form for any other NaN, ``"±Infinity"``.
* complex: ``[real, imaginary]``, each written as a float.
* ``r<N>``: a list of ``N / 8`` integers in ``[0, 255]``.
"""

from __future__ import annotations

import numbers
import re
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

import numpy as np

from zarrx.dtypes.registry import register_data_type
from zarrx.dtypes.base import JSON, DataType
from zarrx.errors import MetadataError

__all__ = [
    "Bool", "Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16", "UInt32", "UInt64",
    "Float16", "Float32", "Float64", "Complex64", "Complex128", "RawBits",
    "NamedType", "Scalar", "parse_no_configuration", "parse_byte_list", "float_from_json", "float_to_json",
]  # fmt: skip


def parse_no_configuration(name: str, configuration: Mapping[str, Any]) -> None:
    """Reject a configuration on a data type that takes none."""
    if configuration:
        raise MetadataError(
            f"data_type.configuration: {name!r} takes no configuration, found {dict(configuration)!r}"
        )


def is_json_integer(value: Any) -> bool:
    """Whether ``value`` is a JSON integer (a Python/NumPy integer, not a boolean or timedelta)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_, np.timedelta64))


def is_json_number(value: Any) -> bool:
    """Whether ``value`` is a JSON number (a Python/NumPy real, not a boolean or timedelta)."""
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_, np.timedelta64))


def parse_byte_list(value: Any, length: int | None, field_name: str = "fill_value") -> bytes:
    """A JSON list of integers in ``[0, 255]`` (exactly ``length`` of them unless None) as bytes."""
    if not isinstance(value, list) or not all(is_json_integer(item) and 0 <= item <= 255 for item in value):
        raise MetadataError(f"{field_name}: expected a list of integers in [0, 255], found {value!r}")
    if length is not None and len(value) != length:
        raise MetadataError(f"{field_name}: expected {length} bytes, found {len(value)}: {value!r}")
    return bytes(value)


class NamedType(DataType):
    """A data type without configuration whose JSON form is its name."""

    @classmethod
    def from_json(cls, name: str, configuration: Mapping[str, Any]) -> DataType:
        parse_no_configuration(name, configuration)
        return cls()

    def to_json(self) -> JSON:
        return self.name


class Scalar(NamedType):
    """A core numeric type: a NumPy scalar type, named by its spec name."""

    numpy_type: ClassVar[type[np.generic]]

    @property
    def numpy_dtype(self) -> np.dtype:
        return np.dtype(self.numpy_type)

    @property
    def needs_endian(self) -> bool:
        return self.numpy_dtype.itemsize > 1

    @classmethod
    def from_numpy(cls, dtype: np.dtype) -> DataType | None:
        # kind and size, not the scalar type: 'q' and 'l' are distinct int64 types on Linux
        own = np.dtype(cls.numpy_type)
        return cls() if (dtype.kind, dtype.itemsize) == (own.kind, own.itemsize) else None

    def default_fill_value(self) -> Any:
        return self.numpy_type(0)

    def cast_scalar(self, value: Any) -> Any:
        try:
            return super().cast_scalar(value)
        except (TypeError, ValueError, OverflowError) as error:
            raise MetadataError(f"fill_value: cannot convert {value!r} to {self.name} ({error})") from None


@register_data_type
class Bool(Scalar):
    name = "bool"
    numpy_type = np.bool_
    packbits_bits = 1

    def fill_value_from_json(self, value: JSON) -> Any:
        if not isinstance(value, (bool, np.bool_)):
            raise MetadataError(f"fill_value: bool needs a JSON boolean (true/false), found {value!r}")
        return np.bool_(value)

    def fill_value_to_json(self, value: Any) -> JSON:
        return bool(self.cast_scalar(value))

    def cast_scalar(self, value: Any) -> Any:
        """A boolean or a number (its truth); strings are refused ("false" is not False)."""
        if not isinstance(value, (bool, np.bool_)) and not is_json_number(value):
            raise MetadataError(f"fill_value: bool needs a boolean, found {type(value).__name__} {value!r}")
        return np.bool_(value)


class _Integer(Scalar):
    def fill_value_from_json(self, value: JSON) -> Any:
        if not is_json_integer(value):
            raise MetadataError(
                f"fill_value: {self.name} needs a JSON integer (no fraction or exponent), found {value!r}"
            )
        return self._in_range(int(value))

    def fill_value_to_json(self, value: Any) -> JSON:
        return int(self.cast_scalar(value))

    def cast_scalar(self, value: Any) -> Any:
        """An integral value in range; floats must be whole numbers (``3.0`` is fine, ``3.5`` is not)."""
        if is_json_number(value) and not is_json_integer(value) and float(value).is_integer():
            value = int(value)
        if not is_json_integer(value) and not isinstance(value, (bool, np.bool_)):
            raise MetadataError(f"fill_value: {self.name} needs an integer, found {value!r}")
        return self._in_range(int(value))

    def _in_range(self, value: int) -> Any:
        info = np.iinfo(self.numpy_type)
        if not info.min <= value <= info.max:
            raise MetadataError(
                f"fill_value: {value} is outside the range of {self.name} [{info.min}, {info.max}]"
            )
        return self.numpy_type(value)


@register_data_type
class Int8(_Integer):
    name = "int8"
    numpy_type = np.int8
    packbits_bits = 8
    packbits_signed = True


@register_data_type
class Int16(_Integer):
    name = "int16"
    numpy_type = np.int16
    packbits_bits = 16
    packbits_signed = True


@register_data_type
class Int32(_Integer):
    name = "int32"
    numpy_type = np.int32
    packbits_bits = 32
    packbits_signed = True


@register_data_type
class Int64(_Integer):
    name = "int64"
    numpy_type = np.int64
    packbits_bits = 64
    packbits_signed = True


@register_data_type
class UInt8(_Integer):
    name = "uint8"
    numpy_type = np.uint8
    packbits_bits = 8


@register_data_type
class UInt16(_Integer):
    name = "uint16"
    numpy_type = np.uint16
    packbits_bits = 16


@register_data_type
class UInt32(_Integer):
    name = "uint32"
    numpy_type = np.uint32
    packbits_bits = 32


@register_data_type
class UInt64(_Integer):
    name = "uint64"
    numpy_type = np.uint64
    packbits_bits = 64


def _bits_type(float_dtype: np.dtype) -> np.dtype:
    return np.dtype(f"u{float_dtype.itemsize}")


def float_from_json(value: JSON, float_dtype: np.dtype, field_name: str = "fill_value") -> np.floating:
    """Decode a JSON float form into a scalar of ``float_dtype``, bit-exactly for the string forms."""
    digits = 2 * float_dtype.itemsize
    if isinstance(value, str):
        special = _SPECIAL_FLOAT_BITS.get(value)
        hex_value = special(float_dtype) if special else value
        if re.fullmatch(f"0x[0-9a-fA-F]{{{digits}}}", hex_value):
            bits = np.array(int(hex_value[2:], 16), dtype=_bits_type(float_dtype))
            return bits.view(float_dtype)[()]
        raise MetadataError(
            f"{field_name}: expected a number, 'NaN', 'Infinity', '-Infinity' or '0x' followed by "
            f"{digits} hex digits for {float_dtype.name}, found {value!r}"
        )
    if not is_json_number(value):
        raise MetadataError(
            f"{field_name}: expected a JSON number or a float string for {float_dtype.name}, found {value!r}"
        )
    # Python's json already rounded the decimal text to float64; NumPy rounds that to nearest even
    try:
        as_float64 = float(value)
    except OverflowError:  # an integer beyond float64: round to nearest is the infinity
        as_float64 = np.inf if value > 0 else -np.inf
    with np.errstate(over="ignore"):
        return np.array(as_float64, dtype=np.float64).astype(float_dtype)[()]


def _canonical_nan_bits(float_dtype: np.dtype) -> str:
    # sign 0, exponent all ones, mantissa MSB 1, rest 0 (core spec, "Permitted fill values")
    bits = float_dtype.itemsize * 8
    mantissa = np.finfo(float_dtype).nmant
    return format(((1 << (bits - 1 - mantissa)) - 1) << mantissa | 1 << (mantissa - 1), f"0{bits // 4}x")


def _infinity_bits(float_dtype: np.dtype, sign: int = 0) -> str:
    bits = float_dtype.itemsize * 8
    mantissa = np.finfo(float_dtype).nmant
    return format((sign << (bits - 1)) | ((1 << (bits - 1 - mantissa)) - 1) << mantissa, f"0{bits // 4}x")


#: the named float strings, as the "0x" bit pattern of a float dtype
_SPECIAL_FLOAT_BITS = {
    "NaN": lambda dtype: "0x" + _canonical_nan_bits(dtype),
    "Infinity": lambda dtype: "0x" + _infinity_bits(dtype),
    "-Infinity": lambda dtype: "0x" + _infinity_bits(dtype, sign=1),
}


def float_to_json(value: Any, float_dtype: np.dtype) -> JSON:
    """The canonical JSON form of a float scalar (see the module docstring)."""
    scalar = np.array(value, dtype=float_dtype)  # a no-op (bits kept) for a scalar of float_dtype
    if np.isnan(scalar):
        bits = format(int(scalar.view(_bits_type(float_dtype))[()]), f"0{2 * float_dtype.itemsize}x")
        return "NaN" if bits == _canonical_nan_bits(float_dtype) else "0x" + bits
    if np.isinf(scalar):
        return "Infinity" if scalar > 0 else "-Infinity"
    return float(scalar)


class _Float(Scalar):
    def fill_value_from_json(self, value: JSON) -> Any:
        return float_from_json(value, self.numpy_dtype)

    def fill_value_to_json(self, value: Any) -> JSON:
        return float_to_json(self.cast_scalar(value), self.numpy_dtype)

    def cast_scalar(self, value: Any) -> Any:
        """Numbers round to nearest; strings may use the JSON forms (``"NaN"``, ``"0x7fc00001"``)."""
        if isinstance(value, self.numpy_type):
            return value
        if isinstance(value, str):
            return float_from_json(value, self.numpy_dtype)
        if not is_json_number(value):
            raise MetadataError(
                f"fill_value: {self.name} needs a real number, found {type(value).__name__} {value!r}"
            )
        with np.errstate(over="ignore"):
            return super().cast_scalar(value)


@register_data_type
class Float16(_Float):
    name = "float16"
    numpy_type = np.float16
    packbits_bits = 16


@register_data_type
class Float32(_Float):
    name = "float32"
    numpy_type = np.float32
    packbits_bits = 32


@register_data_type
class Float64(_Float):
    name = "float64"
    numpy_type = np.float64
    packbits_bits = 64


class _Complex(Scalar):
    component_type: ClassVar[type[np.generic]]

    def fill_value_from_json(self, value: JSON) -> Any:
        if not isinstance(value, (list, tuple)) or len(value) != 2:
            raise MetadataError(f"fill_value: {self.name} needs [real, imaginary], found {value!r}")
        component = np.dtype(self.component_type)
        parts = np.array([float_from_json(part, component) for part in value], dtype=component)
        return parts.view(self.numpy_dtype)[0]

    def fill_value_to_json(self, value: Any) -> JSON:
        parts = np.array(self.cast_scalar(value), dtype=self.numpy_dtype).reshape(1).view(self.component_type)
        return [float_to_json(part, np.dtype(self.component_type)) for part in parts]

    def cast_scalar(self, value: Any) -> Any:
        if isinstance(value, (list, tuple)):
            return self.fill_value_from_json(list(value))
        if not isinstance(value, numbers.Complex) or isinstance(value, (bool, np.bool_, np.timedelta64)):
            raise MetadataError(
                f"fill_value: {self.name} needs a number or [real, imaginary], found {value!r}"
            )
        return super().cast_scalar(value)


@register_data_type
class Complex64(_Complex):
    name = "complex64"
    numpy_type = np.complex64
    component_type = np.float32
    packbits_bits = 32
    packbits_components = 2


@register_data_type
class Complex128(_Complex):
    name = "complex128"
    numpy_type = np.complex128
    component_type = np.float64
    packbits_bits = 64
    packbits_components = 2


@register_data_type
@dataclass(frozen=True, eq=False, repr=False)
class RawBits(DataType):
    """``r<N>``: ``N`` raw bits (a positive multiple of 8); NumPy ``V{N/8}``."""

    bits: int

    #: the family's name; each instance writes ``r<N>``
    name: ClassVar[str] = "r*"
    name_pattern: ClassVar[str] = r"r[0-9]+"

    def __post_init__(self) -> None:
        if self.bits <= 0 or self.bits % 8:
            raise MetadataError(
                f"data_type: raw bits r<N> need N a positive multiple of 8, found r{self.bits}"
            )

    @property
    def numpy_dtype(self) -> np.dtype:
        return np.dtype(f"V{self.bits // 8}")

    @classmethod
    def from_json(cls, name: str, configuration: Mapping[str, Any]) -> DataType:
        parse_no_configuration(name, configuration)
        bits = int(name[1:])
        if name != f"r{bits}":
            raise MetadataError(f"data_type: raw bits are written r<N> without leading zeros, found {name!r}")
        return cls(bits)

    def to_json(self) -> JSON:
        return f"r{self.bits}"

    @classmethod
    def from_numpy(cls, dtype: np.dtype) -> DataType | None:
        # the NumPy void type only: extension dtypes (ml_dtypes' bfloat16, int4...) are kind "V" too,
        # and must not be stored as raw bytes
        if dtype.type is not np.void or dtype.fields is not None or dtype.subdtype is not None:
            return None
        if dtype.itemsize == 0:
            raise MetadataError(
                "dtype: a zero-size void dtype ('V0') has no Zarr data type; give a size like 'V4'"
            )
        return cls(8 * dtype.itemsize)

    def fill_value_from_json(self, value: JSON) -> Any:
        return np.void(parse_byte_list(value, self.bits // 8))

    def fill_value_to_json(self, value: Any) -> JSON:
        return list(self.cast_scalar(value).tobytes())

    def cast_scalar(self, value: Any) -> Any:
        """Bytes (or an ``np.void``) of exactly ``N / 8`` bytes, or a list of byte values."""
        if isinstance(value, list):
            return self.fill_value_from_json(value)
        raw = value.tobytes() if isinstance(value, np.void) else value
        if not isinstance(raw, (bytes, bytearray)) or len(raw) != self.bits // 8:
            raise MetadataError(f"fill_value: {self.to_json()} needs {self.bits // 8} bytes, found {value!r}")
        return np.void(bytes(raw))

    def default_fill_value(self) -> Any:
        return np.void(bytes(self.bits // 8))
