"""Batches of remote requests: adaptive concurrency, retries, deadlines, bounded bodies.

:class:`Transfers` runs the batches of an :class:`~zarrx.storage.fsspec.FsspecStore` on an
async file system (HTTP, S3, GCS, Azure, ...) on fsspec's event loop, every request of a batch
concurrently, each:

* waiting for a slot of its host's :class:`~zarrx.storage.limiter.HostLimiter` (adaptive
  concurrency, capped by ``zarrx_max_concurrency``), and telling it how the request went;
* read by a *reader* (:mod:`zarrx.storage.readers`) that bounds the body by what the key may
  hold (:class:`ObjectRead`'s ``limit``);
* retried where the library underneath does not retry: HTTP (429, 500, 502, 503, 504,
  connection errors, timeouts, bodies cut short) after ``Retry-After`` when the server sends one,
  else after a jittered exponential backoff (:func:`backoff`), at most ``zarrx_retries`` times.
  botocore (S3), gcsfs and adlfs retry themselves, as :mod:`zarrx.storage.remote` configures them;
* bounded in time: no request outlives ``zarrx_request_deadline`` (all its attempts and waits),
  no batch ``zarrx_batch_deadline``; past either, :class:`DeadlineExceeded`.

The result of a batch is one outcome per request, in order -- the bytes, None for a missing
key, or the exception that ended it -- so no value is lost, duplicated or given to another key;
the store turns exceptions into errors naming the key and its URL.
"""

from __future__ import annotations

import asyncio
import inspect
import queue
import random
import sys
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Iterator, Sequence

from zarrx.errors import ZarrxError
from zarrx.storage.limiter import HostLimiter, host_limiter

__all__ = [
    "ObjectRead", "Attempt", "BodyTooLarge", "ServerAnswer", "SlowConnect", "DeadlineExceeded", "Transfers",
    "backoff", "RETRY_STATUSES", "classify", "describe_failure",
]  # fmt: skip

#: HTTP statuses worth a second try (RFC 9110: the server may answer differently later)
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
#: status -> the sign of overload it is
STATUS_OVERLOAD = {429: "throttled", 503: "throttled", 504: "timeout"}
BACKOFF_BASE = 0.1
BACKOFF_MAX = 5.0
#: requests of a batch that set off before the others are made ready
FIRST_REQUESTS = 8
#: seconds past the batch deadline a caller waits for the loop before giving up on it
BATCH_MARGIN = 5.0
#: seconds of jitter added to a server's Retry-After (requests refused together do not return together)
RETRY_AFTER_JITTER = 0.01
#: a connection attempt started afresh after a slow connect does not count as a retry, this many times
MAX_SLOW_CONNECTS = 6


@dataclass(frozen=True)
class ObjectRead:
    """One read: ``key`` at ``path``, bytes ``[start, end)`` as fsspec's ``cat_file`` takes them
    (None: open; a negative start: a suffix), of a value that may hold at most ``limit`` bytes."""

    key: str
    path: str
    start: int | None
    end: int | None
    limit: int

    @property
    def length(self) -> int | None:
        """Bytes asked for, when the request says."""
        if self.start is not None and self.start < 0:
            return -self.start
        if self.end is not None:
            return self.end - (self.start or 0)
        return None


@dataclass
class Attempt:
    """One attempt of a request, as its reader sees it."""

    limiter: HostLimiter
    deadline: float
    #: attempts of this request abandoned as slow connects so far
    slow_connects: int = 0
    #: requests in flight to the host when this one was sent (itself included)
    in_flight: int = 0
    #: requests the server had when this one was answered or failed, itself included (the reader
    #: sets it where it sees requests go on the wire; None: not known)
    level: int | None = None
    #: seconds to the first byte, connection set-up excluded (the reader sets it)
    latency: float | None = None
    #: whether the answer came on a new connection (the reader sets it)
    fresh: bool = False

    def remaining(self) -> float:
        return max(0.0, self.deadline - time.monotonic())


class BodyTooLarge(Exception):
    """A body larger than the value of the key may hold."""

    def __init__(self, size: int, limit: int, declared: bool) -> None:
        self.size, self.limit, self.declared = size, limit, declared
        what = f"declares {size} bytes (Content-Length)" if declared else f"sent more than {limit} bytes"
        super().__init__(f"the answer {what}, more than the {limit} bytes the value may hold")


class ServerAnswer(Exception):
    """An answer that is not the object: an error status (``Retry-After`` kept), or other bytes."""

    def __init__(self, status: int, reason: str | None, retry_after: str | None, transient: bool | None = None):
        self.status, self.reason, self.retry_after = status, reason, retry_after
        self.transient = status in RETRY_STATUSES if transient is None else transient
        super().__init__(f"the server answered {status} {reason or ''}".strip())

    def retry_after_seconds(self) -> float | None:
        """``Retry-After`` in seconds (delay-seconds or an HTTP date, RFC 9110 section 10.2.3)."""
        value = (self.retry_after or "").strip()
        if not value:
            return None
        if value.isdigit():
            return float(value)
        from email.utils import parsedate_to_datetime

        try:
            return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
        except (TypeError, ValueError):
            return None


class SlowConnect(Exception):
    """A connection attempt took longer than the host's usual: abandoned, to be started afresh."""


class DeadlineExceeded(TimeoutError):
    """A request or batch went past its deadline (the message says which and how long)."""


def describe_failure(error: BaseException, options: Any) -> tuple[bool, str]:
    """Whether ``error`` is a timeout, and what to say about it: which limit it met and the
    option (of :class:`~zarrx.storage.remote.RemoteOptions` ``options``) that sets it."""
    name, text = type(error).__name__, str(error)
    if isinstance(error, BodyTooLarge):
        unknown = error.limit == options.max_read_size
        return False, f"{text}{' (zarrx_max_read_size: the limit for values of no known size)' if unknown else ''}; refused"
    if isinstance(error, DeadlineExceeded):
        return True, f"timed out: {text}"
    if isinstance(error, TimeoutError) or "Timeout" in name:
        detail = f"{name}: {text}" if text else name
        if "Connect" in name:
            return True, f"timed out: no connection within {options.connect_timeout:g} s (zarrx_connect_timeout; {detail})"
        return True, f"timed out: no data for {options.timeout:g} s (zarrx_timeout; {detail})"
    if name == "TooManyRedirects":
        return False, f"redirected more than {getattr(error, 'history', None) and len(error.history) or 10} times (a redirect loop?)"
    return False, text if isinstance(error, ServerAnswer) else f"{name}: {text}"


def backoff(attempt: int) -> float:
    """Seconds to wait before retry number ``attempt`` (1, 2, ...): exponential, with jitter.

    Examples
    --------
    >>> 0.05 <= backoff(1) <= 0.1 and 0.2 <= backoff(3) <= 0.4
    True
    """
    return random.uniform(0.5, 1.0) * min(BACKOFF_MAX, BACKOFF_BASE * 2 ** (attempt - 1))


def classify(error: BaseException) -> tuple[bool, str | None]:
    """Whether a failed attempt is worth another, and the sign of overload it is (or None).

    Timeouts, connection resets and errors, bodies cut short, and the statuses of
    :data:`RETRY_STATUSES` are transient. A back end's error that says "SlowDown" or "reduce
    your request rate" (S3's throttling, once botocore's own retries are spent) is a sign of
    throttling, not tried again here.
    """
    if isinstance(error, ServerAnswer):
        return error.transient, STATUS_OVERLOAD.get(error.status)
    if isinstance(error, (BodyTooLarge, DeadlineExceeded)):
        return False, None
    if isinstance(error, (asyncio.TimeoutError, TimeoutError)) or "Timeout" in type(error).__name__:
        return True, "timeout"
    if isinstance(error, (ConnectionError, EOFError)) or _is_aiohttp_transient(error):
        return True, "reset"
    text = str(error)
    if any(sign in text for sign in ("SlowDown", "reduce your request rate", "Throttl", "TooManyRequests")):
        return False, "throttled"
    return False, None


def _is_aiohttp_transient(error: BaseException) -> bool:
    aiohttp = sys.modules.get("aiohttp")  # imported by whoever raised an aiohttp error
    if aiohttp is None:
        return False
    return isinstance(error, (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError)) and not isinstance(
        error, (aiohttp.InvalidURL, getattr(aiohttp, "TooManyRedirects", ()), getattr(aiohttp, "RedirectClientError", ()))
    )


# -- the runner -----------------------------------------------------------------------------------
@dataclass
class Transfers:
    """Runs batches of one store's requests (see the module docstring).

    ``reader`` reads one value (:func:`zarrx.storage.readers.reader_for`); ``options`` are the store's
    :class:`~zarrx.storage.remote.RemoteOptions`.
    """

    fs: Any
    reader: Any
    options: Any

    def limiter(self, path: str) -> HostLimiter:
        """The limiter of ``path``'s host for this store's cap (call on the loop)."""
        reader = self.reader
        # a reader that does not see connections (a zarr-python store) starts where its library
        # would, and grows one request per round trip (see HostLimiter.succeeded's late answers)
        initial = getattr(reader, "initial_requests", None)
        return host_limiter(reader.host(path), self.options.max_concurrency, initial=initial, slow_start=initial is None)

    def batch_size(self, method: str) -> dict[str, int]:
        """``{"batch_size": cap}`` when the file system's ``_<method>`` takes it (fsspec's batch
        methods do; some back ends override them without it), else ``{}``."""
        try:
            takes = "batch_size" in inspect.signature(getattr(self.fs, "_" + method)).parameters
        except (AttributeError, TypeError, ValueError):
            takes = False
        return {"batch_size": self.options.max_concurrency} if takes else {}

    # -- synchronous entry points ---------------------------------------------------------------
    def run(self, batch: Callable[[], Awaitable[Any]]) -> Any:
        """Run ``batch()`` on fsspec's loop and wait for it (the batch deadline bounds it)."""
        from fsspec.asyn import sync

        return sync(self.fs.loop, batch)

    def read_many(self, reads: Sequence[ObjectRead]) -> list[Any]:
        """One outcome per read, in order: bytes, None (missing) or the exception that ended it."""
        outcomes: list[Any] = [None] * len(reads)
        for position, outcome in self.iter_reads(reads):
            outcomes[position] = outcome
        return outcomes

    def iter_reads(self, reads: Sequence[ObjectRead]) -> Iterator[tuple[int, Any]]:
        """``(position, outcome)`` of each read as it completes, on the calling thread, so the
        caller can use one value while the others are in flight. Leaving early cancels the rest."""
        arrived: queue.SimpleQueue[tuple[int, Any]] = queue.SimpleQueue()

        async def batch() -> None:
            deadline = self._batch_deadline()

            async def one(position: int, read: ObjectRead) -> None:
                try:
                    outcome = await self._read(read, deadline)
                except Exception as error:  # noqa: BLE001 (an outcome of this read)
                    outcome = error
                arrived.put((position, outcome))

            tasks = []
            for position, read in enumerate(reads):
                tasks.append(asyncio.ensure_future(one(position, read)))
                if position == FIRST_REQUESTS:
                    await asyncio.sleep(0)  # the first requests go out before the rest are made ready
            await asyncio.gather(*tasks)

        running = asyncio.run_coroutine_threadsafe(batch(), self.fs.loop)
        try:
            for _ in range(len(reads)):
                # every read ends by the batch deadline; the margin only guards against a stuck loop
                try:
                    yield arrived.get(timeout=self.options.batch_deadline + BATCH_MARGIN)
                except queue.Empty:
                    raise DeadlineExceeded(self._deadline_text("batch", self.options.batch_deadline)
                                           + " (fsspec's event loop did not answer)") from None  # fmt: skip
        finally:
            running.cancel()

    def write_many(self, items: Sequence[tuple[str, str, bytes]]) -> list[Any]:
        """Write ``(key, path, value)`` items; one outcome per item (None or the exception)."""

        async def batch() -> list[Any]:
            deadline = self._batch_deadline()
            return await self._gather([self._write(path, value, deadline) for _, path, value in items])

        return self.run(batch)

    def send_many(self, requests: Sequence[tuple[str, Callable[[Attempt], Awaitable[Any]]]]) -> list[Any]:
        """Send ``(path, send)`` requests, each ``send(attempt)`` through the path's limiter with
        retries and deadlines, as reads are; one outcome per request (its result or the exception)."""

        async def batch() -> list[Any]:
            deadline = self._batch_deadline()
            return await self._gather([self._request(path, deadline, send) for path, send in requests])

        return self.run(batch)

    def send(
        self, path: str, make: Callable[[], Awaitable[Any]], error: Callable[[BaseException], Exception] | None = None
    ) -> Any:
        """One call of a store (a listing, a delete, a HEAD) through ``path``'s limiter, retried and
        bounded in time as reads are; its result. What ended it is raised: a zarrx error as it is,
        another as ``error(failure)`` makes it (``error`` None: as it is too)."""

        async def send(attempt: Attempt) -> Any:
            sent = time.monotonic()
            result = await make()
            attempt.latency = time.monotonic() - sent
            return result

        outcome = self.send_many([(path, send)])[0]
        if not isinstance(outcome, BaseException):
            return outcome
        if error is None or isinstance(outcome, ZarrxError):
            raise outcome
        raise error(outcome) from outcome

    def call(self, what: str, make: Callable[[], Awaitable[Any]]) -> Any:
        """One request of the file system (a listing, a delete), within the request deadline."""

        async def bounded() -> Any:
            try:
                async with asyncio.timeout(self.options.request_deadline):
                    return await make()
            except asyncio.TimeoutError:
                raise DeadlineExceeded(self._deadline_text("request", self.options.request_deadline, what)) from None

        return self.run(bounded)

    # -- on the loop ---------------------------------------------------------------------------------
    def _batch_deadline(self) -> float:
        return time.monotonic() + self.options.batch_deadline

    async def _gather(self, requests: list[Awaitable[Any]]) -> list[Any]:
        return list(await asyncio.gather(*requests, return_exceptions=True))

    def _deadline_text(self, which: str, seconds: float, what: str = "") -> str:
        option = {"request": "zarrx_request_deadline", "batch": "zarrx_batch_deadline"}[which]
        return f"no complete answer{what and ' to ' + what} within the {which} deadline of {seconds:g} s ({option})"

    async def _read(self, read: ObjectRead, batch_deadline: float) -> bytes | None:
        return await self._request(read.path, batch_deadline, lambda attempt: self.reader.read(read, attempt))

    async def _write(self, path: str, value: bytes, batch_deadline: float) -> None:
        async def put(attempt: Attempt) -> None:
            sent = time.monotonic()
            await self.fs._pipe_file(path, value)
            attempt.latency = time.monotonic() - sent

        return await self._request(path, batch_deadline, put)

    async def _request(self, path: str, batch_deadline: float, send: Callable[[Attempt], Awaitable[Any]]) -> Any:
        """One request with its retries, within its deadlines, through its host's limiter."""
        options = self.options
        request_deadline = time.monotonic() + options.request_deadline
        deadline = min(request_deadline, batch_deadline)
        which = ("request", options.request_deadline) if request_deadline <= batch_deadline else ("batch", options.batch_deadline)
        limiter = self.limiter(path)
        retries = options.retries if self.reader.retries else 0
        failures = slow_connects = 0
        while True:
            attempt = Attempt(limiter, deadline, slow_connects)
            acquired = False
            try:
                # one timer bounds the wait for a slot and the request (a timer costs as much
                # CPU as a tenth of a small request)
                async with asyncio.timeout(attempt.remaining()):
                    # a retry takes the next free slot before requests not yet sent: it is older
                    await limiter.acquire(attempt.remaining(), first=failures > 0, timed=False)
                    acquired = True
                    attempt.in_flight = limiter.in_flight
                    value = await send(attempt)
            except Exception as error:  # noqa: BLE001 (classified below)
                if not acquired:
                    if isinstance(error, asyncio.TimeoutError):
                        raise DeadlineExceeded(
                            self._deadline_text(*which) + " (waiting for the server to take requests)"
                        ) from None
                    raise
                failure = error
                # the requests the server had when it gave up: as the reader saw them on the wire,
                # else those in flight with this one (some perhaps still waiting for a connection)
                level = attempt.level if attempt.level is not None else max(attempt.in_flight, limiter.in_flight)
                if isinstance(error, asyncio.TimeoutError) and time.monotonic() >= deadline - 0.001:
                    limiter.overloaded("timeout", level)
                    raise DeadlineExceeded(self._deadline_text(*which)) from None
                transient, overload = classify(error)
                if overload is not None:
                    # before this request's slot is released: the slot must not go to a waiter
                    # at the size the window had before the server showed overload
                    limiter.overloaded(overload, level)
            else:
                late = None if getattr(self.reader, "sees_connections", True) else attempt.in_flight
                limiter.succeeded(attempt.latency if attempt.latency is not None else 0.0, attempt.fresh, late)
                return value
            finally:
                if acquired:
                    limiter.release()
            if isinstance(failure, SlowConnect) and slow_connects < MAX_SLOW_CONNECTS:
                slow_connects += 1  # started afresh at once: a new connection attempt, not a retry
                continue
            if not transient or failures >= retries:
                raise failure
            failures += 1
            retry_after = failure.retry_after_seconds() if isinstance(failure, ServerAnswer) else None
            # the server's Retry-After (its whole host pauses; 0: again at once, in the next free
            # slot, which the shrunk window paces), else a jittered backoff
            if retry_after is None:
                wait = backoff(failures)
            else:
                wait = retry_after + random.uniform(0, RETRY_AFTER_JITTER) if retry_after > 0 else 0.0
            if retry_after:
                limiter.pause(retry_after)
            if wait and time.monotonic() + wait >= deadline:
                raise DeadlineExceeded(
                    self._deadline_text(*which) + f" (the last attempt failed: {type(failure).__name__}: {failure}; "
                    f"the next would have come after {wait:.1f} s)"
                ) from failure
            if wait:
                await asyncio.sleep(wait)
