"""The xarray chunk manager "zarrx" (chunked_array_type="zarrx"): dask's results for every
operation, CF decoding lazy per block, graphs that follow the selection, worker processes."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from xarray.namedarray.daskmanager import DaskManager
from xarray.namedarray.parallelcompat import guess_chunkmanager, list_chunkmanagers

import dask
import dask.array as da
import zarrx
from zarrx.dask.lazy import read_layer
from zarrx.storage import LocalStore, MemoryStore
from zarrx.xarray.chunkmanager import ZarrxChunkManager

from tests.counting import CountingStore
from tests.test_xarray import WRITERS, cf_dataset, write

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning", "ignore::RuntimeWarning")

OPT_IN = {"chunked_array_type": "zarrx"}


@pytest.fixture(scope="module", params=WRITERS)
def cf_path(request, tmp_path_factory):
    return write(cf_dataset(), str(tmp_path_factory.mktemp(request.param) / "cf.zarr"), request.param)


layout_of = read_layer  # the zarrx read layer of a dask array, or None when dask's own from_array made it


def test_registered_under_the_entry_point_and_never_the_default():
    assert isinstance(list_chunkmanagers()["zarrx"], ZarrxChunkManager)
    assert type(guess_chunkmanager(None)) is DaskManager
    assert type(guess_chunkmanager("zarrx")) is ZarrxChunkManager


# -- the same result for every operation -------------------------------------------------------------
OPERATIONS = {
    "open": lambda ds: ds,
    "isel slices": lambda ds: ds.isel(time=slice(1, 4), lon=slice(-3, None)),
    "isel integers": lambda ds: ds.isel(time=2, lon=1),
    "isel lists": lambda ds: ds.isel(time=[0, 2, 5]),
    "isel steps": lambda ds: ds.isel(time=slice(None, None, 2), lat=slice(None, None, -1)),
    "sel": lambda ds: ds.sel(time=slice("2000-01-01T06", "2000-01-02")),
    "mean": lambda ds: ds[["tas", "pr"]].mean(),
    "mean over time": lambda ds: ds[["tas", "pr"]].mean("time"),
    "std": lambda ds: ds.tas.std("lat"),
    "arithmetic": lambda ds: ds.tas * 2 + ds.pr,
    "assign": lambda ds: ds.assign(tas_c=ds.tas - 273.15),
    "where": lambda ds: ds.tas.where(ds.tas > 285),
    "rolling": lambda ds: ds.tas.rolling(time=2).mean(),
    "groupby": lambda ds: ds.tas.groupby("time.day").mean(),
    "resample": lambda ds: ds.tas.resample(time="12h").mean(),
    "coarsen": lambda ds: ds.tas.coarsen(time=2).mean(),
    "diff": lambda ds: ds.pr.diff("time"),
    "cumsum": lambda ds: ds.pr.cumsum("time"),
    "concat": lambda ds: xr.concat([ds.tas.isel(time=slice(0, 2)), ds.tas.isel(time=slice(4, 6))], "time"),
    "rechunk": lambda ds: ds.tas.chunk({"time": 3}),
    "transpose": lambda ds: ds.tas.transpose("lon", "time", "lat"),
    "quantile": lambda ds: ds.tas.quantile(0.5, "time"),
    "shift": lambda ds: ds.tas.shift(time=1),
    "argmax": lambda ds: ds.tas.fillna(0).argmax("time"),
    "persist": lambda ds: ds.persist(),
    "map_blocks": lambda ds: ds.tas.map_blocks(lambda block: block + 1),
    "apply_ufunc": lambda ds: xr.apply_ufunc(np.sqrt, ds.pr, dask="parallelized"),
}


@pytest.mark.parametrize("operation", list(OPERATIONS))
def test_every_operation_gives_dasks_result(cf_path, operation):
    with dask.config.set(scheduler="sync"):
        for chunks in ({}, {"time": 2}, {"time": 4, "lat": 2}):
            ours = xr.open_dataset(cf_path, engine="zarrx", chunks=chunks, **OPT_IN)
            theirs = xr.open_dataset(cf_path, engine="zarrx", chunks=chunks)
            assert layout_of(ours.tas.data) is not None and layout_of(theirs.tas.data) is None
            ours, theirs = OPERATIONS[operation](ours), OPERATIONS[operation](theirs)
            assert ours.chunks == theirs.chunks, chunks
            xr.testing.assert_identical(ours.compute(), theirs.compute())


def test_engine_zarr_gets_the_gain_too(cf_path):
    ours = xr.open_dataset(cf_path, engine="zarr", chunks={}, **OPT_IN)
    theirs = xr.open_dataset(cf_path, engine="zarr", chunks={})
    assert layout_of(ours.pr.data) is not None
    xr.testing.assert_identical(ours.isel(time=slice(2, 5)).compute(), theirs.isel(time=slice(2, 5)).compute())


# -- CF decoding, lazily, block by block -------------------------------------------------------------
@pytest.fixture
def v2_masked(tmp_path):
    """A Zarr v2 store (ARCO-ERA5's format): fill-value masking, packed integers, times."""
    times = np.datetime64("2020-01-01") + np.arange(40) * np.timedelta64(1, "h")
    values = np.random.default_rng(3).normal(280, 5, (40, 6)).round(2)
    values[3, 2] = values[17, 0] = np.nan
    ds = xr.Dataset(
        {
            "t2m": (("time", "x"), values.astype("float32")),
            "packed": (("time", "x"), values, {}, {"dtype": "int16", "scale_factor": 0.01, "add_offset": 280.0}),
            "stamp": (("time",), times, {}, {"units": "hours since 2020-01-01"}),
        },
        coords={"time": times},
    )
    path = str(tmp_path / "v2.zarr")
    ds.to_zarr(path, zarr_format=2, encoding={"t2m": {"chunks": (1, 6)}, "packed": {"chunks": (1, 6)}})
    return path, ds


def test_cf_decoding_runs_per_block_of_a_v2_store(v2_masked):
    path, expected = v2_masked
    counting = CountingStore(LocalStore(path, read_only=True))
    ds = xr.open_dataset(counting, engine="zarrx", chunks={}, **OPT_IN)
    assert ds.t2m.encoding["_FillValue"] is not None and ds.packed.dtype == np.float64
    assert layout_of(ds.packed.data) is not None and layout_of(ds.stamp.data) is not None
    counting.reset()
    part = ds.isel(time=slice(15, 19)).compute()
    read = sorted({key.split("/")[0] for key, _ in counting.chunk_requests()})
    assert read == ["packed", "stamp", "t2m"]
    assert len([key for key, _ in counting.chunk_requests() if key.startswith("t2m/")]) == 4
    xr.testing.assert_allclose(part, expected.isel(time=slice(15, 19)))
    assert np.isnan(part.t2m.values[2, 0]) and part.stamp.dtype.kind == "M"


# -- graphs that follow the selection ------------------------------------------------------------------
@pytest.fixture(scope="module")
def giant_group():
    """Three variables of 1,000,000 chunks each (ten written) in one consolidated group."""
    store = MemoryStore()
    root = zarrx.create_group(store)
    for name in ("t2m", "u10", "v10"):
        variable = root.create_array(
            name, shape=(1_000_000, 4), chunks=(1, 4), dtype="float32", fill_value=np.nan, dimension_names=["time", "x"]
        )
        variable[:10] = np.arange(40, dtype="float32").reshape(10, 4)
    zarrx.consolidate_metadata(store)
    return root


def test_a_million_chunks_per_variable_compute_a_graph_of_the_selection(giant_group):
    ds = xr.open_dataset(giant_group, engine="zarrx", chunks={}, **OPT_IN)
    assert all(type(variable.data) is da.Array for variable in ds.data_vars.values())
    result = ds.isel(time=slice(0, 10)).mean()
    (optimized,) = dask.optimize(result)
    assert len(optimized.__dask_graph__()) < 100  # ten reads per variable and their sums
    assert float(result.t2m.compute()) == float(np.arange(40).mean())
    # what still pays the full price: arithmetic before the selection
    before = (ds.t2m * 2).isel(time=slice(0, 10))
    assert len(before.data.dask.layers[ds.t2m.data.name]) == 1_000_000


def test_mixed_variables_compute_together(giant_group):
    ds = xr.open_dataset(giant_group, engine="zarrx", chunks={}, **OPT_IN).isel(time=slice(0, 6))
    ds["t2m_c"] = ds.t2m - 273.15
    ds = ds.isel(time=[0, 5])  # lists: dask's own indexing, beside the untouched arrays
    computed = ds.compute()
    np.testing.assert_allclose(computed.t2m_c.values, np.arange(40.0).reshape(10, 4)[[0, 5]] - 273.15, rtol=1e-6)


def test_the_chunk_pattern_and_rechunking(giant_group):
    lazy = xr.open_dataset(giant_group, engine="zarrx", chunks=None).isel(time=slice(2, 9))
    chunked = lazy.chunk({"time": 3}, chunked_array_type="zarrx")
    assert chunked.t2m.chunks == ((3, 3, 1), (4,)) and layout_of(chunked.t2m.data) is not None
    again = chunked.chunk({"time": 7}, chunked_array_type="zarrx")  # already chunked: rechunked
    assert again.t2m.chunks == ((7,), (4,))
    xr.testing.assert_identical(again.compute(), lazy.compute())


@pytest.mark.parametrize("chunks", [(1, 8), (-1, None), "auto", 4, {0: 5}, [3, 4], ((5, 5), (8,)), (3, "auto")])
def test_normalize_chunks_is_dasks(chunks):
    manager = ZarrxChunkManager()
    arguments = {"shape": (10, 8), "dtype": np.dtype("float32"), "previous_chunks": (1, 8)}
    expected = da.core.normalize_chunks(chunks, **arguments)
    assert manager.normalize_chunks(chunks, **arguments) == expected


def test_inputs_other_than_lazily_indexed_data_go_to_dask():
    manager = ZarrxChunkManager()
    values = np.arange(12).reshape(3, 4)
    x = manager.from_array(values, (2, 2))
    assert layout_of(x) is None and x.chunks == ((2, 1), (2, 2))
    np.testing.assert_array_equal(x.compute(), values)
    assert manager.from_array(x, (3, 4)).chunks == ((3,), (4,))
    assert manager.is_chunked_array(x) is False  # dask's manager claims dask arrays


def test_locks_and_names_as_from_array_gives_them(giant_group):
    manager = ZarrxChunkManager()
    variable = xr.open_dataset(giant_group, engine="zarrx").t2m.variable
    # no name given: a token of the data and the blocks, as dask.array.from_array makes it
    assert variable.chunk({"time": 5}, chunked_array_type=manager).data.name.startswith("array-")
    assert (
        variable.chunk({"time": 5}, chunked_array_type=manager).data.name
        == variable.chunk({"time": 5}, chunked_array_type=manager).data.name
        != variable.chunk({"time": 4}, chunked_array_type=manager).data.name
    )
    chunked = variable.chunk({"time": 5}, chunked_array_type=manager, from_array_kwargs={"lock": True})
    assert chunked.data.dask.layers[chunked.data.name].io_deps  # a read layer, reads under the lock
    np.testing.assert_array_equal(chunked[:10].values, np.arange(40, dtype="float32").reshape(10, 4))


def test_worker_processes(tmp_path):
    distributed = pytest.importorskip("distributed")
    path = str(tmp_path / "giant.zarr")
    root = zarrx.create_group(path)
    t2m = root.create_array("t2m", shape=(300_000, 2), chunks=(1, 2), dtype="float32", fill_value=np.nan,
                            dimension_names=["time", "x"])
    t2m[:4] = np.arange(8, dtype="float32").reshape(4, 2)
    zarrx.consolidate_metadata(path)
    with (
        distributed.LocalCluster(
            n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None, silence_logs=40
        ) as cluster,
        distributed.Client(cluster),
    ):
        ds = xr.open_dataset(path, engine="zarrx", chunks={}, **OPT_IN)
        assert float(ds.isel(time=slice(0, 4)).t2m.mean().compute()) == 3.5
