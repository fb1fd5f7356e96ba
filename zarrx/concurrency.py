"""The one thread pool zarrx uses inside a call: batched local I/O and chunk decode/encode.

Reading files, NumPy copies and the compressors numcodecs wraps (zstd, blosc,
zlib) release the GIL, so a selection spanning many chunks runs on every core.
Work is handed out in a few groups per worker rather than one future per item
(a future costs ~50 µs of locking, more than decoding a tiny chunk); the
calling thread may take groups too instead of waiting (``caller_works``) -- one calling
thread at a time: calls from many threads at once (each reading its region) leave the others
to the pool, so no more threads than the pool's plus one decode on the cores.
Small batches run inline, and so do calls made from the pool's own threads
(waiting on the pool from inside it could deadlock). The pool is created on
first use and forgotten in a forked child, whose copy has no threads.

Pool tasks decode into :func:`zarrx.scratch.scratch_array`, a buffer each thread keeps; what all threads
keep together is bounded per process (:data:`zarrx.scratch.SCRATCH_BUDGET_BYTES`), and a larger buffer is
freed after use.

``ZARRX_NUM_THREADS`` sets the number of workers (default: the CPU count, at
least 2 so blocking I/O overlaps even on one core, at most 16).

**I/O depth apart from CPU threads.** Those workers decode and encode; a read of a large local
file waits on the device, which serves many requests at once (a disk, NFS, a parallel file
system: the more in flight, the faster, up to the device's depth). Such reads go in ranges to
a second pool of :func:`io_depth` threads (``ZARRX_IO_DEPTH``, default
:data:`DEFAULT_IO_DEPTH`, measured on a cold virtio disk: 1 GiB of 32 MiB files in 1.35 s with
one read in flight, 0.9-1.0 s with 2, 0.6-1.0 s with 16) through :func:`map_io`; they only wait and
copy, so decoding still runs on one thread per core. Inside a scheduler's task (below) a call
keeps at most its task's threads in flight, so the depth never multiplies the scheduler's threads.
Writes may go the same way (:func:`writes_behind`): a pool task encodes an object, hands its write to
the I/O pool and encodes the next, with the bytes waiting for the device bounded however slow it is.

**Inside a scheduler's task** (a dask task: zarrx's task functions say so with
:func:`task_threads`) the scheduler owns the threads: a call there uses at most
``zarrx.threads-per-task`` threads, its own included (dask config, or the environment variable
``DASK_ZARRX__THREADS_PER_TASK``; default 1: the task's own thread only, no pool), and when
it ends its thread gives its scratch buffers back to the process (the next task, on any
thread, takes them warm; idle worker threads hold none). With a larger number the task borrows up to
that many minus one threads of the one pool; no pool is ever made per task or per worker thread.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import itertools
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Iterator, Sequence, TypeVar

from zarrx.errors import UsageError
from zarrx.scratch import (  # re-exported: the buffers pool tasks decode into
    SCRATCH_BUDGET_BYTES, kept_scratch_bytes, release_scratch, scratch_array, scratch_bytes,
)

__all__ = [
    "map_concurrent", "map_runs", "pool_size", "scratch_array", "scratch_bytes", "start_beside", "in_pool",
    "call_threads", "task_threads", "threads_per_task", "kept_scratch_bytes", "release_scratch", "SCRATCH_BUDGET_BYTES",
    "io_depth", "call_io_depth", "map_io", "writes_behind", "start_io", "count_setting",
]  # fmt: skip

T = TypeVar("T")
R = TypeVar("R")

#: the dask config key of the threads a call inside a task may use, and its value when unset
THREADS_PER_TASK_KEY = "zarrx.threads-per-task"
DEFAULT_THREADS_PER_TASK = 1
#: below this many items the hand-off costs more than it saves
MIN_CONCURRENT_ITEMS = 4
GROUPS_PER_WORKER = 4
THREAD_NAME = "zarrx-worker"
IO_THREAD_NAME = "zarrx-io"
#: reads a call keeps in flight by default (``ZARRX_IO_DEPTH``; see the module docstring)
DEFAULT_IO_DEPTH = 16
MAX_IO_DEPTH = 256

_pool: ThreadPoolExecutor | None = None
_io_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()
#: calls of map_concurrent whose calling thread works beside the pool (at most one at a time)
_working_callers = 0
#: how deep this thread is in calls of map_concurrent it works beside the pool in
_working = threading.local()
_callers_lock = threading.Lock()
#: the thread budget of the task running on each thread (``limit``; absent outside a task)
_task = threading.local()


def pool_size() -> int:
    configured = int(os.environ.get("ZARRX_NUM_THREADS", "0") or 0)
    return configured if configured > 0 else min(16, max(2, _cpu_count() or 1))


@functools.cache
def _cpu_count() -> int | None:
    # os.cpu_count() reads /sys on every call; pool_size() is asked on every read and write
    return os.cpu_count()


def io_depth() -> int:
    """The requests a call keeps in flight on a store whose calls block (``ZARRX_IO_DEPTH``;
    default :data:`DEFAULT_IO_DEPTH`; 1 reads one range at a time on the calling thread).

    Examples
    --------
    >>> import os
    >>> os.environ["ZARRX_IO_DEPTH"] = "4"
    >>> io_depth()
    4
    >>> del os.environ["ZARRX_IO_DEPTH"]
    """
    return min(MAX_IO_DEPTH, count_setting("ZARRX_IO_DEPTH", DEFAULT_IO_DEPTH, "requests in flight"))


def count_setting(name: str, default: int, what: str) -> int:
    """The whole number, 1 or more, of environment variable ``name`` (``default`` when unset or
    empty); a :class:`~zarrx.errors.UsageError` naming it and ``what`` it counts otherwise."""
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    if not value.isdigit() or int(value) < 1:
        raise UsageError(f"{name}: expected a whole number of {what}, 1 or more; found {value!r}")
    return int(value)


def call_io_depth() -> int:
    """The requests a call on this thread may keep in flight: :func:`io_depth`, or inside a task
    no more than the task's threads (:func:`task_threads`), so a scheduler's threads are not
    multiplied (with the default of one thread per task, one request at a time)."""
    limit = getattr(_task, "limit", None)
    depth = io_depth()
    return depth if limit is None else min(depth, limit)


def map_io(function: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """``[function(item) for item in items]`` with up to :func:`call_io_depth` of them in flight:
    on the I/O pool, the calling thread taking its share. For work that waits on a device (a
    range of a file) and does no decoding -- at most a copy of what it read, which lets go of the
    GIL: it never takes a thread of the CPU pool, and any thread -- a pool worker decoding the
    chunk it reads among them -- may call it.

    Examples
    --------
    >>> map_io(abs, [-3, 2, -1])
    [3, 2, 1]
    """
    items = items if isinstance(items, (list, tuple)) else list(items)
    depth = min(call_io_depth(), len(items))
    if depth <= 1 or threading.current_thread().name.startswith(IO_THREAD_NAME):
        return [function(item) for item in items]
    results: list[Any] = [None] * len(items)
    positions = iter(range(len(items)))  # next() on it is atomic: each item is taken once
    failed = threading.Event()

    def drain() -> None:
        try:
            for position in positions:
                if failed.is_set():
                    return
                results[position] = function(items[position])
        except BaseException:
            failed.set()
            raise

    _drain_together(_get_io_pool(), drain, depth - 1, caller_works=True)
    return results


@contextlib.contextmanager
def writes_behind(held_bytes: int, depth: int) -> Iterator[Callable[[Callable[[], None], int], None]]:
    """A ``with`` block giving ``write(call, nbytes)`` (any thread): ``call()`` runs on the I/O pool,
    up to ``depth`` (and :func:`call_io_depth`) in flight; ``write`` waits while those not done hold more
    than ``held_bytes`` (one goes alone). The block's end waits for all, then raises the first
    error (calls not yet started are dropped). At a depth of 1 or on an I/O thread, calls run at once.

    Examples
    --------
    >>> done = []
    >>> with writes_behind(held_bytes=64, depth=4) as write:
    ...     _ = [write(lambda number=number: done.append(number), 16) for number in range(8)]
    >>> sorted(done)
    [0, 1, 2, 3, 4, 5, 6, 7]
    """
    depth = min(depth, call_io_depth())
    if depth <= 1 or threading.current_thread().name.startswith(IO_THREAD_NAME):
        yield lambda call, nbytes: call()
        return
    room, held, drains = threading.Condition(), [0], 0
    pending: collections.deque[tuple[Callable[[], None], int]] = collections.deque()
    errors: list[BaseException] = []
    running: list[Future[None]] = []

    def drain() -> None:  # an I/O thread runs the calls handed over until none is left
        nonlocal drains
        while True:
            with room:
                if not pending:
                    drains -= 1
                    return
                call, nbytes = pending.popleft()
            try:
                if not errors:
                    call()
            except BaseException as error:  # noqa: BLE001 -- raised by the block's end
                errors.append(error)
            finally:
                with room:
                    held[0] -= nbytes
                    room.notify_all()

    def write(call: Callable[[], None], nbytes: int) -> None:
        nonlocal drains
        with room:
            room.wait_for(lambda: errors or not held[0] or held[0] + nbytes <= held_bytes)
            if errors:
                raise errors[0]
            held[0] += nbytes
            pending.append((call, nbytes))
            drains += (start := drains < depth)
        if start:
            running.append(_get_io_pool().submit(drain))

    try:
        yield write
    finally:
        [future.result() for future in running]  # fmt: skip
    if errors:
        raise errors[0]


def start_io(function: Callable[..., R], *args: Any) -> "Future[R]":
    """Run ``function(*args)`` on an I/O pool thread while the caller goes on: a read ahead of the
    threads that will decode it (only where :func:`call_io_depth` is 2 or more; the caller waits
    for, or cancels, what it started before closing what the read uses).

    Examples
    --------
    >>> start_io(abs, -3).result()
    3
    """
    return _get_io_pool().submit(function, *args)


def _drain_together(pool: ThreadPoolExecutor, drain: Callable[[], None], helpers: int, *, caller_works: bool) -> None:
    """Run ``drain`` on ``helpers`` threads of ``pool`` (and on the calling thread when
    ``caller_works``) until each returns; then raise the first error any of them raised."""
    running = [pool.submit(drain) for _ in range(helpers)]
    errors: list[BaseException] = []
    try:
        if caller_works:
            drain()
    except BaseException as error:  # noqa: BLE001 -- raised once the helpers have stopped
        errors.append(error)
    for helper in running:
        try:
            helper.result()
        except BaseException as error:  # noqa: BLE001
            errors.append(error)
    if errors:
        raise errors[0]


def _get_io_pool() -> ThreadPoolExecutor:
    global _io_pool
    if _io_pool is None:
        with _pool_lock:
            if _io_pool is None:
                _io_pool = ThreadPoolExecutor(max_workers=io_depth(), thread_name_prefix=IO_THREAD_NAME)
    return _io_pool


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
    global _pool, _io_pool, _pool_lock
    global _working_callers, _callers_lock, _working
    _pool = _io_pool = None
    _pool_lock, _working_callers, _callers_lock, _working = threading.Lock(), 0, threading.Lock(), threading.local()


if hasattr(os, "register_at_fork"):  # not on Windows, which does not fork
    os.register_at_fork(after_in_child=_forget_pool_after_fork)


def map_concurrent(function: Callable[[T], R], items: Sequence[T], *, caller_works: bool = False,
                   in_order: bool = False) -> list[R]:  # fmt: skip
    """``[function(item) for item in items]``, on the pool when the batch is big enough.

    The items go in groups to the pool threads, each taking the next group as it finishes one.
    With ``caller_works`` the calling thread takes groups too, beside ``pool_size() - 1`` pool
    threads, instead of waiting: the same thread budget without the hand-off to an idle pool
    thread. (Callers leave it off when their work spawns threads of its own on the main
    thread, as c-blosc does under numcodecs; and while another call's thread works beside the
    pool, so calls from many threads at once do not run more threads than the pool's plus one
    on the cores.) The first error stops the others from taking new
    groups and is raised. At most :func:`call_threads` threads work on the batch. ``in_order``:
    one item per group, so the items are taken one by one in their order (items whose inputs are
    read ahead in that order).
    """
    items = items if isinstance(items, (list, tuple)) else list(items)
    workers = call_threads()
    if len(items) < MIN_CONCURRENT_ITEMS or workers == 1:
        return [function(item) for item in items]
    count = len(items)
    group_size = 1 if in_order else -(-count // (workers * GROUPS_PER_WORKER))
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

    if caller_works and not _start_working_caller():
        caller_works = False  # another call already works beside the pool: leave the cores to it
    try:
        _drain_together(_get_pool(), drain, min(workers - 1 if caller_works else workers, groups), caller_works=caller_works)
    finally:
        if caller_works:
            _stop_working_caller()
    return results


def _start_working_caller() -> bool:
    """Whether a caller of :func:`map_concurrent` may work beside the pool: no other thread's call
    does (this thread's own, around a nested call, does not count). Calls from several threads at
    once (each reading a region) would otherwise run a thread per caller beside the pool's, more
    threads than cores contending for them."""
    global _working_callers
    if getattr(_working, "depth", 0):  # a call nested in this thread's working call
        _working.depth += 1
        return True
    with _callers_lock:
        if _working_callers:
            return False
        _working_callers += 1
    _working.depth = 1
    return True


def _stop_working_caller() -> None:
    global _working_callers
    _working.depth -= 1
    if not _working.depth:
        with _callers_lock:
            _working_callers -= 1


def map_runs(function: Callable[[Sequence[T]], R], items: Sequence[T], *, caller_works: bool = False) -> list[R]:
    """``function`` over consecutive runs of ``items``, a few per worker (GROUPS_PER_WORKER), on
    the pool as :func:`map_concurrent`: for work that sets something up once per run (a store's
    batch reader, a scratch buffer) rather than once per item."""
    workers = call_threads()
    size = len(items) if workers == 1 else max(1, -(-len(items) // (workers * GROUPS_PER_WORKER)))
    runs = [items[start : start + size] for start in range(0, len(items), size)]
    return map_concurrent(function, runs, caller_works=caller_works)


def in_pool() -> bool:
    """Whether the calling thread is one of the pools' (work handed to the pool from it runs inline:
    a write on the I/O pool never waits for pool threads, which may wait for it in ``writes_behind``)."""
    return threading.current_thread().name.startswith((THREAD_NAME, IO_THREAD_NAME))


def call_threads() -> int:
    """The threads a zarrx call on this thread may use, itself included: 1 on a pool thread,
    at most the task's number inside :func:`task_threads`, else :func:`pool_size`."""
    if in_pool():
        return 1
    limit = getattr(_task, "limit", None)
    workers = pool_size()
    return workers if limit is None else min(workers, limit)


@contextlib.contextmanager
def task_threads(limit: int | None = None) -> Iterator[int]:
    """Inside the block this thread runs a task of a scheduler that owns the threads (a dask task).

    Every zarrx call the block makes on this thread uses at most ``limit`` threads, its own
    included (by default :func:`threads_per_task`; 1 runs it all on this thread, the pool is not
    used), and at the end of the outermost block the thread gives its scratch buffers back to
    the process (:func:`zarrx.scratch.release_scratch`). A nested block may lower the limit, never raise it. Yields the limit in force.

    Examples
    --------
    >>> with task_threads(1) as limit:
    ...     limit, call_threads(), map_concurrent(abs, range(-8, 0)) == list(range(8, 0, -1))
    (1, 1, True)
    >>> kept_scratch_bytes() >= 0 and getattr(_task, "limit", None) is None
    True
    """
    if limit is None:
        limit = threads_per_task()
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise UsageError(f"{THREADS_PER_TASK_KEY}: expected a whole number of threads, 1 or more; found {limit!r}")
    outer = getattr(_task, "limit", None)
    _task.limit = limit if outer is None else min(outer, limit)
    try:
        yield _task.limit
    finally:
        _task.limit = outer
        if outer is None:
            release_scratch()


def threads_per_task() -> int:
    """The threads a zarrx call inside a dask task may use (dask config ``zarrx.threads-per-task``,
    or the environment variable ``DASK_ZARRX__THREADS_PER_TASK`` as dask reads it; default 1).

    Examples
    --------
    >>> import dask
    >>> with dask.config.set({"zarrx.threads-per-task": 2}):
    ...     threads_per_task()
    2
    """
    try:
        import dask.config
    except ImportError:  # called only from dask's tasks, but dask is optional to zarrx
        return DEFAULT_THREADS_PER_TASK
    value = dask.config.get(THREADS_PER_TASK_KEY, None)
    if value is None:
        return DEFAULT_THREADS_PER_TASK
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(f"{THREADS_PER_TASK_KEY}: expected a whole number of threads, 1 or more; found {value!r}")
    return value


def start_beside(function: Callable[[], R]) -> "Future[R]":
    """Run ``function`` on a pool thread while the caller goes on (a producer feeding the caller);
    only when :func:`call_threads` is 2 or more (never from a pool thread: it could wait for
    itself; never in a task given one thread)."""
    return _get_pool().submit(function)
