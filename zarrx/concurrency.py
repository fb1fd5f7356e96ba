"""The one thread pool zarrx uses inside a call: batched local I/O and chunk decode/encode.

Reading files, NumPy copies and the compressors numcodecs wraps (zstd, blosc,
zlib) release the GIL, so a selection spanning many chunks runs on every core.
Work is handed to the pool in a few groups per worker rather than one future
per item: a future costs ~50 µs of locking, more than decoding a tiny chunk.
Small batches run inline, and so do calls made from the pool's own threads
(waiting on the pool from inside it could deadlock). The pool is created on
first use and forgotten in a forked child, whose copy has no threads.

``ZARRX_NUM_THREADS`` sets the number of workers (default: the CPU count, at
least 2 so blocking I/O overlaps even on one core, at most 16).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence, TypeVar

__all__ = ["map_concurrent", "pool_size"]

T = TypeVar("T")
R = TypeVar("R")

#: below this many items the hand-off costs more than it saves
MIN_CONCURRENT_ITEMS = 4
GROUPS_PER_WORKER = 4
THREAD_NAME = "zarrx-worker"

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def pool_size() -> int:
    configured = int(os.environ.get("ZARRX_NUM_THREADS", "0") or 0)
    return configured if configured > 0 else min(16, max(2, os.cpu_count() or 1))


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


def _apply_each(function: Callable[[T], R], items: Sequence[T]) -> list[R]:
    return [function(item) for item in items]


def map_concurrent(function: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """``[function(item) for item in items]``, on the pool when the batch is big enough."""
    items = items if isinstance(items, (list, tuple)) else list(items)
    workers = pool_size()
    if len(items) < MIN_CONCURRENT_ITEMS or workers == 1 or threading.current_thread().name.startswith(THREAD_NAME):
        return [function(item) for item in items]
    group_size = -(-len(items) // (workers * GROUPS_PER_WORKER))
    groups = [items[start : start + group_size] for start in range(0, len(items), group_size)]
    results: list[R] = []
    for group_results in _get_pool().map(_apply_each, [function] * len(groups), groups):
        results.extend(group_results)
    return results
