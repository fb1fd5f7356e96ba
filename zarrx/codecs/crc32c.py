"""The ``crc32c`` codec (v3 codecs/crc32c): append a CRC32C checksum (RFC 3720).

The encoding is the input followed by its checksum as a u32le. Decoding checks
the checksum and returns a view of the payload (no copy). The checksum comes
from ``google_crc32c`` (hardware accelerated), which ``numcodecs[crc32c]``
installs, or else the ``crc32c`` package.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from zarrx.codecs.base import Buffer, BytesBytesCodec, as_uint8
from zarrx.codecs.registry import register_codec
from zarrx.errors import ChunkDecodeError

try:
    import google_crc32c

    def crc32c(data: np.ndarray) -> int:
        # google_crc32c takes bytes or an ndarray, but not a memoryview or bytearray
        return google_crc32c.value(data)

except ImportError:  # pragma: no cover - depends on the environment
    from crc32c import crc32c

__all__ = ["Crc32cCodec"]

_CHECKSUM_SIZE = 4


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
        return payload.tobytes() + crc32c(payload).to_bytes(_CHECKSUM_SIZE, "little")

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
        stored = int.from_bytes(source[payload_size:].tobytes(), "little")
        computed = crc32c(payload)
        if stored != computed:
            raise ChunkDecodeError(f"checksum mismatch: stored CRC32C {stored:#010x}, computed {computed:#010x}")
        return payload
