"""A user switching from ``engine="zarr"`` to zarrx keeps their code: keywords, signatures,
error classes and messages, the ``.zarrx`` accessor after ``import zarrx``, shared dask work.

xarray's own test classes run against zarrx in ``tests/test_peer_xarray*.py``; this module
checks the parts of the contract those tests do not pin down.
"""

from __future__ import annotations

import inspect
import subprocess
import sys
import threading
import warnings

import dask
import dask.array as da
import numpy as np
import pytest
import xarray as xr
from xarray.backends.zarr import ZarrBackendEntrypoint

import zarrx
from zarrx.errors import NameNotFoundError, UsageError, UsageTypeError, ZarrxError
from zarrx.xarray import MissingDimensionsError, ZarrxBackendEntrypoint
from zarrx.xarray.backend import open_data_store
from zarrx.xarray.accessor import ZarrxDataArrayAccessor, ZarrxDatasetAccessor, ZarrxDataTreeAccessor

pytestmark = pytest.mark.filterwarnings("ignore:.*consolidated metadata:RuntimeWarning")


# -- importing -------------------------------------------------------------------------------------
def _run(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def test_import_zarrx_does_not_import_xarray():
    assert _run("import sys, zarrx; print('xarray' in sys.modules, 'dask' in sys.modules)") == "False False"


@pytest.mark.parametrize(
    "imports",
    [
        "import xarray as xr; import zarrx",  # xarray first: import zarrx registers them
        "import zarrx.xarray; import xarray as xr",  # a plain import, as import rioxarray
        "import zarrx; import dask.array; import zarrx.xarray",  # dask.array may import xarray half-way
        "import zarrx; import xarray as xr; xr.backends.list_engines()",  # the entry point registers them
    ],
)
def test_the_accessors_exist_after_a_plain_import_whatever_the_order(imports):
    # (no import hook: ``import zarrx`` before ``import xarray`` alone does not register them,
    # see tests/test_process_hygiene.py)
    code = (
        f"{imports}\nimport xarray as xr\n"
        "print(all(hasattr(obj, 'zarrx') for obj in (xr.Dataset(), xr.DataArray(1), xr.DataTree())), "
        "hasattr(xr, 'backends') and hasattr(xr, 'coding'))"
    )
    assert _run(code) == "True True"


# -- signatures ------------------------------------------------------------------------------------
def _parameters(function, skip=("self",)):
    return [
        (p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values() if p.name not in skip
    ]


#: zarrx's keywords beyond xarray's, at the end of the accessor's signature
ZARRX_EXTRAS = ("rectilinear",)
KEYWORD_ONLY = inspect.Parameter.KEYWORD_ONLY


@pytest.mark.parametrize(
    ("accessor", "method"),
    [(ZarrxDatasetAccessor.to_zarr, xr.Dataset.to_zarr), (ZarrxDataArrayAccessor.to_zarr, xr.DataArray.to_zarr)],
)
def test_the_accessor_to_zarr_has_xarrays_signature_and_a_docstring(accessor, method):
    # xarray's parameters, in its order, then zarrx's own keyword-only extras (ZARRX_EXTRAS)
    ours, theirs = _parameters(accessor), _parameters(method)
    assert ours[: len(theirs)] == theirs
    assert [(name, kind) for name, kind, _ in ours[len(theirs) :]] == [(name, KEYWORD_ONLY) for name in ZARRX_EXTRAS]
    assert "Examples" in accessor.__doc__ and f"``{method.__qualname__}``'s signature" in accessor.__doc__


def test_the_datatree_accessor_takes_datatree_to_zarrs_arguments_in_its_order():
    peer = [name for name, kind, _ in _parameters(xr.DataTree.to_zarr) if kind is not inspect.Parameter.VAR_KEYWORD]
    ours = [name for name, _, _ in _parameters(ZarrxDataTreeAccessor.to_zarr)]
    assert ours[: len(peer)] == peer
    assert ZarrxDataTreeAccessor.to_zarr.__doc__


@pytest.mark.parametrize("method", ["open_dataset", "open_datatree", "open_groups_as_dict"])
def test_every_keyword_of_engine_zarr_is_a_keyword_of_engine_zarrx(method):
    ours = set(inspect.signature(getattr(ZarrxBackendEntrypoint, method)).parameters)
    theirs = inspect.signature(getattr(ZarrBackendEntrypoint, method)).parameters
    if method != "open_dataset":  # the groups are opened with open_data_store's keywords
        ours |= set(inspect.signature(ZarrxBackendEntrypoint.open_groups_as_dict).parameters)
        ours |= set(inspect.signature(open_data_store).parameters)
    missing = [name for name in theirs if name not in ours and name != "self"]
    assert missing == []


@pytest.fixture
def store(tmp_path):
    path = str(tmp_path / "k.zarr")
    xr.Dataset({"v": ("x", np.arange(4.0))}, coords={"x": [0, 1, 2, 3]}).zarrx.to_zarr(path)
    return path


def test_engine_zarr_keywords_that_apply_are_honoured(store):
    expected = xr.open_dataset(store, engine="zarrx")
    for kwargs in ({"mode": "r+"}, {"mode": "a"}, {"cache_members": False}):
        xr.testing.assert_identical(xr.open_dataset(store, engine="zarrx", **kwargs), expected)
    backend = ZarrxBackendEntrypoint()  # xarray passes engine= on to no backend; engine="zarr"'s ignores it
    xr.testing.assert_identical(backend.open_dataset(store, engine="zarr"), backend.open_dataset(store))
    with pytest.warns(FutureWarning, match="zarr_version"):
        xr.testing.assert_identical(xr.open_dataset(store, engine="zarrx", zarr_version=3), expected)
    reader = zarrx.xarray.ZarrxWritableDataStore.open_group(store, mode="r")
    xr.testing.assert_identical(xr.open_dataset(store, engine="zarrx", store=reader), expected)
    tree = xr.open_datatree(store, engine="zarrx", mode="r", cache_members=False)
    xr.testing.assert_identical(tree.to_dataset(), expected)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"mode": "w"}, "mode: opening a dataset reads an existing group"),
        ({"synchronizer": object()}, "takes no synchronizer"),
        ({"chunk_store": {}}, "chunk_store"),
        ({"zarr_version": 2, "zarr_format": 3}, "disagree"),
        ({"store": {}}, "store: expected a zarrx.xarray.ZarrxDataStore"),
    ],
)
def test_engine_zarr_keywords_that_cannot_apply_are_refused_clearly(store, kwargs, match):
    with pytest.raises(UsageError, match=match), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        xr.open_dataset(store, engine="zarrx", **kwargs)


# -- errors ----------------------------------------------------------------------------------------
def test_write_errors_are_the_builtins_xarray_raises(tmp_path):
    path = str(tmp_path / "e.zarr")
    ds = xr.Dataset({"u": ("x", np.arange(5))}, coords={"x": np.arange(5)})
    ds.zarrx.to_zarr(path)
    cases = [
        (TypeError, UsageTypeError, "``region`` must be a dict", dict(region=slice(None))),
        (TypeError, UsageTypeError, "must be slice objects", dict(region={"x": [0, 1]})),
        (KeyError, NameNotFoundError, "'nowhere' is not in the dataset", dict(mode="w", encoding={"nowhere": {}})),
        (ValueError, UsageError, "must be castable to a dictionary", dict(mode="w", encoding={"u": "zstd"})),
        (TypeError, UsageTypeError, "encoding must be a dict", dict(mode="w", encoding=["u"])),
    ]
    for builtin, ours, match, kwargs in cases:
        with pytest.raises(builtin, match=match) as caught:
            ds.zarrx.to_zarr(path, **kwargs)
        assert isinstance(caught.value, ours) and isinstance(caught.value, ZarrxError)
    xr.testing.assert_identical(xr.open_dataset(path, engine="zarrx"), ds)  # refused before the store changed
    moved = ds.assign_coords(x=np.arange(10, 15))
    with pytest.raises(KeyError, match="Not all values of coordinate 'x'.*10, 11") as caught:
        moved.zarrx.to_zarr(path, region="auto")
    assert isinstance(caught.value, NameNotFoundError)
    assert "'x'" in str(caught.value) and not str(caught.value).startswith('"')  # the message, not its repr


@pytest.mark.parametrize(("name", "builtin"), [(0, TypeError), ((4, 5), TypeError), (True, TypeError), ("", ValueError)])
def test_invalid_variable_names_raise_xarrays_builtin(tmp_path, name, builtin):
    with pytest.raises(builtin, match=repr(name).replace("(", r"\(").replace(")", r"\)")) as caught:
        xr.Dataset({name: xr.DataArray([1, 2])}).zarrx.to_zarr(str(tmp_path / "n.zarr"))
    assert isinstance(caught.value, ZarrxError)


def test_an_array_without_dimension_names_is_a_key_error(tmp_path):
    root = zarrx.create_group(str(tmp_path / "d.zarr"))
    root.create_array("bar", shape=(3, 5), dtype="float32")
    with pytest.raises(KeyError, match="xarray to determine variable dimensions.*'/bar'") as caught:
        xr.open_dataset(str(tmp_path / "d.zarr"), engine="zarrx", consolidated=False)
    assert isinstance(caught.value, MissingDimensionsError)


# -- a variable named None -------------------------------------------------------------------------
@pytest.mark.parametrize("zarr_format", [2, 3])
def test_a_variable_named_none_round_trips_and_reads_what_engine_zarr_wrote(tmp_path, zarr_format):
    expected = xr.Dataset({None: (("x", "y"), [[0, 1], [2, 3]])}, coords={"x": [10, 20]})
    ours, theirs = str(tmp_path / "ours.zarr"), str(tmp_path / "theirs.zarr")
    expected.zarrx.to_zarr(ours, zarr_format=zarr_format)
    assert zarrx.open_group(ours)["xarray_none_variable"].shape == (2, 2)  # no reserved "__" name
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected.to_zarr(theirs, zarr_format=zarr_format)  # as "__values__"
    for path in (ours, theirs):
        for engine in ("zarrx", "zarr"):
            if (path, engine) == (ours, "zarr"):
                continue  # engine="zarr" shows zarrx's stored name
            xr.testing.assert_identical(xr.open_dataset(path, engine=engine), expected)


# -- fixed-width strings ---------------------------------------------------------------------------
@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("encoding", [{"dtype": "S1"}, {"dtype": "S3"}, {"dtype": "U3"}, {}])
@pytest.mark.parametrize("values", [[b"foo", b"ba"], ["foo", "ba"], np.array(["ab", "c"], dtype="U2")])
def test_fixed_width_strings_are_stored_and_read_as_with_engine_zarr(tmp_path, zarr_format, encoding, values):
    import zarr

    ds = xr.Dataset({"s": ("t", values)})
    stored = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for writer in ("zarr", "zarrx"):
            path = str(tmp_path / f"{writer}.zarr")
            (ds.to_zarr if writer == "zarr" else ds.zarrx.to_zarr)(path, encoding={"s": encoding}, zarr_format=zarr_format)
            array = zarr.open_array(path, path="s")
            read = xr.open_dataset(path, engine="zarrx")
            stored[writer] = (str(array.dtype), array[:].tolist(), read.s.dtype, read.s.values.tolist(), read.s.encoding.get("dtype"))
    assert stored["zarrx"] == stored["zarr"]


# -- shared dask work ------------------------------------------------------------------------------
class Counter:
    """Counts how often a map_blocks function runs (thread-safe)."""

    def __init__(self):
        self.calls = 0
        self._lock = threading.Lock()

    def __call__(self, block):
        with self._lock:
            self.calls += 1
        return block + 1


@pytest.mark.parametrize("compute", [True, False])
def test_variables_derived_from_one_computation_evaluate_it_once(tmp_path, compute):
    counter = Counter()
    upstream = da.ones((40, 30), chunks=(10, 30)).map_blocks(counter, meta=np.empty((0,) * 2, dtype=float))  # 4 blocks
    ds = xr.Dataset({"a": (("y", "x"), upstream * 2), "b": (("y", "x"), upstream - 1), "c": (("y", "x"), upstream.cumsum(0))})
    written = ds.zarrx.to_zarr(str(tmp_path / "s.zarr"), compute=compute)
    if not compute:
        assert counter.calls == 0
        written.compute()
    assert counter.calls == 4  # once per block, not once per variable
    result = xr.open_dataset(str(tmp_path / "s.zarr"), engine="zarrx")
    np.testing.assert_array_equal(result.a.values, np.full((40, 30), 4.0))
    np.testing.assert_array_equal(result.c.values[-1], np.full(30, 80.0))


def test_dask_writes_computed_together_evaluate_shared_work_once():
    counter = Counter()
    upstream = da.ones(40, chunks=10).map_blocks(counter, meta=np.empty((0,), dtype=float))
    writes = [zarrx.to_zarr(upstream * k, {}, compute=False) for k in (1, 2, 3)]
    dask.compute(*writes)
    assert counter.calls == 4
