"""obstore as a first-class store (issue 28): obstore's store objects given directly, and URLs read
through obstore -- with values identical to zarr-python's through ``zarr.storage.ObjectStore`` on
the same objects, and every obstore error turned into the zarrx error naming the key.

Real components only: obstore's ``MemoryStore`` and ``LocalStore``, its ``HTTPStore`` reading
exactly ``python -m http.server`` (HTTP/1.0, no byte ranges), its ``S3Store`` on moto's S3 server,
all started by the test on 127.0.0.1.
"""

from __future__ import annotations

import pickle
import socket
import threading
import time
from collections import Counter

import numpy as np
import obstore
import pytest
import s3fs
import xarray as xr
import zarr
from fsspec.asyn import get_loop, sync
from obstore.store import HTTPStore, LocalStore, MemoryStore, S3Store

import zarrx
import zarrx.xarray  # noqa: F401 (the .zarrx accessors, whatever imported zarrx first)
from zarrx.errors import ReadOnlyError, StoreError, StoreTimeoutError, UsageError
from zarrx.storage import (
    FsspecStore, ObstoreStore, OffsetByteRequest, RangeByteRequest, SuffixByteRequest, ZarrPythonStore, make_store,
)  # fmt: skip
from zarrx.storage.obstore_urls import choose_backend

from tests.http_server import FailFirst, serve_plain, serve_silent
from tests.s3_server import serve_s3
from tests.test_storage import StoreSuite

CREDENTIALS = {"key": "k", "secret": "s"}


def _dataset() -> xr.Dataset:
    rng = np.random.default_rng(0)
    return xr.Dataset(
        {"t": (("time", "x"), rng.random((6, 40), dtype=np.float32), {"units": "K"}),
         "n": (("x",), np.arange(40, dtype="int16"))},
        coords={"time": np.arange(6), "x": np.linspace(0, 1, 40)},
        attrs={"title": "obstore"},
    )  # fmt: skip


def _write_array(store) -> np.ndarray:
    values = np.arange(48 * 32, dtype="f4").reshape(48, 32)
    array = zarrx.create_array(store, "a", shape=values.shape, chunks=(16, 8), dtype="f4", attributes={"k": 1})
    array[:] = values
    return values


def _zarr_python(obstore_store):
    return zarr.storage.ObjectStore(obstore_store, read_only=True)


# -- obstore's MemoryStore and LocalStore --------------------------------------------------------
def test_a_memory_store_round_trips_and_zarr_python_reads_the_same_values():
    memory = MemoryStore()
    store = make_store(memory, mode="w")
    assert isinstance(store, ObstoreStore) and store.process_local and store.conditional_writes
    values = _write_array(store)
    peer = zarr.open_array(_zarr_python(memory), path="a", mode="r")
    np.testing.assert_array_equal(peer[...], values)
    assert dict(peer.attrs) == {"k": 1}
    # and the other way round: zarr-python writes, zarrx reads
    written = zarr.create_array(zarr.storage.ObjectStore(memory), name="b", shape=(10,), chunks=(3,), dtype="i8")
    written[:] = np.arange(10)
    np.testing.assert_array_equal(zarrx.open_array(memory, "b")[...], np.arange(10))
    assert sorted(store.list_dir("")) == ["a", "b", "zarr.json"]  # zarr-python made the root group
    assert sorted(store.list_prefix("a/c/")) == sorted(f"a/c/{i}/{j}" for i in range(3) for j in range(4))
    store.delete_prefix("b/")
    assert store.list_dir("") == ["a", "zarr.json"]
    with pytest.raises(StoreError, match="MemoryStore lives in the one"):
        pickle.dumps(store)


def test_byte_ranges_and_conditional_writes_follow_the_store_contract():
    store = ObstoreStore(MemoryStore())
    store.set("k", b"0123456789")
    ranges = [RangeByteRequest(2, 5), RangeByteRequest(20, 30), RangeByteRequest(4, 4), SuffixByteRequest(3),
              SuffixByteRequest(30), OffsetByteRequest(4), OffsetByteRequest(40)]  # fmt: skip
    assert store.get_ranges([("k", r) for r in ranges]) == [b"234", b"", b"", b"789", b"0123456789", b"456789", b""]
    assert store.get_ranges([("missing", RangeByteRequest(0, 2)), ("missing", RangeByteRequest(3, 3))]) == [None, None]
    value, version = store.get_versioned("k")
    assert value == b"0123456789"
    assert store.set_if("k", b"new", version) is True
    assert store.set_if("k", b"lost", version) is False  # another writer came first
    assert store.get("k") == b"new"
    assert store.set_if("fresh", b"1", None) is True and store.set_if("fresh", b"2", None) is False
    assert store.get("fresh") == b"1"
    assert store.get_many(["k", "nope"], max_size=100) == {"k": b"new", "nope": None}
    with pytest.raises(StoreError, match="'k'.*more than the 2 bytes"):
        store.get_many(["k"], max_size=2)


def test_a_local_store_round_trips_a_dataset_as_engine_zarr_reads_it(tmp_path):
    local = LocalStore(str(tmp_path))
    _dataset().zarrx.to_zarr(local, group="d", mode="w")
    ours = xr.open_dataset(local, engine="zarrx", group="d")
    theirs = xr.open_dataset(_zarr_python(local), engine="zarr", group="d")
    xr.testing.assert_identical(ours.load(), theirs.load())
    xr.testing.assert_identical(ours, _dataset())
    store = make_store(local, mode="r")
    assert store.locks_metadata and not store.conditional_writes  # its root folder's lock, as LocalStore's
    with store.lock_metadata():
        pass
    with pytest.raises(ReadOnlyError, match="'x'"):
        store.set("x", b"1")
    assert pickle.loads(pickle.dumps(store)) == store
    assert zarrx.storage.LocalStore(tmp_path).get("d/t/zarr.json") == store.get("d/t/zarr.json")


# -- HTTPStore over exactly `python -m http.server` ---------------------------------------------
def test_http_store_over_python_http_server_reads_whole_values_and_ranges(tmp_path):
    _dataset().zarrx.to_zarr(str(tmp_path / "d.zarr"), mode="w")  # consolidated: no listing needed
    values = _write_array(str(tmp_path / "arrays.zarr"))
    with serve_plain(tmp_path) as server:
        http = HTTPStore.from_url(server.url, client_options={"allow_http": True})
        store = make_store(http)
        assert not store.supports_listing
        # the server has no byte ranges: whole values are plain GETs, ranges are cut from the answer
        raw = (tmp_path / "arrays.zarr" / "a" / "zarr.json").read_bytes()
        assert store.get("arrays.zarr/a/zarr.json") == raw
        assert store.get("arrays.zarr/a/zarr.json", RangeByteRequest(3, 9)) == raw[3:9]
        assert store.get("arrays.zarr/a/zarr.json", SuffixByteRequest(5)) == raw[-5:]
        assert store.get("arrays.zarr/nothing") is None
        np.testing.assert_array_equal(zarrx.open_array(http, "arrays.zarr/a")[...], values)
        sub = HTTPStore.from_url(server.url + "/d.zarr", client_options={"allow_http": True})
        ours = xr.open_dataset(sub, engine="zarrx")
        theirs = xr.open_dataset(_zarr_python(sub), engine="zarr")
        xr.testing.assert_identical(ours.load(), theirs.load())
        by_url = xr.open_dataset(server.url + "/d.zarr", engine="zarrx", storage_options={"zarrx_backend": "obstore"})
        xr.testing.assert_identical(by_url.load(), theirs.load())
        # a web server that does not answer WebDAV's PROPFIND: the error says so, and what works instead
        unretried = HTTPStore.from_url(server.url, client_options={"allow_http": True}, retry_config={"max_retries": 0})
        with pytest.raises(StoreError, match="does not list folders by WebDAV.*by its URL"):
            xr.open_datatree(unretried, engine="zarrx", group="d.zarr", consolidated=False)


# -- S3Store on moto's server ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def s3():
    with serve_s3() as server:
        s3fs.S3FileSystem(endpoint_url=server.url, skip_instance_cache=True, **CREDENTIALS).mkdir("obs")
        yield server


def _s3_store(s3, prefix: str) -> S3Store:
    return S3Store("obs", prefix=prefix, endpoint=s3.url, access_key_id="k", secret_access_key="s",
                   region="us-east-1", client_options={"allow_http": True})  # fmt: skip


def test_s3_store_round_trips_and_zarr_python_reads_the_same_values(s3):
    store = make_store(_s3_store(s3, "direct.zarr"), mode="w")
    values = _write_array(store)
    np.testing.assert_array_equal(zarr.open_array(_zarr_python(_s3_store(s3, "direct.zarr")), path="a")[...], values)
    np.testing.assert_array_equal(zarrx.open_array(_s3_store(s3, "direct.zarr"), "a")[...], values)
    assert store.list_dir("") == ["a", "zarr.json"] and store.list_dir("a/") == ["c", "zarr.json"]
    assert pickle.loads(pickle.dumps(store)).get("a/zarr.json") == store.get("a/zarr.json")
    store.delete_prefix("a/c/")
    assert list(store.list_prefix("a/")) == ["a/zarr.json"]


def test_s3_urls_with_fsspec_storage_options_read_through_obstore(s3):
    options = {"endpoint_url": s3.url, **CREDENTIALS}
    dataset = _dataset()
    dataset.zarrx.to_zarr("s3://obs/url.zarr", mode="w", storage_options={**options, "zarrx_backend": "obstore"})
    for form in (options, {"client_kwargs": {"endpoint_url": s3.url}, **CREDENTIALS}):
        store = make_store("s3://obs/url.zarr", storage_options={**form, "zarrx_backend": "obstore"})
        assert isinstance(store, ObstoreStore) and store.conditional_writes
        ours = xr.open_dataset("s3://obs/url.zarr", engine="zarrx", storage_options={**form, "zarrx_backend": "obstore"})
        xr.testing.assert_identical(ours, dataset)
    theirs = xr.open_dataset(_zarr_python(_s3_store(s3, "url.zarr")), engine="zarr")
    xr.testing.assert_identical(ours.load(), theirs.load())
    by_fsspec = xr.open_dataset("s3://obs/url.zarr", engine="zarrx", storage_options={**options, "zarrx_backend": "fsspec"})
    xr.testing.assert_identical(by_fsspec.load(), ours.load())


def test_the_backend_is_chosen_by_option_and_fsspec_options_keep_working(s3, monkeypatch):
    options = {"endpoint_url": s3.url, **CREDENTIALS}
    assert isinstance(make_store("s3://obs/x.zarr", storage_options={**options, "zarrx_backend": "fsspec"}), FsspecStore)
    # an option obstore cannot honour: an error naming it when obstore is asked for, fsspec otherwise
    with pytest.raises(UsageError, match="'profile'.*zarrx_backend='fsspec'"):
        make_store("s3://obs/x.zarr", storage_options={**options, "profile": "p", "zarrx_backend": "obstore"})
    assert isinstance(make_store("s3://obs/x.zarr", storage_options={**options, "profile": "p"}), FsspecStore)
    with pytest.raises(UsageError, match="config_kwargs\\['retries'\\]"):
        make_store("s3://obs/x.zarr", storage_options={**options, "config_kwargs": {"retries": {}}, "zarrx_backend": "obstore"})
    with pytest.raises(UsageError, match="does not read 'memory://x'"):
        make_store("memory://x", storage_options={"zarrx_backend": "obstore"})
    with pytest.raises(UsageError, match="zarrx_backend.*'rust'"):
        make_store("s3://obs/x.zarr", storage_options={"zarrx_backend": "rust"})
    # by default, obstore only where the options or the environment say what only fsspec's library
    # finds out itself (a bucket's region, ~/.aws profiles, gcsfs's anonymous fallback)
    for variable in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ACCESS_KEY_ID", "AWS_PROFILE", "GOOGLE_APPLICATION_CREDENTIALS"):
        monkeypatch.delenv(variable, raising=False)
    assert isinstance(make_store("s3://obs/x.zarr", storage_options=options), ObstoreStore)
    assert isinstance(make_store("s3://public/x.zarr", storage_options={"anon": True}), FsspecStore)  # region unknown
    assert isinstance(make_store("s3://public/x.zarr", storage_options={"anon": True, "region_name": "us-west-2"}), ObstoreStore)
    monkeypatch.setenv("AWS_PROFILE", "work")  # a ~/.aws profile: botocore's
    assert isinstance(make_store("s3://public/x.zarr", storage_options={"anon": True, "region_name": "us-west-2"}), FsspecStore)
    monkeypatch.delenv("AWS_PROFILE")
    assert isinstance(make_store("gs://public/x.zarr", storage_options={"token": "anon"}), ObstoreStore)
    assert choose_backend("gs://public/x.zarr", None)[0] == "fsspec"  # (gcsfs is not installed here)
    assert choose_backend("https://example.org/x.zarr", None)[0] == "fsspec"  # web servers: fsspec by default
    monkeypatch.setenv("ZARRX_BACKEND", "obstore")
    assert isinstance(make_store("s3://obs/x.zarr", storage_options=options), ObstoreStore)
    assert isinstance(make_store("s3://obs/x.zarr", storage_options={**options, "zarrx_backend": "fsspec"}), FsspecStore)
    with pytest.raises(StoreError, match="storage_options"):
        make_store(MemoryStore(), storage_options={"anon": True})


def test_s3_slowdown_is_retried_by_zarrx_and_shrinks_the_endpoints_window(s3):
    options = {"endpoint_url": s3.url, **CREDENTIALS, "zarrx_backend": "obstore"}
    array = zarrx.create_array("s3://obs/slow.zarr", shape=(32,), chunks=(4,), dtype="i4", storage_options=options)
    array[:] = np.arange(32)
    s3.fail = FailFirst(2, status=503, paths="/c/")  # S3's SlowDown, twice for every chunk
    s3.reset()
    try:
        reader = zarrx.open_array("s3://obs/slow.zarr", storage_options=options)
        assert reader[:].tolist() == list(range(32))
    finally:
        s3.fail = None
    per_key = Counter(r.path for r in s3.requests if "/c/" in r.path)
    assert len(per_key) == 8 and set(per_key.values()) == {3}  # two SlowDowns, then the object
    limiter = sync(get_loop(), _limiter_of, reader.store)
    assert limiter.counts["throttled"] >= 2 and limiter.counts["decreases"] >= 1


async def _limiter_of(store):
    return store.transfers.limiter("c/0")


# -- the store conformance suite ---------------------------------------------------------------------
class TestObstoreMemoryStore(StoreSuite):
    pickle_shares_data = False

    @pytest.fixture
    def location(self):
        return MemoryStore()

    def open_store(self, location, read_only=False):
        return ObstoreStore(location, read_only=read_only)

    # obstore's MemoryStore cannot be pickled: the store says so, naming what to use instead
    def test_pickle_round_trip(self, hierarchy):
        with pytest.raises(StoreError, match="MemoryStore lives in the one that made it"):
            pickle.dumps(hierarchy)

    def test_pickle_keeps_read_only(self, location, hierarchy):
        with pytest.raises(StoreError, match="MemoryStore lives in the one that made it"):
            pickle.dumps(self.open_store(location, read_only=True))


class TestObstoreS3Store(StoreSuite):
    @pytest.fixture
    def location(self, s3):
        self.server = s3
        return f"s3://obs/suite-{time.monotonic_ns()}"

    def open_store(self, location, read_only=False):
        options = {"endpoint_url": self.server.url, **CREDENTIALS, "zarrx_backend": "obstore"}
        return make_store(location, mode="r" if read_only else "a", storage_options=options)


# -- errors ----------------------------------------------------------------------------------------
def test_a_missing_bucket_is_an_error_naming_the_key_and_bucket(s3):
    store = make_store(S3Store("nobucket", endpoint=s3.url, access_key_id="k", secret_access_key="s",
                               region="us-east-1", client_options={"allow_http": True}))  # fmt: skip
    with pytest.raises(StoreError, match="'x/zarr.json'.*nobucket.*bucket does not exist"):
        store.get("x/zarr.json")
    with pytest.raises(StoreError, match="'x/zarr.json'.*bucket does not exist"):
        zarrx.open_array(store, "x")


def test_a_server_that_is_down_is_an_error_naming_the_key():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed when the block ends: nothing listens there
    http = HTTPStore.from_url(f"http://127.0.0.1:{port}", client_options={"allow_http": True},
                              retry_config={"max_retries": 1})  # fmt: skip
    started = time.monotonic()
    with pytest.raises(StoreError, match="'a/zarr.json'.*HTTPStore"):
        make_store(http, storage_options={"zarrx_retries": 1}).get("a/zarr.json")
    assert time.monotonic() - started < 20
    with pytest.raises(StoreError, match="'zarr.json'.*error sending request"):
        make_store(f"http://127.0.0.1:{port}/a", storage_options={"zarrx_backend": "obstore", "zarrx_retries": 1}).get(
            "zarr.json")


def test_a_server_that_never_answers_is_a_timeout_naming_the_key():
    with serve_silent() as url:
        http = HTTPStore.from_url(url, client_options={"allow_http": True})
        started = time.monotonic()
        with pytest.raises(StoreTimeoutError, match="'a/zarr.json'.*zarrx_request_deadline"):
            make_store(http, storage_options={"zarrx_request_deadline": 1}).get("a/zarr.json")
        with pytest.raises(StoreTimeoutError, match="'zarr.json'"):
            make_store(url + "/a", storage_options={"zarrx_backend": "obstore", "zarrx_request_deadline": 1}).get(
                "zarr.json")
        assert time.monotonic() - started < 10


def test_obstore_errors_never_escape_unwrapped(tmp_path):
    store = make_store(LocalStore(str(tmp_path)), mode="w")
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "inside").write_bytes(b"1")
    assert store.get("folder") is None  # a folder is no value
    with pytest.raises(StoreError, match="could not write 'folder/inside/deeper' at .*/folder/inside/deeper \\(obstore LocalStore"):
        store.set("folder/inside/deeper", b"2")  # below a file: obstore's error, wrapped
    assert store.exists("folder/inside") and not store.exists("folder/other")
    assert obstore.get(store.obstore, "folder/inside").bytes() == b"1"


def test_exit_waits_for_obstores_threads_to_leave_python_code(monkeypatch):
    """obstore's (tokio's) threads hand answers to the event loop in Python code; the exit hook
    (:func:`zarrx.storage.foreign_threads.settle`) waits until no such foreign thread runs Python, so
    the interpreter never finalizes under one (which aborts the process)."""
    import _thread

    from zarrx.storage import foreign_threads, obstore_reads

    inside, done = threading.Event(), threading.Event()

    def foreign() -> None:  # a thread the threading module knows nothing of, as tokio's are
        inside.set()
        until = time.monotonic() + 0.3
        while time.monotonic() < until:
            pass
        done.set()

    _thread.start_new_thread(foreign, ())
    assert inside.wait(5)
    assert foreign_threads._foreign_threads_in_python()
    foreign_threads.settle()
    assert done.is_set() and not foreign_threads._foreign_threads_in_python()
    # the hook is registered once obstore is read through: zarrx's own store, or zarr-python's
    for reads_through_obstore in (
        lambda: obstore_reads.ObstoreReader(MemoryStore()),
        lambda: ZarrPythonStore(zarr.storage.ObjectStore(MemoryStore())),
    ):
        monkeypatch.setattr(foreign_threads, "_settle_registered", False)
        reads_through_obstore()
        assert foreign_threads._settle_registered
