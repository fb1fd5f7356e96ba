"""The NumPy time data types (zarr-extensions ``numpy.datetime64`` and ``numpy.timedelta64``).

Both take a configuration of exactly ``unit`` (``Y M W D h m s ms us μs ns ps
fs as`` or ``generic``) and ``scale_factor`` (an integer in ``[1, 2^31 - 1]``),
and stand for the NumPy dtype ``M8[{scale_factor}{unit}]`` /
``m8[{scale_factor}{unit}]``: 64-bit signed counts of ``scale_factor * unit``
since the Unix epoch (datetime) or of duration (timedelta).

The ``fill_value`` is a JSON integer in the int64 range or ``"NaT"``; the
integer ``-2^63`` is also NaT. It is written as the integer (``NaT`` as
``-9223372036854775808``), as zarr-python writes it. The ``unit`` is written
back as read (``"μs"`` stays ``"μs"``).

NumPy's ``generic`` unit holds only NaT, so it needs ``scale_factor`` 1 and a
NaT fill value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

import numpy as np

from zarrx.dtypes.registry import register_data_type
from zarrx.dtypes.base import JSON, DataType
from zarrx.dtypes.numeric import is_json_integer
from zarrx.errors import MetadataError

__all__ = ["DateTime64", "TimeDelta64", "parse_unit", "parse_scale_factor", "TIME_UNITS"]

#: spec unit -> NumPy unit
TIME_UNITS: dict[str, str] = {
    unit: unit for unit in ("Y", "M", "W", "D", "h", "m", "s", "ms", "us", "ns", "ps", "fs", "as", "generic")
} | {"μs": "us"}
_INT64 = np.iinfo(np.int64)
_NAT = int(_INT64.min)
_MAX_SCALE_FACTOR = 2**31 - 1


def parse_unit(configuration: Mapping[str, Any]) -> str:
    unit = configuration.get("unit")
    if unit not in TIME_UNITS:
        raise MetadataError(
            f"data_type.configuration.unit: expected one of {list(TIME_UNITS)}, found {unit!r}"
        )
    return unit


def parse_scale_factor(configuration: Mapping[str, Any]) -> int:
    scale_factor = configuration.get("scale_factor")
    if not is_json_integer(scale_factor) or not 1 <= scale_factor <= _MAX_SCALE_FACTOR:
        raise MetadataError(
            f"data_type.configuration.scale_factor: expected an integer in [1, {_MAX_SCALE_FACTOR}], "
            f"found {scale_factor!r}"
        )
    return int(scale_factor)


@dataclass(frozen=True, eq=False, repr=False)
class _Time(DataType):
    unit: str
    scale_factor: int = 1

    numpy_kind: ClassVar[str]

    def __post_init__(self) -> None:
        configuration = {"unit": self.unit, "scale_factor": self.scale_factor}
        parse_unit(configuration)
        parse_scale_factor(configuration)
        if self.unit == "generic" and self.scale_factor != 1:
            raise MetadataError(
                f"data_type.configuration.scale_factor: NumPy's generic time unit takes no scale "
                f"factor; expected 1, found {self.scale_factor}"
            )

    @property
    def numpy_dtype(self) -> np.dtype:
        unit = TIME_UNITS[self.unit]
        return np.dtype(
            self.numpy_kind if unit == "generic" else f"{self.numpy_kind}8[{self.scale_factor}{unit}]"
        )

    @property
    def needs_endian(self) -> bool:
        return True

    @classmethod
    def from_json(cls, name: str, configuration: Mapping[str, Any]) -> DataType:
        extra = set(configuration) - {"unit", "scale_factor"}
        if extra:
            raise MetadataError(
                f"data_type.configuration: {name!r} takes only 'unit' and 'scale_factor', "
                f"found {sorted(extra)}"
            )
        return cls(parse_unit(configuration), parse_scale_factor(configuration))

    def to_json(self) -> JSON:
        return {"name": self.name, "configuration": {"unit": self.unit, "scale_factor": self.scale_factor}}

    @classmethod
    def from_numpy(cls, dtype: np.dtype) -> DataType | None:
        if dtype.kind != cls.numpy_kind:
            return None
        unit, scale_factor = np.datetime_data(dtype)
        return cls(unit, scale_factor)

    def fill_value_from_json(self, value: JSON) -> Any:
        if (isinstance(value, str) and value == "NaT") or (is_json_integer(value) and value == _NAT):
            return self._from_int64(_NAT)
        if not is_json_integer(value):
            raise MetadataError(f"fill_value: {self.name} needs a JSON integer or 'NaT', found {value!r}")
        if not _INT64.min <= value <= _INT64.max:
            raise MetadataError(f"fill_value: {value} is outside the int64 range of {self.name}")
        if self.unit == "generic":
            raise MetadataError(
                f"fill_value: a {self.name} with the generic unit holds only 'NaT', found {value}"
            )
        return self._from_int64(int(value))

    def _from_int64(self, count: int) -> Any:
        return np.array(count, dtype=np.int64).view(self.numpy_dtype)[()]

    def fill_value_to_json(self, value: Any) -> JSON:
        return int(np.array(self.cast_scalar(value), dtype=self.numpy_dtype).view(np.int64)[()])

    def cast_scalar(self, value: Any) -> Any:
        """Integers count ``scale_factor * unit``; other values (``np.datetime64``, ``"2020-01-01"``,
        ``datetime``…) are converted by NumPy."""
        if is_json_integer(value) or (isinstance(value, str) and value == "NaT"):
            return self.fill_value_from_json(value)
        try:
            return np.array(value, dtype=self.numpy_dtype)[()]
        except (TypeError, ValueError, OverflowError) as error:
            raise MetadataError(
                f"fill_value: cannot convert {value!r} to {self.numpy_dtype} ({error})"
            ) from None

    def default_fill_value(self) -> Any:
        # NaT, as zarr-python
        return self._from_int64(_NAT)


@register_data_type
@dataclass(frozen=True, eq=False, repr=False)
class DateTime64(_Time):
    """``numpy.datetime64``: NumPy ``M8[{scale_factor}{unit}]``."""

    name: ClassVar[str] = "numpy.datetime64"
    numpy_kind: ClassVar[str] = "M"


@register_data_type
@dataclass(frozen=True, eq=False, repr=False)
class TimeDelta64(_Time):
    """``numpy.timedelta64``: NumPy ``m8[{scale_factor}{unit}]``."""

    name: ClassVar[str] = "numpy.timedelta64"
    numpy_kind: ClassVar[str] = "m"
