"""Zarr v2 data types and fill values (v2 spec, "Data type encoding" and "Fill value encoding").

A v2 ``dtype`` is a NumPy type string *with its byte order* (``"<f8"``, ``">i4"``,
``"|b1"``, ``"|S12"``, ``"<U5"``, ``"|V3"``, ``"<M8[ns]"``) or, for structured types, a
list of ``[name, dtype]`` / ``[name, dtype, shape]`` lists (recursively). ``"|O"`` (NumPy
objects) is only meaningful with an *object codec* among the filters, which says what the
objects are (seed 003, "Object Data Type").

* :func:`parse_v2_dtype` reads the JSON into the *stored* NumPy dtype (byte order as
  stored); :func:`v2_dtype_to_json` is its inverse.
* :func:`v2_data_type` gives the :class:`~zarrx.dtypes.DataType` zarrx uses in memory
  (native byte order, like every zarrx array): the Zarr v3 type when there is one --
  so a v2 array converts to v3 with the same data type -- else a v2-only type:
  :class:`NumpyV2Type` (structured types with subarray fields) or
  :class:`VLenArrayType` (the ``vlen-array`` object codec: object arrays of 1-d arrays).
  Object arrays map by codec: ``vlen-utf8`` -> ``string``, ``vlen-bytes`` -> ``bytes``.
* :func:`parse_v2_fill_value` / :func:`v2_fill_value_to_json`: the v2 rules -- ``null``
  (no fill value; zarrx then fills with the type's default, as zarr-python reads it),
  ``"NaN"`` / ``"Infinity"`` / ``"-Infinity"`` for floats, ``[real, imag]`` for complex,
  integers (``-2**63`` = NaT) for datetimes, base64 for ``S``, ``V`` and structured
  values (of the bytes in the stored byte order), plain strings for ``U``.

Errors are :class:`~zarrx.errors.MetadataError` starting with ``dtype`` or ``fill_value``;
the metadata layer adds the key.
"""

from __future__ import annotations

import base64
import binascii
import math
from typing import Any, ClassVar, Mapping

import numpy as np

from zarrx.dtypes.registry import data_type_from_numpy, parse_data_type
from zarrx.dtypes.base import JSON, DataType
from zarrx.dtypes.numeric import is_json_integer, is_json_number
from zarrx.errors import MetadataError, UnsupportedExtensionError

__all__ = [
    "OBJECT_CODEC_TYPES",
    "NumpyV2Type",
    "VLenArrayType",
    "parse_v2_dtype",
    "v2_dtype_to_json",
    "v2_data_type",
    "v2_dtype_for",
    "parse_v2_fill_value",
    "v2_fill_value_to_json",
]

#: NumPy kinds a v2 dtype may have (object only with an object codec)
_KINDS = "biufcmMSUVO"
#: nesting depth of structured types, and bytes per element, beyond which a dtype is refused
_MAX_DEPTH = 32
_MAX_ITEM_SIZE = 2**31 - 1
_FLOATS = {"NaN": math.nan, "Infinity": math.inf, "+Infinity": math.inf, "-Infinity": -math.inf}

#: object codec id -> v3 data type name of the objects it stores (None: a v2-only type)
OBJECT_CODEC_TYPES: dict[str, str | None] = {"vlen-utf8": "string", "vlen-bytes": "bytes", "vlen-array": None}


# -- dtype ------------------------------------------------------------------------------------


def parse_v2_dtype(value: Any, field_name: str = "dtype") -> np.dtype:
    """The stored NumPy dtype of a v2 ``dtype`` (a type string or a structured list)."""
    return _parse_dtype(value, field_name, 0)


def _parse_dtype(value: Any, field_name: str, depth: int) -> np.dtype:
    if depth > _MAX_DEPTH:
        raise MetadataError(f"{field_name}: structured types nest deeper than {_MAX_DEPTH} levels")
    if isinstance(value, str):
        try:
            dtype = np.dtype(value)
        except (TypeError, ValueError) as error:
            raise MetadataError(f"{field_name}: {value!r} is not a NumPy type string ({error})") from None
        if dtype.kind not in _KINDS or dtype.names is not None or dtype.subdtype is not None:
            raise MetadataError(f"{field_name}: {value!r} is not a Zarr v2 data type")
        return dtype
    if isinstance(value, list) and value:
        fields = []
        for index, item in enumerate(value):
            where = f"{field_name}[{index}]"
            if not isinstance(item, list) or len(item) not in (2, 3) or not isinstance(item[0], str) or not item[0]:
                raise MetadataError(f"{where}: expected [name, dtype] or [name, dtype, shape], found {item!r}")
            field_dtype = _parse_dtype(item[1], f"{where}[1]", depth + 1)
            if field_dtype.kind == "O":
                raise MetadataError(f"{where}[1]: structured fields cannot hold objects ('|O')")
            if len(item) == 3:
                shape = item[2]
                if not isinstance(shape, list) or not all(is_json_integer(n) and n >= 0 for n in shape):
                    raise MetadataError(f"{where}[2]: expected a list of non-negative integers, found {shape!r}")
                fields.append((item[0], field_dtype, tuple(int(n) for n in shape)))
            else:
                fields.append((item[0], field_dtype))
        try:
            dtype = np.dtype(fields)
        except (TypeError, ValueError) as error:
            raise MetadataError(f"{field_name}: not a valid structured type ({error})") from None
        if dtype.itemsize > _MAX_ITEM_SIZE:
            raise MetadataError(f"{field_name}: elements of {dtype.itemsize} bytes are too large")
        return dtype
    raise MetadataError(f"{field_name}: expected a type string like '<f8' or a list of fields, found {value!r}")


def v2_dtype_to_json(dtype: np.dtype) -> JSON:
    """The v2 ``dtype`` for a stored NumPy dtype: ``dtype.str``, or the fields as lists."""
    if dtype.names is None:
        return dtype.str
    fields = []
    for name in dtype.names:
        field_dtype = dtype.fields[name][0]
        if field_dtype.subdtype is not None:
            base, shape = field_dtype.subdtype
            fields.append([name, v2_dtype_to_json(base), list(shape)])
        else:
            fields.append([name, v2_dtype_to_json(field_dtype)])
    return fields


def _native(dtype: np.dtype) -> np.dtype:
    return dtype.newbyteorder("=") if dtype.kind != "O" else dtype


def v2_data_type(stored: np.dtype, object_codec_id: str | None) -> DataType:
    """The in-memory data type of a v2 array of ``stored`` dtype (native byte order)."""
    if stored.kind == "O":
        if object_codec_id not in OBJECT_CODEC_TYPES:
            raise MetadataError(
                "dtype: '|O' (objects) needs one of the object codecs "
                f"{sorted(OBJECT_CODEC_TYPES)} among the filters, found {object_codec_id!r}"
            )
        name = OBJECT_CODEC_TYPES[object_codec_id]
        return VLenArrayType() if name is None else parse_data_type(name)
    native = _native(stored)
    _require_v2_form(native)
    try:
        data_type = data_type_from_numpy(native)
    except MetadataError:
        return NumpyV2Type(native)
    return data_type if data_type.numpy_dtype == native else NumpyV2Type(native)


def v2_dtype_for(data_type: DataType, byte_order: str = "<") -> tuple[np.dtype, str | None]:
    """The stored dtype and object codec id that write ``data_type`` in v2 (for creating arrays)."""
    if isinstance(data_type, VLenArrayType):
        return np.dtype(object), "vlen-array"
    if data_type.is_variable_length:
        codec = {"string": "vlen-utf8", "bytes": "vlen-bytes"}.get(data_type.name)
        if codec is None:
            raise MetadataError(f"dtype: {data_type.to_json()!r} has no Zarr v2 form")
        return np.dtype(object), codec
    if data_type.item_size != data_type.numpy_dtype.itemsize:  # complex_float8_e4m3 is complex64 in memory
        raise MetadataError(
            f"dtype: {data_type.to_json()!r} has no Zarr v2 form (its {data_type.numpy_dtype} in memory would "
            "be stored instead); create the array with zarr_format=3"
        )
    _require_v2_form(data_type.numpy_dtype)
    return data_type.numpy_dtype.newbyteorder(byte_order), None


def _require_v2_form(dtype: np.dtype) -> None:
    """Refuse a NumPy dtype whose v2 type string does not name it: an extension dtype such as
    ml_dtypes' bfloat16 is ``'<V2'`` there, raw bytes that no reader would take for bfloat16."""
    if dtype.kind != "O" and np.dtype(v2_dtype_to_json(dtype) if dtype.names is None else dtype) != dtype:
        raise MetadataError(
            f"dtype: the NumPy dtype {dtype} has no Zarr v2 form (Zarr v2 would store it as the raw bytes "
            f"{dtype.str!r}); create the array with zarr_format=3"
        )


class NumpyV2Type(DataType):
    """A v2 data type without a Zarr v3 equivalent (e.g. structured types with subarray
    fields): only readable and writable as Zarr v2; :func:`zarrx.convert` refuses it."""

    name: ClassVar[str] = "numpy (zarr v2 only)"

    def __init__(self, numpy_dtype: np.dtype) -> None:
        self._dtype = numpy_dtype

    @property
    def numpy_dtype(self) -> np.dtype:
        return self._dtype

    @property
    def needs_endian(self) -> bool:
        return self._dtype.itemsize > 1

    @classmethod
    def from_json(cls, name: str, configuration: Mapping[str, Any]) -> DataType:
        raise UnsupportedExtensionError(f"data_type: {cls.name} has no Zarr v3 form")

    def to_json(self) -> JSON:
        return v2_dtype_to_json(self._dtype)

    def fill_value_from_json(self, value: JSON) -> Any:
        return parse_v2_fill_value(value, self._dtype, self)

    def fill_value_to_json(self, value: Any) -> JSON:
        return v2_fill_value_to_json(value, self._dtype, self)

    def default_fill_value(self) -> Any:
        return np.zeros((), dtype=self._dtype)[()]

    def cast_scalar(self, value: Any) -> Any:
        """A tuple of field values (subarrays as lists), a structured scalar, or the element's bytes."""
        if isinstance(value, (bytes, bytearray)):
            return np.frombuffer(bytes(value).ljust(self._dtype.itemsize, b"\x00"), dtype=self._dtype)[0]
        try:
            return np.array(value, dtype=self._dtype)[()]
        except (TypeError, ValueError) as error:
            raise MetadataError(f"fill_value: cannot use {value!r} as a {self._dtype} value ({error})") from None


class VLenArrayType(DataType):
    """Objects stored by numcodecs' ``vlen-array`` codec: each element a 1-d array (v2 only,
    read-only in zarrx). The missing-chunk value is None."""

    name: ClassVar[str] = "vlen-array (zarr v2 only)"

    @property
    def numpy_dtype(self) -> np.dtype:
        return np.dtype(object)

    @property
    def item_size(self) -> int | None:
        return None

    @classmethod
    def from_json(cls, name: str, configuration: Mapping[str, Any]) -> DataType:
        raise UnsupportedExtensionError(f"data_type: {cls.name} has no Zarr v3 form")

    def to_json(self) -> JSON:
        return "|O"

    def fill_value_from_json(self, value: JSON) -> Any:
        return None

    def fill_value_to_json(self, value: Any) -> JSON:
        return None

    def default_fill_value(self) -> Any:
        return None

    def cast_scalar(self, value: Any) -> Any:
        return value


# -- fill value ----------------------------------------------------------------------------


def _bad(value: Any, expected: str) -> MetadataError:
    return MetadataError(f"fill_value: expected {expected}, found {value!r}")


def _float(value: Any, dtype: np.dtype) -> Any:
    if isinstance(value, str) and value in _FLOATS:
        return dtype.type(_FLOATS[value])
    if is_json_number(value):
        with np.errstate(over="ignore"):
            return dtype.type(value)
    raise _bad(value, f"a number, 'NaN', 'Infinity' or '-Infinity' for {dtype.str}")


def _base64(value: Any, size: int) -> bytes:
    if not isinstance(value, str):
        raise _bad(value, f"a base64 string of {size} bytes")
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise _bad(value, f"a base64 string of {size} bytes") from None
    if len(raw) > size:
        raise MetadataError(f"fill_value: the base64 value holds {len(raw)} bytes, more than the {size} of one element")
    return raw


def parse_v2_fill_value(value: Any, stored: np.dtype, data_type: DataType) -> Any:
    """A v2 ``fill_value`` as a scalar of ``data_type`` (native order); None for ``null``."""
    if value is None:
        return None
    parse = _FILL_PARSERS.get(stored.kind)
    if stored.kind == "O":
        parse = _OBJECT_FILL_PARSERS.get(data_type.name, _object_vlen_array)
    return parse(value, stored)


def _bool(value: Any, stored: np.dtype) -> Any:
    if isinstance(value, bool) or (is_json_integer(value) and value in (0, 1)):
        return np.bool_(bool(value))
    raise _bad(value, "true or false")


def _integer(value: Any, stored: np.dtype) -> Any:
    info = np.iinfo(stored)
    if isinstance(value, float) and value.is_integer():  # zarr-python 2 sometimes wrote 0.0
        value = int(value)
    if not is_json_integer(value) or not info.min <= value <= info.max:
        raise _bad(value, f"an integer in [{info.min}, {info.max}] for {stored.str}")
    return _native(stored).type(value)


def _real(value: Any, stored: np.dtype) -> Any:
    return _float(value, _native(stored))


def _complex(value: Any, stored: np.dtype) -> Any:
    part = np.dtype(f"f{stored.itemsize // 2}")
    if is_json_number(value):  # a real number: older writers stored 0 for complex arrays
        return _native(stored).type(_float(value, part))
    if not isinstance(value, list) or len(value) != 2:
        raise _bad(value, "[real, imaginary]")
    return _native(stored).type(complex(_float(value[0], part), _float(value[1], part)))


def _time(value: Any, stored: np.dtype) -> Any:
    if value == "NaT":
        return _native(stored).type("NaT")
    if not is_json_integer(value) or not -(2**63) <= value < 2**63:
        raise _bad(value, "an int64 count or 'NaT'")
    return np.array(value, dtype=np.int64).view(_native(stored))[()]


def _bytes_fixed(value: Any, stored: np.dtype) -> Any:
    if value == 0:  # zarr-python 2 wrote 0 for some byte string arrays (its reader allows it)
        return stored.type(b"")
    return stored.type(_base64(value, stored.itemsize))


def _unicode(value: Any, stored: np.dtype) -> Any:
    if value == 0 and not isinstance(value, bool):  # zarr-python 2's default fill value, written as is
        return _native(stored).type("")
    if not isinstance(value, str) or len(value) > stored.itemsize // 4:
        raise _bad(value, f"a string of at most {stored.itemsize // 4} characters")
    return _native(stored).type(value)


def _void(value: Any, stored: np.dtype) -> Any:
    raw = _base64(value, stored.itemsize).ljust(stored.itemsize, b"\x00")
    return np.frombuffer(raw, dtype=stored).astype(_native(stored))[0]


def _object_string(value: Any, stored: np.dtype) -> Any:
    if isinstance(value, str):
        return value
    if is_json_number(value):  # zarr-python 2 wrote 0 for object arrays; zarr-python 3 reads str(value)
        return str(value)
    raise _bad(value, "a string")


def _object_bytes(value: Any, stored: np.dtype) -> Any:
    if value == 0:
        return b""
    if not isinstance(value, str):
        raise _bad(value, "a base64 string")
    return _base64(value, _MAX_ITEM_SIZE)


def _object_vlen_array(value: Any, stored: np.dtype) -> Any:
    if value == 0:  # zarr-python 2's default for object arrays: no meaningful fill
        return None
    raise _bad(value, "null (vlen-array arrays have no fill value)")


_FILL_PARSERS = {
    "b": _bool, "i": _integer, "u": _integer, "f": _real, "c": _complex, "m": _time, "M": _time,
    "S": _bytes_fixed, "U": _unicode, "V": _void,
}  # fmt: skip
_OBJECT_FILL_PARSERS = {"string": _object_string, "bytes": _object_bytes}


def v2_fill_value_to_json(value: Any, stored: np.dtype, data_type: DataType) -> JSON:
    """The v2 JSON ``fill_value`` for a scalar (None -> ``null``)."""
    if value is None:
        return None
    kind = stored.kind
    if kind == "O":
        if data_type.name == "string":
            return str(value)
        if data_type.name == "bytes":
            return base64.b64encode(bytes(value)).decode("ascii")
        return None
    scalar = np.asarray(value).astype(_native(stored))[()] if kind not in "SV" else value
    if kind == "b":
        return bool(scalar)
    if kind in "iu":
        return int(scalar)
    if kind == "f":
        return _float_json(scalar)
    if kind == "c":
        return [_float_json(scalar.real), _float_json(scalar.imag)]
    if kind in "mM":
        return int(np.asarray(scalar).view(np.int64))
    if kind == "U":
        return str(scalar)
    if kind == "S":  # without the trailing NULs, as zarr-python writes it
        return base64.b64encode(bytes(np.asarray(value, dtype=stored)[()])).decode("ascii")
    # V and structured: the bytes of the element in the stored byte order
    if isinstance(value, (bytes, bytearray)):
        raw = bytes(value).ljust(stored.itemsize, b"\x00")
    else:
        raw = np.asarray(value).astype(_native(stored)).astype(stored).tobytes()
    return base64.b64encode(raw).decode("ascii")


def _float_json(value: Any) -> JSON:
    value = float(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value
