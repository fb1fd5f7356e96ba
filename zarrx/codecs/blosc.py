"""The ``blosc`` codec (v3 codecs/blosc): the c-blosc container through numcodecs.

``typesize`` and ``shuffle`` may be left unset (None): :meth:`evolve_from_spec`
fills them from the array's data type (item size, 1 for variable length;
byte shuffle for multi-byte items, bit shuffle for single bytes), so the
metadata always records them as the spec requires.

c-blosc trusts the sizes in its 16-byte header and does not know the length of
its input, so decoding checks the header first (Blosc chunk format: version,
versionlz, flags, typesize, then u32le ``nbytes``, ``blocksize``, ``cbytes``):
the compressed size must equal the input length and the decompressed size the
expected size (or be at most ``max_size``). Truncated or inflated buffers never
reach the C library.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace
from typing import Any, Mapping

import numpy as np
from numcodecs import blosc as numcodecs_blosc

from zarrx.codecs.base import (
    Buffer,
    BytesBytesCodec,
    ChunkSpec,
    as_uint8,
    parse_choice,
    parse_int,
    raise_unexpected,
    require_member,
)
from zarrx.codecs.registry import register_codec
from zarrx.errors import ChunkDecodeError

__all__ = ["BloscCodec"]

CNAMES = ("lz4", "lz4hc", "blosclz", "zstd", "snappy", "zlib")
SHUFFLES = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}
_HEADER_SIZE = 16
#: flags (byte 2), then nbytes, blocksize, cbytes (u32le from byte 4); struct: 10x cheaper than numpy views
_HEADER = struct.Struct("<2xB1xIII")
_MEMCPYED = 0x02  # flags bit: the data is stored uncompressed after the header


@register_codec
@dataclass(frozen=True, eq=False)
class BloscCodec(BytesBytesCodec):
    """Blosc meta-compression; None for ``shuffle``/``typesize`` means "choose from the data type".

    Examples
    --------
    >>> BloscCodec(cname="lz4", clevel=5, shuffle="shuffle", typesize=4).to_json()["configuration"]
    {'cname': 'lz4', 'clevel': 5, 'shuffle': 'shuffle', 'typesize': 4, 'blocksize': 0}
    """

    name = "blosc"
    threads_on_main_thread = True  # numcodecs: blosc's global thread pool serves the main thread

    cname: str = "zstd"
    clevel: int = 5
    shuffle: str | None = None
    typesize: int | None = None
    blocksize: int = 0

    def __post_init__(self) -> None:
        parse_choice(self.name, "cname", self.cname, CNAMES)
        object.__setattr__(self, "clevel", parse_int(self.name, "clevel", self.clevel, 0, 9))
        parse_choice(self.name, "shuffle", self.shuffle, (*SHUFFLES, None))
        if self.typesize is not None:
            object.__setattr__(self, "typesize", parse_int(self.name, "typesize", self.typesize, 1, 2**31 - 1))
        object.__setattr__(self, "blocksize", parse_int(self.name, "blocksize", self.blocksize, 0, 2**31 - 1))

    @classmethod
    def from_json(cls, configuration: Mapping[str, Any]) -> "BloscCodec":
        raise_unexpected(cls.name, configuration, ("cname", "clevel", "shuffle", "typesize", "blocksize"))
        return cls(
            cname=require_member(cls.name, configuration, "cname"),
            clevel=require_member(cls.name, configuration, "clevel"),
            shuffle=configuration.get("shuffle"),
            typesize=configuration.get("typesize"),
            blocksize=configuration.get("blocksize", 0),
        )

    def configuration(self) -> dict[str, Any]:
        configuration = {"cname": self.cname, "clevel": self.clevel, "shuffle": self.shuffle,
                         "typesize": self.typesize, "blocksize": self.blocksize}  # fmt: skip
        return {key: value for key, value in configuration.items() if value is not None}

    def evolve_from_spec(self, spec: ChunkSpec) -> "BloscCodec":
        item_size = spec.data_type.item_size or 1
        typesize = item_size if self.typesize is None else self.typesize
        shuffle = ("bitshuffle" if item_size == 1 else "shuffle") if self.shuffle is None else self.shuffle
        return replace(self, typesize=typesize, shuffle=shuffle)

    def encode(self, data: Buffer) -> Buffer:
        typesize = self.typesize or 1
        shuffle = self.shuffle or ("bitshuffle" if typesize == 1 else "shuffle")
        return numcodecs_blosc.compress(
            as_uint8(data), self.cname.encode(), self.clevel, SHUFFLES[shuffle], self.blocksize, typesize
        )

    decodes_into = True

    def decode(self, data: Buffer, expected_size: int | None, max_size: int) -> Buffer:
        source = as_uint8(data)
        decoded_size = _check_header(source, expected_size, max_size)
        output = np.empty(decoded_size, dtype=np.uint8)
        if decoded_size:  # c-blosc reports an empty buffer as an error
            _decompress(source, output)
        return output

    def decode_into(self, data: Buffer, out: np.ndarray) -> None:
        source = as_uint8(data)
        if _check_header(source, out.nbytes, out.nbytes):
            _decompress(source, out)


def _check_header(source: np.ndarray, expected_size: int | None, max_size: int) -> int:
    """The decoded size the header declares, checked against the input and the expected sizes."""
    if source.nbytes < _HEADER_SIZE:
        raise ChunkDecodeError(f"truncated blosc header: {source.nbytes} bytes, expected at least {_HEADER_SIZE}")
    flags, decoded_size, _blocksize, compressed_size = _HEADER.unpack_from(source)
    if compressed_size != source.nbytes:
        raise ChunkDecodeError(f"the blosc header declares {compressed_size} bytes, found {source.nbytes}")
    if expected_size is not None and decoded_size != expected_size:
        raise ChunkDecodeError(f"the blosc header declares {decoded_size} decoded bytes, expected {expected_size}")
    if decoded_size > max_size:
        raise ChunkDecodeError(f"the blosc header declares {decoded_size} decoded bytes, over the limit {max_size}")
    if flags & _MEMCPYED and compressed_size != decoded_size + _HEADER_SIZE:
        raise ChunkDecodeError(
            f"the blosc header declares {decoded_size} uncompressed bytes stored in {compressed_size}"
        )
    return decoded_size


def _decompress(source: np.ndarray, output: np.ndarray) -> None:
    try:
        numcodecs_blosc.decompress(source, output)
    except (RuntimeError, ValueError) as error:
        raise ChunkDecodeError(f"corrupt blosc data: {error}") from error
