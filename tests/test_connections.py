"""Connections that adapt (issue 28, item 4): the window of new connections grows while connects
are fast and shrinks on slow ones, on servers closing their connection after every answer too;
a server that accepts and never answers ends in a timeout naming the key.

Real servers (:mod:`tests.http_server`, in a thread of this process) and real reads through
``zarrx.open_array(url)``; the limiter's rules are checked on their own where a server could not
produce the case reliably (a listen backlog overflows or not depending on the machine's load).
"""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest
from fsspec.asyn import get_loop

import zarrx
from zarrx.errors import StoreTimeoutError
from zarrx.storage import limiter as limiters
from zarrx.storage.limiter import INITIAL_CONNECTIONS_WITHOUT_KEEP_ALIVE, HostLimiter
from zarrx.storage.remote import DEFAULT_REQUEST_DEADLINE, RemoteOptions

from tests.http_server import Stall, serve


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("served")
    values = np.arange(128 * 16, dtype="i4").reshape(128, 16)
    zarrx.create_array(root / "a.zarr", shape=(128, 16), chunks=(1, 16), dtype="i4")[:] = values
    return root, values


def limiter_of(url: str) -> HostLimiter:
    """The limiter zarrx's reads of ``url`` went through (fsspec's loop, the default cap)."""
    # hosts of other kinds of stores are named without "//" (a zarr-python store, a file system's class)
    limiters_of_loop = limiters._limiters[get_loop()].items()
    (limiter,) = [lim for (host, _), lim in limiters_of_loop if "//" in host and url.endswith(host.split("//")[1])]
    return limiter


def test_without_keep_alive_the_connection_window_grows_while_connects_are_fast(folder):
    root, values = folder
    with serve(root, delay=0.01, keep_alive=False, backlog=128) as server:
        np.testing.assert_array_equal(zarrx.open_array(f"{server.url}/a.zarr")[...], values)
        limiter = limiter_of(server.url)
        assert limiter.keeps_alive is False
        # every request a new connection: the window of new connections is what let them go
        # out together, grown from where it starts for such servers
        assert server.connections() == server.count() == 129
        assert limiter.connections > 2 * INITIAL_CONNECTIONS_WITHOUT_KEEP_ALIVE
        assert server.max_in_flight() > 2 * INITIAL_CONNECTIONS_WITHOUT_KEEP_ALIVE


def test_without_keep_alive_after_a_slow_connect_the_window_grows_back_one_per_round_trip():
    limiter = HostLimiter("http://h:80", cap=64)

    async def connections() -> None:
        for _ in range(16):  # the server closes every connection: the window starts small, then doubles
            await limiter.open_connection(1)
            limiter.connection_answered(0.0005, holds_latency=True, keeps_alive=False)
        assert limiter.connections == INITIAL_CONNECTIONS_WITHOUT_KEEP_ALIVE + 16 == 20
        for _ in range(20):  # twenty connections being opened; the last one is dropped by a full backlog
            await limiter.open_connection(1)
        limiter.connection_failed(slow=True, level=20)
        limiter.connection_failed(slow=True, level=19)  # the same overflow: no second decrease
        assert limiter.connections == 10
        limiter._connections.recovery_until = time.monotonic() - 1  # as if a round trip had passed
        for _ in range(18):  # the others are answered fast
            limiter.connection_answered(0.0005, holds_latency=True, keeps_alive=False)

    asyncio.run(connections())
    # one per round trip (about 1/size per answer), not back at once to just below the overflow's level
    assert 10 < limiter.connections < 12


def test_with_keep_alive_the_window_grows_back_quickly_to_below_the_overflow():
    limiter = HostLimiter("http://h:80", cap=64, connections=32)

    async def connections() -> None:
        for _ in range(20):
            await limiter.open_connection(1)
        limiter.connection_failed(slow=True, level=20)
        limiter._connections.recovery_until = time.monotonic() - 1
        for _ in range(9):  # connections stay open and are reused: the level is one the server keeps
            limiter.connection_answered(0.0005, holds_latency=True, keeps_alive=True)

    asyncio.run(connections())
    assert limiter.connections == 19


def test_a_server_that_never_answers_is_a_timeout_naming_the_key(folder):
    root, _ = folder
    with serve(root, behaviour=Stall(paths="/c/")) as server:
        array = zarrx.open_array(f"{server.url}/a.zarr", storage_options={"zarrx_request_deadline": 0.5})
        started = time.monotonic()
        with pytest.raises(StoreTimeoutError, match=r"could not read 'c/0/0' at .*request deadline of 0.5 s"):
            array[0]
        assert time.monotonic() - started < 5


def test_by_default_a_silent_server_raises_within_a_minute(monkeypatch):
    monkeypatch.delenv("ZARRX_REQUEST_DEADLINE", raising=False)
    assert RemoteOptions().request_deadline == DEFAULT_REQUEST_DEADLINE <= 60


def _fresh_host_without_keep_alive(window: int) -> HostLimiter:
    """A limiter that has seen a host close its connections, answering new ones in 20 ms."""
    limiter = HostLimiter("http://h:80", cap=64, connections=window)
    limiter.succeeded(0.02, fresh=True)
    limiter.keeps_alive = False
    return limiter


def test_without_keep_alive_connection_attempts_are_spaced_over_a_round_trip():
    # a window of 4 connections answering in 20 ms: an attempt every 5 ms, not 4 in one burst a
    # listen backlog of a few may drop (TCP would send them again a second later)
    limiter = _fresh_host_without_keep_alive(4)
    assert limiter.connect_gap() == pytest.approx(0.005)
    starts: list[float] = []

    async def connections() -> None:
        for _ in range(4):
            await limiter.open_connection(1)
            starts.append(time.monotonic())

    asyncio.run(connections())
    gaps = [later - earlier for earlier, later in zip(starts, starts[1:])]
    assert min(gaps) >= 0.004, gaps


def test_with_keep_alive_or_before_any_answer_connections_are_not_spaced():
    kept = HostLimiter("http://h:80", cap=64)
    kept.succeeded(0.02, fresh=True)
    kept.keeps_alive = True
    unknown = HostLimiter("http://h:80", cap=64)
    assert kept.connect_gap() == unknown.connect_gap() == 0.0

    async def connections() -> float:
        started = time.monotonic()
        for _ in range(16):
            await kept.open_connection(1)
        return time.monotonic() - started

    assert asyncio.run(connections()) < 0.05


def test_an_attempt_given_up_while_waiting_its_turn_gives_its_slot_back():
    limiter = _fresh_host_without_keep_alive(4)

    async def connections() -> None:
        await limiter.open_connection(1)  # the first goes at once, the next waits its 5 ms
        waiting = asyncio.ensure_future(limiter.open_connection(1))
        await asyncio.sleep(0.001)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting

    asyncio.run(connections())
    assert limiter.opening == 1


def test_a_host_seen_keeping_connections_then_closing_them_gets_the_small_window():
    # another server on the same host and port (a restart, a proxy's other configuration): what
    # was learned of the first must not let a burst of connections at the second's backlog
    limiter = HostLimiter("http://h:80", cap=64, connections=32)

    async def connections() -> None:
        await limiter.open_connection(1)
        limiter.connection_answered(0.0005, holds_latency=False, keeps_alive=True)
        assert limiter.connections == 32 and limiter._connections.regrow
        await limiter.open_connection(1)
        limiter.connection_answered(0.0005, holds_latency=False, keeps_alive=False)

    asyncio.run(connections())
    assert limiter.connections == INITIAL_CONNECTIONS_WITHOUT_KEEP_ALIVE and not limiter._connections.regrow
