"""Opening and writing a hierarchy takes a bounded number of sequential request rounds,
whatever the number of groups (issue 32).

Every count is ``MetricsStore.summary().rounds``: the times a store call began while no other
was in flight. The store under it reads as a remote one does (batch calls, never chunk by chunk
from a thread pool) and each listing takes a few milliseconds, so listings sent side by side
overlap as they would on a server.
"""

from __future__ import annotations

import pickle
import sys
import threading
import time
import warnings

import numpy as np
import pytest
import xarray as xr

import zarrx
import zarrx.xarray  # noqa: F401
from zarrx.errors import ContainsGroupError, StoreError
from zarrx.nodes.hierarchy import expand_requests
from zarrx.storage import MemoryStore, MetricsStore
from zarrx.storage.staged import StagedStore, staged_writes
from zarrx.tools.display import tree_text

from tests.counting import Wrapping

#: how long each listing takes: long enough for listings sent together to overlap on a loaded machine
#: (at 20 ms, 20 listings a level once took more than one round: their threads started that late)
LISTING_SECONDS = 0.1
#: how long each read takes, for the same reason: calls a walk sends side by side overlap
READ_SECONDS = 0.05


class RemoteLike(Wrapping):
    """A memory store read as a remote one: batch calls only, listings and reads that take a
    while, and every key read recorded (and every batch, in ``batches``)."""

    def __init__(self, inner, listing_seconds=None):
        super().__init__(inner)
        self.read: list[str] = []
        self.batches: list[list[str]] = []
        #: {prefix: seconds} for listings slower than LISTING_SECONDS; and when each listing began
        self.listing_seconds = listing_seconds or {}
        self.listed: dict[str, float] = {}
        self._lock = threading.Lock()

    def list_dir(self, prefix):
        with self._lock:
            self.listed[prefix] = time.perf_counter()
        time.sleep(self.listing_seconds.get(prefix, LISTING_SECONDS))
        return self.inner.list_dir(prefix)

    def get(self, key, byte_range=None):
        with self._lock:
            self.read.append(key)
            self.batches.append([key])
        time.sleep(READ_SECONDS)
        return self.inner.get(key, byte_range)

    def get_many(self, keys, *, max_size=None):
        with self._lock:
            self.read.extend(keys)
            self.batches.append(list(keys))
        time.sleep(READ_SECONDS)
        return self.inner.get_many(keys, max_size=max_size)


def _dataset(seed: int) -> xr.Dataset:
    rng = np.random.default_rng(seed)
    return xr.Dataset(
        {f"v{k}": (("time", "x"), rng.random((6, 4))) for k in range(3)},
        coords={"time": np.arange(6), "x": np.arange(4.0)},
        attrs={"seed": seed},
    )


def _tree(groups: int, depth: int = 1) -> xr.DataTree:
    """``groups`` groups below the root, each holding the issue's dataset (3 variables + 2
    coordinates); with ``depth`` 2 each also has a child group."""
    nodes = {"/": xr.Dataset(attrs={"title": "tree"})}
    for g in range(groups):
        nodes[f"/g{g}"] = _dataset(g)
        if depth > 1:
            nodes[f"/g{g}/inner"] = _dataset(1000 + g)
    return xr.DataTree.from_dict(nodes)


def _written(tree: xr.DataTree, consolidated: bool) -> MetricsStore:
    memory = MemoryStore()
    tree.zarrx.to_zarr(memory, mode="w", consolidated=consolidated)
    return MetricsStore(RemoteLike(memory))


def _open_tree(store: MetricsStore, consolidated: bool, **kwargs) -> xr.DataTree:
    store.reset()
    return xr.open_datatree(store, engine="zarrx", consolidated=consolidated, **kwargs)


# -- reading ---------------------------------------------------------------------------------------
#: the longest chain of requests that wait for one another in an open without consolidated
#: metadata: the root's document (its listing beside it), its children's documents, then for a
#: group below: its listing, its children's documents, its indexes (two more for each deeper level)
LISTED_CHAIN = 5


@pytest.mark.parametrize("consolidated", [True, False], ids=["consolidated", "listed"])
def test_opening_a_tree_takes_the_same_rounds_for_10_and_40_groups(consolidated):
    rounds = {}
    for groups in (10, 40):
        tree = _tree(groups)
        store = _written(tree, consolidated)
        opened = _open_tree(store, consolidated, chunks={})
        summary = store.summary()
        rounds[groups] = summary.rounds
        if consolidated:  # a round per call too: nothing is read group by group
            assert summary["get_many"].calls <= 3 and summary["get"].calls <= 1, str(summary)
        else:  # a call per group, side by side
            assert summary["list_dir"].calls == groups + 1, str(summary)
        xr.testing.assert_identical(opened.compute(), tree)
    # consolidated: the root document, then every index of every group in one batch; listed: each
    # group is read as soon as it is found, beside the others, so the rounds are at most the chain
    if consolidated:
        assert rounds == {10: 2, 40: 2}
    else:
        assert rounds[10] == rounds[40] <= LISTED_CHAIN, rounds


def test_a_group_is_read_as_soon_as_it_is_found_not_a_level_at_a_time():
    # g0's listing is slow: the groups below g1 are read meanwhile, not after the whole level
    memory = MemoryStore()
    _tree(3, depth=2).zarrx.to_zarr(memory, mode="w", consolidated=False)
    remote = RemoteLike(memory, listing_seconds={"g0/": 1.0})
    opened = xr.open_datatree(MetricsStore(remote), engine="zarrx", consolidated=False)
    assert remote.listed["g1/inner/"] < remote.listed["g0/"] + 0.5, remote.listed
    assert remote.listed["g2/inner/"] < remote.listed["g0/"] + 0.5, remote.listed
    assert remote.listed["g0/inner/"] > remote.listed["g0/"] + 1.0
    xr.testing.assert_identical(opened, xr.open_datatree(memory, engine="zarrx", consolidated=False))


def test_a_consolidated_tree_of_200_groups_opens_in_two_rounds():
    tree = _tree(200)
    store = _written(tree, consolidated=True)
    opened = _open_tree(store, True, chunks={})
    summary = store.summary()
    # the root's document, then the 400 indexes of every group in one batch (issue 32: within 5)
    assert summary.rounds == 2 and summary.requests == 1 + 200 * 2, str(summary)
    assert summary["get_many"].calls == 1
    for name in ("g0", "g117", "g199"):
        xr.testing.assert_identical(opened[name].to_dataset().compute(), tree[name].to_dataset())


def test_expand_requests_starts_each_call_as_soon_as_its_item_is_yielded():
    began, ended = {}, {}

    def call(n):
        began[n] = time.perf_counter()
        if n < 3:
            yield n + 1
            time.sleep(0.2)  # still running when its item's call begins
        ended[n] = time.perf_counter()

    expand_requests(call, [0])
    assert sorted(began) == [0, 1, 2, 3]
    assert all(began[n + 1] < ended[n] for n in range(3)), (began, ended)


def test_an_error_in_a_walk_is_raised_and_starts_nothing_after_it():
    memory = MemoryStore()
    _tree(30, depth=2).zarrx.to_zarr(memory, mode="w", consolidated=False)

    class Failing(RemoteLike):
        def list_dir(self, prefix):
            if prefix == "g1/":
                raise StoreError(f"{prefix}: the listing failed")
            return super().list_dir(prefix)

    remote = Failing(memory)
    with pytest.raises(StoreError, match="g1/: the listing failed"):
        xr.open_datatree(MetricsStore(remote), engine="zarrx", consolidated=False)
    listed = len(remote.listed)
    time.sleep(3 * LISTING_SECONDS)
    assert len(remote.listed) == listed  # nothing goes on after the error was raised
    # the groups listed before the failure came to light, not the whole tree: 30 groups and 30 inner ones
    assert listed < 1 + 30 + 30


def test_each_level_of_nesting_adds_at_most_two_rounds_when_listed():
    store = _written(_tree(12, depth=2), consolidated=False)
    _open_tree(store, False)
    assert store.summary().rounds <= LISTED_CHAIN + 2, str(store.summary())


@pytest.mark.parametrize("consolidated", [True, False], ids=["consolidated", "listed"])
def test_open_groups_reads_every_groups_indexes_in_one_batch(consolidated):
    memory = MemoryStore()
    _tree(15).zarrx.to_zarr(memory, mode="w", consolidated=consolidated)
    remote = RemoteLike(memory)
    store = MetricsStore(remote)
    groups = xr.open_groups(store, engine="zarrx", consolidated=consolidated)
    assert sorted(groups) == ["/", *sorted(f"/g{g}" for g in range(15))]
    indexes = [batch for batch in remote.batches if any("/c/" in key for key in batch)]
    if consolidated:
        # the root's document, then the 30 indexes in a single call
        assert store.summary().rounds == 2
        assert [len(batch) for batch in indexes] == [30]
    else:
        # each group's two indexes in one call, sent as soon as the group's documents are in
        assert store.summary().rounds <= LISTED_CHAIN
        assert sorted(sorted(batch) for batch in indexes) == [[f"g{g}/time/c/0", f"g{g}/x/c/0"] for g in sorted(
            range(15), key=lambda g: f"g{g}"
        )]  # fmt: skip


def test_an_open_reads_no_data_chunk_of_a_lazy_variable():
    tree = _tree(8)
    memory = MemoryStore()
    tree.zarrx.to_zarr(memory, mode="w", consolidated=False)
    remote = RemoteLike(memory)
    opened = xr.open_datatree(MetricsStore(remote), engine="zarrx", consolidated=False, chunks={})
    chunks = [key for key in remote.read if not key.endswith("zarr.json")]
    assert chunks and all(key.split("/")[1] in ("time", "x") for key in chunks), chunks
    assert len(chunks) == len(set(chunks)) == 8 * 2  # each index chunk once
    remote.read.clear()
    assert float(opened["g3"]["v1"].sum()) == pytest.approx(float(tree["g3"]["v1"].sum()))
    assert {key.split("/")[:2] == ["g3", "v1"] for key in remote.read} == {True}


def test_a_dataset_opens_in_two_rounds_when_consolidated():
    dataset = xr.Dataset(
        {f"v{k}": (("time", "lat"), np.zeros((3, 2))) for k in range(100)},
        coords={"time": np.arange(3), "lat": [1.0, 2.0], "lon": ("lon", [5.0]), "level": ("level", [1])},
    )
    memory = MemoryStore()
    dataset.zarrx.to_zarr(memory, mode="w")
    store = MetricsStore(RemoteLike(memory))
    opened = xr.open_dataset(store, engine="zarrx", chunks={})
    assert store.summary().rounds == 2
    xr.testing.assert_identical(opened.compute(), dataset)


def test_group_members_read_each_group_as_soon_as_it_is_found():
    store = _written(_tree(20, depth=2), consolidated=False)
    store.reset()
    root = zarrx.open_group(store, use_consolidated=False)  # its listing beside its document
    assert store.summary().rounds == 1
    members = root.members(max_depth=None)
    # at most: the root's children's documents, then per level a listing and the documents
    assert store.summary().rounds <= 1 + 1 + 2 * 2, str(store.summary())
    assert store.summary()["list_dir"].calls == 1 + 20 + 20  # the root's listing was used
    consolidated = zarrx.open_group(store.inner.inner, use_consolidated=None)
    assert [name for name, _ in members] == [name for name, _ in consolidated.members(max_depth=None)] != []
    store.reset()
    assert [name for name, _ in root.members(max_depth=1)][:3] == ["g0", "g0/inner", "g0/time"]
    assert store.summary().rounds <= 4 and store.summary()["list_dir"].calls == 1 + 20


def test_tree_text_reads_a_bounded_number_of_rounds(monkeypatch):
    # 40 listings sent side by side are one round only if each starts before the first ends:
    # listings of 0.3 s leave the thread starting them room for a stall of a loaded machine
    # (with 0.1 s, one full run in many counted a 7th round)
    monkeypatch.setattr(sys.modules[__name__], "LISTING_SECONDS", 0.3)
    rounds = {}
    for groups in (10, 40):
        store = _written(_tree(groups, depth=2), consolidated=False)
        group = zarrx.open_group(store, use_consolidated=False)
        store.reset()
        assert group.tree().count("inner") == groups
        rounds[groups] = store.summary().rounds
        store.reset()
        assert tree_text(group).count("inner") == groups  # what `zarrx tree` prints, bounded
        rounds[groups, "zarrx tree"] = store.summary().rounds
    # group.tree() reads each group as soon as it is found (the root's listing was made beside its
    # document): at most the root's children's documents, then a listing and the documents per
    # level; `zarrx tree` reads a level at a time within its budget: two rounds for each of three
    assert rounds[10] == rounds[40] <= 1 + 2 * 2, rounds
    assert rounds[10, "zarrx tree"] == rounds[40, "zarrx tree"] == 6, rounds


# -- writing ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("consolidated", [True, False], ids=["consolidated", "plain"])
def test_writing_a_tree_takes_the_same_rounds_for_10_and_40_groups(consolidated):
    rounds = {}
    for groups in (10, 40):
        tree = _tree(groups)
        memory = MemoryStore()
        store = MetricsStore(RemoteLike(memory))
        tree.zarrx.to_zarr(store, mode="w-", consolidated=consolidated)
        rounds[groups] = store.summary().rounds
        xr.testing.assert_identical(xr.open_datatree(memory, engine="zarrx", consolidated=consolidated), tree)
    # one listing (the target is empty), then data, node documents and (last) the consolidated copy
    assert rounds == ({10: 4, 40: 4} if consolidated else {10: 3, 40: 3})


def test_replacing_a_tree_takes_a_bounded_number_of_rounds():
    memory = MemoryStore()
    _tree(5).zarrx.to_zarr(memory, mode="w")
    store = MetricsStore(RemoteLike(memory))
    replacement = _tree(30)
    replacement["g0"] = xr.DataTree(xr.Dataset({"only": ("y", [1, 2])}))
    replacement.zarrx.to_zarr(store, mode="w")
    assert store.summary().rounds <= 6
    opened = xr.open_datatree(memory, engine="zarrx")
    xr.testing.assert_identical(opened, replacement)
    with pytest.raises(ContainsGroupError):
        replacement.zarrx.to_zarr(store, mode="w-")


class Recording(Wrapping):
    """Records the keys of every write call, in order."""

    def __init__(self, inner):
        super().__init__(inner)
        self.writes: list[list[str]] = []

    def set(self, key, value):
        self.writes.append([key])
        self.inner.set(key, value)

    def set_many(self, items):
        self.writes.append(list(items))
        self.inner.set_many(items)


def test_a_staged_write_sends_data_then_node_documents_then_the_consolidated_copy():
    store = Recording(MemoryStore())
    _tree(4).zarrx.to_zarr(store, mode="w", consolidated=True)
    data, documents, consolidated = store.writes
    assert data and not any(key.endswith("zarr.json") for key in data)
    assert all(key.endswith("zarr.json") for key in documents) and "zarr.json" not in documents
    assert consolidated == ["zarr.json"]  # the root's document, holding the consolidated metadata
    assert len(documents) == 4 * (1 + 5)  # each group's and its arrays' once


def test_dask_backed_data_is_written_after_the_staged_metadata():
    tree = _tree(3).chunk({"time": 3})
    memory = MemoryStore()
    store = MetricsStore(RemoteLike(memory))
    root = tree.zarrx.to_zarr(store, mode="w")
    assert root.store is store  # not the staging wrapper
    xr.testing.assert_identical(xr.open_datatree(memory, engine="zarrx").compute(), tree.compute())


def test_a_dataset_write_is_staged_too():
    store = MetricsStore(RemoteLike(MemoryStore()))
    dataset = xr.Dataset({f"v{k}": ("x", np.arange(3.0)) for k in range(50)}, coords={"x": [1, 2, 3]})
    dataset.zarrx.to_zarr(store, group="deep/er", mode="w-")
    # the store's listing, then data, node documents and the consolidated copy
    assert store.summary().rounds == 4
    # new groups beside it, of 5 and of 50 variables: the same rounds (reading the documents
    # above the target once, and the hierarchy for the consolidated metadata a level at a time)
    rounds = []
    for name, variables in (("est", 5), ("most", 50)):
        store.reset()
        dataset[[f"v{k}" for k in range(variables)]].zarrx.to_zarr(store, group=f"deep/{name}", mode="w-")
        rounds.append(store.summary().rounds)
    assert rounds[0] == rounds[1] < 20, rounds
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for group, variables in (("deep/er", 50), ("deep/est", 5), ("deep/most", 50)):
            opened = xr.open_dataset(store.inner.inner, group=group, engine="zarrx")
            xr.testing.assert_identical(opened, dataset[[f"v{k}" for k in range(variables)]])


# -- the pieces --------------------------------------------------------------------------------------
def test_a_staged_store_answers_reads_under_an_empty_prefix_without_requests():
    inner = MetricsStore(MemoryStore({"elsewhere/zarr.json": b"{}"}))
    store = StagedStore(inner, empty=["new/"])
    store.set("new/a/c/0", b"chunk")
    assert store.get("new/a/c/0") == b"chunk" and store.get("new/b/zarr.json") is None
    assert store.get_many(["new/a/c/0", "new/x"]) == {"new/a/c/0": b"chunk", "new/x": None}
    assert store.list_dir("new/") == ["a"] and list(store.list_prefix("new/")) == ["new/a/c/0"]
    assert inner.summary().calls == 0
    assert store.get("elsewhere/zarr.json") == b"{}"  # outside: from the store
    assert inner.get("new/a/c/0") is None  # nothing sent yet
    store.delete("new/a/c/0")
    assert store.get("new/a/c/0") is None and inner.summary()["delete_many"].calls == 0
    store.delete_prefix("elsewhere/")  # passed on at once, and known empty from then on
    assert inner.get("elsewhere/zarr.json") is None
    inner.reset()
    assert store.exists("elsewhere/zarr.json") is False and inner.summary().calls == 0


def test_a_staged_store_passes_everything_through_after_the_flush():
    inner = MemoryStore()
    with staged_writes(inner) as store:
        store.set("a/c/0", b"1")
    assert inner.get("a/c/0") == b"1"
    store.set("a/c/1", b"2")
    assert inner.get("a/c/1") == b"2"
    copy = pickle.loads(pickle.dumps(store))  # a dask worker writes straight to the store
    assert type(copy) is MemoryStore and copy.get("a/c/1") == b"2"


def test_metrics_count_overlapping_calls_as_one_round():
    store = MetricsStore(RemoteLike(MemoryStore({"a/b": b"1"})))
    threads = [threading.Thread(target=store.list_dir, args=("a/",)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    summary = store.summary()
    assert summary.rounds == 1 and summary["list_dir"].calls == 8
    assert LISTING_SECONDS <= summary.busy_seconds < 6 * LISTING_SECONDS  # waited once, not eight times
    store.list_dir("a/")
    store.get("a/b")
    assert store.summary().rounds == 3
