"""How the values of each kind of async file system are read, bounded by what the key may hold.

Async file systems are read through :class:`~zarrx.storage.transfers.Transfers` and a reader, which
has ``read(read, attempt)`` (the value of an :class:`~zarrx.storage.transfers.ObjectRead`,
None when the key is missing), ``host(path)`` (whose :class:`~zarrx.storage.limiter.HostLimiter`
paces it) and ``retries`` (whether zarrx retries its transient failures, or the library does):

==========================================  ============================================================
reader                                      reads
==========================================  ============================================================
:class:`~zarrx.storage.http.HttpReader`     ``http``, ``https``: zarrx's own GET (aiohttp);
                                            ``Content-Length`` checked, bodies streamed to their limit;
                                            zarrx retries
:class:`S3Reader`                           ``s3``: ``GetObject``, its ``ContentLength`` checked before
                                            the body is streamed in; botocore retries (s3fs a body cut
                                            short), telling the endpoint's limiter what it retries
:class:`FileSystemReader`                   any other async file system: its ``_cat_file``, the size
                                            checked after; the library retries (gcsfs, adlfs)
==========================================  ============================================================

Synchronous file systems (fsspec's caches, zip, sftp, memory) are read by :func:`read_synchronously`.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import time
from typing import Any, Callable, Sequence

from fsspec.asyn import AsyncFileSystem
from fsspec.implementations.cached import CachingFileSystem
from fsspec.implementations.dirfs import DirFileSystem
from fsspec.implementations.local import LocalFileSystem

from zarrx.errors import StoreError
from zarrx.storage.http import HttpReader
from zarrx.storage.limiter import host_limiter
from zarrx.storage.transfers import Attempt, BodyTooLarge, ObjectRead, Transfers, classify

#: what fsspec back ends raise for an absent object (or a folder where an object was asked for)
MISSING = (FileNotFoundError, IsADirectoryError, NotADirectoryError)

__all__ = ["FileSystemReader", "S3Reader", "READERS", "reader_for", "read_synchronously", "own_instance", "protocols",
           "beneath_folders"]


class FileSystemReader:
    """Any async fsspec file system: its ``_cat_file``; the size is checked after the read."""

    #: the file system's library retries transient failures (gcsfs, adlfs)
    retries = False

    def __init__(self, fs: Any) -> None:
        self.fs = fs

    def host(self, path: str) -> str:
        return f"{type(self.fs).__name__}"

    async def read(self, read: ObjectRead, attempt: Attempt) -> bytes | None:
        sent = time.monotonic()
        try:
            value = await self.fs._cat_file(read.path, start=read.start, end=read.end)
        except MISSING:
            return None
        attempt.latency = time.monotonic() - sent
        if len(value) > read.limit:
            raise BodyTooLarge(len(value), read.limit, declared=False)
        return bytes(value)


class S3Reader(FileSystemReader):
    """s3fs: ``GetObject``, its ``ContentLength`` checked before the body is streamed in.

    botocore retries the request (statuses, throttling, connection errors; ``standard`` mode);
    s3fs's ``_error_wrapper`` retries a body cut short, as its own ``_cat_file`` does. Each
    answer botocore is about to retry -- 503 SlowDown, a reset, a timeout -- is also a sign of
    overload for the endpoint's :class:`~zarrx.storage.limiter.HostLimiter`, through botocore's
    ``needs-retry`` event.
    """

    def __init__(self, fs: Any, cap: int) -> None:
        super().__init__(fs)
        self.cap = cap

    def host(self, path: str) -> str:
        client = getattr(self.fs, "client_kwargs", None) or {}
        return str(client.get("endpoint_url") or getattr(self.fs, "endpoint_url", None) or "s3")

    async def read(self, read: ObjectRead, attempt: Attempt) -> bytes | None:
        from s3fs.core import _error_wrapper, version_id_kw

        fs = self.fs
        client = await fs.set_session()  # the client, made on first use
        client.meta.events.register(
            "needs-retry.s3", _RetrySignals(self.host(read.path), self.cap), unique_id="zarrx-host-limiter"
        )
        bucket, key, version = fs.split_path(read.path)
        ranged = read.start is not None or read.end is not None
        head = {"Range": await fs._process_limits(read.path, read.start, read.end)} if ranged else {}
        limit = min(read.limit, read.length) if read.length is not None else read.limit
        sent = time.monotonic()

        async def get() -> bytes:
            response = await fs._call_s3("get_object", Bucket=bucket, Key=key, **version_id_kw(version), **head)
            body = response["Body"]
            try:
                attempt.latency = time.monotonic() - sent
                length = response.get("ContentLength")
                if length is not None and length > limit:
                    raise BodyTooLarge(length, limit, declared=True)
                parts, size = [], 0
                async for part in body.iter_chunks(2**20):
                    parts.append(part)
                    size += len(part)
                    if size > limit:
                        raise BodyTooLarge(size, limit, declared=False)
                return b"".join(parts)
            finally:
                body.close()

        try:
            return await _error_wrapper(get, retries=fs.retries)
        except MISSING:
            return None
        except OSError as error:
            if ranged and any(sign in str(error) for sign in _RANGE_PAST_END):
                return b""  # S3's InvalidRange (416): the range starts past the end
            raise


#: the error codes of S3 (and other AWS services) that mean "slow down"
THROTTLING_CODES = frozenset({
    "SlowDown", "Throttling", "ThrottlingException", "ThrottledException", "RequestThrottled",
    "RequestLimitExceeded", "TooManyRequestsException", "RequestThrottledException",
})  # fmt: skip


class _RetrySignals:
    """botocore's ``needs-retry`` handler: tells the host's limiter of throttling, resets and
    timeouts that botocore is about to retry (it decides nothing: it returns None)."""

    def __init__(self, host: str, cap: int) -> None:
        self.host, self.cap = host, cap

    def __call__(self, response: Any = None, caught_exception: BaseException | None = None, **_: Any) -> None:
        reason = None
        if response is not None:
            http, parsed = response
            code = (parsed or {}).get("Error", {}).get("Code")
            reason = "throttled" if http.status_code in (429, 503) or code in THROTTLING_CODES else None
        elif caught_exception is not None:
            reason = classify(caught_exception)[1]
        if reason is not None:
            limiter = host_limiter(self.host, self.cap)
            limiter.overloaded(reason, limiter.in_flight)
        return None


#: how s3fs reports a 416 (InvalidRange), translated into an OSError
_RANGE_PAST_END = ("range is not satisfiable", "InvalidRange")



#: protocol -> its reader (others: FileSystemReader)
READERS: dict[str, Callable[[Any, Any], Any]] = {
    "http": lambda fs, options: HttpReader(fs, options.connect_timeout, options.timeout),
    "https": lambda fs, options: HttpReader(fs, options.connect_timeout, options.timeout),
    "s3": lambda fs, options: S3Reader(fs, options.max_concurrency),
    "s3a": lambda fs, options: S3Reader(fs, options.max_concurrency),
}


def reader_for(fs: Any, options: Any) -> Any:
    """The reader of ``fs`` (an async fsspec file system), with zarrx's ``options``
    (:class:`~zarrx.storage.remote.RemoteOptions`)."""
    return READERS.get(protocols(fs)[0], lambda fs, options: FileSystemReader(fs))(fs, options)


def protocols(fs: Any) -> tuple[str, ...]:
    """The protocols of an fsspec file system (``("s3", "s3a")``)."""
    protocol = fs.protocol
    return (protocol,) if isinstance(protocol, str) else tuple(protocol)


def beneath_folders(fs: Any, root: str) -> tuple[Any, str]:
    """``fs`` and ``root`` with fsspec's ``DirFileSystem`` layers taken off: a folder of another
    file system is that file system below the folder, and zarrx uses it as it uses that one (local
    files written atomically and locked, S3 objects conditionally, a web server read-only, its keys
    quoted). A ``DirFileSystem`` says it is async whatever it wraps; used as one, a synchronous
    one fails on its first read. A root that climbs out of a local folder with ``..`` is refused,
    as ``DirFileSystem`` refuses it."""
    while isinstance(fs, DirFileSystem):
        root = fs._strip_protocol(root).strip("/")
        if isinstance(fs.fs, LocalFileSystem) and ".." in root.split("/"):
            raise StoreError(f"root {root!r} climbs out of the folder {fs.path!r} of {fs!r}")
        root = fs.fs.sep.join(part for part in (fs.path, root) if part)
        fs = fs.fs
    return fs, root


def own_instance(fs: Any) -> Any:
    """``fs`` made again in this process as unpickling makes it, where it is an async file system
    used in the process this one was forked from (fsspec refuses those: "not fork-safe")."""
    if not isinstance(fs, AsyncFileSystem):
        return fs
    try:
        return pickle.loads(pickle.dumps(fs))
    except Exception as error:  # noqa: BLE001 (whatever its options hold that cannot be copied)
        raise StoreError(f"cannot use {fs!r} in a forked process: it cannot be made again ({error}); "
                         "start processes with multiprocessing's 'spawn' method") from error  # fmt: skip


# -- synchronous file systems (fsspec's caches, zip, sftp, memory, ...) ---------------------------------
def read_synchronously(fs: Any, reads: Sequence[ObjectRead], options: Any) -> list[Any]:
    """One outcome per read (bytes, or the exception) from a synchronous file system: one
    ``cat_ranges`` (not ``cat``, which expands the glob characters ``*?[`` legal in node names);
    when it fails as a whole (a cache raises for the first missing file), key by key, so each
    outcome is its own key's. fsspec's caches report any failure to fetch a file as
    FileNotFoundError (``filecache`` asks ``exists``, which says False for a server answering
    500): the file system they cache is asked, in one batch, which of those keys truly are missing.
    """
    fresh = _fresh_cache_files(fs, reads)
    try:
        outcomes = _cat_ranges(fs, reads)
    except Exception:  # noqa: BLE001 (read again one by one: each outcome for its own key)
        _discard(fresh)
        outcomes = [_read_one(fs, read) for read in reads]
    target = getattr(fs, "fs", None) if isinstance(fs, CachingFileSystem) else None
    missing = [position for position, outcome in enumerate(outcomes) if isinstance(outcome, MISSING)]
    if target is None or not missing:
        return outcomes
    again = [reads[position] for position in missing]
    try:
        if isinstance(target, AsyncFileSystem):  # bounded, within deadlines, like the store's own reads
            confirmed = Transfers(target, reader_for(target, options), options).read_many(again)
        else:
            confirmed = _cat_ranges(target, again)
    except Exception as error:  # noqa: BLE001 (the whole batch failed: each key gets the error)
        confirmed = [error] * len(missing)
    for position, outcome in zip(missing, confirmed, strict=True):
        outcomes[position] = outcome
    return outcomes


def _fresh_cache_files(fs: Any, reads: Sequence[ObjectRead]) -> list[str]:
    """The files a whole-file cache (``simplecache``, ``filecache``) would download ``reads`` into.

    Its ``cat_ranges`` downloads them all with one ``get``; when a missing key ends that call,
    a download still streaming is cut short and its file stays, and a cache reads a file it
    finds as the whole object (a truncated chunk). fsspec names them only through
    ``_local_paths_for_ranges`` (the method its ``cat_ranges`` asks): [] where it has none.
    """
    local_paths = getattr(fs, "_local_paths_for_ranges", None)
    if local_paths is None:
        return []
    try:
        return list(local_paths([read.path for read in reads])[2])
    except Exception:  # noqa: BLE001 (a cache that cannot say: nothing to discard)
        return []


def _discard(paths: Sequence[str]) -> None:
    """Remove the cache files a failed batch may have left cut short (they were not cached before it)."""
    for path in paths:
        with contextlib.suppress(OSError):
            os.remove(path)


def _cat_ranges(fs: Any, reads: Sequence[ObjectRead]) -> list[Any]:
    paths, starts, ends = [read.path for read in reads], [read.start for read in reads], [read.end for read in reads]
    return fs.cat_ranges(paths, starts, ends, on_error="return")


def _read_one(fs: Any, read: ObjectRead) -> Any:
    # a batch of one, not cat_file: fsspec's caches turn any failure of cat_file into a
    # FileNotFoundError (the cached copy is missing), which would read as the fill value
    try:
        return _cat_ranges(fs, [read])[0]
    except Exception as error:  # noqa: BLE001 (an outcome, as cat_ranges gives them)
        return error
