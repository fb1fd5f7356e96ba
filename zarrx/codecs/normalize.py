"""Codecs as users hold them, turned into the codecs an array stores.

Everything that takes codecs from a user -- :func:`zarrx.create_array` (``filters``,
``serializer``, ``compressors``, v3 and v2), xarray ``encoding`` and :func:`zarrx.convert`
(``compressors=``, ``--compressor``) -- goes through this module, so each form means the same
everywhere:

* a zarrx codec (:class:`~zarrx.codecs.ZstdCodec` ...) as it is;
* its JSON, ``{"name": "zstd", "configuration": {"level": 3}}``, read as ``zarr.json`` is;
* a zarr-python 3 codec object (``zarr.codecs.ZstdCodec(level=3)``,
  ``BloscCodec(shuffle="shuffle")``, ``zarr.codecs.numcodecs.Zlib(level=1)``), through its
  ``to_dict()``; the members zarr-python leaves to the array (its ``_tunable_attrs``: blosc's
  ``typesize`` and ``shuffle``) are left to the array here too;
* a numcodecs codec object (``numcodecs.Zstd(level=3)``, ``Blosc``, ``GZip``, ``Zlib`` ...) or its
  configuration ``{"id": "zstd", ...}``: ``blosc``, ``zstd`` and ``gzip`` become the v3 codecs
  that write the same bytes (as zarr-python's ``migrate v3`` maps them), ``vlen-utf8`` and
  ``vlen-bytes`` the v3 serializers, every other id the ``numcodecs.<id>`` codec zarr-python
  writes; ``pickle`` and the other unsafe object codecs are refused;
* a short name -- ``"zstd"``, ``"gzip"``, ``"blosc"``, ``"crc32c"``, or a numcodecs id such as
  ``"zlib"``, ``"lz4"`` -- is that codec with its defaults (zstd level 0, gzip level 5, blosc
  zstd at clevel 5).

What depends on the array is left unset and filled in when the codec meets the array's chunk
spec (:meth:`~zarrx.codecs.base.Codec.evolve_from_spec`): blosc's ``typesize`` becomes the item
size and ``shuffle`` byte shuffle (bit shuffle for one-byte items), as zarr-python does, so a
``numcodecs.Blosc(shuffle=1)`` or a ``BloscCodec(shuffle="shuffle")`` really shuffles. A v2 blosc
``shuffle: -1`` (AUTOSHUFFLE) means the same.

For Zarr v2 arrays :func:`v2_codec_config` turns the same forms into numcodecs configurations.
Unknown names are :class:`~zarrx.errors.UnknownCodecError`, anything else malformed a
:class:`~zarrx.errors.MetadataError` naming the argument (``compressors[0]``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, Callable

import numcodecs
import numcodecs.registry
from numcodecs.abc import Codec as NumcodecsCodec

from zarrx.codecs.base import Codec
from zarrx.codecs.blosc import SHUFFLES, BloscCodec
from zarrx.codecs.crc32c import Crc32cCodec
from zarrx.codecs.gzip import GzipCodec
from zarrx.codecs.registry import codec_from_json, codec_registry, get_codec_class
from zarrx.codecs.v2 import REFUSED_CODECS, check_codec_config
from zarrx.codecs.vlen import VLenBytesCodec, VLenUTF8Codec
from zarrx.codecs.zstd import ZstdCodec
from zarrx.errors import MetadataError, UnknownCodecError, UnsupportedExtensionError

__all__ = [
    "NUMCODECS_PREFIX",
    "as_codec",
    "as_codecs",
    "check_kind",
    "codec_from_name",
    "codec_from_numcodecs",
    "v2_codec_config",
    "with_level",
]

NUMCODECS_PREFIX = "numcodecs."
#: numcodecs blosc shuffle numbers -> the v3 names; -1 (AUTOSHUFFLE) is None: chosen by item size
_SHUFFLE_NAMES: dict[int, str | None] = {0: "noshuffle", 1: "shuffle", 2: "bitshuffle", -1: None}
#: the configuration members that hold a compression level, by codec
LEVEL_MEMBERS = ("level", "clevel")


# -- numcodecs configurations as v3 codecs ------------------------------------------------------


def _blosc_from_numcodecs(config: Mapping[str, Any], field_name: str) -> Codec:
    shuffle = config.get("shuffle", 1)
    if shuffle not in _SHUFFLE_NAMES:
        raise MetadataError(f"{field_name}: blosc shuffle must be one of {sorted(_SHUFFLE_NAMES)}, found {shuffle!r}")
    return BloscCodec(cname=config.get("cname", "lz4"), clevel=config.get("clevel", 5), shuffle=_SHUFFLE_NAMES[shuffle],
                      typesize=None, blocksize=config.get("blocksize", 0))  # fmt: skip


#: numcodecs id -> the v3 codec writing the same bytes (numcodecs' own defaults for absent members)
V3_FROM_NUMCODECS: dict[str, Callable[[Mapping[str, Any], str], Codec]] = {
    "blosc": _blosc_from_numcodecs,
    "zstd": lambda c, field: ZstdCodec(level=c.get("level", 0), checksum=bool(c.get("checksum", False))),
    "gzip": lambda c, field: GzipCodec(level=c.get("level", 1)),
    "vlen-utf8": lambda c, field: VLenUTF8Codec(),
    "vlen-bytes": lambda c, field: VLenBytesCodec(),
}


def codec_from_numcodecs(config: Mapping[str, Any], field_name: str) -> Codec:
    """The v3 codec for a numcodecs configuration ``{"id": ..., ...}`` (see the module docstring).

    Examples
    --------
    >>> codec_from_numcodecs({"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1}, "compressor")
    BloscCodec(cname='lz4', clevel=5, shuffle='shuffle', typesize=None, blocksize=0)
    >>> codec_from_numcodecs({"id": "zlib", "level": 1}, "compressor")
    NumcodecsZlibCodec(level=1)
    """
    config = check_codec_config(config, field_name)
    return _numcodecs_as_v3(config.pop("id"), config, field_name)


def _numcodecs_as_v3(codec_id: str, config: dict[str, Any], field_name: str) -> Codec:
    build = V3_FROM_NUMCODECS.get(codec_id)
    if build is not None:
        try:
            return build(config, field_name)
        except MetadataError as error:
            raise MetadataError(f"{field_name}: {str(error).removeprefix('codecs: ')}") from None
    codec = codec_from_json({"name": NUMCODECS_PREFIX + codec_id, "configuration": config}, field_name)
    if codec is None:  # pragma: no cover - codec_from_json drops only must_understand: false
        raise UnknownCodecError(f"{field_name}: no Zarr v3 codec for the numcodecs codec {codec_id!r}")
    return codec


# -- every form as a v3 codec ---------------------------------------------------------------------


def codec_from_name(name: str, field_name: str) -> Codec:
    """The codec called ``name`` (a v3 name, or a numcodecs id) with its defaults written out.

    Examples
    --------
    >>> codec_from_name("zstd", "compressors"), codec_from_name("lz4", "compressors")
    (ZstdCodec(level=0, checksum=False), NumcodecsLz4Codec(acceleration=1))
    """
    codec_id = name.removeprefix(NUMCODECS_PREFIX)
    if name.startswith(NUMCODECS_PREFIX) or (name not in codec_registry and codec_id in numcodecs.registry.codec_registry):
        if codec_id in numcodecs.registry.codec_registry:
            # numcodecs' defaults, recorded (v3 requires it), but for what the array decides
            try:
                config = numcodecs.get_codec({"id": codec_id}).get_config()
            except (TypeError, ValueError):  # no defaults for some members (delta's dtype): the array gives them
                config = {"id": codec_id}
            from_array = getattr(codec_registry.get(NUMCODECS_PREFIX + codec_id), "spec_members", ())
            if codec_id in REFUSED_CODECS:
                raise UnsupportedExtensionError(f"{field_name}: {REFUSED_CODECS[codec_id]}")
            configuration = {k: v for k, v in config.items() if k != "id" and k not in from_array}
            return _numcodecs_as_v3(codec_id, configuration, field_name)
    try:
        cls = get_codec_class(name)
    except UnknownCodecError as error:
        raise UnknownCodecError(f"{field_name}: {error}") from None
    try:
        return cls()
    except (TypeError, MetadataError) as error:
        raise MetadataError(
            f"{field_name}: the codec {name!r} has no default configuration ({error}); "
            f"pass the codec object or its JSON, {{'name': {name!r}, 'configuration': {{...}}}}"
        ) from None


def _from_zarr_python(codec: Any, field_name: str) -> Codec | None:
    """A zarr-python 3 codec object, by its ``to_dict()``; members it leaves to the array stay unset."""
    try:
        document = codec.to_dict()
    except Exception as error:  # its own serialization refused: say which object
        raise MetadataError(f"{field_name}: cannot read the codec {codec!r}: {type(error).__name__}: {error}") from None
    parsed = codec_from_json(document, field_name)
    tunable = set(getattr(codec, "_tunable_attrs", ()) or ())
    if parsed is not None and tunable and dataclasses.is_dataclass(parsed):
        names = {member.name for member in dataclasses.fields(parsed)}
        parsed = dataclasses.replace(parsed, **{name: None for name in tunable & names})
    return parsed


def as_codec(value: Any, field_name: str) -> Codec | None:
    """One codec in any form the module docstring lists; None for JSON marked ``must_understand: false``.

    Examples
    --------
    >>> import numcodecs
    >>> as_codec(numcodecs.Zstd(level=3), "compressors[0]"), as_codec("gzip", "compressors[0]")
    (ZstdCodec(level=3, checksum=False), GzipCodec(level=5))
    """
    if isinstance(value, Codec):
        return value
    if isinstance(value, str):
        return codec_from_name(value, field_name)
    if isinstance(value, NumcodecsCodec):
        return codec_from_numcodecs(value.get_config(), field_name)
    if isinstance(value, Mapping):
        if "id" in value and "name" not in value:
            return codec_from_numcodecs(value, field_name)
        return codec_from_json(value, field_name)
    if callable(getattr(value, "to_dict", None)):
        return _from_zarr_python(value, field_name)
    raise MetadataError(
        f"{field_name}: expected a codec (a zarrx, zarr-python or numcodecs codec, its JSON or a name such as "
        f"'zstd'), found {type(value).__name__} {value!r}"
    )


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, (str, Mapping, Codec, NumcodecsCodec)) or callable(getattr(value, "to_dict", None)):
        return [value]
    if not isinstance(value, Iterable):
        raise MetadataError(f"expected a list of codecs, found {type(value).__name__} {value!r}")
    return list(value)


#: what each kind of codec is called in error messages, with examples
KIND_NAMES = {
    "array_to_array": "array -> array codecs (filters: transpose, numcodecs.delta, ...)",
    "array_to_bytes": "an array -> bytes codec (the serializer: bytes, vlen-utf8, sharding_indexed, ...)",
    "bytes_to_bytes": "bytes -> bytes codecs (compressors: zstd, gzip, blosc, crc32c, ...)",
}


def check_kind(codec: Codec, kind: str, field_name: str) -> Codec:
    """``codec`` when it is of ``kind``; MetadataError saying what the argument takes otherwise."""
    if codec.kind != kind:
        raise MetadataError(
            f"{field_name}: {codec.name!r} is {KIND_NAMES[codec.kind].split(' (')[0].removesuffix('s')}, "
            f"but this argument takes {KIND_NAMES[kind]}"
        )
    return codec


def as_codecs(value: Any, field_name: str, kind: str | None = None) -> tuple[Codec, ...]:
    """Codecs from None (none), one codec in any form, or a list of them (each of ``kind``, if given).

    Examples
    --------
    >>> as_codecs(["zstd", {"id": "gzip", "level": 3}], "compressors")
    (ZstdCodec(level=0, checksum=False), GzipCodec(level=3))
    """
    try:
        items = _as_list(value)
    except MetadataError as error:
        raise MetadataError(f"{field_name}: {error}") from None
    codecs = []
    for position, item in enumerate(items):
        codec = as_codec(item, f"{field_name}[{position}]")
        if codec is not None:
            codecs.append(codec if kind is None else check_kind(codec, kind, f"{field_name}[{position}]"))
    return tuple(codecs)


def with_level(codec: Codec, level: int, field_name: str) -> Codec:
    """``codec`` with its compression level (``level`` or ``clevel``) set to ``level``.

    Examples
    --------
    >>> with_level(BloscCodec(), 9, "--compressor")
    BloscCodec(cname='zstd', clevel=9, shuffle=None, typesize=None, blocksize=0)
    """
    document = codec.to_json()
    configuration = dict(document.get("configuration") or {})
    member = next((name for name in LEVEL_MEMBERS if name in configuration), None)
    if member is None:
        raise MetadataError(f"{field_name}: the codec {codec.name!r} has no compression level to set")
    configuration[member] = level
    try:
        return type(codec).from_json(configuration)
    except MetadataError as error:
        raise MetadataError(f"{field_name}: {str(error).removeprefix('codecs: ')}") from None


# -- every form as a Zarr v2 (numcodecs) configuration ---------------------------------------------

#: v3 blosc shuffle names -> numcodecs numbers; unset (chosen by item size) is AUTOSHUFFLE
_SHUFFLE_NUMBERS: dict[str | None, int] = {**SHUFFLES, None: -1}


def _blosc_config(codec: BloscCodec) -> dict[str, Any]:
    return {"id": "blosc", "cname": codec.cname, "clevel": codec.clevel,
            "shuffle": _SHUFFLE_NUMBERS[codec.shuffle], "blocksize": codec.blocksize}  # fmt: skip


#: v3 codec class -> its numcodecs configuration
V2_FROM_V3: dict[type[Codec], Callable[[Any], dict[str, Any]]] = {
    BloscCodec: _blosc_config,
    ZstdCodec: lambda codec: {"id": "zstd", "level": codec.level, **({"checksum": True} if codec.checksum else {})},
    GzipCodec: lambda codec: {"id": "gzip", "level": codec.level},
    Crc32cCodec: lambda codec: {"id": "crc32c"},
    VLenUTF8Codec: lambda codec: {"id": "vlen-utf8"},
    VLenBytesCodec: lambda codec: {"id": "vlen-bytes"},
}


def v2_codec_config(value: Any, field_name: str) -> dict[str, Any]:
    """A codec in any form as the numcodecs configuration a ``.zarray`` holds, checked.

    Examples
    --------
    >>> v2_codec_config("zstd", "compressors[0]"), v2_codec_config(BloscCodec(shuffle="bitshuffle"), "compressors[0]")
    ({'id': 'zstd', 'level': 0, 'checksum': False}, {'id': 'blosc', 'cname': 'zstd', 'clevel': 5, 'shuffle': 2, 'blocksize': 0})
    """
    if isinstance(value, NumcodecsCodec):
        return check_codec_config(value.get_config(), field_name)
    if isinstance(value, Mapping) and "id" in value and "name" not in value:
        return check_codec_config(value, field_name)
    codec = as_codec(value, field_name)
    if codec is None:
        raise MetadataError(f"{field_name}: a codec marked must_understand: false has no Zarr v2 form")
    build = V2_FROM_V3.get(type(codec))
    if build is not None:
        config = build(codec)
    elif codec.name.startswith(NUMCODECS_PREFIX):
        config = {"id": codec.name.removeprefix(NUMCODECS_PREFIX), **(codec.configuration() or {})}
    else:
        config = None
    if config is not None:  # with every member numcodecs records, as zarr-python writes a numcodecs codec
        return check_codec_config(numcodecs.get_codec(check_codec_config(config, field_name)).get_config(), field_name)
    raise MetadataError(
        f"{field_name}: Zarr format 2 has no codec like the v3 codec {codec.name!r}; "
        "use a numcodecs codec (numcodecs.Zstd(level=3), numcodecs.Blosc(), ...) or zarr_format=3"
    )
