"""The ``vlen-utf8`` and ``vlen-bytes`` codecs (zarr-extensions codecs/vlen-*).

Encoding of a chunk of variable-length elements, in C order: a u32le element
count, then for each element a u32le byte length and the bytes (UTF-8 for
strings). The work is done by numcodecs' ``VLenUTF8``/``VLenBytes`` (the
reference implementation, in Cython), which check every length against the
end of the buffer. Before calling it the count is checked against the chunk
size, so a corrupt count can never cause a huge allocation; after it, the
elements must account for every byte of the chunk: bytes left after the last
element are corruption (:class:`~zarrx.errors.ChunkDecodeError`), as numcodecs
would silently ignore them.

In memory, strings are ``numpy.dtypes.StringDType`` arrays and byte strings
are object arrays of ``bytes``. zarr-python writes ``"configuration": {}``,
which is accepted; the codecs are written without a configuration.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numcodecs import VLenBytes, VLenUTF8

from zarrx.codecs.base import ArrayBytesCodec, Buffer, ChunkSpec, as_uint8
from zarrx.codecs.registry import register_codec
from zarrx.errors import ChunkDecodeError, MetadataError

__all__ = ["VLenUTF8Codec", "VLenBytesCodec"]

_COUNT_SIZE = 4


@dataclass(frozen=True, eq=False)
class _VLenCodec(ArrayBytesCodec):
    #: numpy dtype kind of the in-memory data ("T" StringDType, "O" object)
    dtype_kind: ClassVar[str]
    #: what the data type holds, for error messages
    element: ClassVar[str]
    #: the numcodecs implementation (stateless, shared)
    implementation: ClassVar[VLenUTF8 | VLenBytes]

    @staticmethod
    def payload_size(elements: np.ndarray) -> int:
        """The encoded bytes of the decoded ``elements`` (an object array), length prefixes aside."""
        raise NotImplementedError

    def validate(self, spec: ChunkSpec) -> None:
        if spec.data_type.item_size is not None or spec.dtype.kind != self.dtype_kind:
            raise MetadataError(
                f"codecs: the {self.name} codec encodes variable-length {self.element}, "
                f"not data type {spec.data_type.to_json()!r}"
                + ("; use the bytes codec" if spec.data_type.item_size is not None else "")
            )

    def encode(self, array: np.ndarray, spec: ChunkSpec) -> Buffer:
        flat = np.asarray(array).reshape(-1)
        if not flat.flags.writeable:  # numcodecs' Cython buffers refuse read-only (broadcast) views
            flat = flat.copy()
        return self.implementation.encode(flat)

    def decode(self, data: Buffer, spec: ChunkSpec) -> np.ndarray:
        source = as_uint8(data)
        if source.nbytes < _COUNT_SIZE:
            raise ChunkDecodeError(f"{source.nbytes} bytes is too short for the 4-byte element count")
        count = int(source[:_COUNT_SIZE].view("<u4")[0])
        if count != spec.size:
            raise ChunkDecodeError(
                f"expected {spec.size} elements for chunk shape {spec.shape}, found a count of {count}"
            )
        # the smallest valid encoding has a 4-byte length per element; checked before allocating the result
        if source.nbytes < _COUNT_SIZE * (count + 1):
            raise ChunkDecodeError(f"{source.nbytes} bytes cannot hold {count} elements (truncated)")
        try:
            elements = self.implementation.decode(source)
        except UnicodeDecodeError as error:
            raise ChunkDecodeError(f"invalid UTF-8 in an element: {error}") from error
        except (ValueError, RuntimeError) as error:
            raise ChunkDecodeError(f"corrupt {self.name} data: {error}") from error
        used = _COUNT_SIZE * (count + 1) + self.payload_size(elements)
        if used != source.nbytes:
            raise ChunkDecodeError(
                f"corrupt {self.name} data: {source.nbytes - used} bytes follow the last of the {count} elements "
                f"(which end at byte {used} of {source.nbytes})"
            )
        return elements.reshape(spec.shape).astype(spec.dtype, copy=False)


@register_codec
@dataclass(frozen=True, eq=False)
class VLenUTF8Codec(_VLenCodec):
    """Variable-length UTF-8 strings (the ``string`` data type).

    Examples
    --------
    >>> VLenUTF8Codec().to_json()
    {'name': 'vlen-utf8'}
    """

    name = "vlen-utf8"
    dtype_kind = "T"
    element = "strings"
    implementation = VLenUTF8()

    @staticmethod
    def payload_size(elements: np.ndarray) -> int:
        # one join and one encode in C: about half the cost of numcodecs' decode itself
        return len("".join(elements.tolist()).encode("utf-8"))


@register_codec
@dataclass(frozen=True, eq=False)
class VLenBytesCodec(_VLenCodec):
    """Variable-length byte strings (the ``bytes`` data type).

    Examples
    --------
    >>> VLenBytesCodec().to_json()
    {'name': 'vlen-bytes'}
    """

    name = "vlen-bytes"
    dtype_kind = "O"
    element = "byte strings"
    implementation = VLenBytes()

    @staticmethod
    def payload_size(elements: np.ndarray) -> int:
        return sum(map(len, elements.tolist()))
