"""A store that keeps every value in a dict of key -> bytes.

Thread safety rests on the dict itself rather than on a lock: every operation
is one dict operation (``get``, ``d[key] = value``, ``pop``, ``update`` with a
dict of str keys), and CPython runs each of those without releasing the GIL
(str keys never call back into Python code), or under the dict's own lock on
free-threaded builds. Listing first takes a snapshot of the keys with
``list(d)``, for the same reason, so a concurrent write never makes it fail
with "dictionary changed size during iteration". This holds for a plain
``dict``; another MutableMapping passed in brings its own guarantees.

Values are stored as ``bytes`` (a bytearray or memoryview passed to ``set`` is
copied), so a caller reusing its buffer cannot change what was stored. A batch of
ranges (:meth:`MemoryStore.get_ranges`) reads each key's value once, so all the
ranges of one key come from the same value, as with :class:`LocalStore`.

Pickling copies the data: a MemoryStore sent to a dask worker process is a
snapshot, and writes there are not seen by the parent.
"""

from __future__ import annotations

from typing import Iterator, Mapping, MutableMapping, Sequence

from zarrx.errors import ReadOnlyError
from zarrx.storage.paths import validate_key, validate_prefix
from zarrx.storage.store import ByteRequest, Store, slice_value

__all__ = ["MemoryStore"]


class MemoryStore(Store):
    """Key/value pairs in memory.

    Parameters
    ----------
    mapping
        The dict to keep the values in (shared, not copied), so a user can pass
        ``{}`` and look at it afterwards; a new dict when None.
    read_only
        Refuse writes with :class:`~zarrx.errors.ReadOnlyError`.

    Examples
    --------
    >>> store = MemoryStore()
    >>> store.set("a/zarr.json", b"{}")
    >>> store.list_dir("")
    ['a']
    """

    #: abilities (see zarrx.storage.store): the data is in this process's memory, a read is a
    #: dict lookup, and a batch of ranges reads each key's value once
    process_local = True
    reads_are_local = True
    consistent_ranges = True

    def __init__(self, mapping: MutableMapping[str, bytes] | None = None, read_only: bool = False) -> None:
        self._data: MutableMapping[str, bytes] = {} if mapping is None else mapping
        self.read_only = read_only

    @property
    def mapping(self) -> MutableMapping[str, bytes]:
        """The dict holding the values."""
        return self._data

    # -- reading -----------------------------------------------------------------
    def get(self, key: str, byte_range: ByteRequest | None = None) -> bytes | None:
        value = self._data.get(validate_key(key))
        if value is None:
            return None
        if type(value) is not bytes:  # a user-filled mapping may hold bytearrays
            value = bytes(value)
        return value if byte_range is None else slice_value(value, byte_range)

    def get_many(self, keys: Sequence[str], *, max_size: int | None = None) -> dict[str, bytes | None]:
        return {key: self.get(key) for key in keys}

    def get_ranges(
        self, requests: Sequence[tuple[str, ByteRequest]], *, max_size: int | None = None
    ) -> list[bytes | None]:
        # Each key is looked up once for all its ranges, so the ranges of one key come from one
        # value even while another thread replaces it (a shard's index and its inner chunks).
        values: dict[str, bytes | None] = {}
        results: list[bytes | None] = []
        for key, byte_range in requests:
            if key not in values:
                values[key] = self.get(key)
            value = values[key]
            results.append(None if value is None else slice_value(value, byte_range))
        return results

    def exists(self, key: str) -> bool:
        return validate_key(key) in self._data

    # -- writing -----------------------------------------------------------------
    def set(self, key: str, value: bytes) -> None:
        self._check_writable(validate_key(key))
        self._data[key] = bytes(value)  # no copy for bytes: bytes(b) is b

    def set_many(self, items: Mapping[str, bytes]) -> None:
        for key in items:
            self._check_writable(validate_key(key))
        self._data.update({key: bytes(value) for key, value in items.items()})

    def delete(self, key: str) -> None:
        self._check_writable(validate_key(key))
        self._data.pop(key, None)

    def delete_prefix(self, prefix: str) -> None:
        self._check_writable(validate_prefix(prefix))
        for key in self.list_prefix(prefix):
            self._data.pop(key, None)

    # -- listing -----------------------------------------------------------------
    def list_prefix(self, prefix: str) -> Iterator[str]:
        validate_prefix(prefix)
        return iter([key for key in list(self._data) if key.startswith(prefix)])

    def list_dir(self, prefix: str) -> list[str]:
        validate_prefix(prefix)
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        start = len(prefix)
        return sorted({key[start:].partition("/")[0] for key in list(self._data) if key.startswith(prefix)})

    # -- identity ----------------------------------------------------------------
    @property
    def location(self) -> tuple[str, int]:
        return ("memory", id(self._data))

    def _check_writable(self, key: str) -> None:
        if self.read_only:
            raise ReadOnlyError(
                f"cannot write {key!r}: {self!r} is read-only (open it with mode 'r+', 'a' or 'w' to write)"
            )

    def __eq__(self, other: object) -> bool:
        # Two stores are the same store when they share one dict.
        return isinstance(other, MemoryStore) and other._data is self._data and other.read_only == self.read_only

    def __hash__(self) -> int:
        return hash((MemoryStore, id(self._data), self.read_only))

    def __repr__(self) -> str:
        flag = ", read_only=True" if self.read_only else ""
        return f"MemoryStore(<{len(self._data)} keys at {id(self._data):#x}>{flag})"
