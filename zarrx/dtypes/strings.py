"""String and byte-string data types (zarr-extensions ``string``, ``bytes``,
``fixed_length_utf32``; zarr-python's ``null_terminated_bytes`` and ``raw_bytes``).

================================  ===============================  ==================================
data type                         in memory                        ``fill_value``
================================  ===============================  ==================================
``string``                        ``np.dtypes.StringDType()``      a JSON string
``bytes`` (read alias             object dtype holding ``bytes``   base64 string (written) or a list
``variable_length_bytes``)                                         of integers in ``[0, 255]``
``fixed_length_utf32``            ``U{length_bytes / 4}``          a JSON string of at most
                                                                   ``length_bytes / 4`` code points
``null_terminated_bytes``         ``S{length_bytes}``              base64 of the bytes, trailing NULs
                                                                   dropped (as zarr-python writes it)
``raw_bytes``                     ``V{length_bytes}``              base64 of all ``length_bytes``
================================  ===============================  ==================================

``string`` and ``bytes`` are variable length (``item_size is None``). NumPy
``V`` dtypes resolve to the core ``r<N>`` type, not ``raw_bytes``, which is only
read (and written back) for arrays zarr-python made.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

import numpy as np

from zarrx.dtypes.registry import register_data_type
from zarrx.dtypes.base import JSON, DataType
from zarrx.dtypes.numeric import NamedType, parse_byte_list
from zarrx.errors import MetadataError

__all__ = [
    "String",
    "Bytes",
    "FixedLengthUTF32",
    "NullTerminatedBytes",
    "RawBytes",
    "parse_length_bytes",
    "parse_base64",
]


def parse_length_bytes(name: str, configuration: Mapping[str, Any], multiple_of: int = 1) -> int:
    """The ``length_bytes`` configuration: a positive integer, a multiple of ``multiple_of``."""
    field_name = "data_type.configuration.length_bytes"
    extra = set(configuration) - {"length_bytes"}
    if extra:
        raise MetadataError(
            f"data_type.configuration: {name!r} takes only 'length_bytes', found {sorted(extra)}"
        )
    if "length_bytes" not in configuration:
        raise MetadataError(f"{field_name}: {name!r} requires 'length_bytes'")
    length = configuration["length_bytes"]
    if not isinstance(length, int) or isinstance(length, bool) or length <= 0 or length % multiple_of:
        raise MetadataError(
            f"{field_name}: expected a positive integer multiple of {multiple_of} for {name!r}, "
            f"found {length!r}"
        )
    return length


def parse_base64(value: Any, field_name: str = "fill_value") -> bytes:
    """Decode a standard base64 string (with padding), naming ``field_name`` on failure."""
    if not isinstance(value, str):
        raise MetadataError(f"{field_name}: expected a base64 string, found {value!r}")
    try:
        return base64.b64decode(value.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as error:
        raise MetadataError(f"{field_name}: {value!r} is not valid base64 ({error})") from None


def to_base64(raw: bytes) -> str:
    return base64.standard_b64encode(raw).decode("ascii")


@register_data_type
class String(NamedType):
    """``string``: variable-length UTF-8 text, NumPy ``StringDType`` in memory."""

    name = "string"

    @property
    def numpy_dtype(self) -> np.dtype:
        return np.dtypes.StringDType()

    @property
    def item_size(self) -> int | None:
        return None

    @classmethod
    def from_numpy(cls, dtype: np.dtype) -> DataType | None:
        return cls() if isinstance(dtype, np.dtypes.StringDType) else None

    def fill_value_from_json(self, value: JSON) -> Any:
        if not isinstance(value, str):
            raise MetadataError(f"fill_value: string needs a JSON string, found {value!r}")
        return str(value)

    def fill_value_to_json(self, value: Any) -> JSON:
        return self.cast_scalar(value)

    def cast_scalar(self, value: Any) -> Any:
        if not isinstance(value, str):
            raise MetadataError(f"fill_value: string needs a str, found {type(value).__name__} {value!r}")
        return str(value)

    def default_fill_value(self) -> Any:
        return ""


@register_data_type
class Bytes(NamedType):
    """``bytes``: variable-length byte strings, NumPy object dtype holding ``bytes``."""

    name = "bytes"
    aliases = ("variable_length_bytes",)  # what zarr-python 3.1 writes

    @property
    def numpy_dtype(self) -> np.dtype:
        return np.dtype(object)

    @property
    def item_size(self) -> int | None:
        return None

    def fill_value_from_json(self, value: JSON) -> Any:
        if isinstance(value, list):
            return parse_byte_list(value, None)
        if isinstance(value, str):
            return parse_base64(value)
        raise MetadataError(
            f"fill_value: bytes needs a base64 string or a list of integers in [0, 255], found {value!r}"
        )

    def fill_value_to_json(self, value: Any) -> JSON:
        return to_base64(self.cast_scalar(value))

    def cast_scalar(self, value: Any) -> Any:
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise MetadataError(
                f"fill_value: bytes needs a bytes object, found {type(value).__name__} {value!r}"
            )
        return bytes(value)

    def default_fill_value(self) -> Any:
        return b""


@dataclass(frozen=True, eq=False, repr=False)
class _FixedLength(DataType):
    """A type configured by ``length_bytes`` alone."""

    length_bytes: int

    length_multiple: ClassVar[int] = 1
    numpy_kind: ClassVar[str]

    def __post_init__(self) -> None:
        parse_length_bytes(self.name, {"length_bytes": self.length_bytes}, self.length_multiple)

    @property
    def numpy_dtype(self) -> np.dtype:
        return np.dtype(f"{self.numpy_kind}{self.length_bytes // self.length_multiple}")

    @classmethod
    def from_json(cls, name: str, configuration: Mapping[str, Any]) -> DataType:
        return cls(parse_length_bytes(name, configuration, cls.length_multiple))

    def to_json(self) -> JSON:
        return {"name": self.name, "configuration": {"length_bytes": self.length_bytes}}

    @classmethod
    def from_numpy(cls, dtype: np.dtype) -> DataType | None:
        if dtype.kind != cls.numpy_kind or dtype.fields is not None:
            return None
        if dtype.itemsize == 0:
            raise MetadataError(f"dtype: {dtype.str!r} has no length; give one, like '{dtype.char}8'")
        return cls(dtype.itemsize)


@register_data_type
class FixedLengthUTF32(_FixedLength):
    """``fixed_length_utf32``: NumPy ``U{length_bytes / 4}``."""

    name = "fixed_length_utf32"
    length_multiple = 4
    numpy_kind = "U"

    @property
    def needs_endian(self) -> bool:
        return True

    def fill_value_from_json(self, value: JSON) -> Any:
        if not isinstance(value, str):
            raise MetadataError(f"fill_value: fixed_length_utf32 needs a JSON string, found {value!r}")
        return self.cast_scalar(value)

    def fill_value_to_json(self, value: Any) -> JSON:
        # NumPy drops the trailing U+0000 padding, as the spec's scalar encoding does
        return str(self.cast_scalar(value))

    def cast_scalar(self, value: Any) -> Any:
        capacity = self.length_bytes // 4
        if not isinstance(value, str):
            raise MetadataError(
                f"fill_value: fixed_length_utf32 needs a str, found {type(value).__name__} {value!r}"
            )
        if len(value) > capacity:
            raise MetadataError(
                f"fill_value: {value!r} has {len(value)} code points, more than the {capacity} "
                f"that length_bytes {self.length_bytes} holds"
            )
        return np.array(value, dtype=self.numpy_dtype)[()]

    def default_fill_value(self) -> Any:
        return np.str_("")


@register_data_type
class NullTerminatedBytes(_FixedLength):
    """``null_terminated_bytes`` (zarr-python): NumPy ``S{length_bytes}``."""

    name = "null_terminated_bytes"
    numpy_kind = "S"

    def fill_value_from_json(self, value: JSON) -> Any:
        return self.cast_scalar(parse_base64(value))

    def fill_value_to_json(self, value: Any) -> JSON:
        return to_base64(bytes(self.cast_scalar(value)))

    def cast_scalar(self, value: Any) -> Any:
        if isinstance(value, str):
            value = value.encode("utf-8")
        if not isinstance(value, (bytes, bytearray)):
            raise MetadataError(
                f"fill_value: {self.name} needs bytes, found {type(value).__name__} {value!r}"
            )
        if len(value) > self.length_bytes:
            raise MetadataError(
                f"fill_value: {bytes(value)!r} has {len(value)} bytes, more than length_bytes "
                f"{self.length_bytes}"
            )
        return np.array(bytes(value), dtype=self.numpy_dtype)[()]

    def default_fill_value(self) -> Any:
        return np.bytes_(b"")


@register_data_type
class RawBytes(_FixedLength):
    """``raw_bytes`` (zarr-python): NumPy ``V{length_bytes}``; read only from zarr-python arrays.

    NumPy ``V`` dtypes given by users become the core ``r<N>`` type instead.
    """

    name = "raw_bytes"
    numpy_kind = "V"

    @classmethod
    def from_numpy(cls, dtype: np.dtype) -> DataType | None:
        return None

    def fill_value_from_json(self, value: JSON) -> Any:
        return self.cast_scalar(parse_base64(value))

    def fill_value_to_json(self, value: Any) -> JSON:
        return to_base64(self.cast_scalar(value).tobytes())

    def cast_scalar(self, value: Any) -> Any:
        raw = value.tobytes() if isinstance(value, np.void) else value
        if not isinstance(raw, (bytes, bytearray)) or len(raw) != self.length_bytes:
            raise MetadataError(
                f"fill_value: raw_bytes needs exactly {self.length_bytes} bytes, found {value!r}"
            )
        return np.void(bytes(raw))

    def default_fill_value(self) -> Any:
        return np.void(bytes(self.length_bytes))
