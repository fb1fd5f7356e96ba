"""A store wrapper that fetches a known set of keys in one batch on the first read of any of them.

:class:`PrefetchStore` is what :func:`zarrx.nodes.prefetch.read_together` puts under several small
arrays (xarray's dimension coordinates) so that reading them costs one round trip, not one each.
Nothing is fetched until something is read; other keys go to the wrapped store as usual. The
fetched values stay in memory as long as the store does.
"""

from __future__ import annotations

import threading
from typing import Any, Iterable, Mapping, Sequence

from zarrx.errors import ReadOnlyError
from zarrx.storage.store import ByteRequest, Store, WrapperStore, bounded_get_many, bounded_get_ranges, slice_value

__all__ = ["PrefetchStore"]


class PrefetchStore(WrapperStore):
    """``inner``, but ``keys`` are fetched all at once on the first read of any of them.

    Read-only (writes raise :class:`~zarrx.errors.ReadOnlyError`): the fetched values
    would go stale.

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
        self._keys = frozenset(keys)
        self._values: dict[str, bytes | None] | None = None
        self._lock = threading.Lock()

    def _fetched(self) -> dict[str, bytes | None]:
        if self._values is None:
            with self._lock:
                if self._values is None:
                    self._values = self.inner.get_many(sorted(self._keys))
        return self._values

    def get(self, key: str, byte_range: ByteRequest | None = None) -> bytes | None:
        if key not in self._keys:
            return self.inner.get(key, byte_range)
        value = self._fetched().get(key)
        return None if value is None else slice_value(value, byte_range)

    def get_many(self, keys: Sequence[str], *, max_size: int | None = None) -> dict[str, bytes | None]:
        others = [key for key in keys if key not in self._keys]
        found = bounded_get_many(self.inner, others, max_size) if others else {}
        if len(others) < len(keys):
            values = self._fetched()
            found.update({key: values.get(key) for key in keys if key in self._keys})
        return {key: found[key] for key in keys}

    def get_ranges(
        self, requests: Sequence[tuple[str, ByteRequest]], *, max_size: int | None = None
    ) -> list[bytes | None]:
        others = [(key, byte_range) for key, byte_range in requests if key not in self._keys]
        answers = iter(bounded_get_ranges(self.inner, others, max_size) if others else [])
        values = self._fetched() if len(others) < len(requests) else {}
        results = []
        for key, byte_range in requests:
            if key in self._keys:
                value = values.get(key)
                results.append(None if value is None else slice_value(value, byte_range))
            else:
                results.append(next(answers))
        return results

    def exists(self, key: str) -> bool:
        return self.get(key) is not None if key in self._keys else self.inner.exists(key)

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
        return {"inner": self.inner, "keys": self._keys}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["inner"], state["keys"])

    def __repr__(self) -> str:
        return f"PrefetchStore({self.inner!r}, {len(self._keys)} keys)"
