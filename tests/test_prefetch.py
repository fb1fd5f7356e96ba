"""PrefetchStore and read_together: many small arrays read in one batch, on first use."""

from __future__ import annotations

import pickle
import threading
import time

import numpy as np
import pytest
import xarray as xr

import zarrx
import zarrx.xarray  # noqa: F401
from zarrx.concurrency import task_threads
from zarrx.errors import ReadOnlyError, StoreError
from zarrx.nodes.prefetch import MAX_PREFETCH_BYTES, read_together
from zarrx.storage import PrefetchStore
from zarrx.storage import MemoryStore, MetricsStore, OffsetByteRequest, RangeByteRequest, SuffixByteRequest
from zarrx.xarray.store import ZarrxDataStore


@pytest.fixture
def inner():
    return MetricsStore(MemoryStore({"a": b"0123456789", "b": b"xyz", "other": b"o"}))


def test_nothing_is_fetched_before_a_read(inner):
    PrefetchStore(inner, ["a", "b", "missing"])
    assert inner.summary().calls == 0


def test_first_read_fetches_every_key_in_one_batch(inner):
    store = PrefetchStore(inner, ["a", "b", "missing"])
    assert store.get("b") == b"xyz"
    assert store.get("a", RangeByteRequest(2, 5)) == b"234"
    assert store.get("missing") is None and not store.exists("missing")
    assert store.get_many(["a", "other", "missing"]) == {"a": b"0123456789", "other": b"o", "missing": None}
    ranges = [("a", SuffixByteRequest(3)), ("other", OffsetByteRequest(0)), ("b", SuffixByteRequest(0))]
    assert store.get_ranges(ranges) == [b"789", b"o", b""]
    summary = inner.summary()
    assert (summary["get_many"].calls, summary["get_many"].requests) == (2, 4)  # the prefetch, then 'other'
    assert summary["get_ranges"].requests == 1  # only 'other' went to the store


def test_read_only_and_pickling(inner):
    store = PrefetchStore(inner, ["a"])
    with pytest.raises(ReadOnlyError, match="'a'"):
        store.set("a", b"new")
    with pytest.raises(ReadOnlyError):
        store.delete_prefix("")
    assert store.list_dir("") == ["a", "b", "other"]
    store.get("a")
    clone = pickle.loads(pickle.dumps(store))
    assert clone.get("a") == b"0123456789"


def _group(store, sizes):
    root = zarrx.create_group(store)
    for name, size in sizes.items():
        root.create_array(name, shape=(size,), chunks=(max(1, size // 3),), dtype="f8")[:] = np.arange(size)
    return root


def test_read_together_reads_all_arrays_in_one_batch():
    store = MetricsStore(MemoryStore())
    root = _group(store, {"time": 10, "lat": 7, "lon": 12})
    arrays = [root[name] for name in ("time", "lat", "lon")]
    store.reset()
    together = read_together(arrays)
    assert store.summary().calls == 0
    for array, name, size in zip(together, ("time", "lat", "lon"), (10, 7, 12)):
        np.testing.assert_array_equal(array[:], np.arange(size))
        assert array.path == name and array.store is together[0].store
    summary = store.summary()
    assert summary.calls == 1 and summary["get_many"].requests == 4 + 3 + 4


def test_read_together_leaves_lone_and_large_arrays_alone():
    root = _group(MemoryStore(), {"a": 3, "b": 3})
    lone = root["a"]
    assert read_together([lone])[0] is lone
    store = MemoryStore()
    big = zarrx.create_array(store, "big", shape=(MAX_PREFETCH_BYTES // 8 + 1,), chunks=(2**20,), dtype="f8")
    small = zarrx.create_array(store, "small", shape=(2,), dtype="f8")
    assert read_together([big, small]) == [big, small]


def test_xarray_reads_the_dimension_coordinates_in_one_batch():
    store = MetricsStore(MemoryStore())
    ds = xr.Dataset(
        {"t": (("time", "lat", "lon"), np.zeros((4, 3, 5)))},
        coords={"time": np.arange(4), "lat": np.arange(3.0), "lon": np.arange(5.0), "label": ("lat", ["a", "b", "c"])},
    )
    ds.zarrx.to_zarr(store, consolidated=True)
    store.reset()
    opened = xr.open_dataset(store, engine="zarrx")
    summary = store.summary()
    assert summary.calls == 2  # the consolidated zarr.json, then time, lat and lon together
    assert summary["get_many"].requests == 3
    xr.testing.assert_identical(opened.load(), ds)


def test_process_local_follows_the_wrapped_store(inner, tmp_path):
    from zarrx.storage import LocalStore

    assert PrefetchStore(inner, ["a"]).process_local
    assert not PrefetchStore(LocalStore(tmp_path), ["a"]).process_local


def test_a_suffix_longer_than_the_value_gives_the_whole_value():
    from zarrx.storage import PrefetchStore
    from zarrx.storage import MemoryStore
    from zarrx.storage.store import SuffixByteRequest

    store = PrefetchStore(MemoryStore({"k": b"01234"}), ["k"])
    assert store.get("k", SuffixByteRequest(8)) == b"01234"  # not the last 3 bytes
    assert store.get_ranges([("k", SuffixByteRequest(2))]) == [b"34"]


# -- sent at once, handed over as the values arrive ------------------------------------------------
class Gated(MemoryStore):
    """A memory store whose ``iter_many`` records the keys asked for, hands over the first value,
    then waits for ``gate`` before the others (a batch whose other answers are still on the wire)."""

    def __init__(self, values):
        super().__init__(values)
        self.gate = threading.Event()
        self.asked: list[list[str]] = []
        self.fail_after_first: Exception | None = None

    def iter_many(self, keys, *, max_size=None):
        keys = list(keys)
        self.asked.append(keys)
        yield keys[0], self.get(keys[0])
        assert self.gate.wait(10), "the gate was never opened"
        if self.fail_after_first is not None:
            raise self.fail_after_first
        for key in keys[1:]:
            yield key, self.get(key)


def _wait_for(condition) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, "waited 10 s"
        time.sleep(0.001)


def test_start_sends_the_batch_at_once_and_each_value_is_read_as_it_arrives():
    gated = Gated({"z": b"1", "a": b"2", "m": b"3"})
    store = PrefetchStore(gated, ["z", "a", "m", "a"])
    assert store.start() and not store.start()  # once
    _wait_for(lambda: gated.asked)  # a pool thread took it (a read before that would send it itself)
    assert store.get("z") == b"1"  # while the rest of the batch is still held back
    assert gated.asked == [["z", "a", "m"]]  # one batch, in the order given (no key twice)
    assert not gated.gate.is_set()
    threading.Timer(0.05, gated.gate.set).start()
    assert store.get_many(["m", "a"]) == {"m": b"3", "a": b"2"}  # waited for them
    assert len(gated.asked) == 1


def test_readers_waiting_for_a_failed_batch_get_its_error():
    gated = Gated({"a": b"1", "b": b"2"})
    gated.fail_after_first = StoreError("the server went away while reading 'b'")
    store = PrefetchStore(gated, ["a", "b"])
    store.start()
    _wait_for(lambda: gated.asked)
    assert store.get("a") == b"1"
    gated.gate.set()
    with pytest.raises(StoreError, match="'b'"):
        store.get("b")
    with pytest.raises(StoreError, match="'b'"):  # and again: no second batch
        store.get_many(["b"])
    assert len(gated.asked) == 1


def test_a_reader_sends_the_batch_itself_where_no_other_thread_may_run():
    inner = MetricsStore(MemoryStore({"a": b"1", "b": b"2"}))
    store = PrefetchStore(inner, ["a", "b"])
    with task_threads(1):  # a dask task given one thread: no pool thread to send it from
        assert not store.start()
    assert inner.summary().calls == 0
    assert store.get("b") == b"2" and store.get("a") == b"1"
    assert inner.summary()["get_many"].calls == 1


class _Threads(MetricsStore):
    """Records the thread each batch is fetched on."""

    def __init__(self, inner):
        super().__init__(inner)
        self.fetched_on = []

    def iter_many(self, keys, **options):
        self.fetched_on.append(threading.current_thread())
        yield from super().iter_many(keys, **options)


def test_an_open_fetches_every_index_in_the_thread_that_reads_the_first():
    # the batch is not sent from a pool thread while the open goes on decoding: the opening
    # thread would hold the GIL the event loop reading the answers needs (docs/remote.md)
    store = _Threads(MemoryStore())
    xr.Dataset(coords={"x": [1, 2], "y": [3.0]}).zarrx.to_zarr(store, consolidated=True)
    data_store = ZarrxDataStore(zarrx.open_group(store, use_consolidated=True))
    store.reset()
    variables = data_store.get_variables()  # what xarray asks first: no value read yet
    time.sleep(0.05)  # time for a pool thread to send a batch, if one were started
    assert store.summary().calls == 0
    assert variables["x"].values.tolist() == [1, 2]
    assert store.summary()["get_many"].requests == 2 and store.fetched_on == [threading.current_thread()]
    assert variables["y"].values.tolist() == [3.0] and store.summary()["get_many"].calls == 1
    tree = xr.DataTree.from_dict({"/a": xr.Dataset(coords={"x": [1]}), "/b": xr.Dataset(coords={"x": [2]})})
    tree.zarrx.to_zarr(store, mode="w", consolidated=True)
    store.reset()
    store.fetched_on.clear()
    opened = xr.open_datatree(store, engine="zarrx", consolidated=True)
    assert opened["a"].x.values.tolist() == [1] and opened["b"].x.values.tolist() == [2]
    assert store.fetched_on == [threading.current_thread()] and store.summary()["get_many"].requests == 2
