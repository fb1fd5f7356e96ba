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
    (limiter,) = [lim for (host, _), lim in limiters._limiters[get_loop()].items() if url.endswith(host.split("//")[1])]
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
