"""Codecs: the chunk encodings of Zarr v3 and the pipeline that chains them.

Importing this package registers the built-in codecs (``bytes``, ``transpose``,
``gzip``, ``zstd``, ``blosc``, ``crc32c``, ``vlen-utf8``, ``vlen-bytes``, ``sharding_indexed``,
``cast_value``, ``scale_offset``, ``zarrs.vlen``, the ``numcodecs.*`` codecs, and the registry's
``bitround``, ``packbits``, ``reshape``, ``zfp``, ``conditional`` and ``n5_default``, and zarrs'
``optional``);
third-party ones are found through the ``"zarrx.codecs"`` entry point group.
"""

from __future__ import annotations

from zarrx.codecs.base import ArrayArrayCodec, ArrayBytesCodec, BytesBytesCodec, ChunkSpec, Codec
from zarrx.codecs.bitround import BitroundCodec
from zarrx.codecs.blosc import BloscCodec
from zarrx.codecs.bytes import BytesCodec
from zarrx.codecs.cast_value import CastValueCodec
from zarrx.codecs.conditional import ConditionalCodec
from zarrx.codecs.crc32c import Crc32cCodec
from zarrx.codecs.gzip import GzipCodec
from zarrx.codecs import numcodecs_codecs  # noqa: F401 (registers the numcodecs.* codecs)
from zarrx.codecs.n5_default import N5DefaultCodec
from zarrx.codecs.optional import OptionalCodec
from zarrx.codecs.packbits import PackBitsCodec
from zarrx.codecs.pipeline import CodecPipeline
from zarrx.codecs.registry import codec_from_json, get_codec_class, parse_codecs, register_codec
from zarrx.codecs.reshape import ReshapeCodec
from zarrx.codecs.scale_offset import ScaleOffsetCodec
from zarrx.codecs.sharding import ShardingCodec
from zarrx.codecs.transpose import TransposeCodec
from zarrx.codecs.vlen import VLenBytesCodec, VLenUTF8Codec
from zarrx.codecs.zarrs_vlen import ZarrsVlenCodec
from zarrx.codecs.zfp import ZfpCodec
from zarrx.codecs.zstd import ZstdCodec

__all__ = [
    "ArrayArrayCodec",
    "ArrayBytesCodec",
    "BitroundCodec",
    "BloscCodec",
    "BytesBytesCodec",
    "BytesCodec",
    "CastValueCodec",
    "ChunkSpec",
    "Codec",
    "CodecPipeline",
    "ConditionalCodec",
    "Crc32cCodec",
    "GzipCodec",
    "N5DefaultCodec",
    "OptionalCodec",
    "PackBitsCodec",
    "ReshapeCodec",
    "ScaleOffsetCodec",
    "ShardingCodec",
    "TransposeCodec",
    "VLenBytesCodec",
    "VLenUTF8Codec",
    "ZarrsVlenCodec",
    "ZfpCodec",
    "ZstdCodec",
    "codec_from_json",
    "get_codec_class",
    "parse_codecs",
    "register_codec",
]
