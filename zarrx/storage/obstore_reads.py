"""How one value of an obstore store is read, for :class:`~zarrx.storage.transfers.Transfers`.

:class:`ObstoreReader` turns an :class:`~zarrx.storage.transfers.ObjectRead` into obstore's
``get_async``: a plain GET for a whole value (refused before its body is read when obstore's
answer says it is larger than the read's limit), a ranged GET for a byte range, whose answer is
cut to the bytes asked for whatever the server sent. obstore's errors that tell a timeout or a
failed connection only in their text become ``TimeoutError``/``ConnectionError`` (what
:func:`~zarrx.storage.transfers.classify` retries and counts as overload); its ``NotFoundError``
is a missing key (None), or :class:`MissingBucket` when the bucket itself is missing.
"""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any, Awaitable, Callable, Mapping

from zarrx.errors import StoreError
from zarrx.storage.foreign_threads import settle_at_exit
from zarrx.storage.http import host_of
from zarrx.storage.transfers import RETRY_STATUSES, Attempt, BodyTooLarge, ObjectRead, ServerAnswer
from zarrx.storage.zarr_python_reads import CONNECTION_FAILURES, _Failure, _hedged

__all__ = ["ObstoreReader", "MissingBucket", "store_host", "call", "not_found", "first_paragraph", "TimedOut"]

#: signs, in an obstore error's text, of a timeout (reqwest's "operation timed out", hyper's TimedOut)
TIMEOUT_SIGNS = ("timed out", "timedout", "deadline has elapsed")
#: the status of an answer in an obstore error's text (object_store's "non-2xx status code: 503 ...")
_STATUS = re.compile(r"status code: (\d{3})")
#: obstore stores of object store services, whose listen backlogs do not drop connection attempts
OBJECT_STORE_SERVICES = frozenset({"S3Store", "GCSStore", "AzureStore"})
#: signs of a range starting past the end of the value (S3's 416, object_store's own check)
RANGE_PAST_END = ("status code: 416", "starttoolarge", "range not satisfiable")


def store_host(store: Any) -> str:
    """What the requests of an obstore store are paced by (see the module docstring).

    Examples
    --------
    >>> from obstore.store import HTTPStore
    >>> store_host(HTTPStore.from_url("http://127.0.0.1:8000/data"))
    'http://127.0.0.1:80...'
    """
    kind = type(store).__name__
    url = getattr(store, "url", None)
    if isinstance(url, str) and "://" in url:
        return host_of(url)
    config = getattr(store, "config", None)
    if isinstance(config, Mapping):
        endpoint = config.get("endpoint") or config.get("aws_endpoint")
        if isinstance(endpoint, str) and "://" in endpoint:
            return host_of(endpoint)
        for name, scheme in (("bucket", {"S3Store": "s3", "GCSStore": "gs"}.get(kind)),
                             ("account_name", "az"), ("container_name", "az")):  # fmt: skip
            if scheme and config.get(name):
                return f"{scheme}://{config[name]}"
    return f"obstore.{kind}"


def first_paragraph(text: str) -> str:
    """obstore's messages go on with a debug dump of the error after a blank line."""
    return text.split("\n\n")[0].strip()


class TimedOut(TimeoutError):
    """An obstore error whose text says a request timed out."""


async def call(awaitable: Awaitable[Any]) -> Any:
    """Await an obstore call; an error status, a timeout or a connection failure told only in the
    error's text becomes a :class:`~zarrx.storage.transfers.ServerAnswer`, a TimeoutError or a
    ConnectionError, which :mod:`zarrx.storage.transfers` retries and counts as overload."""
    try:
        return await awaitable
    except (ConnectionError, TimeoutError, asyncio.TimeoutError, StoreError, FileNotFoundError):
        raise
    except Exception as error:
        text = str(error).lower()
        status = _STATUS.search(text)
        if status is not None and int(status[1]) in RETRY_STATUSES:  # 503 SlowDown, 429, 500, ...: for the limiter
            raise ServerAnswer(int(status[1]), first_paragraph(str(error))[:300], None) from error
        if any(sign in text for sign in TIMEOUT_SIGNS):
            raise TimedOut(f"{type(error).__name__}: {first_paragraph(str(error))}") from error
        if any(sign in text for sign in CONNECTION_FAILURES):
            raise _Failure(f"{type(error).__name__}: {first_paragraph(str(error))}") from error
        raise


def _wanted(read: ObjectRead, size: int) -> tuple[int, int]:
    """The bytes ``[start, end)`` of a value of ``size`` bytes that ``read`` asks for."""
    start, end = read.start, read.end
    if start is None and end is None:
        return 0, size
    if start is not None and start < 0:
        return max(0, size + start), size
    start = min(start or 0, size)
    return start, size if end is None else max(start, min(end, size))


def _get_options(read: ObjectRead) -> dict[str, Any] | None:
    """obstore's ``GetOptions`` for ``read``: none for a whole value (a plain GET)."""
    start, end = read.start, read.end
    if start is None and end is None or start == 0 and end is None:
        return None
    if start is not None and start < 0:
        return {"range": {"suffix": -start}}
    if end is None:
        return {"range": {"offset": start}}
    return {"range": (start or 0, end)}


class MissingBucket(FileNotFoundError):
    """obstore's NotFoundError for a bucket (or container) that does not exist: not a missing key."""


def not_found(error: BaseException) -> BaseException | None:
    """None for a missing key; a :class:`MissingBucket` when the bucket itself is missing."""
    text = str(error)
    if "NoSuchBucket" in text or "ContainerNotFound" in text or "bucket does not exist" in text.lower():
        return MissingBucket(first_paragraph(text))
    return None


class ObstoreReader:
    """Reads one value of an obstore store for :class:`~zarrx.storage.transfers.Transfers`."""

    #: obstore opens its connections out of sight: an answer's latency includes their set-up
    sees_connections = False
    #: requests in flight a host starts with, out of slow start (zarr-python's default concurrency)
    initial_requests = 10

    #: zarrx retries transient failures (obstore's own retries are off in the stores zarrx builds)
    retries = True

    def __init__(self, store: Any) -> None:
        self.store = store
        self._host = store_host(store)
        settle_at_exit()
        #: late requests are sent again (a web server), see :meth:`_send`
        self.hedges = type(store).__name__ not in OBJECT_STORE_SERVICES

    def host(self, path: str) -> str:
        return self._host

    async def _send(self, make: Callable[[], Awaitable[Any]], attempt: Attempt) -> Any:
        """``make()``'s answer: sent again while late to a web server (whose small listen backlog
        may have dropped the connection attempt, see ``zarr_python_reads._hedged``); once to an object
        store service (S3, GCS, Azure: a late answer there is load, which a second request adds to)."""
        if self.hedges:
            return await _hedged(make, attempt)
        sent = time.monotonic()
        value = await make()
        attempt.latency = time.monotonic() - sent
        return value

    async def read(self, read: ObjectRead, attempt: Attempt) -> bytes | None:
        import obstore

        options = _get_options(read)

        async def fetch(options: dict[str, Any] | None) -> bytes | None:
            try:
                result = await call(obstore.get_async(self.store, read.path, options=options))
            except FileNotFoundError as error:
                missing = not_found(error)
                if missing is not None:
                    raise missing from error
                return None
            size = int(result.meta["size"])
            start, end = _wanted(read, size)
            sent_start, sent_end = result.range
            if sent_end - sent_start > read.limit or options is None and size > read.limit:
                raise BodyTooLarge(max(size, sent_end - sent_start), read.limit, declared=True)
            data = await call(result.bytes_async())
            if sent_start > start or sent_start + len(data) < end:
                raise StoreError(f"obstore answered bytes {sent_start}-{sent_end} for bytes {start}-{end}")
            if (sent_start, sent_start + len(data)) == (start, end):
                return bytes(data)  # what was asked (the common case): one copy out of Rust's buffer
            return bytes(memoryview(data)[start - sent_start : end - sent_start])

        try:
            return await self._send(lambda: fetch(options), attempt)
        except Exception as error:
            name, text = type(error).__name__, str(error).lower()
            settled = (BodyTooLarge, TimeoutError, ConnectionError, ServerAnswer, StoreError)
            if options is None or isinstance(error, settled):
                raise
            # a server without ranges, or one answering a range of an empty value with all of it
            # (S3): the whole value, cut here
            if name == "NotSupportedError" or "non-partial response" in text:
                return await self._send(lambda: fetch(None), attempt)
            if any(sign in text for sign in RANGE_PAST_END):  # a range from past the end: nothing
                return b""
            raise
