"""The ``zfp`` codec (zarr-extensions codecs/zfp): zfp's compressed arrays, without a header.

An array -> bytes codec; the chunk is one zfp field of 1 to 4 dimensions (``[nx]``, ``[ny, nx]``,
``[nz, ny, nx]``, ``[nw, nz, ny, nx]``; a 0-d chunk is ``nx = 1``), compressed in one of zfp's modes
(``configuration.mode``): ``reversible``; ``fixed_rate`` (``rate`` bits per value);
``fixed_precision`` (``precision`` bit planes); ``fixed_accuracy`` (``tolerance``, an absolute
error bound); ``expert`` (``minbits``, ``maxbits``, ``maxprec``, ``minexp``). Chunks of more than 4
dimensions are refused: put a ``reshape`` codec before this one to merge dimensions.

Data types: ``float32``, ``float64``, ``int32``, ``int64`` natively; ``float16`` and ``bfloat16``
through float32 (exact); ``int8``/``int16`` and ``uint8``/``uint16`` promoted to int32 as the
registry page says (``zfp_promote_*``); ``uint32``/``uint64`` as int32/int64 the way zarrs stores
them (values past the signed maximum cannot be stored: such a chunk is refused rather than
clamped).

zfp's own C library does the work: ``libzfp``, as the ``zfpy`` wheel ships it (LLNL's maintained
Python binding), called through ``ctypes`` -- zfpy's Python API has no expert mode and always
sizes fields itself. Decoding is bounded: the stream is read from a zero-padded copy as long as
zfp may read for the chunk's shape and mode, and a stream that ends before the field does is a
:class:`~zarrx.errors.ChunkDecodeError`.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from zarrx.codecs.base import ArrayBytesCodec, Buffer, ChunkSpec, as_uint8, parse_choice, raise_unexpected, require_member
from zarrx.codecs.registry import register_codec
from zarrx.errors import ChunkDecodeError, ChunkEncodeError, MetadataError, UsageError

__all__ = ["ZfpCodec", "MODES"]

#: mode -> its required configuration members and their kinds
MODES: dict[str, dict[str, type]] = {
    "reversible": {},
    "fixed_rate": {"rate": float},
    "fixed_precision": {"precision": int},
    "fixed_accuracy": {"tolerance": float},
    "expert": {"minbits": int, "maxbits": int, "maxprec": int, "minexp": int},
}
#: zfp_type values of zfp.h
_ZFP_INT32, _ZFP_INT64, _ZFP_FLOAT, _ZFP_DOUBLE = 1, 2, 3, 4
_ZFP_TYPES = {np.dtype(np.int32): _ZFP_INT32, np.dtype(np.int64): _ZFP_INT64,
              np.dtype(np.float32): _ZFP_FLOAT, np.dtype(np.float64): _ZFP_DOUBLE}  # fmt: skip


# -- promotion (the registry page's "Compression" and "Decompression") -------------------------
def _promote_small(bits: int, signed: bool) -> tuple[Callable[[np.ndarray], np.ndarray], Callable[[np.ndarray], np.ndarray]]:
    shift = 31 - bits
    offset = 0 if signed else 1 << (bits - 1)
    low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)

    def promote(values: np.ndarray) -> np.ndarray:
        return (values.astype(np.int32) - offset) << shift

    def demote(values: np.ndarray) -> np.ndarray:
        return np.clip((values >> shift) + offset, low, high)

    return promote, demote


def _promote_unsigned(signed: type) -> tuple[Callable[[np.ndarray], np.ndarray], Callable[[np.ndarray], np.ndarray]]:
    limit = np.iinfo(signed).max

    def promote(values: np.ndarray) -> np.ndarray:
        if values.size and values.max() > limit:
            raise ChunkEncodeError(
                f"codec 'zfp' stores {values.dtype} as {np.dtype(signed)} (as zarrs does): the value "
                f"{int(values.max())} is past {limit}; use a signed or a wider type"
            )
        return values.astype(signed)

    def demote(values: np.ndarray) -> np.ndarray:
        return np.maximum(values, 0)

    return promote, demote


def _identity(values: np.ndarray) -> np.ndarray:
    return values


#: data type name -> (zfp's NumPy type, promote, demote)
_PROMOTIONS: dict[str, tuple[np.dtype, Callable[[np.ndarray], np.ndarray], Callable[[np.ndarray], np.ndarray]]] = {
    "float32": (np.dtype(np.float32), _identity, _identity),
    "float64": (np.dtype(np.float64), _identity, _identity),
    "int32": (np.dtype(np.int32), _identity, _identity),
    "int64": (np.dtype(np.int64), _identity, _identity),
    "float16": (np.dtype(np.float32), _identity, _identity),
    "bfloat16": (np.dtype(np.float32), _identity, _identity),
    "int8": (np.dtype(np.int32), *_promote_small(8, True)),
    "uint8": (np.dtype(np.int32), *_promote_small(8, False)),
    "int16": (np.dtype(np.int32), *_promote_small(16, True)),
    "uint16": (np.dtype(np.int32), *_promote_small(16, False)),
    "uint32": (np.dtype(np.int32), *_promote_unsigned(np.int32)),
    "uint64": (np.dtype(np.int64), *_promote_unsigned(np.int64)),
}


# -- libzfp --------------------------------------------------------------------------------------
@functools.cache
def _libzfp() -> ctypes.CDLL:
    """zfp's C library: the one the zfpy wheel ships (or, without zfpy's copy, a system libzfp)."""
    try:
        import zfpy
    except ImportError as error:  # a broken install: zfpy is a dependency of zarrx
        raise UsageError(f"codec 'zfp' needs the zfpy package (pip install zfpy): {error}") from None
    here = Path(zfpy.__file__).parent
    candidates = [*sorted(here.glob("zfpy.libs/libzfp*")), *sorted(here.glob(".dylibs/libzfp*")),
                  *sorted(here.glob("zfpy/.dylibs/libzfp*")), *sorted(here.glob("libzfp*"))]  # fmt: skip
    system = ctypes.util.find_library("zfp")
    for candidate in [*map(str, candidates), *([system] if system else [])]:
        try:
            library = ctypes.CDLL(candidate)
        except OSError:
            continue
        _declare(library)
        return library
    raise UsageError("codec 'zfp': cannot find zfp's C library (libzfp) beside the zfpy package or on the system")


def _declare(library: ctypes.CDLL) -> None:
    pointer, size, uint = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint
    signatures: dict[str, tuple[Any, list[Any]]] = {
        "zfp_field_1d": (pointer, [pointer, ctypes.c_int, size]),
        "zfp_field_2d": (pointer, [pointer, ctypes.c_int, size, size]),
        "zfp_field_3d": (pointer, [pointer, ctypes.c_int, size, size, size]),
        "zfp_field_4d": (pointer, [pointer, ctypes.c_int, size, size, size, size]),
        "zfp_field_free": (None, [pointer]),
        "zfp_stream_open": (pointer, [pointer]),
        "zfp_stream_close": (None, [pointer]),
        "zfp_stream_maximum_size": (size, [pointer, pointer]),
        "zfp_stream_set_bit_stream": (None, [pointer, pointer]),
        "zfp_stream_rewind": (None, [pointer]),
        "zfp_stream_set_reversible": (None, [pointer]),
        "zfp_stream_set_rate": (ctypes.c_double, [pointer, ctypes.c_double, ctypes.c_int, uint, ctypes.c_int]),
        "zfp_stream_set_precision": (uint, [pointer, uint]),
        "zfp_stream_set_accuracy": (ctypes.c_double, [pointer, ctypes.c_double]),
        "zfp_stream_set_params": (ctypes.c_int, [pointer, uint, uint, uint, ctypes.c_int]),
        "zfp_compress": (size, [pointer, pointer]),
        "zfp_decompress": (size, [pointer, pointer]),
        "stream_open": (pointer, [pointer, size]),
        "stream_close": (None, [pointer]),
    }
    for name, (restype, argtypes) in signatures.items():
        function = getattr(library, name)
        function.restype, function.argtypes = restype, argtypes


def _field_dims(shape: tuple[int, ...]) -> tuple[int, ...]:
    """zfp's ``nx, ny, nz, nw`` of a chunk: its shape reversed (0-d: ``nx = 1``)."""
    return tuple(reversed(shape)) or (1,)


@register_codec
@dataclass(frozen=True, eq=False)
class ZfpCodec(ArrayBytesCodec):
    """zfp compression; ``configuration`` holds the mode's members.

    Examples
    --------
    >>> from zarrx.dtypes import resolve_data_type
    >>> codec = ZfpCodec(mode="fixed_accuracy", tolerance=0.01)
    >>> codec.to_json()
    {'name': 'zfp', 'configuration': {'mode': 'fixed_accuracy', 'tolerance': 0.01}}
    >>> spec = ChunkSpec((4, 4), resolve_data_type("float64"), 0.0)
    >>> values = np.linspace(0, 1, 16).reshape(4, 4)
    >>> bool(np.abs(codec.decode(codec.encode(values, spec), spec) - values).max() <= 0.01)
    True
    """

    name = "zfp"

    mode: str
    rate: float | None = None
    precision: int | None = None
    tolerance: float | None = None
    minbits: int | None = None
    maxbits: int | None = None
    maxprec: int | None = None
    minexp: int | None = None

    def __post_init__(self) -> None:
        parse_choice(self.name, "mode", self.mode, tuple(MODES))
        members = MODES[self.mode]
        for member in ("rate", "precision", "tolerance", "minbits", "maxbits", "maxprec", "minexp"):
            value = getattr(self, member)
            if member not in members:
                if value is not None:
                    raise MetadataError(f"codecs: codec 'zfp': mode {self.mode!r} takes no {member!r}")
                continue
            kind = members[member]
            valid = isinstance(value, (int, np.integer) if kind is int else (int, float, np.number)) and not isinstance(value, bool)
            if not valid or (member != "minexp" and value < 0) or not math.isfinite(value):
                expected = "an integer" + (" >= 0" if member != "minexp" else "") if kind is int else "a finite number >= 0"
                raise MetadataError(f"codecs: codec 'zfp': {member} must be {expected}, found {value!r}")
            object.__setattr__(self, member, kind(value))

    @classmethod
    def from_json(cls, configuration: Mapping[str, Any]) -> "ZfpCodec":
        mode = require_member(cls.name, configuration, "mode")
        parse_choice(cls.name, "mode", mode, tuple(MODES))
        raise_unexpected(cls.name, configuration, ("mode", *MODES[mode]))
        members = {member: require_member(cls.name, configuration, member) for member in MODES[mode]}
        return cls(mode=mode, **members)

    def configuration(self) -> dict[str, Any]:
        return {"mode": self.mode, **{member: getattr(self, member) for member in MODES[self.mode]}}

    def validate(self, spec: ChunkSpec) -> None:
        if spec.data_type.to_json() not in _PROMOTIONS:
            raise MetadataError(
                f"codecs: codec 'zfp' cannot encode the data type {spec.data_type.to_json()!r}: it encodes {sorted(_PROMOTIONS)}"
            )
        if len(spec.shape) > 4:
            raise MetadataError(
                f"codecs: codec 'zfp' encodes chunks of at most 4 dimensions, found {len(spec.shape)} "
                f"({list(spec.shape)}); merge dimensions with a reshape codec before it"
            )

    # -- the zfp stream ---------------------------------------------------------------------------
    def _set_mode(self, library: ctypes.CDLL, stream: int, zfp_type: int, dims: int) -> None:
        if self.mode == "reversible":
            library.zfp_stream_set_reversible(stream)
        elif self.mode == "fixed_rate":
            library.zfp_stream_set_rate(stream, self.rate, zfp_type, dims, 0)
        elif self.mode == "fixed_precision":
            library.zfp_stream_set_precision(stream, self.precision)
        elif self.mode == "fixed_accuracy":
            library.zfp_stream_set_accuracy(stream, self.tolerance)
        elif not library.zfp_stream_set_params(stream, self.minbits, self.maxbits, self.maxprec, self.minexp):
            raise MetadataError(
                f"codecs: codec 'zfp': zfp refuses the expert parameters minbits={self.minbits}, maxbits={self.maxbits}, "
                f"maxprec={self.maxprec}, minexp={self.minexp}"
            )

    def _run(self, values: np.ndarray, buffer: np.ndarray | None, decode: bool) -> tuple[int, int]:
        """Compress ``values`` (or decompress into it) through one stream over ``buffer``:
        ``(bytes compressed or read, the stream's maximum size)``; ``buffer`` None only sizes it."""
        library = _libzfp()
        zfp_type = _ZFP_TYPES[values.dtype]
        dims = _field_dims(values.shape)
        field = getattr(library, f"zfp_field_{len(dims)}d")(values.ctypes.data, zfp_type, *dims)
        stream = library.zfp_stream_open(None)
        bits = None
        try:
            self._set_mode(library, stream, zfp_type, len(dims))
            maximum = library.zfp_stream_maximum_size(stream, field)
            if buffer is None:
                return 0, maximum
            bits = library.stream_open(buffer.ctypes.data, buffer.nbytes)
            library.zfp_stream_set_bit_stream(stream, bits)
            library.zfp_stream_rewind(stream)
            done = (library.zfp_decompress if decode else library.zfp_compress)(stream, field)
            return done, maximum
        finally:
            if bits is not None:
                library.stream_close(bits)
            library.zfp_stream_close(stream)
            library.zfp_field_free(field)

    def encode(self, array: np.ndarray, spec: ChunkSpec) -> Buffer:
        zfp_dtype, promote, _ = _PROMOTIONS[spec.data_type.to_json()]
        values = np.ascontiguousarray(promote(np.asarray(array)), dtype=zfp_dtype).reshape(spec.shape)
        _, maximum = self._run(values, None, decode=False)
        buffer = np.zeros(maximum, dtype=np.uint8)
        size, _ = self._run(values, buffer, decode=False)
        if size == 0:
            raise ChunkEncodeError(f"codec 'zfp' failed to compress a chunk of shape {spec.shape}")
        return buffer[:size]

    def decode(self, data: Buffer, spec: ChunkSpec) -> np.ndarray:
        zfp_dtype, _, demote = _PROMOTIONS[spec.data_type.to_json()]
        raw = as_uint8(data)
        values = np.zeros(spec.shape, dtype=zfp_dtype)
        _, maximum = self._run(values, None, decode=True)
        # zfp streams carry no length: read from a zero-padded copy zfp cannot read past
        buffer = np.zeros(max(maximum, raw.nbytes) + 8, dtype=np.uint8)
        buffer[: raw.nbytes] = raw
        read, _ = self._run(values, buffer, decode=True)
        if read == 0 or read > raw.nbytes:
            raise ChunkDecodeError(
                f"the zfp stream of {raw.nbytes} bytes ends before a chunk of shape {spec.shape} (zfp read {read} bytes)"
            )
        return demote(values).astype(spec.dtype)
