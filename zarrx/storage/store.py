"""The store contract (core spec, "Abstract store interface").

A :class:`Store` maps string keys (``"a/b/zarr.json"``, ``"a/b/c/0/1"``) to
bytes. It is synchronous; concurrency lives inside the batch methods
(:meth:`Store.get_many`, :meth:`Store.get_ranges`, :meth:`Store.set_many`),
which an implementation runs concurrently however suits its backend.

A missing key is ``None`` here and only here: :meth:`Store.get` returns None,
:meth:`Store.get_many` maps it to None. Other failures raise
:class:`~zarrx.errors.StoreError` naming the key. Writes of one object are
atomic: a reader sees the old or the new value, never a mix.

**Abilities.** A store says what it can do as properties, and callers ask it rather
than test its class (zarr-python 3's ``supports_*``):

=============================  ==========================================================
``read_only``                  writes raise :class:`~zarrx.errors.ReadOnlyError`
``supports_partial_reads``     byte ranges are read without reading the whole value
``supports_listing``           ``list_prefix`` / ``list_dir`` work
``reads_are_local``            a single ``get`` costs no round trip (a file, a dict): the
                               executor reads such stores chunk by chunk on its thread pool
                               instead of in batches
``process_local``              the data lives in this process's memory: a pickled copy is a
                               snapshot, and writes made with it are lost
``consistent_ranges``          ``get_ranges`` reads all the ranges of one key from one version
                               of its value (a shard's index and its inner chunks belong together)
``preferred_concurrency``      requests one batch should keep in flight (1 when it does not matter)
``local_path(key)``            the file holding ``key`` on this machine, or None
``location``                   what identifies the stored data: two stores with equal locations
                               hold the same keys (the same folder, dict or URL)
``follow_external_links``      reads follow symbolic links out of the store's root folder
                               (writes and deletions never do; see :mod:`zarrx.storage.containment`)
``external_links(prefix)``     ``(key, target)`` of the links below ``prefix`` that leave the
                               root (``[]`` for stores without links)
``batch_reader(max_size)``     a ``with`` block giving a function that reads whole values one
                               after another (default: ``get``); a local store keeps the
                               folders it reads in open for all of them
``batch_writer()``             the same for writing values one after another (default: ``set``)
``locks_metadata``, ...        a lock, or conditional writes, for metadata updates across
                               processes (:mod:`zarrx.storage.metadata_updates`)
``range_readers(max_size)``    a ``with`` block giving a function opening one version of a
                               value for range reads (:class:`RangeReader`: a local file), or None
=============================  ==========================================================

:class:`WrapperStore` forwards every method and ability to the store it wraps, so a wrapper
(metrics, prefetching, fault injection, a cache) overrides only what it changes.

Keys are relative to the store's root and never start with ``/``; the array and
group layers build them only from validated node names (see :mod:`zarrx.storage.paths`).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from zarrx.errors import UsageError
from zarrx.storage.metadata_updates import ForwardedMetadataUpdates, MetadataUpdates

__all__ = [
    "Store", "WrapperStore", "ByteRequest", "RangeByteRequest", "OffsetByteRequest", "SuffixByteRequest",
    "byte_bounds", "open_bounds", "slice_value", "bounded_get_many", "bounded_get_ranges", "RangeReader",
]  # fmt: skip


@dataclass(frozen=True)
class RangeByteRequest:
    """Bytes ``[start, end)``; the part past the end of the value is simply absent."""

    start: int
    end: int

    def __post_init__(self) -> None:
        if self.start < 0 or self.end < self.start:
            raise UsageError(f"RangeByteRequest needs 0 <= start <= end, found start={self.start}, end={self.end}")


@dataclass(frozen=True)
class OffsetByteRequest:
    """Bytes from ``offset`` to the end (empty when ``offset`` is past the end)."""

    offset: int

    def __post_init__(self) -> None:
        if self.offset < 0:
            raise UsageError(f"OffsetByteRequest needs offset >= 0, found {self.offset}")


@dataclass(frozen=True)
class SuffixByteRequest:
    """The last ``suffix`` bytes (the whole value when it is shorter)."""

    suffix: int

    def __post_init__(self) -> None:
        if self.suffix < 0:
            raise UsageError(f"SuffixByteRequest needs suffix >= 0, found {self.suffix}")


ByteRequest = RangeByteRequest | OffsetByteRequest | SuffixByteRequest


def byte_bounds(byte_range: ByteRequest | None, size: int) -> tuple[int, int]:
    """``(start, end)`` of what ``byte_range`` asks for in a value of ``size`` bytes, clipped to it.

    The one conversion of a byte request into positions: every store reads ranges through it.
    A range from a corrupt shard index may start past any seekable offset or be longer than any
    buffer; clipped, it reads as absent bytes.

    Examples
    --------
    >>> byte_bounds(SuffixByteRequest(3), 10), byte_bounds(RangeByteRequest(8, 20), 10), byte_bounds(None, 4)
    ((7, 10), (8, 10), (0, 4))
    """
    match byte_range:
        case None:
            return 0, size
        case RangeByteRequest(start, end):
            return min(start, size), min(end, size)
        case OffsetByteRequest(offset):
            return min(offset, size), size
        case SuffixByteRequest(suffix):
            return max(0, size - suffix), size
    raise TypeError(f"expected a ByteRequest or None, found {byte_range!r}")


def open_bounds(byte_range: ByteRequest | None) -> tuple[int | None, int | None] | None:
    """``(start, end)`` as fsspec's ``cat_file``/``cat_ranges`` take them, where the size of the value
    is not known: ``None`` for an open end, a negative start for a suffix; None for an empty range
    (which needs no read).

    Examples
    --------
    >>> open_bounds(SuffixByteRequest(3)), open_bounds(OffsetByteRequest(5)), open_bounds(RangeByteRequest(4, 4))
    ((-3, None), (5, None), None)
    """
    match byte_range:
        case None:
            return None, None
        case RangeByteRequest(start, end):
            return (start, end) if end > start else None
        case OffsetByteRequest(offset):
            return offset, None
        case SuffixByteRequest(suffix):
            return (-suffix, None) if suffix else None  # start=-0 would mean the whole value
    raise TypeError(f"expected a ByteRequest or None, found {byte_range!r}")


def slice_value(value: bytes, byte_range: ByteRequest | None) -> bytes:
    """The part of ``value`` that ``byte_range`` asks for (all of it for None).

    Examples
    --------
    >>> slice_value(b"0123456789", SuffixByteRequest(3))
    b'789'
    """
    if byte_range is None:
        return value
    start, end = byte_bounds(byte_range, len(value))
    return value[start:end]


@functools.lru_cache(maxsize=256)
def _takes_max_size(method: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(method).parameters
    except (TypeError, ValueError):
        return False
    return "max_size" in parameters or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())


def bounded_get_many(store: "Store", keys: Sequence[str], max_size: int | None) -> dict[str, bytes | None]:
    """``store.get_many(keys, max_size=max_size)``, for every store: one written before
    ``max_size`` existed (a subclass overriding ``get_many(self, keys)``) is asked without it.

    Examples
    --------
    >>> from zarrx.storage import MemoryStore
    >>> bounded_get_many(MemoryStore({"a": b"1"}), ["a", "b"], max_size=16)
    {'a': b'1', 'b': None}
    """
    if max_size is not None and _takes_max_size(type(store).get_many):
        return store.get_many(keys, max_size=max_size)
    return store.get_many(keys)


def bounded_get_ranges(
    store: "Store", requests: Sequence[tuple[str, "ByteRequest"]], max_size: int | None
) -> list[bytes | None]:
    """``store.get_ranges(requests, max_size=max_size)``, as :func:`bounded_get_many` does it."""
    if max_size is not None and _takes_max_size(type(store).get_ranges):
        return store.get_ranges(requests, max_size=max_size)
    return store.get_ranges(requests)


class RangeReader(ABC):
    """One version of a stored value open for byte-range reads (:meth:`Store.range_readers`):
    every read sees the same bytes, whoever replaces the value meanwhile; threads may share it."""

    key: str
    #: the value's size in bytes when it was opened
    size: int

    @abstractmethod
    def read(self, byte_range: ByteRequest | None = None) -> bytes:
        """The bytes ``byte_range`` asks for (None: all), clipped as :func:`byte_bounds` does."""

    @abstractmethod
    def readinto(self, start: int, buffer: memoryview) -> int:
        """Read from ``start`` into ``buffer``; how many bytes (fewer only at the end)."""


class Store(MetadataUpdates, ABC):
    """Key/value storage for a Zarr hierarchy (see the module docstring for its abilities)."""

    read_only: bool = False
    supports_partial_reads: bool = True
    supports_listing: bool = True
    reads_are_local: bool = False
    process_local: bool = False
    consistent_ranges: bool = False
    preferred_concurrency: int = 1
    follow_external_links: bool = False

    def local_path(self, key: str) -> str | None:
        """The file on this machine that holds ``key`` (whether it exists or not), or None."""
        return None

    def external_links(self, prefix: str = "") -> list[tuple[str, str]]:
        """``(key, target)`` of each symbolic link below ``prefix`` that leaves the store's root."""
        return []

    @property
    def location(self) -> Any:
        """What identifies the stored data; equal locations mean the same keys and values."""
        return ("object", id(self))

    # -- reading -----------------------------------------------------------------
    @abstractmethod
    def get(self, key: str, byte_range: ByteRequest | None = None) -> bytes | None:
        """The value (or part of it) stored under ``key``; None when absent."""

    def get_many(self, keys: Sequence[str], *, max_size: int | None = None) -> dict[str, bytes | None]:
        """Fetch many keys in one batch. Missing keys map to None.

        ``max_size`` is the most bytes any of the values may hold (the array layer passes a
        chunk's largest encoded size): a store reading over a network stops reading a larger
        one and raises StoreError naming the key; None means the store's own limit for values
        of unknown size. Stores holding their values at hand may ignore it.
        """
        return {key: self.get(key) for key in keys}

    def iter_many(self, keys: Sequence[str], *, max_size: int | None = None) -> Iterator[tuple[str, bytes | None]]:
        """``(key, value)`` for each of ``keys`` (once each), as the values arrive, in any order:
        one batch, as :meth:`get_many`, whose values a store reading over a network yields one by
        one, so a caller can decode a value while others are in flight. This default yields
        :meth:`get_many`'s."""
        return iter(bounded_get_many(self, keys, max_size).items())

    @contextlib.contextmanager
    def batch_reader(self, max_size: int | None = None) -> Iterator[Callable[[str], "bytes | None"]]:
        """A function reading whole values one after another on one thread, for as long as the
        ``with`` block lasts: what the executor's small-chunk loop calls once per chunk.

        A store may hold what many reads share while it is open (a local store: the
        descriptors of the folders it reads in) and bound each value by ``max_size`` as
        :meth:`get_many` does.
        This default is :meth:`get`.

        Examples
        --------
        >>> from zarrx.storage import MemoryStore
        >>> with MemoryStore({"a": b"1"}).batch_reader() as read:
        ...     read("a"), read("b")
        (b'1', None)
        """
        yield self.get

    @contextlib.contextmanager
    def range_readers(self, max_size: int | None = None) -> Iterator["Callable[[str], RangeReader | None] | None"]:
        """A function opening a value for byte-range reads (None for a missing key) for as long as
        the ``with`` block lasts, or None when the store has none (this default; use
        :meth:`get_ranges`). The executor reads a shard's index and inner chunks through it, on
        any thread. ``max_size`` bounds a value as for :meth:`get_many`."""
        yield None

    def get_ranges(
        self, requests: Sequence[tuple[str, ByteRequest]], *, max_size: int | None = None
    ) -> list[bytes | None]:
        """Fetch many byte ranges in one batch, in order. A missing key gives None.
        Stores with :attr:`consistent_ranges` read all the ranges of one key from one version
        of its value, even while another writer replaces it. This default reads range by range.
        ``max_size`` bounds the whole value of each key, as for :meth:`get_many`."""
        return [self.get(key, byte_range) for key, byte_range in requests]

    def exists(self, key: str) -> bool:
        return self.get(key) is not None

    # -- writing -----------------------------------------------------------------
    @abstractmethod
    def set(self, key: str, value: bytes) -> None:
        """Store ``value`` under ``key`` atomically."""

    @contextlib.contextmanager
    def batch_writer(self) -> Iterator[Callable[[str, bytes], None]]:
        """A function storing values one after another on one thread (each atomically, as
        :meth:`set`), for as long as the ``with`` block lasts: what the executor's small-chunk
        write loop calls once per chunk. This default is :meth:`set`.

        Examples
        --------
        >>> from zarrx.storage import MemoryStore
        >>> store = MemoryStore()
        >>> with store.batch_writer() as write:
        ...     write("a", b"1")
        >>> store.get("a")
        b'1'
        """
        yield self.set

    def set_many(self, items: Mapping[str, bytes]) -> None:
        """Store many values in one batch."""
        for key, value in items.items():
            self.set(key, value)

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove ``key``; absent keys are not an error."""

    def delete_many(self, keys: Iterable[str]) -> None:
        for key in keys:
            self.delete(key)

    def delete_prefix(self, prefix: str) -> None:
        """Remove every key under ``prefix`` (a key prefix ending in '/' or '')."""
        self.delete_many(list(self.list_prefix(prefix)))

    # -- listing -----------------------------------------------------------------
    @abstractmethod
    def list_prefix(self, prefix: str) -> Iterator[str]:
        """Every key that starts with ``prefix`` (full keys, any depth)."""

    @abstractmethod
    def list_dir(self, prefix: str) -> list[str]:
        """The names directly under ``prefix`` ('' or ending in '/'): keys and sub-prefixes,
        without the prefix and without a trailing '/'."""

    def __contains__(self, key: str) -> bool:
        return self.exists(key)


class WrapperStore(ForwardedMetadataUpdates, Store):
    """A store that forwards every method and ability to ``inner``.

    Subclasses override what they change (count, prefetch, fail, cache) and nothing else. Two
    wrappers are equal only when they are one object; ``location`` tells whether they hold the
    same data.

    Examples
    --------
    >>> from zarrx.storage import MemoryStore
    >>> class Shouting(WrapperStore):
    ...     def get(self, key, byte_range=None):
    ...         value = super().get(key, byte_range)
    ...         return None if value is None else value.upper()
    >>> store = Shouting(MemoryStore({"a": b"hi"}))
    >>> store.get("a"), store.get_many(["a"]), store.process_local
    (b'HI', {'a': b'hi'}, True)
    """

    def __init__(self, inner: Store) -> None:
        if not isinstance(inner, Store):
            raise UsageError(f"{type(self).__name__} wraps a zarrx Store, found {type(inner).__name__} {inner!r}")
        self.inner = inner

    # -- abilities: the wrapped store's, unless a subclass says otherwise ---------------
    @property
    def read_only(self) -> bool:  # type: ignore[override]
        return self.inner.read_only

    @property
    def supports_partial_reads(self) -> bool:  # type: ignore[override]
        return self.inner.supports_partial_reads

    @property
    def supports_listing(self) -> bool:  # type: ignore[override]
        return self.inner.supports_listing

    @property
    def reads_are_local(self) -> bool:  # type: ignore[override]
        return self.inner.reads_are_local

    @property
    def process_local(self) -> bool:  # type: ignore[override]
        return self.inner.process_local

    @property
    def consistent_ranges(self) -> bool:  # type: ignore[override]
        return self.inner.consistent_ranges

    @property
    def preferred_concurrency(self) -> int:  # type: ignore[override]
        return self.inner.preferred_concurrency

    @property
    def follow_external_links(self) -> bool:  # type: ignore[override]
        return self.inner.follow_external_links

    @property
    def location(self) -> Any:
        return self.inner.location

    # -- methods ---------------------------------------------------------------------------
    def local_path(self, key: str) -> str | None:
        return self.inner.local_path(key)

    def external_links(self, prefix: str = "") -> list[tuple[str, str]]:
        return self.inner.external_links(prefix)

    def get(self, key: str, byte_range: ByteRequest | None = None) -> bytes | None:
        return self.inner.get(key, byte_range)

    def get_many(self, keys: Sequence[str], *, max_size: int | None = None) -> dict[str, bytes | None]:
        return bounded_get_many(self.inner, keys, max_size)

    def iter_many(self, keys: Sequence[str], *, max_size: int | None = None) -> Iterator[tuple[str, bytes | None]]:
        if type(self).get_many is not WrapperStore.get_many:
            # this wrapper changes what get_many does (counts, prefetches, fails): through it
            return iter(bounded_get_many(self, keys, max_size).items())
        return self.inner.iter_many(keys, max_size=max_size)

    @contextlib.contextmanager
    def batch_reader(self, max_size: int | None = None) -> Iterator[Callable[[str], "bytes | None"]]:
        if type(self).get is not WrapperStore.get:
            # this wrapper changes what get does (counts, fails): through it
            yield self.get
            return
        with self.inner.batch_reader(max_size) as read:
            yield read

    @contextlib.contextmanager
    def range_readers(self, max_size: int | None = None) -> Iterator["Callable[[str], RangeReader | None] | None"]:
        if type(self).get is not WrapperStore.get or type(self).get_ranges is not WrapperStore.get_ranges:
            yield None  # this wrapper changes what reads do (counts, fails): through get_ranges
            return
        with self.inner.range_readers(max_size) as open_value:
            yield open_value

    def get_ranges(
        self, requests: Sequence[tuple[str, ByteRequest]], *, max_size: int | None = None
    ) -> list[bytes | None]:
        return bounded_get_ranges(self.inner, requests, max_size)

    def exists(self, key: str) -> bool:
        return self.inner.exists(key)

    def set(self, key: str, value: bytes) -> None:
        self.inner.set(key, value)

    @contextlib.contextmanager
    def batch_writer(self) -> Iterator[Callable[[str, bytes], None]]:
        if type(self).set is not WrapperStore.set:
            # this wrapper changes what set does (counts, fails): through it
            yield self.set
            return
        with self.inner.batch_writer() as write:
            yield write

    def set_many(self, items: Mapping[str, bytes]) -> None:
        self.inner.set_many(items)

    def delete(self, key: str) -> None:
        self.inner.delete(key)

    def delete_many(self, keys: Iterable[str]) -> None:
        self.inner.delete_many(keys)

    def delete_prefix(self, prefix: str) -> None:
        self.inner.delete_prefix(prefix)

    def list_prefix(self, prefix: str) -> Iterator[str]:
        return self.inner.list_prefix(prefix)

    def list_dir(self, prefix: str) -> list[str]:
        return self.inner.list_dir(prefix)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"
