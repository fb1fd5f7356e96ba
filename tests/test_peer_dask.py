"""dask's own zarr tests (``dask/array/tests/test_array_core.py``), run against
:func:`zarrx.from_zarr` and :func:`zarrx.to_zarr`.

dask's zarr tests are functions of one module; those that call ``da.from_zarr``,
``da.to_zarr`` or ``x.to_zarr`` are collected here as they are, and the adapter of
:mod:`tests.peer_adapters` routes those calls to zarrx while each test runs. Where a test
hands over a zarr-python array or store (``zarr.zeros_like(...)``, ``zarr.storage.LocalStore``),
zarrx reads and writes through it. dask runs its tests with warnings as errors, which
``test_zarr_risky_shards_warns`` relies on; so does this module for dask's PerformanceWarning.
"""

from __future__ import annotations

import pytest
from dask.array.tests import test_array_core as dask_core

from tests.peer_adapters import route_dask_to_zarrx

pytestmark = pytest.mark.filterwarnings("error::dask.array.PerformanceWarning")

#: test (name, or name with parameters) -> why zarrx differs from dask on purpose
#: (docs/user-guide/xarray-differences.md, "dask")
DIFFERENCES: dict[str, str] = {
    "test_zarr_inline_array[False]": "zarrx's tasks hold the array's small handle, never the array object, so "
    "inline_array=False cannot put the peer's zarr.Array in the graph",
    "test_read_zarr_chunks": "zarrx refuses read blocks that cut through a stored chunk (chunks=(5,) over chunks "
    "of 3): every such chunk would be fetched and decoded by two tasks; it names a multiple to use instead",
}


@pytest.fixture(autouse=True)
def _zarrx_is_dask_zarr(monkeypatch, request):
    if request.node.get_closest_marker("slow") is not None:
        pytest.skip("a test dask marks slow: dask runs it only with --runslow")
    route_dask_to_zarrx(monkeypatch)


test_from_zarr_unique_name = dask_core.test_from_zarr_unique_name
test_from_zarr_name = dask_core.test_from_zarr_name
test_zarr_roundtrip = dask_core.test_zarr_roundtrip
test_zarr_sharding_roundtrip = dask_core.test_zarr_sharding_roundtrip
test_zarr_roundtrip_with_path_like = dask_core.test_zarr_roundtrip_with_path_like
test_zarr_empty_array = dask_core.test_zarr_empty_array
test_zarr_return_stored = dask_core.test_zarr_return_stored
test_zarr_inline_array = dask_core.test_zarr_inline_array
test_zarr_existing_array = dask_core.test_zarr_existing_array
test_to_zarr_unknown_chunks_raises = dask_core.test_to_zarr_unknown_chunks_raises
test_read_zarr_chunks = dask_core.test_read_zarr_chunks
test_zarr_pass_store = dask_core.test_zarr_pass_store
test_zarr_group = dask_core.test_zarr_group
test_zarr_irregular_chunks = dask_core.test_zarr_irregular_chunks
test_zarr_to_zarr_shards = dask_core.test_zarr_to_zarr_shards
test_zarr_risky_shards_warns = dask_core.test_zarr_risky_shards_warns
test_zarr_nocompute = dask_core.test_zarr_nocompute
test_zarr_regions = dask_core.test_zarr_regions
