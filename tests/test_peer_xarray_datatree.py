"""xarray's own DataTree zarr tests (``TestZarrDatatreeIO``), run against ``engine="zarrx"`` and
``dt.zarrx.to_zarr``.

The class comes from the installed xarray (``xarray.tests.test_backends_datatree``); the adapter
of :mod:`tests.peer_adapters` routes its ``dt.to_zarr``/``ds.to_zarr`` and ``engine="zarr"`` to
zarrx while each test runs.
"""

from __future__ import annotations

import pytest
from xarray.tests import test_backends_datatree as xarray_datatree

# xarray's fixtures, used by the inherited tests
from xarray.tests.conftest import create_test_datatree, simple_datatree  # noqa: F401
from xarray.tests.test_backends_datatree import unaligned_datatree_zarr_factory  # noqa: F401

from tests.peer_adapters import route_xarray_to_zarrx

#: test (name, or name with parameters) -> why it fails until another issue lands (no intentional
#: difference from engine="zarr" remains for DataTrees)
DIFFERENCES: dict[str, str] = {
}


@pytest.fixture(autouse=True)
def _zarrx_is_the_zarr_engine(monkeypatch):
    route_xarray_to_zarrx(monkeypatch)


class TestZarrxDatatreeIO(xarray_datatree.TestZarrDatatreeIO):
    pass
