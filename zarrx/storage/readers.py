"""How the values of each kind of async file system are read, bounded by what the key may hold.

A reader has ``read(read, attempt)`` (the value of an :class:`~zarrx.storage.transfers.ObjectRead`,
None when the key is missing), ``host(path)`` (whose :class:`~zarrx.storage.limiter.HostLimiter`
paces it) and ``retries`` (whether zarrx retries its transient failures, or the library does):

====================================  =====================================================================
:class:`~zarrx.storage.http.HttpReader`  ``http``, ``https``: zarrx's own GET (aiohttp); ``Content-Length``
                                      checked, bodies streamed to their limit; zarrx retries
:class:`S3Reader`                      ``s3``: ``GetObject``, its ``ContentLength`` checked before the body
                                      is streamed in; botocore retries (s3fs a body cut short)
:class:`FileSystemReader`              any other async file system: its ``_cat_file``, the size checked
                                      after; the library retries (gcsfs, adlfs)
====================================  =====================================================================
"""

from __future__ import annotations

import time
from typing import Any, Callable

from zarrx.storage.http import HttpReader
from zarrx.storage.transfers import Attempt, BodyTooLarge, ObjectRead

__all__ = ["FileSystemReader", "S3Reader", "READERS", "reader_for"]


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
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None
        attempt.latency = time.monotonic() - sent
        if len(value) > read.limit:
            raise BodyTooLarge(len(value), read.limit, declared=False)
        return bytes(value)


class S3Reader(FileSystemReader):
    """s3fs: ``GetObject``, its ``ContentLength`` checked before the body is streamed in.

    botocore retries the request (statuses, throttling, connection errors; ``adaptive`` mode);
    s3fs's ``_error_wrapper`` retries a body cut short, as its own ``_cat_file`` does.
    """

    def host(self, path: str) -> str:
        client = getattr(self.fs, "client_kwargs", None) or {}
        return str(client.get("endpoint_url") or getattr(self.fs, "endpoint_url", None) or "s3")

    async def read(self, read: ObjectRead, attempt: Attempt) -> bytes | None:
        from s3fs.core import _error_wrapper, version_id_kw

        fs = self.fs
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
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None
        except OSError as error:
            if ranged and any(sign in str(error) for sign in _RANGE_PAST_END):
                return b""  # S3's InvalidRange (416): the range starts past the end
            raise


#: how s3fs reports a 416 (InvalidRange), translated into an OSError
_RANGE_PAST_END = ("range is not satisfiable", "InvalidRange")



#: protocol -> its reader (others: FileSystemReader)
READERS: dict[str, Callable[[Any, Any], Any]] = {
    "http": lambda fs, options: HttpReader(fs, options.connect_timeout, options.timeout),
    "https": lambda fs, options: HttpReader(fs, options.connect_timeout, options.timeout),
    "s3": lambda fs, options: S3Reader(fs),
    "s3a": lambda fs, options: S3Reader(fs),
}


def reader_for(fs: Any, options: Any) -> Any:
    """The reader of ``fs`` (an async fsspec file system), with zarrx's ``options``
    (:class:`~zarrx.storage.remote.RemoteOptions`)."""
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return READERS.get(protocol, lambda fs, options: FileSystemReader(fs))(fs, options)
