"""Whether a chunk holds only its fill value, compared bit for bit.

Writers leave such chunks out of the store (``write_empty_chunks=False``), and the sharding codec
leaves such inner chunks out of a shard, so "equal" must mean what a reader would get back: -0.0
is not 0.0, and a NaN equals the fill value only with the same payload.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["is_all_fill"]

_UINT_BY_SIZE = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def is_all_fill(chunk: np.ndarray, fill_value: Any) -> bool:
    """Whether every element of ``chunk`` equals ``fill_value`` bit for bit.

    Examples
    --------
    >>> is_all_fill(np.zeros(4), 0.0), is_all_fill(np.array([0.0, -0.0]), 0.0), is_all_fill(np.full(3, np.nan), np.nan)
    (True, False, True)
    """
    if chunk.dtype.kind in "OT" or chunk.dtype.itemsize == 0:
        return bool(np.all(chunk == fill_value))
    itemsize = chunk.dtype.itemsize
    fill = np.asarray(fill_value, dtype=chunk.dtype).reshape(1)
    if chunk.flags.c_contiguous and chunk.size and not chunk.dtype.hasobject:
        # the ends compared as bytes first, in a few hundred nanoseconds (a NumPy comparison of
        # them took 20 us a chunk: a tenth of a 64 KiB chunk's copy from one codec to another)
        data, bits = chunk.reshape(-1).view(np.uint8).data, fill.tobytes()
        if data[:itemsize] != bits or data[-itemsize:] != bits:
            return False
    uint = _UINT_BY_SIZE.get(itemsize)
    if uint is not None and chunk.size and not chunk.flags.c_contiguous:
        # real data rarely starts with the fill value: answer from the first and last elements
        # before comparing (and, for a strided chunk, copying) the whole chunk
        ends = np.array([chunk[(0,) * chunk.ndim], chunk[(-1,) * chunk.ndim]], dtype=chunk.dtype)  # no copy of the chunk
        if not np.all(ends.view(uint) == fill.view(uint)[0]):
            return False
    flat = np.ascontiguousarray(chunk).reshape(-1)
    if uint is not None:
        return bool(np.all(flat.view(uint) == fill.view(uint)[0]))
    return bool(np.all(flat.view(np.uint8).reshape(-1, itemsize) == fill.view(np.uint8)))
