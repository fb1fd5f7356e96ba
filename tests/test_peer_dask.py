"""dask's own zarr tests, every one of them, run against :func:`zarrx.from_zarr` and
:func:`zarrx.to_zarr`.

Which tests: every test function of the installed dask's test modules
(``dask/array/tests/*.py``) whose source mentions zarr -- collected here when this module is
imported, not chosen by hand, so a new dask brings its new zarr tests along (dask 2026.8: 20
functions of ``test_array_core.py``, 33 tests with their parameters, and one of
``test_xarray.py``, 2 tests). Tests dask marks ``slow`` run too. The fixtures they use (such
as ``unknown``) come from the same modules.

While each test runs, the adapter of :mod:`tests.peer_adapters` routes ``da.from_zarr``,
``da.to_zarr`` and ``x.to_zarr`` -- and xarray's ``to_zarr``, for ``test_xarray.py`` -- to zarrx
with zarrx's defaults (no keyword added: zarrx aligns blocks with the shards as dask does).
Where a test hands over a zarr-python array or store (``zarr.zeros_like(...)``,
``zarr.storage.LocalStore``), zarrx reads and writes through it. dask runs its tests with
warnings from dask as errors, which ``test_zarr_risky_shards_warns`` relies on; so does this
module for dask's PerformanceWarning.
"""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import dask.array.tests
import pytest

from tests.peer_adapters import route_dask_to_zarrx, route_xarray_to_zarrx

pytestmark = pytest.mark.filterwarnings("error::dask.array.PerformanceWarning")

#: test (name, or name with parameters) -> why zarrx differs from dask on purpose
#: (docs/user-guide/xarray-differences.md, "dask")
DIFFERENCES: dict[str, str] = {
    "test_zarr_inline_array[False]": "zarrx's tasks hold the array's small handle, never the array object, so "
    "inline_array=False cannot put the peer's zarr.Array in the graph",
    # the write succeeds and the values round-trip (aligned on the shards); only the block shape read back differs
    "test_zarr_sharding_roundtrip[chunks0-shards0]": "zarrx.from_zarr reads a sharded array in blocks of one "
    "shard (18, 18) by default -- one task and one request per stored object; dask.array.from_zarr uses the "
    "inner chunks (3, 3); zarrx.from_zarr(..., chunks=arr.chunks) gives dask's blocks",
    "test_zarr_sharding_roundtrip[chunks1-shards1]": "as for [chunks0-shards0]: blocks of one shard (12, 12) "
    "where dask reads inner chunks (3, 3)",
}


def _zarr_tests() -> dict[str, tuple[str, object]]:
    """Every test function of dask's array test modules whose source mentions zarr, by name, with
    its module's name -- and the module-level fixtures those tests ask for."""
    found: dict[str, tuple[str, object]] = {}
    folder = Path(dask.array.tests.__file__).parent
    for path in sorted(folder.glob("test_*.py")):
        if "zarr" not in path.read_text(encoding="utf-8"):
            continue
        module = importlib.import_module(f"dask.array.tests.{path.stem}")
        for name, function in vars(module).items():
            if not (name.startswith("test_") and inspect.isfunction(function)):
                continue
            if function.__module__ != module.__name__ or "zarr" not in inspect.getsource(function):
                continue
            found[name] = (path.stem, function)
            for argument in inspect.signature(function).parameters:
                if argument in vars(module) and not argument.startswith("test_"):
                    found.setdefault(argument, (path.stem, getattr(module, argument)))
    return found


ZARR_TESTS = _zarr_tests()
globals().update({name: function for name, (_, function) in ZARR_TESTS.items()})


@pytest.fixture(autouse=True)
def _zarrx_is_dask_zarr(monkeypatch):
    route_dask_to_zarrx(monkeypatch)
    route_xarray_to_zarrx(monkeypatch)


def test_every_zarr_test_of_dask_is_collected():
    # the ones the issue counted (dask 2026.8) are all here, with the fixture one of them needs
    names = {name for name in ZARR_TESTS if name.startswith("test_")}
    assert len(names) >= 21
    assert {"test_zarr_regions", "test_read_zarr_chunks", "test_compute_chunk_sizes_warning_fixes_to_zarr",
            "test_zarr_sharding_roundtrip", "test_xarray_blockwise_fusion_store"} <= names  # fmt: skip
    assert "unknown" in ZARR_TESTS
