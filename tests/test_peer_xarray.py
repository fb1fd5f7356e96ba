"""xarray's own zarr test classes, run against ``engine="zarrx"`` and ``ds.zarrx.to_zarr``.

The classes come from the installed xarray (``xarray.tests.test_backends``) and are subclassed
the way xarray runs them once per store kind: only ``create_zarr_target`` (where the data
lives) and ``create_store`` (the writable data store of ``dump_to_store``) change. The adapter
of :mod:`tests.peer_adapters` routes the tests' ``ds.to_zarr`` and ``engine="zarr"`` to zarrx
while each test runs.

Intentional differences (``docs/user-guide/xarray-differences.md``) are listed in
:data:`DIFFERENCES` and marked ``xfail(strict=True)``: each must keep failing for its stated
reason, so the list can only shrink.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from unittest.mock import patch

import fsspec
import numpy as np
import pytest
import xarray as xr
import xarray.testing as xrt
from xarray.tests import create_test_data
from xarray.tests import test_backends as xarray_backends

# xarray's fixtures, used by the inherited tests
from xarray.tests.conftest import time_unit, use_dask  # noqa: F401
from xarray.tests.test_backends import default_zarr_format, tmp_store  # noqa: F401

from tests.counting import CountingStore
from tests.peer_adapters import route_xarray_to_zarrx, with_default_format
from zarrx.storage import LocalStore
from zarrx.xarray import ZarrxBackendArray, ZarrxWritableDataStore
from zarrx.xarray.backend import METADATA_NAMES

#: test (name, or name with parameters) -> why zarrx differs from engine="zarr" on purpose
#: (docs/user-guide/xarray-differences.md), or why it fails until another issue lands
DIFFERENCES: dict[str, str] = {
    **dict.fromkeys(
        [f"test_zarr_fill_value_setting[2-{kind}]" for kind in ("int", "float")],
        "zarrx honours use_zarr_fill_value_as_mask=False in open_dataset; engine='zarr' ignores it there, "
        "so xarray's test expects the Zarr v2 fill_value as _FillValue although it asks for no mask",
    ),
}


@pytest.fixture(autouse=True)
def _zarrx_is_the_zarr_engine(monkeypatch):
    route_xarray_to_zarrx(monkeypatch)


class ZarrxStores:
    """What a zarrx subclass of xarray's ``ZarrBase`` changes: the writable store of ``create_store``."""

    @contextlib.contextmanager
    def create_store(self, cache_members: bool = False):
        with self.create_zarr_target() as store_target:
            yield ZarrxWritableDataStore.open_group(
                store_target, mode="w", cache_members=cache_members, **with_default_format(dict(self.version_kwargs))
            )


class TestZarrxMemoryStore(ZarrxStores, xarray_backends.TestZarrDictStore):
    """xarray's in-memory store class; the memory is fsspec's, which zarr-python reads too."""

    @contextlib.contextmanager
    def create_zarr_target(self):
        url = f"memory://xarray-peer-{uuid.uuid4().hex}.zarr"
        try:
            yield url
        finally:
            fs = fsspec.filesystem("memory")
            if fs.exists(url):
                fs.rm(url, recursive=True)


class TestZarrxDirectoryStore(ZarrxStores, xarray_backends.TestZarrDirectoryStore):
    pass


class TestZarrxWriteEmpty(ZarrxStores, xarray_backends.TestZarrWriteEmpty):
    pass


class TestZarrxDataArrayToZarr(xarray_backends.TestDataArrayToZarr):
    pass


class TestZarrxRegionAuto(xarray_backends.TestZarrRegionAuto):
    pass


# xarray's module-level zarr tests
test_open_dataset_chunking_zarr = xarray_backends.test_open_dataset_chunking_zarr
test_zarr_entrypoint = xarray_backends.test_zarr_entrypoint
test_zarr_create_default_indexes = xarray_backends.test_zarr_create_default_indexes
test_raises_key_error_on_invalid_zarr_store = xarray_backends.test_raises_key_error_on_invalid_zarr_store


# -- xarray's tests of its own internals, and zarrx's equivalents ---------------------------------
#: tests that patch zarr-python's classes (``zarr.AsyncArray.getitem``, ``zarr.AsyncGroup.getitem``)
#: or test xarray's own ``ZarrStore`` to count what xarray's engine asks zarr-python for; zarrx
#: never calls those, so they are deselected and the tests below check the same for zarrx
NOT_APPLICABLE: dict[str, str] = {
    "test_async_load_multiple_variables": "counts calls of zarr.AsyncArray.getitem",
    "test_concurrent_load_multiple_objects": "counts calls of zarr.AsyncArray.getitem",
    "test_indexing": "counts calls of zarr.AsyncArray/AsyncOIndex/AsyncVIndex.getitem",
    "test_avoid_excess_metadata_calls": "counts calls of zarr.AsyncGroup.getitem",
    "test_cache_members": "tests xarray.backends.ZarrStore itself, over zarr-python",
}


@pytest.fixture
def memory_url():
    url = f"memory://xarray-peer-{uuid.uuid4().hex}.zarr"
    yield url
    fs = fsspec.filesystem("memory")
    if fs.exists(url):
        fs.rm(url, recursive=True)


def _lazy(url, cls_name):
    ds = xr.open_dataset(url, engine="zarrx", consolidated=False)
    return {"Variable": lambda: ds["var1"].variable, "DataArray": lambda: ds["var1"], "Dataset": lambda: ds}[cls_name]()


def _count_async_reads():
    return patch.object(
        ZarrxBackendArray, "async_getitem", side_effect=ZarrxBackendArray.async_getitem, autospec=True
    )


@pytest.mark.asyncio
async def test_async_load_multiple_variables_reads_each_lazy_variable_once(memory_url):
    """zarrx's test_async_load_multiple_variables: load_async awaits the backend's async read per lazy variable."""
    create_test_data().zarrx.to_zarr(memory_url, consolidated=False)
    with _count_async_reads() as reads:
        ds = xr.open_dataset(memory_url, engine="zarrx", consolidated=False)
        result = await ds.load_async()
        assert reads.call_count == 4  # var1, var2, var3, time (dimension coordinates are loaded eagerly)
        reads.assert_awaited()
    xrt.assert_identical(result, ds.load())


@pytest.mark.asyncio
@pytest.mark.parametrize(("cls_name", "lazy_variables"), [("Variable", 1), ("DataArray", 1), ("Dataset", 4)])
async def test_concurrent_load_async_of_many_objects(memory_url, cls_name, lazy_variables):
    """zarrx's test_concurrent_load_multiple_objects: every gathered load reads for itself."""
    create_test_data().zarrx.to_zarr(memory_url, consolidated=False)
    with _count_async_reads() as reads:
        obj = _lazy(memory_url, cls_name)
        results = await asyncio.gather(*(obj.load_async() for _ in range(5)))
        assert reads.call_count == 5 * lazy_variables
        reads.assert_awaited()
    for result in results:
        xrt.assert_identical(result, obj.load())


@pytest.mark.asyncio
@pytest.mark.parametrize("cls_name", ["Variable", "DataArray", "Dataset"])
@pytest.mark.parametrize(
    ("indexer", "method"),
    [
        ({}, "isel"),
        ({}, "sel"),
        ({"dim2": 2}, "isel"),
        ({"dim2": 1.0}, "sel"),
        ({"dim2": slice(1, 3)}, "isel"),
        ({"dim2": slice(1.0, 3.0)}, "sel"),
        ({"dim2": [1, 3]}, "isel"),  # outer
        ({"dim2": [1.0, 3.0]}, "sel"),
        ({"dim1": xr.Variable("points", [2, 3]), "dim2": xr.Variable("points", [1, 3])}, "isel"),  # vectorized
        ({"dim1": xr.Variable("points", [2, 3]), "dim2": xr.Variable("points", [1.0, 2.0])}, "sel"),
    ],
)
async def test_async_indexing_reads_through_zarrx(memory_url, cls_name, indexer, method):
    """zarrx's test_indexing: basic, outer and vectorized selections load asynchronously."""
    if cls_name == "Variable" and method == "sel":
        pytest.skip("Variable has no .sel")
    create_test_data().zarrx.to_zarr(memory_url, consolidated=False)
    with _count_async_reads() as reads:
        obj = _lazy(memory_url, cls_name)
        result = await getattr(obj, method)(**indexer).load_async()
        assert reads.call_count > 0
        reads.assert_awaited()
    xrt.assert_identical(result, getattr(obj, method)(**indexer).load())


def test_reading_data_reads_no_more_metadata(tmp_path):
    """zarrx's test_avoid_excess_metadata_calls: computing a variable reads chunks, never metadata again."""
    path = tmp_path / "t.zarr"
    xr.Dataset({"test": (("Z",), np.array([123]))}).zarrx.to_zarr(path, mode="w")
    store = CountingStore(LocalStore(str(path), read_only=True))
    ds = xr.open_dataset(store, engine="zarrx", chunks={})
    metadata = [key for key, _ in store.requests if key.rpartition("/")[2] in METADATA_NAMES]
    assert metadata == ["zarr.json"]  # the root's consolidated metadata describes the array
    store.reset()
    ds.test.compute(scheduler="sync")
    assert [key for key, _ in store.requests] == ["test/c/0"]


@pytest.mark.parametrize("cache_members", [True, False])
def test_cache_members_lists_the_group_once_or_every_time(tmp_path, cache_members):
    """zarrx's test_cache_members: with cache_members the store lists the group once; without, every time."""
    writable = ZarrxWritableDataStore.open_group(str(tmp_path / "t.zarr"), mode="w")
    for name in ("bar", "foo"):
        writable.ds.create_array(name, shape=(1,), dtype="uint8", dimension_names=["x"])
    reader = ZarrxWritableDataStore.open_group(
        str(tmp_path / "t.zarr"), mode="r", consolidated=False, cache_members=cache_members
    )
    assert sorted(reader.arrays) == ["bar", "foo"]
    writable.ds.create_array("baz", shape=(1,), dtype="uint8", dimension_names=["x"])
    expected = ["bar", "foo"] if cache_members else ["bar", "baz", "foo"]
    assert sorted(reader.arrays) == expected
    assert sorted(writable.arrays) == ["bar", "baz", "foo"]  # the writing store never caches stale members
