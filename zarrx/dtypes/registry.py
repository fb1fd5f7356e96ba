"""The data type registry: one dict from spec name (and aliases) to :class:`DataType` class.

:mod:`zarrx.dtypes` imports every built-in data type module, which registers its classes here
with :func:`register_data_type`; :func:`parse_data_type` and :func:`resolve_data_type` look them
up (see :mod:`zarrx.dtypes` for what they accept).
"""

from __future__ import annotations

import re
from typing import Any, Mapping

import numpy as np

from zarrx.dtypes.base import JSON, DataType
from zarrx.errors import MetadataError, UnsupportedExtensionError
from zarrx.extension import parse_extension

__all__ = [
    "register_data_type",
    "registered_data_types",
    "parse_data_type",
    "resolve_data_type",
    "data_type_from_numpy",
]

#: spec name or alias -> class
_DATA_TYPES: dict[str, type[DataType]] = {}
#: name families (``r<N>``): pattern -> class, tried after the exact names
_NAME_PATTERNS: dict[re.Pattern[str], type[DataType]] = {}
#: Python types a user may pass as ``dtype`` -> the data type name they mean
_PYTHON_TYPES: dict[type, str] = {str: "string", bytes: "bytes"}


def register_data_type(cls: type[DataType]) -> type[DataType]:
    """Register a :class:`DataType` class under its name, aliases and ``name_pattern``.

    Examples
    --------
    >>> @register_data_type
    ... class Float8(DataType):  # doctest: +SKIP
    ...     name = "float8_e4m3"
    """
    pattern = getattr(cls, "name_pattern", None)
    if pattern is not None:
        _NAME_PATTERNS[re.compile(pattern)] = cls
    else:
        _DATA_TYPES[cls.name] = cls
    for alias in cls.aliases:
        _DATA_TYPES[alias] = cls
    return cls


def registered_data_types() -> tuple[type[DataType], ...]:
    """Every registered class once, in registration order."""
    return tuple(dict.fromkeys([*_DATA_TYPES.values(), *_NAME_PATTERNS.values()]))


def _lookup(name: str) -> type[DataType] | None:
    found = _DATA_TYPES.get(name)
    if found is not None:
        return found
    return next((cls for pattern, cls in _NAME_PATTERNS.items() if pattern.fullmatch(name)), None)


def parse_data_type(value: JSON, field_name: str = "data_type") -> DataType:
    """Parse the JSON ``data_type`` of array metadata.

    ``field_name`` prefixes error messages (the struct type passes
    ``data_type.configuration.fields[0].data_type`` for its fields).

    Examples
    --------
    >>> parse_data_type("float32")
    Float32('float32')
    >>> time = {"name": "numpy.datetime64", "configuration": {"unit": "s", "scale_factor": 10}}
    >>> parse_data_type(time).numpy_dtype
    dtype('<M8[10s]')
    """
    extension = parse_extension(value, field_name)
    cls = _lookup(extension.name)
    if cls is None:
        raise UnsupportedExtensionError(
            f"{field_name}: unknown data type {extension.name!r}; data types cannot be skipped "
            f"(the core spec forbids must_understand: false for them). Known: {sorted(_DATA_TYPES)} and r<N>"
        )
    if not extension.must_understand:
        raise MetadataError(
            f"{field_name}.must_understand: false is not permitted for data types (core spec, "
            f"'must_understand'); remove it"
        )
    try:
        return cls.from_json(extension.name, extension.configuration)
    except MetadataError as error:
        message = str(error)
        if field_name != "data_type" and message.startswith("data_type"):
            message = field_name + message[len("data_type") :]
            raise type(error)(message) from None
        raise


def resolve_data_type(dtype_like: Any) -> DataType:
    """The :class:`DataType` for a user's ``dtype`` argument.

    Accepts a :class:`DataType`; a Zarr v3 name (``"float32"``, ``"string"``,
    ``"bytes"``, ``"r16"``…) or JSON object; the Python types ``str`` (variable
    length UTF-8 ``string``) and ``bytes`` (variable-length ``bytes``); and
    anything :func:`numpy.dtype` takes (``"<f4"``, ``"M8[ns]"``, ``"U5"``,
    ``"S3"``, ``"V4"``, structured lists…). Byte order is dropped: Zarr v3 data
    types have none (the ``bytes`` codec decides it).

    Examples
    --------
    >>> resolve_data_type(">i2")
    Int16('int16')
    >>> resolve_data_type(str)
    String('string')
    """
    if isinstance(dtype_like, DataType):
        return dtype_like
    if isinstance(dtype_like, type) and dtype_like in _PYTHON_TYPES:
        return parse_data_type(_PYTHON_TYPES[dtype_like], "dtype")
    if isinstance(dtype_like, Mapping) or (isinstance(dtype_like, str) and _lookup(dtype_like)):
        return parse_data_type(dtype_like, "dtype")
    try:
        numpy_dtype = np.dtype(dtype_like)
    except (TypeError, ValueError) as error:
        raise MetadataError(
            f"dtype: {dtype_like!r} is neither a Zarr data type nor a NumPy dtype ({error})"
        ) from None
    return data_type_from_numpy(numpy_dtype)


def data_type_from_numpy(numpy_dtype: np.dtype) -> DataType:
    """The :class:`DataType` standing for a NumPy dtype, or :class:`MetadataError` ``dtype: ...``."""
    if numpy_dtype.kind == "O":
        raise MetadataError(
            "dtype: the NumPy object dtype is ambiguous; pass dtype='string' for variable-length "
            "text or dtype='bytes' for variable-length byte strings"
        )
    for cls in registered_data_types():
        data_type = cls.from_numpy(numpy_dtype)
        if data_type is not None:
            return data_type
    scalar_type = numpy_dtype.type
    if scalar_type.__module__.split(".")[0] != "numpy":  # an extension dtype: never stored as raw bytes
        raise MetadataError(
            f"dtype: the NumPy dtype {numpy_dtype} ({scalar_type.__module__}.{scalar_type.__name__}) has no "
            "Zarr data type in zarrx, which refuses to store it as raw bytes; the registered data types "
            f"are {sorted(_DATA_TYPES)}"
        )
    raise MetadataError(f"dtype: the NumPy dtype {numpy_dtype!r} has no Zarr v3 data type in zarrx")
