"""Threads that Python did not start (obstore's and Icechunk's tokio runtimes): waiting for them at
exit, and refusing to wait for them forever in a forked process.

obstore runs its requests on tokio threads, which hand each answer to the event loop
(``loop.call_soon_threadsafe``) and then need the GIL once more. Were the interpreter finalizing
by then, such a thread would be ended mid-call and the process would abort (SIGABRT at exit,
seen after a quick ``zarrx verify s3://...`` on a busy machine). Stores reading through obstore
-- zarrx's own :class:`~zarrx.storage.ObstoreStore`, and zarr-python's ``ObjectStore`` wrapped by
:class:`~zarrx.storage.ZarrPythonStore` -- call :func:`settle_at_exit`, which registers
:func:`settle` with :mod:`atexit` once; nothing of obstore's is changed.

**Forks.** ``fork`` copies only the thread that calls it: a process forked after obstore or
Icechunk ran a request has their runtime's state but none of its threads, and every request
there waits forever (both libraries' maintainers say they are not fork-safe; zarr-python hangs
the same way). Stores reading through them call :func:`runtime_used` before their first request
in a process and :func:`check_not_forked` before each batch: in a process forked from one that
had used them, that is a :class:`~zarrx.errors.StoreError` saying what to do instead of a hang.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time

from zarrx.errors import StoreError

__all__ = ["settle", "settle_at_exit", "SETTLE_SECONDS", "runtime_used", "check_not_forked"]

#: the longest the interpreter's exit waits for obstore's threads to leave Python code
SETTLE_SECONDS = 2.0
_settling = threading.Lock()
_settle_registered = False


def _foreign_threads_in_python() -> list[int]:
    """Threads running Python code that the ``threading`` module did not start or adopt: obstore's
    (tokio's) threads handing a result to the event loop."""
    known = {thread.ident for thread in threading.enumerate()}
    return [ident for ident in sys._current_frames() if ident not in known]


def settle() -> None:
    """Wait (up to :data:`SETTLE_SECONDS`) until no foreign thread runs Python code (see the
    module docstring); run at exit, before the interpreter finalizes, once obstore was used."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while _foreign_threads_in_python() and time.monotonic() < deadline:
        time.sleep(0.005)


def settle_at_exit() -> None:
    """Have :func:`settle` run at exit (registered once)."""
    global _settle_registered
    with _settling:
        if not _settle_registered:
            atexit.register(settle)
            _settle_registered = True


#: the process in which zarrx first sent a request through obstore or Icechunk (None: none yet)
_runtime_pid: int | None = None


def runtime_used() -> None:
    """Note that this process sends requests through a tokio runtime (before the first one)."""
    global _runtime_pid
    if _runtime_pid is None:
        _runtime_pid = os.getpid()


def check_not_forked(store: object) -> None:
    """Raise a :class:`~zarrx.errors.StoreError` naming ``store`` in a process forked from one in
    which obstore or Icechunk had run zarrx's requests: there the next request would never end.

    Examples
    --------
    >>> check_not_forked("a store")  # in the process that used the runtime, or before any use
    """
    if _runtime_pid is not None and _runtime_pid != os.getpid():
        raise StoreError(
            f"cannot read or write {store!r} in this process: it was forked from process {_runtime_pid}, "
            "which had sent requests through obstore or Icechunk, and their threads are not copied by "
            "fork, so a request here would wait forever. Start processes with multiprocessing's "
            "'spawn' or 'forkserver' method (multiprocessing.get_context('spawn'); dask's distributed "
            "and processes schedulers do), or fork before the first read; a URL can also be read "
            "through fsspec (storage_options={'zarrx_backend': 'fsspec'})"
        )
