"""``arr.oindex[...]`` and ``arr.vindex[...]``: orthogonal and coordinate (vectorized) indexing
of an array, as zarr-python spells them (NumPy's own ``arr[...]`` is basic indexing)."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["OIndex", "VIndex"]


class OIndex:
    """Orthogonal indexing: each axis selected on its own (``arr.oindex[[0, 2], 1:3]``)."""

    def __init__(self, array: Any) -> None:
        self._array = array

    def __getitem__(self, selection: Any) -> Any:
        return self._array.get_orthogonal_selection(selection)

    def __setitem__(self, selection: Any, value: Any) -> None:
        self._array.set_orthogonal_selection(selection, value)


class VIndex:
    """Coordinate indexing: points given by one integer array per axis (``arr.vindex[[0, 2], [1, 3]]``)."""

    def __init__(self, array: Any) -> None:
        self._array = array

    def __getitem__(self, selection: Any) -> np.ndarray:
        return self._array.get_coordinate_selection(selection)

    def __setitem__(self, selection: Any, value: Any) -> None:
        self._array.set_coordinate_selection(selection, value)
