"""A store over any fsspec file system (S3, GCS, Azure, HTTP, memory, zip, ...).

Key ``a/b`` is the path ``<root>/a/b`` of the file system. One batch is one
fsspec call: ``get_many`` and ``get_ranges`` are a single ``fs.cat_ranges``,
``set_many`` a single ``fs.pipe``, which async file systems (s3fs, gcsfs,
adlfs, http) run concurrently. ``fs.cat_ranges`` is used rather than
``fs.cat(paths)`` because ``cat`` expands glob characters (``*?[``), which are
legal in node names, and returns a dict keyed by the expanded paths.

Missing keys become None in one place, :meth:`FsspecStore._outcome`:
``FileNotFoundError`` (which s3fs, gcsfs, adlfs and http raise for an absent
object) and the ``IsADirectoryError``/``NotADirectoryError`` of hierarchical
file systems. Any other exception from the backend is a
:class:`~zarrx.errors.StoreError` naming the key. A ranged read that the
backend refuses (an HTTP server answering 416 for a range past the end, one
without suffix ranges) is retried once knowing the file's size.

On fsspec's local file system, writes and deletes go through
:class:`~zarrx.storage.local.LocalStore`, whose writes are atomic (fsspec's
``pipe_file`` writes in place) and which keeps no empty folders behind.
Writes to object stores are atomic by the service's own guarantee.

Remote stores (see :mod:`zarrx.storage.remote`): on async file systems every
batch (``cat_ranges``, ``pipe``, and ``rm`` where the back end takes a
``batch_size``) keeps at most ``max_concurrency`` requests in flight (default
64; storage option ``zarrx_max_concurrency`` or ``ZARRX_MAX_CONCURRENCY``);
:meth:`FsspecStore.from_url` also configures retries and timeouts of S3 and
HTTP file systems. HTTP(S) stores are read-only: writes raise
:class:`~zarrx.errors.ReadOnlyError`. Listing over HTTP works only where the
server answers a folder URL with an HTML index of links (as ``python -m
http.server`` and nginx's ``autoindex`` do); elsewhere open hierarchies through
consolidated metadata. Error messages and ``repr`` name the URL with
credentials removed (:func:`~zarrx.storage.remote.redact`).
"""

from __future__ import annotations

import inspect
import os
import re
from typing import Any, Iterable, Iterator, Mapping, Sequence
from urllib.parse import quote, urlsplit

import fsspec
from fsspec.asyn import AsyncFileSystem
from fsspec.implementations.local import LocalFileSystem

from zarrx.errors import ReadOnlyError, StoreError
from zarrx.storage.local import LocalStore, is_temporary_name
from zarrx.storage.paths import validate_key, validate_prefix
from zarrx.storage.remote import RemoteOptions, configure, redact, secret_values
from zarrx.storage.store import ByteRequest, Store, byte_bounds, open_bounds

__all__ = ["FsspecStore"]

# What fsspec back ends raise for an absent object (or a folder where an object was asked for).
_MISSING = (FileNotFoundError, IsADirectoryError, NotADirectoryError)

# fsspec treats these as glob characters in rm/cat/expand_path.
_GLOB_CHARACTERS = re.compile(r"[*?\[]")

#: protocols whose file systems zarrx never writes through (fsspec's HTTP writes are POST/PUT
#: to arbitrary servers, not an object store with atomic replacement)
READ_ONLY_PROTOCOLS = frozenset({"http", "https"})


def _protocols(fs: fsspec.AbstractFileSystem) -> tuple[str, ...]:
    protocol = fs.protocol
    return (protocol,) if isinstance(protocol, str) else tuple(protocol)


def _batch_size_option(fs: fsspec.AbstractFileSystem, method: str, limit: int) -> dict[str, int]:
    """``{"batch_size": limit}`` when ``fs``'s async ``_<method>`` takes it (fsspec's own do;
    some back ends override them without it), else ``{}``."""
    implementation = getattr(fs, f"_{method}", None) if isinstance(fs, AsyncFileSystem) else None
    if implementation is None:
        return {}
    try:
        takes = "batch_size" in inspect.signature(implementation).parameters
    except (TypeError, ValueError):
        takes = False
    return {"batch_size": limit} if takes else {}


def _url_passwords(url: str) -> tuple[str, ...]:
    """The passwords of ``user:password@`` in each URL of a (chained) fsspec URL."""
    passwords = []
    for part in url.split("::"):
        try:
            password = urlsplit(part).password
        except ValueError:  # an invalid port or netloc: nothing to find
            continue
        if password and len(password) >= 3:
            passwords.append(password)
            passwords.append(quote(password, safe=""))  # as it may appear percent-encoded
    return tuple(dict.fromkeys(passwords))


def _scrub(error: BaseException, secrets: tuple[str, ...]) -> None:
    """Redact credentials in ``error`` and the errors it was raised from, in place.

    zarrx chains a back end's error to its StoreError (``raise ... from error``), so a
    traceback or ``logger.exception`` shows it; a back end may have put a key, a secret or a
    URL with its password into it.
    """
    seen: set[int] = set()
    while error is not None and id(error) not in seen and len(seen) < 16:
        seen.add(id(error))
        if redact(str(error), secrets) != str(error) or any(redact(repr(arg), secrets) != repr(arg) for arg in error.args):
            error.args = tuple(redact(arg, secrets) if isinstance(arg, str) else arg for arg in error.args)
            if isinstance(error, OSError):
                for name in ("strerror", "filename", "filename2"):
                    value = getattr(error, name, None)
                    if isinstance(value, str):
                        setattr(error, name, redact(value, secrets))
        error = error.__cause__ or error.__context__


class FsspecStore(Store):
    """Keys as files of an fsspec file system, below ``root``.

    Parameters
    ----------
    fs
        Any ``fsspec.AbstractFileSystem`` (sync or async).
    root
        The folder (or bucket/prefix) of the store, with or without protocol.
    read_only
        Refuse writes with :class:`~zarrx.errors.ReadOnlyError` (always so over HTTP).
    max_concurrency
        Most requests one batch keeps in flight on an async file system (default:
        ``ZARRX_MAX_CONCURRENCY`` or 64).
    secrets
        Strings never to show in messages (credentials); :meth:`from_url` passes the
        values of the secret storage options.

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
    ) -> None:
        self.fs = fs
        self.root = fs._strip_protocol(root).rstrip("/")
        self.read_only_protocol = not READ_ONLY_PROTOCOLS.isdisjoint(_protocols(fs))
        self.read_only = read_only or self.read_only_protocol
        self.max_concurrency = RemoteOptions(max_concurrency=max_concurrency).max_concurrency
        self.secrets = tuple(secrets) + secret_values(getattr(fs, "storage_options", None))
        # a web server redirects a folder URL without its '/' first: one request more per listing
        self._folder_suffix = "/" if self.read_only_protocol else ""
        # the cap goes to each batch call whose async implementation takes it (sync ones loop)
        self._batch = {
            name: _batch_size_option(fs, name, self.max_concurrency) for name in ("cat_ranges", "pipe", "rm")
        }
        # "<root>/" before every key; the file system's own root ("/" or "") when root is empty.
        self._prefix = self.root + "/" if self.root else fs.root_marker
        self._local = LocalStore(self._prefix, read_only) if isinstance(fs, LocalFileSystem) else None

    # -- abilities (see zarrx.storage.store) -----------------------------------------
    @property
    def process_local(self) -> bool:
        # fsspec's "memory" file system keeps its files in this process (a class-level dict)
        return "memory" in _protocols(self.fs)

    @property
    def reads_are_local(self) -> bool:
        # a local folder, or fsspec's in-memory file system: a read is no round trip
        return self._local is not None or self.process_local

    @property
    def preferred_concurrency(self) -> int:
        return self.max_concurrency if isinstance(self.fs, AsyncFileSystem) else 1

    def local_path(self, key: str) -> str | None:
        return None if self._local is None else self._local.local_path(key)

    @property
    def location(self) -> tuple[Any, ...]:
        if self._local is not None:
            return self._local.location  # the same folder as a LocalStore on it
        return ("fsspec", self.fs, self.root)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_pickled_in": os.getpid()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        pickled_in = state.pop("_pickled_in", None)
        self.__dict__.update(state)
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
        zarrx's own ``zarrx_max_concurrency``, ``zarrx_retries`` and ``zarrx_timeout``; S3
        and HTTP file systems get zarrx's retry, timeout and connection-pool defaults for
        what the options leave unset (see :mod:`zarrx.storage.remote`).

        Examples
        --------
        >>> FsspecStore.from_url("memory://x.zarr", read_only=True)
        FsspecStore('memory:///x.zarr', read_only=True)
        """
        remote, options = configure(url, storage_options)
        # a password in the URL is a secret too, wherever the file system keeps it (a memory
        # file system keeps "user:password@host" in the path)
        secrets = secret_values(storage_options) + _url_passwords(url)
        try:
            fs, root = fsspec.core.url_to_fs(url, **options)
        except Exception as error:  # noqa: BLE001 (any back end's failure, credentials removed)
            raise StoreError(redact(f"cannot open {url!r}: {type(error).__name__}: {error}", secrets)) from None
        return cls(fs, root, read_only=read_only, max_concurrency=remote.max_concurrency, secrets=secrets)

    def _path(self, key: str) -> str:
        return self._prefix + validate_key(key)

    def _key(self, path: str) -> str | None:
        """The key of a path the file system listed, or None when it is not below the root."""
        path = path.rstrip("/")
        if not path.startswith(self._prefix) or len(path) == len(self._prefix):
            return None
        return path[len(self._prefix) :]

    def url(self, key: str = "") -> str:
        """The full URL of ``key`` (of the root for ``""``), credentials removed."""
        path = self._prefix + key if key else self.root
        return redact(self.fs.unstrip_protocol(path), self.secrets)

    def _error(self, action: str, key: str, error: BaseException) -> StoreError:
        detail = redact(f"{type(error).__name__}: {error}", self.secrets)
        # the back end's error becomes the StoreError's __cause__, which tracebacks and logs show
        _scrub(error, self.secrets)
        return StoreError(f"could not {action} {key!r} at {self.url(key)}: {detail}")

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

    # -- reading -----------------------------------------------------------------
    def _outcome(self, key: str, path: str, byte_range: ByteRequest | None, result: Any) -> bytes | None:
        """Turn what fsspec gave for one read (bytes or an exception) into the store's answer."""
        if isinstance(result, _MISSING):
            return None
        if isinstance(result, BaseException):
            if byte_range is not None:
                return self._read_knowing_size(key, path, byte_range, result)
            raise self._error("read", key, result) from result
        return bytes(result)

    def _read_knowing_size(self, key: str, path: str, byte_range: ByteRequest, error: BaseException) -> bytes | None:
        """Retry a refused ranged read with explicit, in-bounds limits."""
        try:
            size = self.fs.size(path)
        except _MISSING:
            return None
        except Exception:
            raise self._error("read", key, error) from error
        start, end = byte_bounds(byte_range, size)
        if start >= end:
            return b""
        try:
            return bytes(self.fs.cat_file(path, start=start, end=end))
        except Exception as retry_error:
            raise self._error("read", key, retry_error) from error

    def _read_batch(self, requests: Sequence[tuple[str, ByteRequest | None]]) -> list[bytes | None]:
        paths = [self._path(key) for key, _ in requests]
        limits = [open_bounds(byte_range) for _, byte_range in requests]
        to_read = [position for position, limit in enumerate(limits) if limit is not None]
        results: list[bytes | None] = [None] * len(requests)
        if to_read:
            try:
                outcomes = self.fs.cat_ranges(
                    [paths[position] for position in to_read],
                    [limits[position][0] for position in to_read],
                    [limits[position][1] for position in to_read],
                    on_error="return",
                    **self._batch["cat_ranges"],
                )
            except Exception as error:  # a failure of the whole batch
                raise self._error("read", requests[to_read[0]][0], error) from error
            for position, outcome in zip(to_read, outcomes, strict=True):
                key, byte_range = requests[position]
                results[position] = self._outcome(key, paths[position], byte_range, outcome)
        for position, limit in enumerate(limits):
            if limit is None:  # an empty range: b"" when the key exists
                results[position] = b"" if self._isfile(requests[position][0], paths[position]) else None
        return results

    def get(self, key: str, byte_range: ByteRequest | None = None) -> bytes | None:
        path = self._path(key)
        limits = open_bounds(byte_range)
        if limits is None:
            return b"" if self._isfile(key, path) else None
        try:
            result = self.fs.cat_file(path, start=limits[0], end=limits[1])
        except Exception as error:
            result = error
        return self._outcome(key, path, byte_range, result)

    def get_many(self, keys: Sequence[str]) -> dict[str, bytes | None]:
        keys = list(keys)
        if len(keys) == 1:
            return {keys[0]: self.get(keys[0])}
        return dict(zip(keys, self._read_batch([(key, None) for key in keys]), strict=True))

    def get_ranges(self, requests: Sequence[tuple[str, ByteRequest]]) -> list[bytes | None]:
        return self._read_batch(list(requests))

    def _isfile(self, key: str, path: str) -> bool:
        try:
            return bool(self.fs.isfile(path))
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
        if len(items) < 2:
            for key, value in items.items():
                self.set(key, value)
            return
        try:
            self.fs.pipe(
                {self._path(key): value if isinstance(value, bytes) else bytes(value) for key, value in items.items()},
                **self._batch["pipe"],
            )
        except Exception:
            # Some of the batch may be written; writing it key by key (idempotent)
            # creates missing folders or reports the key that fails.
            for key, value in items.items():
                self.set(key, value)

    def delete(self, key: str) -> None:
        path = self._path(key)
        self._check_writable(key)
        if self._local is not None:
            return self._local.delete(key)
        try:
            self.fs.rm_file(path)
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
            self.fs.rm(paths, **self._batch["rm"])
        except Exception:
            # a missing key (which some file systems refuse in a list) or a real failure: key by key
            # reports the failing key, and deleting twice is harmless
            for key in keys:
                self.delete(key)

    def delete_prefix(self, prefix: str) -> None:
        self._check_writable(validate_prefix(prefix))
        if self._local is not None:
            return self._local.delete_prefix(prefix)
        folder = (self._prefix + prefix).rstrip("/") or self._prefix
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
            self.fs.rm(folder, recursive=True, **self._batch["rm"])
        except _MISSING:
            pass
        except Exception as error:
            raise self._error("delete", prefix, error) from error

    # -- listing -----------------------------------------------------------------
    def list_prefix(self, prefix: str) -> Iterator[str]:
        validate_prefix(prefix)
        folder_key = prefix.rpartition("/")[0]
        folder = (self._prefix + folder_key).rstrip("/") or self._prefix
        try:
            paths = self.fs.find(folder + self._folder_suffix)
        except _MISSING:
            return iter([])
        except Exception as error:
            raise self._error("list", prefix, error) from error
        keys = (self._key(path) for path in paths)
        return iter([key for key in keys if key is not None and key.startswith(prefix) and not self._is_temporary(key)])

    def list_dir(self, prefix: str) -> list[str]:
        validate_prefix(prefix)
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        folder = (self._prefix + prefix).rstrip("/") or self._prefix
        try:
            paths = self.fs.ls(folder + self._folder_suffix, detail=False)
        except _MISSING:
            return []
        except Exception as error:
            raise self._error("list", prefix, error) from error
        names = set()
        for path in paths:
            key = self._key(path)
            # ls of a file lists the file itself: not below the prefix, skipped
            if key is not None and key.startswith(prefix) and len(key) > len(prefix):
                name = key[len(prefix) :].partition("/")[0]
                if not self._is_temporary(name):
                    names.add(name)
        return sorted(names)

    def _is_temporary(self, key: str) -> bool:
        # Only LocalStore writes temporary files; elsewhere such a name is a real key.
        return self._local is not None and is_temporary_name(key.rpartition("/")[2])

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
