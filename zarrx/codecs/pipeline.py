"""The codec pipeline: an array's ``codecs`` list as one encode/decode transform.

The list must be zero or more array -> array codecs, exactly one array -> bytes
codec, then zero or more bytes -> bytes codecs (core spec, "Codecs"). Each
codec sees the representation produced by the one before it
(:meth:`CodecPipeline.resolve_specs`, spec "Determination of encoded
representations"); encoding runs the list forwards, decoding backwards (spec
"Decoding procedure").

Decoding is bounded. The pipeline computes the size every bytes -> bytes codec
must decode to: it starts from the array -> bytes codec's ``encoded_size``
(fixed-size data types) and goes up through each ``encoded_size`` (``crc32c``
adds 4; compressors vary, and the sizes above them are unknown). A codec gets
that ``expected_size`` or None, and ``max_size``, the most it may produce:
the expected size, or :attr:`CodecPipeline.max_size` (2 GiB unless configured)
when it is not known. Every failure of a codec on stored data becomes a
:class:`~zarrx.errors.ChunkDecodeError` naming the chunk key and the codec. The
decoded chunk has exactly the spec's shape and dtype; it may be a read-only
view of the stored bytes, so callers copy it into their output.

An array -> bytes codec that reads parts of its input (sharding) is used as is:
the array layer finds it in :attr:`CodecPipeline.array_bytes`, and can decode
partially when :attr:`CodecPipeline.bytes_bytes` is empty.

Chunks are bounded too. A chunk is decoded (and, when written in part, filled)
whole in memory, so :meth:`CodecPipeline.validate` -- run whenever array
metadata is parsed or built -- refuses a chunk whose decoded size is over
:func:`max_chunk_bytes` (16 GiB, or ``ZARRX_MAX_CHUNK_BYTES``) with a
:class:`~zarrx.errors.MetadataError`, before anything is allocated: metadata
such as ``chunk_shape: [2**40, 2**40]``, or a shard index of 2**40 entries,
cannot make a reader or writer ask for exabytes. Shards read in parts (a
pipeline of the sharding codec alone) are exempt; their inner chunks and their
index are bounded.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Sequence

import numpy as np

from zarrx.codecs.base import ArrayArrayCodec, ArrayBytesCodec, BytesBytesCodec, ChunkSpec, Codec
from zarrx.codecs.registry import codec_from_json
from zarrx.errors import ChunkDecodeError, ChunkEncodeError, MetadataError, UsageError, ZarrxError

__all__ = ["CodecPipeline", "decode_failure", "DEFAULT_MAX_SIZE", "DEFAULT_MAX_CHUNK_BYTES", "check_chunk_size", "max_chunk_bytes"]

#: bound on a decoded chunk whose size is not fixed by its data type (variable length)
DEFAULT_MAX_SIZE = 2**31
#: bound on the in-memory size of a chunk decoded whole (see max_chunk_bytes)
DEFAULT_MAX_CHUNK_BYTES = 2**34
MAX_CHUNK_BYTES_VARIABLE = "ZARRX_MAX_CHUNK_BYTES"


def max_chunk_bytes() -> int:
    """The most bytes a chunk decoded whole may take in memory: ``ZARRX_MAX_CHUNK_BYTES`` or 16 GiB."""
    configured = os.environ.get(MAX_CHUNK_BYTES_VARIABLE, "")
    try:
        value = int(configured) if configured else DEFAULT_MAX_CHUNK_BYTES
    except ValueError:
        raise UsageError(f"{MAX_CHUNK_BYTES_VARIABLE} must be a number of bytes, found {configured!r}") from None
    return value if value > 0 else DEFAULT_MAX_CHUNK_BYTES


def check_chunk_size(spec: ChunkSpec, what: str = "chunk") -> None:
    """Refuse chunks of ``spec`` that would take more than :func:`max_chunk_bytes` in memory.

    Computed with Python integers from the shape alone, so nothing overflows and nothing is
    allocated; variable-length elements count their in-memory size (a pointer or a NumPy
    string slot), elements of no size count one byte.

    Raises
    ------
    MetadataError
        Naming the shape, the size and the limit.

    Examples
    --------
    >>> from zarrx.dtypes import resolve_data_type
    >>> check_chunk_size(ChunkSpec((2**40, 2**40), resolve_data_type("int32"), 0))
    Traceback (most recent call last):
    ...
    zarrx.errors.MetadataError: chunk_grid: a chunk of shape (1099511627776, 1099511627776) and data type int32 takes ...
    """
    nbytes = spec.size * max(1, spec.dtype.itemsize)
    limit = max_chunk_bytes()
    if nbytes > limit:
        field_name, smaller = _CHUNK_KINDS.get(what, ("codecs", "shape"))
        raise MetadataError(
            f"{field_name}: a {what} of shape {spec.shape} and data type {spec.dtype} takes {nbytes} bytes "
            f"in memory, over zarrx's limit of {limit} bytes; zarrx holds a {what} whole in memory, so use "
            f"a smaller {smaller} (or raise the limit with the environment variable {MAX_CHUNK_BYTES_VARIABLE})"
        )


#: what a bounded chunk is -> (metadata field that sets its size, what to make smaller)
_CHUNK_KINDS = {
    "chunk": ("chunk_grid", "chunk shape"),
    "inner chunk": ("codecs", "inner chunk shape (sharding_indexed chunk_shape)"),
    "shard index": ("codecs", "number of inner chunks per shard"),
}

_KIND_RANK = {"array_to_array": 0, "array_to_bytes": 1, "bytes_to_bytes": 2}
_KIND_TEXT = {kind: kind.replace("_to_", " -> ") for kind in _KIND_RANK}


@dataclass(frozen=True)
class CodecPipeline:
    """The codecs of an array, split by kind.

    Examples
    --------
    >>> from zarrx.dtypes import resolve_data_type
    >>> spec = ChunkSpec(shape=(3,), data_type=resolve_data_type("int16"), fill_value=0)
    >>> pipeline = CodecPipeline.from_json([{"name": "bytes", "configuration": {"endian": "big"}}, "crc32c"])
    >>> encoded = pipeline.encode(np.array([1, 2, 3], dtype="int16"), spec)
    >>> len(encoded), pipeline.encoded_size(spec)
    (10, 10)
    >>> pipeline.decode(encoded, spec, key="c/0")
    array([1, 2, 3], dtype=int16)
    """

    array_array: tuple[ArrayArrayCodec, ...]
    array_bytes: ArrayBytesCodec
    bytes_bytes: tuple[BytesBytesCodec, ...]
    #: the most a bytes -> bytes codec may decode to when the size is not fixed
    max_size: int = field(default=DEFAULT_MAX_SIZE, compare=False)
    _plans: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    #: (what, shape, data type, fill value) already validated: arrays sharing a parsed pipeline
    #: (zarrx.metadata.node memoizes them) validate each chunk spec once
    _validated: set = field(default_factory=set, init=False, repr=False, compare=False)

    @classmethod
    def from_codecs(
        cls, codecs: Iterable[Codec], *, max_size: int = DEFAULT_MAX_SIZE, field_name: str = "codecs"
    ) -> "CodecPipeline":
        """Split ``codecs`` by kind; MetadataError when they are not aa*, one ab, bb* in that order."""
        codecs = tuple(codecs)
        for position, codec in enumerate(codecs):
            if not isinstance(codec, Codec):
                found = f"{type(codec).__name__} {codec!r}"
                raise MetadataError(f"{field_name}[{position}]: expected a codec, found {found}")
        found = ", ".join(f"{codec.name} ({_KIND_TEXT[codec.kind]})" for codec in codecs) or "no codecs"
        array_bytes = [codec for codec in codecs if codec.kind == "array_to_bytes"]
        if len(array_bytes) != 1:
            raise MetadataError(
                f"{field_name}: expected exactly one array -> bytes codec (such as 'bytes'), "
                f"found {len(array_bytes)} in [{found}]"
            )
        for position, (before, after) in enumerate(zip(codecs, codecs[1:]), start=1):
            if _KIND_RANK[before.kind] > _KIND_RANK[after.kind]:
                raise MetadataError(
                    f"{field_name}: the {_KIND_TEXT[after.kind]} codec {after.name!r} at position {position} comes "
                    f"after the {_KIND_TEXT[before.kind]} codec {before.name!r}; the order must be array -> array "
                    f"codecs, one array -> bytes codec, then bytes -> bytes codecs (found [{found}])"
                )
        return cls(
            array_array=tuple(codec for codec in codecs if codec.kind == "array_to_array"),  # type: ignore[misc]
            array_bytes=array_bytes[0],  # type: ignore[arg-type]
            bytes_bytes=tuple(codec for codec in codecs if codec.kind == "bytes_to_bytes"),  # type: ignore[misc]
            max_size=max_size,
        )

    @classmethod
    def from_json(cls, value: Any, field_name: str = "codecs", *, max_size: int = DEFAULT_MAX_SIZE) -> "CodecPipeline":
        """Build from the ``codecs`` metadata list; unknown codecs with ``must_understand: false`` are dropped."""
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            raise MetadataError(f"{field_name}: expected a list of codecs, found {type(value).__name__} {value!r}")
        codecs = [codec_from_json(item, f"{field_name}[{position}]") for position, item in enumerate(value)]
        return cls.from_codecs(
            [codec for codec in codecs if codec is not None], max_size=max_size, field_name=field_name
        )

    @property
    def codecs(self) -> tuple[Codec, ...]:
        return (*self.array_array, self.array_bytes, *self.bytes_bytes)

    def to_json(self) -> list[dict[str, Any]]:
        return [codec.to_json() for codec in self.codecs]

    def resolve_specs(self, spec: ChunkSpec) -> list[ChunkSpec]:
        """The decoded spec each array -> array codec sees, then the array -> bytes codec's."""
        specs = [spec]
        for codec in self.array_array:
            specs.append(codec.resolve_spec(specs[-1]))
        return specs

    def evolve_from_spec(self, spec: ChunkSpec) -> "CodecPipeline":
        """Fill in configuration chosen from the chunk spec, each codec with the spec it sees."""
        array_array = []
        for codec in self.array_array:
            codec = codec.evolve_from_spec(spec)
            array_array.append(codec)
            spec = codec.resolve_spec(spec)
        return replace(
            self,
            array_array=tuple(array_array),
            array_bytes=self.array_bytes.evolve_from_spec(spec),
            # bytes -> bytes codecs get the array spec too: blosc takes its typesize from the data type
            bytes_bytes=tuple(codec.evolve_from_spec(spec) for codec in self.bytes_bytes),
        )

    @property
    def decodes_whole(self) -> bool:
        """Whether the array layer decodes a chunk whole (all but shards it reads in parts)."""
        return not (self.array_bytes.decodes_partially and not self.array_array and not self.bytes_bytes)

    def validate(self, spec: ChunkSpec, what: str = "chunk") -> None:
        """Raise MetadataError if the codecs cannot encode chunks of ``spec``, or such a chunk
        decoded whole would be too large (see :func:`check_chunk_size`; ``what`` names it)."""
        try:
            key = (what, spec.shape, spec.data_type, spec.fill_value, max_chunk_bytes())
            hash(key)
        except TypeError:  # an unhashable data type or fill value: validate every time
            key = None
        if key is not None and key in self._validated:
            return
        self._validate(spec, what)
        if key is not None:
            if len(self._validated) > 64:
                self._validated.clear()
            self._validated.add(key)

    def _validate(self, spec: ChunkSpec, what: str) -> None:
        if self.decodes_whole or what != "chunk":  # nested pipelines (inner chunks) decode whole
            check_chunk_size(spec, what)
        for codec in self.array_array:
            codec.validate(spec)
            spec = codec.resolve_spec(spec)
        self.array_bytes.validate(spec)
        for codec in self.bytes_bytes:
            codec.validate(spec)

    def _decoded_sizes(self, array_bytes_spec: ChunkSpec) -> list[int | None]:
        """The decoded size of each bytes -> bytes codec, then the final encoded size (None: varies)."""
        sizes = [self.array_bytes.encoded_size(array_bytes_spec)]
        for codec in self.bytes_bytes:
            sizes.append(None if sizes[-1] is None else codec.encoded_size(sizes[-1]))
        return sizes

    def encoded_size(self, spec: ChunkSpec) -> int | None:
        """Size of every encoded chunk of ``spec`` when it is fixed (no compression), else None."""
        return self._decoded_sizes(self.resolve_specs(spec)[-1])[-1]

    def encode(self, array: np.ndarray, spec: ChunkSpec, key: str | None = None) -> bytes:
        """Encode one chunk of ``spec.shape``; ChunkEncodeError names the codec (and ``key`` if given).
        A non-contiguous ``array`` is copied before a lone compressor reads it (writers gather
        strided pieces into scratch memory first)."""
        array = np.asarray(array)
        if array.shape != spec.shape:
            raise ChunkEncodeError(f"{_chunk(key)}expected an array of shape {spec.shape}, found {array.shape}")
        direct = self._plan(spec)[2]
        if direct is not None and array.dtype == spec.dtype:
            if not array.flags.c_contiguous:
                array = np.ascontiguousarray(array)
            with _encoding(key, direct):
                data = direct.encode(array.reshape(-1).view(np.uint8))
            return data if isinstance(data, bytes) else bytes(data)
        specs = self.resolve_specs(spec)
        for codec, codec_spec in zip(self.array_array, specs):
            with _encoding(key, codec):
                array = codec.encode(array, codec_spec)
        with _encoding(key, self.array_bytes):
            data = self.array_bytes.encode(array, specs[-1])
        for codec in self.bytes_bytes:
            with _encoding(key, codec):
                data = codec.encode(data)
        return data if isinstance(data, bytes) else bytes(data)

    def _plan(self, spec: ChunkSpec) -> tuple[list[ChunkSpec], list[int | None], BytesBytesCodec | None]:
        """The specs and bytes -> bytes sizes for ``spec``, and the codec of the fast path (or None),
        computed once per spec object.

        Decoding thousands of chunks of one array reuses one plan instead of
        re-deriving it per chunk (the array's ChunkSpec is a single cached object).
        """
        cached = self._plans.get(id(spec))
        if cached is not None and cached[0] is spec:
            return cached[1]
        specs = self.resolve_specs(spec)
        sizes = self._decoded_sizes(specs[-1])
        plan = (specs, sizes, self._direct_codec(spec))
        if len(self._plans) > 64:
            self._plans.clear()
        self._plans[id(spec)] = (spec, plan)  # holding spec keeps its id from being reused
        return plan

    def _direct_codec(self, spec: ChunkSpec) -> BytesBytesCodec | None:
        """The one compressor when the chunk is its decoded bytes as they are (``bytes`` in native
        order, no array -> array codec) and it can decode into a caller's buffer: the fast path
        of :meth:`decode` and :meth:`encode`, one codec call and no intermediate copy."""
        from zarrx.codecs.bytes import BytesCodec

        if self.array_array or len(self.bytes_bytes) != 1 or not self.bytes_bytes[0].decodes_into:
            return None
        if type(self.array_bytes) is not BytesCodec or spec.nbytes is None or spec.dtype.hasobject:
            return None
        if not self.array_bytes.stores_memory_layout(spec):  # byte-swapped or converted on disk
            return None
        return self.bytes_bytes[0]

    @property
    def threads_on_main_thread(self) -> bool:
        """Whether a codec of the pipeline (or of a nested one) starts its own threads on the main thread."""
        return any(
            codec.threads_on_main_thread or getattr(getattr(codec, "codecs", None), "threads_on_main_thread", False)
            for codec in self.codecs
        )

    def decodes_into(self, spec: ChunkSpec) -> bool:
        """Whether :meth:`decode` decodes chunks of ``spec`` into a given ``out`` buffer."""
        return self._plan(spec)[2] is not None

    def decodes_many(self, spec: ChunkSpec) -> bool:
        """Whether :meth:`decode_many` decodes chunks of ``spec`` in one codec call."""
        direct = self._plan(spec)[2]
        return direct is not None and direct.decodes_many

    def decode_many(self, frames: Sequence[Any], spec: ChunkSpec, keys: Sequence[str]) -> Sequence[Any]:
        """The decoded bytes of each stored chunk of ``frames`` (keys ``keys``) in one call of the
        pipeline's one direct codec (:meth:`decodes_many`): the array's bytes in memory layout.

        Raises ChunkDecodeError naming the first chunk that fails (found decoding one by one).
        """
        direct = self._plan(spec)[2]
        try:
            return direct.decode_many(frames, spec.nbytes)
        except Exception as error:  # which chunk? decode them one by one to name it
            for frame, key in zip(frames, keys):
                try:
                    direct.decode(frame, spec.nbytes, spec.nbytes)
                except Exception as single:
                    raise decode_failure(key, direct, single) from single
            raise decode_failure(keys[0], direct, error) from error

    def direct_codec(self, spec: ChunkSpec) -> BytesBytesCodec | None:
        """The one codec whose ``decode_into(data, out_bytes)`` decodes a chunk of ``spec`` into
        the bytes of a C-contiguous array of its shape and dtype, or None (see :meth:`decode`).
        A caller using it wraps its errors with :func:`decode_failure`."""
        return self._plan(spec)[2]

    def decode(self, data: Any, spec: ChunkSpec, key: str, out: np.ndarray | None = None) -> np.ndarray:
        """Decode one stored chunk to an array of exactly ``spec.shape`` and ``spec.dtype``.

        ``out``, when given, is a writeable C-contiguous array of that shape and dtype that the
        chunk may be decoded into (and then is the result): a reused scratch buffer, or the piece
        of the caller's output the chunk maps onto. Codecs that cannot decode into it ignore it,
        so callers copy the result unless it ``is out``.

        Raises ChunkDecodeError naming ``key`` and the failing codec for any corrupt input.
        """
        specs, sizes, direct = self._plan(spec)
        if direct is not None:
            if out is None or out.shape != spec.shape or out.dtype != spec.dtype or not out.flags.c_contiguous:
                out = np.empty(spec.shape, dtype=spec.dtype)
            try:
                direct.decode_into(data, out.reshape(-1).view(np.uint8))
            except Exception as error:
                raise decode_failure(key, direct, error) from error
            return out
        codec: Codec = self.array_bytes
        # one try for the whole chain (cheaper than a context per codec); `codec` names the culprit
        try:
            for codec, expected_size in zip(reversed(self.bytes_bytes), reversed(sizes[:-1])):
                data = codec.decode(data, expected_size, self.max_size if expected_size is None else expected_size)
            codec = self.array_bytes
            array = codec.decode(data, specs[-1])
            for codec, codec_spec in zip(reversed(self.array_array), reversed(specs[:-1])):
                array = codec.decode(array, codec_spec)
        except Exception as error:  # numcodecs and the C libraries raise RuntimeError, ValueError, MemoryError...
            raise decode_failure(key, codec, error) from error
        if array.shape != spec.shape or array.dtype != spec.dtype:
            raise ChunkDecodeError(
                f"chunk {key!r}: decoded to shape {array.shape} and dtype {array.dtype}, "
                f"expected shape {spec.shape} and dtype {spec.dtype}"
            )
        return array


def decode_failure(key: str, codec: Codec, error: Exception) -> ChunkDecodeError:
    """The error for ``codec`` failing with ``error`` on the chunk ``key``: what the codec found
    (a ChunkDecodeError's own words), or the library's exception by name."""
    if isinstance(error, ChunkDecodeError):
        return ChunkDecodeError(f"chunk {key!r}: codec {codec.name!r}: {error}")
    return ChunkDecodeError(f"chunk {key!r}: codec {codec.name!r} failed to decode: {type(error).__name__}: {error}")


def _chunk(key: str | None) -> str:
    return "" if key is None else f"chunk {key!r}: "


@contextmanager
def _encoding(key: str | None, codec: Codec) -> Iterator[None]:
    try:
        yield
    except ZarrxError:
        raise
    except (ValueError, TypeError, OverflowError, RuntimeError) as error:  # includes UnicodeEncodeError
        raise ChunkEncodeError(
            f"{_chunk(key)}codec {codec.name!r} cannot encode the chunk: {type(error).__name__}: {error}"
        ) from error
