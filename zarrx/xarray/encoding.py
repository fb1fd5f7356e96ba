"""Codecs in xarray's ``encoding``, both ways.

:func:`codec_encoding` gives an array's codecs as the encoding keys xarray's zarr engine uses
(``compressors``, ``filters``, ``serializer``, ``shards``) when a variable is opened, as the
objects ``engine="zarr"`` gives: for Zarr v3 zarr-python's codec objects when zarr-python is
installed and knows the codec (``encoding["compressors"][0].cname``), zarrx's own codec objects
otherwise (same attributes; they compare equal to zarr-python's and to their JSON); for Zarr v2
numcodecs objects. Either engine's writer takes them back.

:func:`codecs_argument` passes what a user puts in ``encoding`` on to :func:`zarrx.create_array`,
which takes codecs in every form users hold them (:mod:`zarrx.codecs.normalize`); only the v2
object codecs (``vlen-utf8`` ...) of an encoding read from v2 are dropped from the filters, since
the array's data type brings its own.
"""

from __future__ import annotations

import warnings
from typing import Any

from zarrx.codecs.base import Codec
from zarrx.codecs.normalize import as_codec
from zarrx.errors import ZarrxError
from zarrx.nodes.array import Array

__all__ = ["codec_encoding", "codecs_argument", "peer_codec"]

#: v2 object codecs: the data type says how elements are stored, so they are dropped from filters
OBJECT_CODECS = {"vlen-utf8", "vlen-bytes", "vlen-array"}


def _numcodec(config: Any) -> Any:
    """A v2 codec configuration as the numcodecs object zarr-python reports (the JSON if unknown)."""
    try:
        import numcodecs

        return numcodecs.get_codec(dict(config))
    except Exception:  # an id numcodecs does not know: the JSON still describes it
        return config


def peer_codec(codec: Codec) -> Any:
    """zarr-python's codec object for ``codec`` (what ``engine="zarr"`` puts in an encoding), or
    ``codec`` itself when zarr-python is not installed or has no such codec.

    Examples
    --------
    >>> from zarrx.codecs import ZstdCodec
    >>> peer_codec(ZstdCodec(level=3)).level
    3
    """
    try:
        from zarr.registry import get_codec_class
    except ImportError:
        return codec
    try:
        with warnings.catch_warnings():  # zarr-python warns that numcodecs.* codecs are not in the spec
            warnings.simplefilter("ignore")
            return get_codec_class(codec.name).from_dict(codec.to_json())
    except Exception:  # a codec zarr-python does not have (or reads differently): zarrx's object
        return codec


def codec_encoding(array: Array) -> dict[str, Any]:
    """``compressors``, ``filters``, ``shards`` and (v3) ``serializer`` of the array, as xarray's
    encoding keys; for a sharded array the inner chunks' codecs, as ``create_array(shards=...)``
    takes them."""
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
        "compressors": tuple(peer_codec(c) for c in compressors),
        "filters": tuple(peer_codec(c) for c in filters),
        "shards": array.shards,
        "serializer": peer_codec(serializer),
    }


def _is_object_codec(codec: Any, key: str) -> bool:
    try:
        normalized = as_codec(codec, key)
    except ZarrxError:
        return False  # create_array names what is wrong with it
    return normalized is not None and normalized.name in OBJECT_CODECS


def codecs_argument(value: Any, zarr_format: int, key: str) -> Any:
    """Codecs from an encoding (zarrx, zarr-python or numcodecs objects, JSON, names) as
    :func:`zarrx.create_array` takes them: as they are, but for the object codecs of filters."""
    if key == "filters" and isinstance(value, (list, tuple)):
        return [codec for codec in value if not _is_object_codec(codec, key)]
    return value
