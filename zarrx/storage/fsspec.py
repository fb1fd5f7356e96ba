"""A store over any fsspec file system (S3, GCS, Azure, HTTP, memory, zip, caches, ...).

Key ``a/b`` is the path ``<root>/a/b`` of the file system. Missing keys become None in one
place, :meth:`FsspecStore._outcome`: ``FileNotFoundError`` (which s3fs, gcsfs, adlfs and http
raise for an absent object) and the ``IsADirectoryError``/``NotADirectoryError`` of
hierarchical file systems. Any other failure is a :class:`~zarrx.errors.StoreError` naming the
key and its URL (credentials removed, :mod:`zarrx.storage.redaction`); a request or batch past
its deadline a :class:`~zarrx.errors.StoreTimeoutError`. A ranged read the server refuses (400,
416, 501: some refuse suffix ranges) is read once more knowing the value's size.

**Async file systems** (s3fs, gcsfs, adlfs, HTTP) run every batch through
:class:`~zarrx.storage.transfers.Transfers`: adaptive concurrency per host (at most
``zarrx_max_concurrency``), retries, deadlines, and bodies never read past what the key may
hold -- ``max_size`` of :meth:`FsspecStore.get_many` and :meth:`FsspecStore.get_ranges` (the
array layer passes a chunk's or shard's largest encoded size), else ``zarrx_max_read_size``
(see :mod:`zarrx.storage.remote`, which :meth:`FsspecStore.from_url` configures the libraries
with), and lists folders as requests of the host too (:mod:`zarrx.storage.listings`). HTTP(S)
stores are read-only (:class:`~zarrx.errors.ReadOnlyError`).

**Synchronous file systems** (the caches ``simplecache::``, ``filecache::``, ``blockcache::``,
zip, sftp, memory, ...) read a batch with one ``cat_ranges`` (not ``cat``, which expands the
glob characters ``*?[`` legal in node names); when it fails as a whole (a cache raises for the
first missing file), the batch is read again key by key, so a missing key is None and an error
names its own key. On fsspec's local file system, writes and deletes go through
:class:`~zarrx.storage.local.LocalStore` (atomic, no empty folders left behind); writes to
object stores are atomic by the service's own guarantee; S3's are conditional where asked.
"""

from __future__ import annotations

import os
import re
from typing import Any, Iterable, Iterator, Mapping, Sequence

import fsspec
from fsspec.asyn import AsyncFileSystem
from fsspec.implementations.local import LocalFileSystem

from zarrx.errors import ReadOnlyError, StoreError, StoreTimeoutError
from zarrx.storage import conditional
from zarrx.storage.listings import Listings
from zarrx.storage.local import LocalStore, is_temporary_name
from zarrx.storage.metadata_updates import LOCK_NAMES
from zarrx.storage.paths import FilePaths, validate_key, validate_prefix
from zarrx.storage.redaction import redact, scrub, secret_values, url_passwords
from zarrx.storage.remote import RemoteOptions, configure
from zarrx.storage.store import ByteRequest, Store, byte_bounds, open_bounds
from zarrx.storage.readers import MISSING as _MISSING, beneath_folders, own_instance, protocols
from zarrx.storage.readers import read_synchronously, reader_for
from zarrx.storage.transfers import BodyTooLarge, ObjectRead, ServerAnswer, Transfers, describe_failure

__all__ = ["FsspecStore"]

_GLOB_CHARACTERS = re.compile(r"[*?\[]")  # fsspec treats these as glob characters in rm/cat/expand_path

#: protocols whose file systems zarrx never writes through (fsspec's HTTP writes are POST/PUT
#: to arbitrary servers, not an object store with atomic replacement)
READ_ONLY_PROTOCOLS = frozenset({"http", "https"})


class FsspecStore(Store):
    """Keys as files of an fsspec file system, below ``root``.

    Parameters
    ----------
    fs
        Any ``fsspec.AbstractFileSystem`` (sync or async; a ``DirFileSystem`` is used as what it wraps).
    root
        The folder (or bucket/prefix) of the store, with or without protocol.
    read_only
        Refuse writes with :class:`~zarrx.errors.ReadOnlyError` (always so over HTTP).
    max_concurrency
        Most requests to one host in flight at once on an async file system (default:
        ``ZARRX_MAX_CONCURRENCY`` or 64); the cap of the adaptive concurrency.
    secrets
        Strings never to show in messages (credentials); :meth:`from_url` passes the
        values of the secret storage options.
    options
        zarrx's storage options (:class:`~zarrx.storage.remote.RemoteOptions`: retries,
        timeouts, deadlines, the read size limit); ``max_concurrency`` overrides its cap.

    Examples
    --------
    >>> store = FsspecStore.from_url("memory://example.zarr")
    >>> store.set("zarr.json", b"{}")
    >>> store.get_many(["zarr.json", "missing"])
    {'zarr.json': b'{}', 'missing': None}
    """

    def __init__(
        self,
        fs: fsspec.AbstractFileSystem,
        root: str = "",
        read_only: bool = False,
        *,
        max_concurrency: int | None = None,
        secrets: tuple[str, ...] = (),
        options: RemoteOptions | None = None,
    ) -> None:
        fs, root = beneath_folders(fs, root)  # a DirFileSystem is the file system it wraps, below its folder
        self._fs, self._pid = fs, os.getpid()
        self.root = fs._strip_protocol(root).rstrip("/")
        self.read_only_protocol = not READ_ONLY_PROTOCOLS.isdisjoint(protocols(fs))
        self.read_only = read_only or self.read_only_protocol
        given = options.__getstate__() if options is not None else {}
        if max_concurrency is not None:
            given["max_concurrency"] = max_concurrency
        self.options = RemoteOptions(**given)
        self.secrets = tuple(secrets) + secret_values(getattr(fs, "storage_options", None))
        # a web server redirects a folder URL without its '/' first: one request more per listing
        self._folder_suffix = "/" if self.read_only_protocol else ""
        # "<root>/" before every key; the file system's own root ("/" or "") when root is empty.
        self._prefix = self.root + "/" if self.root else fs.root_marker
        self._paths = FilePaths(self._prefix, url=self.read_only_protocol)
        self._local = LocalStore(self._prefix, read_only) if isinstance(fs, LocalFileSystem) else None
        self._transfers: Transfers | None = None

    @property
    def fs(self) -> fsspec.AbstractFileSystem:
        """The file system; in a process forked from the one that used it, one of its own (:func:`own_instance`)."""
        if self._pid != os.getpid():
            self._fs, self._transfers, self._pid = own_instance(self._fs), None, os.getpid()
        return self._fs

    @property
    def max_concurrency(self) -> int:
        return self.options.max_concurrency

    @property
    def transfers(self) -> Transfers | None:
        """What runs this store's batches on an async file system (None on others)."""
        if self._transfers is None and isinstance(self.fs, AsyncFileSystem) and self._local is None:
            self._transfers = Transfers(self.fs, reader_for(self.fs, self.options), self.options)
        return self._transfers

    # -- abilities (see zarrx.storage.store) -----------------------------------------
    @property
    def process_local(self) -> bool:
        # fsspec's "memory" file system keeps its files in this process (a class-level dict)
        return "memory" in protocols(self.fs)

    @property
    def reads_are_local(self) -> bool:
        # a local folder, or fsspec's in-memory file system: a read is no round trip
        return self._local is not None or self.process_local

    @property
    def preferred_concurrency(self) -> int:
        return self.max_concurrency if isinstance(self.fs, AsyncFileSystem) else 1

    @property
    def locks_metadata(self) -> bool:
        return self._local is not None and self._local.locks_metadata

    def lock_metadata(self) -> Any:
        return super().lock_metadata() if self._local is None else self._local.lock_metadata()

    @property
    def locks_objects(self) -> bool:  # type: ignore[override]
        return self._local is not None and self._local.locks_objects

    def lock_objects(self, keys: Any) -> Any:
        return super().lock_objects(keys) if self._local is None else self._local.lock_objects(keys)

    @property
    def conditional_writes(self) -> bool:  # on S3
        return self._local is None and not self.read_only and "s3" in protocols(self.fs)

    def get_versioned(self, key: str) -> tuple[bytes | None, Any]:
        return conditional.get_versioned(self, key)

    def set_if(self, key: str, value: bytes, version: Any) -> bool:
        self._check_writable(key)
        return conditional.set_if(self, key, value, version)

    def local_path(self, key: str) -> str | None:
        return None if self._local is None else self._local.local_path(key)

    @property
    def location(self) -> tuple[Any, ...]:
        if self._local is not None:
            return self._local.location  # the same folder as a LocalStore on it
        return ("fsspec", self.fs, self.root)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_transfers": None, "_pickled_in": os.getpid()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        pickled_in = state.pop("_pickled_in", None)
        self.__dict__.update(state, _pid=os.getpid())  # (the file system unpickled is this process's)
        if self.process_local and pickled_in != os.getpid():
            # Here the file system is this process's own, empty one: reads would find nothing
            # (fill values) and writes would be lost, silently.
            raise StoreError(
                f"cannot use the in-memory store memory://{self.root.lstrip('/')} in another process (its "
                "files live in the one that created it); use dask's threaded scheduler, or a local folder "
                "or another URL"
            )

    @classmethod
    def from_url(
        cls, url: str, storage_options: Mapping[str, Any] | None = None, read_only: bool = False
    ) -> FsspecStore:
        """The store at an fsspec URL (``"s3://bucket/data.zarr"``, ``"simplecache::https://…"``).

        ``storage_options`` go to the file system (credentials, ``anon=True``, ...), but for
        zarrx's own ``zarrx_*`` options (concurrency cap, retries, timeouts, deadlines, read
        size limit); S3 and HTTP file systems get zarrx's retry, timeout and connection
        defaults for what the options leave unset (see :mod:`zarrx.storage.remote`).

        Examples
        --------
        >>> FsspecStore.from_url("memory://x.zarr", read_only=True)
        FsspecStore('memory:///x.zarr', read_only=True)
        """
        remote, options = configure(url, storage_options)
        # a password in the URL is a secret too, wherever the file system keeps it (a memory
        # file system keeps "user:password@host" in the path)
        secrets = secret_values(storage_options) + url_passwords(url)
        try:
            fs, root = fsspec.core.url_to_fs(url, **options)
        except Exception as error:  # noqa: BLE001 (any back end's failure, credentials removed)
            raise StoreError(redact(f"cannot open {url!r}: {type(error).__name__}: {error}", secrets)) from None
        return cls(fs, root, read_only=read_only, secrets=secrets, options=remote)

    def _path(self, key: str) -> str:
        return self._paths.path(validate_key(key))

    def _key(self, path: str) -> str | None:
        """The key of a path the file system listed, or None when it is not below the root."""
        return self._paths.key(path)

    def url(self, key: str = "") -> str:
        """The full URL of ``key`` (of the root for ``""``), credentials removed."""
        path = self._prefix + key if key else self.root
        return redact(self.fs.unstrip_protocol(path), self.secrets)

    def _error(self, action: str, key: str, error: BaseException) -> StoreError:
        # the back end's error becomes the StoreError's __cause__, which tracebacks and logs show
        scrub(error, self.secrets)
        timed_out, detail = describe_failure(error, self.options)
        error_class = StoreTimeoutError if timed_out else StoreError
        return error_class(f"could not {action} {key!r} at {self.url(key)}: {redact(detail, self.secrets)}")

    def _check_writable(self, key: str) -> None:
        if self.read_only_protocol:
            raise ReadOnlyError(
                f"cannot write {key!r}: {self!r} is read-only, as every HTTP(S) store is "
                "(write to an object store such as s3:// and serve that over HTTP)"
            )
        if self.read_only:
            raise ReadOnlyError(
                f"cannot write {key!r}: {self!r} is read-only (open it with mode 'r+', 'a' or 'w' to write)"
            )

    def _call(self, method: str, *args: Any, what: str = "", **kwargs: Any) -> Any:
        """``fs.<method>(*args)``; on an async file system within the request deadline."""
        transfers = self.transfers
        if transfers is None:
            return getattr(self.fs, method)(*args, **kwargs)
        # the cap goes to batch calls (a delete of many keys) whose implementation takes it
        kwargs = {**transfers.batch_size(method), **kwargs}
        return transfers.call(what or method, lambda: getattr(self.fs, "_" + method)(*args, **kwargs))

    # -- reading -----------------------------------------------------------------
    def _limit(self, max_size: int | None) -> int:
        return self.options.max_read_size if max_size is None else max_size

    def _outcome(self, read: ObjectRead, byte_range: ByteRequest | None, result: Any) -> bytes | None:
        """Turn what was read for one request (bytes, None or an exception) into the store's answer."""
        if result is None or isinstance(result, _MISSING):
            return None
        if isinstance(result, BaseException):
            if byte_range is not None and self._range_refused(result):
                return self._read_knowing_size(read, byte_range, result)
            raise self._error("read", read.key, result) from result
        if len(result) > read.limit:
            raise self._error("read", read.key, BodyTooLarge(len(result), read.limit, declared=False))
        return bytes(result)

    def _range_refused(self, error: BaseException) -> bool:
        """Whether a ranged read failed for its range: a server refusing it (400, 416 without a
        size, 501; some refuse suffix ranges), or any failure of a synchronous file system."""
        if self.transfers is None:
            return not isinstance(error, TimeoutError)
        return isinstance(error, ServerAnswer) and error.status in (400, 416, 501)

    def _read_knowing_size(self, read: ObjectRead, byte_range: ByteRequest, error: BaseException) -> bytes | None:
        """Retry a refused ranged read with explicit, in-bounds limits."""
        try:
            size = self._call("size", read.path)
        except _MISSING:
            return None
        except Exception:
            raise self._error("read", read.key, error) from error
        start, end = byte_bounds(byte_range, size)
        if start >= end:
            return b""
        retry = ObjectRead(read.key, read.path, start, end, read.limit)
        outcome = self._read_all([retry])[0]
        if isinstance(outcome, BaseException):
            raise self._error("read", read.key, outcome) from error
        return self._outcome(retry, None, outcome)

    def _read_all(self, reads: Sequence[ObjectRead]) -> list[Any]:
        """One outcome per read: on async file systems through :class:`Transfers`, on others
        :func:`~zarrx.storage.readers.read_synchronously`."""
        transfers = self.transfers
        if transfers is not None:
            return transfers.read_many(reads)
        return read_synchronously(self.fs, reads, self.options)

    def _read_batch(self, requests: Sequence[tuple[str, ByteRequest | None]], max_size: int | None) -> list[bytes | None]:
        limit = self._limit(max_size)
        bounds = [open_bounds(byte_range) for _, byte_range in requests]
        reads = [
            ObjectRead(key, self._path(key), *(bound or (None, None)), limit)
            for (key, _), bound in zip(requests, bounds, strict=True)
        ]
        to_read = [position for position, bound in enumerate(bounds) if bound is not None]
        results: list[bytes | None] = [None] * len(requests)
        if to_read:
            outcomes = self._read_all([reads[position] for position in to_read])
            for position, outcome in zip(to_read, outcomes, strict=True):
                results[position] = self._outcome(reads[position], requests[position][1], outcome)
        for position, bound in enumerate(bounds):
            if bound is None:  # an empty range: b"" when the key exists
                results[position] = b"" if self._isfile(reads[position].key, reads[position].path) else None
        return results

    def get(self, key: str, byte_range: ByteRequest | None = None) -> bytes | None:
        return self._read_batch([(key, byte_range)], None)[0]

    def get_many(self, keys: Sequence[str], *, max_size: int | None = None) -> dict[str, bytes | None]:
        keys = list(dict.fromkeys(keys))
        return dict(zip(keys, self._read_batch([(key, None) for key in keys], max_size), strict=True))

    def iter_many(self, keys: Sequence[str], *, max_size: int | None = None) -> Iterator[tuple[str, bytes | None]]:
        keys = list(dict.fromkeys(keys))
        transfers = self.transfers
        if transfers is None or len(keys) < 2:
            yield from self.get_many(keys, max_size=max_size).items()
            return
        reads = [ObjectRead(key, self._path(key), None, None, self._limit(max_size)) for key in keys]
        for position, outcome in transfers.iter_reads(reads):
            yield keys[position], self._outcome(reads[position], None, outcome)

    def get_ranges(
        self, requests: Sequence[tuple[str, ByteRequest]], *, max_size: int | None = None
    ) -> list[bytes | None]:
        return self._read_batch(list(requests), max_size)

    def _isfile(self, key: str, path: str) -> bool:
        try:
            return bool(self._call("isfile", path, what=f"{key!r}"))
        except _MISSING:
            return False
        except Exception as error:
            raise self._error("read", key, error) from error

    def exists(self, key: str) -> bool:
        return self._isfile(key, self._path(key))

    # -- writing -----------------------------------------------------------------
    def set(self, key: str, value: bytes) -> None:
        path = self._path(key)
        self._check_writable(key)
        if self._local is not None:
            return self._local.set(key, value)
        value = value if isinstance(value, bytes) else bytes(value)
        try:
            if self.transfers is not None:
                outcome = self.transfers.write_many([(key, path, value)])[0]
                if isinstance(outcome, BaseException):
                    raise outcome
                return
            try:
                self.fs.pipe_file(path, value)
            except FileNotFoundError:
                # Hierarchical file systems (sftp, hdfs, ...) need the folder first.
                self.fs.makedirs(path.rpartition("/")[0], exist_ok=True)
                self.fs.pipe_file(path, value)
        except Exception as error:
            raise self._error("write", key, error) from error

    def set_many(self, items: Mapping[str, bytes]) -> None:
        for key in items:
            self._check_writable(validate_key(key))
        if self._local is not None:
            return self._local.set_many(items)
        if len(items) < 2 or self.transfers is None:
            for key, value in items.items():
                self.set(key, value)
            return
        values = [(key, self._path(key), value if isinstance(value, bytes) else bytes(value)) for key, value in items.items()]
        for (key, _, value), outcome in zip(values, self.transfers.write_many(values), strict=True):
            if isinstance(outcome, BaseException):
                raise self._error("write", key, outcome) from outcome

    def delete(self, key: str) -> None:
        path = self._path(key)
        self._check_writable(key)
        if self._local is not None:
            return self._local.delete(key)
        try:
            self._call("rm_file", path, what=f"delete {key!r}")
        except _MISSING:
            pass
        except Exception as error:
            raise self._error("delete", key, error) from error

    def delete_many(self, keys: Iterable[str]) -> None:
        keys = list(keys)
        for key in keys:
            self._check_writable(validate_key(key))
        if self._local is not None:
            return self._local.delete_many(keys)
        paths = [self._path(key) for key in dict.fromkeys(keys)]
        if len(paths) < 2 or any(_GLOB_CHARACTERS.search(path) for path in paths):
            for key in keys:  # fs.rm would expand glob characters
                self.delete(key)
            return
        try:
            # one call: S3 deletes up to 1,000 objects per request, async file systems run it concurrently
            self._call("rm", paths, what=f"delete {len(paths)} keys")
        except Exception:
            # a missing key (which some file systems refuse in a list) or a real failure: key by key
            # reports the failing key, and deleting twice is harmless
            for key in keys:
                self.delete(key)

    def delete_prefix(self, prefix: str) -> None:
        self._check_writable(validate_prefix(prefix))
        if self._local is not None:
            return self._local.delete_prefix(prefix)
        folder = self._paths.path(prefix).rstrip("/") or self._prefix
        if (
            (prefix and not prefix.endswith("/"))
            or _GLOB_CHARACTERS.search(folder)
            or (prefix and self._isfile(prefix, folder))
        ):
            # A string prefix, one fs.rm would expand as a glob, or one that is also
            # a key (which fs.rm would delete with it): key by key.
            self.delete_many(list(self.list_prefix(prefix)))
            return
        try:
            self._call("rm", folder, recursive=True, what=f"delete {prefix!r}")
        except _MISSING:
            pass
        except Exception as error:
            raise self._error("delete", prefix, error) from error

    # -- listing -----------------------------------------------------------------
    def list_prefix(self, prefix: str) -> Iterator[str]:
        validate_prefix(prefix)
        folder = self._paths.path(prefix.rpartition("/")[0]).rstrip("/") or self._prefix
        try:
            keys = self._listings().keys(folder + self._folder_suffix, prefix)
        except _MISSING:
            return iter([])
        except Exception as error:
            raise self._error("list", prefix, error) from error
        return iter([key for key in keys if not self._is_temporary(key)])

    def list_dir(self, prefix: str) -> list[str]:
        validate_prefix(prefix)
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        folder = self._paths.path(prefix).rstrip("/") or self._prefix
        try:
            keys = self._listings().folder_keys(folder + self._folder_suffix)
        except _MISSING:
            return []
        except Exception as error:
            raise self._error("list", prefix, error) from error
        # ls of a file lists the file itself: not below the prefix, skipped
        names = {key[len(prefix) :].partition("/")[0] for key in keys if key.startswith(prefix) and key != prefix}
        return sorted(name for name in names if not self._is_temporary(prefix + name))

    def _listings(self) -> Listings:
        return Listings(self.fs, self.transfers, self.options.max_read_size, self._key)

    def _is_temporary(self, key: str) -> bool:
        # Only LocalStore writes temporary files; elsewhere such a name is a real key.
        return self._local is not None and (is_temporary_name(key.rpartition("/")[2]) or key in LOCK_NAMES)

    # -- identity ----------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, FsspecStore)
            and other.fs == self.fs
            and (other.root, other.read_only) == (self.root, self.read_only)
        )

    def __hash__(self) -> int:
        return hash((FsspecStore, self.root, self.read_only))

    def __repr__(self) -> str:
        flag = ", read_only=True" if self.read_only else ""
        return f"FsspecStore({self.url()!r}{flag})"
