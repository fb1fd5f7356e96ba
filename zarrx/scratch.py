"""Scratch buffers: memory each thread keeps between calls to decode and gather chunks into.

A chunk decoded (or gathered) into a fresh array costs the first-touch page faults of fresh
memory, more than the copy itself on the machines measured; :func:`scratch_array` and
:func:`scratch_bytes` give a buffer the calling thread keeps for its next call instead. What all
threads keep together is bounded per process (:data:`SCRATCH_BUDGET_BYTES`); a larger buffer is
freed after use. A scheduler's task gives its buffers back when it ends (:func:`release_scratch`,
called by :func:`zarrx.concurrency.task_threads`), so the next task, on any thread, takes them warm.
A forked child starts from none.

The output of a large read is fresh memory too, allocated by :func:`fresh_array` in small
pages: see there.
"""

from __future__ import annotations

import ctypes
import math
import mmap
import os
import sys
import threading
import weakref
from typing import Any

import numpy as np

__all__ = ["scratch_array", "scratch_bytes", "kept_scratch_bytes", "release_scratch", "fresh_array", "values_are_bytes", "copy_values", "many_rows", "SCRATCH_BUDGET_BYTES",
           "MAX_KEPT_SCRATCH_BYTES", "MIN_SMALL_PAGE_BYTES"]  # fmt: skip

#: per-thread scratch buffers, reused across calls so steady reads and writes touch warm memory
_scratch = threading.local()
#: scratch buffers up to this size stay with their thread between calls...
#: (32 MiB: a 256**3 chunk of 2-byte values; a fresh buffer per chunk costs an mmap and an munmap,
#: which stalls the page faults of every thread of the process: with 16 reads in flight, 1 GiB
#: of such chunks took 1.3-4.1 s through fresh buffers, 1.0-2.1 s into kept ones)
MAX_KEPT_SCRATCH_BYTES = 32 * 2**20
#: ... as long as all the threads of the process keep no more than this together
#: (``ZARRX_SCRATCH_BUDGET_BYTES``): a buffer past it is freed after use
SCRATCH_BUDGET_BYTES = int(os.environ.get("ZARRX_SCRATCH_BUDGET_BYTES", "0") or 0) or 64 * 2**20
_kept = 0
_kept_lock = threading.RLock()  # re-entrant: a buffer's finalizer may run wherever it is freed
_generation = 0
#: the scratch buffers of tasks that ended (:func:`release_scratch`), for the next task on any thread
_spare: list[np.ndarray] = []
_SLOTS = ("buffer", "stored")


def scratch_array(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A C-contiguous array of ``shape`` and ``dtype`` over this thread's scratch buffer.

    Its contents are undefined and the next call on the same thread reuses them: use it for one
    chunk at a time. Reusing one buffer per thread instead of a fresh array per chunk avoids the
    first-touch page faults of fresh memory (70k a 256 MiB read on the benchmark machine).
    """
    return _kept_bytes("buffer", math.prod(shape) * dtype.itemsize).view(dtype).reshape(shape)


def scratch_bytes(nbytes: int) -> memoryview:
    """``nbytes`` writeable bytes of this thread's second scratch buffer, beside
    :func:`scratch_array`'s (stored bytes read before they are decoded into that one); the next
    call on the same thread reuses them, as there."""
    return memoryview(_kept_bytes("stored", nbytes))


def kept_scratch_bytes() -> int:
    """The bytes of scratch buffers this process keeps between calls, held by threads or given
    back by tasks that ended (at most :data:`SCRATCH_BUDGET_BYTES`)."""
    return _kept


def release_scratch() -> None:
    """Give this thread's scratch buffers back to the process: the end of
    :func:`zarrx.concurrency.task_threads`.

    The thread keeps none; the next task, on any thread, takes them warm, and the oldest are
    freed when a new buffer would not fit in the budget. (Freeing them outright would cost each
    task fresh memory: 46k page faults, +40% on ``from_zarr(a).sum()`` of 2 MiB chunks.)"""
    given = [getattr(_scratch, slot) for slot in _SLOTS if hasattr(_scratch, slot)]
    if not given:
        return
    for slot in _SLOTS:
        if hasattr(_scratch, slot):
            delattr(_scratch, slot)
    with _kept_lock:
        _spare.extend(given)


def _kept_bytes(slot: str, nbytes: int) -> np.ndarray:
    """``nbytes`` uninitialised bytes of this thread's buffer ``slot``, grown when too small and
    kept for the next call up to MAX_KEPT_SCRATCH_BYTES, while the kept total stays in the budget."""
    buffer = getattr(_scratch, slot, None)
    if buffer is not None and buffer.nbytes >= nbytes:
        return buffer[:nbytes]
    if buffer is not None:
        delattr(_scratch, slot)
        del buffer  # counted until freed: an array over it may still be in use
    if nbytes > MAX_KEPT_SCRATCH_BYTES:
        return np.empty(nbytes, dtype=np.uint8)
    buffer = _take_spare(nbytes) if _spare else None
    if buffer is None:
        buffer = np.empty(max(nbytes, 1), dtype=np.uint8)
        if not _reserve(buffer.nbytes):
            return buffer[:nbytes]
        weakref.finalize(buffer, _unreserve, buffer.nbytes, _generation)
    setattr(_scratch, slot, buffer)
    return buffer[:nbytes]


def _take_spare(nbytes: int) -> np.ndarray | None:
    """The smallest buffer given back by an ended task that holds ``nbytes``, taken; or None."""
    with _kept_lock:
        fitting = [position for position, spare in enumerate(_spare) if spare.nbytes >= nbytes]
        if not fitting:
            return None
        return _spare.pop(min(fitting, key=lambda position: _spare[position].nbytes))


def _reserve(nbytes: int) -> bool:
    """Count ``nbytes`` more kept, freeing given-back buffers (oldest first) to make room; False
    when they would not fit even so."""
    global _kept
    with _kept_lock:
        while _kept + nbytes > SCRATCH_BUDGET_BYTES and _spare:
            del _spare[0]  # freed now; its finalizer uncounts it
        if _kept + nbytes > SCRATCH_BUDGET_BYTES:
            return False
        _kept += nbytes
        return True


def _unreserve(nbytes: int, generation: int) -> None:
    global _kept
    with _kept_lock:
        if generation == _generation:  # not a buffer of the parent, freed in a forked child
            _kept -= nbytes


#: arrays from this size are allocated in small pages by :func:`fresh_array` (on Linux, unless
#: ``ZARRX_HUGE_PAGES`` is set); smaller ones as NumPy allocates them. Measured warm on the
#: benchmark machine, a read into huge pages was faster up to 512 MiB (64 MiB: 0.09 s against
#: 0.11 s; 256 MiB: 0.13 against 0.22; 512 MiB: 0.19 against 0.36), slower at 1 GiB (0.92 against
#: 0.50): past what the system had of huge pages at hand
MIN_SMALL_PAGE_BYTES = 2**30
#: the kinds of data type whose values are their bytes (not objects, not NumPy's variable-width strings)
_FIXED_KINDS = frozenset("biufcmMSUV")
_madvise: Any = None  # libc's madvise, looked up on first use (False: not to be had)


def values_are_bytes(dtype: np.dtype) -> bool:
    """Whether ``dtype``'s values are their bytes, of one size: what a buffer of bytes (a scratch
    buffer, an output advised page by page) can hold. Not objects, nor NumPy's variable-width strings.

    >>> values_are_bytes(np.dtype("f8")), values_are_bytes(np.dtype([("a", "u1"), ("b", "O")]))
    (True, False)
    """
    return dtype.kind in _FIXED_KINDS and not dtype.hasobject and dtype.itemsize > 0


def copy_values(target: np.ndarray, source: np.ndarray) -> None:
    """``target[...] = source``, for chunks moved between scratch buffers and the output.

    Where both hold values that are their bytes (:func:`values_are_bytes`), of one data type and
    shape, in :data:`MIN_BYTE_ROWS` rows or more contiguous along the last dimension, each row is
    copied as one item of its bytes: NumPy's strided copy then runs its inner loop over the rows,
    instead of one outer step per row. Measured, 400 chunks of 32**3 into a 256 x 512 x 512
    output: 14 us a chunk instead of 21 for 2-byte values, 26 instead of 35 for 8-byte ones.

    >>> out = np.zeros((4, 6), "u2"); copy_values(out[1:3, 2:5], np.arange(6, dtype="u2").reshape(2, 3))
    >>> out[1:3].tolist()
    [[0, 0, 0, 1, 2, 0], [0, 0, 3, 4, 5, 0]]
    """
    itemsize = target.itemsize
    if (many_rows(source) and target.strides[-1] == itemsize == source.strides[-1] and target.dtype == source.dtype
            and target.shape == source.shape and values_are_bytes(target.dtype)):  # fmt: skip
        length = target.shape[-1] * itemsize
        row = _row_types.get(length)
        if row is None:  # (not ``or``: a data type without fields is false)
            row = _row_types.setdefault(length, np.dtype((np.void, length)))
        target, source = target.view(row), source.view(row)
    target[...] = source


def many_rows(values: np.ndarray) -> bool:
    """Whether ``values`` has :data:`MIN_BYTE_ROWS` rows or more (see :func:`copy_values`)."""
    return values.ndim > 1 and values.size >= MIN_BYTE_ROWS * values.shape[-1] > 0


#: :func:`copy_values` copies rows as bytes from this many rows: fewer cost more in the views'
#: making than the copy saves (into a 64 MiB output, 128 rows of 128 bytes: 1.6 us against 1.2;
#: 512 rows of 128 bytes: 4.0 us either way; 1,024 rows of 64 bytes: 6.5 us against 8.3)
MIN_BYTE_ROWS = 1024


#: the data types of rows of each size in bytes, for copy_values
_row_types: dict[int, np.dtype] = {}


def fresh_array(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """An uninitialised array of ``shape`` and ``dtype`` (``np.empty``) for the output of a read;
    from :data:`MIN_SMALL_PAGE_BYTES` (1 GiB) advised to stay in small pages where the system
    has transparent huge pages (Linux).

    NumPy asks for huge pages for every array of 4 MiB or more. Filling a 1 GiB output with them
    on the benchmark machine (a virtual machine, the usual ``madvise`` setting) took 0.1 to 1.8 s
    from one run to the next where small pages took 0.6 s every time, and the memory the
    huge pages took slowed what came next: writing that 1 GiB to files took 1.5-1.8 s after a
    read into huge pages, 0.3-0.9 s after a read into small ones (a cold copy's 2.4-3.0 s became
    1.2-1.9 s). ``ZARRX_HUGE_PAGES=1`` keeps NumPy's way. The array is NumPy's own as ever (it
    owns its memory, ``tracemalloc`` counts it); only the advice on its pages, given before any
    is touched, differs.

    Examples
    --------
    >>> a = fresh_array((8, 2**20), np.dtype("float64"))  # 64 MiB: NumPy's own advice
    >>> a.shape, a.dtype, a.flags.owndata
    ((8, 1048576), dtype('float64'), True)
    """
    array = np.empty(shape, dtype=dtype)
    if array.nbytes >= MIN_SMALL_PAGE_BYTES and values_are_bytes(dtype):
        madvise = _madvise if _madvise is not None else _find_madvise()
        if madvise:
            start = -(-array.ctypes.data // mmap.PAGESIZE) * mmap.PAGESIZE  # NumPy advised from there too
            madvise(start, array.ctypes.data + array.nbytes - start, mmap.MADV_NOHUGEPAGE)  # advice: its result is not needed
    return array


def _find_madvise() -> Any:
    """libc's ``madvise``, where there are transparent huge pages to advise against (else False)."""
    global _madvise
    _madvise = False
    if hasattr(mmap, "MADV_NOHUGEPAGE") and sys.platform.startswith("linux") and not os.environ.get("ZARRX_HUGE_PAGES"):
        try:
            function = ctypes.CDLL(None, use_errno=True).madvise
        except (OSError, AttributeError):
            return False
        function.argtypes, function.restype = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int), ctypes.c_int
        _madvise = function
    return _madvise


def _forget_after_fork() -> None:
    # the parent's other threads, and their buffers, are gone in the child
    global _scratch, _spare, _kept, _kept_lock, _generation
    _scratch, _spare = threading.local(), []
    _kept, _kept_lock, _generation = 0, threading.RLock(), _generation + 1


if hasattr(os, "register_at_fork"):  # not on Windows, which does not fork
    os.register_at_fork(after_in_child=_forget_after_fork)
