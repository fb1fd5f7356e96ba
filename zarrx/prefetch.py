"""Reading several small arrays in one round trip: :func:`read_together`.

Opening a dataset, xarray reads every dimension coordinate (``time``, ``lat``,
``lon``, ...) to build its indexes, one after another: on an object store each is a
round trip of its own. ``read_together(arrays)`` returns the same arrays over a shared
:class:`PrefetchStore` that knows every chunk (or shard) key of all of them: the first
read of any of those keys fetches all of them in one batch, and later reads are
answered from it. Nothing is fetched until something is read, so arrays that are never
read cost nothing. Other keys go to the underlying store as usual.

The fetched values stay in memory as long as the returned arrays do; use it for what
is read whole and is small (coordinates), not for data variables.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Iterable, Iterator, Mapping, Sequence

from zarrx.storage.memory import slice_value
from zarrx.storage.store import ByteRequest, Store

if TYPE_CHECKING:
    from zarrx.array import Array

__all__ = ["PrefetchStore", "read_together"]

#: more bytes than this (decoded) in the arrays, and read_together leaves them alone
MAX_PREFETCH_BYTES = 64 * 2**20


class PrefetchStore(Store):
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
        self.inner = inner
        self._keys = frozenset(keys)
        self._values: dict[str, bytes | None] | None = None
        self._lock = threading.Lock()

    @property
    def process_local(self) -> bool:
        return getattr(self.inner, "process_local", False)

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

    def get_many(self, keys: Sequence[str]) -> dict[str, bytes | None]:
        others = [key for key in keys if key not in self._keys]
        found = self.inner.get_many(others) if others else {}
        if len(others) < len(keys):
            values = self._fetched()
            found.update({key: values.get(key) for key in keys if key in self._keys})
        return {key: found[key] for key in keys}

    def get_ranges(self, requests: Sequence[tuple[str, ByteRequest]]) -> list[bytes | None]:
        others = [(key, byte_range) for key, byte_range in requests if key not in self._keys]
        answers = iter(self.inner.get_ranges(others) if others else [])
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
        from zarrx.errors import ReadOnlyError

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

    def list_prefix(self, prefix: str) -> Iterator[str]:
        return self.inner.list_prefix(prefix)

    def list_dir(self, prefix: str) -> list[str]:
        return self.inner.list_dir(prefix)

    def __getstate__(self) -> dict:
        # a pickled copy (a dask worker) fetches for itself
        return {"inner": self.inner, "keys": self._keys}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["inner"], state["keys"])

    def __repr__(self) -> str:
        return f"PrefetchStore({self.inner!r}, {len(self._keys)} keys)"


def read_together(arrays: Sequence["Array"]) -> list["Array"]:
    """The same arrays, read-only, whose stored objects all come in one batch on the first read.

    Arrays on different stores get one :class:`PrefetchStore` per store. Arrays larger than
    :data:`MAX_PREFETCH_BYTES` in total, or a lone array, are returned unchanged.

    Examples
    --------
    >>> import zarrx
    >>> root = zarrx.create_group({})
    >>> for name in ("lat", "lon"):
    ...     root.create_array(name, shape=(4,), chunks=(2,), dtype="f4")[:] = 1
    >>> lat, lon = read_together([root["lat"], root["lon"]])
    >>> lat.store
    PrefetchStore(MemoryStore(<7 keys at ...>), 4 keys)
    """
    from zarrx.array import Array
    from zarrx.explain import explain

    by_store: dict[int, list[int]] = {}
    for position, array in enumerate(arrays):
        by_store.setdefault(id(array.store), []).append(position)
    result = list(arrays)
    for positions in by_store.values():
        members = [arrays[p] for p in positions]
        if len(members) < 2 or sum(a.nbytes for a in members) > MAX_PREFETCH_BYTES:
            continue
        # a whole-array read touches every chunk or (whole) shard: no index is read to plan it
        keys = {request.key for array in members for request in explain(array, Ellipsis, read_index=False).requests}
        store = PrefetchStore(members[0].store, keys)
        for position, array in zip(positions, members):
            result[position] = Array(store, array.path, array.metadata, read_only=True)
    return result
