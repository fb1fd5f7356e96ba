"""The ``gzip`` codec (v3 codecs/gzip): DEFLATE in the gzip container (RFC 1952).

Encoding uses zlib with a gzip header and a zero timestamp, so equal chunks give
equal bytes (numcodecs' ``GZip`` stamps the current time; both decode each
other); zarr-python writes with zlib too, and a faster DEFLATE encoder would write
other bytes. Decoding uses ISA-L (``isal``, the same streams 1.6x faster than zlib on
1 MiB chunks; docs/performance.md, "Codec back-ends") and is bounded: the decompressor
is never asked for more than one byte past the allowed size, so a "gzip bomb" costs no
more memory than a valid chunk. Several concatenated gzip members are accepted, as by
``gzip.decompress``, and (leniently) a zlib header in place of the gzip one.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any, Mapping

from isal import isal_zlib

from zarrx.codecs.base import Buffer, BytesBytesCodec, as_uint8, parse_int, raise_unexpected, require_member
from zarrx.codecs.registry import register_codec
from zarrx.errors import ChunkDecodeError

__all__ = ["GzipCodec"]

_GZIP_WBITS = 31  # gzip header and trailer, 32 KiB window
_AUTO_WBITS = 47  # accept a gzip or a zlib header when reading


@register_codec
@dataclass(frozen=True, eq=False)
class GzipCodec(BytesBytesCodec):
    """Gzip compression with ``level`` 0 (stored) to 9 (smallest).

    Examples
    --------
    >>> GzipCodec(level=5).to_json()
    {'name': 'gzip', 'configuration': {'level': 5}}
    """

    name = "gzip"

    level: int = 5

    def __post_init__(self) -> None:
        object.__setattr__(self, "level", parse_int(self.name, "level", self.level, 0, 9))

    @classmethod
    def from_json(cls, configuration: Mapping[str, Any]) -> "GzipCodec":
        raise_unexpected(cls.name, configuration, ("level",))
        return cls(level=require_member(cls.name, configuration, "level"))

    def configuration(self) -> dict[str, Any]:
        return {"level": self.level}

    def encode(self, data: Buffer) -> Buffer:
        return zlib.compress(as_uint8(data), self.level, wbits=_GZIP_WBITS)

    def decode(self, data: Buffer, expected_size: int | None, max_size: int) -> Buffer:
        limit = max_size if expected_size is None else expected_size
        pending = memoryview(as_uint8(data))
        output = bytearray()
        if not pending:
            raise ChunkDecodeError("empty input, expected a gzip stream")
        while pending:
            decompressor = isal_zlib.decompressobj(wbits=_AUTO_WBITS)
            try:
                output += decompressor.decompress(pending, limit - len(output) + 1)
            except isal_zlib.error as error:
                raise ChunkDecodeError(f"corrupt gzip stream: {error}") from error
            if len(output) > limit:
                raise ChunkDecodeError(f"decoded data is larger than {_describe(expected_size, max_size)}")
            if not decompressor.eof:
                raise ChunkDecodeError("truncated gzip stream (no end of stream marker)")
            pending = memoryview(decompressor.unused_data)
        if expected_size is not None and len(output) != expected_size:
            raise ChunkDecodeError(f"expected {expected_size} decoded bytes, found {len(output)}")
        return output


def _describe(expected_size: int | None, max_size: int) -> str:
    if expected_size is None:
        return f"the limit of {max_size} bytes"
    return f"the expected {expected_size} bytes"
