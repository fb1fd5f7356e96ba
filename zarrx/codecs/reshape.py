"""The ``reshape`` codec (zarr-extensions codecs/reshape): the same elements, another shape.

An array -> array codec that keeps the C-order sequence of the elements (``ravel(B) ==
ravel(A)``); with ``transpose`` before it, it can reorder and reshape. ``shape`` gives each output
dimension as a positive size, as a list of input dimensions whose sizes multiply (useful when
chunk shapes vary, as on a rectilinear grid), or as ``-1`` (at most once: whatever makes the
element counts equal). The shape is resolved per chunk shape; what the page requires is checked
there: equal element counts, input dimensions listed in strictly increasing order, and an output
dimension given by input dimensions must line up with them (the output dimensions before it
hold as many elements as the input dimensions before the first of them, and likewise after).
Encoding and decoding are NumPy views where the array is contiguous.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Mapping

import numpy as np

from zarrx.codecs.base import ArrayArrayCodec, ChunkSpec, raise_unexpected, require_member
from zarrx.codecs.registry import register_codec
from zarrx.errors import MetadataError

__all__ = ["ReshapeCodec"]

Item = int | tuple[int, ...]


def _parse_item(value: Any, position: int) -> Item:
    if isinstance(value, (list, tuple)):
        if not all(isinstance(dim, int) and not isinstance(dim, bool) and dim >= 0 for dim in value):
            raise MetadataError(f"codecs: codec 'reshape': shape[{position}] must list input dimensions (integers >= 0), found {value!r}")
        return tuple(value)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or (value < 1 and value != -1):
        raise MetadataError(
            f"codecs: codec 'reshape': shape[{position}] must be a positive size, -1 or a list of input dimensions, found {value!r}"
        )
    return int(value)


@register_codec
@dataclass(frozen=True, eq=False)
class ReshapeCodec(ArrayArrayCodec):
    """Reshape chunks in C order: ``ReshapeCodec(shape=[[0, 1], -1])`` merges the first two dimensions.

    Examples
    --------
    >>> from zarrx.dtypes import resolve_data_type
    >>> codec = ReshapeCodec(shape=[[0, 1], [2]])
    >>> codec.resolve_spec(ChunkSpec((2, 3, 4), resolve_data_type("uint8"), 0)).shape
    (6, 4)
    """

    name = "reshape"

    shape: tuple[Item, ...]

    def __post_init__(self) -> None:
        if isinstance(self.shape, (str, bytes, Mapping)) or not hasattr(self.shape, "__iter__"):
            raise MetadataError(f"codecs: codec 'reshape': shape must be a list, found {self.shape!r}")
        items = tuple(_parse_item(item, position) for position, item in enumerate(self.shape))
        if sum(item == -1 for item in items) > 1:
            raise MetadataError(f"codecs: codec 'reshape': -1 may occur at most once in shape, found {list(self.shape)}")
        flat = [dim for item in items if isinstance(item, tuple) for dim in item]
        if any(later <= earlier for earlier, later in zip(flat, flat[1:])):
            raise MetadataError(
                f"codecs: codec 'reshape': the input dimensions of shape must be strictly increasing (reshape never "
                f"transposes; use a transpose codec), found {flat}"
            )
        object.__setattr__(self, "shape", items)

    @classmethod
    def from_json(cls, configuration: Mapping[str, Any]) -> "ReshapeCodec":
        raise_unexpected(cls.name, configuration, ("shape",))
        shape = require_member(cls.name, configuration, "shape")
        if not isinstance(shape, list):
            raise MetadataError(f"codecs: codec 'reshape': shape must be a list, found {shape!r}")
        return cls(shape=tuple(shape))

    def configuration(self) -> dict[str, Any]:
        return {"shape": [list(item) if isinstance(item, tuple) else item for item in self.shape]}

    def output_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """The encoded shape of a chunk of ``shape``; MetadataError when the page's rules fail."""
        sizes: list[int | None] = []
        for position, item in enumerate(self.shape):
            if isinstance(item, tuple):
                if item and item[-1] >= len(shape):
                    raise MetadataError(
                        f"codecs: codec 'reshape': shape[{position}] names input dimension {item[-1]} of a {len(shape)}-d chunk"
                    )
                sizes.append(math.prod(shape[dim] for dim in item))
            else:
                sizes.append(None if item == -1 else item)
        total, known = math.prod(shape), math.prod(size for size in sizes if size is not None)
        if None in sizes:
            if known == 0 or total % known:
                raise MetadataError(f"codecs: codec 'reshape': no size for -1 makes {list(self.shape)} hold the {total} elements of {list(shape)}")
            sizes[sizes.index(None)] = total // known
        result = tuple(size for size in sizes if size is not None)
        if math.prod(result) != total:
            raise MetadataError(f"codecs: codec 'reshape': shape {list(result)} does not hold the {total} elements of a chunk of shape {list(shape)}")
        for position, item in enumerate(self.shape):
            if isinstance(item, tuple) and item:
                lines_up = (math.prod(result[:position]) == math.prod(shape[: item[0]])
                            and math.prod(result[position + 1 :]) == math.prod(shape[item[-1] + 1 :]))  # fmt: skip
                if not lines_up:
                    raise MetadataError(
                        f"codecs: codec 'reshape': output dimension {position} (input dimensions {list(item)}) does not "
                        f"line up with them: {list(result)} from {list(shape)}"
                    )
        return result

    def validate(self, spec: ChunkSpec) -> None:
        self.output_shape(spec.shape)

    def resolve_spec(self, spec: ChunkSpec) -> ChunkSpec:
        return replace(spec, shape=self.output_shape(spec.shape))

    def encode(self, array: np.ndarray, spec: ChunkSpec) -> np.ndarray:
        return np.asarray(array).reshape(self.output_shape(spec.shape))

    def decode(self, array: np.ndarray, spec: ChunkSpec) -> np.ndarray:
        return np.asarray(array).reshape(spec.shape)
