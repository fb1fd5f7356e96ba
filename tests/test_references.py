"""kerchunk references of real NetCDF4 and HDF5 files, read through zarrx (issue 28, item 5).

The files are written by netCDF4 and h5py (chunked with zlib + shuffle, contiguous, scalar,
char and string attributes, fill values, CF time, groups), their references made by kerchunk
(``SingleHdf5ToZarr``: Zarr v2 metadata inline, chunks as ``[path, offset, size]``), kept as a
dict, a JSON file, parquet (``kerchunk.df.refs_to_dataframe``) and combined along time
(``MultiZarrToZarr``). Each is read with every option form ``engine="zarr"`` takes and must give
the values of ``xr.open_dataset(netcdf_file)`` and what ``engine="zarr"`` reads from the same
references. Targets are local files, the range-serving server of :mod:`tests.http_server`, and
exactly ``python -m http.server`` (which answers ranges with the whole file).
"""

from __future__ import annotations

import json
import os
import time
import warnings

import fsspec
import h5py
import netCDF4
import numpy as np
import pytest
import xarray as xr
import zarr
from fsspec.implementations.reference import ReferenceFileSystem
from kerchunk.combine import MultiZarrToZarr
from kerchunk.df import refs_to_dataframe
from kerchunk.hdf import SingleHdf5ToZarr

import zarrx
import zarrx.xarray  # noqa: F401  (the engine)
from zarrx.errors import ReadOnlyError, StoreError, StoreTimeoutError
from zarrx.storage import LocalStore, OffsetByteRequest, RangeByteRequest, ReferenceStore, SuffixByteRequest, make_store
from zarrx.storage.remote import configure

from tests.http_server import FailFirst, serve, serve_plain, serve_silent

# fsspec reads parquet references with fastparquet (LazyReferenceMapper's engine), which pandas 3 deprecates
pytestmark = [pytest.mark.filterwarnings("ignore:The 'fastparquet' engine is deprecated"),
              pytest.mark.filterwarnings("ignore:The 'future.infer_string' option is deprecated")]  # fmt: skip


def write_netcdf(path, first_day: int) -> None:
    """Three days of a small CF dataset: every kind of variable netCDF4 writes."""
    with netCDF4.Dataset(path, "w") as nc:
        nc.title, nc.history = "references test", "written by netCDF4"
        nc.createDimension("time", None)
        nc.createDimension("y", 6)
        nc.createDimension("x", 8)
        nc.createDimension("nchar", 4)
        time = nc.createVariable("time", "f8", ("time",))
        time.units, time.calendar = "days since 2000-01-01", "standard"
        time[:] = np.arange(3) + first_day
        y = nc.createVariable("y", "f4", ("y",), contiguous=True)
        y.units = "m"
        y[:] = np.linspace(0, 1, 6)
        temp = nc.createVariable("temp", "f4", ("time", "y", "x"), zlib=True, shuffle=True, chunksizes=(1, 3, 4),
                                 fill_value=-999.0)  # fmt: skip
        temp.units, temp.long_name = "K", "temperature"
        data = np.arange(3 * 6 * 8, dtype="f4").reshape(3, 6, 8) + 1000 * first_day
        data[0, 0, 0] = -999.0  # the fill value: NaN once decoded
        temp[:] = data
        count = nc.createVariable("count", "i2", ("y", "x"), contiguous=True, fill_value=-1)
        count[:] = np.arange(48).reshape(6, 8) % 7 - 1  # some -1: masked
        scalar = nc.createVariable("scalar", "f8")
        scalar.comment = "a scalar"
        scalar.assignValue(3.5)
        label = nc.createVariable("label", "S1", ("y", "nchar"))
        label[:] = netCDF4.stringtochar(np.array(["ab", "cd", "ef", "gh", "ij", "kl"], "S4"))
        sub = nc.createGroup("sub")
        sub.createDimension("z", 5)
        z = sub.createVariable("z", "i4", ("z",))
        z.note = "in a group"
        z[:] = np.arange(5) * 3


def write_hdf5(path) -> None:
    """An HDF5 file as h5py writes it: gzip + shuffle chunks, contiguous, scalar, fill value, group."""
    with h5py.File(path, "w") as f:
        f.attrs["title"] = "h5py file"
        f.attrs["numbers"] = np.array([1, 2, 3], "i4")
        f.create_dataset("chunked", data=np.arange(200, dtype="<f8").reshape(10, 20) / 7, chunks=(4, 8),
                         compression="gzip", shuffle=True)  # fmt: skip
        f.create_dataset("contiguous", data=np.arange(30, dtype="<u2").reshape(5, 6))
        f.create_dataset("scalar", data=np.int64(-42))
        filled = f.create_dataset("filled", shape=(12,), dtype="<i4", chunks=(4,), fillvalue=7)
        filled[0:4] = np.arange(4)  # chunks 1 and 2 never written: the fill value
        f["chunked"].attrs["units"] = b"mm"
        f["chunked"].attrs["label"] = "a str attribute"
        f.create_group("g").create_dataset("inner", data=np.arange(6, dtype="<i8"), chunks=(3,), compression="gzip")


def with_url(refs: dict, url: str) -> dict:
    """The references with their targets at ``url``."""
    return {**refs, "refs": {k: [url, *v[1:]] if isinstance(v, list) else v for k, v in refs["refs"].items()}}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("references")
    for name, first_day in (("a.nc", 0), ("b.nc", 3)):
        write_netcdf(root / name, first_day)
    write_hdf5(root / "c.h5")
    refs = {name: SingleHdf5ToZarr(str(root / name), inline_threshold=0).translate() for name in ("a.nc", "b.nc", "c.h5")}
    (root / "a.json").write_text(json.dumps(refs["a.nc"]))
    refs_to_dataframe(refs["a.nc"], str(root / "a.parq"))
    combined = MultiZarrToZarr([refs["a.nc"], refs["b.nc"]], concat_dims=["time"],
                               identical_dims=["y", "count", "scalar", "label"]).translate()  # fmt: skip
    (root / "combined.json").write_text(json.dumps(combined))
    refs_to_dataframe(combined, str(root / "combined.parq"))
    return root, refs


def open_both(**kwargs):
    """``xr.open_dataset`` with engine zarrx and zarr (v2 metadata without .zmetadata: no consolidation)."""
    ours = xr.open_dataset(engine="zarrx", consolidated=False, **kwargs).load()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = xr.open_dataset(engine="zarr", consolidated=False, **kwargs).load()
    return ours, theirs


def assert_netcdf_values(ours: xr.Dataset, expected: xr.Dataset) -> None:
    """Every variable of the NetCDF file (decoded: CF time, masked fill values), values and attributes."""
    assert ours.attrs == expected.attrs
    assert set(expected.variables) <= set(ours.variables)
    for name in expected.variables:
        xr.testing.assert_identical(ours[name], expected[name])


def forms(root, refs):
    """Every way engine="zarr" takes references (name, open_dataset keyword arguments)."""
    a = refs["a.nc"]
    path = str(root / "a.nc")
    templated = {"version": 1, "templates": {"u": path},
                 "refs": {k: ["{{u}}", *v[1:]] if isinstance(v, list) else v for k, v in a["refs"].items()}}  # fmt: skip
    asynchronous = {"remote_protocol": "file", "remote_options": {"asynchronous": True}}
    return {
        "dict": {"filename_or_obj": "reference://", "storage_options": {"fo": a, "remote_protocol": "file"}},
        "json file": {"filename_or_obj": "reference://", "storage_options": {"fo": str(root / "a.json")}},
        "json URL, target_options": {"filename_or_obj": "reference://", "storage_options": {
            "fo": f"file://{root / 'a.json'}", "target_protocol": "file", "target_options": {"asynchronous": True},
            **asynchronous}},  # fmt: skip
        "asynchronous remote_options": {"filename_or_obj": "reference://", "storage_options": {"fo": a, **asynchronous}},
        "backend_kwargs": {"filename_or_obj": "reference://", "backend_kwargs": {"storage_options": {"fo": a, **asynchronous}}},
        "templates": {"filename_or_obj": "reference://", "storage_options": {"fo": templated}},
        "templates, simple_templates=False": {"filename_or_obj": "reference://", "storage_options": {
            "fo": templated, "simple_templates": False}},  # fmt: skip
        "template_overrides": {"filename_or_obj": "reference://", "storage_options": {
            "fo": {**templated, "templates": {"u": "elsewhere.nc"}}, "template_overrides": {"u": path}}},  # fmt: skip
        "parquet": {"filename_or_obj": "reference://", "storage_options": {"fo": str(root / "a.parq"), **asynchronous}},
        "fsspec mapper": {"filename_or_obj": fsspec.get_mapper("reference://", fo=a)},
        "mapper of the file system": {"filename_or_obj": ReferenceFileSystem(a).get_mapper("")},
        "zarr-python FsspecStore": {"filename_or_obj": zarr.storage.FsspecStore(
            ReferenceFileSystem(a, asynchronous=True, remote_protocol="file", remote_options={"asynchronous": True}),
            read_only=True)},  # fmt: skip
    }


FORMS = [
    "dict", "json file", "json URL, target_options", "asynchronous remote_options", "backend_kwargs", "templates",
    "templates, simple_templates=False", "template_overrides", "parquet", "fsspec mapper", "mapper of the file system",
    "zarr-python FsspecStore",
]  # fmt: skip


@pytest.mark.parametrize("form", FORMS)
def test_netcdf_references_read_as_the_netcdf_file_and_as_engine_zarr(files, form):
    root, refs = files
    ours, theirs = open_both(**forms(root, refs)[form])
    assert_netcdf_values(ours, xr.open_dataset(root / "a.nc").load())
    xr.testing.assert_identical(ours, theirs)


def test_a_reference_file_system_itself_is_a_store(files):
    root, refs = files
    ours = xr.open_dataset(ReferenceFileSystem(refs["a.nc"]), engine="zarrx", consolidated=False).load()
    assert_netcdf_values(ours, xr.open_dataset(root / "a.nc").load())
    assert isinstance(make_store(ReferenceFileSystem(refs["a.nc"])), ReferenceStore)


def test_references_are_read_only(files):
    _, refs = files
    group = zarrx.open_group("reference://", mode="r+", storage_options={"fo": refs["a.nc"]})
    with pytest.raises(ReadOnlyError, match="ReferenceStore.*read-only: references are read-only") as refused:
        group["y"][0] = 5
    assert "mode=" not in str(refused.value)  # no mode makes references writable
    with pytest.raises(ReadOnlyError, match="'y/0'.*read-only: references are read-only"):
        make_store("reference://", mode="r+", storage_options={"fo": refs["a.nc"]}).set("y/0", b"")


def test_groups_and_attributes_through_open_group(files):
    root, refs = files
    group = zarrx.open_group("reference://", mode="r", storage_options={"fo": refs["a.nc"]})
    theirs = zarr.open_group(fsspec.get_mapper("reference://", fo=refs["a.nc"]), mode="r", zarr_format=2)
    assert sorted(group.array_keys()) == sorted(theirs.array_keys())
    assert sorted(group.group_keys()) == ["sub"] == sorted(theirs.group_keys())
    with netCDF4.Dataset(root / "a.nc") as nc:
        assert dict(group.attrs) == {name: nc.getncattr(name) for name in nc.ncattrs()}
        nc.set_auto_mask(False)
        for name in ("temp", "count", "y", "label", "time"):
            np.testing.assert_array_equal(group[name][...], nc[name][...])
            np.testing.assert_array_equal(group[name][...], theirs[name][...])
        assert group["scalar"][()] == nc["scalar"][...] == theirs["scalar"][()]
        np.testing.assert_array_equal(group["sub/z"][...], nc["sub"]["z"][...])
        assert group["sub/z"].attrs["note"] == "in a group"
    sub = xr.open_dataset("reference://", engine="zarrx", group="sub", consolidated=False,
                          storage_options={"fo": refs["a.nc"]})  # fmt: skip
    np.testing.assert_array_equal(sub["z"], xr.open_dataset(root / "a.nc", group="sub")["z"])


def test_hdf5_references_read_as_h5py(files):
    root, refs = files
    group = zarrx.open_group("reference://", mode="r", storage_options={"fo": refs["c.h5"]})
    theirs = zarr.open_group(fsspec.get_mapper("reference://", fo=refs["c.h5"]), mode="r", zarr_format=2)
    with h5py.File(root / "c.h5") as f:
        assert group.attrs["title"] == f.attrs["title"] == theirs.attrs["title"]
        assert list(group.attrs["numbers"]) == [1, 2, 3]
        for name in ("chunked", "contiguous", "filled", "g/inner"):
            np.testing.assert_array_equal(group[name][...], f[name][...])
            np.testing.assert_array_equal(group[name][...], theirs[name][...])
            assert group[name].dtype == f[name].dtype
        assert group["scalar"][()] == f["scalar"][()] == -42
        assert dict(group["chunked"].attrs) == dict(theirs["chunked"].attrs)
        assert group["chunked"].attrs["label"] == "a str attribute"
    # kerchunk names h5py's dimensions phony_dim_0, 1, ... per array: xarray opens those that agree
    ours, theirs = open_both(filename_or_obj="reference://", drop_variables=["contiguous", "chunked"],
                             storage_options={"fo": refs["c.h5"]})  # fmt: skip
    xr.testing.assert_identical(ours, theirs)
    # the chunks never written hold h5py's fill value, which xarray masks (the zarr fill_value is _FillValue)
    assert ours["filled"].values[:4].tolist() == [0, 1, 2, 3] and np.isnan(ours["filled"].values[4:]).all()


@pytest.mark.parametrize("kind", ["json", "parquet"])
def test_combined_references_read_as_the_files_together(files, kind):
    root, _ = files
    fo = str(root / ("combined.json" if kind == "json" else "combined.parq"))
    ours, theirs = open_both(filename_or_obj="reference://", storage_options={"fo": fo, "remote_protocol": "file"})
    together = xr.open_mfdataset([root / "a.nc", root / "b.nc"], combine="nested", concat_dim="time",
                                 data_vars="minimal", coords="minimal", compat="override").load()  # fmt: skip
    assert ours.sizes["time"] == 6
    assert_netcdf_values(ours, together)
    xr.testing.assert_identical(ours, theirs)


def test_http_targets_with_ranges_read_as_engine_zarr(files):
    root, refs = files
    with serve(root) as server:
        fo = with_url(refs["a.nc"], f"{server.url}/a.nc")
        options = {"fo": fo, "remote_protocol": "http", "remote_options": {"asynchronous": True}}
        ours, theirs = open_both(filename_or_obj="reference://", storage_options=options)
        ranged = [request for request in server.requests if request.range]
    assert_netcdf_values(ours, xr.open_dataset(root / "a.nc").load())
    xr.testing.assert_identical(ours, theirs)
    assert ranged  # chunks were read as byte ranges of the file


def test_http_targets_served_by_python_http_server(files):
    # python -m http.server answers every GET with the whole file: zarrx cuts the reference's
    # bytes out of it (fsspec's _cat_file would take the whole file as the chunk)
    root, refs = files
    with serve_plain(root) as server:
        fo = with_url(refs["a.nc"], f"{server.url}/a.nc")
        for remote_options in ({}, {"asynchronous": True}):
            options = {"fo": fo, "remote_protocol": "http", "remote_options": remote_options}
            ours = xr.open_dataset("reference://", engine="zarrx", consolidated=False, storage_options=options).load()
            assert_netcdf_values(ours, xr.open_dataset(root / "a.nc").load())


def test_s3_targets_read_as_engine_zarr(files):
    import s3fs

    from tests.s3_server import serve_s3

    root, refs = files
    with serve_s3() as server:
        credentials = {"endpoint_url": server.url, "key": "test", "secret": "test-secret"}
        fs = s3fs.S3FileSystem(skip_instance_cache=True, **credentials)
        fs.mkdir("files")
        fs.put_file(str(root / "a.nc"), "files/a.nc")
        options = {"fo": with_url(refs["a.nc"], "s3://files/a.nc"), "remote_protocol": "s3",
                   "remote_options": {**credentials, "asynchronous": True}}  # fmt: skip
        ours, theirs = open_both(filename_or_obj="reference://", storage_options=options)
        gets = [request for request in server.requests if request.method == "GET" and "a.nc" in request.path]
    assert_netcdf_values(ours, xr.open_dataset(root / "a.nc").load())
    xr.testing.assert_identical(ours, theirs)
    assert gets


def test_http_targets_get_zarrx_retries_and_concurrency_limit(files):
    # the file's host answers 503 twice, and zarrx_max_concurrency caps the requests to it
    root, refs = files
    with serve(root, delay=0.02, fail=FailFirst(2, 503, "a.nc")) as server:
        options = {"fo": with_url(refs["a.nc"], f"{server.url}/a.nc"), "remote_protocol": "http",
                   "remote_options": {"asynchronous": True}, "zarrx_max_concurrency": 3}  # fmt: skip
        ours = xr.open_dataset("reference://", engine="zarrx", consolidated=False, storage_options=options).load()
        statuses = [request.status for request in server.requests]
        peak = server.max_in_flight()
    assert_netcdf_values(ours, xr.open_dataset(root / "a.nc").load())
    assert statuses.count(503) == 2 and peak <= 3


def test_a_target_that_never_answers_is_a_timeout_naming_the_key(files):
    _, refs = files
    with serve_silent() as url:
        options = {"fo": with_url(refs["a.nc"], f"{url}/a.nc"), "remote_protocol": "http", "zarrx_request_deadline": 1,
                   "zarrx_retries": 0}  # fmt: skip
        group = zarrx.open_group("reference://", mode="r", storage_options=options)
        started = time.monotonic()
        with pytest.raises(StoreTimeoutError, match=r"'y/0'.*a\.nc"):
            group["y"][...]
    assert time.monotonic() - started < 10


def test_byte_ranges_listing_and_sharded_reads_as_on_the_folder(tmp_path):
    # references to the files of a sharded Zarr v3 folder: partial shard reads are suffix and
    # offset ranges of a reference, resolved inside its [offset, offset + size)
    values = np.arange(40 * 30, dtype="int32").reshape(40, 30)
    zarrx.create_array(tmp_path / "s.zarr", shape=values.shape, dtype=values.dtype, chunks=(5, 5), shards=(20, 15))[...] = values
    folder = LocalStore(tmp_path / "s.zarr", read_only=True)
    blob = tmp_path / "blob.bin"  # every value in one file, 7 bytes apart, as a NetCDF file holds chunks
    refs, offset = {}, 3
    with open(blob, "wb") as file:
        file.write(b"\0" * offset)
        for key in sorted(folder.list_prefix("")):
            value = folder.get(key)
            refs[key] = value.decode() if key.endswith("zarr.json") else [str(blob), offset, len(value)]
            file.write(value + b"\xff" * 7)
            offset += len(value) + 7
    store = make_store("reference://", storage_options={"fo": {"version": 1, "refs": refs}})
    keys = sorted(folder.list_prefix(""))
    assert sorted(store.list_prefix("")) == keys and store.list_dir("") == folder.list_dir("")
    assert store.get_many([*keys, "c/9/9"]) == {**folder.get_many(keys), "c/9/9": None}
    shard = next(key for key in keys if key.startswith("c/"))
    for byte_range in (RangeByteRequest(2, 11), OffsetByteRequest(5), SuffixByteRequest(16), RangeByteRequest(0, 10**6)):
        assert store.get(shard, byte_range) == folder.get(shard, byte_range), byte_range
    array = zarrx.open_array("reference://", mode="r", storage_options={"fo": {"version": 1, "refs": refs}})
    np.testing.assert_array_equal(array[...], values)
    np.testing.assert_array_equal(array[3:17, 4:9], values[3:17, 4:9])  # a part of one shard


def test_a_missing_target_file_is_an_error_naming_key_and_reference(files, tmp_path):
    _, refs = files
    fo = with_url(refs["a.nc"], str(tmp_path / "gone.nc"))
    group = zarrx.open_group("reference://", mode="r", storage_options={"fo": fo})
    with pytest.raises(StoreError, match=r"'temp/0\.0\.0'.*gone\.nc.*does not exist"):
        group["temp"][...]


def test_an_offset_past_the_end_of_the_file_is_an_error_naming_key_and_reference(files):
    root, refs = files
    size = os.path.getsize(root / "a.nc")
    fo = {**refs["a.nc"], "refs": {**refs["a.nc"]["refs"], "y/0": [str(root / "a.nc"), size - 8, 24]}}
    group = zarrx.open_group("reference://", mode="r", storage_options={"fo": fo})
    with pytest.raises(StoreError, match=rf"'y/0'.*\[.*a\.nc', {size - 8}, 24\].*asks for 24 bytes.*holds 8"):
        group["y"][...]
    # the other references still read
    np.testing.assert_array_equal(group["count"][...], xr.open_dataset(root / "a.nc", mask_and_scale=False)["count"])


@pytest.mark.parametrize("entry", [["a.nc", "ten", 4], ["a.nc", 10], [17, 0, 4], ["a.nc", -5, 4]])
def test_a_malformed_reference_is_an_error_naming_it(files, entry):
    _, refs = files
    fo = {**refs["a.nc"], "refs": {**refs["a.nc"]["refs"], "y/0": entry}}
    group = zarrx.open_group("reference://", mode="r", storage_options={"fo": fo})
    with pytest.raises(StoreError, match=r"'y/0'.*reference"):
        group["y"][...]


@pytest.mark.parametrize("kind", ["json", "parquet"])
def test_malformed_reference_files_are_errors_naming_them(files, tmp_path, kind):
    if kind == "json":
        fo = tmp_path / "bad.json"
        fo.write_text('{"version": 1, "refs": {".zgroup": ')
    else:
        fo = tmp_path / "bad.parq"
        fo.mkdir()
        (fo / ".zmetadata").write_text('{"record_size": 10, "metadata": {"t/.zarray": {"shape": [4], ')
    with pytest.raises(StoreError, match=rf"cannot load the references '.*bad\.{kind[:4]}"):
        zarrx.open_group("reference://", mode="r", storage_options={"fo": str(fo)})
    with pytest.raises(StoreError, match=rf"bad\.{kind[:4]}"):
        xr.open_dataset("reference://", engine="zarrx", storage_options={"fo": str(fo)})


def test_targets_get_zarrx_defaults_for_their_protocol():
    _, options = configure("reference://", {"fo": "r.json", "remote_protocol": "https",
                                            "remote_options": {"asynchronous": True, "headers": {"A": "b"}}})  # fmt: skip
    remote = options["remote_options"]
    assert "asynchronous" not in remote and remote["headers"] == {"A": "b"}
    assert remote["client_kwargs"]["timeout"].total == 60 and remote["get_client"].limit >= 64
