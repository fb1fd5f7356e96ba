"""PrefetchStore and read_together: many small arrays read in one batch, on first use."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import xarray as xr

import zarrx
import zarrx.xarray  # noqa: F401
from zarrx.errors import ReadOnlyError
from zarrx.nodes.prefetch import MAX_PREFETCH_BYTES, read_together
from zarrx.storage import PrefetchStore
from zarrx.storage import MemoryStore, MetricsStore, OffsetByteRequest, RangeByteRequest, SuffixByteRequest


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
