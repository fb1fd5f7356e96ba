"""The ``transpose`` codec (v3 codecs/transpose): permute the dimensions of a chunk.

The encoded array ``B`` has ``B.shape[i] == A.shape[order[i]]``. Encoding and
decoding return NumPy views; the array -> bytes codec after it makes the copy.
``order`` must be a permutation of ``range(ndim)``, checked in :meth:`validate`
once the number of dimensions is known. The legacy constants ``"C"`` (identity)
and ``"F"`` (reversed) of early v3 drafts are read and become an explicit
permutation in :meth:`evolve_from_spec`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping

import numpy as np

from zarrx.codecs.base import ArrayArrayCodec, ChunkSpec, raise_unexpected, require_member
from zarrx.codecs.registry import register_codec
from zarrx.errors import MetadataError

__all__ = ["TransposeCodec"]


@register_codec
@dataclass(frozen=True, eq=False)
class TransposeCodec(ArrayArrayCodec):
    """Permute chunk dimensions: ``TransposeCodec(order=(1, 0))`` stores a 2-d chunk in F order.

    Examples
    --------
    >>> TransposeCodec(order=(1, 0)).to_json()
    {'name': 'transpose', 'configuration': {'order': [1, 0]}}
    """

    name = "transpose"

    order: tuple[int, ...] | str

    def __post_init__(self) -> None:
        order = self.order
        if isinstance(order, str) and order in ("C", "F"):
            return
        if isinstance(order, (str, bytes, Mapping)) or not hasattr(order, "__iter__"):
            raise MetadataError(f"codecs: codec 'transpose': order must be a list of integers, found {order!r}")
        order = tuple(order)
        if not all(isinstance(axis, (int, np.integer)) and not isinstance(axis, bool) for axis in order):
            raise MetadataError(f"codecs: codec 'transpose': order must be a list of integers, found {list(order)}")
        if sorted(order) != list(range(len(order))):
            raise MetadataError(
                f"codecs: codec 'transpose': order must be a permutation of 0..{len(order) - 1}, found {list(order)}"
            )
        object.__setattr__(self, "order", tuple(int(axis) for axis in order))

    @classmethod
    def from_json(cls, configuration: Mapping[str, Any]) -> "TransposeCodec":
        raise_unexpected(cls.name, configuration, ("order",))
        return cls(order=require_member(cls.name, configuration, "order"))

    def configuration(self) -> dict[str, Any]:
        return {"order": self.order if isinstance(self.order, str) else list(self.order)}

    def permutation(self, ndim: int) -> tuple[int, ...]:
        if self.order == "C":
            return tuple(range(ndim))
        if self.order == "F":
            return tuple(reversed(range(ndim)))
        return self.order  # type: ignore[return-value]

    def evolve_from_spec(self, spec: ChunkSpec) -> "TransposeCodec":
        return replace(self, order=self.permutation(len(spec.shape)))

    def validate(self, spec: ChunkSpec) -> None:
        order = self.permutation(len(spec.shape))
        if len(order) != len(spec.shape):
            raise MetadataError(
                f"codecs: codec 'transpose': order {list(order)} has {len(order)} entries "
                f"but the chunk has {len(spec.shape)} dimensions"
            )

    def resolve_spec(self, spec: ChunkSpec) -> ChunkSpec:
        order = self.permutation(len(spec.shape))
        return replace(spec, shape=tuple(spec.shape[axis] for axis in order))

    def encode(self, array: np.ndarray, spec: ChunkSpec) -> np.ndarray:
        return array.transpose(self.permutation(array.ndim))

    def decode(self, array: np.ndarray, spec: ChunkSpec) -> np.ndarray:
        return array.transpose(np.argsort(self.permutation(len(spec.shape))))
