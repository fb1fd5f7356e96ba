"""The ``sharding_indexed`` codec (v3 codecs/sharding-indexed).

A shard is one stored object holding a grid of *inner chunks*, each encoded with
the inner ``codecs``, plus an *index*: for each inner chunk its ``offset`` and
``nbytes`` in the shard as uint64 pairs (both ``2**64 - 1`` for an empty inner
chunk, which reads as the fill value), encoded with ``index_codecs`` (fixed size:
``bytes`` + ``crc32c`` by default) at the ``start`` or ``end`` of the object.

As a codec it encodes and decodes whole shards. The executor (:mod:`zarrx.io.execute`) reads
parts of shards: it fetches :meth:`ShardingCodec.index_range`, turns those bytes (or a whole
shard) into a :class:`ShardIndex` with :meth:`ShardingCodec.read_index` -- the one place an index
is cut out of a shard and parsed -- and fetches only the inner chunks a selection touches; it
writes shards with :meth:`ShardingCodec.assemble`, re-encoding only the inner chunks a write
changes.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Iterator, Literal, Mapping, Sequence

import numpy as np

from zarrx.codecs.base import ArrayBytesCodec, Buffer, ChunkSpec, as_uint8, parse_choice, raise_unexpected, require_member
from zarrx.codecs.bytes import BytesCodec
from zarrx.codecs.crc32c import Crc32cCodec
from zarrx.codecs.pipeline import CodecPipeline
from zarrx.codecs.registry import parse_codecs, register_codec
from zarrx.dtypes.fill import is_all_fill
from zarrx.dtypes.numeric import UInt64
from zarrx.errors import ChunkDecodeError, MetadataError
from zarrx.storage.store import ByteRequest, RangeByteRequest, SuffixByteRequest

__all__ = ["ShardingCodec", "ShardIndex", "EMPTY"]

#: offset and nbytes of an empty inner chunk
EMPTY = np.uint64(2**64 - 1)


@dataclass(frozen=True, eq=False)
class ShardIndex:
    """The parsed index of one shard: where each inner chunk is, or that it is empty.

    Made only by :meth:`ShardingCodec.read_index`, which checks that every entry lies inside the
    shard and outside the index's own bytes when the shard's size is known (an index at the
    start of a shard: always outside the index).
    """

    #: ``(*chunks_per_shard, 2)`` uint64: offset and nbytes per inner chunk
    entries: np.ndarray
    #: the shard's store key, for messages
    key: str

    def location(self, inner: tuple[int, ...]) -> tuple[int, int] | None:
        """``(start, end)`` of inner chunk ``inner`` in the shard, or None when it is empty."""
        offset, nbytes = self.entries[inner]
        if offset == EMPTY and nbytes == EMPTY:
            return None
        return int(offset), int(offset) + int(nbytes)

    def cut(self, shard: Buffer, inner: tuple[int, ...]) -> memoryview | None:
        """The bytes of inner chunk ``inner`` in the whole shard ``shard`` (None when empty)."""
        found = self.location(inner)
        return None if found is None else memoryview(shard)[found[0] : found[1]]

    def stored(self) -> Iterator[tuple[tuple[int, ...], int, int]]:
        """``(inner coordinates, start, end)`` of every non-empty inner chunk, in C order."""
        for inner in np.ndindex(*self.entries.shape[:-1]):
            found = self.location(inner)
            if found is not None:
                yield inner, found[0], found[1]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ShardIndex) and np.array_equal(self.entries, other.entries)

    __hash__ = None  # type: ignore[assignment]


def _pipeline(value: Any, field_name: str) -> CodecPipeline:
    if isinstance(value, CodecPipeline):
        return value
    return CodecPipeline.from_codecs(parse_codecs(value, field_name), field_name=field_name)


@register_codec
@dataclass(frozen=True, eq=False)
class ShardingCodec(ArrayBytesCodec):
    """Inner chunks of ``chunk_shape`` in one object, with an index.

    Examples
    --------
    >>> ShardingCodec(chunk_shape=(32, 32), codecs=[BytesCodec(endian="little")]).to_json()["configuration"]["index_location"]
    'end'
    """

    name = "sharding_indexed"
    decodes_partially = True

    chunk_shape: tuple[int, ...]
    codecs: Any = (BytesCodec(endian="little"),)
    index_codecs: Any = (BytesCodec(endian="little"), Crc32cCodec())
    index_location: Literal["start", "end"] = "end"

    def __post_init__(self) -> None:
        shape = tuple(self.chunk_shape)
        if any(isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 1 for s in shape):
            raise MetadataError(f"codecs: sharding_indexed: chunk_shape must be positive integers, found {self.chunk_shape!r}")
        object.__setattr__(self, "chunk_shape", tuple(int(s) for s in shape))
        object.__setattr__(self, "codecs", _pipeline(self.codecs, "codecs: sharding_indexed.codecs"))
        object.__setattr__(self, "index_codecs", _pipeline(self.index_codecs, "codecs: sharding_indexed.index_codecs"))
        parse_choice(self.name, "index_location", self.index_location, ("start", "end"))
        # one index spec object per shard shape: the index pipeline plans each spec object once
        object.__setattr__(self, "_index_specs", {})

    @classmethod
    def from_json(cls, configuration: Mapping[str, Any]) -> "ShardingCodec":
        raise_unexpected(cls.name, configuration, ("chunk_shape", "codecs", "index_codecs", "index_location"))
        chunk_shape = require_member(cls.name, configuration, "chunk_shape")
        if not isinstance(chunk_shape, list):
            raise MetadataError(f"codecs: sharding_indexed: chunk_shape must be a list, found {chunk_shape!r}")
        return cls(
            chunk_shape=tuple(chunk_shape),
            codecs=require_member(cls.name, configuration, "codecs"),
            index_codecs=require_member(cls.name, configuration, "index_codecs"),
            index_location=configuration.get("index_location", "end"),
        )

    def configuration(self) -> dict[str, Any]:
        return {
            "chunk_shape": list(self.chunk_shape),
            "codecs": self.codecs.to_json(),
            "index_codecs": self.index_codecs.to_json(),
            "index_location": self.index_location,
        }

    # -- specs ---------------------------------------------------------------------------
    def chunks_per_shard(self, spec: ChunkSpec) -> tuple[int, ...]:
        return tuple(s // c for s, c in zip(spec.shape, self.chunk_shape))

    def inner_spec(self, spec: ChunkSpec) -> ChunkSpec:
        return ChunkSpec(self.chunk_shape, spec.data_type, spec.fill_value)

    def index_spec(self, spec: ChunkSpec) -> ChunkSpec:
        found = self._index_specs.get(spec.shape)
        if found is None:
            if len(self._index_specs) >= 64:  # a rectilinear grid's few shard shapes, bounded
                self._index_specs.clear()
            found = self._index_specs[spec.shape] = ChunkSpec((*self.chunks_per_shard(spec), 2), _uint64(), EMPTY)
        return found

    def index_size(self, spec: ChunkSpec) -> int:
        size = self.index_codecs.encoded_size(self.index_spec(spec))
        return int(size)  # validate() guarantees a fixed size

    def evolve_from_spec(self, spec: ChunkSpec) -> "ShardingCodec":
        inner = self.inner_spec(spec) if len(spec.shape) == len(self.chunk_shape) else spec
        return ShardingCodec(
            chunk_shape=self.chunk_shape,
            codecs=self.codecs.evolve_from_spec(inner),
            index_codecs=self.index_codecs.evolve_from_spec(self.index_spec(spec)) if inner is not spec else self.index_codecs,
            index_location=self.index_location,
        )

    def validate(self, spec: ChunkSpec) -> None:
        if len(spec.shape) != len(self.chunk_shape):
            raise MetadataError(
                f"codecs: sharding_indexed: chunk_shape {list(self.chunk_shape)} must have one length per "
                f"dimension of the shard shape {list(spec.shape)}"
            )
        if any(s % c for s, c in zip(spec.shape, self.chunk_shape)):
            raise MetadataError(
                f"codecs: sharding_indexed: the inner chunk shape {list(self.chunk_shape)} must evenly divide "
                f"the shard shape {list(spec.shape)}"
            )
        self.codecs.validate(self.inner_spec(spec), "inner chunk")
        index_spec = self.index_spec(spec)
        self.index_codecs.validate(index_spec, "shard index")
        if self.index_codecs.encoded_size(index_spec) is None:
            raise MetadataError(
                "codecs: sharding_indexed: index_codecs must produce a fixed size (no compression); "
                "use bytes (+ crc32c)"
            )

    def encoded_size(self, spec: ChunkSpec) -> int | None:
        return None

    # -- the index -----------------------------------------------------------------------
    def index_range(self, spec: ChunkSpec) -> ByteRequest:
        """Where the index is in a shard: the first or last :meth:`index_size` bytes."""
        size = self.index_size(spec)
        return SuffixByteRequest(size) if self.index_location == "end" else RangeByteRequest(0, size)

    def decode_index(self, data: Buffer, spec: ChunkSpec, key: str, shard_size: int | None = None) -> np.ndarray:
        """The ``(*chunks_per_shard, 2)`` uint64 index; an entry past the end of the shard or
        overlapping the index's own bytes is a ChunkDecodeError naming ``key``.

        The index's bytes are known at the start of a shard; at its end, only when
        ``shard_size`` is (else entries are not checked).
        """
        index = self.index_codecs.decode(data, self.index_spec(spec), key=f"{key} (shard index)")
        index = np.asarray(index, dtype=np.uint64)
        offsets, nbytes = index[..., 0], index[..., 1]
        index_size = memoryview(data).nbytes  # the index's encoded bytes, of a fixed size
        # the inner chunks' bytes: [low, high) of the shard, beside the index
        low, high = (index_size, shard_size) if self.index_location == "start" else (
            0, None if shard_size is None else shard_size - index_size)  # fmt: skip
        if not index.size or (high is None and low == 0):
            return index
        if high is None:  # an index at the start of a shard of unknown size: 1 NumPy call
            if int(offsets.min()) >= low:  # an empty entry's offset is the largest there is
                return index
        elif int(index.max()) <= high and int((offsets + nbytes).max()) <= high and (low == 0 or int(offsets.min()) >= low):
            # no empty entry and none outside the data: 3 NumPy calls (4 for an index at the
            # start), not 10; no sum overflows (each part is at most the size)
            return index
        self._refuse_entries(index, key, shard_size, low, high)
        return index

    def _refuse_entries(self, index: np.ndarray, key: str, shard_size: int | None, low: int, high: int | None) -> None:
        """Raise for the first entry of ``index`` past the end of the shard or overlapping its
        index (outside ``[low, high)``), if there is one."""
        offsets, nbytes = index[..., 0], index[..., 1]
        empty = (offsets == EMPTY) & (nbytes == EMPTY)

        def first(bad: np.ndarray) -> tuple[int, ...] | None:
            return tuple(int(i) for i in np.argwhere(bad)[0]) if bad.any() else None

        prefix = f"chunk {key!r}: codec 'sharding_indexed': the index entry of inner chunk"
        if shard_size is not None:
            size = np.uint64(shard_size)
            # written so that nothing overflows: offset <= size, then nbytes <= size - offset
            where = first(~empty & ((offsets > size) | (nbytes > size - np.minimum(offsets, size))))
            if where is not None:
                raise ChunkDecodeError(
                    f"{prefix} {where} points past the end of the {shard_size}-byte shard "
                    f"(offset {int(offsets[where])}, nbytes {int(nbytes[where])})"
                )
        # every entry now lies inside the shard (or its size is unknown: only offsets are compared)
        outside = offsets < np.uint64(low)
        if high is not None:
            outside |= offsets + nbytes > np.uint64(high)
        where = first(~empty & outside)
        if where is not None:
            start, end = (0, low) if low else (high, shard_size)  # the index's bytes
            raise ChunkDecodeError(
                f"{prefix} {where} points into the shard's own index (bytes {start} to {end}), not at "
                f"an inner chunk's data (offset {int(offsets[where])}, nbytes {int(nbytes[where])})"
            )

    def read_index(self, data: Buffer, spec: ChunkSpec, key: str, *, whole: bool, shard_size: int | None = None) -> ShardIndex:
        """The index of a shard, from the whole shard (``whole``) or from the bytes
        :meth:`index_range` fetched (of a shard of ``shard_size`` bytes, when known); the one
        place an index is cut out of a shard and parsed.

        Every entry must lie inside the shard and outside the index's own bytes when the shard's
        size is known (a whole shard's always is; an index at the start is always checked
        against its own bytes); a shard too short to hold its index, an index that fails its
        checksum, entries past the end or into the index are ChunkDecodeErrors naming ``key``.
        """
        view = memoryview(data).cast("B")
        size = self.index_size(spec)
        if len(view) < size:
            found = len(view) if whole or shard_size is None else shard_size
            raise ChunkDecodeError(
                f"chunk {key!r}: codec 'sharding_indexed': a shard of {found} bytes cannot hold its {size}-byte index"
            )
        raw = view[len(view) - size :] if self.index_location == "end" else view[:size]
        entries = self.decode_index(raw, spec, key, shard_size=len(view) if whole else shard_size)
        return ShardIndex(entries, key)

    def decode_inner(self, data: Buffer, spec: ChunkSpec, key: str) -> np.ndarray:
        return self.codecs.decode(data, self.inner_spec(spec), key=key)

    # -- whole shards ----------------------------------------------------------------------
    def decode(self, data: Buffer, spec: ChunkSpec) -> np.ndarray:
        source = as_uint8(data)
        index = self.read_index(source, spec, "shard", whole=True)
        out = np.full(spec.shape, spec.fill_value, dtype=spec.dtype)
        for inner_coords, start, end in index.stored():
            chunk = self.decode_inner(source[start:end], spec, f"inner chunk {inner_coords}")
            out[self.inner_region(inner_coords)] = chunk
        return out

    def inner_region(self, inner_coords: Sequence[int]) -> tuple[slice, ...]:
        return tuple(slice(i * c, (i + 1) * c) for i, c in zip(inner_coords, self.chunk_shape))

    def encode(self, array: np.ndarray, spec: ChunkSpec) -> Buffer:
        inner_spec = self.inner_spec(spec)
        encoded = {}
        for inner_coords in itertools.product(*(range(n) for n in self.chunks_per_shard(spec))):
            chunk = array[self.inner_region(inner_coords)]
            if not is_all_fill(chunk, spec.fill_value):
                encoded[inner_coords] = self.codecs.encode(chunk, inner_spec)
        return self.assemble(encoded, spec)

    def assemble(self, encoded: Mapping[tuple[int, ...], Buffer], spec: ChunkSpec) -> bytes:
        """A shard from encoded inner chunks (absent coordinates are empty), in C order."""
        index = np.full((*self.chunks_per_shard(spec), 2), EMPTY, dtype=np.uint64)
        index_size = self.index_size(spec)
        offset = index_size if self.index_location == "start" else 0
        parts = []
        for inner_coords in sorted(encoded):
            data = encoded[inner_coords]
            size = memoryview(data).nbytes
            index[inner_coords] = (offset, size)
            parts.append(data)
            offset += size
        raw_index = self.index_codecs.encode(index, self.index_spec(spec))
        if self.index_location == "start":
            parts.insert(0, raw_index)
        else:
            parts.append(raw_index)
        return b"".join(parts)


def _uint64() -> UInt64:
    return UInt64()
