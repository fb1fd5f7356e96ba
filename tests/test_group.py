"""Groups and hierarchy operations: modes, members, tree, deletion, consolidated metadata."""

import json

import numpy as np
import pytest

import zarrx
from zarrx.errors import (
    ContainsArrayError,
    ContainsGroupError,
    InvalidPathError,
    NodeNotFoundError,
    ReadOnlyError,
)
from zarrx.storage import MemoryStore, make_store


@pytest.fixture
def store():
    return MemoryStore()


def build(store):
    root = zarrx.create_group(store, attributes={"title": "t"})
    root.create_array("a", shape=(4,), dtype="int8")
    weather = root.create_group("weather")
    weather.create_array("t2m", shape=(3, 4), chunks=(3, 2), dtype="float32")
    root.create_array("deep/er/x", shape=(2,), dtype="int64")
    return root


def test_members_arrays_groups_and_iteration(store):
    root = build(store)
    assert sorted(root) == ["a", "deep", "weather"]
    assert "weather/t2m" in root and "nope" not in root
    assert [name for name, _ in root.arrays()] == ["a"]
    assert sorted(name for name, _ in root.groups()) == ["deep", "weather"]
    deep = dict(root.members(max_depth=None))
    assert set(deep) == {"a", "deep", "deep/er", "deep/er/x", "weather", "weather/t2m"}
    assert isinstance(root["deep/er"], zarrx.Group)
    assert root["weather/t2m"].shape == (3, 4)
    assert root["weather"]["t2m"].path == "weather/t2m"


def test_tree(store):
    text = build(store).tree()
    assert text.splitlines()[0] == "/"
    assert "t2m (3, 4) float32" in text
    assert "└── x (2,) int64" in text


def test_modes(store):
    with pytest.raises(NodeNotFoundError):
        zarrx.open_group(store, mode="r")
    with pytest.raises(NodeNotFoundError):
        zarrx.open_group(store, mode="r+")
    group = zarrx.open_group(store, mode="a", attributes={"x": 1})
    assert zarrx.open_group(store, mode="a").attrs["x"] == 1
    with pytest.raises(ContainsGroupError):
        zarrx.open_group(store, mode="w-")
    group.create_array("arr", shape=(1,), dtype="int8")
    fresh = zarrx.open_group(store, mode="w")
    assert list(fresh) == [] and fresh.attrs.asdict() == {}
    assert list(store.list_prefix("")) == ["zarr.json"]
    read_only = zarrx.open_group(store, mode="r")
    with pytest.raises(ReadOnlyError):
        read_only.create_group("x")
    with pytest.raises(ReadOnlyError):
        read_only.attrs["a"] = 1
    with pytest.raises(zarrx.errors.ZarrxError, match="mode"):
        zarrx.open_group(store, mode="q")


def test_node_type_conflicts(store):
    root = build(store)
    with pytest.raises(ContainsArrayError):
        zarrx.open_group(store, "a", mode="r")
    with pytest.raises(ContainsGroupError):
        zarrx.open_array(store, "weather")
    with pytest.raises(ContainsArrayError):
        root.create_array("a/child", shape=(1,), dtype="int8")
    with pytest.raises(ContainsArrayError):
        root.create_array("a", shape=(1,), dtype="int8")
    root.create_array("a", shape=(9,), dtype="int8", overwrite=True)
    assert root["a"].shape == (9,)


def test_deletion_removes_node_and_chunks(store):
    root = build(store)
    root["weather/t2m"][...] = 1
    del root["weather"]
    assert "weather" not in root
    assert not any(k.startswith("weather/") for k in store.list_prefix(""))
    with pytest.raises(NodeNotFoundError):
        del root["weather"]


@pytest.mark.parametrize("name", ["..", "a/../../b", "/", "__zarr", "zarr.json", "a//b", "."])
def test_hostile_names_are_refused(store, name):
    root = zarrx.create_group(store)
    with pytest.raises(InvalidPathError):
        root.create_array(name, shape=(1,), dtype="int8")
    assert list(store.list_prefix("")) == ["zarr.json"]


def test_consolidated_open_reads_one_key(store):
    build(store)
    zarrx.consolidate_metadata(store)
    document = json.loads(store.get("zarr.json"))
    assert set(document["consolidated_metadata"]["metadata"]) == {"a", "deep", "deep/er", "deep/er/x", "weather", "weather/t2m"}

    class Counting(MemoryStore):
        reads = []

        def get(self, key, byte_range=None):
            self.reads.append(key)
            return super().get(key, byte_range)

        def get_many(self, keys):
            self.reads.extend(keys)
            return super().get_many(keys)

        def list_dir(self, prefix):
            raise AssertionError("a consolidated hierarchy is not listed")

    counting = Counting(dict(store._data) if hasattr(store, "_data") else {k: store.get(k) for k in store.list_prefix("")})
    root = zarrx.open_group(counting, mode="r")
    tree = root.tree()
    assert "t2m (3, 4) float32" in tree
    assert root["weather/t2m"].chunks == (3, 2)
    assert Counting.reads == ["zarr.json"]


def test_use_consolidated_false_lists_live(store):
    root = build(store)
    zarrx.consolidate_metadata(store)
    # another writer adds a node without updating the consolidated metadata (zarrx's own writes
    # update it: tests/test_consolidated.py)
    document = zarrx.create_array({}, shape=(1,), dtype="int8").metadata.to_bytes()
    store.set("later/zarr.json", document)
    assert "later" not in zarrx.open_group(store, mode="r")
    assert "later" in zarrx.open_group(store, mode="r", use_consolidated=False)


def test_setitem_writes_an_array(store):
    root = zarrx.create_group(store)
    root["data"] = np.arange(6).reshape(2, 3)
    np.testing.assert_array_equal(root["data"][...], np.arange(6).reshape(2, 3))


def test_open_dispatches_on_node_type(store):
    build(store)
    assert isinstance(zarrx.open(store), zarrx.Group)
    assert isinstance(zarrx.open(store, "a"), zarrx.Array)
    with pytest.raises(NodeNotFoundError, match="nothing"):
        zarrx.open(store, "nothing")


def test_local_directory_layout(tmp_path):
    root = zarrx.open_group(str(tmp_path / "data.zarr"), mode="w")
    array = root.create_array("x", shape=(4,), chunks=(2,), dtype="int8", compressors=None)
    array[...] = [1, 2, 3, 4]
    assert (tmp_path / "data.zarr" / "x" / "c" / "1").read_bytes() == bytes([3, 4])
    assert json.loads((tmp_path / "data.zarr" / "zarr.json").read_text())["node_type"] == "group"
    np.testing.assert_array_equal(zarrx.open_array(f"file://{tmp_path}/data.zarr", "x")[...], [1, 2, 3, 4])


def test_a_read_only_store_is_named_as_the_reason_a_write_is_refused(tmp_path):
    zarrx.create_group(str(tmp_path / "x.zarr")).create_array("a", shape=(2,), dtype="int8")
    store = make_store(str(tmp_path / "x.zarr"))  # mode "r" by default
    group = zarrx.open_group(store, mode="r+")
    for write in (lambda: group["a"].__setitem__(0, 1), lambda: group.create_array("y", shape=(1,), dtype="int8")):
        with pytest.raises(ReadOnlyError, match="its store .* is read-only .*mode='r\\+'"):
            write()
    with pytest.raises(ReadOnlyError, match="was opened read-only"):
        zarrx.open_array(str(tmp_path / "x.zarr"), "a", mode="r")[0] = 1
