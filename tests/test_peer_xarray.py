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

import contextlib
import uuid

import fsspec
import pytest
from xarray.tests import test_backends as xarray_backends

# xarray's fixtures, used by the inherited tests
from xarray.tests.conftest import time_unit, use_dask  # noqa: F401
from xarray.tests.test_backends import default_zarr_format, fsspec_memory_zarr_stores, tmp_store  # noqa: F401

from tests.peer_adapters import route_xarray_to_zarrx
from zarrx.xarray import ZarrxDataStore

#: test name (without parameters) -> why zarrx differs on purpose
DIFFERENCES: dict[str, str] = {}


@pytest.fixture(autouse=True)
def _zarrx_is_the_zarr_engine(monkeypatch):
    route_xarray_to_zarrx(monkeypatch)


class ZarrxStores:
    """What a zarrx subclass of xarray's ``ZarrBase`` changes: the writable store of ``create_store``."""

    @contextlib.contextmanager
    def create_store(self, cache_members: bool = False):
        with self.create_zarr_target() as store_target:
            yield ZarrxDataStore.open_group(
                store_target, mode="w", cache_members=cache_members, **self.version_kwargs
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
test_open_fsspec = xarray_backends.test_open_fsspec
test_open_dataset_chunking_zarr = xarray_backends.test_open_dataset_chunking_zarr
test_zarr_entrypoint = xarray_backends.test_zarr_entrypoint
test_zarr_create_default_indexes = xarray_backends.test_zarr_create_default_indexes
test_raises_key_error_on_invalid_zarr_store = xarray_backends.test_raises_key_error_on_invalid_zarr_store
