"""obstore's stores as zarrx stores: the Rust ``object_store`` crate behind zarrx's own pacing.

`obstore <https://developmentseed.org/obstore/>`_ reads and writes S3, GCS, Azure, HTTP (WebDAV),
local files and memory through Rust's ``object_store``. :class:`ObstoreStore` is a zarrx
:class:`~zarrx.storage.Store` over any of its store objects (``obstore.store.S3Store``,
``GCSStore``, ``AzureStore``, ``HTTPStore``, ``LocalStore``, ``MemoryStore``, and any object
obstore's functions accept), given directly or built from a URL by
:mod:`zarrx.storage.obstore_urls`. Its requests are obstore's *async* calls
(``obstore.get_async``, ``put_async``, ...), which run on obstore's own Rust runtime and are
awaited on fsspec's event loop, so a batch keeps many requests in flight for the price of a
coroutine each, and get what zarrx's own remote stores get (:mod:`zarrx.storage.transfers`):

* each waits for a slot of the :class:`~zarrx.storage.limiter.HostLimiter` of its host (the
  endpoint of an ``S3Store``, the URL of an ``HTTPStore``, the bucket of a ``GCSStore``, ...),
  shared with every other zarrx store reading that host;
* a transient failure (a timeout, "error sending request", 429/500/502/503/504) is retried by zarrx
  after a jittered backoff, at most ``zarrx_retries`` times, within ``zarrx_request_deadline`` and
  ``zarrx_batch_deadline``, and an answer saying overload (503 SlowDown, 429, a timeout) shrinks the
  host's window. The stores zarrx builds from URLs have obstore's own retries off, so zarrx sees
  every answer; a store given to zarrx keeps the retries it was made with, within zarrx's deadlines;
* every obstore exception becomes a :class:`~zarrx.errors.StoreError` (a
  :class:`~zarrx.errors.StoreTimeoutError` for timeouts) naming the key and the store; obstore's
  ``NotFoundError`` is a missing key (None), except for a bucket that does not exist;
* a whole value is a plain ``GET`` (no ``Range`` header), refused before its body is read when
  its size is over the caller's ``max_size``; a byte range is a ranged ``GET`` whose answer is
  cut to the range asked for, whatever the server sent (``python -m http.server`` answers every
  range with the whole object; a ``(start, end)`` range it refuses is read whole and cut).

Conditional writes (``conditional_writes``, :mod:`zarrx.storage.metadata_updates`) are obstore's
put modes: ``get_versioned`` reads a value and its ETag from *one* answer, ``set_if`` writes with
``mode={"e_tag": ...}`` (``If-Match``) or ``mode="create"`` (``If-None-Match: *``) -- S3, GCS,
Azure and memory; an obstore ``LocalStore`` locks its root folder instead (``locks_metadata``).
"""

from __future__ import annotations

import asyncio
import os
import time
from functools import partial
from typing import Any, Awaitable, Callable, Iterator, Mapping, Sequence

from zarrx.errors import ReadOnlyError, StoreError, StoreTimeoutError
from zarrx.storage.foreign_threads import check_not_forked, runtime_used
from zarrx.storage.metadata_updates import HAS_FILE_LOCKS, folder_lock, object_file_locks
from zarrx.storage.paths import validate_key, validate_prefix
from zarrx.storage.remote import RemoteOptions
from zarrx.storage.obstore_reads import (
    MissingBucket, ObstoreReader, TimedOut, call, first_paragraph, not_found, store_host,
)  # fmt: skip
from zarrx.storage.store import ByteRequest, Store, open_bounds
from zarrx.storage.transfers import Attempt, ObjectRead, Transfers, describe_failure
from zarrx.storage.zarr_python_reads import _Failure, _OnLoop

__all__ = ["ObstoreStore", "is_obstore_store", "CONDITIONAL_STORES"]

#: obstore store classes whose puts take ``mode="create"`` and ``mode={"e_tag": ...}``
CONDITIONAL_STORES = frozenset({"S3Store", "GCSStore", "AzureStore", "MemoryStore"})


def is_obstore_store(obj: Any) -> bool:
    """Whether ``obj`` is one of obstore's store objects (``S3Store``, ``HTTPStore``, ...).

    Recognised by type: an instance of a class of ``obstore.store`` (looked up only once obstore
    is imported -- an obstore store exists only then).

    Examples
    --------
    >>> is_obstore_store({})
    False
    """
    import sys

    module = sys.modules.get("obstore.store")
    if module is None:
        return False
    kinds = tuple(getattr(module, name) for name in ("S3Store", "GCSStore", "AzureStore", "HTTPStore",
                                                      "LocalStore", "MemoryStore") if hasattr(module, name))  # fmt: skip
    return isinstance(obj, kinds)


class ObstoreStore(Store):
    """An obstore store object as a zarrx store (see the module docstring).

    Parameters
    ----------
    store
        The obstore store (``obstore.store.S3Store("bucket", prefix="data.zarr")``,
        ``HTTPStore.from_url(...)``, ``LocalStore(root)``, ``MemoryStore()``, ...); its prefix is
        the root of the keys.
    read_only
        Refuse writes with :class:`~zarrx.errors.ReadOnlyError`.
    options
        zarrx's remote options (concurrency cap, retries, deadlines, read size limit); default:
        from the environment, else the defaults of :mod:`zarrx.storage.remote`.

    Examples
    --------
    >>> from obstore.store import MemoryStore
    >>> store = ObstoreStore(MemoryStore())
    >>> store.set("a/zarr.json", b"{}")
    >>> store.get_many(["a/zarr.json", "b"]), store.list_dir("")
    ({'a/zarr.json': b'{}', 'b': None}, ['a'])
    """

    def __init__(self, store: Any, read_only: bool = False, options: RemoteOptions | None = None) -> None:
        self._store = store
        self.read_only = bool(read_only)
        self.options = options if options is not None else RemoteOptions()
        self._transfers: Transfers | None = None
        self._transfers_pid = 0

    @property
    def obstore(self) -> Any:
        """The obstore store object."""
        return self._store

    def __getstate__(self) -> dict[str, Any]:
        if self.process_local:
            raise StoreError(
                f"cannot send {self!r} to another process (an obstore MemoryStore lives in the one that made "
                "it); use dask's threaded scheduler, or a LocalStore, S3Store, ..."
            )
        return {"_store": self._store, "read_only": self.read_only, "options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _transfers=None, _transfers_pid=0)

    # -- abilities -----------------------------------------------------------------
    @property
    def _kind(self) -> str:
        return type(self._store).__name__

    @property
    def supports_listing(self) -> bool:  # type: ignore[override]
        return self._kind != "HTTPStore"  # obstore lists a web server by WebDAV only

    @property
    def process_local(self) -> bool:  # type: ignore[override]
        return self._kind == "MemoryStore"

    @property
    def preferred_concurrency(self) -> int:  # type: ignore[override]
        return self.options.max_concurrency

    @property
    def conditional_writes(self) -> bool:  # type: ignore[override]
        return self._kind in CONDITIONAL_STORES

    @property
    def locks_metadata(self) -> bool:  # type: ignore[override]
        return self._root_folder() is not None

    def lock_metadata(self) -> Any:
        folder = self._root_folder()
        return folder_lock(folder) if folder is not None else super().lock_metadata()

    @property
    def locks_objects(self) -> bool:  # type: ignore[override]
        return HAS_FILE_LOCKS and not self.read_only and self._root_folder() is not None

    def lock_objects(self, keys: Any) -> Any:
        folder = self._root_folder() if self.locks_objects else None
        return object_file_locks(folder, keys) if folder is not None else super().lock_objects(keys)

    def _root_folder(self) -> str | None:
        """The folder of an obstore ``LocalStore`` (whose puts cannot be conditional on a version)."""
        prefix = getattr(self._store, "prefix", None) if self._kind == "LocalStore" else None
        return str(prefix) if prefix is not None else None

    @property
    def location(self) -> Any:
        if self.process_local:
            return ("obstore", id(self._store))
        config = getattr(self._store, "config", None)
        # the configuration without credentials: stores reading the same data with other keys are equal
        settings = tuple(sorted((str(k), str(v)) for k, v in (config or {}).items()
                                if not any(word in str(k) for word in ("secret", "token", "key", "sas"))))  # fmt: skip
        return ("obstore", self._kind, store_host(self._store), repr(self._store), settings)

    # -- requests ------------------------------------------------------------------
    @property
    def transfers(self) -> Transfers:
        check_not_forked(self)  # obstore's requests in a process forked after it ran some never end
        if self._transfers is None or self._transfers_pid != os.getpid():
            from fsspec.asyn import get_loop

            runtime_used()
            self._transfers = Transfers(_OnLoop(get_loop()), ObstoreReader(self._store), self.options)
            self._transfers_pid = os.getpid()  # (a forked child makes its own, on its own loop)
        return self._transfers

    def url(self, key: str = "") -> str:
        """Where ``key`` is (``s3://bucket/prefix/key``, the URL of a web server's, a file's path),
        for messages; the store's repr and the key for a store of no known URL."""
        config, prefix = getattr(self._store, "config", None) or {}, getattr(self._store, "prefix", None)
        scheme = {"S3Store": "s3", "GCSStore": "gs", "AzureStore": "az"}.get(self._kind)
        base = getattr(self._store, "url", None) if self._kind == "HTTPStore" else None
        if scheme and config.get("bucket" if scheme != "az" else "container_name"):
            base = f"{scheme}://{config['bucket' if scheme != 'az' else 'container_name']}"
            base += f"/{str(prefix).strip('/')}" if prefix else ""
        elif self._kind == "LocalStore" and prefix is not None:
            base = str(prefix).rstrip("/")
        if not isinstance(base, str):
            return f"{key!r} of obstore {self._store!r}"
        return f"{base.rstrip('/')}/{key}" if key else base

    def _error(self, action: str, key: str, error: BaseException) -> StoreError:
        cause = error.__cause__ if isinstance(error, (_Failure, TimedOut)) and error.__cause__ is not None else error
        timed_out, detail = describe_failure(cause, self.options)
        timed_out = timed_out or isinstance(error, TimedOut)
        error_class = StoreTimeoutError if timed_out else StoreError
        where = "(the bucket does not exist) " if isinstance(error, MissingBucket) else ""
        if "PROPFIND" in detail:  # an HTTPStore lists by WebDAV, which most web servers do not answer
            where = ("(the web server does not list folders by WebDAV, which obstore's HTTPStore lists with: "
                     "open the hierarchy through its consolidated metadata, or by its URL, which zarrx lists "
                     "from the server's folder pages) ")  # fmt: skip
        return error_class(
            f"could not {action} {key!r} at {self.url(key)} (obstore {self._store!r}): {where}{first_paragraph(detail)}"
        )

    def _value(self, key: str, outcome: Any) -> bytes | None:
        if isinstance(outcome, BaseException):
            raise self._error("read", key, outcome) from outcome
        return outcome

    def _call(self, action: str, key: str, make: Callable[[], Awaitable[Any]]) -> Any:
        """One call of the store (a listing, a delete, a HEAD), paced, retried and bounded in time as
        reads are, errors wrapped."""

        return self.transfers.send(key, lambda: call(make()), partial(self._error, action, key))

    # -- reading -------------------------------------------------------------------
    def _reads(self, requests: Sequence[tuple[str, ByteRequest | None]], max_size: int | None) -> list[ObjectRead]:
        limit = self.options.max_read_size if max_size is None else max_size
        return [ObjectRead(key, validate_key(key), *(open_bounds(byte_range) or (0, 0)), limit)
                for key, byte_range in requests]  # fmt: skip

    def get(self, key: str, byte_range: ByteRequest | None = None) -> bytes | None:
        return self.get_ranges([(key, byte_range)])[0]

    def get_many(self, keys: Sequence[str], *, max_size: int | None = None) -> dict[str, bytes | None]:
        keys = list(dict.fromkeys(keys))
        reads = self._reads([(key, None) for key in keys], max_size)
        # the first failure in the order asked is the one raised
        return {key: self._value(key, outcome) for key, outcome in zip(keys, self.transfers.read_many(reads))}

    def iter_many(self, keys: Sequence[str], *, max_size: int | None = None) -> Iterator[tuple[str, bytes | None]]:
        reads = self._reads([(key, None) for key in dict.fromkeys(keys)], max_size)
        return ((reads[position].key, self._value(reads[position].key, outcome))
                for position, outcome in self.transfers.iter_reads(reads))  # fmt: skip

    def get_ranges(
        self, requests: Sequence[tuple[str, ByteRequest]], *, max_size: int | None = None
    ) -> list[bytes | None]:
        reads = self._reads(requests, max_size)
        # an empty range reads nothing: b"" for a value that exists
        to_read = [position for position, read in enumerate(reads) if read.length != 0]
        outcomes = self.transfers.read_many([reads[position] for position in to_read]) if to_read else []
        results: list[bytes | None] = [None] * len(reads)
        for position, outcome in zip(to_read, outcomes):
            results[position] = self._value(reads[position].key, outcome)
        for position, read in enumerate(reads):
            if read.length == 0:
                results[position] = b"" if self.exists(read.key) else None
        return results

    def exists(self, key: str) -> bool:
        import obstore

        async def head() -> bool:
            try:
                await obstore.head_async(self._store, validate_key(key))
            except FileNotFoundError as error:
                missing = not_found(error)
                if missing is not None:
                    raise missing from error
                return False
            return True

        return bool(self._call("check", key, head))

    # -- conditional writes ------------------------------------------------------------
    def get_versioned(self, key: str) -> tuple[bytes | None, Any]:
        """``(value, {"e_tag": ..., "version": ...})`` of ``key`` from one answer; ``(None, None)`` when absent."""
        import obstore

        async def get() -> tuple[bytes | None, Any]:
            try:
                result = await obstore.get_async(self._store, validate_key(key))
            except FileNotFoundError as error:
                missing = not_found(error)
                if missing is not None:
                    raise missing from error
                return None, None
            meta = result.meta
            return bytes(await result.bytes_async()), {"e_tag": meta.get("e_tag"), "version": meta.get("version")}

        return self._call("read", key, get)

    def set_if(self, key: str, value: bytes, version: Any) -> bool:
        import obstore

        self._check_writable(validate_key(key))
        mode = "create" if version is None else {k: v for k, v in version.items() if v is not None}

        async def put() -> bool:
            try:
                await obstore.put_async(self._store, key, bytes(value), mode=mode)
            except Exception as error:
                if type(error).__name__ in ("AlreadyExistsError", "PreconditionError"):
                    return False  # another writer came first
                raise
            return True

        return bool(self._call("write", key, put))

    # -- writing -------------------------------------------------------------------
    def _check_writable(self, key: str) -> None:
        if self.read_only:
            raise ReadOnlyError(f"cannot write {key!r}: obstore {self._store!r} is opened read-only")

    def set(self, key: str, value: bytes) -> None:
        self.set_many({key: value})

    def set_many(self, items: Mapping[str, bytes]) -> None:
        import obstore

        for key in items:
            self._check_writable(validate_key(key))

        def put(key: str, value: bytes) -> Callable[[Attempt], Awaitable[None]]:
            data = value if isinstance(value, bytes) else bytes(value)

            async def send(attempt: Attempt) -> None:
                sent = time.monotonic()
                await call(obstore.put_async(self._store, key, data))
                attempt.latency = time.monotonic() - sent

            return send

        outcomes = self.transfers.send_many([(key, put(key, value)) for key, value in items.items()])
        for key, outcome in zip(items, outcomes):
            if isinstance(outcome, BaseException):
                raise self._error("write", key, outcome) from outcome

    def delete(self, key: str) -> None:
        self.delete_many([key])

    def delete_many(self, keys: Sequence[str]) -> None:  # type: ignore[override]
        import obstore

        keys = list(keys)
        for key in keys:
            self._check_writable(validate_key(key))
        if not keys:
            return

        async def delete(key: str) -> None:
            try:
                await obstore.delete_async(self._store, key)
            except FileNotFoundError:
                pass  # absent keys are not an error

        async def delete_all() -> None:
            try:  # one request per 1000 keys where the service deletes in bulk (S3's DeleteObjects)
                await obstore.delete_async(self._store, keys)
            except FileNotFoundError:  # a store that refuses absent keys in a bulk delete: one by one
                await asyncio.gather(*(delete(key) for key in keys))

        self._call("delete", keys[0] if len(keys) == 1 else f"{len(keys)} keys", delete_all)

    def delete_prefix(self, prefix: str) -> None:
        self._check_writable(validate_prefix(prefix))
        self.delete_many(list(self.list_prefix(prefix)))

    # -- listing -------------------------------------------------------------------
    def list_prefix(self, prefix: str) -> Iterator[str]:
        import obstore

        validate_prefix(prefix)
        # obstore lists below a folder ("a/b" lists "a/b/..."); a prefix here is a string prefix
        folder = prefix.rpartition("/")[0] if "/" in prefix else None

        async def collect() -> list[str]:
            keys: list[str] = []
            async for batch in obstore.list(self._store, folder, chunk_size=1000):
                keys.extend(meta["path"] for meta in batch if meta["path"].startswith(prefix))
            return keys

        return iter(self._call("list", prefix, collect))

    def list_dir(self, prefix: str) -> list[str]:
        import obstore

        validate_prefix(prefix)
        folder = prefix.rstrip("/") or None

        async def collect() -> list[str]:
            found = await obstore.list_with_delimiter_async(self._store, folder)
            paths = [*found["common_prefixes"], *(meta["path"] for meta in found["objects"])]
            return [path.rstrip("/").rpartition("/")[2] for path in paths]

        return sorted(set(self._call("list", prefix, collect)))

    def __repr__(self) -> str:
        flag = ", read_only=True" if self.read_only else ""
        return f"ObstoreStore({self._store!r}{flag})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ObstoreStore) and other.location == self.location and other.read_only == self.read_only

    def __hash__(self) -> int:
        return hash((ObstoreStore, repr(self.location), self.read_only))
