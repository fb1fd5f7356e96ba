"""The ``cast_value`` codec (zarr-extensions codecs/cast_value): convert values to another data type.

Each element is converted by value (never reinterpreted), in the spec's order
("Procedure"): a ``scalar_map`` entry for it; else its exact value, when the target
type holds it; else the value rounded (``rounding``) and then, when still outside the
target's range, handled by ``out_of_range`` (``clamp`` or ``wrap``); else the codec
fails (ChunkEncodeError / ChunkDecodeError, naming the value and how to allow it).
Decoding is the same procedure from the target type back, with ``scalar_map.decode``.

Details the spec leaves to implementations, decided here:

* A value is out of range of a float type when, rounded to the type's precision with an
  unbounded exponent, its magnitude exceeds the largest finite value; with nearest
  rounding that is exactly IEEE 754 overflow. ``clamp`` makes it ±Infinity (spec).
* NaN and ±Infinity cast to a float type as themselves (the spec: NaN propagates);
  to an integer type they are an error even with ``clamp``, unless mapped.
* A ``scalar_map`` key matches the elements equal to it (``0`` matches ``-0.0``);
  a NaN key matches every NaN. Entries use the fill value encoding, plus the
  ``"+Infinity"`` that the README's own example writes (the core spec says ``"Infinity"``).

Supported: the real-number types zarrx has (``int8``..``uint64``, ``float16``..
``float64``). Conversions are exact: integers to floats are rounded in integer
arithmetic, floats to narrower floats by correcting NumPy's nearest-even cast with
``nextafter``. The fill value is cast like any element (the encoded chunk spec
carries it); :meth:`CastValueCodec.validate` requires it to survive the round trip.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from zarrx.codecs.base import ArrayArrayCodec, ChunkSpec, parse_choice, raise_unexpected, require_member
from zarrx.codecs.registry import register_codec
from zarrx.dtypes import DataType, parse_data_type, resolve_data_type
from zarrx.errors import ChunkDecodeError, ChunkEncodeError, MetadataError

__all__ = ["CastValueCodec", "cast_values", "ROUNDING_MODES", "OUT_OF_RANGE_MODES"]

ROUNDING_MODES = ("nearest-even", "towards-zero", "towards-positive", "towards-negative", "nearest-away")
OUT_OF_RANGE_MODES = ("clamp", "wrap")
#: NumPy kinds of the data types that model real numbers
REAL_KINDS = "iuf"


@register_codec
@dataclass(frozen=True, eq=False)
class CastValueCodec(ArrayArrayCodec):
    """Convert values to ``data_type``; ``rounding``, ``out_of_range``, ``scalar_map`` as in the spec.

    ``rounding`` None (absent) means ``"nearest-even"``; ``out_of_range`` None means that
    out-of-range values are errors; ``scalar_map`` is the JSON object
    ``{"encode": [[in, out], ...], "decode": [[in, out], ...]}``.

    Examples
    --------
    >>> from zarrx.dtypes import resolve_data_type
    >>> codec = CastValueCodec("int8", out_of_range="clamp")
    >>> spec = ChunkSpec((3,), resolve_data_type("float64"), 0.0)
    >>> codec.encode(np.array([1.5, 2.5, 300.0]), spec)
    array([  2,   2, 127], dtype=int8)
    """

    name = "cast_value"

    data_type: DataType
    rounding: str | None = None
    out_of_range: str | None = None
    scalar_map: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.data_type, DataType):
            object.__setattr__(self, "data_type", resolve_data_type(self.data_type))
        if self.data_type.numpy_dtype.kind not in REAL_KINDS:
            raise MetadataError(
                f"codecs: codec 'cast_value': data_type must be an integer or float type, "
                f"found {self.data_type.to_json()!r}"
            )
        if self.rounding is not None:
            parse_choice(self.name, "rounding", self.rounding, ROUNDING_MODES)
        if self.out_of_range is not None:
            parse_choice(self.name, "out_of_range", self.out_of_range, OUT_OF_RANGE_MODES)
        if self.out_of_range == "wrap" and self.data_type.numpy_dtype.kind == "f":
            raise MetadataError(
                f"codecs: codec 'cast_value': out_of_range 'wrap' needs an integer data_type "
                f"(two's complement), found {self.data_type.to_json()!r}; use 'clamp'"
            )
        if self.scalar_map is not None:
            object.__setattr__(self, "scalar_map", _parse_scalar_map(self.scalar_map))

    @classmethod
    def from_json(cls, configuration: Mapping[str, Any]) -> "CastValueCodec":
        raise_unexpected(cls.name, configuration, ("data_type", "rounding", "out_of_range", "scalar_map"))
        data_type = parse_data_type(require_member(cls.name, configuration, "data_type"), "configuration.data_type")
        return cls(data_type, configuration.get("rounding"), configuration.get("out_of_range"),
                   configuration.get("scalar_map"))  # fmt: skip

    def configuration(self) -> dict[str, Any]:
        members = {"data_type": self.data_type.to_json(), "rounding": self.rounding,
                   "out_of_range": self.out_of_range, "scalar_map": self.scalar_map}  # fmt: skip
        return {key: value for key, value in members.items() if value is not None}

    def _pairs(self, direction: str, source: DataType, target: DataType) -> list[tuple[Any, Any]]:
        """The ``scalar_map`` entries of ``direction`` as scalars of ``source`` -> ``target``."""
        entries = (self.scalar_map or {}).get(direction, [])
        try:
            return [(_scalar(source, key), _scalar(target, value)) for key, value in entries]
        except MetadataError as error:
            message = str(error).removeprefix("fill_value: ")
            raise MetadataError(f"codecs: codec 'cast_value': scalar_map.{direction}: {message}") from None

    def _cast(self, array: np.ndarray, direction: str, source: DataType, target: DataType, error: type) -> np.ndarray:
        pairs = self._pairs(direction, source, target)
        return cast_values(array, target.numpy_dtype, self.rounding or "nearest-even", self.out_of_range, pairs, error)

    def validate(self, spec: ChunkSpec) -> None:
        encoded = self.resolve_spec(spec).fill_value
        decoded = self._cast(np.array(encoded), "decode", self.data_type, spec.data_type, _FillValueError)
        # the spec: a fill value that does not survive the round trip is an error
        if not (decoded == spec.fill_value or (np.isnan(decoded) and np.isnan(spec.fill_value))):
            raise MetadataError(
                f"codecs: codec 'cast_value': the fill value {spec.fill_value} becomes {encoded} as "
                f"{self.data_type.to_json()} and {decoded[()]} when decoded; use a fill value that survives "
                f"the cast, or map it with scalar_map"
            )

    def resolve_spec(self, spec: ChunkSpec) -> ChunkSpec:
        if spec.dtype.kind not in REAL_KINDS:
            raise MetadataError(
                f"codecs: codec 'cast_value' casts integer and float types, found {spec.data_type.to_json()!r}"
            )
        fill = self._cast(np.array(spec.fill_value, dtype=spec.dtype), "encode", spec.data_type, self.data_type,
                          _FillValueError)  # fmt: skip
        return ChunkSpec(spec.shape, self.data_type, fill[()])

    def encode(self, array: np.ndarray, spec: ChunkSpec) -> np.ndarray:
        return self._cast(array, "encode", spec.data_type, self.data_type, ChunkEncodeError)

    def decode(self, array: np.ndarray, spec: ChunkSpec) -> np.ndarray:
        return self._cast(array, "decode", self.data_type, spec.data_type, ChunkDecodeError)


class _FillValueError(MetadataError):
    def __init__(self, message: str) -> None:
        super().__init__(f"codecs: codec 'cast_value': fill value: {message}")


def _scalar(data_type: DataType, value: Any) -> Any:
    # the README's example writes "+Infinity", which the fill value encoding spells "Infinity"
    return data_type.fill_value_from_json("Infinity" if value == "+Infinity" else value)


def _parse_scalar_map(value: Any) -> dict[str, list[list[Any]]]:
    prefix = "codecs: codec 'cast_value': scalar_map"
    if not isinstance(value, Mapping) or set(value) - {"encode", "decode"}:
        raise MetadataError(f"{prefix} must be an object with 'encode' and/or 'decode', found {value!r}")
    parsed = {}
    for direction, entries in value.items():
        if not isinstance(entries, (list, tuple)) or not all(
            isinstance(entry, (list, tuple)) and len(entry) == 2 for entry in entries
        ):
            raise MetadataError(f"{prefix}.{direction} must be a list of [input, output] pairs, found {entries!r}")
        parsed[direction] = [list(entry) for entry in entries]
    return parsed


# -- the conversion ------------------------------------------------------------------------


def cast_values(
    array: np.ndarray,
    target: np.dtype,
    rounding: str = "nearest-even",
    out_of_range: str | None = None,
    scalar_map: list[tuple[Any, Any]] = (),  # type: ignore[assignment]
    error: type[Exception] = ValueError,
) -> np.ndarray:
    """Cast ``array`` to ``target`` by the cast_value procedure; ``error`` for values it cannot cast.

    ``scalar_map`` is a list of ``(input scalar, output scalar)``; the first matching entry wins.

    Examples
    --------
    >>> cast_values(np.array([128.0, 32768.0]), np.dtype("int16"), out_of_range="wrap")
    array([   128, -32768], dtype=int16)
    >>> cast_values(np.array([np.nan, 2.5]), np.dtype("uint8"), scalar_map=[(np.nan, 0)])
    array([0, 2], dtype=uint8)
    """
    array = np.asarray(array)
    pending = np.ones(array.shape, dtype=bool)
    output = np.empty(array.shape, dtype=target)
    for key, value in scalar_map:
        hit = pending & (np.isnan(array) if _is_nan(key) else array == key)
        output[hit] = value
        pending &= ~hit
    if pending.all():
        output[...] = _convert(array, target, rounding, out_of_range, error)
    elif pending.any():
        output[pending] = _convert(array[pending], target, rounding, out_of_range, error)
    return output


def _is_nan(value: Any) -> bool:
    return isinstance(value, (float, np.floating)) and bool(np.isnan(value))


def _convert(values: np.ndarray, target: np.dtype, rounding: str, out_of_range: str | None, error: type) -> np.ndarray:
    source = values.dtype
    if _holds_every_value(source, target):
        return values.astype(target)
    with np.errstate(all="ignore"):
        if target.kind == "f":
            convert = _float_to_float if source.kind == "f" else _integer_to_float
            return convert(values, target, rounding, out_of_range, error)
        if source.kind == "f":
            nonfinite = ~np.isfinite(values)
            if nonfinite.any():
                raise error(
                    f"cannot cast {values[nonfinite][0]} to {target} (it has no NaN or infinity); "
                    "map it with scalar_map"
                )
            values = _ROUND_TO_INTEGER[rounding](values.astype(np.float64))
        return _to_integer(values, target, out_of_range, error)


def _holds_every_value(source: np.dtype, target: np.dtype) -> bool:
    if source.kind in "iu" and target.kind == "f":  # NumPy calls int64 -> float64 "safe"; it is not exact
        return 8 * source.itemsize - (source.kind == "i") <= np.finfo(target).nmant + 1
    return bool(np.can_cast(source, target, "safe"))


def _out_of_range(values: np.ndarray, bad: np.ndarray, target: np.dtype, error: type) -> Exception:
    return error(
        f"{values[bad][0]} is out of the range of {target}; set out_of_range to 'clamp'"
        + (" or 'wrap'" if target.kind in "iu" else "")
        + ", or map the value with scalar_map"
    )


# integers ---------------------------------------------------------------------------------


def _round_half_away(values: np.ndarray) -> np.ndarray:
    whole = np.trunc(values)
    return whole + np.where(np.abs(values - whole) >= 0.5, np.sign(values), 0)  # values - whole is exact


_ROUND_TO_INTEGER: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "nearest-even": np.rint,
    "towards-zero": np.trunc,
    "towards-positive": np.ceil,
    "towards-negative": np.floor,
    "nearest-away": _round_half_away,
}


def _to_integer(values: np.ndarray, target: np.dtype, out_of_range: str | None, error: type) -> np.ndarray:
    """Integer-valued ``values`` (an integer type, or float64) as ``target``."""
    info = np.iinfo(target)
    if values.dtype.kind == "f":  # the bounds as floats: powers of two, so exact
        below, above = values < float(info.min), values >= float(info.max + 1)
    else:
        below, above = values < info.min, values > info.max
    bad = below | above
    if not bad.any():
        return values.astype(target)
    if out_of_range is None:
        raise _out_of_range(values, bad, target, error)
    if out_of_range == "clamp":
        output = np.where(bad, 0, values).astype(target)
        output[below], output[above] = info.min, info.max
        return output
    if values.dtype.kind in "iu":  # wrap: NumPy's integer casts are modulo 2**N
        return values.astype(target)
    bits = 8 * target.itemsize
    modulo = np.fmod(values, 2.0**bits)  # exact; then into [-2**(N-1), 2**(N-1)), also exact
    modulo = np.where(modulo >= 2.0 ** (bits - 1), modulo - 2.0**bits, modulo)
    modulo = np.where(modulo < -(2.0 ** (bits - 1)), modulo + 2.0**bits, modulo)
    return modulo.astype(np.int64).astype(target)


# floats -----------------------------------------------------------------------------------


def _float_overflow(values: np.ndarray, nearest: np.ndarray, target: np.dtype, rounding: str) -> np.ndarray:
    """Finite values whose rounding lies beyond the largest finite value of ``target``."""
    largest = np.finfo(target).max.astype(values.dtype)
    beyond = values.dtype.type(2.0 ** np.finfo(target).maxexp)  # largest + one unit in the last place
    magnitude = np.abs(values)
    rules = {
        "towards-zero": lambda: magnitude >= beyond,
        "towards-positive": lambda: (values > largest) | (values <= -beyond),
        "towards-negative": lambda: (values < -largest) | (values >= beyond),
    }
    overflow = rules[rounding]() if rounding in rules else np.isinf(nearest)  # nearest: IEEE overflow
    return overflow & np.isfinite(values)


def _float_to_float(values: np.ndarray, target: np.dtype, rounding: str, out_of_range: str | None,
                    error: type) -> np.ndarray:  # fmt: skip
    nearest = values.astype(target)  # round to nearest, ties to even (IEEE 754)
    result = nearest.copy()
    back = nearest.astype(values.dtype)  # exact
    toward = {
        "towards-positive": (back < values, np.inf),
        "towards-negative": (back > values, -np.inf),
        "towards-zero": (np.abs(back) > np.abs(values), 0),
    }
    if rounding in toward:
        wrong, direction = toward[rounding]
        result[wrong] = np.nextafter(nearest[wrong], target.type(direction))
    elif rounding == "nearest-away":
        inexact = back != values
        other = np.nextafter(nearest, np.where(values > back, target.type(np.inf), target.type(-np.inf)))
        tie = inexact & (values - back == other.astype(values.dtype) - values)  # both differences exact
        away = tie & (np.abs(other) > np.abs(nearest))
        result[away] = other[away]
    overflow = _float_overflow(values, nearest, target, rounding)
    if overflow.any():
        if out_of_range is None:
            raise _out_of_range(values, overflow, target, error)
        result[overflow] = np.copysign(np.inf, values[overflow])  # clamp: beyond the finite range is ±inf
    return result


def _bit_length(magnitude: np.ndarray) -> np.ndarray:
    length, rest = np.zeros(magnitude.shape, dtype=np.uint64), magnitude
    for step in (32, 16, 8, 4, 2, 1):
        big = rest >= np.uint64(1 << step)
        length += np.where(big, np.uint64(step), np.uint64(0))
        rest = np.where(big, rest >> np.uint64(step), rest)
    return length + (rest > 0).astype(np.uint64)


def _integer_to_float(values: np.ndarray, target: np.dtype, rounding: str, out_of_range: str | None,
                      error: type) -> np.ndarray:  # fmt: skip
    """Round integers to the target's precision in integer arithmetic, then cast (exactly)."""
    negative = values < 0
    magnitude = values.astype(np.uint64)
    magnitude = np.where(negative, ~magnitude + np.uint64(1), magnitude)  # |values|, also for the minimum
    precision = np.finfo(target).nmant + 1
    length = _bit_length(magnitude)
    shift = np.where(length > precision, length - np.uint64(precision), np.uint64(0))
    kept, dropped = magnitude >> shift, magnitude & ((np.uint64(1) << shift) - np.uint64(1))
    half = (np.uint64(1) << shift) >> np.uint64(1)
    round_up = {
        "nearest-even": (dropped > half) | ((dropped == half) & (shift > 0) & (kept & np.uint64(1) == 1)),
        "nearest-away": (shift > 0) & (dropped >= half),
        "towards-zero": np.zeros(values.shape, dtype=bool),
        "towards-positive": (dropped != 0) & ~negative,
        "towards-negative": (dropped != 0) & negative,
    }[rounding]
    kept = kept + round_up.astype(np.uint64)
    rounded = np.ldexp(kept.astype(np.float64), shift.astype(np.int64))  # kept has <= 53 bits: exact
    rounded = np.where(negative, -rounded, rounded)
    overflow = np.abs(rounded) > np.finfo(target).max
    if overflow.any():
        if out_of_range is None:
            raise _out_of_range(values, overflow, target, error)
        rounded[overflow] = np.copysign(np.inf, rounded[overflow])
    return rounded.astype(target)
