"""The codec contract (core spec, "Chunk encoding").

A codec is one class holding its configuration. It has the spec ``name``,
builds itself from the ``configuration`` object (:meth:`Codec.from_json`) and
writes it back (:meth:`Codec.to_json`, the exact inverse). Codecs come in three
kinds, by what their *encode* transform takes and returns:

* :class:`ArrayArrayCodec` -- array -> array (``transpose``);
* :class:`ArrayBytesCodec` -- array -> bytes (``bytes``, ``vlen-utf8``, ``sharding_indexed``);
* :class:`BytesBytesCodec` -- bytes -> bytes (``gzip``, ``zstd``, ``blosc``, ``crc32c``).

A :class:`ChunkSpec` is the *decoded representation* a codec sees: the shape,
data type and fill value of the array it encodes. Array -> array codecs may
change it (:meth:`ArrayArrayCodec.resolve_spec`); the pipeline threads it
through the chain.

Decoding is bounded: a bytes -> bytes codec is told the exact size its output
must have when that is known (``expected_size``) and must never produce (or
allocate) more. Codecs raise :class:`~zarrx.errors.ChunkDecodeError` for bad
input; the pipeline adds the chunk key.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar, Literal, Mapping, Sequence

import numpy as np

from zarrx.dtypes.base import DataType

__all__ = ["ChunkSpec", "Codec", "ArrayArrayCodec", "ArrayBytesCodec", "BytesBytesCodec", "Buffer"]

#: any bytes-like object (bytes, bytearray, memoryview, contiguous uint8 ndarray)
Buffer = Any


@dataclass(frozen=True)
class ChunkSpec:
    """The decoded representation of a chunk: shape, data type, fill value."""

    shape: tuple[int, ...]
    data_type: DataType
    fill_value: Any

    @cached_property
    def dtype(self) -> np.dtype:
        return self.data_type.numpy_dtype

    @cached_property
    def size(self) -> int:
        return math.prod(self.shape)

    @cached_property
    def nbytes(self) -> int | None:
        """Size of the raw (``bytes`` codec) encoding, or None for variable-length types."""
        item_size = self.data_type.item_size
        return None if item_size is None else self.size * item_size


class Codec(ABC):
    name: ClassVar[str]
    kind: ClassVar[Literal["array_to_array", "array_to_bytes", "bytes_to_bytes"]]
    #: other names this codec is read under (never written)
    aliases: ClassVar[tuple[str, ...]] = ()
    #: the library starts threads of its own when called from the main thread (c-blosc under
    #: numcodecs): the main thread then does not also take a share of zarrx's pool work
    threads_on_main_thread: ClassVar[bool] = False

    @classmethod
    def from_json(cls, configuration: Mapping[str, Any]) -> "Codec":
        """Build from the ``configuration`` object; raise MetadataError naming the bad member."""
        if configuration:
            raise_unexpected(cls.name, configuration)
        return cls()

    def configuration(self) -> dict[str, Any] | None:
        """The ``configuration`` object, or None when the codec has none."""
        return None

    def to_json(self) -> dict[str, Any]:
        configuration = self.configuration()
        if configuration is None:
            return {"name": self.name}
        return {"name": self.name, "configuration": configuration}

    def evolve_from_spec(self, spec: ChunkSpec) -> "Codec":
        """Fill in configuration chosen from the chunk spec (e.g. blosc typesize). Default: self."""
        return self

    def validate(self, spec: ChunkSpec) -> None:
        """Raise MetadataError if this codec cannot encode chunks described by ``spec``."""

    def __eq__(self, other: object) -> bool:
        if type(self) is type(other):
            return self.to_json() == other.to_json()  # type: ignore[union-attr]
        # the same codec held another way: its JSON, or a zarr-python codec object (``to_dict()``),
        # as xarray encodings hold them -- equal when they configure this codec alike
        document = other.to_dict() if callable(getattr(other, "to_dict", None)) and not isinstance(other, Codec) else other
        if not isinstance(document, Mapping) or document.get("name") not in (self.name, *self.aliases):
            return NotImplemented
        try:
            return type(self).from_json(document.get("configuration") or {}).to_json() == self.to_json()
        except Exception:  # a configuration this codec does not take: not this codec
            return False

    def __hash__(self) -> int:
        return hash(repr(self.to_json()))

    def __repr__(self) -> str:
        configuration = self.configuration() or {}
        args = ", ".join(f"{k}={v!r}" for k, v in configuration.items())
        return f"{type(self).__name__}({args})"


class ArrayArrayCodec(Codec):
    kind = "array_to_array"

    def resolve_spec(self, spec: ChunkSpec) -> ChunkSpec:
        """The encoded representation for a decoded ``spec``."""
        return spec

    @abstractmethod
    def encode(self, array: np.ndarray, spec: ChunkSpec) -> np.ndarray: ...

    @abstractmethod
    def decode(self, array: np.ndarray, spec: ChunkSpec) -> np.ndarray:
        """Decode to the representation described by ``spec`` (the decoded spec)."""


class ArrayBytesCodec(Codec):
    kind = "array_to_bytes"
    #: the array layer can read and write parts of an encoded chunk (sharding), so the
    #: chunk is never decoded whole and its size is not bounded as a whole
    decodes_partially: ClassVar[bool] = False

    def encoded_size(self, spec: ChunkSpec) -> int | None:
        """Exact size of the encoding of a chunk of ``spec``, or None when it varies."""
        return None

    @abstractmethod
    def encode(self, array: np.ndarray, spec: ChunkSpec) -> Buffer: ...

    @abstractmethod
    def decode(self, data: Buffer, spec: ChunkSpec) -> np.ndarray:
        """Decode to an array of ``spec.shape`` and ``spec.dtype``; wrong sizes raise ChunkDecodeError."""


class BytesBytesCodec(Codec):
    kind = "bytes_to_bytes"
    #: the codec can decode straight into a caller's buffer (:meth:`decode_into`)
    decodes_into: ClassVar[bool] = False

    def encoded_size(self, decoded_size: int) -> int | None:
        """Size of the encoding of ``decoded_size`` bytes, or None when it varies (compressors)."""
        return None

    @abstractmethod
    def encode(self, data: Buffer) -> Buffer: ...

    @abstractmethod
    def decode(self, data: Buffer, expected_size: int | None, max_size: int) -> Buffer:
        """Decode ``data``.

        ``expected_size`` is the exact decoded size when known: anything else is a
        ChunkDecodeError. ``max_size`` bounds the output (and memory) when it is not.
        """

    def decode_into(self, data: Buffer, out: np.ndarray) -> None:
        """Decode ``data`` into ``out`` (a writeable, contiguous uint8 array), which it must fill
        exactly: any other decoded size is a ChunkDecodeError. Codecs that set
        :attr:`decodes_into` do this without an intermediate buffer; the default copies."""
        out[...] = as_uint8(self.decode(data, out.nbytes, out.nbytes))

    def decode_where(self, data: Buffer, out: np.ndarray) -> Buffer:
        """The decoded bytes of ``data`` (exactly ``out.nbytes``): decoded into ``out`` (then the
        result is ``out``), or in a buffer of the codec's own when that saves copying them there
        -- for a caller that copies a part of them elsewhere anyway. This default is
        :meth:`decode_into`."""
        self.decode_into(data, out)
        return out

    #: the codec decodes many chunks in one call that holds the GIL only to check them (:meth:`decode_many`)
    decodes_many: ClassVar[bool] = False

    def decode_many(self, frames: Sequence[Buffer], nbytes: int) -> Sequence[Buffer]:
        """The decoded bytes of each of ``frames`` (``nbytes`` each, exactly, as :meth:`decode`
        with that expected size): one call that lets other threads run while it decodes. Codecs
        that set :attr:`decodes_many` do it in one library call; the default decodes one by one."""
        return [self.decode(frame, nbytes, nbytes) for frame in frames]


def raise_unexpected(codec_name: str, configuration: Mapping[str, Any], allowed: tuple[str, ...] = ()) -> None:
    from zarrx.errors import MetadataError

    unexpected = sorted(set(configuration) - set(allowed))
    if unexpected:
        raise MetadataError(
            f"codecs: codec {codec_name!r} has unexpected configuration members {unexpected}"
            + (f" (allowed: {list(allowed)})" if allowed else " (it takes none)")
        )


# -- helpers shared by the codec modules ------------------------------------------------


def as_uint8(data: Buffer) -> np.ndarray:
    """A flat uint8 array over the bytes of ``data``, without copying when it is contiguous."""
    if isinstance(data, np.ndarray):
        return np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    return np.frombuffer(data, dtype=np.uint8)


def require_member(codec_name: str, configuration: Mapping[str, Any], member: str) -> Any:
    """The value of a required configuration member; MetadataError when it is missing."""
    from zarrx.errors import MetadataError

    if member not in configuration:
        raise MetadataError(f"codecs: codec {codec_name!r} requires the configuration member {member!r}")
    return configuration[member]


def parse_int(codec_name: str, member: str, value: Any, low: int, high: int) -> int:
    """``value`` as an int in ``[low, high]`` (booleans refused); MetadataError otherwise."""
    from zarrx.errors import MetadataError

    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or not low <= value <= high:
        raise MetadataError(
            f"codecs: codec {codec_name!r}: {member} must be an integer from {low} to {high}, found {value!r}"
        )
    return int(value)


def parse_choice(codec_name: str, member: str, value: Any, choices: tuple[Any, ...]) -> Any:
    """``value`` if it is one of ``choices``; MetadataError listing them otherwise."""
    from zarrx.errors import MetadataError

    if isinstance(value, bool) != any(isinstance(choice, bool) for choice in choices) or value not in choices:
        raise MetadataError(f"codecs: codec {codec_name!r}: {member} must be one of {list(choices)}, found {value!r}")
    return value
