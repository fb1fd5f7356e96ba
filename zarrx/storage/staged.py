"""A store wrapper that holds back writes and sends them in a few concurrent batches: :class:`StagedStore`.

Writing a hierarchy of many small nodes -- a DataTree of forty groups, each a few metadata
documents and coordinate chunks -- costs one round trip per document and chunk when each is
written as it is made, and as many again for the checks that read before each write (does a
node exist here? which consolidated copies hold it?). ``StagedStore(inner)`` keeps every write in
memory and answers reads of those keys itself, so a writer runs unchanged and its checks cost
nothing; :meth:`StagedStore.flush` then sends what it holds in three batches, in the order that
keeps an interrupted write safe (DESIGN.md, "Rules that keep data safe"):

1. data (chunks and shards), so that no metadata shows data that is not there yet;
2. the metadata documents of the nodes (``zarr.json``, ``.zarray``, ``.zgroup``, ``.zattrs``);
3. the documents holding consolidated metadata (a group's ``zarr.json`` with
   ``consolidated_metadata``, v2's ``.zmetadata``) last, so they never list a node whose
   document is missing.

A prefix known to hold nothing in ``inner`` (one that was just deleted through the wrapper, or
one given as ``empty``, which :func:`staged_writes` checks with one listing) is answered from the
staged keys alone: reads there are no requests at all. Other reads go to ``inner``, and the
metadata documents among them are remembered (each node made below an existing group reads its
ancestors' documents: once is enough within one write). Held data is
sent early, in a batch of its own, once it passes :data:`FLUSH_DATA_BYTES`; deletes are passed on
at once (none are needed under an empty prefix). After :meth:`flush` the wrapper passes
everything through, so arrays made through it (and dask tasks writing their data later) write
straight to ``inner``; a pickled copy *is* ``inner``.
"""

from __future__ import annotations

import contextlib
import json
import threading
from typing import Any, Iterable, Iterator, Mapping, Sequence

from zarrx.errors import StoreError
from zarrx.storage.store import ByteRequest, Store, WrapperStore, bounded_get_many, bounded_get_ranges, slice_value

__all__ = ["StagedStore", "staged_writes", "empty_prefixes", "FLUSH_DATA_BYTES", "METADATA_DOCUMENTS"]

#: held data past this many bytes is sent at once (the documents wait for the end)
FLUSH_DATA_BYTES = 64 * 2**20
#: the names of metadata documents (everything else is data)
METADATA_DOCUMENTS = ("zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata")


def _document_name(key: str) -> str:
    return key.rpartition("/")[2]


def _holds_consolidated(key: str, value: bytes) -> bool:
    """Whether the document ``key`` holds consolidated metadata (it goes last)."""
    name = _document_name(key)
    if name == ".zmetadata":
        return True
    if name != "zarr.json" or b"consolidated_metadata" not in value:
        return False
    try:
        document = json.loads(bytes(value))
    except ValueError:
        return False
    return isinstance(document, dict) and document.get("consolidated_metadata") is not None


def _restore(inner: Store) -> Store:
    return inner


class StagedStore(WrapperStore):
    """``inner`` with its writes held back until :meth:`flush` (see the module docstring).

    Parameters
    ----------
    inner
        The store written to.
    empty
        Prefixes (``"a/"``, or ``""`` for the whole store) known to hold nothing in ``inner``.

    Examples
    --------
    >>> from zarrx.storage import MemoryStore, MetricsStore
    >>> inner = MetricsStore(MemoryStore())
    >>> store = StagedStore(inner, empty=[""])
    >>> store.set("a/zarr.json", b'{"node_type": "group"}')
    >>> store.set("a/x/c/0", b"data")
    >>> store.get("a/x/c/0"), store.get("a/y/zarr.json"), inner.summary().calls
    (b'data', None, 0)
    >>> store.flush()
    >>> inner.summary()["set_many"].calls, inner.get("a/x/c/0")
    (2, b'data')
    """

    def __init__(self, inner: Store, empty: Iterable[str] = ()) -> None:
        super().__init__(inner)
        self._staged: dict[str, bytes] = {}
        #: metadata documents read from ``inner`` (an ancestor's, read before each node is made)
        self._documents: dict[str, bytes | None] = {}
        self._empty: list[str] = list(empty)
        self._data_bytes = 0
        self._flushed = False
        self._lock = threading.RLock()

    # -- what is held --------------------------------------------------------------------------
    @property
    def staged(self) -> int:
        """How many values are held."""
        return len(self._staged)

    def _absent(self, key: str) -> bool:
        """Whether ``key`` is known to hold nothing in ``inner``."""
        return any(key.startswith(prefix) for prefix in self._empty)

    def _held(self, key: str) -> tuple[bool, bytes | None]:
        """(answered here, value) for a read of ``key``."""
        if self._flushed:
            return False, None
        with self._lock:
            if self._flushed:
                return False, None
            if key in self._staged:
                return True, self._staged[key]
            if key in self._documents:
                return True, self._documents[key]
            return self._absent(key), None

    def _remember(self, values: Mapping[str, bytes | None]) -> None:
        """Keep the metadata documents among ``values`` (whole values read from ``inner``)."""
        with self._lock:
            if not self._flushed:
                for key, value in values.items():
                    if _document_name(key) in METADATA_DOCUMENTS and key not in self._staged:
                        self._documents[key] = value

    # -- reads ---------------------------------------------------------------------------------
    @property
    def reads_are_local(self) -> bool:  # type: ignore[override]
        return self.inner.reads_are_local

    def local_path(self, key: str) -> str | None:
        # a held value has no file yet: readers go through get
        return None if not self._flushed else self.inner.local_path(key)

    def get(self, key: str, byte_range: ByteRequest | None = None) -> bytes | None:
        answered, value = self._held(key)
        if not answered:
            if byte_range is not None:
                return self.inner.get(key, byte_range)
            value = self.inner.get(key)
            self._remember({key: value})
        return None if value is None else slice_value(value, byte_range)

    def get_many(self, keys: Sequence[str], *, max_size: int | None = None) -> dict[str, bytes | None]:
        found: dict[str, bytes | None] = {}
        others = []
        for key in keys:
            answered, value = self._held(key)
            if answered:
                found[key] = value
            else:
                others.append(key)
        if others:
            values = bounded_get_many(self.inner, others, max_size)
            self._remember(values)
            found.update(values)
        return {key: found[key] for key in keys}

    def get_ranges(
        self, requests: Sequence[tuple[str, ByteRequest]], *, max_size: int | None = None
    ) -> list[bytes | None]:
        held = [self._held(key) for key, _ in requests]
        others = [request for request, (answered, _) in zip(requests, held) if not answered]
        answers = iter(bounded_get_ranges(self.inner, others, max_size) if others else [])
        return [
            (None if value is None else slice_value(value, byte_range)) if answered else next(answers)
            for (_, byte_range), (answered, value) in zip(requests, held)
        ]

    def exists(self, key: str) -> bool:
        answered, value = self._held(key)
        return value is not None if answered else self.inner.exists(key)

    def list_prefix(self, prefix: str) -> Iterator[str]:
        with self._lock:
            if self._flushed:
                return self.inner.list_prefix(prefix)
            held = {key for key in self._staged if key.startswith(prefix)}
            absent = self._absent(prefix)
        # the request outside the lock: listings from several threads go side by side
        listed = set() if absent else set(self.inner.list_prefix(prefix))
        return iter(sorted(held | listed))

    def list_dir(self, prefix: str) -> list[str]:
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        with self._lock:
            if self._flushed:
                return self.inner.list_dir(prefix)
            held = {key[len(prefix) :].partition("/")[0] for key in self._staged if key.startswith(prefix)}
            absent = self._absent(prefix)
        listed = set() if absent else set(self.inner.list_dir(prefix))
        return sorted(held | listed)

    # -- writes --------------------------------------------------------------------------------
    def set(self, key: str, value: bytes) -> None:
        self.set_many({key: value})

    def set_many(self, items: Mapping[str, bytes]) -> None:
        if self._flushed:  # once set, never unset: no lock needed to see it, none taken for writers after it
            return self.inner.set_many(items)
        with self._lock:
            if self._flushed:
                return self.inner.set_many(items)
            for key, value in items.items():
                value = value if isinstance(value, bytes) else bytes(value)
                if _document_name(key) not in METADATA_DOCUMENTS:
                    self._data_bytes += len(value)
                self._staged[key] = value
                self._documents.pop(key, None)
            if self._data_bytes > FLUSH_DATA_BYTES:
                self._send_data()

    def delete(self, key: str) -> None:
        self.delete_many([key])

    def delete_many(self, keys: Iterable[str]) -> None:
        keys = list(keys)
        with self._lock:
            if not self._flushed:
                for key in keys:
                    self._staged.pop(key, None)
                    self._documents.pop(key, None)
                keys = [key for key in keys if not self._absent(key)]
        if keys:
            self.inner.delete_many(keys)

    def delete_prefix(self, prefix: str) -> None:
        if self._flushed:
            return self.inner.delete_prefix(prefix)
        with self._lock:
            if self._flushed:
                return self.inner.delete_prefix(prefix)
            for held in (self._staged, self._documents):
                for key in [key for key in held if key.startswith(prefix)]:
                    del held[key]
            if not self._absent(prefix):
                self.inner.delete_prefix(prefix)
                if not prefix or prefix.endswith("/"):
                    self._empty.append(prefix)

    # -- sending -------------------------------------------------------------------------------
    def _send_data(self) -> None:
        data = {key: value for key, value in self._staged.items() if _document_name(key) not in METADATA_DOCUMENTS}
        if data:
            self.inner.set_many(data)
            for key in data:
                del self._staged[key]
        self._data_bytes = 0

    def flush(self) -> None:
        """Send what is held (data, then node documents, then consolidated copies), then pass
        every later call through. Calling it again does nothing."""
        with self._lock:
            if self._flushed:
                return
            try:
                self._send_data()
                documents = dict(self._staged)
                last = {key: value for key, value in documents.items() if _holds_consolidated(key, value)}
                nodes = {key: value for key, value in documents.items() if key not in last}
                for batch in (nodes, last):
                    if batch:
                        self.inner.set_many(batch)
            finally:
                self._staged.clear()
                self._documents.clear()
                self._flushed = True

    # -- metadata updates from other processes (locks, conditional writes) --------------------------
    # Held values are this process's own until the flush: while staging, updates of them are plain
    # reads and writes here (a version is the value itself); afterwards the store's own apply.
    @property
    def conditional_writes(self) -> bool:
        return bool(self._flushed and getattr(self.inner, "conditional_writes", False))

    @property
    def locks_metadata(self) -> bool:
        return bool(self._flushed and getattr(self.inner, "locks_metadata", False))

    def lock_metadata(self) -> Any:
        lock = getattr(self.inner, "lock_metadata", None)
        return lock() if self._flushed and lock is not None else contextlib.nullcontext()

    @property
    def locks_objects(self) -> bool:
        return bool(self._flushed and getattr(self.inner, "locks_objects", False))

    def lock_objects(self, keys: Any) -> Any:
        return self.inner.lock_objects(keys) if self.locks_objects else contextlib.nullcontext()

    def get_versioned(self, key: str) -> tuple[bytes | None, Any]:
        if self._flushed:
            return self.inner.get_versioned(key)
        value = self.get(key)
        return value, value

    def set_if(self, key: str, value: bytes, version: Any) -> bool:
        if self._flushed:
            return self.inner.set_if(key, value, version)
        with self._lock:
            if self.get(key) != version:
                return False
            self.set(key, value)
            return True

    @property
    def fresh(self) -> bool:
        """Whether the whole store is known to have held nothing (no other writer's documents)."""
        return "" in self._empty

    def __reduce__(self) -> tuple[Any, ...]:
        # a copy in another process (a dask worker writing data after the flush) writes directly
        return (_restore, (self.inner,))

    def __repr__(self) -> str:
        return f"StagedStore({self.inner!r}, {len(self._staged)} held)"


def empty_prefixes(store: Store, prefix: str = "") -> list[str]:
    """``[""]`` when ``store`` holds nothing, else ``[prefix]`` when nothing is under ``prefix``,
    else ``[]`` -- found with a listing or two (none when the store cannot list)."""
    if not store.supports_listing:
        return []
    for candidate in dict.fromkeys(["", prefix]):
        try:
            if not store.list_dir(candidate):
                return [candidate]
        except (StoreError, OSError):  # a store that cannot list this: its reads go through
            return []
    return []


@contextlib.contextmanager
def staged_writes(store: Store, prefix: str = "", empty: Iterable[str] | None = None) -> Iterator[StagedStore]:
    """``store`` wrapped in a :class:`StagedStore` for the block, flushed at its end (also when
    the block fails: what was written so far is kept, as without staging).

    ``prefix`` (``"a/b/"``, ``""`` for the whole store) is where the block writes: a listing
    tells whether the store, or else the prefix, is empty (:func:`empty_prefixes`; or pass
    ``empty``), and then the block's reads there cost nothing.

    Examples
    --------
    >>> import zarrx
    >>> from zarrx.storage import MemoryStore, MetricsStore
    >>> inner = MetricsStore(MemoryStore())
    >>> with staged_writes(inner) as store:
    ...     root = zarrx.create_group(store)
    ...     for name in "abc":
    ...         root.create_array(f"{name}/x", shape=(2,), dtype="i1")[:] = 1
    >>> inner.summary().rounds  # the listing, then chunks and documents
    3
    >>> zarrx.open_group(inner)["b/x"][:]
    array([1, 1], dtype=int8)
    """
    # an empty store (the usual target) is empty everywhere; else the target itself may be
    staged = StagedStore(store, empty_prefixes(store, prefix) if empty is None else empty)
    try:
        yield staged
    finally:
        staged.flush()
