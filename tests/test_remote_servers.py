"""Remote reads on the servers people actually meet, started here on 127.0.0.1.

Exactly ``python -m http.server`` (HTTP/1.0: a connection per request; no byte ranges; listen
backlog 5), a server adding 20 ms with a listen backlog of 5, one closing its connections after
every answer, one answering 503 + ``Retry-After`` above 16 requests in flight, one asking to
retry after a second, moto's S3 server answering SlowDown; and fsspec's caches in front of
them. Every read returns the right values, with no chunk lost, duplicated or given to another
key. (How fast is measured in ``benchmarks/bench_latency.py``.)
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from collections import Counter

import numpy as np
import pytest

pytest.importorskip("aiohttp")
s3fs = pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

import zarrx  # noqa: E402
from fsspec.asyn import sync  # noqa: E402

from zarrx.errors import StoreError  # noqa: E402
from zarrx.storage import make_store  # noqa: E402
from zarrx.storage.limiter import INITIAL_CONNECTIONS_WITHOUT_KEEP_ALIVE  # noqa: E402
from tests.http_server import FailAlways, FailFirst, RefuseFirst, Throttle, serve, serve_plain  # noqa: E402
from tests.s3_server import serve_s3  # noqa: E402

DELAY = 0.02
CHUNKS = 256
EXPECTED = np.arange(CHUNKS * 16, dtype="f4").reshape(CHUNKS, 16)
SHARDED = np.arange(32 * 32, dtype="i4").reshape(32, 32)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("servers")
    many = zarrx.create_array(root / "many.zarr", shape=(CHUNKS, 16), chunks=(1, 16), dtype="f4", fill_value=-1)
    many[:] = EXPECTED
    sharded = zarrx.create_array(root / "sharded.zarr", shape=(32, 32), chunks=(4, 4), shards=(16, 16), dtype="i4")
    sharded[:] = SHARDED
    holes = zarrx.create_array(root / "holes.zarr", shape=(8,), chunks=(2,), dtype="i2", fill_value=-7)
    holes[:4] = 3  # chunks 2 and 3 are missing
    return root


def _chunk_gets(server):
    return [r for r in server.requests if r.method == "GET" and "/c/" in r.path]


def _each_chunk_answered_once(server, prefix="/many.zarr/c/", count=CHUNKS):
    answered = Counter(r.path for r in _chunk_gets(server) if r.status == 200 and r.path.startswith(prefix))
    assert len(answered) == count and set(answered.values()) == {1}, answered.most_common(3)


# -- exactly `python -m http.server` ---------------------------------------------------------------
def test_python_http_server(folder):
    with serve_plain(folder) as server:
        np.testing.assert_array_equal(zarrx.open_array(f"{server.url}/many.zarr")[:], EXPECTED)
        # it ignores Range: every range is cut out of the whole object it sends
        sharded = zarrx.open_array(f"{server.url}/sharded.zarr")
        np.testing.assert_array_equal(sharded[3:9, 5:21], SHARDED[3:9, 5:21])
        np.testing.assert_array_equal(sharded[:], SHARDED)
        assert zarrx.open_array(f"{server.url}/holes.zarr")[:].tolist() == [3, 3, 3, 3, -7, -7, -7, -7]
        assert "many.zarr" in make_store(server.url).list_dir("")


# -- small listen backlogs, connections not kept alive ----------------------------------------------
def test_a_slow_server_with_a_backlog_of_5_keeps_its_connections_busy(folder):
    with serve(folder, delay=DELAY, backlog=5) as server:
        array = zarrx.open_array(f"{server.url}/many.zarr")
        server.reset()
        np.testing.assert_array_equal(array[:], EXPECTED)
        _each_chunk_answered_once(server)
        # kept alive: far fewer connections than requests, and many requests in flight on them
        assert server.connections() <= 64 and server.max_in_flight() > 10


def test_new_connections_are_opened_a_few_at_a_time_on_a_server_that_closes_them(folder):
    # HTTP/1.0 style: every request needs a new connection, so the connection window bounds them
    with serve(folder, delay=DELAY, backlog=5, keep_alive=False) as server:
        array = zarrx.open_array(f"{server.url}/many.zarr")
        server.reset()
        np.testing.assert_array_equal(array[:], EXPECTED)
        _each_chunk_answered_once(server)
        gets = sorted(_chunk_gets(server), key=lambda r: r.start)
        assert server.connections() == len(gets)  # one connection per request
        before_any_answer = [r for r in gets if r.start < gets[0].end]
        # the window starts at 4 on such a host, and the answer that showed it grew it by one
        assert len(before_any_answer) <= INITIAL_CONNECTIONS_WITHOUT_KEEP_ALIVE + 1


# -- throttling ----------------------------------------------------------------------------------------
def test_a_throttling_server_is_read_at_the_level_it_allows(folder):
    behaviour = Throttle(limit=16, retry_after="0", paths="/c/")
    with serve(folder, delay=DELAY, backlog=128, behaviour=behaviour) as server:
        array = zarrx.open_array(f"{server.url}/many.zarr")
        server.reset()
        np.testing.assert_array_equal(array[:], EXPECTED)
        _each_chunk_answered_once(server)
        refused = sum(r.status == 503 for r in _chunk_gets(server))
        assert refused == behaviour.refused
        assert refused <= CHUNKS // 10  # found the level and stayed at it, a few probes above
        assert server.max_in_flight() <= 16 + refused


def test_retry_after_is_honoured(folder):
    with serve(folder, behaviour=RefuseFirst(1, status=503, retry_after="1", paths="/c/")) as server:
        array = zarrx.open_array(f"{server.url}/holes.zarr")
        server.reset()
        assert array[:2].tolist() == [3, 3]
        first, second = sorted(_chunk_gets(server), key=lambda r: r.start)
        assert (first.status, second.status) == (503, 200)
        assert second.start - first.end >= 0.95


@pytest.mark.parametrize("status", [429, 503])
def test_a_retry_after_longer_than_the_deadline_fails_at_once_naming_the_key(folder, status):
    with serve(folder, behaviour=RefuseFirst(1, status=status, retry_after="30", paths="/c/")) as server:
        array = zarrx.open_array(f"{server.url}/holes.zarr", storage_options={"zarrx_request_deadline": 5})
        started = time.perf_counter()
        with pytest.raises(StoreError, match="'c/0'") as caught:
            array[:2]
        assert time.perf_counter() - started < 2
        assert "30.0 s" in str(caught.value) and str(status) in str(caught.value)


def test_connection_resets_lose_and_duplicate_nothing(folder):
    with serve(folder, delay=0.005, fail=FailFirst(1, status=0, paths="/many.zarr/c/")) as server:
        np.testing.assert_array_equal(zarrx.open_array(f"{server.url}/many.zarr")[:], EXPECTED)
        _each_chunk_answered_once(server)


def test_s3_slowdown_is_retried_by_botocore_and_shrinks_the_endpoints_window(folder):
    with serve_s3() as s3:
        options = {"endpoint_url": s3.url, "key": "k", "secret": "s", "zarrx_backend": "fsspec"}  # obstore's: test_obstore.py
        s3fs.S3FileSystem(skip_instance_cache=True, endpoint_url=s3.url, key="k", secret="s").mkdir("servers")
        url = f"s3://servers/{uuid.uuid4().hex}"
        array = zarrx.create_array(url, shape=(32,), chunks=(4,), dtype="i4", storage_options=options)
        array[:] = np.arange(32)
        assert array.store.fs.config_kwargs["retries"]["mode"] == "standard"
        s3.fail = FailFirst(2, status=503, paths="/c/")
        s3.reset()
        try:
            reader = zarrx.open_array(url, storage_options=options)
            assert reader[:].tolist() == list(range(32))
        finally:
            s3.fail = None
        per_key = Counter(r.path for r in s3.requests if "/c/" in r.path)
        assert len(per_key) == 8 and set(per_key.values()) == {3}  # two SlowDowns, then the object
        limiter = sync(reader.store.fs.loop, _limiter_of, reader.store, f"{url}/c/0")
        assert limiter.counts["throttled"] >= 2 and limiter.counts["decreases"] >= 1


async def _limiter_of(store, path):
    return store.transfers.limiter(path)


# -- fsspec's caches in front ----------------------------------------------------------------------
@pytest.mark.parametrize("chain", ["simplecache", "filecache", "blockcache"])
def test_cached_urls_read_missing_chunks_as_the_fill_value(folder, chain, tmp_path):
    with serve(folder) as server:
        url = f"{chain}::{server.url}/holes.zarr"
        options = {"cache_storage": str(tmp_path / "cache")}
        assert zarrx.open_array(url, storage_options=options)[:].tolist() == [3, 3, 3, 3, -7, -7, -7, -7]
        np.testing.assert_array_equal(
            zarrx.open_array(f"{chain}::{server.url}/many.zarr", storage_options=options)[:8], EXPECTED[:8]
        )


class HalfThenPause:
    """Send the first half of a file, pause, then the rest (a download still streaming when
    another key of its batch turns out to be missing)."""

    def __init__(self, paths: str, pause: float = 0.5) -> None:
        self.paths, self.pause = paths, pause

    def __call__(self, handler, method):
        if method != "GET" or not handler.path.endswith(self.paths):
            return False
        body = Path(handler.translate_path(handler.path)).read_bytes()
        handler.send_response(200)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body[: len(body) // 2])
        handler.wfile.flush()
        handler.server.stopping.wait(self.pause)
        handler.wfile.write(body[len(body) // 2 :])
        return True


@pytest.mark.parametrize("chain", ["simplecache", "filecache"])
def test_a_cached_download_cut_short_by_a_missing_key_is_not_kept(tmp_path, chain):
    # c/0 is still streaming when c/2's 404 ends the cache's batch download: the half file
    # must not become c/0's cached copy (it read as a corrupt chunk, 2 runs in 12)
    values = np.arange(64, dtype="i4")
    array = zarrx.create_array(tmp_path / "data" / "a.zarr", shape=(192,), chunks=(64,), dtype="i4",
                               fill_value=-1, compressors=None)  # fmt: skip
    array[:64] = values  # c/1 and c/2 missing
    with serve(tmp_path / "data", behaviour=HalfThenPause("/a.zarr/c/0")) as server:
        url = f"{chain}::{server.url}/a.zarr"
        options = {"cache_storage": str(tmp_path / "cache")}
        expected = np.concatenate([values, np.full(128, -1, "i4")])
        for _ in range(2):  # the second read comes from the cache
            np.testing.assert_array_equal(zarrx.open_array(url, storage_options=options)[:], expected)


@pytest.mark.parametrize("chain", ["simplecache", "filecache", "blockcache"])
def test_cached_urls_name_the_key_that_failed(folder, chain, tmp_path):
    with serve(folder, fail=FailAlways(500, paths="/holes.zarr/c/1")) as server:
        url = f"{chain}::{server.url}/holes.zarr"
        array = zarrx.open_array(url, storage_options={"cache_storage": str(tmp_path / "cache"), "zarrx_retries": 0})
        with pytest.raises(StoreError) as caught:
            array[:]  # c/1 fails; c/0 is there, c/2 and c/3 are missing
        message = str(caught.value)
        assert "'c/1'" in message and "'c/0'" not in message and "500" in message, message
