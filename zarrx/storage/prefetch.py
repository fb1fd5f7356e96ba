"""A store wrapper that fetches a known set of keys in one batch on the first read of any of them.

:class:`PrefetchStore` is what :func:`zarrx.nodes.prefetch.read_together` puts under several small
arrays (xarray's dimension coordinates) so that reading them costs one round trip, not one each.
Nothing is fetched until something is read: the first read fetches the batch in its own thread
and returns once the whole batch is in. :meth:`PrefetchStore.start` sends it from a pool thread
instead, while the caller goes on -- worth it only when the caller's work beside it mostly
releases the GIL (NumPy, I/O): Python work holds it, and the event loop reading the answers of a
remote store needs it after every system call (docs/remote.md). Either way the batch is one
:meth:`~zarrx.storage.Store.iter_many` call, in the order the keys were given, and a reader in
another thread gets each value as soon as it arrives. Other keys go to the wrapped store as
usual. The fetched values stay in memory as long as the store does.
"""

from __future__ import annotations

import threading
from typing import Any, Iterable, Mapping, Sequence

from zarrx.concurrency import call_threads, start_beside
from zarrx.errors import ReadOnlyError
from zarrx.storage.store import ByteRequest, Store, WrapperStore, bounded_get_many, bounded_get_ranges, slice_value

__all__ = ["PrefetchStore"]


class PrefetchStore(WrapperStore):
    """``inner``, but ``keys`` are fetched all at once on the first read of any of them (or on
    :meth:`start`), each read answered as soon as its own value has arrived.

    Read-only (writes raise :class:`~zarrx.errors.ReadOnlyError`): the fetched values
    would go stale. When the batch fails, every read of a key that had not arrived raises
    the batch's error (a store error naming the key that failed).

    Examples
    --------
    >>> from zarrx.storage import MemoryStore, MetricsStore
    >>> inner = MetricsStore(MemoryStore({"a": b"1", "b": b"2", "c": b"3"}))
    >>> store = PrefetchStore(inner, ["a", "b"])
    >>> store.get("a"), store.get("b"), store.get("c")
    (b'1', b'2', b'3')
    >>> inner.summary()["get_many"].requests, inner.summary()["get"].requests
    (2, 1)
    """

    read_only = True

    def __init__(self, inner: Store, keys: Iterable[str]) -> None:
        super().__init__(inner)
        #: the keys in the order they are asked for (the order a caller will read them in)
        self._order = list(dict.fromkeys(keys))
        self._keys = frozenset(self._order)
        self._values: dict[str, bytes | None] = {}
        #: the batch was handed to the pool (:meth:`start`), taken by a thread (the pool's, or
        #: the first reader's)
        self._started = False
        self._claimed = False
        self._done = False
        self._error: BaseException | None = None
        self._arrived = threading.Condition(threading.Lock())

    # -- the batch ----------------------------------------------------------------------------
    def start(self) -> bool:
        """Send the batch now from a pool thread, while the caller goes on; False when it was
        already sent, or when the caller may use no other thread (a pool thread, a dask task
        given one thread): then the first read sends it.

        A read of a key whose value has not arrived waits for it; a read made before the pool
        thread took the batch sends the batch itself (so a busy pool never holds a reader up).
        """
        if call_threads() < 2:
            return False
        with self._arrived:
            if self._claimed or self._started:
                return False
            self._started = True
        start_beside(self.fetch)
        return True

    def fetch(self) -> None:
        """Fetch the batch now in this thread and return once it is in (at once when another
        thread has it in hand: its readers wait for their values as usual). Raises nothing: a
        read of a key that did not arrive raises the batch's error."""
        if self._claim():
            self._fetch()

    def _claim(self) -> bool:
        with self._arrived:
            claimed, self._claimed = self._claimed, True
        return not claimed

    def _fetch(self) -> None:
        values, arrived = self._values, self._arrived
        try:
            for key, value in self.inner.iter_many(self._order):
                with arrived:
                    values[key] = value
                    arrived.notify_all()
        except BaseException as error:  # noqa: BLE001 (handed to every reader still waiting)
            self._error = error
        finally:
            with arrived:
                self._done = True
                arrived.notify_all()

    def _value(self, key: str) -> bytes | None:
        """``key``'s fetched value (one of the prefetched keys), once it has arrived."""
        values = self._values
        if key in values:
            return values[key]
        self.fetch()
        with self._arrived:
            while key not in values and not self._done:
                self._arrived.wait()
        if key in values:
            return values[key]
        if self._error is not None:
            raise self._error
        return None

    # -- reading -------------------------------------------------------------------------------
    def get(self, key: str, byte_range: ByteRequest | None = None) -> bytes | None:
        if key not in self._keys:
            return self.inner.get(key, byte_range)
        value = self._value(key)
        return None if value is None else slice_value(value, byte_range)

    def get_many(self, keys: Sequence[str], *, max_size: int | None = None) -> dict[str, bytes | None]:
        others = [key for key in keys if key not in self._keys]
        found = bounded_get_many(self.inner, others, max_size) if others else {}
        found.update({key: self._value(key) for key in keys if key in self._keys})
        return {key: found[key] for key in keys}

    def get_ranges(
        self, requests: Sequence[tuple[str, ByteRequest]], *, max_size: int | None = None
    ) -> list[bytes | None]:
        others = [(key, byte_range) for key, byte_range in requests if key not in self._keys]
        answers = iter(bounded_get_ranges(self.inner, others, max_size) if others else [])
        results = []
        for key, byte_range in requests:
            if key in self._keys:
                value = self._value(key)
                results.append(None if value is None else slice_value(value, byte_range))
            else:
                results.append(next(answers))
        return results

    def exists(self, key: str) -> bool:
        return self.get(key) is not None if key in self._keys else self.inner.exists(key)

    # -- read-only -----------------------------------------------------------------------------
    def _refuse(self, key: str) -> None:
        raise ReadOnlyError(f"cannot write {key!r}: {self!r} serves prefetched values and is read-only")

    def set(self, key: str, value: bytes) -> None:
        self._refuse(key)

    def set_many(self, items: Mapping[str, bytes]) -> None:
        self._refuse(next(iter(items), ""))

    def delete(self, key: str) -> None:
        self._refuse(key)

    def delete_many(self, keys: Iterable[str]) -> None:
        self._refuse(next(iter(keys), ""))

    def delete_prefix(self, prefix: str) -> None:
        self._refuse(prefix)

    def __getstate__(self) -> dict[str, Any]:
        # a pickled copy (a dask worker) fetches for itself
        return {"inner": self.inner, "keys": self._order}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["inner"], state["keys"])

    def __repr__(self) -> str:
        return f"PrefetchStore({self.inner!r}, {len(self._keys)} keys)"
