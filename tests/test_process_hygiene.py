"""zarrx in a process it does not own (issue 29): no import hook, accessors by plain imports,
entry points that import neither dask nor zarrx's core.

Each check runs in a fresh interpreter (``sys.executable``), since the test process has long
imported everything."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import xarray as xr

import zarrx


def _run(code: str) -> str:
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@pytest.fixture(scope="module")
def dataset_path(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("hygiene") / "small.zarr")
    ds = xr.Dataset({"t": (("time", "x"), np.arange(40.0).reshape(10, 4))}, coords={"time": np.arange(10)})
    ds.zarrx.to_zarr(path, mode="w", encoding={"t": {"chunks": (5, 2)}})
    return path


# -- the import system ------------------------------------------------------------------------------
def test_xarrays_own_loader_type():
    """The reference for the tests below: xarray's loader in a process that never saw zarrx."""
    name = _run("import importlib.util; print(type(importlib.util.find_spec('xarray').loader).__qualname__)")
    assert name == "SourceFileLoader"


@pytest.mark.parametrize(
    "before, after",
    [
        ("", "import xarray"),  # xarray imported after zarrx: the old hook waited for this
        ("import xarray", ""),  # xarray first: zarrx registers the accessors at once
        ("", "import xarray; import zarrx.xarray"),
        ("", "import xarray; xarray.backends.list_engines()"),
    ],
)
def test_import_zarrx_leaves_meta_path_and_xarrays_loader_alone(before, after):
    code = f"""
import importlib.machinery, sys
{before}
finders = list(sys.meta_path)
import zarrx
unchanged = list(sys.meta_path) == finders
{after}
import xarray
added = [type(finder).__module__ for finder in sys.meta_path if finder not in finders]  # six adds one
print(unchanged, [module for module in added if module.startswith("zarrx")],
      type(xarray.__spec__.loader) is importlib.machinery.SourceFileLoader)
"""
    assert _run(code) == "True [] True"


def test_opening_and_computing_with_zarrx_leaves_meta_path_alone(dataset_path):
    code = f"""
import importlib.machinery, sys
finders = list(sys.meta_path)
import xarray as xr
ds = xr.open_dataset({dataset_path!r}, engine="zarrx")
total = float(ds.t.sum())
chunked = float(xr.open_dataset({dataset_path!r}, engine="zarrx", chunks={{}}).t.sum().compute())
part = float(ds.isel(time=slice(3, 9)).zarrx.chunk().t.sum().compute())
added = [type(finder).__module__ for finder in sys.meta_path if finder not in finders]
print(total, chunked, part, not any(module.startswith("zarrx") for module in added),
      type(xr.__spec__.loader) is importlib.machinery.SourceFileLoader)
"""
    expected = np.arange(40.0).reshape(10, 4)
    assert _run(code).split() == [str(expected.sum()), str(expected.sum()), str(expected[3:9].sum()), "True", "True"]


# -- the accessors ------------------------------------------------------------------------------------
_HAS_ACCESSORS = (
    "print(all(hasattr(obj, 'zarrx') for obj in (xr.Dataset(), xr.DataArray(1), xr.DataTree())))"
)


@pytest.mark.parametrize(
    "imports",
    [
        "import zarrx.xarray\nimport xarray as xr",  # zarrx first, xarray after
        "import zarrx; import zarrx.xarray\nimport xarray as xr",
        "import zarrx.xarray.accessor\nimport xarray as xr",
        "import xarray as xr\nimport zarrx",  # xarray already imported: import zarrx registers them
        "import zarrx\nimport xarray as xr; xr.backends.list_engines()",  # xarray loads the entry point
    ],
)
def test_the_accessors_exist_after_a_plain_import(imports):
    assert _run(f"{imports}\n{_HAS_ACCESSORS}") == "True"


def test_opening_with_engine_zarrx_gives_the_accessors_without_importing_zarrx(dataset_path):
    code = f"import xarray as xr\nds = xr.open_dataset({dataset_path!r}, engine='zarrx')\n{_HAS_ACCESSORS}"
    assert _run(code) == "True"


# -- light entry points ------------------------------------------------------------------------------
#: what loading an entry point must not import: dask, and zarrx's core (these load when a dataset is opened)
HEAVY = ("dask", "dask.array", "zarrx.dask", "zarrx.io", "zarrx.codecs", "zarrx.storage", "zarrx.nodes.api")


def _entry_point_imports(group: str) -> dict:
    """The modules of HEAVY that loading zarrx's entry point of ``group`` imports, in a fresh
    interpreter where xarray is already imported (as when xarray loads it)."""
    code = f"""
import importlib.metadata, json, sys
import xarray
before = set(sys.modules)
(entry_point,) = [ep for ep in importlib.metadata.entry_points(group={group!r}) if ep.name == "zarrx"]
loaded = entry_point.load()
new = set(sys.modules) - before
print(json.dumps({{"loaded": loaded.__name__, "heavy": [m for m in {HEAVY!r} if m in new],
                  "accessor": hasattr(xarray.Dataset, "zarrx")}}))
"""
    return json.loads(_run(code))


def test_the_backend_entry_point_imports_neither_dask_nor_zarrxs_core():
    found = _entry_point_imports("xarray.backends")
    assert found == {"loaded": "ZarrxBackendEntrypoint", "heavy": [], "accessor": True}


def test_the_chunkmanager_entry_point_imports_neither_dask_nor_zarrxs_core():
    found = _entry_point_imports("xarray.chunkmanagers")
    assert found["loaded"] == "ZarrxChunkManager"
    assert found["heavy"] == []


def _imported_through(importtime: str, module: str) -> list[list[str]]:
    """The import chains (``-X importtime``, innermost first) that import ``module``.

    The report lists a module after the modules it imports, one indent deeper: a line's parent
    is the next line with a smaller indent."""
    rows = []
    for line in importtime.splitlines():
        if line.startswith("import time:") and "|" in line and not line.rstrip().endswith("package"):
            name = line.rsplit("|", 1)[1]
            rows.append((len(name) - len(name.lstrip()), name.strip()))
    chains = []
    for index, (depth, name) in enumerate(rows):
        if name != module:
            continue
        chain = [name]
        for later_depth, later in rows[index + 1 :]:
            if later_depth < depth:
                chain.append(later)
                depth = later_depth
        chains.append(chain)
    return chains


def test_the_importtime_parser_finds_chains():
    report = (
        "import time: self [us] | cumulative | imported package\n"
        "import time:  1 |  1 |     dask.array\n"
        "import time:  1 |  2 |   zarrx.dask\n"
        "import time:  1 |  3 | zarrx.xarray.chunkmanager\n"
        "import time:  1 |  1 | dask.array\n"
    )
    chains = _imported_through(report, "dask.array")
    assert chains == [["dask.array", "zarrx.dask", "zarrx.xarray.chunkmanager"], ["dask.array"]]


def test_listing_xarrays_engines_imports_no_dask_through_zarrx():
    code = (
        "import sys, xarray; engines = xarray.backends.list_engines()\n"
        "print('zarrx' in engines, 'zarrx.xarray.backend' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.strip() == "True True", result.stderr[-2000:]
    through_zarrx = [
        chain
        for module in ("dask", "dask.array", "zarrx.io", "zarrx.codecs")
        for chain in _imported_through(result.stderr, module)
        if any(name.startswith("zarrx") for name in chain)
    ]
    # (importlib.import_module, which loads entry points, is not in the report: the chains show the
    # modules below zarrx's entry point that import with an import statement, as zarrx's do)
    assert through_zarrx == []


def test_import_zarrx_imports_neither_its_core_nor_xarray_nor_dask():
    modules = ("xarray", "dask", "zarrx.io", "zarrx.codecs", "zarrx.nodes.api")
    code = f"import sys, zarrx; print(sorted(m for m in {modules!r} if m in sys.modules))"
    assert _run(code) == "[]"
    # and the names are all there on first use
    code = (
        "import zarrx; print(callable(zarrx.open_group), zarrx.storage.MemoryStore.__name__, 'from_zarr' in dir(zarrx))"
    )
    assert _run(code) == "True MemoryStore True"


def test_the_conveniences_of_nodes_work_after_import_zarrx_alone():
    code = (
        "import zarrx\na = zarrx.create_array('memory://hygiene', shape=(4,), chunks=(2,), dtype='i4')\n"
        "print(type(a.to_dask()).__module__.split('.')[0], 'Shape' in str(a), a.explain(slice(None)).nchunks)"
    )
    assert _run(code) == "dask True 2"
    assert zarrx.Array is zarrx.nodes.array.Array
