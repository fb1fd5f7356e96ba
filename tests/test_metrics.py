"""MetricsStore: calls, requests, bytes and time per store operation."""

from __future__ import annotations

import pickle
import threading
import uuid

import numpy as np
import pytest

import zarrx
from zarrx.errors import ReadOnlyError
from zarrx.storage import FsspecStore, LocalStore, MemoryStore, MetricsStore, RangeByteRequest, SuffixByteRequest
from zarrx.storage.metrics import OPERATIONS, OperationMetrics


@pytest.fixture
def store():
    return MetricsStore(MemoryStore())


def test_every_operation_is_counted(store):
    store.set("a", b"12345")
    store.set_many({"b": b"xy", "c/0": b"z"})
    assert store.get("a") == b"12345"
    assert store.get("missing") is None
    assert store.get("a", RangeByteRequest(1, 3)) == b"23"
    assert store.get_many(["a", "b", "missing"]) == {"a": b"12345", "b": b"xy", "missing": None}
    ranges = [("a", SuffixByteRequest(2)), ("b", RangeByteRequest(0, 1)), ("nope", SuffixByteRequest(1))]
    assert store.get_ranges(ranges) == [b"45", b"x", None]
    assert store.exists("a") and not store.exists("missing")
    assert sorted(store.list_prefix("")) == ["a", "b", "c/0"]
    assert store.list_dir("") == ["a", "b", "c"]
    store.delete("a")
    store.delete_many(["b", "missing"])
    store.delete_prefix("c/")

    summary = store.summary()
    expected = {
        "get": (3, 3, 1, 7),
        "get_many": (1, 3, 1, 7),
        "get_ranges": (1, 3, 1, 3),
        "exists": (2, 2, 1, 0),
        "set": (1, 1, 0, 5),
        "set_many": (1, 2, 0, 3),
        "delete": (1, 1, 0, 0),
        "delete_many": (1, 2, 0, 0),
        "delete_prefix": (1, 1, 0, 0),
        "list_prefix": (1, 1, 0, 0),
        "list_dir": (1, 1, 0, 0),
    }
    assert {name: (m.calls, m.requests, m.missing, m.bytes) for name, m in summary.items()} == expected
    assert list(summary) == list(OPERATIONS)
    assert all(m.seconds >= 0 for m in summary.values())
    assert summary.calls == 14 and summary.requests == 20
    assert summary.bytes_read == 17 and summary.bytes_written == 8
    table = str(summary)
    assert table.splitlines()[0].split() == ["operation", "calls", "requests", "missing", "bytes", "seconds"]
    assert table.splitlines()[-1].split()[:3] == ["total", "14", "20"]
    assert summary.as_dict()["get_many"]["requests"] == 3


def test_reset_and_snapshots(store):
    store.set("k", b"v")
    before = store.summary()
    store.get("k")
    assert "get" not in before and before["get"] == OperationMetrics()  # a snapshot, not live
    assert store.summary()["get"].calls == 1
    store.reset()
    assert len(store.summary()) == 0 and store.summary().requests == 0
    with pytest.raises(KeyError, match="not a store operation"):
        store.summary()["fetch"]


def test_counts_an_array_read_as_one_batch():
    class Remote(MemoryStore):
        reads_are_local = False  # a store with round trips: batched (local ones are read chunk by chunk)

    store = MetricsStore(Remote())
    array = zarrx.create_array(store, "x", shape=(64, 64), chunks=(8, 8), dtype="f4")
    store.reset()
    array[:] = np.ones((64, 64), dtype="f4")
    assert store.summary()["set_many"].calls == 1 and store.summary()["set_many"].requests == 64
    store.reset()
    reopened = zarrx.open_array(store, "x")
    reopened[4:20, 4:20]
    summary = store.summary()
    assert summary["get"].requests == 1  # the metadata document
    assert (summary["get_many"].calls, summary["get_many"].requests) == (1, 9)


def test_failures_are_counted_and_raised():
    store = MetricsStore(MemoryStore(read_only=True))
    assert store.read_only
    with pytest.raises(ReadOnlyError):
        store.set("k", b"v")
    assert store.summary()["set"].calls == 1


def test_thread_safe_counting(store):
    store.set("k", b"abc")
    store.reset()

    def work():
        for _ in range(200):
            store.get("k")
            store.get_many(["k", "k2"])

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    summary = store.summary()
    assert summary["get"].calls == 1600 and summary["get"].bytes == 4800
    assert summary["get_many"].requests == 3200 and summary["get_many"].missing == 1600


def test_pickled_copy_starts_from_zero_and_wraps_the_same_store():
    inner = FsspecStore.from_url(f"memory://zarrx-metrics-{uuid.uuid4().hex}")
    store = MetricsStore(inner)
    store.set("k", b"v")
    clone = pickle.loads(pickle.dumps(store))
    assert clone == store and hash(clone) == hash(store)
    assert len(clone.summary()) == 0
    assert clone.get("k") == b"v"
    assert repr(clone) == f"MetricsStore({inner!r})"
    inner.delete_prefix("")


def test_process_local_follows_the_wrapped_store(tmp_path):
    from zarrx.storage import LocalStore

    assert MetricsStore(MemoryStore()).process_local
    assert not MetricsStore(LocalStore(tmp_path)).process_local


def test_counts_each_chunk_of_a_local_read():
    store = MetricsStore(MemoryStore())
    array = zarrx.create_array(store, "x", shape=(64, 64), chunks=(8, 8), dtype="f4")
    array[:] = np.ones((64, 64), dtype="f4")
    store.reset()
    zarrx.open_array(store, "x")[4:20, 4:20]
    summary = store.summary()
    assert summary["get"].requests == 1 + 9  # the metadata document, then the 9 chunks one by one
    assert summary["get_many"].calls == 0


def test_a_streamed_batch_is_one_call_in_flight_until_its_last_value(store):
    store.set_many({"a": b"1", "b": b"22"})
    store.reset()
    values = store.iter_many(["a", "b", "missing", "a"])
    first = next(values)
    store.get("a")  # while the batch is in flight: the same round
    assert store.summary().rounds == 1 and "get_many" not in store.summary()  # not counted until it ends
    assert dict([first, *values]) == {"a": b"1", "b": b"22", "missing": None}
    summary = store.summary()
    assert summary.rounds == 1 and summary["get_many"].calls == 1
    assert (summary["get_many"].requests, summary["get_many"].missing, summary["get_many"].bytes) == (3, 1, 3)
    dict(store.iter_many(["a"]))
    assert store.summary().rounds == 2


class Pickles(LocalStore):
    """A local store counting how often it was pickled."""

    pickled = 0

    def __getstate__(self):
        Pickles.pickled += 1
        return self.__dict__


def test_the_dask_token_of_a_remote_store_is_computed_once(tmp_path):
    from dask.base import tokenize

    store = MetricsStore(Pickles(tmp_path))
    token = tokenize(store)
    assert tokenize(store) == token == tokenize(MetricsStore(Pickles(tmp_path)))
    pickled = Pickles.pickled
    assert [tokenize(store) for _ in range(5)] == [token] * 5 and Pickles.pickled == pickled
    assert tokenize(MetricsStore(LocalStore(tmp_path / "other"))) != token
    memory = MetricsStore(MemoryStore())  # its pickle is its values: tokenized afresh each time
    before = tokenize(memory)
    memory.set("a", b"1")
    assert tokenize(memory) != before
