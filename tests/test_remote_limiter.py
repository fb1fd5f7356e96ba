"""zarrx.storage.limiter: the adaptive windows of one host, driven by the answers they get (no servers)."""

from __future__ import annotations

import asyncio
import time

import pytest

from zarrx.storage.limiter import (
    FAILURE_FACTOR,
    INITIAL_CONNECTIONS,
    INITIAL_CONNECTIONS_WITHOUT_KEEP_ALIVE,
    INITIAL_REQUESTS,
    MIN_SLOW_CONNECT,
    THROTTLED_FACTOR,
    HostLimiter,
    host_limiter,
)


def answers(limiter: HostLimiter, count: int, latency: float = 0.02) -> None:
    for _ in range(count):
        limiter.succeeded(latency)


def after_recovery(limiter: HostLimiter) -> None:
    limiter._requests.recovery_until = time.monotonic() - 1  # as if a round trip had passed


def test_starts_moderate_and_doubles_per_round_trip_while_latency_holds():
    limiter = HostLimiter("http://h:80", cap=64)
    assert limiter.limit == INITIAL_REQUESTS == 16 and limiter.slow_start
    answers(limiter, 16)
    assert limiter.limit == 32
    answers(limiter, 100)
    assert limiter.limit == 64  # the user's cap is an upper bound


def test_the_cap_bounds_the_start_too():
    assert HostLimiter("http://h:80", cap=4).limit == 4
    assert HostLimiter("http://h:80", cap=4).connections == 4


def test_latency_that_does_not_hold_stops_the_growth():
    limiter = HostLimiter("http://h:80", cap=64)
    answers(limiter, 4, latency=0.020)
    grown = limiter.limit
    answers(limiter, 30, latency=0.200)  # ten times the baseline: the server is queueing
    assert limiter.limit == grown
    assert not limiter.slow_start


def test_throttling_shrinks_to_below_the_level_it_struck():
    limiter = HostLimiter("http://h:80", cap=64)
    answers(limiter, 30)
    limiter.overloaded("throttled", level=17)
    assert limiter.limit == pytest.approx(THROTTLED_FACTOR * 17) and limiter.ceiling == 17
    # the other requests refused in the same round trip: one decrease, not one per request
    for level in (20, 25, 30):
        limiter.overloaded("throttled", level=level)
    assert limiter.limit == pytest.approx(THROTTLED_FACTOR * 17)
    assert limiter.counts["decreases"] == 1 and limiter.counts["throttled"] == 4


def test_no_growth_during_recovery_then_quick_back_below_the_ceiling_then_slow_probing():
    limiter = HostLimiter("http://h:80", cap=64)
    answers(limiter, 30)
    limiter.overloaded("throttled", level=17)
    low = limiter.limit
    answers(limiter, 5)
    assert limiter.limit == low  # recovering: the requests of the refused round trip are still coming back
    after_recovery(limiter)
    answers(limiter, 10)
    assert limiter.limit == pytest.approx(16, abs=1)  # quickly back to just below the ceiling
    answers(limiter, 16)
    assert 16 < limiter.limit < 17.5  # past it only slowly
    # overload at the known ceiling again: back just below it, not halved
    after_recovery(limiter)
    limiter.overloaded("throttled", level=17)
    assert limiter.limit == 16


@pytest.mark.parametrize("reason", ["reset", "timeout"])
def test_resets_and_timeouts_halve(reason):
    limiter = HostLimiter("http://h:80", cap=64)
    answers(limiter, 48)
    limiter.overloaded(reason, level=40)
    assert limiter.limit == FAILURE_FACTOR * 40


def test_a_lower_level_in_the_same_round_trip_lowers_the_window_further():
    limiter = HostLimiter("http://h:80", cap=64)
    answers(limiter, 48)
    limiter.overloaded("throttled", level=40)
    limiter.overloaded("throttled", level=20)
    assert limiter.ceiling == 20 and limiter.limit == pytest.approx(THROTTLED_FACTOR * 20)


def test_the_window_never_drops_below_one():
    limiter = HostLimiter("http://h:80", cap=64)
    limiter.overloaded("reset", level=1)
    assert limiter.limit == 1


def test_connections_start_lower_on_a_host_that_closes_them():
    limiter = HostLimiter("http://h:80", cap=64)
    assert limiter.connections == INITIAL_CONNECTIONS

    async def one_connection(keeps_alive):
        await limiter.open_connection(1)
        limiter.connection_answered(0.001, holds_latency=True, keeps_alive=keeps_alive)

    asyncio.run(one_connection(False))
    assert limiter.keeps_alive is False
    assert limiter.connections == INITIAL_CONNECTIONS_WITHOUT_KEEP_ALIVE + 1


def test_slow_connects_halve_the_connection_window_and_set_the_connect_timeout():
    limiter = HostLimiter("http://h:80", cap=64)
    assert limiter.connect_timeout(10.0) == 10.0  # no connection timed yet: the configured timeout

    async def connections():
        for _ in range(3):
            await limiter.open_connection(1)
            limiter.connection_answered(0.0005, holds_latency=True, keeps_alive=True)
        assert limiter.connections == INITIAL_CONNECTIONS + 3  # one more per connection answered
        for _ in range(10):  # ten attempts at once; one is dropped by a full backlog, then the others
            await limiter.open_connection(1)
        for _ in range(4):
            limiter.connection_failed(slow=True)

    asyncio.run(connections())
    assert limiter.connections == 5  # half the ten being opened, once for the whole burst
    assert limiter.counts["slow connects"] == 4 and limiter.opening == 6
    assert limiter.connect_timeout(10.0) == MIN_SLOW_CONNECT  # eight loopback connects is less
    assert limiter.connect_timeout(10.0, attempt=2) == 4 * MIN_SLOW_CONNECT  # doubled per new attempt
    assert limiter.connect_timeout(0.05) == 0.05  # never past the configured one


def test_the_window_makes_requests_wait_and_hands_slots_on_in_order():
    async def scenario():
        limiter = HostLimiter("http://h:80", cap=2, initial=2)
        order = []

        async def request(name):
            await limiter.acquire(5)
            order.append(("start", name, limiter.in_flight))
            await asyncio.sleep(0.01)
            order.append(("end", name))
            limiter.release()

        await asyncio.gather(*(request(n) for n in range(5)))
        return limiter, order

    limiter, order = asyncio.run(scenario())
    assert max(count for event, *rest in order if event == "start" for count in rest[1:]) == 2
    assert [name for event, name, *_ in order if event == "start"] == [0, 1, 2, 3, 4]
    assert limiter.in_flight == 0


def test_a_retry_takes_the_next_free_slot_ahead_of_requests_not_yet_sent():
    async def scenario():
        limiter = HostLimiter("http://h:80", cap=1, initial=1)
        order = []

        async def request(name, first=False):
            await limiter.acquire(5, first=first)
            order.append(name)
            await asyncio.sleep(0.01)
            limiter.release()

        await limiter.acquire(5)  # the refused request still holds the only slot
        waiting = [asyncio.ensure_future(request(n)) for n in range(3)]
        await asyncio.sleep(0)
        retry = asyncio.ensure_future(request("retry", first=True))
        await asyncio.sleep(0)
        limiter.release()
        await asyncio.gather(*waiting, retry)
        return order

    assert asyncio.run(scenario()) == ["retry", 0, 1, 2]


def test_waiting_past_the_timeout_raises_and_leaves_no_slot_taken():
    async def scenario():
        limiter = HostLimiter("http://h:80", cap=1, initial=1)
        await limiter.acquire(1)
        with pytest.raises(asyncio.TimeoutError):
            await limiter.acquire(0.05)
        limiter.release()
        await limiter.acquire(0.05)  # the slot is free again
        return limiter

    assert asyncio.run(scenario()).in_flight == 1


def test_retry_after_pauses_new_requests_and_a_pause_past_the_deadline_is_refused():
    async def scenario():
        limiter = HostLimiter("http://h:80", cap=4)
        limiter.pause(0.2)
        started = time.monotonic()
        await limiter.acquire(1)
        waited = time.monotonic() - started
        limiter.release()
        limiter.pause(5)
        with pytest.raises(asyncio.TimeoutError, match="past the deadline"):
            await limiter.acquire(1)
        return waited

    assert asyncio.run(scenario()) >= 0.19


def test_one_limiter_per_host_and_cap_on_a_loop():
    async def scenario():
        return (
            host_limiter("http://a:80", 64) is host_limiter("http://a:80", 64),
            host_limiter("http://a:80", 64) is not host_limiter("http://b:80", 64),
            host_limiter("http://a:80", 64) is not host_limiter("http://a:80", 8),
        )

    assert asyncio.run(scenario()) == (True, True, True)
