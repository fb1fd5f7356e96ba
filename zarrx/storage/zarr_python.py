"""zarr-python's stores (and arrays) used by zarrx: the bytes another library already opened.

Code moving from ``dask.array.from_zarr``/``to_zarr`` or ``xr.open_zarr`` often holds a
zarr-python object -- a ``zarr.storage.MemoryStore``, ``LocalStore``, ``FsspecStore``, or a
``zarr.Array`` made with ``zarr.zeros(...)``. :class:`ZarrPythonStore` is a zarrx
:class:`~zarrx.storage.Store` over such a store: every call runs the store's coroutines on
zarr-python's own event loop (``zarr.core.sync.sync``), a batch of keys as one ``gather``.
zarr-python is imported only when one of its objects is passed in, so zarrx does not need it.

:func:`is_zarr_python_store` and :func:`zarr_python_array_location` recognise the objects
(by their module, since zarrx does not import zarr-python to compare classes).
"""

from __future__ import annotations

import asyncio
from typing import Any, Iterator, Mapping, Sequence

from zarrx.errors import ReadOnlyError, StoreError
from zarrx.storage.paths import validate_key, validate_prefix
from zarrx.storage.store import (
    ByteRequest,
    OffsetByteRequest,
    RangeByteRequest,
    Store,
    SuffixByteRequest,
)

__all__ = ["ZarrPythonStore", "is_zarr_python_store", "zarr_python_array_location"]


def _from_zarr_python(obj: Any) -> bool:
    return type(obj).__module__.split(".")[0] == "zarr"


def is_zarr_python_store(obj: Any) -> bool:
    """Whether ``obj`` is a zarr-python 3 store (``zarr.abc.store.Store``).

    Examples
    --------
    >>> is_zarr_python_store({})
    False
    """
    return _from_zarr_python(obj) and all(hasattr(obj, name) for name in ("get", "set", "list_dir", "read_only"))


def zarr_python_array_location(obj: Any) -> tuple["ZarrPythonStore", str] | None:
    """``(store, path)`` of a zarr-python ``Array``, None for anything else.

    Examples
    --------
    >>> zarr_python_array_location([1, 2, 3]) is None
    True
    """
    if not (_from_zarr_python(obj) and hasattr(obj, "store_path") and hasattr(obj, "shape")):
        return None
    store = obj.store_path.store
    return ZarrPythonStore(store), str(obj.store_path.path).strip("/")


class ZarrPythonStore(Store):
    """A zarr-python 3 store as a zarrx store (see the module docstring).

    Parameters
    ----------
    store
        The zarr-python store (``zarr.storage.MemoryStore({})``, ``LocalStore(path)``, ...).
    read_only
        Refuse writes; a read-only zarr-python store is read-only here too.
    """

    def __init__(self, store: Any, read_only: bool = False) -> None:
        self._store = store
        self.read_only = bool(read_only or store.read_only)

    @property
    def supports_partial_reads(self) -> bool:  # type: ignore[override]
        return bool(getattr(self._store, "supports_partial_reads", True))

    @property
    def location(self) -> Any:
        return ("zarr-python", self._store)

    # -- running coroutines ------------------------------------------------------
    @staticmethod
    def _run(coroutine: Any) -> Any:
        from zarr.core.sync import sync

        return sync(coroutine)

    @staticmethod
    def _prototype() -> Any:
        from zarr.core.buffer import default_buffer_prototype

        return default_buffer_prototype()

    @staticmethod
    def _byte_request(byte_range: ByteRequest | None) -> Any:
        if byte_range is None:
            return None
        from zarr.abc import store as peer

        match byte_range:
            case RangeByteRequest(start, end):
                return peer.RangeByteRequest(start, end)
            case OffsetByteRequest(offset):
                return peer.OffsetByteRequest(offset)
            case SuffixByteRequest(suffix):
                return peer.SuffixByteRequest(suffix)
        raise TypeError(f"expected a ByteRequest or None, found {byte_range!r}")

    async def _get(self, key: str, byte_range: ByteRequest | None) -> bytes | None:
        if isinstance(byte_range, RangeByteRequest) and byte_range.end <= byte_range.start:
            return b"" if await self._store.exists(key) else None  # an empty range reads nothing
        try:
            value = await self._store.get(key, self._prototype(), self._byte_request(byte_range))
        except (OSError, ValueError) as error:
            raise StoreError(f"reading {key!r} from zarr-python store {self._store!r} failed: {error}") from error
        return None if value is None else value.to_bytes()

    # -- reading -----------------------------------------------------------------
    def get(self, key: str, byte_range: ByteRequest | None = None) -> bytes | None:
        return self._run(self._get(validate_key(key), byte_range))

    def get_many(self, keys: Sequence[str]) -> dict[str, bytes | None]:
        keys = [validate_key(key) for key in keys]

        async def gather() -> list[bytes | None]:
            return await asyncio.gather(*(self._get(key, None) for key in keys))

        return dict(zip(keys, self._run(gather())))

    def get_ranges(self, requests: Sequence[tuple[str, ByteRequest]]) -> list[bytes | None]:
        async def gather() -> list[bytes | None]:
            return await asyncio.gather(*(self._get(validate_key(key), byte_range) for key, byte_range in requests))

        return self._run(gather())

    # -- writing -----------------------------------------------------------------
    def _check_writable(self, key: str) -> None:
        if self.read_only:
            raise ReadOnlyError(f"cannot write {key!r}: zarr-python store {self._store!r} is read-only")

    def set(self, key: str, value: bytes) -> None:
        self.set_many({key: value})

    def set_many(self, items: Mapping[str, bytes]) -> None:
        for key in items:
            self._check_writable(validate_key(key))
        buffer = self._prototype().buffer

        async def gather() -> None:
            await asyncio.gather(*(self._store.set(key, buffer.from_bytes(bytes(value))) for key, value in items.items()))

        self._run(gather())

    def delete(self, key: str) -> None:
        self._check_writable(validate_key(key))
        self._run(self._store.delete(key))

    def delete_prefix(self, prefix: str) -> None:
        self._check_writable(validate_prefix(prefix))
        keys = list(self.list_prefix(prefix))

        async def gather() -> None:
            await asyncio.gather(*(self._store.delete(key) for key in keys))

        self._run(gather())

    # -- listing -----------------------------------------------------------------
    def list_prefix(self, prefix: str) -> Iterator[str]:
        validate_prefix(prefix)
        # zarr-python's stores list folders; a prefix here is a string prefix ("a/b" finds "a/bc/...")
        folder = prefix.rpartition("/")[0] + "/" if "/" in prefix else ""

        async def collect() -> list[str]:
            return [key async for key in self._store.list_prefix(folder) if key.startswith(prefix)]

        return iter(self._run(collect()))

    def list_dir(self, prefix: str) -> list[str]:
        validate_prefix(prefix)
        prefix = prefix.rstrip("/")

        async def collect() -> list[str]:
            return [name.rstrip("/") async for name in self._store.list_dir(prefix)]

        return sorted(set(self._run(collect())))

    def __repr__(self) -> str:
        flag = ", read_only=True" if self.read_only else ""
        return f"ZarrPythonStore({self._store!r}{flag})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, ZarrPythonStore) and other._store == self._store and other.read_only == self.read_only
        )

    def __hash__(self) -> int:
        return hash((ZarrPythonStore, repr(self._store), self.read_only))
