"""The ``crc32c`` codec (v3 codecs/crc32c): append a CRC32C checksum (RFC 3720).

The encoding is the input followed by its checksum as a u32le (one copy). Decoding
checks the checksum and returns a view of the payload (no copy). The checksum comes
from the ``crc32c`` package (hardware accelerated, SSE 4.2 / ARMv8), which
``numcodecs[crc32c]`` installs, so it is the same in every install: as fast as
``google_crc32c`` on one thread, and it releases the GIL on large buffers (twice as fast
on two threads at 1 MiB; docs/performance.md, "Codec back-ends").
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from crc32c import crc32c

from zarrx.codecs.base import Buffer, BytesBytesCodec, as_uint8
from zarrx.codecs.registry import register_codec
from zarrx.errors import ChunkDecodeError

__all__ = ["Crc32cCodec"]

_CHECKSUM_SIZE = 4
_CHECKSUM = struct.Struct("<I")


@register_codec
@dataclass(frozen=True, eq=False)
class Crc32cCodec(BytesBytesCodec):
    """Append (encode) and verify (decode) a CRC32C checksum; takes no configuration.

    Examples
    --------
    >>> Crc32cCodec().encode(b"abc")[-4:].hex()
    'b73f4b36'
    """

    name = "crc32c"

    def encoded_size(self, decoded_size: int) -> int | None:
        return decoded_size + _CHECKSUM_SIZE

    def encode(self, data: Buffer) -> Buffer:
        payload = as_uint8(data)
        return b"".join((payload, _CHECKSUM.pack(crc32c(payload))))

    def decode(self, data: Buffer, expected_size: int | None, max_size: int) -> Buffer:
        source = as_uint8(data)
        payload_size = source.nbytes - _CHECKSUM_SIZE
        if payload_size < 0:
            raise ChunkDecodeError(f"{source.nbytes} bytes is too short to hold a 4-byte checksum")
        if expected_size is not None and payload_size != expected_size:
            expected = expected_size + _CHECKSUM_SIZE
            raise ChunkDecodeError(f"expected {expected} bytes with the checksum, found {source.nbytes}")
        if payload_size > max_size:
            raise ChunkDecodeError(f"{payload_size} bytes is over the limit of {max_size}")
        payload = source[:payload_size]
        (stored,) = _CHECKSUM.unpack_from(source, payload_size)
        computed = crc32c(payload)
        if stored != computed:
            raise ChunkDecodeError(f"checksum mismatch: stored CRC32C {stored:#010x}, computed {computed:#010x}")
        return payload
