"""zarrs' ``optional`` codec: the mask and the present values of an ``optional`` array, apart.

An array -> bytes codec for the ``optional`` data type (:mod:`zarrx.dtypes.optional`), as zarrs
0.23 writes it. A chunk is encoded as

* 8 bytes: the encoded mask's length, 8 bytes: the encoded data's length (uint64, little-endian);
* the mask -- a ``bool`` array of the chunk's shape, true where an element is present -- encoded
  by ``mask_codecs`` (usually ``packbits``);
* the present values, in C order, as a 1-d array of the inner type encoded by ``data_codecs``
  (which may hold another ``optional`` codec); nothing at all when no value is present.

Decoding checks that the lengths add up to the chunk's size and that the data holds exactly as
many values as the mask has present elements; missing elements hold zeros.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from zarrx.codecs.base import ArrayBytesCodec, Buffer, ChunkSpec, as_uint8, raise_unexpected, require_member
from zarrx.codecs.pipeline import CodecPipeline
from zarrx.codecs.registry import parse_codecs, register_codec
from zarrx.dtypes import parse_data_type
from zarrx.errors import ChunkDecodeError, MetadataError

__all__ = ["OptionalCodec"]

_HEADER = struct.Struct("<QQ")


def _pipeline(value: Any, member: str) -> CodecPipeline:
    if isinstance(value, CodecPipeline):
        return value
    field_name = f"codecs: optional.{member}"
    return CodecPipeline.from_codecs(parse_codecs(value, field_name), field_name=field_name)


@register_codec
@dataclass(frozen=True, eq=False)
class OptionalCodec(ArrayBytesCodec):
    """The mask through ``mask_codecs``, the present values through ``data_codecs``.

    Examples
    --------
    >>> from zarrx.codecs import BytesCodec, PackBitsCodec
    >>> codec = OptionalCodec(mask_codecs=[PackBitsCodec()], data_codecs=[BytesCodec()])
    >>> codec.to_json()["configuration"]["mask_codecs"]
    [{'name': 'packbits'}]
    """

    name = "optional"
    aliases = ("zarrs.optional",)  # zarrs 0.23.x releases' name

    mask_codecs: Any
    data_codecs: Any

    def __post_init__(self) -> None:
        object.__setattr__(self, "mask_codecs", _pipeline(self.mask_codecs, "mask_codecs"))
        object.__setattr__(self, "data_codecs", _pipeline(self.data_codecs, "data_codecs"))

    @classmethod
    def from_json(cls, configuration: Mapping[str, Any]) -> "OptionalCodec":
        raise_unexpected(cls.name, configuration, ("mask_codecs", "data_codecs"))
        members = {member: require_member(cls.name, configuration, member) for member in ("mask_codecs", "data_codecs")}
        for member, value in members.items():
            if not isinstance(value, list):
                raise MetadataError(f"codecs: codec 'optional': {member} must be a list of codecs, found {value!r}")
        return cls(**members)

    def configuration(self) -> dict[str, Any]:
        return {"mask_codecs": self.mask_codecs.to_json(), "data_codecs": self.data_codecs.to_json()}

    # -- the two representations -----------------------------------------------------------------
    @staticmethod
    def _mask_spec(spec: ChunkSpec) -> ChunkSpec:
        return ChunkSpec(spec.shape, parse_data_type("bool"), False)

    @staticmethod
    def _data_spec(spec: ChunkSpec, count: int) -> ChunkSpec:
        inner = spec.data_type.inner  # type: ignore[attr-defined]  (validate() checked the type)
        return ChunkSpec((count,), inner, inner.default_fill_value())

    def evolve_from_spec(self, spec: ChunkSpec) -> "OptionalCodec":
        if spec.data_type.stored_by != self.name:
            return self
        return OptionalCodec(mask_codecs=self.mask_codecs.evolve_from_spec(self._mask_spec(spec)),
                             data_codecs=self.data_codecs.evolve_from_spec(self._data_spec(spec, max(1, spec.size))))  # fmt: skip

    def validate(self, spec: ChunkSpec) -> None:
        if spec.data_type.stored_by != self.name:
            raise MetadataError(
                f"codecs: codec 'optional' encodes the optional data type, found {spec.data_type.to_json()!r}"
            )
        self.mask_codecs.validate(self._mask_spec(spec), "inner chunk")
        self.data_codecs.validate(self._data_spec(spec, max(1, spec.size)), "inner chunk")

    def encode(self, array: np.ndarray, spec: ChunkSpec) -> Buffer:
        elements = np.ascontiguousarray(array, dtype=spec.dtype).reshape(-1)
        valid = elements["valid"].astype(bool)
        mask = self.mask_codecs.encode(valid.reshape(spec.shape), self._mask_spec(spec))
        present = np.ascontiguousarray(elements["value"][valid])
        data = self.data_codecs.encode(present, self._data_spec(spec, present.size)) if present.size else b""
        return _HEADER.pack(len(mask), len(data)) + mask + data

    def decode(self, data: Buffer, spec: ChunkSpec) -> np.ndarray:
        raw = as_uint8(data)
        if raw.nbytes < _HEADER.size:
            raise ChunkDecodeError(f"a chunk of {raw.nbytes} bytes cannot hold the 16-byte header")
        mask_size, data_size = _HEADER.unpack(raw[: _HEADER.size].tobytes())
        if _HEADER.size + mask_size + data_size != raw.nbytes:
            raise ChunkDecodeError(
                f"the header states a {mask_size}-byte mask and {data_size} bytes of data, the chunk has {raw.nbytes - _HEADER.size}"
            )
        mask_end = _HEADER.size + mask_size
        valid = np.asarray(self.mask_codecs.decode(raw[_HEADER.size : mask_end], self._mask_spec(spec), key="mask"), dtype=bool)
        count = int(np.count_nonzero(valid))
        out = np.zeros(spec.shape, dtype=spec.dtype)
        out["valid"] = valid
        if count:
            values = self.data_codecs.decode(raw[mask_end:], self._data_spec(spec, count), key="data")
            out["value"][valid] = values
        elif data_size:
            raise ChunkDecodeError(f"the mask marks no element present, but {data_size} bytes of data follow")
        return out
