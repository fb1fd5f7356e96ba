"""The ``n5_default`` codec (zarr-extensions codecs/n5_default): N5 blocks in "default" mode.

An array -> bytes codec that reads and writes the blocks of N5 datasets. A block is a big-endian
header -- mode (uint16, ``0`` for default), number of dimensions (uint16), the block's shape
(uint32 each, in the array's dimension order) -- then the block's data encoded by
``configuration.codecs``: a ``transpose`` reversing every dimension (N5 blocks are in F order),
``bytes`` with ``"endian": "big"`` (or no endian for one-byte types), and at most one bytes ->
bytes codec (gzip, zstd, blosc...). The block may be smaller or larger than the chunk (N5
writers truncate or pad edge blocks): it is decoded with the shape its header states, then
truncated or padded with the fill value to the chunk's shape. zarrx writes full-size blocks, as
tensorstore does.

N5 datasets are Zarr arrays with this codec, a ``zarr.json`` beside N5's ``attributes.json`` and the
``v2`` chunk key encoding with ``"/"`` (N5's block keys); reading ``attributes.json`` itself (an N5
store) is outside this codec.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, replace
from typing import Any, Mapping

import numpy as np

from zarrx.codecs.base import ArrayBytesCodec, Buffer, ChunkSpec, as_uint8, raise_unexpected, require_member
from zarrx.codecs.bytes import BytesCodec
from zarrx.codecs.pipeline import CodecPipeline
from zarrx.codecs.registry import parse_codecs, register_codec
from zarrx.codecs.transpose import TransposeCodec
from zarrx.errors import ChunkDecodeError, MetadataError

__all__ = ["N5DefaultCodec"]

_DEFAULT_MODE = 0
#: a block's header may state a shape up to this many times the chunk's elements (a padded edge block)
_MAX_BLOCK_FACTOR = 8


@register_codec
@dataclass(frozen=True, eq=False)
class N5DefaultCodec(ArrayBytesCodec):
    """N5 default-mode blocks: a header, then ``codecs`` (full transpose, big-endian bytes, a compressor).

    Examples
    --------
    >>> from zarrx.dtypes import resolve_data_type
    >>> codec = N5DefaultCodec(codecs=[TransposeCodec(order=(1, 0)), BytesCodec(endian="big")])
    >>> spec = ChunkSpec((2, 3), resolve_data_type("uint16"), 0)
    >>> block = codec.encode(np.arange(6, dtype="uint16").reshape(2, 3), spec)
    >>> bytes(block[:12]).hex()  # mode 0, 2 dimensions, 2 x 3
    '000000020000000200000003'
    """

    name = "n5_default"

    codecs: Any

    def __post_init__(self) -> None:
        given = self.codecs.codecs if isinstance(self.codecs, CodecPipeline) else self.codecs
        codecs = parse_codecs(given, "codecs: n5_default.codecs")
        first, second = (codecs + (None, None))[:2]
        if not isinstance(first, TransposeCodec) or not isinstance(second, BytesCodec) or second.endian == "little":
            raise MetadataError(
                "codecs: codec 'n5_default': codecs must start with a transpose reversing every dimension and a bytes "
                f"codec with endian 'big' (or none, for one-byte types), found {[codec.to_json() for codec in codecs]}"
            )
        if len(codecs) > 3:
            raise MetadataError(f"codecs: codec 'n5_default': at most one codec may follow bytes, found {len(codecs) - 2}")
        object.__setattr__(self, "codecs", CodecPipeline.from_codecs(codecs, field_name="codecs: n5_default.codecs"))

    @classmethod
    def from_json(cls, configuration: Mapping[str, Any]) -> "N5DefaultCodec":
        raise_unexpected(cls.name, configuration, ("codecs",))
        codecs = require_member(cls.name, configuration, "codecs")
        if not isinstance(codecs, list):
            raise MetadataError(f"codecs: codec 'n5_default': codecs must be a list, found {codecs!r}")
        return cls(codecs=codecs)

    def configuration(self) -> dict[str, Any]:
        return {"codecs": self.codecs.to_json()}

    def evolve_from_spec(self, spec: ChunkSpec) -> "N5DefaultCodec":
        return N5DefaultCodec(codecs=self.codecs.evolve_from_spec(spec))

    def validate(self, spec: ChunkSpec) -> None:
        order = self.codecs.array_array[0].permutation(len(spec.shape))
        if tuple(order) != tuple(reversed(range(len(spec.shape)))):
            raise MetadataError(
                f"codecs: codec 'n5_default': the transpose must reverse all {len(spec.shape)} dimensions, found order {list(order)}"
            )
        self.codecs.validate(spec, "inner chunk")

    def encode(self, array: np.ndarray, spec: ChunkSpec) -> Buffer:
        header = struct.pack(f">HH{len(spec.shape)}I", _DEFAULT_MODE, len(spec.shape), *spec.shape)
        return header + self.codecs.encode(array, spec)

    def decode(self, data: Buffer, spec: ChunkSpec) -> np.ndarray:
        raw = as_uint8(data)
        ndim = len(spec.shape)
        header_size = 4 + 4 * ndim
        if raw.nbytes < header_size:
            raise ChunkDecodeError(f"an N5 block of {raw.nbytes} bytes is shorter than its {header_size}-byte header")
        mode, dims = struct.unpack(">HH", raw[:4].tobytes())
        if mode != _DEFAULT_MODE or dims != ndim:
            raise ChunkDecodeError(
                f"expected an N5 block in default mode (0) of {ndim} dimensions, found mode {mode} and {dims} dimensions"
            )
        block_shape = struct.unpack(f">{ndim}I", raw[4:header_size].tobytes())
        if math.prod(block_shape) > _MAX_BLOCK_FACTOR * max(1, math.prod(spec.shape)):
            raise ChunkDecodeError(f"the N5 block header states a shape {list(block_shape)} far past the chunk's {list(spec.shape)}")
        block = self.codecs.decode(raw[header_size:], replace(spec, shape=tuple(block_shape)), key="N5 block")
        if block_shape == spec.shape:
            return block
        chunk = np.full(spec.shape, spec.fill_value, dtype=spec.dtype)  # pad or truncate to the chunk
        common = tuple(slice(0, min(a, b)) for a, b in zip(block_shape, spec.shape))
        chunk[common] = block[common]
        return chunk
