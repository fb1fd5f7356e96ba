"""The ``zarrs.vlen`` codec (the zarrs library's experimental ``vlen`` array -> bytes codec).

A chunk of variable-length elements (``string`` or ``bytes``) is split into
its *data*, the elements' bytes concatenated in C order (UTF-8 for strings),
and its *index*, ``n + 1`` offsets into the data (the Apache Arrow
variable-size binary layout without the validity bitmap): element ``j`` is
``data[offsets[j]:offsets[j + 1]]``. The offsets are ``index_data_type``
(``uint32`` or ``uint64``) and are encoded by ``index_codecs`` as a 1-d array
of shape ``(n + 1,)``; the data is encoded by ``data_codecs`` as a 1-d
``uint8`` array (and, as zarrs does, not at all when it is empty). A chunk is::

    index_location "start":  u64le(len(index)) | encoded index | encoded data
    index_location "end":    encoded data | encoded index | u64le(len(index))

Configuration versions (zarrs ``VlenCodecConfigurationV0`` / ``V0_1``; the
JSON carries no version number, the members tell them apart): 0.0 has
``data_codecs``, ``index_codecs`` and ``index_data_type``, and the index is at
the start; 0.1 adds the required ``index_location``. Both are read; 0.1 is
written. The name ``https://codec.zarrs.dev/array_to_bytes/vlen`` is read as
an alias; ``zarrs.vlen`` is written.

Decoding is bounded and checked before anything is built from the index: the
index length must fit in the chunk; the offsets must number ``n + 1``, start
at 0, never decrease, and end at the decoded data length, which may not
exceed the nested pipeline's ``max_size``. Anything else, and invalid UTF-8 in
a string, is a :class:`~zarrx.errors.ChunkDecodeError`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Literal, Mapping

import numpy as np

from zarrx.codecs.base import (
    ArrayBytesCodec,
    Buffer,
    ChunkSpec,
    as_uint8,
    parse_choice,
    raise_unexpected,
    require_member,
)
from zarrx.codecs.bytes import BytesCodec
from zarrx.codecs.pipeline import CodecPipeline
from zarrx.codecs.registry import register_codec
from zarrx.dtypes.numeric import UInt8, UInt32, UInt64
from zarrx.errors import ChunkDecodeError, MetadataError

__all__ = ["ZarrsVlenCodec"]

#: the encoded index length field: a u64 little-endian
_LENGTH_SIZE = 8
#: index_data_type -> (data type of the offsets, largest offset it holds)
_INDEX_DATA_TYPES = {"uint32": (UInt32(), 2**32 - 1), "uint64": (UInt64(), 2**64 - 1)}


@register_codec
@dataclass(frozen=True, eq=False)
class ZarrsVlenCodec(ArrayBytesCodec):
    """Variable-length elements as an offsets index and a data blob, each with its own codecs.

    The defaults are zarrs' own: data through ``bytes``, a ``uint64`` index
    through little-endian ``bytes``, at the start of the chunk.

    Examples
    --------
    >>> from zarrx.codecs import ZstdCodec
    >>> codec = ZarrsVlenCodec(data_codecs=[BytesCodec(), ZstdCodec(level=3)], index_data_type="uint32")
    >>> codec.to_json()["configuration"]["index_location"]
    'start'
    >>> ZarrsVlenCodec.from_json(codec.to_json()["configuration"]) == codec
    True
    """

    name = "zarrs.vlen"
    aliases = ("https://codec.zarrs.dev/array_to_bytes/vlen",)

    data_codecs: Any = (BytesCodec(),)
    index_codecs: Any = (BytesCodec(endian="little"),)
    index_data_type: Literal["uint32", "uint64"] = "uint64"
    index_location: Literal["start", "end"] = "start"

    def __post_init__(self) -> None:
        object.__setattr__(self, "data_codecs", _pipeline(self.data_codecs, "data_codecs"))
        object.__setattr__(self, "index_codecs", _pipeline(self.index_codecs, "index_codecs"))
        parse_choice(self.name, "index_data_type", self.index_data_type, tuple(_INDEX_DATA_TYPES))
        parse_choice(self.name, "index_location", self.index_location, ("start", "end"))

    @classmethod
    def from_json(cls, configuration: Mapping[str, Any]) -> "ZarrsVlenCodec":
        raise_unexpected(cls.name, configuration, ("data_codecs", "index_codecs", "index_data_type", "index_location"))
        return cls(
            data_codecs=require_member(cls.name, configuration, "data_codecs"),
            index_codecs=require_member(cls.name, configuration, "index_codecs"),
            index_data_type=require_member(cls.name, configuration, "index_data_type"),
            # configuration version 0.0 has no index_location: its index is at the start
            index_location=configuration.get("index_location", "start"),
        )

    def configuration(self) -> dict[str, Any]:
        return {  # version 0.1: every member, index_location included
            "data_codecs": self.data_codecs.to_json(),
            "index_codecs": self.index_codecs.to_json(),
            "index_data_type": self.index_data_type,
            "index_location": self.index_location,
        }

    # -- specs ---------------------------------------------------------------------------
    def index_spec(self, spec: ChunkSpec) -> ChunkSpec:
        """What ``index_codecs`` encode: the ``n + 1`` offsets of a chunk of ``spec``."""
        return ChunkSpec((spec.size + 1,), _INDEX_DATA_TYPES[self.index_data_type][0], 0)

    @staticmethod
    def data_spec(data_size: int) -> ChunkSpec:
        """What ``data_codecs`` encode: ``data_size`` bytes as a 1-d uint8 array."""
        return ChunkSpec((data_size,), UInt8(), 0)

    def evolve_from_spec(self, spec: ChunkSpec) -> "ZarrsVlenCodec":
        return replace(
            self,
            data_codecs=self.data_codecs.evolve_from_spec(self.data_spec(1)),
            index_codecs=self.index_codecs.evolve_from_spec(self.index_spec(spec)),
        )

    def validate(self, spec: ChunkSpec) -> None:
        if spec.data_type.item_size is not None or spec.dtype.kind not in _ELEMENTS:
            raise MetadataError(
                f"codecs: the {self.name} codec encodes variable-length data types (string, bytes), "
                f"not data type {spec.data_type.to_json()!r}"
                + ("; use the bytes codec" if spec.data_type.item_size is not None else "")
            )
        self.index_codecs.validate(self.index_spec(spec))
        self.data_codecs.validate(self.data_spec(1))

    # -- chunks --------------------------------------------------------------------------
    def encode(self, array: np.ndarray, spec: ChunkSpec) -> Buffer:
        pieces = _ELEMENTS[spec.dtype.kind].to_pieces(np.asarray(array).reshape(-1))
        offsets = np.zeros(len(pieces) + 1, dtype=np.uint64)
        np.cumsum(np.fromiter(map(len, pieces), dtype=np.uint64, count=len(pieces)), out=offsets[1:])
        index_type, largest = _INDEX_DATA_TYPES[self.index_data_type]
        if int(offsets[-1]) > largest:
            raise ValueError(
                f"the chunk holds {int(offsets[-1])} bytes of data, too many for offsets of "
                f"index_data_type {self.index_data_type!r}; use 'uint64'"
            )
        index = self.index_codecs.encode(offsets.astype(index_type.numpy_dtype), self.index_spec(spec))
        data = b"".join(pieces)
        encoded_data = b""  # as zarrs writes it: empty data skips the data codecs
        if data:
            encoded_data = self.data_codecs.encode(np.frombuffer(data, np.uint8), self.data_spec(len(data)))
        length = len(index).to_bytes(_LENGTH_SIZE, "little")
        parts = (length, index, encoded_data) if self.index_location == "start" else (encoded_data, index, length)
        return b"".join(parts)

    def decode(self, data: Buffer, spec: ChunkSpec) -> np.ndarray:
        source = as_uint8(data)
        encoded_index, encoded_data = self._split(source)
        offsets = self._decode_offsets(encoded_index, spec)
        data_size = int(offsets[-1])
        if data_size > self.data_codecs.max_size:
            raise ChunkDecodeError(
                f"the last offset declares {data_size} bytes of data, over the limit of {self.data_codecs.max_size}"
            )
        if data_size == 0:  # as zarrs: nothing to decode (the data is stored empty)
            raw = b""
        else:
            data_spec = self.data_spec(data_size)
            size = self.data_codecs.encoded_size(data_spec)
            if size is not None and size != encoded_data.nbytes:
                raise ChunkDecodeError(
                    f"the last offset declares {data_size} bytes of data, which data_codecs encode in {size} bytes, "
                    f"found {encoded_data.nbytes} (truncated, or the offsets point past the end of the data)"
                )
            raw = as_uint8(self.data_codecs.decode(encoded_data, data_spec, key="data_codecs")).tobytes()
        elements = _ELEMENTS[spec.dtype.kind].from_pieces(raw, offsets.tolist())
        return elements.reshape(spec.shape)

    def _split(self, source: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The encoded index and the encoded data of a chunk."""
        if source.nbytes < _LENGTH_SIZE:
            raise ChunkDecodeError(
                f"{source.nbytes} bytes is too short for the {_LENGTH_SIZE}-byte encoded index length (truncated)"
            )
        at_start = self.index_location == "start"
        length_field = source[:_LENGTH_SIZE] if at_start else source[-_LENGTH_SIZE:]
        index_size = int.from_bytes(length_field.tobytes(), "little")
        body = source[_LENGTH_SIZE:] if at_start else source[:-_LENGTH_SIZE]
        if index_size > body.nbytes:
            raise ChunkDecodeError(
                f"the encoded index length is {index_size} bytes, but the chunk has only {body.nbytes} bytes "
                f"besides the {_LENGTH_SIZE}-byte length field (index_location {self.index_location!r}; "
                "truncated or corrupt)"
            )
        if at_start:
            return body[:index_size], body[index_size:]
        return body[body.nbytes - index_size :], body[: body.nbytes - index_size]

    def _decode_offsets(self, encoded_index: np.ndarray, spec: ChunkSpec) -> np.ndarray:
        """The ``n + 1`` offsets as uint64, checked: from 0, never decreasing."""
        index_spec = self.index_spec(spec)
        count = index_spec.shape[0]
        size = self.index_codecs.encoded_size(index_spec)
        if size is not None and size != encoded_index.nbytes:
            raise ChunkDecodeError(
                f"the encoded index is {encoded_index.nbytes} bytes, expected {size}: {count} "
                f"{self.index_data_type} offsets for a chunk of {spec.size} elements (shape {spec.shape}) plus one"
            )
        offsets = np.asarray(self.index_codecs.decode(encoded_index, index_spec, key="index_codecs"), dtype=np.uint64)
        if offsets[0] != 0:
            raise ChunkDecodeError(f"the first offset is {int(offsets[0])}, expected 0")
        decreasing = np.flatnonzero(offsets[1:] < offsets[:-1])
        if decreasing.size:
            j = int(decreasing[0])
            raise ChunkDecodeError(
                f"the offsets decrease at element {j}: offsets[{j}] = {int(offsets[j])} > "
                f"offsets[{j + 1}] = {int(offsets[j + 1])} (offsets must be monotonically increasing)"
            )
        return offsets


def _pipeline(value: Any, member: str) -> CodecPipeline:
    """A nested codec chain from codecs, their JSON forms, or a pipeline (as sharding's codecs)."""
    from zarrx.codecs.registry import parse_codecs

    if isinstance(value, CodecPipeline):
        return value
    field_name = f"codecs: {ZarrsVlenCodec.name}.{member}"
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise MetadataError(f"{field_name}: expected a list of codecs, found {type(value).__name__} {value!r}")
    return CodecPipeline.from_codecs(parse_codecs(value, field_name), field_name=field_name)


# -- elements: the in-memory form of each variable-length data type ------------------------


@dataclass(frozen=True)
class _Elements:
    #: the elements of a flat array as bytes
    to_pieces: Callable[[np.ndarray], list[bytes]]
    #: an array of the elements data[offsets[j]:offsets[j + 1]]
    from_pieces: Callable[[bytes, list[int]], np.ndarray]


def _strings_to_pieces(flat: np.ndarray) -> list[bytes]:
    return [text.encode("utf-8") for text in flat.tolist()]


def _strings_from_pieces(data: bytes, offsets: list[int]) -> np.ndarray:
    bounds = zip(offsets, offsets[1:])
    if data.isascii():  # one decode; character offsets are byte offsets
        text = data.decode("ascii")
        return np.array([text[start:stop] for start, stop in bounds], dtype=np.dtypes.StringDType())
    values = []
    for position, (start, stop) in enumerate(bounds):
        try:
            values.append(data[start:stop].decode("utf-8"))
        except UnicodeDecodeError as error:
            raise ChunkDecodeError(
                f"invalid UTF-8 in element {position} (bytes {start} to {stop} of the data): {error.reason} "
                f"at byte {error.start} of the element"
            ) from None
    return np.array(values, dtype=np.dtypes.StringDType())


def _bytes_to_pieces(flat: np.ndarray) -> list[bytes]:
    pieces = flat.tolist()
    for position, piece in enumerate(pieces):
        if not isinstance(piece, bytes):
            if not isinstance(piece, (bytearray, memoryview)):
                raise TypeError(f"element {position} is {type(piece).__name__} {piece!r}, expected bytes")
            pieces[position] = bytes(piece)
    return pieces


def _bytes_from_pieces(data: bytes, offsets: list[int]) -> np.ndarray:
    out = np.empty(len(offsets) - 1, dtype=object)
    out[:] = [data[start:stop] for start, stop in zip(offsets, offsets[1:])]
    return out


#: numpy dtype kind of the in-memory data -> its elements ("T" StringDType strings, "O" bytes objects)
_ELEMENTS = {
    "T": _Elements(_strings_to_pieces, _strings_from_pieces),
    "O": _Elements(_bytes_to_pieces, _bytes_from_pieces),
}
