"""Waiting at exit for threads that Python did not start: obstore's.

obstore runs its requests on tokio threads, which hand each answer to the event loop
(``loop.call_soon_threadsafe``) and then need the GIL once more. Were the interpreter finalizing
by then, such a thread would be ended mid-call and the process would abort (SIGABRT at exit,
seen after a quick ``zarrx verify s3://...`` on a busy machine). Stores reading through obstore
-- zarrx's own :class:`~zarrx.storage.ObstoreStore`, and zarr-python's ``ObjectStore`` wrapped by
:class:`~zarrx.storage.ZarrPythonStore` -- call :func:`settle_at_exit`, which registers
:func:`settle` with :mod:`atexit` once; nothing of obstore's is changed.
"""

from __future__ import annotations

import atexit
import sys
import threading
import time

__all__ = ["settle", "settle_at_exit", "SETTLE_SECONDS"]

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
