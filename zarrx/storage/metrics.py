"""A store wrapper that counts what goes to the store: calls, requests, bytes and time.

:class:`MetricsStore` wraps any :class:`~zarrx.storage.Store` and records, per store
method, how often it was called, how many keys or byte ranges those calls asked for
(*requests*: one per key of ``get_many``, per range of ``get_ranges``, per item of
``set_many``), how many of the reads found nothing, the bytes read or written, and the
wall time spent inside the wrapped store. Use it to see how many round trips a piece of
code makes, in tests and in notebooks::

    store = MetricsStore(make_store("s3://bucket/data.zarr", storage_options=...))
    array = zarrx.open_array(store)
    array[:100]
    print(store.summary())     # a table; store.summary()["get_many"].requests, ...
    store.reset()

A *call* is one round of requests (a batch for the ``*_many``/``get_ranges`` methods,
which remote stores send concurrently), and ``requests`` counts the requests a server sees
(for stores that map one key to one request; listing may take several requests on some back
ends). ``rounds`` counts *sequential request rounds*: the times a call began while no other
call was in flight. Calls made one after another are a round each; calls that overlap --
listings sent from several threads at once, dask tasks writing side by side -- are one round
together. On a store with latency ``L`` per request a piece of code waits about
``rounds * L``, whatever its ``calls`` (``summary().rounds``); ``summary().busy_seconds`` is the
wall time with at least one call in flight (what the code waited for the store). A streamed
batch (``iter_many``, whose values the caller uses as they arrive) is one ``get_many`` call, in
flight from its first value asked for until its last is handed over. The wrapper is thread-safe, so
dask's threads can share it; a pickled copy (a dask worker) starts from zero.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, fields
from typing import Any, Iterable, Iterator, Mapping, Sequence

from zarrx.storage.store import ByteRequest, Store, WrapperStore, bounded_get_many, bounded_get_ranges

__all__ = ["MetricsStore", "OperationMetrics", "MetricsSummary", "OPERATIONS"]

#: the operations counted, in the order summaries list them
OPERATIONS = (
    "get", "get_many", "get_ranges", "exists",
    "set", "set_many", "delete", "delete_many", "delete_prefix",
    "list_prefix", "list_dir",
)  # fmt: skip


@dataclass
class OperationMetrics:
    """What one store method did: ``calls``, ``requests`` (keys or ranges), ``missing`` (reads
    that found no value), ``bytes`` (read or written) and ``seconds`` (wall time in the store)."""

    calls: int = 0
    requests: int = 0
    missing: int = 0
    bytes: int = 0
    seconds: float = 0.0

    def __iadd__(self, other: "OperationMetrics") -> "OperationMetrics":
        for field in fields(self):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))
        return self


class MetricsSummary(Mapping[str, OperationMetrics]):
    """A snapshot of :class:`MetricsStore`'s counters: ``summary[operation]`` for every
    operation that was used, totals as attributes, a table as ``str(summary)``."""

    def __init__(self, operations: Mapping[str, OperationMetrics], rounds: int = 0, busy_seconds: float = 0.0) -> None:
        self._operations = {name: operations[name] for name in OPERATIONS if operations[name].calls}
        #: sequential request rounds: calls that began while no other call was in flight
        self.rounds = rounds
        #: wall time with at least one call in flight (overlapping calls counted once)
        self.busy_seconds = busy_seconds

    def __getitem__(self, operation: str) -> OperationMetrics:
        if operation not in OPERATIONS:
            raise KeyError(f"{operation!r} is not a store operation; the operations are {', '.join(OPERATIONS)}")
        return self._operations.get(operation, OperationMetrics())

    def __contains__(self, operation: object) -> bool:
        return operation in self._operations

    def __iter__(self) -> Iterator[str]:
        return iter(self._operations)

    def __len__(self) -> int:
        return len(self._operations)

    def _total(self, names: Iterable[str], attribute: str) -> Any:
        return sum(getattr(self[name], attribute) for name in names)

    @property
    def calls(self) -> int:
        """Store calls: sequential round trips."""
        return self._total(self, "calls")

    @property
    def requests(self) -> int:
        """Keys, ranges and listings asked for, over all operations."""
        return self._total(self, "requests")

    @property
    def bytes_read(self) -> int:
        return self._total(("get", "get_many", "get_ranges"), "bytes")

    @property
    def bytes_written(self) -> int:
        return self._total(("set", "set_many"), "bytes")

    @property
    def seconds(self) -> float:
        return self._total(self, "seconds")

    def as_dict(self) -> dict[str, dict[str, Any]]:
        return {name: dict(vars(metrics)) for name, metrics in self._operations.items()}

    def __str__(self) -> str:
        header = ("operation", "calls", "requests", "missing", "bytes", "seconds")
        rows = [
            (name, str(m.calls), str(m.requests), str(m.missing), str(m.bytes), f"{m.seconds:.3f}")
            for name, m in self._operations.items()
        ]
        rows.append(
            ("total", str(self.calls), str(self.requests), str(self._total(self, "missing")),
             str(self.bytes_read + self.bytes_written), f"{self.seconds:.3f}")
        )  # fmt: skip
        widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
        lines = ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths)))
                 for row in (header, *rows)]  # fmt: skip
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (
            f"MetricsSummary(rounds={self.rounds}, calls={self.calls}, requests={self.requests}, "
            f"bytes_read={self.bytes_read}, bytes_written={self.bytes_written})"
        )


class MetricsStore(WrapperStore):
    """``inner`` with every call counted (see the module docstring).

    Parameters
    ----------
    inner
        The store to wrap; reads and writes go to it unchanged.

    Examples
    --------
    >>> from zarrx.storage import MemoryStore
    >>> store = MetricsStore(MemoryStore())
    >>> store.set_many({"a": b"12", "b": b"345"})
    >>> store.get_many(["a", "b", "missing"])
    {'a': b'12', 'b': b'345', 'missing': None}
    >>> metrics = store.summary()["get_many"]
    >>> metrics.calls, metrics.requests, metrics.missing, metrics.bytes
    (1, 3, 1, 5)
    >>> store.summary().rounds  # set_many, then get_many: two sequential rounds
    2
    """

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self._lock = threading.Lock()
        self._token: str | None = None
        self.reset()

    def reset(self) -> None:
        """Set every counter back to zero."""
        with self._lock:
            self._metrics = {name: OperationMetrics() for name in OPERATIONS}
            self._rounds = 0
            self._busy = 0.0
            # calls in flight now (kept across a reset: a call that began before it still ends)
            self._in_flight = getattr(self, "_in_flight", 0)
            self._busy_since = time.perf_counter()

    def summary(self) -> MetricsSummary:
        """A snapshot of the counters (later calls do not change it)."""
        with self._lock:
            operations = {name: OperationMetrics(**vars(m)) for name, m in self._metrics.items()}
            busy = self._busy + (time.perf_counter() - self._busy_since if self._in_flight else 0.0)
            return MetricsSummary(operations, self._rounds, busy)

    def _begin(self) -> float:
        """Mark a call in flight (a new round when none was) and return its start time."""
        started = time.perf_counter()
        with self._lock:
            if self._in_flight == 0:
                self._rounds += 1
                self._busy_since = started
            self._in_flight += 1
        return started

    def _record(self, operation: str, started: float, requests: int, missing: int = 0, nbytes: int = 0) -> None:
        ended = time.perf_counter()
        elapsed = ended - started
        with self._lock:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._busy += ended - self._busy_since
            self._metrics[operation] += OperationMetrics(1, requests, missing, nbytes, elapsed)

    # -- reading -------------------------------------------------------------------------------
    def get(self, key: str, byte_range: ByteRequest | None = None) -> bytes | None:
        started = self._begin()
        value = None
        try:
            value = self.inner.get(key, byte_range)
            return value
        finally:
            self._record("get", started, 1, value is None, len(value) if value is not None else 0)

    def get_many(self, keys: Sequence[str], *, max_size: int | None = None) -> dict[str, bytes | None]:
        started = self._begin()
        values: dict[str, bytes | None] = {}
        try:
            values = bounded_get_many(self.inner, keys, max_size)
            return values
        finally:
            found = [v for v in values.values() if v is not None]
            self._record("get_many", started, len(values) or len(keys), len(values) - len(found), sum(map(len, found)))

    def iter_many(self, keys: Sequence[str], *, max_size: int | None = None) -> Iterator[tuple[str, bytes | None]]:
        """The inner store's values as they arrive, counted as one ``get_many`` call, in flight
        from the first value asked for until the last is handed over (or the caller stops)."""
        keys = list(keys)
        started = self._begin()
        count = missing = nbytes = 0
        try:
            for key, value in self.inner.iter_many(keys, max_size=max_size):
                count += 1
                if value is None:
                    missing += 1
                else:
                    nbytes += len(value)
                yield key, value
        finally:
            self._record("get_many", started, count or len(set(keys)), missing, nbytes)

    def get_ranges(
        self, requests: Sequence[tuple[str, ByteRequest]], *, max_size: int | None = None
    ) -> list[bytes | None]:
        started = self._begin()
        values: list[bytes | None] = []
        try:
            values = bounded_get_ranges(self.inner, requests, max_size)
            return values
        finally:
            found = [v for v in values if v is not None]
            self._record("get_ranges", started, len(requests), len(values) - len(found), sum(map(len, found)))

    def exists(self, key: str) -> bool:
        started = self._begin()
        found = False
        try:
            found = self.inner.exists(key)
            return found
        finally:
            self._record("exists", started, 1, not found)

    # -- writing -------------------------------------------------------------------------------
    def set(self, key: str, value: bytes) -> None:
        started = self._begin()
        try:
            self.inner.set(key, value)
        finally:
            self._record("set", started, 1, nbytes=memoryview(value).nbytes)

    def set_many(self, items: Mapping[str, bytes]) -> None:
        started = self._begin()
        try:
            self.inner.set_many(items)
        finally:
            nbytes = sum(memoryview(v).nbytes for v in items.values())
            self._record("set_many", started, len(items), nbytes=nbytes)

    def delete(self, key: str) -> None:
        started = self._begin()
        try:
            self.inner.delete(key)
        finally:
            self._record("delete", started, 1)

    def delete_many(self, keys: Iterable[str]) -> None:
        keys = list(keys)
        started = self._begin()
        try:
            self.inner.delete_many(keys)
        finally:
            self._record("delete_many", started, len(keys))

    def delete_prefix(self, prefix: str) -> None:
        started = self._begin()
        try:
            self.inner.delete_prefix(prefix)
        finally:
            self._record("delete_prefix", started, 1)

    # -- listing -------------------------------------------------------------------------------
    def list_prefix(self, prefix: str) -> Iterator[str]:
        started = self._begin()
        try:
            keys = list(self.inner.list_prefix(prefix))
        finally:
            self._record("list_prefix", started, 1)
        return iter(keys)

    def list_dir(self, prefix: str) -> list[str]:
        started = self._begin()
        try:
            return self.inner.list_dir(prefix)
        finally:
            self._record("list_dir", started, 1)

    # -- identity ------------------------------------------------------------------------------
    def __dask_tokenize__(self) -> Any:
        """The wrapped store's token, computed once (dask's protocol): xarray tokenizes the store
        of every group it opens with ``chunks``, and pickling a remote store each time costs
        more than a millisecond a group. The counters are not part of it, as they are not of a
        pickled copy. A store holding its values in this process (a memory store, whose pickle
        is its values) is tokenized afresh each time."""
        from dask.base import tokenize  # asked by dask: imported already

        token = self._token
        if token is None:
            token = tokenize(self.inner)
            if not self.inner.process_local:
                self._token = token
        return (MetricsStore.__qualname__, token)

    def __getstate__(self) -> dict[str, Any]:
        return {"inner": self.inner}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["inner"])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MetricsStore) and other.inner == self.inner

    def __hash__(self) -> int:
        return hash((MetricsStore, self.inner))
