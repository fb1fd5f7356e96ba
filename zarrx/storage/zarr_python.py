"""zarr-python's stores (and arrays) used by zarrx: the bytes another library already opened.

Code moving from ``dask.array.from_zarr``/``to_zarr`` or ``xr.open_zarr`` often holds a
zarr-python object -- a ``zarr.storage.LocalStore``, ``FsspecStore``, ``ObjectStore`` (obstore),
an ``icechunk.IcechunkStore``, any other subclass of ``zarr.abc.store.Store``, or a ``zarr.Array``.
:class:`ZarrPythonStore` is a zarrx :class:`~zarrx.storage.Store` over such a store: every call
runs the store's coroutines on zarr-python's own event loop (where the store's sessions live),
and its requests get what zarrx's own remote stores get (:mod:`zarrx.storage.transfers`):

* each waits for a slot of the :class:`~zarrx.storage.limiter.HostLimiter` of the store's host
  (the URL the store reads, else the store's class), so a batch of 256 chunks never sends 256
  requests at once, and the window grows while answers come as fast;
* a transient failure (a timeout, a connection reset or refused, "error sending request") is
  retried after a jittered backoff, at most ``zarrx_retries`` times, within
  ``zarrx_request_deadline`` and ``zarrx_batch_deadline`` (:class:`~zarrx.storage.remote.RemoteOptions`,
  given to :func:`~zarrx.storage.make_store` as ``storage_options={"zarrx_...": ...}``);
* every exception of the store becomes a :class:`~zarrx.errors.StoreError` (a
  :class:`~zarrx.errors.StoreTimeoutError` for timeouts) naming the key and the store;
* a whole value is asked for whole (no byte range from 0, which ``ObjectStore`` sends as
  ``Range: bytes=0-`` and servers without ranges refuse); a value larger than the caller's
  ``max_size`` is refused (after the read: zarr-python's stores have no bound on a body).

The store's abilities are its own (``supports_consolidated_metadata``: Icechunk keeps none);
an Icechunk session's store (``icechunk.IcechunkStore``) is ``transactional`` -- its writes wait
for the commit, so zarrx sends them as made, a node before its chunks -- and, like a
zarr-python ``MemoryStore``, ``process_local`` when writable: a pickled copy (a fork sent to a
worker) keeps the writes made with it, so zarrx never sends a write task to another process.

The objects are recognised by type -- ``isinstance(obj, zarr.abc.store.Store)``,
``isinstance(obj, zarr.Array)`` -- looked up in ``sys.modules`` only: a zarr-python object exists
only once zarr-python is imported, so zarrx never imports it itself.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from functools import partial
from typing import Any, Awaitable, Callable, Iterator, Mapping, Sequence

from zarrx.errors import ReadOnlyError, StoreError, StoreTimeoutError
from zarrx.storage.foreign_threads import check_not_forked, runtime_used, settle_at_exit
from zarrx.storage.http import host_of
from zarrx.storage.limiter import MIN_SLOW_CONNECT, SLOW_CONNECT_FACTOR
from zarrx.storage.paths import validate_key, validate_prefix
from zarrx.storage.remote import RemoteOptions
from zarrx.storage.store import (
    ByteRequest,
    OffsetByteRequest,
    RangeByteRequest,
    Store,
    SuffixByteRequest,
)
from zarrx.storage.transfers import Attempt, BodyTooLarge, ObjectRead, Transfers, describe_failure

__all__ = ["ZarrPythonStore", "is_zarr_python_store", "zarr_python_array_location", "ACCEPTED_STORES"]

#: what :func:`~zarrx.storage.make_store` accepts, for its error message
ACCEPTED_STORES = (
    "a path, a URL ('s3://bucket/data.zarr', 'https://...', 'memory://x'), an fsspec FSMap, a dict, None, "
    "a zarrx Store, or a zarr-python store (any zarr.abc.store.Store: LocalStore, FsspecStore, ObjectStore, "
    "icechunk's IcechunkStore, ...)"
)


def _loaded(module: str, name: str) -> type | None:
    """``module.name`` when zarr-python is already imported, else None (never imports it)."""
    return getattr(sys.modules.get(module), name, None)


def is_zarr_python_store(obj: Any) -> bool:
    """Whether ``obj`` is a zarr-python 3 store: an instance of ``zarr.abc.store.Store``,
    third-party subclasses (``icechunk.IcechunkStore``) included.

    Examples
    --------
    >>> is_zarr_python_store({})
    False
    """
    base = _loaded("zarr.abc.store", "Store")
    return base is not None and isinstance(obj, base)


def _is_session_store(store: Any) -> bool:
    """Whether ``store`` is an Icechunk session's store (``icechunk.IcechunkStore``), never importing icechunk."""
    kind = _loaded("icechunk.store", "IcechunkStore")
    return kind is not None and isinstance(store, kind)


def zarr_python_array_location(obj: Any) -> tuple["ZarrPythonStore", str] | None:
    """``(store, path)`` of a zarr-python ``Array`` (or ``AsyncArray``), None for anything else.

    Examples
    --------
    >>> zarr_python_array_location([1, 2, 3]) is None
    True
    """
    classes = tuple(c for c in (_loaded("zarr.core.array", "Array"), _loaded("zarr.core.array", "AsyncArray")) if c)
    if not classes or not isinstance(obj, classes):
        return None
    return ZarrPythonStore(obj.store_path.store), str(obj.store_path.path).strip("/")


def store_host(store: Any) -> str:
    """What a zarr-python store's requests are paced by: ``scheme://host:port`` of the URL it
    reads (an ``ObjectStore``'s obstore store, an ``FsspecStore``'s HTTP path), else its class.

    Examples
    --------
    >>> store_host(object())
    'builtins.object'
    """
    inner = getattr(store, "store", None)
    url = getattr(inner, "url", None)
    if not isinstance(url, str):
        path, fs = getattr(store, "path", None), getattr(store, "fs", None)
        url = path if isinstance(path, str) and fs is not None and "://" in path else None
    if isinstance(url, str) and "://" in url:
        return host_of(url)
    kind = type(store)
    return f"{kind.__module__}.{kind.__qualname__}"


#: signs, in the text of a store's error, of a connection failing (object_store's, reqwest's, aiohttp's)
CONNECTION_FAILURES = (
    "error sending request", "connection reset", "connection refused", "connection closed", "broken pipe",
    "connection aborted", "incomplete message", "unexpected eof",
)  # fmt: skip


#: a late read is sent again at most this many times (see ``_Reader._hedged``)
HEDGES = 3


class _Failure(ConnectionError):
    """A store's error whose text says a connection failed: a transient failure, a sign of overload."""


def _bounds(byte_range: ByteRequest | None) -> tuple[int | None, int | None]:
    """``(start, end)`` as fsspec's ``cat_file`` takes them; a range from 0 to the end is the whole value."""
    match byte_range:
        case None | OffsetByteRequest(0):
            return None, None
        case RangeByteRequest(start, end):
            return start, end
        case OffsetByteRequest(offset):
            return offset, None
        case SuffixByteRequest(suffix):
            return (-suffix, None) if suffix else (0, 0)  # the last 0 bytes: an empty range
    raise TypeError(f"expected a ByteRequest or None, found {byte_range!r}")


class _Reader:
    """Reads one value of a zarr-python store for :class:`~zarrx.storage.transfers.Transfers`."""

    #: zarrx retries (the store's own library may retry too: obstore does, within its own limits)
    retries = True
    #: the store opens its connections out of sight: an answer's latency includes their set-up
    sees_connections = False

    def __init__(self, store: Any) -> None:
        self.store = store
        self._host = store_host(store)
        #: requests in flight the host starts with: what zarr-python itself keeps (its
        #: ``async.concurrency``), which the store's server is known to take
        self.initial_requests = _zarr_concurrency()

    def host(self, path: str) -> str:
        return self._host

    async def read(self, read: ObjectRead, attempt: Attempt) -> bytes | None:
        from zarr.abc import store as peer
        from zarr.core.buffer import default_buffer_prototype

        start, end = read.start, read.end
        if start is None and end is None:
            request = None
        elif start is not None and start < 0:
            request = peer.SuffixByteRequest(-start)
        elif end is None:
            request = peer.OffsetByteRequest(start)
        elif end <= start:
            return b"" if await _call(self.store.exists(read.path)) else None  # an empty range reads nothing
        else:
            request = peer.RangeByteRequest(start, end)
        value = await _hedged(lambda: self.store.get(read.path, default_buffer_prototype(), request), attempt)
        if value is None:
            return None
        data = value.to_bytes()
        if len(data) > read.limit:
            raise BodyTooLarge(len(data), read.limit, declared=False)
        return data


async def _call(awaitable: Awaitable[Any]) -> Any:
    """Await a store's call; a connection failure told only in the error's text becomes :class:`_Failure`."""
    try:
        return await awaitable
    except (ConnectionError, TimeoutError, asyncio.TimeoutError, StoreError):
        raise
    except Exception as error:
        text = str(error).lower()
        if any(sign in text for sign in CONNECTION_FAILURES):
            raise _Failure(f"{type(error).__name__}: {error}") from error
        raise


def _zarr_concurrency() -> int | None:
    try:
        from zarr import config

        return int(config.get("async.concurrency"))
    except Exception:  # noqa: BLE001 (a zarr-python without the setting: zarrx's default)
        return None


async def _hedged(make: Callable[[], Awaitable[Any]], attempt: Attempt) -> Any:
    """``make()``'s answer; sent once more while it is late (:data:`HEDGES` times at most,
    each after twice the wait of the one before), the first answer taken, the others cancelled.

    An answer later than a slow connect of the host (eight times its lowest latency, at
    least 0.1 s) most likely waits for a connection attempt a full listen backlog dropped,
    which TCP sends again only after a second; a new request opens a new connection. The
    late request is a sign of overload for the host's window.
    """
    limiter = attempt.limiter
    baseline = limiter.baseline
    wait = None if baseline is None else max(MIN_SLOW_CONNECT, SLOW_CONNECT_FACTOR * baseline)
    sent: dict[asyncio.Future, float] = {asyncio.ensure_future(_call(make())): time.monotonic()}
    pending = set(sent)
    hedges = 0
    try:
        while True:
            timeout = None if wait is None or hedges >= HEDGES else wait * 2**hedges
            done, pending = await asyncio.wait(pending, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            answered = [task for task in done if task.exception() is None]
            if answered or (done and not pending):
                task = (answered or list(done))[0]
                attempt.latency = time.monotonic() - sent[task]
                return task.result()
            if done:
                continue  # one of them failed: wait for the others
            if hedges == 0:
                limiter.overloaded("timeout", attempt.in_flight)
            hedges += 1
            task = asyncio.ensure_future(_call(make()))
            sent[task] = time.monotonic()
            pending.add(task)
    finally:
        for task in pending:
            task.cancel()


class _OnLoop:
    """What :class:`Transfers` needs of a file system: the event loop its requests run on."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop


async def _opened(store: Any) -> asyncio.AbstractEventLoop:
    """zarr-python's event loop, with ``store`` opened on it as zarr-python opens a store before
    its first call (``StorePath.open`` with no mode only opens it): a ``ZipStore`` makes its
    zip file and lock there, and fails every call before it."""
    from zarr.storage import StorePath

    await StorePath.open(store, "", mode=None)
    return asyncio.get_running_loop()


def _reads_through_obstore(store: Any) -> bool:
    """Whether ``store`` is zarr-python's ``ObjectStore`` (obstore underneath)."""
    kind = _loaded("zarr.storage", "ObjectStore")
    return kind is not None and isinstance(store, kind)


class ZarrPythonStore(Store):
    """A zarr-python 3 store as a zarrx store (see the module docstring).

    Parameters
    ----------
    store
        The zarr-python store (``zarr.storage.LocalStore(path)``, ``ObjectStore(...)``,
        ``session.store`` of icechunk, ...).
    read_only
        Refuse writes; a read-only zarr-python store is read-only here too.
    options
        zarrx's remote options (concurrency cap, retries, deadlines); default: from the
        environment, else the defaults of :mod:`zarrx.storage.remote`.

    Examples
    --------
    >>> import zarr
    >>> store = ZarrPythonStore(zarr.storage.MemoryStore({}))
    >>> store.set("a", b"1"); store.get_many(["a", "b"])
    {'a': b'1', 'b': None}
    """

    def __init__(self, store: Any, read_only: bool = False, options: RemoteOptions | None = None) -> None:
        self._store = store
        self.read_only = bool(read_only or store.read_only)
        self.options = options if options is not None else RemoteOptions()
        self._transfers: Transfers | None = None
        self._transfers_pid = 0
        if _reads_through_obstore(store):
            settle_at_exit()

    def __getstate__(self) -> dict[str, Any]:
        return {"_store": self._store, "read_only": self.read_only, "options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _transfers=None, _transfers_pid=0)

    @property
    def _tokio(self) -> bool:
        """Whether obstore (zarr-python's ``ObjectStore``) or Icechunk runs the requests: on tokio's
        threads, which a fork does not copy."""
        return _reads_through_obstore(self._store) or _is_session_store(self._store)

    @property
    def supports_partial_reads(self) -> bool:  # type: ignore[override]
        return bool(getattr(self._store, "supports_partial_reads", True))

    @property
    def supports_listing(self) -> bool:  # type: ignore[override]
        return bool(getattr(self._store, "supports_listing", True))

    @property
    def supports_consolidated_metadata(self) -> bool:  # type: ignore[override]
        return bool(getattr(self._store, "supports_consolidated_metadata", True))

    @property
    def transactional(self) -> bool:  # type: ignore[override]
        return _is_session_store(self._store)

    @property
    def process_local(self) -> bool:  # type: ignore[override]
        # a pickled copy of a zarr-python MemoryStore, or of a writable Icechunk session (a fork),
        # keeps the writes made with it to itself: zarrx never sends such a write to another process
        memory = _loaded("zarr.storage", "MemoryStore")
        return (memory is not None and isinstance(self._store, memory)) or (
            _is_session_store(self._store) and not self.read_only
        )

    @property
    def location(self) -> Any:
        return ("zarr-python", self._store)

    # -- running requests on zarr-python's loop --------------------------------------
    @property
    def transfers(self) -> Transfers:
        tokio = self._tokio
        if tokio:
            check_not_forked(self)  # obstore's or Icechunk's requests never end after such a fork
        if self._transfers is None or self._transfers_pid != os.getpid():  # (zarr-python's loop too is new)
            from zarr.core.sync import sync

            if tokio:
                runtime_used()
            try:
                loop = sync(_opened(self._store))
            except Exception as error:  # noqa: BLE001 (any store's own failure to open, told as zarrx's)
                detail = f"{type(error).__name__}: {error}"
                raise StoreError(f"could not open zarr-python store {self._store!r}: {detail}") from error
            self._transfers = Transfers(_OnLoop(loop), _Reader(self._store), self.options)
            self._transfers_pid = os.getpid()
        return self._transfers

    def _error(self, action: str, key: str, error: BaseException) -> StoreError:
        cause = error.__cause__ if isinstance(error, _Failure) and error.__cause__ is not None else error
        timed_out, detail = describe_failure(cause, self.options)
        detail = detail.split("\n\n")[0]  # the first paragraph (obstore's go on with a debug dump): the cause has all
        error_class = StoreTimeoutError if timed_out else StoreError
        return error_class(f"could not {action} {key!r} in zarr-python store {self._store!r}: {detail}")

    def _value(self, key: str, outcome: Any) -> bytes | None:
        if isinstance(outcome, BaseException):
            raise self._error("read", key, outcome) from outcome
        return outcome

    def _reads(self, requests: Sequence[tuple[str, ByteRequest | None]], max_size: int | None) -> list[ObjectRead]:
        limit = self.options.max_read_size if max_size is None else max_size
        return [ObjectRead(key, validate_key(key), *_bounds(byte_range), limit) for key, byte_range in requests]

    def _call(self, action: str, key: str, make: Callable[[], Awaitable[Any]]) -> Any:
        """One call of the store (a listing, a delete, an ``exists``), paced, retried and bounded in
        time as reads are (a walk of a hierarchy lists many groups at once), errors wrapped."""
        return self.transfers.send(key, lambda: _call(make()), partial(self._error, action, key))

    # -- reading -----------------------------------------------------------------
    def get(self, key: str, byte_range: ByteRequest | None = None) -> bytes | None:
        return self.get_ranges([(key, byte_range)])[0]

    def get_many(self, keys: Sequence[str], *, max_size: int | None = None) -> dict[str, bytes | None]:
        return dict(self.iter_many(keys, max_size=max_size))

    def iter_many(self, keys: Sequence[str], *, max_size: int | None = None) -> Iterator[tuple[str, bytes | None]]:
        reads = self._reads([(key, None) for key in dict.fromkeys(keys)], max_size)
        return ((reads[position].key, self._value(reads[position].key, outcome))
                for position, outcome in self.transfers.iter_reads(reads))  # fmt: skip

    def get_ranges(
        self, requests: Sequence[tuple[str, ByteRequest]], *, max_size: int | None = None
    ) -> list[bytes | None]:
        reads = self._reads(requests, max_size)
        return [self._value(read.key, outcome) for read, outcome in zip(reads, self.transfers.read_many(reads))]

    def exists(self, key: str) -> bool:
        return bool(self._call("check", key, lambda: self._store.exists(validate_key(key))))

    # -- writing -----------------------------------------------------------------
    def _check_writable(self, key: str) -> None:
        if self.read_only:
            raise ReadOnlyError(f"cannot write {key!r}: zarr-python store {self._store!r} is read-only")

    def set(self, key: str, value: bytes) -> None:
        self.set_many({key: value})

    def set_many(self, items: Mapping[str, bytes]) -> None:
        for key in items:
            self._check_writable(validate_key(key))
        from zarr.core.buffer import default_buffer_prototype

        buffer = default_buffer_prototype().buffer

        def put(key: str, value: bytes) -> Callable[[Attempt], Awaitable[None]]:
            async def send(attempt: Attempt) -> None:
                sent = time.monotonic()
                await _call(self._store.set(key, buffer.from_bytes(bytes(value))))
                attempt.latency = time.monotonic() - sent

            return send

        outcomes = self.transfers.send_many([(key, put(key, value)) for key, value in items.items()])
        for key, outcome in zip(items, outcomes):
            if isinstance(outcome, BaseException):
                raise self._error("write", key, outcome) from outcome

    def delete(self, key: str) -> None:
        self._check_writable(validate_key(key))
        self._call("delete", key, lambda: self._store.delete(key))

    def delete_prefix(self, prefix: str) -> None:
        self._check_writable(validate_prefix(prefix))
        keys = list(self.list_prefix(prefix))
        self._call("delete", prefix, lambda: asyncio.gather(*(self._store.delete(key) for key in keys)))

    # -- listing -----------------------------------------------------------------
    def list_prefix(self, prefix: str) -> Iterator[str]:
        validate_prefix(prefix)
        # zarr-python's stores list folders; a prefix here is a string prefix ("a/b" finds "a/bc/...")
        folder = prefix.rpartition("/")[0] + "/" if "/" in prefix else ""

        async def collect() -> list[str]:
            return [key async for key in self._store.list_prefix(folder) if key.startswith(prefix)]

        return iter(self._call("list", prefix, collect))

    def list_dir(self, prefix: str) -> list[str]:
        validate_prefix(prefix)
        prefix = prefix.rstrip("/")

        async def collect() -> list[str]:
            return [name.rstrip("/") async for name in self._store.list_dir(prefix)]

        return sorted(set(self._call("list", prefix, collect)))

    def __repr__(self) -> str:
        flag = ", read_only=True" if self.read_only else ""
        return f"ZarrPythonStore({self._store!r}{flag})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, ZarrPythonStore) and other._store == self._store and other.read_only == self.read_only
        )

    def __hash__(self) -> int:
        return hash((ZarrPythonStore, repr(self._store), self.read_only))

