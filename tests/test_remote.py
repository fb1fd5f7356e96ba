"""zarrx against real servers: moto's S3 server through s3fs, and an HTTP server through fsspec.

Both servers run on 127.0.0.1 (a free port) for the session of this module and record every
request, so the tests count round trips and check that a batch's requests overlap in time.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter

import numpy as np
import pytest

pytest.importorskip("moto.server")
s3fs = pytest.importorskip("s3fs")
pytest.importorskip("aiohttp")

import xarray as xr  # noqa: E402

import zarrx  # noqa: E402
import zarrx.xarray  # noqa: E402, F401
from zarrx.tools.explain import explain  # noqa: E402
from zarrx.errors import NodeNotFoundError, ReadOnlyError, StoreError  # noqa: E402
from zarrx.storage import FsspecStore, MetricsStore, make_store  # noqa: E402
from zarrx.storage.remote import RetryMiddleware  # noqa: E402
from tests.http_server import FailAlways, FailFirst, serve  # noqa: E402
from tests.s3_server import serve_s3  # noqa: E402
from tests.test_storage import StoreSuite  # noqa: E402

BUCKET = "zarrx-bucket"
DELAY = 0.02


# -- servers -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def s3():
    with serve_s3() as server:
        fs = s3fs.S3FileSystem(endpoint_url=server.url, key="test", secret="test", skip_instance_cache=True)
        fs.mkdir(BUCKET)
        yield server


def s3_options(server, **extra):
    return {"endpoint_url": server.url, "key": "test", "secret": "test", **extra}


@pytest.fixture
def s3_url(s3):
    return f"s3://{BUCKET}/{uuid.uuid4().hex}"


@pytest.fixture
def s3_store(s3, s3_url):
    return FsspecStore.from_url(s3_url, storage_options=s3_options(s3))


def _ds(n_variables=3):
    rng = np.random.default_rng(0)
    return xr.Dataset(
        {f"v{i}": (("time", "x"), rng.random((12, 10)), {"units": "K"}) for i in range(n_variables)},
        coords={"time": np.arange(12), "x": np.linspace(0, 1, 10)},
        attrs={"title": "remote"},
    )


@pytest.fixture(scope="module")
def served_data(tmp_path_factory):
    """A folder of Zarr data for the HTTP server, written locally by zarrx."""
    root = tmp_path_factory.mktemp("served")
    many = zarrx.create_array(root / "many.zarr", shape=(256, 32), chunks=(1, 32), dtype="f4", compressors=None)
    many[:] = np.arange(256 * 32, dtype="f4").reshape(256, 32)
    sharded = zarrx.create_array(root / "sharded.zarr", shape=(64, 64), chunks=(4, 4), shards=(32, 32), dtype="i4")
    sharded[:] = np.arange(64 * 64, dtype="i4").reshape(64, 64)
    tree = zarrx.create_group(root / "tree.zarr", attributes={"kind": "tree"})
    for i in range(24):
        tree.create_array(f"a{i:02d}", shape=(4,), chunks=(4,), dtype="i2")[:] = i
    tree.create_group("sub").create_array("deep", shape=(3,), dtype="u1")[:] = 7
    ds = _ds()
    ds.zarrx.to_zarr(root / "ds.zarr", consolidated=False)
    ds.zarrx.to_zarr(root / "ds_consolidated.zarr", consolidated=True)
    return root


@pytest.fixture(scope="module")
def http(served_data):
    with serve(served_data) as server:
        yield server


@pytest.fixture
def slow_http(served_data):
    with serve(served_data, delay=DELAY) as server:
        yield server


def _gets(server, part=""):
    return [r for r in server.requests if r.method == "GET" and part in r.path]


# -- S3: the store contract -------------------------------------------------------------------
class TestS3Store(StoreSuite):
    @pytest.fixture
    def location(self, s3_url, s3):
        self.server = s3
        return s3_url

    def open_store(self, location, read_only=False):
        return FsspecStore.from_url(location, storage_options=s3_options(self.server), read_only=read_only)


# -- S3: arrays, groups, consolidated metadata, xarray -----------------------------------------
def test_s3_arrays_read_write_delete(s3, s3_url):
    options = s3_options(s3)
    root = zarrx.create_group(s3_url, storage_options=options)
    array = root.create_array("x", shape=(20, 30), chunks=(7, 8), dtype="f8", dimension_names=("a", "b"))
    data = np.random.default_rng(1).random((20, 30))
    array[:] = data
    reopened = zarrx.open_array(s3_url, "x", storage_options=options)
    np.testing.assert_array_equal(reopened[:], data)
    np.testing.assert_array_equal(reopened[3:11, ::4], data[3:11, ::4])
    np.testing.assert_array_equal(reopened.oindex[[0, 19], [1, 29]], data[np.ix_([0, 19], [1, 29])])
    writable = zarrx.open_array(s3_url, "x", mode="r+", storage_options=options)
    writable[5:9, 5:9] = -1.0
    data[5:9, 5:9] = -1.0
    np.testing.assert_array_equal(zarrx.open_array(s3_url, "x", storage_options=options)[:], data)
    writable.resize((10, 30))
    assert zarrx.open_array(s3_url, "x", storage_options=options).shape == (10, 30)
    s3fs_ = s3fs.S3FileSystem(**s3_options(s3), skip_instance_cache=True)
    assert sorted(p.rsplit("/", 1)[-1] for p in s3fs_.ls(f"{s3_url}/x/c")) == ["0", "1"]
    del zarrx.open_group(s3_url, mode="r+", storage_options=options)["x"]
    assert "x" not in zarrx.open_group(s3_url, storage_options=options)
    assert not s3fs_.exists(f"{s3_url}/x/zarr.json")


def test_s3_sharded_arrays(s3, s3_url):
    options = s3_options(s3)
    array = zarrx.create_array(
        s3_url, shape=(64, 64), chunks=(4, 4), shards=(32, 32), dtype="i4", storage_options=options
    )
    data = np.arange(64 * 64, dtype="i4").reshape(64, 64)
    array[:] = data
    store = MetricsStore(make_store(s3_url, storage_options=options))
    reopened = zarrx.open_array(store)
    store.reset()
    s3.reset()
    np.testing.assert_array_equal(reopened[1:7, 2:13], data[1:7, 2:13])
    # the shard index (a suffix range), then one merged range of its 2 x 4 inner chunks beside the
    # index again (the check that the shard did not change between the two batches); the second
    # batch's two requests run at once, so the server may see them in either order
    ranges = [r.range for r in _gets(s3)]
    assert len(ranges) == 3 and ranges[0] == "bytes=-1028"
    index_again, inner = sorted(ranges[1:])
    assert index_again == "bytes=-1028" and inner.startswith("bytes=") and inner != index_again
    assert store.summary()["get_ranges"].calls == 2
    plan = explain(reopened, np.s_[1:7, 2:13])
    assert plan.nrequests == 3 and plan.nbatches == 2
    # a partial write keeps the other inner chunks of the shard
    writable = zarrx.open_array(s3_url, mode="r+", storage_options=options)
    writable[0:4, 0:4] = -5
    data[0:4, 0:4] = -5
    np.testing.assert_array_equal(zarrx.open_array(s3_url, storage_options=options)[:], data)


def test_s3_consolidated_open_is_at_most_3_requests(s3, s3_url):
    options = s3_options(s3)
    _ds(5).zarrx.to_zarr(s3_url, consolidated=True, storage_options=options)
    s3.reset()
    group = zarrx.open_group(s3_url, storage_options=options)
    assert sorted(group) == ["time", "v0", "v1", "v2", "v3", "v4", "x"]
    assert group["v3"].shape == (12, 10)
    assert s3.count() == 1  # the root zarr.json holds the whole hierarchy
    s3.reset()
    ds = xr.open_dataset(s3_url, engine="zarrx", consolidated=True, storage_options=options)
    assert set(ds.data_vars) == {f"v{i}" for i in range(5)}
    # metadata, then the two dimension coordinates xarray loads for its indexes
    assert s3.count() <= 3, [r.path for r in s3.requests]


def test_s3_hierarchy_without_consolidated_metadata_reads_children_concurrently(s3, s3_url):
    options = s3_options(s3)
    root = zarrx.create_group(s3_url, storage_options=options)
    for i in range(24):
        root.create_group(f"g{i:02d}")
    s3.delay = DELAY
    try:
        s3.reset()
        group = zarrx.open_group(s3_url, storage_options=options, use_consolidated=False)
        members = dict(group.members())
    finally:
        s3.delay = 0.0
    assert len(members) == 24
    children = [r for r in s3.requests if r.path.endswith("/zarr.json") and r.path.count("/") == 4]
    assert len(children) == 24
    # one listing, then all child documents in one overlapping batch
    assert s3.count() == 1 + 1 + 24
    assert _max_overlap(children) >= 12


def test_s3_many_chunk_read_and_write_are_one_concurrent_batch(s3, s3_url):
    options = s3_options(s3)
    store = MetricsStore(make_store(s3_url, mode="w", storage_options=options))
    array = zarrx.create_array(store, shape=(256, 8), chunks=(1, 8), dtype="f4", compressors=None)
    store.reset()
    s3.delay = DELAY
    try:
        s3.reset()
        array[:] = np.ones((256, 8), dtype="f4")
        puts = [r for r in s3.requests if r.method == "PUT"]
        assert store.summary()["set_many"].calls == 1 and len(puts) == 256
        assert s3.max_in_flight() > 10
        s3.reset()
        store.reset()
        assert (array[:] == 1).all()
        assert store.summary()["get_many"].calls == 1 and s3.count("GET") == 256
        assert 10 < s3.max_in_flight() <= 64
        array[:] = 0  # all fill value: every chunk deleted, in one DeleteObjects request
        assert s3.count("POST") == 1
    finally:
        s3.delay = 0.0


@pytest.mark.parametrize("backend", ["fsspec", "obstore"])
def test_s3_concurrency_cap_is_configurable(s3, s3_url, backend):
    options = s3_options(s3, zarrx_max_concurrency=4, zarrx_backend=backend)
    array = zarrx.create_array(s3_url, shape=(32,), chunks=(1,), dtype="u1", storage_options=options)
    array[:] = 1
    assert array.store.options.max_concurrency == 4
    if backend == "fsspec":
        assert array.store.fs.config_kwargs["max_pool_connections"] == 4
    s3.delay = DELAY
    try:
        s3.reset()
        assert (array[:] == 1).all()
        assert s3.count("GET") == 32 and s3.max_in_flight() <= 4
    finally:
        s3.delay = 0.0


def test_s3_retry_and_timeout_configuration(s3):
    # s3fs's configuration (obstore's: tests/test_obstore.py)
    options = s3_options(s3, zarrx_retries=7, zarrx_timeout=12, zarrx_connect_timeout=4, zarrx_backend="fsspec")
    store = make_store(f"s3://{BUCKET}/x", storage_options=options)
    config = store.fs.config_kwargs
    assert config["retries"] == {"mode": "standard", "total_max_attempts": 8}
    assert (config["connect_timeout"], config["read_timeout"], config["max_pool_connections"]) == (4, 12, 64)
    assert store.fs.max_concurrency == 1
    # what the user sets wins
    mine = {"retries": {"mode": "adaptive", "max_attempts": 2}, "max_pool_connections": 5}
    store = make_store(f"s3://{BUCKET}/y", storage_options=s3_options(s3, config_kwargs=mine))  # fsspec: obstore has no config_kwargs
    assert store.fs.config_kwargs["retries"] == mine["retries"] and store.fs.config_kwargs["max_pool_connections"] == 5


def test_s3_xarray_open_and_write(s3, s3_url):
    options = s3_options(s3)
    ds = _ds()
    ds.zarrx.to_zarr(s3_url, storage_options=options)
    for consolidated in (True, False):
        opened = xr.open_dataset(s3_url, engine="zarrx", consolidated=consolidated, storage_options=options)
        xr.testing.assert_identical(opened.load(), ds)
    lazy = xr.open_dataset(s3_url, engine="zarrx", chunks={}, storage_options=options)
    xr.testing.assert_allclose(lazy.v1.mean("time").compute(), ds.v1.mean("time"))
    # append along time, then read it back
    more = _ds().assign_coords(time=np.arange(12, 24))
    more.zarrx.to_zarr(s3_url, mode="a", append_dim="time", storage_options=options)
    opened = xr.open_dataset(s3_url, engine="zarrx", storage_options=options)
    assert opened.sizes["time"] == 24
    xr.testing.assert_identical(opened.isel(time=slice(12, None)).load(), more)


def test_s3_transient_errors_are_retried_by_botocore(s3, s3_url):
    options = s3_options(s3)
    array = zarrx.create_array(s3_url, shape=(4,), chunks=(1,), dtype="i2", storage_options=options)
    array[:] = 3
    s3.fail = FailFirst(1, status=500, paths="/c/")
    try:
        s3.reset()
        assert zarrx.open_array(s3_url, storage_options=options)[:].tolist() == [3, 3, 3, 3]
    finally:
        s3.fail = None
    assert Counter(r.path for r in s3.requests if "/c/" in r.path) == {f"{s3_url[4:]}/c/{i}": 2 for i in range(4)}


def test_s3_permanent_failure_names_the_key_and_hides_the_secret(s3, s3_url):
    key, secret = "AKIAZARRXEXAMPLE", "wJalrXUtnFEMI-zarrx-secret"
    options = {"endpoint_url": s3.url, "key": key, "secret": secret, "zarrx_retries": 0}
    store = make_store(s3_url, mode="w", storage_options=options)
    store.set("c/0", b"x")
    s3.fail = FailAlways(500, paths="/c/")
    try:
        with pytest.raises(StoreError) as caught:
            store.get_many(["c/0", "c/1"])
    finally:
        s3.fail = None
    message = str(caught.value)
    assert "'c/0'" in message and f"{s3_url}/c/0" in message
    for text in (message, repr(store)):
        assert key not in text and secret not in text


# -- HTTP --------------------------------------------------------------------------------------
def test_http_full_and_partial_reads(http, served_data):
    expected = np.arange(256 * 32, dtype="f4").reshape(256, 32)
    array = zarrx.open_array(f"{http.url}/many.zarr")
    np.testing.assert_array_equal(array[:], expected)
    np.testing.assert_array_equal(array[10:20, 3:7], expected[10:20, 3:7])
    node = zarrx.open(f"{http.url}/tree.zarr")
    assert node.attrs["kind"] == "tree"
    assert node["a07"][:].tolist() == [7, 7, 7, 7]
    with pytest.raises(NodeNotFoundError):
        zarrx.open_array(f"{http.url}/missing.zarr")


def test_http_sharded_read_is_index_then_merged_ranges(http):
    array = zarrx.open_array(f"{http.url}/sharded.zarr")
    http.reset()
    region = array[1:7, 2:13]
    np.testing.assert_array_equal(region, np.arange(64 * 64).reshape(64, 64)[1:7, 2:13])
    gets = _gets(http)
    # the index, then (in one concurrent batch) the index again -- the check that the shard did
    # not change between the batches -- and the merged inner chunks
    assert len(gets) == 3, gets
    assert gets[0].range == "bytes=-1028"  # 8 x 8 inner chunks x 16 bytes + crc32c
    data_get = next(get for get in gets[1:] if get.range != "bytes=-1028")
    assert sum(get.range == "bytes=-1028" for get in gets) == 2
    first, last = (int(v) for v in data_get.range.removeprefix("bytes=").split("-"))
    assert all(get.status == 206 for get in gets)
    plan = explain(array, np.s_[1:7, 2:13])
    assert plan.requests[2].byte_range.start == first and plan.requests[2].byte_range.end == last + 1
    http.reset()
    np.testing.assert_array_equal(array[:32, :32], np.arange(64 * 64).reshape(64, 64)[:32, :32])
    assert [r.range for r in _gets(http)] == [None]  # a whole shard: one plain GET, no index first, no Range


def test_http_listing_and_groups(http):
    group = zarrx.open_group(f"{http.url}/tree.zarr")
    assert sorted(group) == [f"a{i:02d}" for i in range(24)] + ["sub"]
    assert group["sub/deep"][:].tolist() == [7, 7, 7]
    store = make_store(f"{http.url}/tree.zarr")
    assert store.list_dir("") == sorted([f"a{i:02d}" for i in range(24)] + ["sub", "zarr.json"])
    assert sorted(store.list_prefix("sub/")) == ["sub/deep/c/0", "sub/deep/zarr.json", "sub/zarr.json"]


def test_http_xarray(http):
    ds = _ds()
    for name, consolidated in (("ds.zarr", False), ("ds_consolidated.zarr", True)):
        opened = xr.open_dataset(f"{http.url}/{name}", engine="zarrx", consolidated=consolidated)
        xr.testing.assert_identical(opened.load(), ds)
    http.reset()
    xr.open_dataset(f"{http.url}/ds_consolidated.zarr", engine="zarrx")
    assert http.count() <= 3  # zarr.json and the two index coordinates


def test_http_is_read_only(http):
    store = make_store(f"{http.url}/tree.zarr", mode="w")
    assert store.read_only
    for write in (lambda: store.set("k", b"v"), lambda: store.set_many({"a": b"1", "b": b"2"}),
                  lambda: store.delete("zarr.json"), lambda: store.delete_prefix("sub/")):  # fmt: skip
        with pytest.raises(ReadOnlyError, match="HTTP"):
            write()
    with pytest.raises(ReadOnlyError):
        zarrx.create_array(f"{http.url}/new.zarr", shape=(3,), dtype="i1")
    with pytest.raises(ReadOnlyError):
        _ds().zarrx.to_zarr(f"{http.url}/new_ds.zarr")
    assert http.count("PUT") == http.count("POST") == http.count("DELETE") == 0


def _max_overlap(requests) -> int:
    events = sorted([(r.start, 1) for r in requests] + [(r.end, -1) for r in requests])
    current = peak = 0
    for _, change in events:
        current += change
        peak = max(peak, current)
    return peak


def test_http_256_chunk_read_is_one_concurrent_batch(slow_http):
    store = MetricsStore(make_store(f"{slow_http.url}/many.zarr"))
    array = zarrx.open_array(store)
    store.reset()
    slow_http.reset()
    started = time.perf_counter()
    array[:]
    elapsed = time.perf_counter() - started
    summary = store.summary()
    assert (summary.calls, summary["get_many"].requests) == (1, 256)
    assert slow_http.count("GET") == 256
    # more than zarr-python's 10 at once, at most zarrx's default cap
    assert 10 < slow_http.max_in_flight() <= 64
    assert elapsed < 256 * DELAY / 4  # one after another would take 5 s


def test_http_concurrency_cap_is_configurable(slow_http, monkeypatch):
    array = zarrx.open_array(f"{slow_http.url}/many.zarr", storage_options={"zarrx_max_concurrency": 8})
    slow_http.reset()
    array[:64]
    assert slow_http.count("GET") == 64 and slow_http.max_in_flight() <= 8
    monkeypatch.setenv("ZARRX_MAX_CONCURRENCY", "3")
    array = zarrx.open_array(f"{slow_http.url}/many.zarr")
    assert array.store.max_concurrency == 3
    slow_http.reset()
    array[:12]
    assert slow_http.max_in_flight() <= 3


def test_http_children_metadata_are_fetched_concurrently(slow_http):
    group = zarrx.open_group(f"{slow_http.url}/tree.zarr")
    slow_http.reset()
    members = group.members()
    assert len(members) == 25
    documents = [r for r in slow_http.requests if r.path.endswith("/zarr.json")]
    assert len(documents) == 25
    assert _max_overlap(documents) >= 12
    assert slow_http.count() == 1 + 25  # the listing, then the documents


def test_http_consolidated_open_is_one_request(slow_http):
    slow_http.reset()
    group = zarrx.open_group(f"{slow_http.url}/ds_consolidated.zarr")
    assert sorted(group) == ["time", "v0", "v1", "v2", "x"]
    assert slow_http.count() == 1


# -- failures ----------------------------------------------------------------------------------
def test_http_transient_errors_are_retried(served_data):
    with serve(served_data, fail=FailFirst(2, status=503, paths="/many.zarr/c/")) as server:
        array = zarrx.open_array(f"{server.url}/many.zarr")
        np.testing.assert_array_equal(array[:4], np.arange(4 * 32, dtype="f4").reshape(4, 32))
        per_path = Counter(r.path for r in server.requests if "/c/" in r.path)
        assert per_path == {f"/many.zarr/c/{i}/0": 3 for i in range(4)}


@pytest.mark.parametrize("status", [500, 502, 504, 429])
def test_http_other_transient_statuses_are_retried(served_data, status):
    with serve(served_data, fail=FailFirst(1, status=status, paths="zarr.json")) as server:
        assert zarrx.open_array(f"{server.url}/many.zarr").shape == (256, 32)


def test_http_connection_resets_are_retried(served_data):
    with serve(served_data, fail=FailFirst(2, status=0, paths="/many.zarr/c/")) as server:
        array = zarrx.open_array(f"{server.url}/many.zarr")
        np.testing.assert_array_equal(array[0], np.arange(32, dtype="f4"))
        assert Counter(r.path for r in server.requests if "/c/" in r.path) == {"/many.zarr/c/0/0": 3}


def test_http_timeouts_are_retried_then_reported(served_data):
    with serve(served_data, delay=0.5) as server:
        url = f"{server.url}/many.zarr"
        started = time.perf_counter()
        with pytest.raises(StoreError, match="zarr.json") as caught:
            zarrx.open_array(url, storage_options={"zarrx_timeout": 0.1, "zarrx_retries": 1})
        assert time.perf_counter() - started < 2.5
        assert "Timeout" in str(caught.value)
        time.sleep(0.6)  # the server records a request when it has answered it
        assert server.count() == 2  # the first try and one retry


def test_http_permanent_failure_names_key_and_url_without_credentials(served_data):
    password, token = "hunter2-zarrx", "Bearer zarrx-token-123"
    with serve(served_data, fail=FailAlways(503, paths="/c/")) as server:
        host = server.url.removeprefix("http://")
        url = f"http://reader:{password}@{host}/many.zarr"
        options = {"zarrx_retries": 2, "client_kwargs": {"headers": {"X-Api-Key": token}}}
        array = zarrx.open_array(url, storage_options=options)
        with pytest.raises(StoreError) as caught:
            array[3]
        message = str(caught.value)
        assert "'c/3/0'" in message
        assert f"http://***@{host}/many.zarr/c/3/0" in message
        assert "503" in message
        for secret in (password, "reader:", token, "zarrx-token-123"):
            assert secret not in message and secret not in repr(array.store)
        assert server.count() == 1 + 3  # zarr.json, then the chunk three times (two retries)


def test_retry_middleware_pickles():
    import pickle

    middleware = RetryMiddleware(3)
    assert pickle.loads(pickle.dumps(middleware)) == middleware
    store = make_store("https://example.invalid/x.zarr")
    clone = pickle.loads(pickle.dumps(store))
    assert clone == store and clone.max_concurrency == store.max_concurrency
