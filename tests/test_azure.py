"""Azure Blob Storage (``az://``, ``abfs://``) against Azurite, the emulator, started by the tests (issue 28).

zarrx reads and writes Azure URLs through obstore by default and through fsspec's adlfs when asked
(or when an option only adlfs takes is given), with the storage options adlfs users pass today:
here a connection string, which is what Azurite's and the Azure portal's docs give. What zarrx
writes, engine="zarr" (zarr-python over adlfs) reads identically, and the other way round.
"""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
import zarr
from obstore.store import AzureStore

import zarrx
import zarrx.xarray  # noqa: F401 (the .zarrx accessor)
from zarrx.errors import StoreError
from zarrx.storage import FsspecStore, ObstoreStore, make_store

from tests.azurite import ACCOUNT, KEY, serve_azurite


@pytest.fixture(scope="module")
def azure():
    with serve_azurite() as server:
        server.container("zarrx")
        yield server


def _dataset() -> xr.Dataset:
    rng = np.random.default_rng(3)
    return xr.Dataset(
        {"t": (("time", "lat"), rng.random((24, 16), dtype="f4"), {"units": "K"}), "n": ("time", np.arange(24))},
        coords={"time": np.arange(24), "lat": np.linspace(-60, 60, 16)},
        attrs={"title": "azure"},
    ).chunk({"time": 6})


def test_az_urls_with_a_connection_string_go_through_obstore_and_engine_zarr_reads_them(azure):
    options = {"connection_string": azure.connection_string}
    assert isinstance(make_store("az://zarrx/ours.zarr", storage_options=options), ObstoreStore)
    by_adlfs = make_store("abfs://zarrx/ours.zarr", storage_options={**options, "zarrx_backend": "fsspec"})
    assert isinstance(by_adlfs, FsspecStore)
    ds = _dataset()
    ds.zarrx.to_zarr("az://zarrx/ours.zarr", storage_options=options)
    theirs = xr.open_dataset("az://zarrx/ours.zarr", engine="zarr", storage_options=options).load()
    xr.testing.assert_identical(theirs, ds.load())
    for backend in ("obstore", "fsspec"):
        chosen = {**options, "zarrx_backend": backend}
        ours = xr.open_dataset("az://zarrx/ours.zarr", engine="zarrx", storage_options=chosen)
        xr.testing.assert_identical(ours.load(), theirs)


def test_what_zarr_python_wrote_over_adlfs_is_listed_and_read_through_obstore(azure):
    options = {"connection_string": azure.connection_string}
    ds = _dataset()
    tree = xr.DataTree.from_dict({"/early": ds.isel(time=slice(0, 12)), "/late/r": ds.isel(time=slice(12, None))})
    # not consolidated: zarrx finds the groups and arrays by listing the container's folders
    tree.to_zarr("az://zarrx/theirs.zarr", zarr_format=3, consolidated=False, storage_options=options)
    assert isinstance(make_store("az://zarrx/theirs.zarr", storage_options=options), ObstoreStore)
    ours = xr.open_datatree("az://zarrx/theirs.zarr", engine="zarrx", storage_options=options).load()
    assert sorted(node.path for node in ours.subtree) == ["/", "/early", "/late", "/late/r"]
    xr.testing.assert_identical(ours["late/r"].to_dataset(), ds.isel(time=slice(12, None)).load())
    # adlfs keeps the listings it made while writing (fsspec's instance cache hands the writer's
    # file system to the next open with the same options): engine="zarr" then finds no groups at
    # all. zarrx's fsspec back end lists afresh; engine="zarr" does too, told not to cache
    fresh = {**options, "use_listings_cache": False}
    theirs = xr.open_datatree("az://zarrx/theirs.zarr", engine="zarr", storage_options=fresh, consolidated=False)
    xr.testing.assert_identical(ours, theirs.load())
    adlfs_options = {**options, "zarrx_backend": "fsspec"}
    by_fsspec = xr.open_datatree("az://zarrx/theirs.zarr", engine="zarrx", storage_options=adlfs_options)
    xr.testing.assert_identical(by_fsspec.load(), ours)


def test_an_obstore_azure_store_is_taken_as_given_with_byte_ranges_of_shards(azure):
    def store():
        return AzureStore("zarrx", prefix="sharded.zarr", endpoint=azure.url, account_name=ACCOUNT, account_key=KEY,
                          client_options={"allow_http": True})  # fmt: skip

    values = np.arange(64 * 64, dtype="i4").reshape(64, 64)
    array = zarrx.create_array(store(), shape=(64, 64), chunks=(8, 8), shards=(32, 32), dtype="i4")
    array[:] = values
    np.testing.assert_array_equal(zarrx.open_array(store())[5:40, 3:9], values[5:40, 3:9])
    np.testing.assert_array_equal(zarr.open_array(zarr.storage.ObjectStore(store(), read_only=True))[:], values)
    by_url = zarrx.open_array("az://zarrx/sharded.zarr", storage_options={"connection_string": azure.connection_string})
    np.testing.assert_array_equal(by_url[:], values)


def test_azure_errors_name_the_key_and_never_the_account_key(azure):
    zarrx.create_array("az://zarrx/e.zarr", shape=(4,), chunks=(2,), dtype="i4",
                       storage_options={"connection_string": azure.connection_string})[:] = 1  # fmt: skip
    # a key of the right form that is not the account's
    wrong = azure.connection_string.replace(KEY, "d3Jvbmc" + KEY[7:])
    for backend in ("obstore", "fsspec"):
        options = {"connection_string": wrong, "zarrx_backend": backend, "zarrx_retries": 0}
        with pytest.raises(StoreError, match="zarr.json") as raised:
            zarrx.open_array("az://zarrx/e.zarr", storage_options=options)
        assert KEY[8:40] not in str(raised.value) and "d3Jvbmc" not in str(raised.value)
    options = {"connection_string": azure.connection_string}
    with pytest.raises(StoreError, match="nowhere"):
        zarrx.open_array("az://nowhere/e.zarr", storage_options=options)


def test_worker_processes_writing_parts_of_the_same_blobs_keep_every_value(azure):
    # dask's da.store without its lock, blocks of 3000 across chunks of 2000: two processes write
    # parts of every other blob; each partial blob is written only over the ETag read (If-Match)
    import dask.array as da
    from distributed import Client, LocalCluster

    options = {"connection_string": azure.connection_string}
    x = da.arange(60_000, chunks=3000, dtype="i4")
    with LocalCluster(n_workers=2, threads_per_worker=2, processes=True, dashboard_address=":0") as cluster:
        with Client(cluster):
            for attempt in range(2):
                arr = zarrx.create_array(f"az://zarrx/race{attempt}.zarr", shape=(60_000,), chunks=(2000,), dtype="i4",
                                         storage_options=options)  # fmt: skip
                da.store(x, arr, lock=False)
                lost = np.flatnonzero(arr[...] != np.arange(60_000))
                assert lost.size == 0, f"attempt {attempt}: {lost.size} values lost, e.g. at {lost[:8].tolist()}"


def test_kerchunk_references_of_a_netcdf_blob_read_as_the_file_reads(azure, tmp_path):
    # Planetary Computer's way: references (kerchunk) to chunks of NetCDF files in blobs. adlfs
    # serves abfs:// and az://; fsspec's reference file system reads abfs:// references only
    # with remote_protocol="abfs" (engine="zarr" fails with "az"), zarrx with either
    import json

    from kerchunk.hdf import SingleHdf5ToZarr

    expected = _dataset().drop_vars("n").load()
    expected.to_netcdf(tmp_path / "f.nc", engine="netcdf4", encoding={"t": {"zlib": True, "chunksizes": (6, 16)}})
    fs = azure.filesystem()
    fs.put(str(tmp_path / "f.nc"), "zarrx/f.nc")
    with fs.open("zarrx/f.nc") as file:  # no chunk inlined in the references: each is read from the blob
        references = SingleHdf5ToZarr(file, "abfs://zarrx/f.nc", inline_threshold=0).translate()
    assert sum(isinstance(value, list) for value in references["refs"].values()) >= 4
    (tmp_path / "refs.json").write_text(json.dumps(references))
    from_file = xr.open_dataset(tmp_path / "f.nc").load()
    for protocol in ("abfs", "az"):
        options = {"fo": str(tmp_path / "refs.json"), "remote_protocol": protocol,
                   "remote_options": {"connection_string": azure.connection_string}}  # fmt: skip
        ours = xr.open_dataset("reference://", engine="zarrx", backend_kwargs={"storage_options": options})
        xr.testing.assert_identical(ours.load(), from_file)
    options["remote_protocol"], options["remote_options"]["asynchronous"] = "abfs", True
    theirs = xr.open_dataset("reference://", engine="zarr",
                             backend_kwargs={"storage_options": options, "consolidated": False})  # fmt: skip
    xr.testing.assert_equal(theirs.load(), from_file)
