"""How the executor asks a store for bytes: the requests of a read, and the :class:`Fetcher`
every request goes through.

A :class:`Fetcher` makes one store call per batch (round trip): whole objects (``get_many``,
``iter_many``), byte ranges (``get_ranges``), one object (``get``), or -- on stores that open
one version of a value for range reads (``range_readers``, a local store) -- a shard's index read
from its open file, whose inner chunks the decoding threads then read themselves.
:class:`Trace` is the fetcher of ``explain()``: it records the requests, batch by batch, and reads
only what planning needs (the indexes of partially read shards), so what ``explain()`` shows is
what the executor does.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Sequence

from zarrx.storage.store import (
    ByteRequest, OffsetByteRequest, RangeByteRequest, RangeReader, Store, SuffixByteRequest, bounded_get_many,
    bounded_get_ranges,
)

__all__ = ["Fetcher", "Trace", "PlannedRequest", "Request", "CHUNK", "SHARD", "SHARD_INDEX", "INNER_CHUNKS"]

#: what a request fetches
CHUNK, SHARD, SHARD_INDEX, INNER_CHUNKS = "chunk", "shard", "shard index", "inner chunks"


@dataclass(frozen=True)
class PlannedRequest:
    """One store request of a read."""

    #: position of the store call (round trip) that carries it, from 0
    batch: int
    key: str
    #: None: the whole object
    byte_range: ByteRequest | None
    #: ``"chunk"``, ``"shard"`` (whole), ``"shard index"`` or ``"inner chunks"`` (merged ranges;
    #: from an opened shard, one inner chunk)
    kind: str
    #: the chunks it serves (coordinates in the inner-chunk grid for sharded arrays)
    chunks: tuple[tuple[int, ...], ...]

    @property
    def nbytes(self) -> int | None:
        """Bytes asked for, when the request says (a whole object's size is not known)."""
        match self.byte_range:
            case RangeByteRequest(start, end):
                return end - start
            case SuffixByteRequest(suffix):
                return suffix
        return None


#: (key, byte range or None for the whole object, kind, chunks served)
Request = tuple[str, "ByteRequest | None", str, tuple[tuple[int, ...], ...]]


class Fetcher:
    """How the executor asks a store for bytes: one method call per batch (round trip).

    ``max_size`` is the most bytes a stored object may hold (``ArrayHandle.max_object_size``):
    the store refuses a larger value rather than read it.
    """

    #: a dry run decodes nothing (explain)
    dry = False

    def __init__(self, store: Store, max_size: int | None = None) -> None:
        self.store = store
        self.max_size = max_size

    def objects(self, requests: Sequence[Request]) -> dict[str, bytes | None]:
        """Whole objects, one ``get_many``; missing ones map to None."""
        keys = list(dict.fromkeys(key for key, _, _, _ in requests))
        return bounded_get_many(self.store, keys, self.max_size)

    def arriving(self, requests: Sequence[Request]) -> Iterable[tuple[str, bytes | None]]:
        """Whole objects as they arrive (one ``iter_many``, the batch of :meth:`objects`)."""
        keys = list(dict.fromkeys(key for key, _, _, _ in requests))
        return self.store.iter_many(keys, max_size=self.max_size)

    def ranges(self, requests: Sequence[Request]) -> list[bytes | None]:
        """Byte ranges (whole objects as ``OffsetByteRequest(0)``), one ``get_ranges``."""
        ranges = [(key, byte_range or OffsetByteRequest(0)) for key, byte_range, _, _ in requests]
        return bounded_get_ranges(self.store, ranges, self.max_size)

    def one(self, request: Request) -> bytes | None:
        """A whole object, one ``get`` (from a pool task)."""
        return self.store.get(request[0])

    @contextlib.contextmanager
    def value_readers(self) -> Iterator[Callable[[str], RangeReader | None] | None]:
        """The store's :meth:`~zarrx.storage.Store.range_readers` for a ``with`` block (None: it has none)."""
        with self.store.range_readers(self.max_size) as open_value:
            yield open_value

    def shard_index(self, open_value: Callable[[str], RangeReader | None], request: Request) -> tuple[RangeReader | None, bytes | None]:
        """The shard of ``request`` opened with ``open_value`` (None: absent), and its index read
        from it (the request's range)."""
        value = open_value(request[0])
        return value, None if value is None else value.read(request[1])

    def inner_chunks(self, requests: Sequence[Request]) -> None:
        """Inner chunks the decoding threads read from their open shard: nothing to fetch here."""


class Trace(Fetcher):
    """The fetcher of ``explain()``: records every request by batch, fetches nothing but shard
    indexes (and those only with ``read_index``), decodes nothing."""

    dry = True

    def __init__(self, store: Store, read_index: bool = True) -> None:
        super().__init__(store)
        self.read_index = read_index
        self.requests: list[PlannedRequest] = []
        self.batches = 0
        #: index ranges read for planning
        self.index_requests = 0
        #: False when partial shards' inner chunks were not planned (``read_index=False``)
        self.exact = True

    def _record(self, requests: Sequence[Request]) -> None:
        self.requests.extend(
            PlannedRequest(self.batches, key, byte_range, kind, tuple(dict.fromkeys(chunks)))
            for key, byte_range, kind, chunks in requests
        )
        self.batches += 1

    def objects(self, requests: Sequence[Request]) -> dict[str, bytes | None]:
        self._record(_merge_by_key(requests))
        return {}

    def ranges(self, requests: Sequence[Request]) -> list[bytes | None]:
        self._record(requests)
        results: list[bytes | None] = [None] * len(requests)
        if any(kind == INNER_CHUNKS for _, _, kind, _ in requests):
            return results  # a shard read's second call: the indexes it holds are only re-checks
        indexes = [position for position, (_, _, kind, _) in enumerate(requests) if kind == SHARD_INDEX]
        if not indexes:
            return results
        if not self.read_index:
            self.exact = False  # the inner chunks of these shards cannot be planned
            return results
        found = self.store.get_ranges([(requests[p][0], requests[p][1]) for p in indexes])
        self.index_requests += len(indexes)
        for position, raw in zip(indexes, found):
            results[position] = raw
        return results

    def one(self, request: Request) -> bytes | None:
        self._record([request])
        return None

    def shard_index(self, open_value: Callable[[str], RangeReader | None], request: Request) -> tuple[RangeReader | None, bytes | None]:
        self._record([request])
        if not self.read_index:
            self.exact = False  # the inner chunks of this shard cannot be planned
            return None, None
        self.index_requests += 1
        return super().shard_index(open_value, request)

    def inner_chunks(self, requests: Sequence[Request]) -> None:
        for request in requests:  # each read on its own, by the thread decoding it
            self._record([request])


def _merge_by_key(requests: Sequence[Request]) -> list[Request]:
    """One request per distinct key, serving the chunks of all of them (a batch's ``get_many``)."""
    merged: dict[str, Request] = {}
    for key, byte_range, kind, chunks in requests:
        if key in merged:
            merged[key] = (key, byte_range, kind, merged[key][3] + chunks)
        else:
            merged[key] = (key, byte_range, kind, chunks)
    return list(merged.values())
