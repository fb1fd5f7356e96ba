"""The one thread pool zarrx uses inside a call: batched local I/O and chunk decode/encode.

Reading files, NumPy copies and the compressors numcodecs wraps (zstd, blosc,
zlib) release the GIL, so a selection spanning many chunks runs on every core.
Work is handed out in a few groups per worker rather than one future per item
(a future costs ~50 µs of locking, more than decoding a tiny chunk); the
calling thread may take groups too instead of waiting (``caller_works``).
Small batches run inline, and so do calls made from the pool's own threads
(waiting on the pool from inside it could deadlock). The pool is created on
first use and forgotten in a forked child, whose copy has no threads.

Pool tasks decode into :func:`scratch_array`, a buffer each thread keeps.

``ZARRX_NUM_THREADS`` sets the number of workers (default: the CPU count, at
least 2 so blocking I/O overlaps even on one core, at most 16).
"""

from __future__ import annotations

import functools
import itertools
import math
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Sequence, TypeVar

import numpy as np

__all__ = [
    "map_concurrent", "map_runs", "pool_size", "scratch_array", "scratch_bytes", "start_beside", "in_pool",
]  # fmt: skip

T = TypeVar("T")
R = TypeVar("R")

#: per-thread scratch buffers, reused across calls so steady reads and writes touch warm memory
_scratch = threading.local()
#: scratch buffers up to this size stay with their thread between calls
MAX_KEPT_SCRATCH_BYTES = 16 * 2**20
#: below this many items the hand-off costs more than it saves
MIN_CONCURRENT_ITEMS = 4
GROUPS_PER_WORKER = 4
THREAD_NAME = "zarrx-worker"

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def pool_size() -> int:
    configured = int(os.environ.get("ZARRX_NUM_THREADS", "0") or 0)
    return configured if configured > 0 else min(16, max(2, _cpu_count() or 1))


@functools.cache
def _cpu_count() -> int | None:
    # os.cpu_count() reads /sys on every call; pool_size() is asked on every read and write
    return os.cpu_count()


def _get_pool() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        with _pool_lock:
            if _pool is None:
                _pool = ThreadPoolExecutor(max_workers=pool_size(), thread_name_prefix=THREAD_NAME)
    return _pool


def _forget_pool_after_fork() -> None:
    # The child inherits the pool object but none of its threads; tasks queued on
    # it would wait forever. The lock may have been held at the fork, too.
    global _pool, _pool_lock
    _pool = None
    _pool_lock = threading.Lock()


if hasattr(os, "register_at_fork"):  # not on Windows, which does not fork
    os.register_at_fork(after_in_child=_forget_pool_after_fork)


def map_concurrent(function: Callable[[T], R], items: Sequence[T], *, caller_works: bool = False) -> list[R]:
    """``[function(item) for item in items]``, on the pool when the batch is big enough.

    The items go in groups to the pool threads, each taking the next group as it finishes one.
    With ``caller_works`` the calling thread takes groups too, beside ``pool_size() - 1`` pool
    threads, instead of waiting: the same thread budget without the hand-off to an idle pool
    thread. (Callers leave it off when their work spawns threads of its own on the main
    thread, as c-blosc does under numcodecs.) The first error stops the others from taking new
    groups and is raised.
    """
    items = items if isinstance(items, (list, tuple)) else list(items)
    workers = pool_size()
    if len(items) < MIN_CONCURRENT_ITEMS or workers == 1 or in_pool():
        return [function(item) for item in items]
    count = len(items)
    group_size = -(-count // (workers * GROUPS_PER_WORKER))
    groups = -(-count // group_size)
    results: list[Any] = [None] * count
    next_group = itertools.count()  # next() on it is atomic: each group is taken once
    failed = threading.Event()

    def drain() -> None:
        try:
            while not failed.is_set():
                group = next(next_group)
                if group >= groups:
                    return
                for position in range(group * group_size, min(count, (group + 1) * group_size)):
                    results[position] = function(items[position])
        except BaseException:
            failed.set()
            raise

    pool = _get_pool()
    helpers = [pool.submit(drain) for _ in range(min(workers - 1 if caller_works else workers, groups))]
    errors: list[BaseException] = []
    try:
        if caller_works:
            drain()
    except BaseException as error:  # noqa: BLE001 -- raised once the helpers have stopped
        errors.append(error)
    for helper in helpers:
        try:
            helper.result()
        except BaseException as error:  # noqa: BLE001
            errors.append(error)
    if errors:
        raise errors[0]
    return results


def map_runs(function: Callable[[Sequence[T]], R], items: Sequence[T], *, caller_works: bool = False) -> list[R]:
    """``function`` over consecutive runs of ``items``, a few per worker (GROUPS_PER_WORKER), on
    the pool as :func:`map_concurrent`: for work that sets something up once per run (a store's
    batch reader, a scratch buffer) rather than once per item."""
    size = max(1, -(-len(items) // (pool_size() * GROUPS_PER_WORKER)))
    runs = [items[start : start + size] for start in range(0, len(items), size)]
    return map_concurrent(function, runs, caller_works=caller_works)


def in_pool() -> bool:
    """Whether the calling thread is one of the pool's (work handed to the pool from it runs inline)."""
    return threading.current_thread().name.startswith(THREAD_NAME)


def start_beside(function: Callable[[], R]) -> "Future[R]":
    """Run ``function`` on a pool thread while the caller goes on (a producer feeding the caller);
    never call it from a pool thread (see :func:`in_pool`): it could wait for itself."""
    return _get_pool().submit(function)


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


def _kept_bytes(slot: str, nbytes: int) -> np.ndarray:
    """``nbytes`` uninitialised bytes of this thread's buffer ``slot``, grown when too small and
    kept for the next call up to MAX_KEPT_SCRATCH_BYTES."""
    buffer = getattr(_scratch, slot, None)
    if buffer is None or buffer.nbytes < nbytes:
        buffer = np.empty(max(nbytes, 1), dtype=np.uint8)
        if nbytes <= MAX_KEPT_SCRATCH_BYTES:
            setattr(_scratch, slot, buffer)
    return buffer[:nbytes]
