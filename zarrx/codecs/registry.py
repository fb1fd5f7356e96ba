"""The codec registry: one dict from spec name (and aliases) to codec class.

Built-in codecs register themselves with the :func:`register_codec` decorator
when :mod:`zarrx.codecs` is imported. Third-party packages add codecs through
the ``"zarrx.codecs"`` entry point group (entry point name = codec name); they
are imported lazily, the first time a name is not found in the dict, so a
broken plugin only matters to arrays that use it.

:func:`codec_from_json` turns one element of a ``codecs`` list into a codec.
A name that is not registered is an :class:`~zarrx.errors.UnknownCodecError`
unless the element says ``"must_understand": false`` (core spec,
"must_understand"), in which case it is ignored and ``None`` is returned.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from importlib.metadata import EntryPoint, entry_points
from typing import Any, TypeVar

from zarrx.codecs.base import Codec
from zarrx.errors import MetadataError, UnknownCodecError
from zarrx.extension import parse_extension

__all__ = [
    "ENTRY_POINT_GROUP", "codec_registry", "register_codec", "get_codec_class", "codec_from_json", "parse_codecs",
]  # fmt: skip

ENTRY_POINT_GROUP = "zarrx.codecs"

#: spec name or alias -> codec class
codec_registry: dict[str, type[Codec]] = {}
#: entry points of the "zarrx.codecs" group, read on the first registry miss
_entry_points: dict[str, EntryPoint] | None = None

CodecClass = TypeVar("CodecClass", bound=type[Codec])


def register_codec(cls: CodecClass) -> CodecClass:
    """Class decorator registering ``cls`` under ``cls.name`` and ``cls.aliases``.

    A later registration of the same name replaces the earlier one.

    Examples
    --------
    >>> @register_codec
    ... class MyCodec(BytesBytesCodec):  # doctest: +SKIP
    ...     name = "my-codec"
    """
    for name in (cls.name, *cls.aliases):
        codec_registry[name] = cls
    return cls


def _load_entry_point(name: str) -> type[Codec] | None:
    global _entry_points
    if _entry_points is None:
        _entry_points = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
    entry_point = _entry_points.get(name)
    if entry_point is None:
        return None
    try:
        cls = entry_point.load()
    except Exception as error:  # a broken plugin: report it where the codec is needed
        raise UnknownCodecError(
            f"codec {name!r}: the plugin {entry_point.value!r} ({ENTRY_POINT_GROUP} entry point) "
            f"failed to load: {error}"
        ) from error
    codec_registry[name] = cls
    return cls


def get_codec_class(name: str) -> type[Codec]:
    """The codec class registered under ``name``; UnknownCodecError when there is none.

    Examples
    --------
    >>> get_codec_class("zstd")
    <class 'zarrx.codecs.zstd.ZstdCodec'>
    """
    cls = codec_registry.get(name) or _load_entry_point(name)
    if cls is None:
        raise UnknownCodecError(
            f"unknown codec {name!r}; known codecs: {sorted(codec_registry)} "
            f"(install a package providing it through the {ENTRY_POINT_GROUP!r} entry point group)"
        )
    return cls


def codec_from_json(value: Any, field_name: str) -> Codec | None:
    """Build a codec from its JSON form (a name or a ``{"name", "configuration"}`` object).

    Returns None for an unknown codec marked ``"must_understand": false``.
    Errors are MetadataError (UnknownCodecError for unknown names) naming ``field_name``.

    Examples
    --------
    >>> codec_from_json({"name": "gzip", "configuration": {"level": 1}}, "codecs[1]")
    GzipCodec(level=1)
    """
    extension = parse_extension(value, field_name)
    try:
        cls = get_codec_class(extension.name)
    except UnknownCodecError as error:
        if not extension.must_understand:
            return None
        raise UnknownCodecError(f"{field_name}: {error}") from error
    try:
        return cls.from_json(extension.configuration)
    except MetadataError as error:
        message = str(error).removeprefix("codecs: ")
        raise type(error)(f"{field_name}: {message}") from error
    except (TypeError, ValueError, KeyError) as error:  # a plugin's own validation
        raise MetadataError(f"{field_name}: invalid configuration for codec {extension.name!r}: {error}") from error


def parse_codecs(value: Any, field_name: str = "codecs") -> tuple[Codec, ...]:
    """Codecs from JSON values, codec instances or a mix; one codec alone is taken as a list of one.

    Unknown codecs marked ``"must_understand": false`` are dropped.

    Examples
    --------
    >>> from zarrx.codecs import BytesCodec
    >>> parse_codecs([BytesCodec(), {"name": "zstd", "configuration": {"level": 3}}])
    (BytesCodec(endian=None), ZstdCodec(level=3, checksum=False))
    """
    if value is None:
        return ()
    if isinstance(value, (Codec, str, Mapping)):
        value = [value]
    elif not isinstance(value, Iterable):
        raise MetadataError(f"{field_name}: expected a list of codecs, found {type(value).__name__} {value!r}")
    codecs = []
    for position, item in enumerate(value):
        codec = item if isinstance(item, Codec) else codec_from_json(item, f"{field_name}[{position}]")
        if codec is not None:
            codecs.append(codec)
    return tuple(codecs)
