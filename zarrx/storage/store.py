"""The store contract (core spec, "Abstract store interface").

A :class:`Store` maps string keys (``"a/b/zarr.json"``, ``"a/b/c/0/1"``) to
bytes. It is synchronous; concurrency lives inside the batch methods
(:meth:`Store.get_many`, :meth:`Store.get_ranges`, :meth:`Store.set_many`),
which an implementation runs concurrently however suits its backend.

A missing key is ``None`` here and only here: :meth:`Store.get` returns None,
:meth:`Store.get_many` maps it to None. Other failures raise
:class:`~zarrx.errors.StoreError` naming the key. Writes of one object are
atomic: a reader sees the old or the new value, never a mix.

Keys are relative to the store's root and never start with ``/``; the array and
group layers build them only from validated node names (see
:mod:`zarrx.storage.paths`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Iterable, Iterator, Mapping, Sequence

from zarrx.errors import UsageError

__all__ = [
    "Store",
    "ByteRequest",
    "RangeByteRequest",
    "OffsetByteRequest",
    "SuffixByteRequest",
]


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


class Store(ABC):
    """Key/value storage for a Zarr hierarchy."""

    read_only: bool = False

    @property
    def process_local(self) -> bool:
        """True when the data lives in this process's memory (:class:`MemoryStore`, or a wrapper of
        one): a copy pickled to another process is a snapshot, and writes made there are lost."""
        return False

    # -- reading -----------------------------------------------------------------
    @abstractmethod
    def get(self, key: str, byte_range: ByteRequest | None = None) -> bytes | None:
        """The value (or part of it) stored under ``key``; None when absent."""

    def get_many(self, keys: Sequence[str]) -> dict[str, bytes | None]:
        """Fetch many keys in one batch. Missing keys map to None."""
        return {key: self.get(key) for key in keys}

    def get_ranges(self, requests: Sequence[tuple[str, ByteRequest]]) -> list[bytes | None]:
        """Fetch many byte ranges in one batch, in order. A missing key gives None.

        :class:`LocalStore` and :class:`MemoryStore` read all the ranges of one key from one
        version of its value, even while another writer replaces it (one open file, one
        lookup); a reader can rely on that to check that ranges it reads belong together
        (a shard's index and its inner chunks). This default reads range by range.
        """
        return [self.get(key, byte_range) for key, byte_range in requests]

    def exists(self, key: str) -> bool:
        return self.get(key) is not None

    # -- writing -----------------------------------------------------------------
    @abstractmethod
    def set(self, key: str, value: bytes) -> None:
        """Store ``value`` under ``key`` atomically."""

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
