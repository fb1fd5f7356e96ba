"""A store wrapper that fails on purpose, for testing what a pipeline does when storage fails.

:class:`FaultyStore` wraps any :class:`~zarrx.storage.store.Store` and makes chosen
operations fail with :class:`~zarrx.errors.StoreError` naming the key, the way a
flaky disk, a throttled object store or a dropped connection would. Everything
else is passed to the wrapped store unchanged, so what was written before the
fault is really there and what the fault stopped is really not.

Which operations fail is a *fault rule*, given per kind of operation:

* ``fail_get``: reads (``get``, every key of ``get_many``, every range of
  ``get_ranges``, ``exists``);
* ``fail_set``: writes of one key (``set``, every key of ``set_many``);
* ``fail_delete``: deletions of one key (``delete``, every key of
  ``delete_many`` and ``delete_prefix``);
* ``fail_in_batch``: whole batch writes (``set_many``, ``delete_many``): the
  batch fails *in the middle* -- its first half is written (deleted), then the
  first key of the second half fails. A ``batch_writer`` block is a batch too,
  of keys not known in advance: a failing one fails at its first write.

A rule is ``None`` (never fail), an ``int`` ``k`` (the k-th operation of that
kind fails, counting from 1), a collection of ints (each of those), or a
callable ``rule(key) -> bool`` (fail when it returns true; it is called once
per operation, so it may keep state, such as :class:`FailOnce`). Operations
are counted per key, across threads, in the order they reach the wrapper.

A fault raised for a batch read or write stops the batch there: for a write,
the keys before it in the batch were written, the rest were not (as when a
connection drops half-way through a batch). A failed write never leaves a torn
value: like every store write, a key is written whole or not at all.

:attr:`FaultyStore.injected` lists ``(operation, key)`` for every fault raised,
and :attr:`FaultyStore.counts` the operations seen, so a test can check that
its fault really happened.

Examples
--------
>>> from zarrx.storage import MemoryStore
>>> store = FaultyStore(MemoryStore(), fail_set=2)
>>> store.set("a", b"1")
>>> store.set("b", b"2")
Traceback (most recent call last):
...
zarrx.errors.StoreError: injected fault: could not write 'b' (write 2 of FaultyStore(MemoryStore(...)))
>>> store.get("b") is None, store.injected
(True, [('set', 'b')])
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any, Union

from zarrx.errors import StoreError, UsageError
from zarrx.storage.store import ByteRequest, Store, WrapperStore, bounded_get_many, bounded_get_ranges

__all__ = ["FaultyStore", "FailOnce", "FaultRule"]

#: when an operation fails: never, the k-th, any of several, or when ``rule(key)`` is true
FaultRule = Union[None, int, Collection[int], Callable[[str], bool]]

#: what each kind of operation is called in messages
_ACTIONS = {"get": "read", "set": "write", "delete": "delete", "batch": "batch"}


class FailOnce:
    """A fault rule that fails the first operation on each key it matches, and never again.

    ``FailOnce()`` matches every key; ``FailOnce(lambda key: "/c/" in key)`` only chunk keys.
    A retried operation then succeeds, as after a transient network error.

    Examples
    --------
    >>> rule = FailOnce(lambda key: key.startswith("c/"))
    >>> [rule("c/0"), rule("c/0"), rule("zarr.json"), rule("c/1")]
    [True, False, False, True]
    """

    def __init__(self, matches: Callable[[str], bool] | None = None) -> None:
        self.matches = matches
        self.failed: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, key: str) -> bool:
        if self.matches is not None and not self.matches(key):
            return False
        with self._lock:
            if key in self.failed:
                return False
            self.failed.add(key)
            return True

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"FailOnce({self.matches!r})" if self.matches is not None else "FailOnce()"


def _parse_rule(rule: FaultRule, name: str) -> Callable[[str, int], bool] | None:
    """``rule`` as ``test(key, count)``, where ``count`` numbers the operations of its kind from 1."""
    if rule is None:
        return None
    if callable(rule):
        return lambda key, count: bool(rule(key))
    if isinstance(rule, bool):
        raise UsageError(f"{name}: expected an int, ints or a callable, found {rule!r}")
    if isinstance(rule, int):
        numbers = frozenset([rule])
    elif isinstance(rule, Collection) and all(isinstance(n, int) and not isinstance(n, bool) for n in rule):
        numbers = frozenset(rule)
    else:
        raise UsageError(f"{name}: expected an int, ints or a callable, found {rule!r}")
    if any(number < 1 for number in numbers):
        raise UsageError(f"{name}: operations are counted from 1, found {sorted(numbers)}")
    return lambda key, count: count in numbers


class FaultyStore(WrapperStore):
    """Wrap ``inner`` and fail the operations the fault rules pick (see the module docstring).

    Parameters
    ----------
    inner
        The store that really holds the data.
    fail_get, fail_set, fail_delete
        Fault rules for single-key reads, writes and deletions.
    fail_in_batch
        Fault rule for batch writes (``set_many``, ``delete_many``), counted per batch and
        called with the batch's first key: the first half of the batch is done, then the batch
        fails naming the first key of the second half.
    exception
        What to raise: an exception class or a callable taking the message (default
        :class:`~zarrx.errors.StoreError`, what real stores raise).

    Examples
    --------
    Fail the third chunk write of ``arr[...] = ...``; chunks not written keep their old values:

    >>> import zarrx, numpy as np
    >>> from zarrx.storage import MemoryStore
    >>> store = FaultyStore(MemoryStore())
    >>> arr = zarrx.create_array(store, shape=(8,), chunks=(2,), dtype="int8", fill_value=0)
    >>> store.fail_set = lambda key: key == "c/2"
    >>> arr[...] = 1
    Traceback (most recent call last):
    ...
    zarrx.errors.StoreError: injected fault: could not write 'c/2' (write 4 of FaultyStore(...))
    >>> arr[...]
    array([1, 1, 1, 1, 0, 0, 0, 0], dtype=int8)
    """

    def __init__(
        self,
        inner: Store,
        *,
        fail_get: FaultRule = None,
        fail_set: FaultRule = None,
        fail_delete: FaultRule = None,
        fail_in_batch: FaultRule = None,
        exception: type[BaseException] | Callable[[str], BaseException] = StoreError,
    ) -> None:
        super().__init__(inner)
        self.exception = exception
        self.fail_get = fail_get
        self.fail_set = fail_set
        self.fail_delete = fail_delete
        self.fail_in_batch = fail_in_batch
        #: operations seen so far, by kind ("get", "set", "delete", "batch")
        self.counts: dict[str, int] = {kind: 0 for kind in _ACTIONS}
        #: ``(kind, key)`` of every fault raised, in order
        self.injected: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    # The rules may be changed at any time (e.g. after creating the array through the store).
    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("fail_get", "fail_set", "fail_delete", "fail_in_batch"):
            object.__setattr__(self, "_" + name, _parse_rule(value, name))
        object.__setattr__(self, name, value)

    def reset(self) -> None:
        """Forget the operations counted and the faults injected (the rules stay)."""
        with self._lock:
            self.counts = {kind: 0 for kind in _ACTIONS}
            self.injected = []

    # -- the fault check -------------------------------------------------------------------
    def _check(self, kind: str, key: str) -> None:
        """Count one operation of ``kind`` on ``key``; raise when its rule says so."""
        count = self._count(kind, key)
        if count is not None:
            action = _ACTIONS[kind]
            self._raise(kind, key, f"could not {action} {key!r} ({action} {count} of {self!r})")

    def _count(self, kind: str, key: str) -> int | None:
        """Count one operation of ``kind``; its number when the rule picks it, else None."""
        test = getattr(self, "_fail_" + ("in_batch" if kind == "batch" else kind))
        with self._lock:
            self.counts[kind] += 1
            count = self.counts[kind]
        return count if test is not None and test(key, count) else None

    def _raise(self, kind: str, key: str, what: str) -> None:
        with self._lock:
            self.injected.append((kind, key))
        raise self.exception(f"injected fault: {what}")

    # -- reading -----------------------------------------------------------------------------
    def get(self, key: str, byte_range: ByteRequest | None = None) -> bytes | None:
        self._check("get", key)
        return self.inner.get(key, byte_range)

    def get_many(self, keys: Sequence[str], *, max_size: int | None = None) -> dict[str, bytes | None]:
        keys = list(keys)
        for key in keys:
            self._check("get", key)
        return bounded_get_many(self.inner, keys, max_size)

    def get_ranges(
        self, requests: Sequence[tuple[str, ByteRequest]], *, max_size: int | None = None
    ) -> list[bytes | None]:
        requests = list(requests)
        for key, _ in requests:
            self._check("get", key)
        return bounded_get_ranges(self.inner, requests, max_size)

    def exists(self, key: str) -> bool:
        self._check("get", key)
        return self.inner.exists(key)

    # -- writing -----------------------------------------------------------------------------
    def set(self, key: str, value: bytes) -> None:
        self._check("set", key)
        self.inner.set(key, value)

    @contextlib.contextmanager
    def batch_writer(self) -> Iterator[Callable[[str, bytes], None]]:
        """Writes one by one through :meth:`set` (its faults apply to each); the block is one
        batch for ``fail_in_batch``, which fails at its first write."""
        first = True

        def write(key: str, value: bytes) -> None:
            nonlocal first
            if first:
                first = False
                count = self._count("batch", key)
                if count is not None:
                    self._raise("batch", key, f"could not write {key!r} (the first write of batch {count} of {self!r})")
            self.set(key, value)

        yield write

    def set_many(self, items: Mapping[str, bytes]) -> None:
        items = dict(items)
        self._batch(list(items), "set", lambda keys: self.inner.set_many({key: items[key] for key in keys}))

    def delete(self, key: str) -> None:
        self._check("delete", key)
        self.inner.delete(key)

    def delete_many(self, keys: Iterable[str]) -> None:
        self._batch(list(keys), "delete", self.inner.delete_many)

    def delete_prefix(self, prefix: str) -> None:
        # key by key, so that deletion faults apply to each key under the prefix
        self.delete_many(list(self.inner.list_prefix(prefix)))

    def _batch(self, keys: list[str], kind: str, apply: Callable[[list[str]], None]) -> None:
        """Apply a batch write to ``keys``, up to the first injected fault."""
        if not keys:
            return
        count = self._count("batch", keys[0])
        if count is not None:
            middle = len(keys) // 2
            if middle:
                apply(keys[:middle])
            action = _ACTIONS[kind]
            self._raise(
                "batch", keys[middle],
                f"could not {action} {keys[middle]!r} (key {middle + 1} of {len(keys)} in batch {count} of {self!r})",
            )  # fmt: skip
        for position, key in enumerate(keys):
            try:
                self._check(kind, key)
            except BaseException:
                if position:
                    apply(keys[:position])
                raise
        apply(keys)

    # -- identity ----------------------------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        # the rules as given (picklable when they are ints or module-level callables), not parsed
        return {name: value for name, value in self.__dict__.items() if name not in _UNPICKLED}

    def __setstate__(self, state: dict[str, Any]) -> None:
        object.__setattr__(self, "_lock", threading.Lock())
        for name, value in state.items():
            setattr(self, name, value)



_UNPICKLED = ("_lock", "_fail_get", "_fail_set", "_fail_delete", "_fail_in_batch")
