"""dask's own zarr tests, run against :func:`zarrx.from_zarr` and :func:`zarrx.to_zarr`.

Every test function of the installed dask's array test modules that mentions zarr is collected
here as it is (``test_every_dask_zarr_test_is_collected`` checks none is left out), and the
adapter of :mod:`tests.peer_adapters` routes their ``da.from_zarr``, ``da.to_zarr``,
``x.to_zarr`` -- and, for ``dask/array/tests/test_xarray.py``, xarray's ``to_zarr`` -- to zarrx
while each test runs. Where a test hands over a zarr-python array or store
(``zarr.zeros_like(...)``, ``zarr.storage.LocalStore``), zarrx reads and writes through it. dask
runs its tests with warnings as errors, which ``test_zarr_risky_shards_warns`` relies on; so does
this module for dask's PerformanceWarning.

With dask's array expressions on (``DASK_ARRAY__QUERY_PLANNING=True``, as
``tests/test_peer_query_planning.py`` runs this module) dask skips ``test_array_core`` as a
whole at import; the same zarr tests are then read from its source without that skip
(:func:`tests.peer_adapters.load_peer_tests`).
"""

from __future__ import annotations

import pkgutil

import dask.array as da
import dask.array.tests
import pytest

from tests.peer_adapters import load_peer_tests, route_dask_to_zarrx, route_xarray_to_zarrx, zarr_test_names

pytestmark = pytest.mark.filterwarnings("error::dask.array.PerformanceWarning")

#: test (name, or name with parameters) -> why zarrx differs from dask on purpose
#: (docs/user-guide/xarray-differences.md, "dask")
DIFFERENCES: dict[str, str] = {
    # the write succeeds and the values round-trip (aligned on the shards); only the block shape read back differs
    "test_zarr_sharding_roundtrip[chunks0-shards0]": "zarrx.from_zarr reads a sharded array in blocks of one "
    "shard (18, 18) by default -- one task and one request per stored object; dask.array.from_zarr uses the "
    "inner chunks (3, 3); zarrx.from_zarr(..., chunks=arr.chunks) gives dask's blocks",
    "test_zarr_sharding_roundtrip[chunks1-shards1]": "as for [chunks0-shards0]: blocks of one shard (12, 12) "
    "where dask reads inner chunks (3, 3)",
}

#: with dask's array expressions on: tests that fail in dask itself, before zarrx is called or
#: apart from it -- dask 2026.8's expression ``Array`` lacks what they use (which is why dask skips
#: ``test_array_core`` as a whole then). Strict xfails: each must keep failing until dask has it.
EXPRESSION_GAPS: dict[str, str] = {
    "test_from_array_respects_zarr_shards": "dask's expression Array has no .chunksize (the test calls dask's "
    "from_array only)",
    **dict.fromkeys(
        [f"test_zarr_to_zarr_shards[{region}]" for region in ("None", "all", "half")],
        "dask's expression Array has no .chunksize (the test asserts result.chunksize after the write)",
    ),
    "test_zarr_regions": "dask's expression Array has no .reshape (da.arange(16).reshape(...), before any write)",
    **dict.fromkeys(
        ["test_zarr_nocompute", "test_zarr_return_stored[False]", "test_zarr_return_stored[True]"],
        "the test asserts isinstance(out, dask.array.core.Array): the legacy class, not the expression one",
    ),
    **dict.fromkeys(
        ["test_compute_chunk_sizes_warning_fixes_to_zarr", "test_to_zarr_unknown_chunks_raises"],
        "dask's expressions raise NotImplementedError for x[x < 0] (a boolean dask array as index), "
        "which makes the unknown chunk sizes the test is about",
    ),
    **dict.fromkeys(
        [f"test_xarray_blockwise_fusion_store[{compute}]" for compute in ("True", "False")],
        "dask's expressions do not fuse ((x + 1) * 2) / 2 - 1 into the 2 tasks the test expects; it fails at "
        "dask.compute(y), before the write",
    ),
}
if da.array_expr_enabled():
    DIFFERENCES.update(EXPRESSION_GAPS)
    dask_core = load_peer_tests("dask.array.tests.test_array_core", zarr_test_names("dask.array.tests.test_array_core"))
else:
    from dask.array.tests import test_array_core as dask_core
from dask.array.tests import test_xarray as dask_xarray


@pytest.fixture(autouse=True)
def _zarrx_is_dask_zarr(monkeypatch):  # tests dask marks slow run too: they are small here
    route_dask_to_zarrx(monkeypatch)
    route_xarray_to_zarrx(monkeypatch)  # dask's test_xarray.py writes with xarray's to_zarr


unknown = dask_core.unknown  # the fixture of test_compute_chunk_sizes_warning_fixes_to_zarr

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
test_from_array_respects_zarr_shards = dask_core.test_from_array_respects_zarr_shards  # dask's from_array only
test_zarr_to_zarr_shards = dask_core.test_zarr_to_zarr_shards
test_zarr_risky_shards_warns = dask_core.test_zarr_risky_shards_warns
test_zarr_nocompute = dask_core.test_zarr_nocompute
test_zarr_regions = dask_core.test_zarr_regions
test_compute_chunk_sizes_warning_fixes_to_zarr = dask_core.test_compute_chunk_sizes_warning_fixes_to_zarr
test_xarray_blockwise_fusion_store = dask_xarray.test_xarray_blockwise_fusion_store


def test_every_dask_zarr_test_is_collected():
    """Every test of the installed dask's ``dask/array/tests`` that mentions zarr runs here."""
    found = {
        name
        for module in pkgutil.iter_modules(dask.array.tests.__path__)
        if module.name.startswith("test_")
        for name in zarr_test_names(f"dask.array.tests.{module.name}")
    }
    assert len(found) >= 20  # the scan itself works: dask 2026.8 has 21
    assert sorted(found - set(globals())) == []
