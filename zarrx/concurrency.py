"""The thread pool that decodes and encodes chunks of one selection in parallel.

NumPy copies and the compressors numcodecs wraps (zstd, blosc, zlib) release
the GIL, so a selection spanning many chunks decodes on every core. The pool is
created lazily, sized to the machine, and replaced after ``fork`` (a forked
child must not use its parent's worker threads). Small batches run inline:
thread hand-off costs more than decoding a few small chunks.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, TypeVar

__all__ = ["map_concurrent", "pool_size"]

T = TypeVar("T")
R = TypeVar("R")

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_pool_pid: int | None = None


def pool_size() -> int:
    return max(1, int(os.environ.get("ZARRX_NUM_THREADS", 0)) or os.cpu_count() or 1)


def _get_pool() -> ThreadPoolExecutor:
    global _pool, _pool_pid
    with _lock:
        if _pool is None or _pool_pid != os.getpid():
            _pool = ThreadPoolExecutor(max_workers=pool_size(), thread_name_prefix="zarrx")
            _pool_pid = os.getpid()
        return _pool


def map_concurrent(function: Callable[[T], R], items: Iterable[T], *, min_items: int = 2) -> list[R]:
    """``[function(item) for item in items]``, on the pool when there is enough work.

    Runs inline when there are fewer than ``min_items`` items, one thread, or when
    called from one of the pool's own threads (no nested waits, no deadlock).
    """
    items = list(items)
    if len(items) < min_items or pool_size() == 1 or threading.current_thread().name.startswith("zarrx"):
        return [function(item) for item in items]
    return list(_get_pool().map(function, items))
