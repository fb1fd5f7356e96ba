"""Per-thread library contexts: made once per thread and key, reused by every later call.

A compression library's context (a zstd ``ZSTD_DCtx``, a compressor at one level) costs more
to create and free than a tiny chunk costs to decode: numcodecs makes a new one on every call.
:class:`ThreadContexts` keeps one per thread and key instead. Contexts are not thread safe,
so a thread only ever sees its own; none outlives a fork: the child process starts with
none (a context may hold library threads or locks that do not survive ``fork``), and makes
its own on first use, as dask's process pools need. One fork handler, registered when this
module is imported, resets every live instance (held weakly: an instance no longer used is
freed with its contexts, and making many adds no handler).

A thread keeps at most ``max_keys`` contexts (say, compressors at that many levels); making
one more drops the others, so memory stays bounded by what a few calls in flight allocate.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["ThreadContexts"]

Context = TypeVar("Context")

#: every live instance, for the fork handler
_instances: "weakref.WeakSet[ThreadContexts]" = weakref.WeakSet()


class ThreadContexts(Generic[Context]):
    """A context per (thread, key), made by ``make(key)`` on first use in that thread.

    Examples
    --------
    >>> import zlib
    >>> contexts = ThreadContexts(lambda level: zlib.compressobj(level))
    >>> contexts.get(1) is contexts.get(1), contexts.get(1) is contexts.get(9)
    (True, False)
    """

    def __init__(self, make: Callable[[Hashable], Context], max_keys: int = 4) -> None:
        self._make = make
        self._max_keys = max_keys
        self._local = threading.local()
        _instances.add(self)

    def get(self, key: Hashable = None) -> Context:
        """This thread's context for ``key``, made now when it has none yet."""
        try:
            return self._local.contexts[key]
        except (AttributeError, KeyError):
            return self._add(key)

    def _add(self, key: Hashable) -> Context:
        contexts = getattr(self._local, "contexts", None)
        if contexts is None or len(contexts) >= self._max_keys:
            contexts = self._local.contexts = {}
        context = contexts[key] = self._make(key)
        return context

    def _forget(self) -> None:
        self._local = threading.local()


def _forget_all_after_fork() -> None:
    for contexts in list(_instances):
        contexts._forget()


if hasattr(os, "register_at_fork"):  # not on Windows, which does not fork
    os.register_at_fork(after_in_child=_forget_all_after_fork)
