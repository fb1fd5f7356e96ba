"""Any zarr-python store works as given (issue 28): recognised by type, paced by the host's
adaptive limit, retried, bounded in time, its errors named by key, whole values read whole.

Real stores only: a third-party subclass of ``zarr.abc.store.Store`` defined here (as icechunk's
``IcechunkStore`` is one elsewhere), and zarr-python's ``ObjectStore`` over obstore's
``HTTPStore`` reading from exactly ``python -m http.server`` (HTTP/1.0, a connection per request,
no byte ranges, listen backlog 5), started by the test.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import zarr
from zarr.abc.store import ByteRequest, OffsetByteRequest, RangeByteRequest, Store, SuffixByteRequest
from zarr.core.buffer import default_buffer_prototype

import zarrx
from zarrx.errors import StoreError, StoreTimeoutError, StoreTypeError
from zarrx.storage import ZarrPythonStore, make_store

from tests.http_server import serve_plain


class ThirdPartyStore(Store):
    """A zarr-python store from another package: a dict, each ``get`` and ``list_dir`` taking
    ``delay`` seconds, counting those in flight; ``fail[key]`` failures to raise before a key is
    read (``fail["list:" + prefix]``: before a prefix is listed)."""

    supports_writes = supports_deletes = supports_listing = supports_partial_writes = True

    def __init__(self, delay: float = 0.0, read_only: bool = False) -> None:
        super().__init__(read_only=read_only)
        self.values: dict[str, bytes] = {}
        self.delay = delay
        self.in_flight = self.most_in_flight = 0
        self.listing = self.most_listing = 0
        self.fail: dict[str, list[BaseException]] = {}
        self.lock = threading.Lock()

    def __eq__(self, other: object) -> bool:
        return other is self

    async def get(self, key: str, prototype, byte_range: ByteRequest | None = None):
        with self.lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.delay)
            if self.fail.get(key):
                raise self.fail[key].pop(0)
            value = self.values.get(key)
        finally:
            with self.lock:
                self.in_flight -= 1
        if value is None:
            return None
        match byte_range:
            case RangeByteRequest(start, end):
                value = value[start:end]
            case OffsetByteRequest(offset):
                value = value[offset:]
            case SuffixByteRequest(suffix):
                value = value[-suffix:]
        return prototype.buffer.from_bytes(value)

    async def get_partial_values(self, prototype, key_ranges):
        return [await self.get(key, prototype, byte_range) for key, byte_range in key_ranges]

    async def exists(self, key: str) -> bool:
        return key in self.values

    async def set(self, key: str, value) -> None:
        self.values[key] = value.to_bytes()

    async def delete(self, key: str) -> None:
        self.values.pop(key, None)

    async def list(self):
        for key in list(self.values):
            yield key

    async def list_prefix(self, prefix: str):
        for key in list(self.values):
            if key.startswith(prefix):
                yield key

    async def list_dir(self, prefix: str):
        with self.lock:
            self.listing += 1
            self.most_listing = max(self.most_listing, self.listing)
        try:
            await asyncio.sleep(self.delay)
            if self.fail.get("list:" + prefix):
                raise self.fail["list:" + prefix].pop(0)
        finally:
            with self.lock:
                self.listing -= 1
        prefix = prefix.rstrip("/") + "/" if prefix else ""
        for name in sorted({key[len(prefix) :].split("/")[0] for key in self.values if key.startswith(prefix)}):
            yield name


def test_a_third_party_store_is_taken_by_type_and_paced_by_the_host_limit():
    peer = ThirdPartyStore(delay=0.01)
    array = zarrx.create_array(peer, shape=(256,), chunks=(1,), dtype="i4", path="a")
    assert isinstance(array.store, ZarrPythonStore)
    array[:] = np.arange(256)
    # read back through zarr-python: the values zarrx wrote through the third-party store
    np.testing.assert_array_equal(zarr.open_array(peer, path="a", mode="r+")[:], np.arange(256))
    peer.most_in_flight = 0
    np.testing.assert_array_equal(zarrx.open_array(peer, "a")[:], np.arange(256))
    # 256 chunks at once would be 256 gets at once: the host's window starts at zarr-python's
    # concurrency and grows by about one per round trip (40 round trips here, 10 ms each)
    assert 8 <= peer.most_in_flight <= 40, peer.most_in_flight


def test_the_store_s_errors_name_the_key_and_transient_ones_are_retried():
    peer = ThirdPartyStore()
    zarrx.create_array(peer, shape=(4,), chunks=(2,), dtype="i4", path="a")[:] = [1, 2, 3, 4]
    store = make_store(peer, storage_options={"zarrx_retries": 2})
    # a connection failure told only in a foreign error's text is retried
    peer.fail["a/c/0"] = [RuntimeError("Generic HTTP error: error sending request"), ConnectionResetError("reset")]
    np.testing.assert_array_equal(zarrx.open_array(store, "a")[:], [1, 2, 3, 4])
    assert peer.fail["a/c/0"] == []
    # any other foreign error: a StoreError naming the key, the store's error as its cause
    peer.fail["a/c/1"] = [RuntimeError("the vendor's own failure")]
    with pytest.raises(StoreError, match=r"could not read 'a/c/1' in zarr-python store .*the vendor's own failure") as caught:
        zarrx.open_array(store, "a")[:]
    assert isinstance(caught.value.__cause__, RuntimeError)


def test_listings_are_paced_by_the_host_limit_and_retried():
    peer = ThirdPartyStore()
    for i in range(128):
        peer.values[f"g{i}/zarr.json"] = b"{}"
    store = make_store(peer, storage_options={"zarrx_retries": 2, "zarrx_max_concurrency": 8})
    peer.delay = 0.01
    # 128 listings at once, from 64 threads, as a walk of a wide hierarchy sends them
    with ThreadPoolExecutor(64) as pool:
        listed = list(pool.map(store.list_dir, [f"g{i}/" for i in range(128)]))
    assert listed == [["zarr.json"]] * 128
    assert peer.most_listing <= 8, peer.most_listing  # the host's limit, not the threads, sets the pace
    peer.fail["list:g1"] = [ConnectionResetError("reset"), RuntimeError("Generic HTTP error: error sending request")]
    assert store.list_dir("g1/") == ["zarr.json"] and peer.fail["list:g1"] == []


def test_a_request_outliving_its_deadline_is_a_timeout_naming_the_key():
    peer = ThirdPartyStore()
    zarrx.create_array(peer, shape=(2,), chunks=(2,), dtype="i4", path="a")[:] = [1, 2]
    peer.delay = 30.0
    store = make_store(peer, storage_options={"zarrx_request_deadline": 0.3})
    with pytest.raises(StoreTimeoutError, match=r"'a/c/0'.*request deadline of 0.3 s \(zarrx_request_deadline\)"):
        store.get("a/c/0")


def test_an_unknown_object_is_refused_naming_what_is_accepted():
    with pytest.raises(StoreTypeError, match=r"builtins.object .*zarr.abc.store.Store.*IcechunkStore"):
        make_store(object())
    with pytest.raises(StoreError, match="anon"):
        make_store(ThirdPartyStore(), storage_options={"anon": True})


def test_zarrx_does_not_import_zarr_python_to_recognise_stores():
    code = (
        "import sys, zarrx, zarrx.storage\n"
        "from zarrx.storage.zarr_python import is_zarr_python_store, zarr_python_array_location\n"
        "assert not is_zarr_python_store({}) and zarr_python_array_location([1]) is None\n"
        "assert 'zarr' not in sys.modules, 'zarr imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_store_that_must_be_opened_first_is_opened_as_zarr_python_opens_it(tmp_path):
    # zarr-python's ZipStore makes its zip file and lock when opened (StorePath.open does it
    # before zarr-python's first call); unopened, every call fails on the missing lock
    import xarray as xr

    import zarrx.xarray  # noqa: F401 (the .zarrx accessor)

    ds = xr.Dataset({"a": (("x", "y"), np.arange(200.0).reshape(10, 20))}, coords={"x": np.arange(10)})
    store = zarr.storage.ZipStore(tmp_path / "ours.zip", mode="w")
    ds.zarrx.to_zarr(store)
    store.close()
    with zarr.storage.ZipStore(tmp_path / "ours.zip", mode="r") as store:
        xr.testing.assert_identical(xr.open_dataset(store, engine="zarr").load(), ds)
    ds.to_zarr(zarr.storage.ZipStore(tmp_path / "theirs.zip", mode="w"), zarr_format=3, consolidated=False)
    for name in ["ours.zip", "theirs.zip"]:
        with zarr.storage.ZipStore(tmp_path / name, mode="r") as store:
            xr.testing.assert_identical(xr.open_dataset(store, engine="zarrx").load(), ds)
            np.testing.assert_array_equal(zarrx.open_array(store, "a")[:], ds.a.values)
    # a store that cannot be opened is a StoreError naming it and why
    with pytest.raises(StoreError, match=r"could not open zarr-python store ZipStore.*missing.zip.*FileNotFoundError"):
        zarrx.open_group(zarr.storage.ZipStore(tmp_path / "missing.zip", mode="r"))


@pytest.fixture(scope="module")
def plain_server(tmp_path_factory):
    """Exactly ``python -m http.server`` over a 256-chunk array and a sharded one."""
    root = tmp_path_factory.mktemp("served")
    values = np.random.default_rng(0).random((256, 64), dtype=np.float32)
    zarrx.create_array(root / "chunks.zarr", shape=(256, 64), chunks=(16, 4), dtype="f4")[:] = values
    sharded = np.arange(64 * 64, dtype="i4").reshape(64, 64)
    zarrx.create_array(root / "sharded.zarr", shape=(64, 64), chunks=(8, 8), shards=(32, 32), dtype="i4")[:] = sharded
    with serve_plain(root) as server:
        yield server.url, values, sharded


def object_store(url: str, **options):
    from obstore.store import HTTPStore

    return zarr.storage.ObjectStore(HTTPStore.from_url(url, client_options={"allow_http": True}, **options), read_only=True)


def test_zarr_python_s_object_store_over_python_http_server(plain_server):
    url, values, sharded = plain_server
    store = object_store(url)
    np.testing.assert_array_equal(zarrx.open_array(store, "chunks.zarr")[...], values)
    np.testing.assert_array_equal(zarrx.open_array(store, "chunks.zarr")[...], zarr.open_array(store, path="chunks.zarr", mode="r")[...])
    # whole shards are read whole: as a range from 0, ObjectStore would send "Range: bytes=0-",
    # which this server refuses (obstore's NotSupportedError)
    np.testing.assert_array_equal(zarrx.open_array(store, "sharded.zarr")[...], sharded)
    np.testing.assert_array_equal(zarrx.open_array(store, "sharded.zarr")[:32, :32], sharded[:32, :32])
    # obstore's own error (nothing listens on port 9): a StoreError naming the key and its URL
    # (zarrx reads zarr-python's ObjectStore as its own ObstoreStore of the same obstore store)
    message = r"could not read 'chunks.zarr/c/0/0' at http://127.0.0.1:9/chunks.zarr/c/0/0 "
    with pytest.raises(StoreError, match=message):
        make_store(object_store("http://127.0.0.1:9", retry_config={"max_retries": 0}), storage_options={"zarrx_retries": 0}).get("chunks.zarr/c/0/0")
