"""Adaptive concurrency per host: how many requests zarrx keeps in flight to one server.

A fixed number of concurrent requests is wrong for most servers: too few wastes a tuned
object store's parallelism, too many overflows a small web server (connection attempts beyond
its listen backlog are dropped and sent again by TCP after 1 s, 3 s, ...) or gets throttled.
:class:`HostLimiter` finds the level the way TCP's congestion control and the AWS SDK's
adaptive retry mode do, with two windows per host:

**Requests in flight** (``limit``, at most the store's cap ``zarrx_max_concurrency``). It starts
moderate (:data:`INITIAL_REQUESTS`) and grows by one per answer while latency holds (*slow
start*: it doubles every round trip), then by ``1/limit`` per answer (one per round trip). An
answer "holds latency" when its time to the first byte, less the client's connection set-up, is
within :data:`LATENCY_TOLERANCE` times the lowest of the last answers of its kind -- on a reused
connection, or on a new one (which a server must first accept, and may start a thread for);
slow start ends when answers keep missing that. Signs of overload shrink the window multiplicatively: 429/503/SlowDown to
:data:`THROTTLED_FACTOR` times the *level* of the refused request, connection resets and
timeouts to :data:`FAILURE_FACTOR` times it. The level is what the server had in hand when it
gave up: the requests on the wire (sent and not yet answered, :attr:`HostLimiter.on_wire`,
itself included) where the reader sees requests go out (HTTP), else the requests in flight
when it was sent (some of which may still have been waiting for a connection). The window
shrinks before the refused request gives its slot back, so the slot never goes to a request
waiting at the old size; a retry then takes the next free slot ahead of requests not yet sent. Requests in flight when a
server falls over all fail together: for a round trip after a decrease (the *recovery*) the
window does not grow, and further signs only lower it to their own level, so one overload is one
decrease. The level where overload struck (the *ceiling*) is remembered: the window grows back
quickly to just below it, then probes above it slowly (as CUBIC does), and overload met again at
that level only steps back below it, so a server that throttles above 16 requests sees about 16,
not a saw-tooth between 8 and 17. A ``Retry-After`` pauses
every new request to the host until then.

**New connections not yet answered** (``connections``). Every request on a fresh connection
holds one of these from the connection attempt until the first answer on it, so no more than
this many connection attempts queue at a server that has not accepted them yet: new
connections open at a bounded rate, and a listen backlog of 5 never sees 64 at once. It starts at
:data:`INITIAL_CONNECTIONS` (:data:`INITIAL_CONNECTIONS_WITHOUT_KEEP_ALIVE` once a host is seen
closing its connections after each answer, as HTTP/1.0 servers like ``python -m http.server``
do: there every request is a new connection, and this window is what bounds them). It follows
the rules of the request window, with connections answered for answers and *slow connects* for
signs of overload: an attempt taking longer than :meth:`HostLimiter.connect_timeout` (eight times
the usual connect time, at least :data:`MIN_SLOW_CONNECT` seconds) was dropped by a full listen
backlog; the caller abandons it and starts afresh rather than wait for TCP's one-second
retransmission, and the window halves to the number of connections being opened when that
attempt started (once per round trip), then probes that level slowly -- on a host that does not
keep connections alive, by one per round trip from there: where its backlog overflows depends on
how fast it accepts, not on a level it keeps. On such a host the attempts are also *paced*
(:meth:`HostLimiter.connect_gap`): spaced by the time to a first answer divided by the window,
so a window's worth arrives across a round trip rather than in one burst (a backlog of 5 dropped
most of a burst of 16 even when it could accept them one after another).

**Readers that do not see connections** (a zarr-python store opens its own, out of sight) start
the request window where their library would, out of slow start (:func:`host_limiter`'s
``initial``), and pass the level a request was sent at to :meth:`HostLimiter.succeeded`: an
answer :data:`LATE_ANSWER_FACTOR` times later than the baseline (at least
:data:`MIN_LATE_ANSWER` s) is then a sign of overload (a connection attempt a full backlog
dropped, which TCP sent again after a second).

One limiter serves every store of a process that talks to the same host with the same cap
(:func:`host_limiter`), per event loop. Everything here runs on that loop's thread: no locks.
"""

from __future__ import annotations

import asyncio
import collections
import time
import weakref
from typing import Any

__all__ = [
    "HostLimiter", "host_limiter", "INITIAL_REQUESTS", "INITIAL_CONNECTIONS", "LATENCY_TOLERANCE",
    "INITIAL_CONNECTIONS_WITHOUT_KEEP_ALIVE", "THROTTLED_FACTOR", "FAILURE_FACTOR", "MIN_SLOW_CONNECT",
    "OVERLOAD_FACTORS",
]  # fmt: skip

#: requests in flight a new host starts with ("moderate": zarr-python keeps 10)
INITIAL_REQUESTS = 16
#: new connections not yet answered a new host starts with
INITIAL_CONNECTIONS = 16
#: ... and a host closing its connections after each answer (below the backlog of 5 of small servers)
INITIAL_CONNECTIONS_WITHOUT_KEEP_ALIVE = 4
#: an answer within this factor of the lowest recent latency (plus a millisecond) lets a window grow
LATENCY_TOLERANCE = 2.0
LATENCY_SLACK = 0.001
#: answers whose latencies make the baseline (the lowest of them)
LATENCY_WINDOW = 100
#: multiplicative decreases, by sign of overload
THROTTLED_FACTOR = 0.7
FAILURE_FACTOR = 0.5
OVERLOAD_FACTORS = {"throttled": THROTTLED_FACTOR, "reset": FAILURE_FACTOR, "timeout": FAILURE_FACTOR}
#: between the ceiling and this many times it the window grows this many times slower; past it
#: the ceiling is forgotten
PROBE_SLOWDOWN = 4.0
FORGET_CEILING = 1.5
#: a connection attempt this many times slower than the usual one is a slow connect...
SLOW_CONNECT_FACTOR = 8.0
#: ...and never one faster than this (seconds)
MIN_SLOW_CONNECT = 0.1
#: the shortest recovery after a decrease (seconds); else two baseline latencies
MIN_RECOVERY = 0.05
#: where the reader cannot see connections (a zarr-python store), an answer this many times the
#: baseline latency, and at least MIN_LATE_ANSWER seconds, is a sign of overload: a connection
#: attempt dropped by a full listen backlog, which TCP sent again after a second
LATE_ANSWER_FACTOR = 8.0
MIN_LATE_ANSWER = 0.5


class _Window:
    """An adaptive bound on holders: ``acquire`` waits while ``held >= int(size)``; ``grow`` and
    ``shrink`` move ``size`` by the rules of the module docstring."""

    __slots__ = ("size", "cap", "held", "waiters", "slow_start", "ceiling", "recovery_until", "regrow")

    def __init__(self, size: float, cap: int, regrow: bool = True) -> None:
        self.size, self.cap = min(size, cap), cap
        #: after a decrease, grow back quickly to just below the ceiling (else one per round trip)
        self.regrow = regrow
        self.held = 0
        self.waiters: collections.deque[asyncio.Future] = collections.deque()
        #: growing by one per answer (until the first sign of overload or of rising latency)
        self.slow_start = True
        #: the level of the last overload: below it the window grows quickly, above it slowly
        self.ceiling: int | None = None
        self.recovery_until = -1e9

    def free(self) -> bool:
        return self.held < max(1, int(self.size))

    async def acquire(self, timeout: float | None, first: bool = False) -> None:
        if self.free() and not self.waiters:
            self.held += 1
            return
        waiter = asyncio.get_running_loop().create_future()
        if first:
            self.waiters.appendleft(waiter)
        else:
            self.waiters.append(waiter)
        try:
            if timeout is None:  # bounded by the caller, if at all (no timer of its own)
                await waiter
                return
            async with asyncio.timeout(timeout):
                await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self.release()  # granted while we were giving up: hand it on
            else:
                waiter.cancel()
                try:
                    self.waiters.remove(waiter)
                except ValueError:
                    pass
            raise

    def release(self) -> None:
        self.held -= 1
        self.wake()

    def wake(self) -> None:
        while self.waiters and self.free():
            waiter = self.waiters.popleft()
            if not waiter.done():
                self.held += 1
                waiter.set_result(None)

    def grow(self) -> None:
        """An answer that held latency: one more in slow start and up to just below the ceiling,
        slowly past it, one more per round trip once the ceiling is well behind."""
        if time.monotonic() < self.recovery_until:
            return
        size, ceiling = self.size, self.ceiling
        if self.slow_start or (self.regrow and ceiling is not None and size < ceiling - 1):
            size += 1
        elif not self.regrow:
            size += 1 / size
        elif ceiling is not None and size < FORGET_CEILING * ceiling:
            size += 1 / (size * PROBE_SLOWDOWN)
        else:
            self.ceiling = None
            size += 1 / size
        self.size = min(size, self.cap)
        self.wake()

    def shrink(self, level: int, factor: float, recovery: float) -> bool:
        """A sign of overload met at ``level`` holders: to ``factor`` times the level (just below
        it when it is the known ceiling), once per ``recovery`` seconds; True when a new decrease."""
        self.slow_start = False
        now = time.monotonic()
        known = self.ceiling
        new = now >= self.recovery_until or known is None
        if new:
            self.ceiling = level
            self.recovery_until = now + recovery
        else:
            self.ceiling = min(known, level)  # the same overload, seen by another request
        probed = known is not None and known - 1 <= level <= known + 1
        size = level - 1 if probed else factor * self.ceiling
        self.size = max(1.0, min(self.size, size))
        return new


class _Latencies:
    """The last latencies of one kind of answer: their lowest is the baseline (kept as they
    come, not searched for at every answer)."""

    __slots__ = ("recent", "smoothed_ratio", "baseline")

    def __init__(self) -> None:
        self.recent: collections.deque[float] = collections.deque(maxlen=LATENCY_WINDOW)
        self.smoothed_ratio = 1.0
        #: the lowest of ``recent`` (None: none yet)
        self.baseline: float | None = None

    def holds(self, latency: float) -> bool:
        baseline = self.baseline
        return baseline is None or latency <= LATENCY_TOLERANCE * baseline + LATENCY_SLACK

    def add(self, latency: float) -> tuple[bool, float]:
        """Record ``latency``: whether it held, and the smoothed ratio of latencies to the baseline."""
        holds = self.holds(latency)
        recent, baseline = self.recent, self.baseline
        leaving = recent[0] if len(recent) == recent.maxlen else None
        recent.append(latency)
        if baseline is None or latency <= baseline:
            self.baseline = baseline = latency
        elif leaving == baseline:  # the lowest left the window: the next lowest
            self.baseline = baseline = min(recent)
        self.smoothed_ratio = 0.9 * self.smoothed_ratio + 0.1 * latency / max(baseline, 1e-4)
        return holds, self.smoothed_ratio


class HostLimiter:
    """The adaptive windows of one host (see the module docstring).

    Examples
    --------
    >>> limiter = HostLimiter("http://example.org:80", cap=64)
    >>> limiter.limit, limiter.connections
    (16, 16)
    >>> for _ in range(16):
    ...     limiter.succeeded(0.02)
    >>> limiter.limit                                  # slow start: one more per answer
    32
    >>> limiter.overloaded("throttled", level=17)      # refused when sent as the 17th in flight
    >>> round(limiter.limit, 1), limiter.ceiling
    (11.9, 17)
    """

    def __init__(
        self, host: str, cap: int, *, initial: int = INITIAL_REQUESTS, connections: int = INITIAL_CONNECTIONS,
        slow_start: bool = True,
    ):  # fmt: skip
        self.host = host
        self.cap = cap
        self._requests = _Window(initial, cap)
        self._requests.slow_start = slow_start
        self._connections = _Window(connections, cap)
        #: requests sent and not yet answered (readers that see requests go on the wire count
        #: them): what the server has in hand, the level an overload is measured at
        self.on_wire = 0
        #: whether the host keeps connections alive (None: not seen yet)
        self.keeps_alive: bool | None = None
        #: latencies of answers on reused connections, and on new ones (which include the
        #: server's set-up of the connection: a thread to start, an accept queue to wait in)
        self._latency = {False: _Latencies(), True: _Latencies()}
        self._connect_time: float | None = None
        #: when the next connection attempt may start (:meth:`connect_gap`)
        self._next_connect = 0.0
        self._paused_until = 0.0
        #: what happened, for tests and ``repr``: answers, signs of overload, decreases, slow connects
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
    def slow_start(self) -> bool:
        """Whether the request window still grows by one per answer."""
        return self._requests.slow_start

    @property
    def ceiling(self) -> int | None:
        """The requests in flight when the server last showed overload."""
        return self._requests.ceiling

    @property
    def in_flight(self) -> int:
        return self._requests.held

    @property
    def opening(self) -> int:
        return self._connections.held

    async def acquire(self, timeout: float | None = None, first: bool = False, *, timed: bool = True) -> None:
        """Wait for a request slot (at most ``timeout`` seconds, else asyncio.TimeoutError, also
        when a ``Retry-After`` pause lasts longer), ahead of the other waiters when ``first`` (a
        retry); :meth:`release` it when the request is done. ``timed=False``: the caller bounds
        the wait itself (one timer for the slot and the request it then sends), and ``timeout``
        only refuses at once a pause that would outlast it."""
        wait = self._paused_until - time.monotonic()
        if wait > 0:
            if timeout is not None and wait >= timeout:
                raise asyncio.TimeoutError(f"the server asked to wait {wait:.1f} s more, past the deadline")
            await asyncio.sleep(wait)
            timeout = None if timeout is None else timeout - wait
        await self._requests.acquire(timeout if timed else None, first)

    def release(self) -> None:
        self._requests.release()

    async def open_connection(self, timeout: float | None = None) -> None:
        """Wait for the right to open a connection; then :meth:`connection_answered` (or
        :meth:`connection_failed`) when its first answer came (or it failed). On a host that
        closes its connections, attempts are also spaced (:meth:`connect_gap`)."""
        await self._connections.acquire(timeout)
        gap = self.connect_gap()
        if not gap:
            return
        now = time.monotonic()
        start = max(now, self._next_connect)
        self._next_connect = start + gap
        if start > now:
            try:
                await asyncio.sleep(start - now)
            except BaseException:
                self._connections.release()  # given up while waiting its turn: the slot goes on
                raise

    def connect_gap(self) -> float:
        """Seconds between two connection attempts to a host that closes its connections: the
        time to the first answer on a new connection spread over the window, so the window's
        attempts arrive across a round trip, not in one burst a listen backlog cannot hold
        (TCP pacing); 0 for hosts that keep connections alive, or before any answer."""
        if self.keeps_alive is not False:
            return 0.0
        fresh = self._latency[True].baseline
        return 0.0 if fresh is None else fresh / max(1.0, self._connections.size)

    # -- what the answers say ----------------------------------------------------------------
    @property
    def baseline(self) -> float | None:
        """The lowest latency of the last answers on reused connections, else on new ones (seconds)."""
        return self._latency[False].baseline or self._latency[True].baseline

    def holds_latency(self, latency: float, fresh: bool = False) -> bool:
        """Whether ``latency`` is within :data:`LATENCY_TOLERANCE` of the baseline of answers like
        it (on a new connection, ``fresh``, or a reused one)."""
        return self._latency[fresh].holds(latency)

    def succeeded(self, latency: float, fresh: bool = False, late_level: int | None = None) -> None:
        """An answer came ``latency`` seconds after the request was sent (connection set-up
        excluded), on a new connection (``fresh``) or a reused one. ``late_level``: the reader
        does not see connections (their set-up is in ``latency``) and the request was sent at
        that level: a late answer (:data:`LATE_ANSWER_FACTOR`) is a sign of overload there."""
        self.counts["answers"] += 1
        baseline = self._latency[fresh].baseline
        if late_level is not None and baseline is not None and latency > max(MIN_LATE_ANSWER, LATE_ANSWER_FACTOR * baseline):
            self.counts["late answers"] += 1
            self.overloaded("timeout", late_level)
            return
        holds, ratio = self._latency[fresh].add(latency)
        if ratio > LATENCY_TOLERANCE:
            self._requests.slow_start = False  # the answers keep coming later: the server is queueing
        if holds:
            self._requests.grow()

    def overloaded(self, reason: str, level: int | None = None) -> None:
        """A sign of overload (``"throttled"``, ``"reset"`` or ``"timeout"``) on a request sent
        while ``level`` requests were in flight (itself included): shrink (see the module docstring)."""
        self.counts[reason] += 1
        level = max(1, level if level is not None else self.in_flight)
        if self._requests.shrink(level, OVERLOAD_FACTORS[reason], self._recovery()):
            self.counts["decreases"] += 1

    def _recovery(self) -> float:
        return max(MIN_RECOVERY, 2 * (self.baseline or 0.0))

    def pause(self, seconds: float) -> None:
        """The server asked for ``Retry-After: seconds``: no new request to it before then."""
        self._paused_until = max(self._paused_until, time.monotonic() + seconds)

    # -- connections ---------------------------------------------------------------------------
    def connect_timeout(self, configured: float, attempt: int = 0) -> float:
        """How long a connection attempt may take before it counts as slow and is started afresh:
        eight times the usual connect time (at least 0.1 s), doubled on each new attempt, never
        more than ``configured``; ``configured`` until a connection has been timed."""
        if self._connect_time is None:
            return configured
        return min(configured, max(MIN_SLOW_CONNECT, SLOW_CONNECT_FACTOR * self._connect_time) * 2**attempt)

    def connection_answered(self, connect_seconds: float | None, holds_latency: bool, keeps_alive: bool) -> None:
        """The first answer came on a new connection, opened in ``connect_seconds``; the server
        keeps the connection alive for more requests or not."""
        if connect_seconds is not None:
            known = self._connect_time
            self._connect_time = connect_seconds if known is None else 0.8 * known + 0.2 * min(connect_seconds, 4 * known)
        window = self._connections
        if keeps_alive != self.keeps_alive:  # first seen, or changed (another server on the port)
            if not keeps_alive:
                window.size = min(window.size, INITIAL_CONNECTIONS_WITHOUT_KEEP_ALIVE)
            # without keep-alive every request is a new connection: where the backlog overflows
            # depends on how fast the server accepts them, not on a level it keeps, so after a
            # slow connect the window grows back by one per round trip (not at once to just
            # below that level)
            window.regrow = keeps_alive
        self.keeps_alive = keeps_alive
        window.release()
        if holds_latency:
            window.grow()

    def connection_failed(self, slow: bool, level: int | None = None) -> None:
        """A new connection failed before its first answer; ``slow``: its attempt timed out, sent
        while ``level`` connections were being opened (itself included; default: those now)."""
        window = self._connections
        if slow:
            self.counts["slow connects"] += 1
            window.shrink(max(1, level if level is not None else window.held), FAILURE_FACTOR, self._recovery())
        window.release()

    def __repr__(self) -> str:
        return (
            f"HostLimiter({self.host!r}, limit={self.limit:.1f}/{self.cap}, in_flight={self.in_flight}, "
            f"connections={self.connections:.1f}, opening={self.opening}, {dict(self.counts)})"
        )


#: event loop -> (host, cap) -> its limiter
_limiters: "weakref.WeakKeyDictionary[Any, dict[tuple[str, int], HostLimiter]]" = weakref.WeakKeyDictionary()


def host_limiter(
    host: str, cap: int, loop: asyncio.AbstractEventLoop | None = None, *, initial: int | None = None,
    slow_start: bool = True,
) -> HostLimiter:  # fmt: skip
    """The limiter of ``host`` (``"https://example.org:443"``) for stores capped at ``cap``, on
    ``loop`` (the running one by default); created on first use, with ``initial`` requests in
    flight (default :data:`INITIAL_REQUESTS`), in slow start or not."""
    loop = loop or asyncio.get_running_loop()
    by_host = _limiters.get(loop)
    if by_host is None:
        by_host = _limiters[loop] = {}
    limiter = by_host.get((host, cap))
    if limiter is None:
        limiter = by_host[(host, cap)] = HostLimiter(
            host, cap, initial=INITIAL_REQUESTS if initial is None else initial, slow_start=slow_start
        )
    return limiter
