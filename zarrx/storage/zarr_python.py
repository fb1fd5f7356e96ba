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

Three of zarr-python's own stores (exactly those classes, not subclasses) are read and written as
zarrx's stores of the same objects instead (:func:`zarrx_store_of`): a ``LocalStore``, or an
``FsspecStore`` or ``ObjectStore`` of local files, as zarrx's :class:`~zarrx.storage.local.LocalStore`
of the folder; any other ``ObjectStore`` as zarrx's :class:`~zarrx.storage.obstore.ObstoreStore`,
any other ``FsspecStore`` (but kerchunk references) as zarrx's
:class:`~zarrx.storage.fsspec.FsspecStore`. zarr-python's stores offer no lock and no conditional
write: through them, processes writing parts of one chunk lost values, and ``FsspecStore`` writes
local files in place, so readers saw them half written.

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

from fsspec.implementations.dirfs import DirFileSystem
from fsspec.implementations.local import LocalFileSystem

from zarrx.errors import ReadOnlyError, StoreError, StoreTimeoutError
from zarrx.storage.foreign_threads import check_not_forked, runtime_used, settle_at_exit
from zarrx.storage.fsspec import FsspecStore
from zarrx.storage.local import LocalStore
from zarrx.storage.obstore import ObstoreStore
from zarrx.storage.paths import validate_key, validate_prefix
from zarrx.storage.readers import beneath_folders
from zarrx.storage.references import is_reference_file_system
from zarrx.storage.remote import RemoteOptions
from zarrx.storage.store import (
    ByteRequest,
    OffsetByteRequest,
    RangeByteRequest,
    Store,
    SuffixByteRequest,
)
from zarrx.storage.transfers import Attempt, ObjectRead, Transfers, describe_failure
from zarrx.storage.zarr_python_reads import _Failure, _OnLoop, _Reader, _call

__all__ = ["ZarrPythonStore", "is_zarr_python_store", "zarr_python_array_location", "zarr_python_folder",
           "zarrx_store_of", "ACCEPTED_STORES"]

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


def zarr_python_folder(store: Any) -> str | None:
    """The local folder whose files are the objects of ``store``, for the zarr-python stores of
    local files zarrx knows exactly -- ``zarr.storage.LocalStore``, an ``ObjectStore`` over
    obstore's ``LocalStore``, an ``FsspecStore`` over fsspec's local file system (or a
    ``DirFileSystem`` of it) -- else None (subclasses, which may do more, included).

    zarrx reads and writes those folders as its own :class:`~zarrx.storage.local.LocalStore`:
    a partial write locks its object against every process of the machine, as it does for a
    path (zarr-python's stores offer no lock, so processes writing parts of one chunk through
    them lost values), and writes are atomic (``FsspecStore``'s are not: a reader saw chunks
    half written).

    Examples
    --------
    >>> import zarr
    >>> zarr_python_folder(zarr.storage.LocalStore("/data/x.zarr"))
    '/data/x.zarr'
    >>> zarr_python_folder(zarr.storage.MemoryStore()) is None
    True
    """
    kind = type(store)
    if kind is _loaded("zarr.storage", "LocalStore"):
        return str(store.root)
    if kind is _loaded("zarr.storage", "ObjectStore"):
        inner = store.store
        local = type(inner) is _loaded("obstore.store", "LocalStore")
        return str(inner.prefix) if local and inner.prefix is not None else None
    if kind is _loaded("zarr.storage", "FsspecStore"):
        fs, path = _beneath(store)
        return path if isinstance(fs, LocalFileSystem) else None
    return None


def _beneath(store: Any) -> tuple[Any, str]:
    """The file system and path of zarr-python's ``FsspecStore`` ``store``, the layers that make a
    synchronous file system asynchronous (``AsyncFileSystemWrapper``) or a folder of another
    (``DirFileSystem``) taken off."""
    wrapper = _loaded("fsspec.implementations.asyn_wrapper", "AsyncFileSystemWrapper")
    fs, path = store.fs, store.path
    while wrapper is not None and isinstance(fs, wrapper) or isinstance(fs, DirFileSystem):
        fs, path = beneath_folders(fs.sync_fs if not isinstance(fs, DirFileSystem) else fs, path)
    return fs, path


def zarrx_store_of(store: Any, read_only: bool = False, options: RemoteOptions | None = None) -> Store:
    """The zarrx store that reads and writes the objects of the zarr-python ``store``: for the
    stores of local files of :func:`zarr_python_folder`, zarrx's :class:`LocalStore` of the
    folder; for zarr-python's own ``ObjectStore``, zarrx's :class:`~zarrx.storage.obstore.ObstoreStore`
    of the same obstore store (a partial write then stores its object only over the version read on
    S3, GCS and Azure: zarr-python's ``ObjectStore`` has no conditional put, and processes writing
    parts of one chunk through it lost values); for any other, :class:`ZarrPythonStore`."""
    read_only = bool(read_only or store.read_only)
    folder = zarr_python_folder(store)
    if folder is not None:
        return LocalStore(folder, read_only=read_only)
    if type(store) is _loaded("zarr.storage", "ObjectStore"):
        return ObstoreStore(store.store, read_only=read_only, options=options)
    fs, path = _file_system(store)
    if fs is not None:
        return FsspecStore(fs, path, read_only=read_only, options=options)
    return ZarrPythonStore(store, read_only, options)


def _file_system(store: Any) -> tuple[Any, str]:
    """``(fs, path)`` for zarrx's :class:`~zarrx.storage.fsspec.FsspecStore` of the objects of
    zarr-python's own ``FsspecStore`` (not a subclass) -- its file system made again as a
    synchronous instance from the options it was made with (zarr-python's is asynchronous, bound
    to zarr-python's loop; a file system it wraps to make it asynchronous is used as it is) --
    or ``(None, "")``: another store, kerchunk references, a file system that cannot be made again.
    (Through zarr-python's ``FsspecStore``, processes writing parts of one chunk of S3 lost values:
    zarrx's writes them only over the version read.)"""
    if type(store) is not _loaded("zarr.storage", "FsspecStore"):
        return None, ""
    fs, path = _beneath(store)
    if is_reference_file_system(fs):
        return None, ""
    if not getattr(fs, "asynchronous", False):  # a synchronous one that zarr-python wrapped
        return fs, path
    options = {name: value for name, value in fs.storage_options.items() if name not in ("asynchronous", "loop")}
    try:
        return type(fs)(**options), path
    except Exception:  # noqa: BLE001 (options that cannot make another instance: zarr-python's store as it is)
        return None, ""


def _is_session_store(store: Any) -> bool:
    """Whether ``store`` is an Icechunk session's store (``icechunk.IcechunkStore``), never importing icechunk."""
    kind = _loaded("icechunk.store", "IcechunkStore")
    return kind is not None and isinstance(store, kind)


def zarr_python_array_location(obj: Any) -> tuple[Store, str] | None:
    """``(store, path)`` of a zarr-python ``Array`` (or ``AsyncArray``), None for anything else.

    Examples
    --------
    >>> zarr_python_array_location([1, 2, 3]) is None
    True
    """
    classes = tuple(c for c in (_loaded("zarr.core.array", "Array"), _loaded("zarr.core.array", "AsyncArray")) if c)
    if not classes or not isinstance(obj, classes):
        return None
    return zarrx_store_of(obj.store_path.store), str(obj.store_path.path).strip("/")


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

