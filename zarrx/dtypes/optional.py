"""zarrs' ``optional`` data type: a value of another data type, or nothing (zarrs, experimental).

Read under ``optional`` (zarrs' test data) and ``zarrs.optional`` (zarrs 0.23 releases); written
as ``optional``.

``{"name": "optional", "configuration": <the inner data type>}``; the inner type is any
fixed-size data type, an ``optional`` one included. In memory an element is zarrs' own layout, a
packed NumPy struct: ``value`` (the inner type) then ``valid`` (bool) -- ``arr[...]["valid"]``
is the mask of present elements; a missing element holds zeros in ``value``. Such arrays are
stored with the ``optional`` codec (:mod:`zarrx.codecs.optional`), which keeps the mask and the
present values apart.

Fill values: ``null`` is "missing", ``[x]`` is "present, with the inner type's fill value ``x``"
(recursively: ``[null]`` is present-but-missing for ``optional`` of ``optional``). A user's fill
value may be None (missing), a value of the inner type (present), or an element of the struct.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

import numpy as np

from zarrx.dtypes.base import JSON, DataType
from zarrx.dtypes.registry import parse_data_type, register_data_type
from zarrx.errors import MetadataError

__all__ = ["Optional"]


@register_data_type
@dataclass(frozen=True, eq=False, repr=False)
class Optional(DataType):
    """An ``inner`` value or nothing: NumPy ``[("value", inner), ("valid", bool)]``.

    Examples
    --------
    >>> optional = parse_data_type({"name": "optional", "configuration": {"name": "uint8", "configuration": {}}})
    >>> optional.numpy_dtype
    dtype([('value', 'u1'), ('valid', '?')])
    >>> optional.fill_value_to_json(None), optional.fill_value_to_json(42)
    (None, [42])
    """

    inner: DataType

    name: ClassVar[str] = "optional"
    aliases: ClassVar[tuple[str, ...]] = ("zarrs.optional",)  # zarrs 0.23.x releases' name
    stored_by: ClassVar[str | None] = "optional"

    def __post_init__(self) -> None:
        if self.inner.item_size is None:
            raise MetadataError(
                f"data_type.configuration: optional needs a fixed-size inner data type, found {self.inner.to_json()!r}"
            )

    @property
    def numpy_dtype(self) -> np.dtype:
        return np.dtype([("value", self.inner.numpy_dtype), ("valid", np.bool_)])

    @property
    def item_size(self) -> int:
        return self.numpy_dtype.itemsize

    @classmethod
    def from_json(cls, name: str, configuration: Mapping[str, Any]) -> DataType:
        if not configuration:
            raise MetadataError("data_type.configuration: optional needs its inner data type as configuration")
        return cls(parse_data_type(dict(configuration), "data_type.configuration"))

    def to_json(self) -> JSON:
        inner = self.inner.to_json()
        inner = inner if isinstance(inner, dict) else {"name": inner, "configuration": {}}
        return {"name": self.name, "configuration": inner}

    def _element(self, value: Any, valid: bool) -> np.void:
        element = np.zeros((), dtype=self.numpy_dtype)
        if valid:
            element["value"] = value
            element["valid"] = True
        return element[()]

    def fill_value_from_json(self, value: JSON) -> Any:
        if value is None:
            return self._element(None, False)
        if not isinstance(value, list) or len(value) != 1:
            raise MetadataError(f"fill_value: optional needs null or [inner fill value], found {value!r}")
        return self._element(self.inner.fill_value_from_json(value[0]), True)

    def fill_value_to_json(self, value: Any) -> JSON:
        element = self.cast_scalar(value)
        return [self.inner.fill_value_to_json(element["value"])] if element["valid"] else None

    def cast_scalar(self, value: Any) -> Any:
        if value is None:
            return self._element(None, False)
        if isinstance(value, np.void) and value.dtype == self.numpy_dtype:
            return self._element(value["value"], True) if value["valid"] else self._element(None, False)
        return self._element(self.inner.cast_scalar(value), True)

    def default_fill_value(self) -> Any:
        return self._element(None, False)
