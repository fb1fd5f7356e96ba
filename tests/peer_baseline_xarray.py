"""xarray's own zarr tests with its own ``engine="zarr"`` -- the baseline the zarrx peer suites
are held to where the installed dask or xarray fails without zarrx.

Not collected by the normal run (the name does not start with ``test_``):
``tests/test_peer_query_planning.py`` runs it, in the same mode as the zarrx peer suites, and
allows zarrx a failure only where this run fails the same test. The classes and functions are
the ones ``tests/test_peer_xarray.py`` and ``tests/test_peer_xarray_datatree.py`` run, under the
same names and with nothing routed to zarrx.
"""

from __future__ import annotations

from xarray.tests import test_backends as xarray_backends
from xarray.tests import test_backends_datatree as xarray_datatree

# xarray's fixtures, used by the inherited tests
from xarray.tests.conftest import create_test_datatree, simple_datatree, time_unit, use_dask  # noqa: F401
from xarray.tests.test_backends import default_zarr_format, tmp_store  # noqa: F401
from xarray.tests.test_backends_datatree import unaligned_datatree_zarr_factory  # noqa: F401


class TestZarrxMemoryStore(xarray_backends.TestZarrDictStore):
    pass


class TestZarrxDirectoryStore(xarray_backends.TestZarrDirectoryStore):
    pass


class TestZarrxWriteEmpty(xarray_backends.TestZarrWriteEmpty):
    pass


class TestZarrxDataArrayToZarr(xarray_backends.TestDataArrayToZarr):
    pass


class TestZarrxRegionAuto(xarray_backends.TestZarrRegionAuto):
    pass


class TestZarrxDatatreeIO(xarray_datatree.TestZarrDatatreeIO):
    pass


test_open_dataset_chunking_zarr = xarray_backends.test_open_dataset_chunking_zarr
test_zarr_entrypoint = xarray_backends.test_zarr_entrypoint
test_zarr_create_default_indexes = xarray_backends.test_zarr_create_default_indexes
test_raises_key_error_on_invalid_zarr_store = xarray_backends.test_raises_key_error_on_invalid_zarr_store
