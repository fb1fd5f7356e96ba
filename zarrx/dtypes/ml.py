"""The registry's machine-learning data types, through ml_dtypes (zarr-extensions ``data-types``).

* **Floats** ``bfloat16``, ``float8_e3m4``, ``float8_e4m3``, ``float8_e4m3b11fnuz``,
  ``float8_e4m3fnuz``, ``float8_e5m2``, ``float8_e5m2fnuz``, ``float8_e8m0fnu``,
  ``float6_e2m3fn``, ``float6_e3m2fn``, ``float4_e2m1fn`` -- and ``float8_e4m3fn``, which
  tensorstore writes though the registry does not list it. In memory each is the ml_dtypes type
  of the same name.
* **Narrow integers** ``int2``, ``int4``, ``uint2``, ``uint4`` (ml_dtypes).
* **Complex numbers** ``complex_bfloat16`` (``ml_dtypes.bcomplex32``), ``complex_float16``
  (``ml_dtypes.complex32``), ``complex_float32`` / ``complex_float64`` (the registry's aliases of
  ``complex64`` / ``complex128``: NumPy's types, and the name read is the name written back) and
  ``complex_<t>`` for every 8-, 6- and 4-bit float ``t`` above. NumPy has no complex type of
  those; they are ``complex64`` in memory: each component widens to float32 exactly, and a
  write rounds each component to ``t`` as a cast would.

Fill values take the core spec's forms (a number, ``"NaN"``, ``"Infinity"``, ``"-Infinity"``,
``"0x"`` and two hex digits per stored byte), with the registry's rules per type: ``"NaN"`` is
the bit pattern the type's page names (``0x7fc0`` for bfloat16, ``0x80`` for the ``fnuz``
types...), and a type without NaN or infinities refuses those constants. A number is the value
(rounded to nearest; ``float8_e8m0fnu`` has no zero, so 0 is its smallest value, ``0x00``).
One-byte floats (and their complex forms) write the hex form: zarrs reads their JSON numbers as
bit patterns and tensorstore misconverts them for ``float8_e8m0fnu``, the hex form means the
same bits to all. Integers are JSON
integers in the type's range; complex numbers ``[real, imaginary]``. A user's fill value outside
the type's range is refused (ml_dtypes would saturate it or make it NaN).

The ``bytes`` codec stores a sub-byte type in one byte whose upper bits it ignores on reading
(``0xff`` is an ``int4`` -1) and writes as zero; 2-byte types swap by 16-bit units for
``"endian": "big"``; ``complex_float8_*`` and smaller take one byte per component.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar

import ml_dtypes
import numpy as np

from zarrx.dtypes.base import JSON
from zarrx.dtypes.numeric import Complex64, Complex128, NamedType, Scalar, is_json_integer, is_json_number
from zarrx.dtypes.registry import register_data_type
from zarrx.errors import MetadataError

__all__ = ["FloatFormat", "FLOATS", "INTEGERS", "COMPLEX"]


@dataclass(frozen=True)
class FloatFormat:
    """The fill-value forms of one float type (also the components of a complex type)."""

    name: str
    numpy_dtype: np.dtype
    #: the bit pattern ``"NaN"`` stands for; None: the type has no NaN
    nan_bits: int | None
    has_infinity: bool
    #: float8_e8m0fnu has no zero: 0 rounds to its smallest value, 2**-127 (bits 0x00)
    has_zero: bool = True

    @property
    def hex_fill(self) -> bool:
        """Whether fill values are written in the hex form: one-byte types, whose JSON numbers
        zarrs reads as bit patterns and tensorstore misreads for float8_e8m0fnu -- the hex form
        means the same bits to every reader."""
        return self.numpy_dtype.itemsize == 1

    @property
    def _bits(self) -> np.dtype:
        return np.dtype(f"u{self.numpy_dtype.itemsize}")

    def from_json(self, value: JSON, field_name: str = "fill_value") -> Any:
        """A scalar of the type from a JSON fill value (bit-exact for the hex form)."""
        digits = 2 * self.numpy_dtype.itemsize
        if isinstance(value, str):
            if value == "NaN" and self.nan_bits is not None:
                return np.array(self.nan_bits, dtype=self._bits).view(self.numpy_dtype)[()]
            if value in ("Infinity", "-Infinity") and self.has_infinity:
                return np.array(-np.inf if value[0] == "-" else np.inf).astype(self.numpy_dtype)[()]
            if re.fullmatch(f"0x[0-9a-fA-F]{{{digits}}}", value):
                return np.array(int(value[2:], 16), dtype=self._bits).view(self.numpy_dtype)[()]
            allowed = ["a number", *(["'NaN'"] if self.nan_bits is not None else []),
                       *(["'Infinity'", "'-Infinity'"] if self.has_infinity else [])]  # fmt: skip
            raise MetadataError(
                f"{field_name}: expected {', '.join(allowed)} or '0x' followed by {digits} hex digits for "
                f"{self.name}, found {value!r}"
            )
        if not is_json_number(value):
            raise MetadataError(f"{field_name}: expected a JSON number or a float string for {self.name}, found {value!r}")
        try:
            as_float = float(value)
        except OverflowError:  # an integer beyond float64
            as_float = np.inf if value > 0 else -np.inf
        if as_float == 0 and not self.has_zero:
            return np.zeros((), dtype=self.numpy_dtype)[()]  # the nearest value: 2**-127
        with np.errstate(all="ignore"):  # ml_dtypes rounds to nearest, as the spec says
            return np.array(as_float).astype(self.numpy_dtype)[()]

    def to_json(self, value: Any) -> JSON:
        """The canonical JSON form of a scalar of the type."""
        scalar = np.array(value, dtype=self.numpy_dtype)
        if self.hex_fill and not (np.isnan(scalar) and int(scalar.view(self._bits)) == self.nan_bits):
            return f"0x{int(scalar.view(self._bits)):02x}"
        if np.isnan(scalar):
            bits = int(scalar.view(self._bits)[()])
            return "NaN" if bits == self.nan_bits else f"0x{bits:0{2 * self.numpy_dtype.itemsize}x}"
        if np.isinf(scalar):
            return "Infinity" if scalar > 0 else "-Infinity"
        return float(scalar)

    def cast(self, value: Any, type_name: str) -> Any:
        """A user's number, or a JSON float string, as a scalar of the type; out of range is refused."""
        if isinstance(value, self.numpy_dtype.type):
            return value
        if isinstance(value, str):
            return self.from_json(value)
        if not is_json_number(value):
            raise MetadataError(f"fill_value: {type_name} needs a real number, found {type(value).__name__} {value!r}")
        as_float = float(value)
        if as_float == 0 and not self.has_zero:
            return np.zeros((), dtype=self.numpy_dtype)[()]
        if (np.isnan(as_float) and self.nan_bits is None) or (np.isinf(as_float) and not self.has_infinity):
            raise MetadataError(f"fill_value: {type_name} has no {value!r}")
        with np.errstate(all="ignore"):
            scalar = np.array(as_float).astype(self.numpy_dtype)[()]
        too_large = not self.has_infinity and abs(as_float) > float(ml_dtypes.finfo(self.numpy_dtype).max)
        if np.isfinite(as_float) and (too_large or not np.isfinite(scalar)):
            raise MetadataError(f"fill_value: {value!r} is outside the range of {type_name}")
        return scalar


def _float_format(name: str, nan_bits: int | None, has_infinity: bool) -> FloatFormat:
    return FloatFormat(name, np.dtype(getattr(ml_dtypes, name)), nan_bits, has_infinity, name != "float8_e8m0fnu")


#: name -> (fill-value format, packbits bits); NaN patterns from each type's registry page
FLOATS: dict[str, tuple[FloatFormat, int]] = {
    name: (_float_format(name, nan_bits, has_infinity), bits)
    for name, nan_bits, has_infinity, bits in [
        ("bfloat16", 0x7FC0, True, 16),
        ("float8_e3m4", 0x78, True, 8),
        ("float8_e4m3", 0x7C, True, 8),
        ("float8_e4m3fn", 0x7F, False, 8),  # tensorstore's; not in the registry
        ("float8_e4m3b11fnuz", 0x80, False, 8),
        ("float8_e4m3fnuz", 0x80, False, 8),
        ("float8_e5m2", 0x7E, True, 8),
        ("float8_e5m2fnuz", 0x80, False, 8),
        ("float8_e8m0fnu", 0xFF, False, 8),
        ("float6_e2m3fn", None, False, 6),
        ("float6_e3m2fn", None, False, 6),
        ("float4_e2m1fn", None, False, 4),
    ]
}
#: name -> (bits, signed)
INTEGERS: dict[str, tuple[int, bool]] = {"int2": (2, True), "int4": (4, True), "uint2": (2, False), "uint4": (4, False)}


class _MLScalar(Scalar):
    """A type of one ml_dtypes scalar type (a float or a narrow integer)."""

    @classmethod
    def from_numpy(cls, dtype: np.dtype) -> Any:
        return cls() if dtype.type is cls.numpy_type else None  # not by kind: ml_dtypes' are all "V"

    # -- the bytes codec's layout ----------------------------------------------------------
    @property
    def _unit(self) -> np.dtype:
        return np.dtype(f"u{self.numpy_dtype.itemsize}")

    @property
    def _mask(self) -> int | None:
        """The bits of the byte that hold a sub-byte type's value (None: all of them)."""
        bits = self.packbits_bits
        return (1 << bits) - 1 if bits is not None and bits < 8 else None

    def stored_is_memory(self, byte_order: str) -> bool:
        return self._mask is None and (self.numpy_dtype.itemsize == 1 or np.dtype(byte_order + "u2").isnative)

    def to_stored(self, array: np.ndarray, byte_order: str) -> np.ndarray:
        bits = np.ascontiguousarray(array, dtype=self.numpy_dtype).view(self._unit)
        if self._mask is not None:
            return bits & np.uint8(self._mask)
        return bits.astype(self._unit.newbyteorder(byte_order), copy=False)

    def from_stored(self, raw: np.ndarray, shape: tuple[int, ...], byte_order: str) -> np.ndarray:
        if self._mask is not None:
            return (raw & np.uint8(self._mask)).view(self.numpy_dtype).reshape(shape)
        units = raw.view(self._unit.newbyteorder(byte_order))
        if not units.dtype.isnative:
            units = units.astype(self._unit)
        return units.view(self.numpy_dtype).reshape(shape)

    def default_fill_value(self) -> Any:
        return self.cast_scalar(0)


class MLFloat(_MLScalar):
    """A float type of ml_dtypes (see the module docstring)."""

    format: ClassVar[FloatFormat]

    def fill_value_from_json(self, value: JSON) -> Any:
        return self.format.from_json(value)

    def fill_value_to_json(self, value: Any) -> JSON:
        return self.format.to_json(self.cast_scalar(value))

    def cast_scalar(self, value: Any) -> Any:
        return self.format.cast(value, self.name)

    def default_fill_value(self) -> Any:
        return self.format.from_json(0.0)  # float8_e8m0fnu: its smallest value, as tensorstore's default


class MLInteger(_MLScalar):
    """A narrow integer type of ml_dtypes."""

    def fill_value_from_json(self, value: JSON) -> Any:
        if not is_json_integer(value):
            raise MetadataError(f"fill_value: {self.name} needs a JSON integer, found {value!r}")
        return self.cast_scalar(value)

    def fill_value_to_json(self, value: Any) -> JSON:
        return int(self.cast_scalar(value))

    def cast_scalar(self, value: Any) -> Any:
        if is_json_number(value) and not is_json_integer(value) and float(value).is_integer():
            value = int(value)
        if isinstance(value, self.numpy_type):
            return value
        if not is_json_integer(value):
            raise MetadataError(f"fill_value: {self.name} needs an integer, found {value!r}")
        info = ml_dtypes.iinfo(self.numpy_type)
        if not info.min <= int(value) <= info.max:
            raise MetadataError(f"fill_value: {value} is outside the range of {self.name} [{info.min}, {info.max}]")
        return np.array(int(value)).astype(self.numpy_dtype)[()]


for _name, (_format, _bits) in FLOATS.items():
    register_data_type(type(
        "".join(part.title() for part in _name.split("_")), (MLFloat,),
        {"name": _name, "numpy_type": _format.numpy_dtype.type, "format": _format, "packbits_bits": _bits,
         "__doc__": f"``{_name}`` (ml_dtypes.{_name})."},
    ))  # fmt: skip
for _name, (_bits, _signed) in INTEGERS.items():
    register_data_type(type(
        _name.title(), (MLInteger,),
        {"name": _name, "numpy_type": getattr(ml_dtypes, _name), "packbits_bits": _bits, "packbits_signed": _signed,
         "__doc__": f"``{_name}`` (ml_dtypes.{_name})."},
    ))  # fmt: skip


# -- complex numbers ------------------------------------------------------------------------------
class ComplexFloat(NamedType):
    """``complex_<t>``: a real and an imaginary component of the float type ``t``."""

    component: ClassVar[FloatFormat]
    #: the in-memory type: ml_dtypes' complex type where there is one, else NumPy complex64
    memory_type: ClassVar[type]

    @property
    def numpy_dtype(self) -> np.dtype:
        return np.dtype(self.memory_type)

    @property
    def item_size(self) -> int:
        return 2 * self.component.numpy_dtype.itemsize

    @property
    def needs_endian(self) -> bool:
        return self.component.numpy_dtype.itemsize > 1

    @property
    def _native(self) -> bool:
        """Whether memory holds the stored layout (ml_dtypes' complex types, in native order)."""
        return self.numpy_dtype.itemsize == self.item_size

    @classmethod
    def from_numpy(cls, dtype: np.dtype) -> Any:
        native = np.dtype(cls.memory_type).itemsize == 2 * cls.component.numpy_dtype.itemsize
        return cls() if native and dtype.type is cls.memory_type else None

    def stored_is_memory(self, byte_order: str) -> bool:
        return self._native and self.component.numpy_dtype.itemsize > 1 and np.dtype(byte_order + "u2").isnative

    def to_stored(self, array: np.ndarray, byte_order: str) -> np.ndarray:
        component = self.component.numpy_dtype
        if self._native:
            units = np.ascontiguousarray(array, dtype=self.numpy_dtype).view(np.uint16)
            return units.astype(np.dtype(byte_order + "u2"), copy=False)
        values = np.asarray(array)
        with np.errstate(all="ignore"):
            parts = np.stack([values.real, values.imag], axis=-1).astype(component)
        mask = (1 << self.packbits_bits) - 1 if self.packbits_bits < 8 else 0xFF  # type: ignore[operator]
        return parts.view(np.uint8) & np.uint8(mask)

    def from_stored(self, raw: np.ndarray, shape: tuple[int, ...], byte_order: str) -> np.ndarray:
        if self._native:
            units = raw.view(np.dtype(byte_order + "u2"))
            return units.astype(np.uint16, copy=False).view(self.numpy_dtype).reshape(shape)
        mask = (1 << self.packbits_bits) - 1 if self.packbits_bits < 8 else 0xFF  # type: ignore[operator]
        parts = (raw & np.uint8(mask)).view(self.component.numpy_dtype).astype(np.float32)
        return parts.view(np.complex64).reshape(shape)

    def _parts(self, value: Any) -> np.ndarray:
        """The two components of a scalar of the type, as the component type."""
        if self._native:
            return np.array(value, dtype=self.numpy_dtype).reshape(1).view(self.component.numpy_dtype)
        with np.errstate(all="ignore"):
            return np.array([np.real(value), np.imag(value)]).astype(self.component.numpy_dtype)

    def _from_parts(self, parts: np.ndarray) -> Any:
        if self._native:
            return parts.view(self.numpy_dtype)[0]
        return np.complex64(complex(float(parts[0]), float(parts[1])))

    def fill_value_from_json(self, value: JSON) -> Any:
        if not isinstance(value, (list, tuple)) or len(value) != 2:
            raise MetadataError(f"fill_value: {self.name} needs [real, imaginary], found {value!r}")
        component = self.component.numpy_dtype
        return self._from_parts(np.array([self.component.from_json(part) for part in value], dtype=component))

    def fill_value_to_json(self, value: Any) -> JSON:
        return [self.component.to_json(part) for part in self._parts(self.cast_scalar(value))]

    def cast_scalar(self, value: Any) -> Any:
        if isinstance(value, (list, tuple)) and len(value) == 2:
            component = self.component.numpy_dtype
            return self._from_parts(np.array([self.component.cast(part, self.name) for part in value], dtype=component))
        if self._native and isinstance(value, self.numpy_dtype.type):
            return value
        if not is_json_number(value) and not isinstance(value, (complex, np.complexfloating, self.numpy_dtype.type)):
            raise MetadataError(f"fill_value: {self.name} needs a number or [real, imaginary], found {value!r}")
        parts = [self.component.cast(float(np.real(value)), self.name), self.component.cast(float(np.imag(value)), self.name)]
        return self._from_parts(np.array(parts, dtype=self.component.numpy_dtype))

    def default_fill_value(self) -> Any:
        return self._from_parts(np.zeros(2, dtype=self.component.numpy_dtype))


#: name -> (component float format, packbits bits per component, in-memory type)
COMPLEX: dict[str, tuple[FloatFormat, int, type]] = {
    "complex_bfloat16": (FLOATS["bfloat16"][0], 16, ml_dtypes.bcomplex32),
    "complex_float16": (FloatFormat("float16", np.dtype(np.float16), 0x7E00, True), 16, ml_dtypes.complex32),
    **{
        f"complex_{name}": (FLOATS[name][0], FLOATS[name][1], np.complex64)
        for name in FLOATS
        if name != "bfloat16" and name != "float8_e4m3fn"
    },
}

for _name, (_component, _bits, _memory) in COMPLEX.items():
    register_data_type(type(
        "".join(part.title() for part in _name.split("_")), (ComplexFloat,),
        {"name": _name, "component": _component, "memory_type": _memory, "packbits_bits": _bits,
         "packbits_components": 2, "__doc__": f"``{_name}``."},
    ))  # fmt: skip


@register_data_type
class ComplexFloat32(Complex64):
    """``complex_float32``: the registry's alias of ``complex64``, written back under this name."""

    name = "complex_float32"

    @classmethod
    def from_numpy(cls, dtype: np.dtype) -> Any:
        return None  # NumPy complex64 is the core complex64


@register_data_type
class ComplexFloat64(Complex128):
    """``complex_float64``: the registry's alias of ``complex128``, written back under this name."""

    name = "complex_float64"

    @classmethod
    def from_numpy(cls, dtype: np.dtype) -> Any:
        return None
