"""How zarrx reads a zarr-python store's values: one read per request through
:class:`~zarrx.storage.transfers.Transfers`, sent again while late, with connection failures
told only in an error's text recognised as such (obstore's, through ``ObjectStore``); shared with
:mod:`zarrx.storage.obstore_reads`."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable

from zarrx.errors import StoreError
from zarrx.storage.http import host_of
from zarrx.storage.limiter import MIN_SLOW_CONNECT, SLOW_CONNECT_FACTOR
from zarrx.storage.transfers import Attempt, BodyTooLarge, ObjectRead

__all__ = ["store_host", "CONNECTION_FAILURES", "HEDGES"]


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
