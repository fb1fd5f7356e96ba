"""The ``struct`` data type (zarr-extensions ``struct``, legacy alias ``structured``).

A ``struct`` is an ordered list of named fields, each with a fixed-size data
type (parsed recursively, so fields may be structs). In memory it is the
*packed* NumPy structured dtype: fields in declaration order, no alignment
padding, so the ``bytes`` codec writes exactly the spec's layout.

* ``data_type``: ``{"name": "struct", "configuration": {"fields": [{"name":
  "x", "data_type": "float32"}, ...]}}``; field names are non-empty and unique,
  variable-length field types (``string``, ``bytes``) are rejected. The legacy
  name ``"structured"`` is read, with fields as objects or ``[name,
  data_type]`` pairs, and is written back as ``"struct"`` (the spec forbids
  writing ``"structured"``). :attr:`Struct.legacy` records that the document used
  the legacy name, whose arrays may lack the ``bytes`` codec's ``endian``
  (read as little-endian).
* ``fill_value``: a JSON object with an entry for every field, each in its own
  type's form (recursively). The legacy form, base64 of the packed
  little-endian bytes, is also read. Always written as the object.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Mapping

import numpy as np

from zarrx.dtypes.registry import data_type_from_numpy, parse_data_type, register_data_type
from zarrx.dtypes.base import JSON, DataType
from zarrx.dtypes.strings import parse_base64
from zarrx.errors import MetadataError

__all__ = ["Struct", "StructField", "parse_fields"]


@dataclass(frozen=True)
class StructField:
    name: str
    data_type: DataType

    def to_json(self) -> JSON:
        return {"name": self.name, "data_type": self.data_type.to_json()}


def parse_fields(configuration: Mapping[str, Any], legacy: bool) -> tuple[StructField, ...]:
    """The ``fields`` of a struct configuration; ``legacy`` also accepts ``[name, data_type]`` pairs."""
    extra = set(configuration) - {"fields"}
    if extra:
        raise MetadataError(f"data_type.configuration: struct takes only 'fields', found {sorted(extra)}")
    fields = configuration.get("fields")
    if not isinstance(fields, list) or not fields:
        raise MetadataError(
            f"data_type.configuration.fields: expected a non-empty list of fields, found {fields!r}"
        )
    return tuple(
        _parse_field(item, f"data_type.configuration.fields[{index}]", legacy)
        for index, item in enumerate(fields)
    )


def _parse_field(item: Any, path: str, legacy: bool) -> StructField:
    if legacy and isinstance(item, list) and len(item) == 2:
        name, data_type_json = item
    elif isinstance(item, Mapping) and set(item) == {"name", "data_type"}:
        name, data_type_json = item["name"], item["data_type"]
    else:
        expected = "an object {'name', 'data_type'}" + (" or a [name, data_type] pair" if legacy else "")
        raise MetadataError(f"{path}: expected {expected}, found {item!r}")
    if not isinstance(name, str) or not name:
        raise MetadataError(f"{path}.name: expected a non-empty string, found {name!r}")
    data_type = parse_data_type(data_type_json, f"{path}.data_type")
    if data_type.is_variable_length:
        raise MetadataError(
            f"{path}.data_type: field {name!r} has the variable-length type {data_type.to_json()!r}; "
            f"struct fields need a fixed size"
        )
    return StructField(name, data_type)


def _in_field(error: MetadataError, name: str) -> MetadataError:
    """``error`` with its ``fill_value`` prefix narrowed to the field ``name``."""
    message = str(error)
    if message.startswith("fill_value"):
        message = f"fill_value.{name}{message[len('fill_value') :]}"
    return type(error)(message)


@register_data_type
@dataclass(frozen=True, eq=False, repr=False)
class Struct(DataType):
    """``struct``: packed records of named fixed-size fields; NumPy structured dtype."""

    fields: tuple[StructField, ...]
    #: read from the legacy name "structured", whose arrays may omit the bytes codec's endian
    #: (to be read as little-endian, structured README); not part of the JSON or of equality
    legacy: bool = False

    name: ClassVar[str] = "struct"
    aliases: ClassVar[tuple[str, ...]] = ("structured",)

    def __post_init__(self) -> None:
        names = [field.name for field in self.fields]
        if not names:
            raise MetadataError("data_type.configuration.fields: a struct needs at least one field")
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise MetadataError(
                f"data_type.configuration.fields: field names must be unique, found {duplicates} repeated"
            )

    @property
    def numpy_dtype(self) -> np.dtype:
        # a list of (name, dtype) pairs gives NumPy's packed layout (align=False)
        return np.dtype([(field.name, field.data_type.numpy_dtype) for field in self.fields])

    @property
    def needs_endian(self) -> bool:
        return any(field.data_type.needs_endian for field in self.fields)

    @classmethod
    def from_json(cls, name: str, configuration: Mapping[str, Any]) -> DataType:
        legacy = name in cls.aliases
        return cls(parse_fields(configuration, legacy), legacy=legacy)

    def to_json(self) -> JSON:
        return {"name": self.name, "configuration": {"fields": [field.to_json() for field in self.fields]}}

    @classmethod
    def from_numpy(cls, dtype: np.dtype) -> DataType | None:
        if dtype.names is None:
            return None
        fields = []
        offset = 0
        for name in dtype.names:
            field_dtype, field_offset = dtype.fields[name][:2]
            if field_offset != offset:
                raise MetadataError(
                    f"dtype: field {name!r} of {dtype} is at byte {field_offset}, not {offset}: Zarr "
                    f"structs are packed; use numpy.lib.recfunctions.repack_fields(dtype) (no align=True)"
                )
            if field_dtype.subdtype is not None:
                raise MetadataError(
                    f"dtype: field {name!r} is the subarray {field_dtype}; Zarr struct fields are scalars"
                )
            fields.append(StructField(name, data_type_from_numpy(field_dtype)))
            offset += field_dtype.itemsize
        if offset != dtype.itemsize:
            raise MetadataError(
                f"dtype: {dtype} has {dtype.itemsize - offset} trailing padding bytes; Zarr structs "
                f"are packed; use numpy.lib.recfunctions.repack_fields(dtype)"
            )
        return cls(tuple(fields))

    def fill_value_from_json(self, value: JSON) -> Any:
        if isinstance(value, str):  # legacy "structured": base64 of the packed little-endian bytes
            raw = parse_base64(value)
            if len(raw) != self.numpy_dtype.itemsize:
                raise MetadataError(
                    f"fill_value: the base64 struct value has {len(raw)} bytes, expected "
                    f"{self.numpy_dtype.itemsize}"
                )
            little = np.frombuffer(raw, dtype=self.numpy_dtype.newbyteorder("<"))
            return little.astype(self.numpy_dtype)[0]
        return self._from_fields(value, lambda data_type, item: data_type.fill_value_from_json(item))

    def fill_value_to_json(self, value: Any) -> JSON:
        scalar = self.cast_scalar(value)
        values = {}
        for field in self.fields:
            try:
                values[field.name] = field.data_type.fill_value_to_json(scalar[field.name])
            except MetadataError as error:
                raise _in_field(error, field.name) from None
        return values

    def cast_scalar(self, value: Any) -> Any:
        """A mapping of field values, a tuple in field order, or a NumPy structured scalar."""
        if isinstance(value, np.void) and value.dtype.names is not None:
            if value.dtype == self.numpy_dtype:
                return value
            value = {name: value[name] for name in value.dtype.names}
        if isinstance(value, tuple) and len(value) == len(self.fields):
            value = {field.name: item for field, item in zip(self.fields, value, strict=True)}
        return self._from_fields(value, lambda data_type, item: data_type.cast_scalar(item))

    def _from_fields(self, value: Any, convert: Callable[[DataType, Any], Any]) -> Any:
        """The record whose fields are ``convert(field.data_type, value[field.name])``."""
        names = [field.name for field in self.fields]
        if not isinstance(value, Mapping):
            raise MetadataError(
                f"fill_value: struct needs an object with the fields {names}, found {value!r}"
            )
        missing = [name for name in names if name not in value]
        extra = sorted(set(value) - set(names), key=str)
        if missing or extra:
            raise MetadataError(
                f"fill_value: struct fill value needs every field {names}; missing {missing}, unknown {extra}"
            )
        scalar = np.zeros((), dtype=self.numpy_dtype)
        for field in self.fields:
            try:
                scalar[field.name] = convert(field.data_type, value[field.name])
            except MetadataError as error:
                raise _in_field(error, field.name) from None
        return scalar[()]

    def default_fill_value(self) -> Any:
        return self._from_fields(
            {field.name: field.data_type.default_fill_value() for field in self.fields},
            lambda data_type, item: item,
        )
