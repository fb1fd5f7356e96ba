"""Consolidated metadata stays true when members change (mirrors ``zarrx/nodes/consolidated.py``).

Every write that changes a member's metadata -- append, resize, attributes, new, overwritten and
deleted members -- made through any node (opened through its group or directly by its path),
updates every consolidated copy above it, for Zarr v3 (inline ``consolidated_metadata``) and v2
(``.zmetadata``); readers of the consolidated document (zarrx, zarr-python, xarray) see the change
on reopen, and ``verify`` finds the copies another writer left stale.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import xarray as xr
import zarr

import zarrx
import zarrx.xarray  # noqa: F401 (ds.zarrx, engine="zarrx")
from zarrx.errors import StoreError
from zarrx.nodes.consolidated import batched_updates
from zarrx.storage import LocalStore, MemoryStore, MetricsStore, WrapperStore
from zarrx.testing import FaultyStore

FORMATS = [3, 2]


@pytest.fixture(params=["local", "memory"])
def store(request, tmp_path):
    return LocalStore(tmp_path / "store") if request.param == "local" else MemoryStore()


def build(store, zarr_format: int) -> None:
    """A consolidated hierarchy: /x (1-d), /g/y (2-d), /g/h (group); consolidated at the root."""
    root = zarrx.create_group(store, zarr_format=zarr_format, attributes={"title": "t"})
    root.create_array("x", shape=(4,), chunks=(2,), dtype="int16", fill_value=0)[:] = [1, 2, 3, 4]
    root.create_array("g/y", shape=(2, 3), chunks=(1, 3), dtype="float32", fill_value=0)[:] = 1
    root.create_group("g/h", attributes={"level": 2})
    zarrx.consolidate_metadata(store)


def reopened(store, path: str = ""):
    """The group at ``path`` as a reader sees it: from its consolidated metadata (asserted)."""
    group = zarrx.open_group(store, path, mode="r")
    assert group.is_consolidated
    return group


def assert_true(store, path: str = "") -> None:
    """The consolidated metadata agrees with every member's own documents."""
    report = zarrx.verify(store, path)
    assert report.stale_consolidated == [] and report.ok, str(report)


# -- every kind of metadata change, through a node opened by its path -------------------------------
@pytest.mark.parametrize("zarr_format", FORMATS)
def test_an_append_through_an_array_opened_by_path_is_visible_on_reopen(store, zarr_format):
    build(store, zarr_format)
    zarrx.open_array(store, "x", mode="r+").append(np.array([5, 6], dtype="int16"))
    x = reopened(store)["x"]
    assert x.shape == (6,)
    np.testing.assert_array_equal(x[:], [1, 2, 3, 4, 5, 6])
    zarrx.open_array(store, "g/y", mode="a").append(np.full((1, 3), 7, dtype="float32"))
    assert reopened(store)["g/y"].shape == (3, 3)
    assert_true(store)


@pytest.mark.parametrize("zarr_format", FORMATS)
def test_a_resize_and_attribute_updates_are_visible_on_reopen(store, zarr_format):
    build(store, zarr_format)
    x = zarrx.open_array(store, "x", mode="r+")
    x.resize(3)
    x.attrs["units"] = "m"
    zarrx.open_group(store, "g/h", mode="r+").attrs.update({"level": 3, "new": True})
    root = zarrx.open_group(store, mode="r+")
    root["g/y"].resize(1, 3)
    root.attrs["title"] = "changed"  # the root's own document: its consolidated metadata stays current
    reader = reopened(store)
    assert reader["x"].shape == (3,) and reader["x"].attrs.asdict() == {"units": "m"}
    assert reader["g/h"].attrs.asdict() == {"level": 3, "new": True}
    assert reader["g/y"].shape == (1, 3) and reader.attrs["title"] == "changed"
    assert_true(store)


@pytest.mark.parametrize("zarr_format", FORMATS)
def test_new_overwritten_and_deleted_members_are_visible_on_reopen(store, zarr_format):
    build(store, zarr_format)
    zarrx.create_array(store, "p/q/new", shape=(2,), dtype="int8", zarr_format=zarr_format)  # with new parents
    root = zarrx.open_group(store, mode="r+")
    root.create_group("g/h", overwrite=True, attributes={"replaced": 1})
    root.create_array("g/h/inner", shape=(1,), dtype="int8")
    del root["x"]
    root.create_group("g", overwrite=True)  # replaces y and h with everything below them
    root.create_array("g/z", shape=(5,), dtype="uint8")
    reader = reopened(store)
    assert sorted(path for path, _ in reader.members(max_depth=None)) == ["g", "g/z", "p", "p/q", "p/q/new"]
    assert reader["g/z"].shape == (5,) and "x" not in reader
    assert_true(store)


def test_every_consolidated_group_above_a_change_is_updated(store):
    build(store, 3)
    zarrx.consolidate_metadata(store, "g")  # g holds its own copies too
    zarrx.open_array(store, "g/y", mode="r+").append(np.zeros((2, 3), dtype="float32"))
    zarrx.create_group(store, "g/late")
    assert reopened(store)["g/y"].shape == (4, 3) and reopened(store, "g")["y"].shape == (4, 3)
    assert "late" in reopened(store, "g") and "g/late" in reopened(store)
    assert_true(store)


@pytest.mark.parametrize("zarr_format", FORMATS)
def test_zarr_python_reads_the_updated_consolidated_metadata(tmp_path, zarr_format):
    path = str(tmp_path / "store")
    build(path, zarr_format)
    zarrx.open_array(path, "x", mode="r+").append(np.array([5], dtype="int16"))
    zarrx.open_group(path, mode="r+").create_array("added", shape=(2, 2), dtype="int8", attributes={"a": 1})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr-python warns that consolidated metadata is not in the v3 spec
        theirs = zarr.open_consolidated(path, mode="r", zarr_format=zarr_format)
    assert theirs["x"].shape == (5,) and theirs["added"].attrs.asdict() == {"a": 1}
    np.testing.assert_array_equal(theirs["x"][:], [1, 2, 3, 4, 5])


@pytest.mark.parametrize("zarr_format", FORMATS)
def test_zarrx_keeps_a_hierarchy_zarr_python_consolidated_true(tmp_path, zarr_format):
    path = str(tmp_path / "store")
    root = zarr.open_group(path, mode="w", zarr_format=zarr_format)
    root.create_array("t", shape=(3,), chunks=(3,), dtype="int32", fill_value=0)[:] = [1, 2, 3]
    root.create_group("sub").attrs["kept"] = True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zarr.consolidate_metadata(path, zarr_format=zarr_format)
    zarrx.open_array(path, "t", mode="r+").append(np.array([4], dtype="int32"))
    assert reopened(path)["t"].shape == (4,) and reopened(path)["sub"].attrs["kept"] is True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert zarr.open_consolidated(path, mode="r", zarr_format=zarr_format)["t"].shape == (4,)
    assert_true(path)


def test_threads_appending_to_different_arrays_lose_no_update(store):
    """Each append rewrites the root's consolidated document: within a process those
    read-modify-writes are serialized, so none is lost."""
    from concurrent.futures import ThreadPoolExecutor

    root = zarrx.create_group(store)
    for i in range(8):
        root.create_array(f"v{i}", shape=(0, 4), chunks=(1, 4), dtype="int16")
    zarrx.consolidate_metadata(store)

    def append_rows(i: int) -> None:
        array = zarrx.open_array(store, f"v{i}", mode="r+")
        for _ in range(i + 3):
            array.append(np.full((1, 4), i, dtype="int16"))

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(append_rows, range(8)))
    reader = reopened(store)
    assert [reader[f"v{i}"].shape for i in range(8)] == [(i + 3, 4) for i in range(8)]
    assert_true(store)


class DocumentWrites(WrapperStore):
    """Counts the writes of each consolidated document (``zarr.json``, ``.zmetadata``) by key."""

    def __init__(self, inner) -> None:
        super().__init__(inner)
        self.writes: dict[str, int] = {}

    def _count(self, keys) -> None:
        for key in keys:
            if key.endswith(("zarr.json", ".zmetadata")):
                self.writes[key] = self.writes.get(key, 0) + 1

    def set(self, key, value):
        self._count([key])
        super().set(key, value)

    def set_many(self, items):
        self._count(items)
        super().set_many(items)


@pytest.mark.parametrize("zarr_format", FORMATS)
def test_a_batch_rewrites_each_consolidated_document_once(store, zarr_format):
    """Appending to each of 30 arrays would rewrite the root's consolidated document 30 times;
    inside batched_updates it is rewritten once, at the end."""
    root = zarrx.create_group(store, zarr_format=zarr_format)
    for i in range(30):
        root.create_array(f"v{i}", shape=(1,), dtype="int8")
    zarrx.consolidate_metadata(store)
    counted = DocumentWrites(store)
    document = "zarr.json" if zarr_format == 3 else ".zmetadata"
    with batched_updates(counted):
        for i in range(30):
            zarrx.open_array(counted, f"v{i}", mode="r+").append(np.array([i], dtype="int8"))
        assert counted.writes.get(document, 0) == 0  # stale inside the block
    assert counted.writes[document] == 1
    assert [reopened(store)[f"v{i}"].shape for i in range(30)] == [(2,)] * 30
    assert_true(store)


def test_the_xarray_writer_rewrites_the_consolidated_document_a_few_times_not_once_per_variable(store):
    variables = {f"v{i}": (("time",), np.zeros(2)) for i in range(40)}
    xr.Dataset(variables, coords={"time": [0, 1]}).zarrx.to_zarr(store)
    counted = DocumentWrites(store)
    xr.Dataset(variables, coords={"time": [2, 3]}).zarrx.to_zarr(counted, append_dim="time")
    # the group's own attributes, the batch's update, the writer's own consolidation: not 40 more
    assert counted.writes["zarr.json"] <= 3
    assert reopened(store)["v39"].shape == (4,)
    assert_true(store)


# -- the xarray writer ------------------------------------------------------------------------------
def dataset(start: int, stop: int) -> xr.Dataset:
    return xr.Dataset({"t": (("time",), np.arange(start, stop, dtype="float64"))}, coords={"time": np.arange(start, stop)})


@pytest.mark.parametrize("consolidated", [True, False, None])
def test_the_xarray_writer_leaves_consistent_consolidated_metadata_after_append(tmp_path, consolidated):
    """Also where the consolidated metadata is the group's own, which the writer does not refresh
    itself (it consolidates the root): before, appending with consolidated=False left it stale."""
    path = tmp_path / "store"
    dataset(0, 3).zarrx.to_zarr(path, group="g", consolidated=False)
    zarrx.consolidate_metadata(path, "g")
    dataset(3, 5).zarrx.to_zarr(path, group="g", append_dim="time", consolidated=consolidated)
    assert reopened(path, "g")["t"].shape == (5,) and reopened(path, "g")["time"].shape == (5,)
    for engine, use_consolidated in (("zarrx", True), ("zarr", None)):
        opened = xr.open_dataset(path, group="g", engine=engine, consolidated=use_consolidated)
        assert opened.sizes["time"] == 5, engine
        np.testing.assert_array_equal(opened["t"].values, np.arange(5.0))
    assert_true(path)


# -- costs and failures -----------------------------------------------------------------------------
def test_a_metadata_write_costs_one_batched_read_and_creation_none(store):
    """A hierarchy without consolidated metadata pays one batched read of the ancestors' small
    documents per metadata write (none for chunk writes, none more for creation)."""
    zarrx.create_array(store, "a/b/x", shape=(4,), chunks=(2,), dtype="int8")
    metrics = MetricsStore(store)
    x = zarrx.open_array(metrics, "a/b/x", mode="r+")
    metrics.reset()
    x[:] = 1
    assert metrics.summary()["get_many"].calls == 0 and metrics.summary()["get"].calls == 0
    metrics.reset()
    x.attrs["units"] = "m"
    summary = metrics.summary()
    assert (summary["get_many"].calls, summary["get_many"].requests, summary["get"].calls) == (1, 4, 0)
    # one batch reading the three ancestors' zarr.json and x's own (the attributes stored now), the write of x's
    assert summary.calls == 2
    metrics.reset()
    zarrx.create_array(metrics, "a/b/new", shape=(1,), dtype="int8")
    summary = metrics.summary()
    # what is at the path (v3, then a batch for v2), then the parents, whose documents serve the
    # update too: the same requests as before consolidated metadata was kept true
    assert (summary["get"].calls, summary["get_many"].calls, summary["set"].calls, summary["set_many"].calls) == (1, 2, 1, 0)


def test_a_failed_update_of_the_consolidated_metadata_changes_nothing_and_a_rerun_completes_it(store):
    build(store, 3)
    faulty = FaultyStore(store, fail_set=lambda key: key == "zarr.json")
    with pytest.raises(StoreError, match=r"'/x' was not changed.*consolidated metadata of '/' could not be updated"):
        zarrx.open_array(faulty, "x", mode="r+").append(np.array([5], dtype="int16"))
    # the copies are written before the array's own document: neither shows the append
    assert zarrx.open_array(store, "x").shape == zarrx.open_group(store)["x"].shape == (4,)
    report = zarrx.verify(store)  # only the new chunk is there, past the shape: an unfinished append
    assert not report.ok and report.stale_consolidated == [] and [p.key for p in report.past_edge] == ["x/c/2"]
    # an attribute of a group whose own copy fails: nothing changed, nothing stale
    with pytest.raises(StoreError, match=r"'/g' was not changed"):
        zarrx.open_group(faulty, "g", mode="r+").attrs["a"] = 1
    assert "a" not in zarrx.open_group(store, "g").attrs and zarrx.verify(store).stale_consolidated == []
    # running the append again completes it
    zarrx.open_array(store, "x", mode="r+").append(np.array([5], dtype="int16"))
    assert zarrx.open_array(store, "x").shape == zarrx.open_group(store)["x"].shape == (5,)
    assert_true(store)


def test_edits_keep_what_the_consolidated_document_holds_besides(store):
    build(store, 3)
    document = json.loads(store.get("zarr.json"))
    document["consolidated_metadata"]["metadata"]["x"]["attributes"] = {}
    document["extension_field"] = {"name": "other", "must_understand": False}
    store.set("zarr.json", json.dumps(document).encode())
    zarrx.open_array(store, "x", mode="r+").attrs["a"] = 1
    after = json.loads(store.get("zarr.json"))
    assert after["extension_field"] == {"name": "other", "must_understand": False}
    assert after["consolidated_metadata"]["metadata"]["x"]["attributes"] == {"a": 1}
    assert after["consolidated_metadata"]["metadata"]["g/y"] == document["consolidated_metadata"]["metadata"]["g/y"]


def test_a_shrink_shows_its_shape_in_every_copy_before_deleting_chunks_also_inside_a_batch(store):
    build(store, 3)
    seen = []

    class Watching(WrapperStore):
        def delete_many(self, keys):  # what a reader of the copy sees when the chunks go
            seen.append((sorted(keys), zarrx.open_group(self.inner)["x"].shape, zarrx.open_array(self.inner, "x").shape))
            super().delete_many(keys)

    with batched_updates(store):
        zarrx.open_array(Watching(store), "x", mode="r+").resize(1)
    assert seen == [(["x/c/1"], (1,), (1,))]
    assert zarrx.open_group(store)["x"][:].tolist() == [1]
    assert_true(store)
