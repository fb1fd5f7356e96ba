"""Storage faults: a failed read or write raises a zarrx error naming the key and loses nothing.

Every test injects faults with :class:`zarrx.testing.FaultyStore` -- the k-th read, write or
deletion fails, or a batch write fails half-way -- for *every* k an operation reaches, on a
MemoryStore and a LocalStore, for plain, checksummed and sharded arrays, whole and partial
writes. After each fault:

* the error is a :class:`~zarrx.errors.StoreError` naming the key that failed;
* every chunk (shard) decodes to its whole old or whole new value, never a mix or garbage;
* writing again (a retry) gives exactly the new values;
* a failed metadata write leaves the node openable with its old or new metadata;
* a read either fails naming the key or returns exactly the stored values.

Dask writes are retried by computing again (threaded scheduler) and by ``dask.distributed``'s
``retries=``: chunk writes are idempotent, so the result is exact.
"""

from __future__ import annotations

import pickle
import threading
import uuid
from typing import Any, Callable

import dask
import dask.array as da
import numpy as np
import pytest

import zarrx
from zarrx.codecs import Crc32cCodec, ZstdCodec
from zarrx.errors import StoreError, UsageError, ZarrxError
from zarrx.storage import LocalStore, MemoryStore, MetricsStore
from zarrx.testing import FailOnce, FaultyStore
from tests.figures import add, report_figures  # noqa: F401 (report_figures is an autouse fixture)

SHAPE = (12, 12)
#: create_array keywords, and the shape of the unit written whole (chunk, or shard)
ARRAYS: dict[str, tuple[dict[str, Any], tuple[int, int]]] = {
    "zstd": ({"chunks": (4, 4), "compressors": [ZstdCodec(level=1)]}, (4, 4)),
    "crc32c": ({"chunks": (3, 6), "compressors": [Crc32cCodec()]}, (3, 6)),
    "sharded": ({"chunks": (2, 2), "shards": (4, 6)}, (4, 6)),
}
#: the selections written: everything, and a part that cuts through chunks
WRITES = {"whole": np.s_[:, :], "part": np.s_[1:11, 2:9]}


def faults(count: int = 1) -> None:
    add(__name__, "faults injected", count)


@pytest.fixture(params=["memory", "local"])
def inner(request, tmp_path):
    return MemoryStore() if request.param == "memory" else LocalStore(tmp_path / "data.zarr")


def generation(gen: int) -> np.ndarray:
    """Values of one generation: each unit of the array can be told apart and checked."""
    return (np.arange(np.prod(SHAPE)).reshape(SHAPE) % 97 + 1000 * gen).astype("int32")


def unit_regions(unit: tuple[int, int]):
    for i in range(0, SHAPE[0], unit[0]):
        for j in range(0, SHAPE[1], unit[1]):
            yield np.s_[i : i + unit[0], j : j + unit[1]]


def assert_whole_units(values: np.ndarray, old: np.ndarray, new: np.ndarray, unit: tuple[int, int]) -> int:
    """Every unit (chunk or shard) holds its whole old or whole new values; how many are new."""
    updated = 0
    for region in unit_regions(unit):
        is_old = np.array_equal(values[region], old[region])
        is_new = np.array_equal(values[region], new[region])
        assert is_old or is_new, f"unit {region} holds a mix of old and new values:\n{values[region]}"
        updated += is_new and not is_old
    return updated


def prepared(inner, kind: str) -> tuple[FaultyStore, Any]:
    """A fresh array ``x`` of generation 0 in ``inner`` (emptied first), through a FaultyStore without faults."""
    inner.delete_prefix("")
    store = FaultyStore(inner)
    keywords, _ = ARRAYS[kind]
    arr = zarrx.create_array(store, "x", shape=SHAPE, dtype="int32", fill_value=-1, **keywords)
    arr[...] = generation(0)
    store.reset()
    return store, arr


def operations(inner, kind: str, write: Callable[[Any], None], operation: str) -> int:
    """How many operations of ``operation`` the write makes (a dry run without faults)."""
    store, arr = prepared(inner, kind)
    write(arr)
    return store.counts[operation]


# -- the wrapper itself --------------------------------------------------------------------------
def test_fault_rules():
    store = FaultyStore(MemoryStore(), fail_get=[2, 4], fail_set=3, fail_delete=lambda key: key.startswith("keep"))
    store.set_many({"a": b"1", "b": b"2"})
    with pytest.raises(StoreError, match=r"could not write 'c' \(write 3 of FaultyStore"):
        store.set("c", b"3")
    assert store.get("a") == b"1"
    with pytest.raises(StoreError, match="could not read 'b'"):
        store.get("b")
    assert store.get_many(["a"]) == {"a": b"1"}
    with pytest.raises(StoreError, match="could not read 'b'"):
        store.get_ranges([("b", zarrx.storage.RangeByteRequest(0, 1))])
    store.set("keep/this", b"x")
    with pytest.raises(StoreError, match="could not delete 'keep/this'"):
        store.delete_prefix("keep/")
    assert store.inner.get("keep/this") == b"x"
    assert store.injected == [("set", "c"), ("get", "b"), ("get", "b"), ("delete", "keep/this")]
    assert store.counts == {"get": 4, "set": 4, "delete": 1, "batch": 2}
    faults(len(store.injected))


def test_a_batch_that_fails_in_the_middle_writes_its_first_half():
    store = FaultyStore(MemoryStore(), fail_in_batch=2)
    store.set_many({"a": b"1"})
    items = {f"k{i}": bytes([i]) for i in range(6)}
    with pytest.raises(StoreError, match=r"could not write 'k3' \(key 4 of 6 in batch 2"):
        store.set_many(items)
    assert sorted(store.inner.mapping) == ["a", "k0", "k1", "k2"]
    store.fail_in_batch = 3
    with pytest.raises(StoreError, match="could not delete 'k1'"):
        store.delete_many(["k0", "k1", "k2"])
    assert sorted(store.inner.mapping) == ["a", "k1", "k2"]
    faults(len(store.injected))


def starts_with_c(key: str) -> bool:
    return key.startswith("c/")


def test_fail_once_and_other_options():
    rule = FailOnce(starts_with_c)
    store = FaultyStore(MemoryStore(), fail_set=rule, exception=OSError)
    store.set("zarr.json", b"{}")
    with pytest.raises(OSError, match="could not write 'c/0'"):
        store.set("c/0", b"1")
    store.set("c/0", b"1")  # the retry succeeds
    assert store.inner.get("c/0") == b"1" and rule.failed == {"c/0"}
    copy = pickle.loads(pickle.dumps(store))
    assert copy.inner.get("c/0") == b"1" and copy.fail_set.failed == {"c/0"}
    assert FaultyStore(MemoryStore(read_only=True)).read_only
    assert FaultyStore(MemoryStore()).process_local and not FaultyStore(LocalStore("/nonexistent")).process_local
    for bad in (0, True, "2", [1, "x"]):
        with pytest.raises(UsageError):
            FaultyStore(MemoryStore(), fail_get=bad)
    with pytest.raises(UsageError):
        FaultyStore({})
    faults(1)


# -- failed writes keep the previous contents ------------------------------------------------------
@pytest.mark.parametrize("kind", ARRAYS)
@pytest.mark.parametrize("where", WRITES)
def test_every_failed_chunk_write_keeps_old_or_new_and_names_the_key(inner, kind, where):
    _, unit = ARRAYS[kind]
    selection = WRITES[where]
    old = generation(0)
    new = old.copy()
    new[selection] = generation(1)[selection]

    def write(arr):
        arr[selection] = generation(1)[selection]

    writes = operations(inner, kind, write, "set")
    assert writes >= 4
    for k in [*range(1, writes + 1), "batch"]:
        store, arr = prepared(inner, kind)
        if k == "batch":
            store.fail_in_batch = 1
        else:
            store.fail_set = k
        with pytest.raises(StoreError) as caught:
            write(arr)
        (operation, key), = store.injected
        assert key in str(caught.value) and key.startswith("x/c/")
        values = zarrx.open_array(inner, "x")[...]
        updated = assert_whole_units(values, old, new, unit)
        assert updated < writes  # the failed one at least was not written
        arr[selection] = generation(1)[selection]  # the retry
        np.testing.assert_array_equal(zarrx.open_array(inner, "x")[...], new)
        faults()


@pytest.mark.parametrize("kind", ARRAYS)
def test_every_failed_delete_of_an_all_fill_chunk_keeps_old_or_new(inner, kind):
    """Writing the fill value deletes chunks; a failed deletion leaves the old chunk whole."""
    _, unit = ARRAYS[kind]
    old, new = generation(0), np.full(SHAPE, -1, dtype="int32")

    def write(arr):
        arr[...] = -1

    deletes = operations(inner, kind, write, "delete")
    assert deletes == len(list(unit_regions(unit)))
    for k in [*range(1, deletes + 1), "batch"]:
        store, arr = prepared(inner, kind)
        if k == "batch":
            store.fail_in_batch = 1
        else:
            store.fail_delete = k
        with pytest.raises(StoreError) as caught:
            write(arr)
        assert store.injected[0][1] in str(caught.value)
        assert_whole_units(zarrx.open_array(inner, "x")[...], old, new, unit)
        write(arr)
        np.testing.assert_array_equal(zarrx.open_array(inner, "x")[...], new)
        assert list(inner.list_prefix("x/c")) == []
        faults()


# -- failed metadata writes leave the node openable ----------------------------------------------
def test_failed_attribute_writes_keep_the_old_metadata(inner):
    store, arr = prepared(inner, "zstd")
    group = zarrx.open_group(store, mode="r+")
    store.fail_set = lambda key: key.endswith("zarr.json")
    with pytest.raises(StoreError, match="'x/zarr.json'"):
        arr.attrs["units"] = "m"
    with pytest.raises(StoreError, match="'zarr.json'"):
        group.attrs.update(title="t")
    assert dict(zarrx.open_array(inner, "x").attrs) == {} and dict(zarrx.open_group(inner).attrs) == {}
    np.testing.assert_array_equal(zarrx.open_array(inner, "x")[...], generation(0))
    faults(len(store.injected))


def test_failed_creation_leaves_the_hierarchy_openable(inner):
    """Creating an array below missing groups fails at each write in turn: what exists stays readable."""

    def create(store):
        arr = zarrx.create_array(store, "a/b/new", shape=(4,), chunks=(2,), dtype="int8", fill_value=0)
        arr[...] = 5

    store, _ = prepared(inner, "zstd")
    create(store)
    writes = store.counts["set"]
    assert writes >= 4  # the two groups, the array, its chunks
    for k in range(1, writes + 1):
        store, _ = prepared(inner, "zstd")
        store.fail_set = k
        with pytest.raises(StoreError):
            create(store)
        root = zarrx.open_group(inner)
        members = dict(root.members(max_depth=None))  # every node there opens
        np.testing.assert_array_equal(members["x"][...], generation(0))
        if "a/b/new" in members:
            assert members["a/b/new"][...].tolist() in ([0, 0, 0, 0], [5, 5, 0, 0], [0, 0, 5, 5], [5, 5, 5, 5])
        zarrx.open_group(inner, mode="a").require_group("a")  # and can be written again
        faults()


def test_failed_resize_that_grows_keeps_shape_and_data(inner):
    store, arr = prepared(inner, "zstd")
    store.fail_set = 1
    with pytest.raises(StoreError, match="'x/zarr.json'"):
        arr.resize(20, 20)
    reopened = zarrx.open_array(inner, "x")
    assert reopened.shape == SHAPE
    np.testing.assert_array_equal(reopened[...], generation(0))
    faults()


def test_failed_resize_that_shrinks_keeps_shape_and_data(inner):
    store, arr = prepared(inner, "zstd")
    store.fail_set = lambda key: key.endswith("zarr.json")
    with pytest.raises(StoreError, match="'x/zarr.json'"):
        arr.resize(6, 6)
    faults()
    reopened = zarrx.open_array(inner, "x")
    assert reopened.shape == SHAPE
    np.testing.assert_array_equal(reopened[...], generation(0))


def test_failed_clean_up_after_a_shrink_says_so_and_a_repeated_resize_finishes_it(inner):
    store, arr = prepared(inner, "zstd")
    store.fail_delete = 1
    with pytest.raises(StoreError, match=r"resized to \[6, 6\].*call resize\(\[6, 6\]\) again"):
        arr.resize(6, 6)
    faults()
    assert zarrx.open_array(inner, "x").shape == (6, 6)
    arr.resize(6, 6)  # finishes the clean-up
    arr.resize(*SHAPE)
    expected = np.full(SHAPE, -1, dtype="int32")
    expected[:6, :6] = generation(0)[:6, :6]
    np.testing.assert_array_equal(zarrx.open_array(inner, "x")[...], expected)


def test_failed_consolidation_leaves_the_group_openable(inner):
    store, _ = prepared(inner, "zstd")
    zarrx.consolidate_metadata(store)
    # a node added by another writer, which leaves the consolidated metadata as it was
    inner.set("y/zarr.json", zarrx.create_array({}, shape=(2,), dtype="int8").metadata.to_bytes())
    store.fail_set = lambda key: key == "zarr.json"
    with pytest.raises(StoreError, match="'zarr.json'"):
        zarrx.consolidate_metadata(store)
    root = zarrx.open_group(inner)
    assert root.is_consolidated and sorted(root) == ["x"]  # the old consolidated metadata
    assert sorted(zarrx.open_group(inner, use_consolidated=False)) == ["x", "y"]
    faults()


# -- failed reads raise naming the key, never a wrong value -------------------------------------
@pytest.mark.parametrize("kind", ARRAYS)
@pytest.mark.parametrize("selection", [np.s_[...], np.s_[1:11, 3:8], np.s_[5, :]])
def test_every_failed_read_names_the_key_and_returns_nothing(inner, kind, selection):
    store, _ = prepared(inner, "zstd" if kind == "zstd" else kind)

    def read():
        return zarrx.open_array(store, "x")[selection]

    expected = read()
    np.testing.assert_array_equal(expected, generation(0)[selection])
    reads = store.counts["get"]
    for k in range(1, reads + 1):
        store.reset()
        store.fail_get = k
        with pytest.raises(StoreError) as caught:
            read()
        (_, key), = store.injected
        assert key in str(caught.value)
        faults()
    store.fail_get = reads + 1
    store.reset()
    np.testing.assert_array_equal(read(), expected)


# -- dask: retried write tasks are exact -----------------------------------------------------------
def chunk_keys(key: str) -> bool:
    return "/c/" in key


@pytest.mark.parametrize("kind", ARRAYS)
def test_recomputing_a_failed_dask_write_gives_exact_values(inner, kind):
    keywords, unit = ARRAYS[kind]
    rule = FailOnce(chunk_keys)  # every chunk write fails the first time
    store = FaultyStore(inner, fail_set=rule)
    x = da.from_array(generation(3), chunks=unit)
    delayed = zarrx.to_zarr(x, store, "x", compute=False, **keywords)
    attempts = 0
    with dask.config.set(scheduler="threads", num_workers=4):
        while True:
            try:
                delayed.compute()
                break
            except StoreError as error:
                assert "x/c/" in str(error)
                attempts += 1
                assert attempts <= len(list(unit_regions(unit)))
    np.testing.assert_array_equal(zarrx.open_array(inner, "x")[...], generation(3))
    assert len(rule.failed) == len(list(unit_regions(unit))) and attempts >= 1
    faults(len(store.injected))


#: keys whose first write failed, shared by every copy of the rule below in this process
_FAILED_ONCE: set[str] = set()
_FAILED_LOCK = threading.Lock()


def fail_first_chunk_write(key: str) -> bool:
    """A fault rule that survives pickling (by reference): each chunk key fails once per process."""
    if "/c/" not in key:
        return False
    with _FAILED_LOCK:
        if key in _FAILED_ONCE:
            return False
        _FAILED_ONCE.add(key)
        return True


def test_dask_distributed_retries_failed_write_tasks(tmp_path):
    distributed = pytest.importorskip("distributed")
    _FAILED_ONCE.clear()
    store = FaultyStore(LocalStore(tmp_path / "data.zarr"), fail_set=fail_first_chunk_write)
    x = da.from_array(generation(4), chunks=(4, 6))
    with distributed.Client(processes=False, n_workers=1, threads_per_worker=2, dashboard_address=None) as client:
        delayed = zarrx.to_zarr(x, store, "x", chunks=(4, 6), compute=False)
        client.compute(delayed, retries=2).result()
    np.testing.assert_array_equal(zarrx.open_array(tmp_path / "data.zarr", "x")[...], generation(4))
    assert len(_FAILED_ONCE) == 6
    faults(len(_FAILED_ONCE))


def test_chunk_writes_are_idempotent(inner):
    """Running the same write tasks twice stores exactly the same bytes."""
    x = da.from_array(generation(5), chunks=(4, 6))
    delayed = zarrx.to_zarr(x, inner, "x", chunks=(2, 3), shards=(4, 6), compute=False)
    delayed.compute()
    first = {key: inner.get(key) for key in inner.list_prefix("")}
    delayed.compute()
    assert {key: inner.get(key) for key in inner.list_prefix("")} == first


@pytest.mark.parametrize(
    "make_store",
    [lambda: FaultyStore(MemoryStore()), lambda: MetricsStore(MemoryStore()), lambda: f"memory://{uuid.uuid4().hex}"],
    ids=["faulty-memory", "metrics-memory", "fsspec-memory"],
)
def test_writes_to_an_in_memory_store_refuse_to_leave_the_process(make_store):
    x = da.ones((4, 4), chunks=(2, 2), dtype="int8")
    delayed = zarrx.to_zarr(x, make_store(), compute=False)
    with pytest.raises(ZarrxError, match="in-memory store"):
        pickle.dumps(dict(delayed.dask))
