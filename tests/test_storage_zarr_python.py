"""zarr-python's stores as zarrx stores (:class:`zarrx.storage.ZarrPythonStore`): the store
conformance suite on zarr-python's MemoryStore, and arrays shared both ways.

(zarr-python's LocalStore keeps a folder listed after its last key is deleted and cannot hold a
key that is also a prefix, as a file system cannot; the suite asks for neither of those of the
stores zarrx makes, so it runs on the MemoryStore, and the LocalStore is tested with arrays.)"""

from __future__ import annotations

import numpy as np
import pytest
import zarr

import zarrx
from zarrx.errors import StoreTypeError
from zarrx.storage import LocalStore, ZarrPythonStore, make_store
from zarrx.storage.zarr_python import zarr_python_array_location

from tests.test_storage import StoreSuite


class TestZarrPythonMemoryStore(StoreSuite):
    pickle_shares_data = False

    @pytest.fixture
    def location(self):
        return {}

    def open_store(self, location, read_only=False):
        return ZarrPythonStore(zarr.storage.MemoryStore(location), read_only=read_only)


def test_a_zarr_python_local_store_round_trips_a_dataset(tmp_path):
    import xarray as xr

    import zarrx.xarray  # noqa: F401  (the accessor)

    ds = xr.Dataset({"t": (("x", "y"), np.arange(12.0).reshape(3, 4))}, coords={"x": [1, 2, 3]})
    store = zarr.storage.LocalStore(tmp_path / "d.zarr")
    ds.zarrx.to_zarr(store, mode="w")
    xr.testing.assert_identical(xr.open_dataset(store, engine="zarrx"), ds)
    xr.testing.assert_identical(xr.open_dataset(tmp_path / "d.zarr", engine="zarr"), ds)


def test_make_store_takes_a_zarr_python_store_and_respects_read_only(tmp_path):
    peer = zarr.storage.MemoryStore({})
    assert isinstance(make_store(peer, mode="a"), ZarrPythonStore)
    assert make_store(peer, mode="r").read_only
    assert make_store(zarr.storage.MemoryStore({}, read_only=True), mode="a").read_only


def test_zarr_python_stores_of_a_local_folder_are_that_folder(tmp_path):
    # written atomically and locked against other processes as a path is (tests/test_partial_write_processes.py)
    import obstore.store

    stores = [zarr.storage.LocalStore(tmp_path / "s"), zarr.storage.FsspecStore.from_url(f"file://{tmp_path}/s"),
              zarr.storage.ObjectStore(obstore.store.LocalStore(tmp_path / "s", mkdir=True))]  # fmt: skip
    for peer in stores:
        assert make_store(peer, mode="a") == LocalStore(tmp_path / "s"), peer
        assert make_store(peer, mode="r").read_only
    assert make_store(zarr.storage.LocalStore(tmp_path / "s", read_only=True), mode="a").read_only

    class Logged(zarr.storage.LocalStore):  # a subclass may do more than its files: it stays itself
        pass

    assert isinstance(make_store(Logged(tmp_path / "s"), mode="a"), ZarrPythonStore)


def test_zarr_pythons_object_and_fsspec_stores_are_zarrxs_stores_of_the_same_objects():
    # with zarrx's conditional partial writes (tests/test_partial_write_processes.py)
    import obstore.store

    from zarrx.storage import FsspecStore, ObstoreStore

    memory = obstore.store.MemoryStore()
    ours = make_store(zarr.storage.ObjectStore(memory), mode="a")
    assert isinstance(ours, ObstoreStore) and ours.obstore is memory and not ours.read_only
    assert make_store(zarr.storage.ObjectStore(memory, read_only=True), mode="a").read_only
    s3 = zarr.storage.FsspecStore.from_url("s3://bucket/x.zarr", storage_options={"anon": True})
    ours = make_store(s3, mode="a")
    assert isinstance(ours, FsspecStore) and ours.root == "bucket/x.zarr"
    assert not ours.fs.asynchronous and ours.fs.storage_options.get("anon") is True  # made again, not zarr-python's
    assert make_store(zarr.storage.FsspecStore.from_url("https://example.org/x.zarr"), mode="a").read_only
    references = zarr.storage.FsspecStore.from_url("reference://", storage_options={"fo": {"version": 1, "refs": {}}})
    assert isinstance(make_store(references), ZarrPythonStore)


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_arrays_in_a_zarr_python_store_are_shared_both_ways(zarr_format):
    peer = zarr.zeros((6, 4), chunks=(2, 2), dtype="int32", zarr_format=zarr_format)
    peer[:2] = 7
    store, path = zarr_python_array_location(peer)
    ours = zarrx.open_array(store, path, mode="r+")
    np.testing.assert_array_equal(ours[:], peer[:])
    ours[4:, 2:] = np.arange(4).reshape(2, 2)
    np.testing.assert_array_equal(peer[4:, 2:], [[0, 1], [2, 3]])
    group = zarrx.open_group(zarr.storage.MemoryStore({}), mode="w", zarr_format=zarr_format)
    group.create_array("a", shape=(3,), dtype="float64", chunks=(2,))[:] = [1.0, 2.0, 3.0]
    np.testing.assert_array_equal(zarr.open_array(group.store._store, path="a")[:], [1.0, 2.0, 3.0])


def test_anything_else_is_not_taken_for_a_zarr_python_object():
    assert zarr_python_array_location(np.zeros(3)) is None
    assert zarr_python_array_location(zarrx.create_array({}, shape=(2,), dtype="i1")) is None


def test_a_zarr_python_array_or_group_given_as_a_store_is_refused_naming_its_store_and_path(tmp_path):
    # zarr-python refuses them too ("Unsupported type for store_like"); zarrx says what to pass instead
    group = zarr.open_group(tmp_path / "g.zarr", mode="w")
    array = group.create_array("a", shape=(2,), dtype="i1")
    for node, path in ((array, "'a'"), (group, "''")):
        with pytest.raises(StoreTypeError, match=rf"of this zarr-python node: its store, .*, with path={path}"):
            zarrx.open(node)
