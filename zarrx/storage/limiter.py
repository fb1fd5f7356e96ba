"""Adaptive concurrency per host: how many requests zarrx keeps in flight to one server.

A fixed number of concurrent requests is wrong for most servers: too few wastes a tuned
object store's parallelism, too many overflows a small web server (connection attempts beyond
its listen backlog are dropped and sent again by TCP after 1 s, 3 s, ...) or gets throttled.
:class:`HostLimiter` finds the level the way TCP's congestion control and the AWS SDK's
adaptive retry mode do, with two windows per host:

**Requests in flight** (``limit``, at most the store's cap ``zarrx_max_concurrency``). It starts
moderate (:data:`INITIAL_REQUESTS`) and grows by one per answer while latency holds (*slow
start*: it doubles every round trip), then by ``1/limit`` per answer (one per round trip). An
answer "holds latency" when its time to the first byte, less any connection set-up, is within
:data:`LATENCY_TOLERANCE` times the lowest of the last answers. Signs of overload shrink it
multiplicatively, at most once per round trip (the requests already in flight when a server
falls over all fail together): 429/503/SlowDown (x :data:`THROTTLED_FACTOR`), connection resets
and timeouts (x :data:`FAILURE_FACTOR`). The level where overload struck is remembered: the
window grows back quickly to just below it, then probes above it slowly (as CUBIC does), so a
server that throttles above 16 requests sees 16, not a saw-tooth between 8 and 17.
A ``Retry-After`` pauses every new request to the host until then.

**New connections not yet answered** (``connections``). Every request on a fresh connection
holds one of these from the connection attempt until the first answer on it, so no more than
this many connection attempts queue at a server that has not accepted them yet: a server with
a listen backlog of 5 never sees 64 at once. It starts at :data:`INITIAL_CONNECTIONS`, doubles
every round trip while connections open quickly, and halves on a *slow connect*: an attempt
taking longer than :meth:`HostLimiter.connect_timeout` (eight times the usual connect time, at
least :data:`MIN_SLOW_CONNECT` seconds), which the caller then abandons and starts afresh rather
than wait for TCP's one-second retransmission. Servers that keep connections alive pay this
only while connections are first opened; over HTTP/1.0 (a connection per request, as ``python
-m http.server``) it is what bounds the requests in flight.

One limiter serves every store of a process that talks to the same host with the same cap
(:func:`host_limiter`), per event loop. Everything here runs on that loop's thread, so no locks.
"""

from __future__ import annotations

import asyncio
import collections
import time
import weakref
from typing import Any

__all__ = [
    "HostLimiter", "host_limiter", "INITIAL_REQUESTS", "INITIAL_CONNECTIONS", "LATENCY_TOLERANCE",
    "THROTTLED_FACTOR", "FAILURE_FACTOR", "MIN_SLOW_CONNECT", "OVERLOAD_FACTORS",
]  # fmt: skip

#: requests in flight a new host starts with ("moderate": zarr-python keeps 10)
INITIAL_REQUESTS = 16
#: new connections a host starts with (below the listen backlog of 5 that small servers keep)
INITIAL_CONNECTIONS = 4
#: an answer within this factor of the lowest recent latency lets the window grow
LATENCY_TOLERANCE = 2.0
#: answers whose latencies make the baseline (the lowest of them)
LATENCY_WINDOW = 100
#: multiplicative decreases, by sign of overload
THROTTLED_FACTOR = 0.7
FAILURE_FACTOR = 0.5
OVERLOAD_FACTORS = {"throttled": THROTTLED_FACTOR, "reset": FAILURE_FACTOR, "timeout": FAILURE_FACTOR}
#: beyond the level of the last overload the window grows this many times slower
PROBE_SLOWDOWN = 4.0
#: a connection attempt this many times slower than the usual one is a slow connect...
SLOW_CONNECT_FACTOR = 8.0
#: ...and never one faster than this (seconds)
MIN_SLOW_CONNECT = 0.1
#: the shortest time between two decreases (seconds), when no latency is known yet
MIN_DECREASE_INTERVAL = 0.05


class _Window:
    """Waiters for a bounded number of holders: ``acquire`` waits while ``held >= int(size)``."""

    __slots__ = ("size", "held", "waiters")

    def __init__(self, size: float) -> None:
        self.size = size
        self.held = 0
        self.waiters: collections.deque[asyncio.Future] = collections.deque()

    def free(self) -> bool:
        return self.held < max(1, int(self.size))

    async def acquire(self, timeout: float | None, paused_until: float = 0.0) -> None:
        while True:
            wait = paused_until - time.monotonic()
            if wait <= 0:
                break
            if timeout is not None and wait >= timeout:
                raise asyncio.TimeoutError(f"the server asked to wait {wait:.1f} s, past the deadline")
            await asyncio.sleep(wait)
            timeout = None if timeout is None else timeout - wait
            paused_until = 0.0
        if self.free() and not self.waiters:
            self.held += 1
            return
        waiter = asyncio.get_running_loop().create_future()
        self.waiters.append(waiter)
        try:
            await asyncio.wait_for(asyncio.shield(waiter), timeout)
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self.release()  # granted while we were giving up: hand it on
            else:
                waiter.cancel()
                self._remove(waiter)
            raise

    def _remove(self, waiter: asyncio.Future) -> None:
        try:
            self.waiters.remove(waiter)
        except ValueError:
            pass

    def release(self) -> None:
        self.held -= 1
        self.wake()

    def wake(self) -> None:
        while self.waiters and self.free():
            waiter = self.waiters.popleft()
            if not waiter.done():
                self.held += 1
                waiter.set_result(None)


class HostLimiter:
    """The adaptive windows of one host (see the module docstring).

    Examples
    --------
    >>> limiter = HostLimiter("http://example.org", cap=64)
    >>> limiter.limit, limiter.connections
    (16, 4)
    >>> for _ in range(16):
    ...     limiter.succeeded(0.02)
    >>> limiter.limit                       # slow start: one more per answer
    32
    >>> limiter.overloaded("throttled", in_flight=20)
    >>> round(limiter.limit, 1), limiter.ceiling
    (14.0, 20)
    """

    def __init__(self, host: str, cap: int, *, initial: int = INITIAL_REQUESTS, connections: int = INITIAL_CONNECTIONS):
        self.host = host
        self.cap = cap
        self._requests = _Window(min(initial, cap))
        self._connections = _Window(min(connections, cap))
        #: growing by one per answer (until the first sign of overload or of rising latency)
        self.slow_start = True
        self.connection_slow_start = True
        #: the level of the last overload: below it the window grows quickly, above it slowly
        self.ceiling: int | None = None
        self._latencies: collections.deque[float] = collections.deque(maxlen=LATENCY_WINDOW)
        self._smoothed_ratio = 1.0
        self._connect_time: float | None = None
        self._last_decrease = -1e9
        self.paused_until = 0.0
        #: what happened, for tests and ``repr``: answers, decreases by reason, slow connects
        self.counts: collections.Counter[str] = collections.Counter()

    # -- the windows -----------------------------------------------------------------------
    @property
    def limit(self) -> float:
        """Requests allowed in flight."""
        return self._requests.size

    @property
    def connections(self) -> float:
        """New connections allowed to be waiting for their first answer."""
        return self._connections.size

    @property
    def in_flight(self) -> int:
        return self._requests.held

    @property
    def opening(self) -> int:
        return self._connections.held

    async def acquire(self, timeout: float | None = None) -> None:
        """Wait (at most ``timeout`` seconds: asyncio.TimeoutError) for a request slot; then
        :meth:`release` it when the request is done."""
        await self._requests.acquire(timeout, self.paused_until)

    def release(self) -> None:
        self._requests.release()

    async def open_connection(self, timeout: float | None = None) -> None:
        """Wait for the right to open a connection; then :meth:`connection_answered` (or
        :meth:`connection_failed`) when its first answer came (or it failed)."""
        await self._connections.acquire(timeout)

    # -- what the answers say ----------------------------------------------------------------
    @property
    def baseline(self) -> float | None:
        """The lowest latency of the last answers (seconds)."""
        return min(self._latencies) if self._latencies else None

    def holds_latency(self, latency: float) -> bool:
        """Whether ``latency`` is within :data:`LATENCY_TOLERANCE` of the baseline (1 ms of slack
        for clocks and loaded machines)."""
        baseline = self.baseline
        return baseline is None or latency <= LATENCY_TOLERANCE * baseline + 0.001

    def succeeded(self, latency: float) -> None:
        """An answer came ``latency`` seconds after the request was sent (connection set-up excluded).

        The window grows when the answer holds latency; slow start ends when the answers keep
        not doing so (a smoothed ratio to the baseline above the tolerance), not on one late answer.
        """
        self.counts["answers"] += 1
        holds = self.holds_latency(latency)
        self._latencies.append(latency)
        ratio = latency / max(self.baseline, 1e-4)
        self._smoothed_ratio = 0.9 * self._smoothed_ratio + 0.1 * ratio
        if self._smoothed_ratio > LATENCY_TOLERANCE:
            self.slow_start = False
        if not holds:
            return
        window = self._requests
        if self.slow_start or (self.ceiling is not None and window.size < self.ceiling - 1):
            window.size += 1
        elif self.ceiling is not None and window.size >= self.ceiling - 1:
            window.size += 1 / (window.size * PROBE_SLOWDOWN)
        else:
            window.size += 1 / window.size
        window.size = min(window.size, self.cap)
        window.wake()

    def overloaded(self, reason: str, in_flight: int | None = None) -> None:
        """A sign of overload (``"throttled"``, ``"reset"`` or ``"timeout"``) while ``in_flight``
        requests were in flight: shrink, at most once per round trip."""
        self.counts[reason] += 1
        self.slow_start = False
        now = time.monotonic()
        if now - self._last_decrease < max(MIN_DECREASE_INTERVAL, 2 * (self.baseline or 0)):
            return
        self._last_decrease = now
        level = max(1, in_flight if in_flight is not None else self.in_flight)
        self.ceiling = level
        self._requests.size = max(1.0, min(self._requests.size, level) * OVERLOAD_FACTORS[reason])
        self.counts["decreases"] += 1

    def pause(self, seconds: float) -> None:
        """The server asked for ``Retry-After: seconds``: no new request to it before then."""
        self.paused_until = max(self.paused_until, time.monotonic() + seconds)

    # -- connections ---------------------------------------------------------------------------
    def connect_timeout(self, configured: float, attempt: int = 0) -> float:
        """How long a connection attempt may take before it counts as slow and is started afresh:
        eight times the usual connect time (at least 0.1 s), doubled on each new attempt, never
        more than ``configured``; ``configured`` until a connection has been timed."""
        if self._connect_time is None:
            return configured
        return min(configured, max(MIN_SLOW_CONNECT, SLOW_CONNECT_FACTOR * self._connect_time) * 2**attempt)

    def connection_answered(self, connect_seconds: float | None, holds_latency: bool = True) -> None:
        """The first answer came on a new connection, opened in ``connect_seconds``."""
        if connect_seconds is not None:
            known = self._connect_time
            self._connect_time = connect_seconds if known is None else 0.8 * known + 0.2 * min(connect_seconds, 4 * known)
        window = self._connections
        if holds_latency:
            window.size += 1 if self.connection_slow_start else 1 / window.size
            window.size = min(window.size, max(self.cap, 1))
        window.release()

    def connection_failed(self, slow: bool) -> None:
        """A new connection failed before its first answer; ``slow``: its attempt timed out."""
        if slow:
            self.counts["slow connects"] += 1
            self.connection_slow_start = False
            self._connections.size = max(1.0, self._connections.size / 2)
        self._connections.release()

    def __repr__(self) -> str:
        return (
            f"HostLimiter({self.host!r}, limit={self.limit:.1f}/{self.cap}, in_flight={self.in_flight}, "
            f"connections={self.connections:.1f}, opening={self.opening}, {dict(self.counts)})"
        )


#: event loop -> (host, cap) -> its limiter
_limiters: "weakref.WeakKeyDictionary[Any, dict[tuple[str, int], HostLimiter]]" = weakref.WeakKeyDictionary()


def host_limiter(host: str, cap: int, loop: asyncio.AbstractEventLoop | None = None) -> HostLimiter:
    """The limiter of ``host`` (``"https://example.org:443"``) for stores capped at ``cap``, on
    ``loop`` (the running one by default); created on first use."""
    loop = loop or asyncio.get_running_loop()
    by_host = _limiters.setdefault(loop, {})
    limiter = by_host.get((host, cap))
    if limiter is None:
        limiter = by_host[(host, cap)] = HostLimiter(host, cap)
    return limiter
