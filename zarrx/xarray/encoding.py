"""Codecs in xarray's ``encoding``, both ways.

:func:`codec_encoding` gives an array's codecs as the encoding keys xarray's zarr engine uses
(``compressors``, ``filters``, ``serializer``, ``shards``) when a variable is opened;
:func:`codecs_argument` turns what a user puts in ``encoding`` (zarrx codecs, v3 JSON,
zarr-python codec objects, numcodecs objects or configurations) into what
:func:`zarrx.create_array` takes when a variable is written.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zarrx.codecs.base import Codec
from zarrx.nodes.array import Array

__all__ = ["codec_encoding", "codecs_argument"]

#: v2 object codecs: in v3 the serializer handles strings, so they are dropped from filters
OBJECT_CODECS = {"vlen-utf8", "vlen-bytes", "vlen-array"}
#: numcodecs compressors written as the v3 codec of the same algorithm: id -> (name, configuration)
V3_EQUIVALENTS = {
    "zstd": lambda c: ("zstd", {"level": c.get("level", 0), "checksum": c.get("checksum", False)}),
    "gzip": lambda c: ("gzip", {"level": c.get("level", 1)}),
    "blosc": lambda c: (
        "blosc",
        {
            "cname": c.get("cname", "lz4"),
            "clevel": c.get("clevel", 5),
            "shuffle": {0: "noshuffle", 1: "shuffle", 2: "bitshuffle", -1: "shuffle"}[c.get("shuffle", 1)],
            "blocksize": c.get("blocksize", 0),
        },
    ),
}


def _codec_json(codec: Any) -> Any:
    return codec.to_json() if hasattr(codec, "to_json") else codec


def _numcodec(config: Any) -> Any:
    """A v2 codec configuration as the numcodecs object zarr-python reports (the JSON if unknown)."""
    try:
        import numcodecs

        return numcodecs.get_codec(dict(config))
    except Exception:  # an id numcodecs does not know: the JSON still describes it
        return config


def codec_encoding(array: Array) -> dict[str, Any]:
    """``compressors``, ``filters``, ``shards`` and (v3) ``serializer`` of the array, as xarray's
    encoding keys. v3 codecs are JSON (``{"name": ..., "configuration": ...}``), which zarrx and
    zarr-python both accept back; for a sharded array they are the inner chunks' codecs, as
    ``create_array(shards=...)`` takes them. v2 codecs are numcodecs objects, as engine="zarr" gives."""
    pipeline = array.metadata.codecs
    serializer = pipeline.array_bytes
    if getattr(array.metadata, "zarr_format", 3) == 2 or getattr(serializer, "name", None) == "zarr-v2":  # v2 and the 2022 draft
        compressor = getattr(serializer, "compressor", None)
        return {
            "compressors": () if compressor is None else (_numcodec(compressor),),
            "filters": tuple(_numcodec(f) for f in getattr(serializer, "filters", ()) or ()),
            "shards": None,
        }
    filters, compressors = tuple(pipeline.array_array), tuple(pipeline.bytes_bytes)
    if array.shards is not None:
        inner = serializer.codecs
        filters += tuple(inner.array_array)
        serializer, compressors = inner.array_bytes, tuple(inner.bytes_bytes)
    return {
        "compressors": tuple(_codec_json(c) for c in compressors),
        "filters": tuple(_codec_json(c) for c in filters),
        "shards": array.shards,
        "serializer": _codec_json(serializer),
    }


def codecs_argument(value: Any, zarr_format: int, key: str) -> Any:
    """Codecs from an encoding (zarrx codecs, JSON, zarr-python or numcodecs objects) as
    :func:`zarrx.create_array` takes them."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)):
        codecs = [_codec_argument(codec, zarr_format) for codec in value]
        if zarr_format == 3 and key == "filters":
            codecs = [c for c in codecs if not (isinstance(c, Mapping) and c.get("name") in OBJECT_CODECS)]
        return codecs
    return _codec_argument(value, zarr_format)


def _codec_argument(codec: Any, zarr_format: int) -> Any:
    if isinstance(codec, Codec):
        return codec
    if isinstance(codec, Mapping):
        if zarr_format == 3 and "id" in codec:  # a numcodecs configuration
            return _numcodecs_to_v3(dict(codec))
        return codec
    if hasattr(codec, "to_dict"):  # a zarr-python v3 codec
        return codec.to_dict()
    if hasattr(codec, "get_config"):  # a numcodecs codec
        config = dict(codec.get_config())
        return _numcodecs_to_v3(config) if zarr_format == 3 else config
    return codec


def _numcodecs_to_v3(config: dict[str, Any]) -> dict[str, Any]:
    codec_id = config.pop("id")
    if codec_id in OBJECT_CODECS:
        return {"name": codec_id}
    if codec_id in V3_EQUIVALENTS:
        name, configuration = V3_EQUIVALENTS[codec_id](config)
        return {"name": name, "configuration": configuration}
    return {"name": f"numcodecs.{codec_id}", "configuration": config}
