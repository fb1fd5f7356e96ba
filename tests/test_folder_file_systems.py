"""fsspec's ``DirFileSystem`` ("a folder of another file system"), as users root a store with it.

``fsspec.filesystem("dir", path=..., fs=...)`` says it is async whatever it wraps, so a folder
of the local disk failed on its first read (``'LocalFileSystem' object has no attribute
'_cat_file'``; zarr-python refuses it too: "can't use asynchronous with non-async fs"). zarrx
uses it as the file system it wraps, below its folder: local files written atomically, S3
objects read and written as S3's, a web server read-only with its keys quoted.
"""

from __future__ import annotations

import os
import uuid

import fsspec
import numpy as np
import pytest
import xarray as xr
import zarr
from fsspec.implementations.dirfs import DirFileSystem
from fsspec.implementations.http import HTTPFileSystem

import zarrx
import zarrx.xarray  # noqa: F401 (ds.zarrx)
from zarrx.errors import ReadOnlyError, StoreError
from zarrx.storage import FsspecStore, make_store

VALUES = np.arange(60, dtype="i4").reshape(6, 10)


def _dataset():
    return xr.Dataset({"t": (("y", "x"), VALUES.astype("f8"))}, coords={"y": np.arange(6), "x": np.arange(10) * 2})


def test_a_folder_of_the_local_disk_is_read_and_written_as_the_local_disk(tmp_path):
    folder = fsspec.filesystem("dir", path=str(tmp_path / "base"))
    os.mkdir(tmp_path / "base")
    array = zarrx.create_array(folder.get_mapper("a.zarr"), shape=(6, 10), chunks=(2, 5), dtype="i4")
    array[:] = VALUES
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "base" / "a.zarr"))[:], VALUES)
    np.testing.assert_array_equal(zarrx.open_array(folder.get_mapper("a.zarr"))[2:5, 3:9], VALUES[2:5, 3:9])
    # and what zarr-python wrote to the folder, read through the DirFileSystem
    zarr.create_array(str(tmp_path / "base" / "b.zarr"), shape=(6, 10), chunks=(3, 3), dtype="i4")[:] = VALUES * 2
    np.testing.assert_array_equal(zarrx.open_array(folder.get_mapper("b.zarr"))[:], VALUES * 2)
    # xarray, both ways
    _dataset().zarrx.to_zarr(folder.get_mapper("ds.zarr"))
    xr.testing.assert_identical(xr.open_dataset(folder.get_mapper("ds.zarr"), engine="zarrx").load(), _dataset())
    xr.testing.assert_identical(xr.open_dataset(tmp_path / "base" / "ds.zarr", engine="zarr").load(), _dataset())
    # written as zarrx writes local files: atomically (no temporary file left) and locked per object
    assert make_store(folder.get_mapper("a.zarr"), mode="r+").locks_objects
    assert not [name for _, _, names in os.walk(tmp_path) for name in names if "tmp" in name]


def test_nested_folders_and_a_store_made_from_the_file_system(tmp_path):
    (tmp_path / "x" / "y").mkdir(parents=True)
    inner = DirFileSystem(path=str(tmp_path / "x"), fs=fsspec.filesystem("file"))
    outer = DirFileSystem(path="y", fs=inner)
    FsspecStore(outer, "n.zarr").set("zarr.json", b"{}")
    assert (tmp_path / "x" / "y" / "n.zarr" / "zarr.json").read_bytes() == b"{}"
    assert FsspecStore(outer, "n.zarr").get("zarr.json") == b"{}"


def test_a_root_climbing_out_of_a_local_folder_is_refused(tmp_path):
    (tmp_path / "base").mkdir()
    (tmp_path / "outside.zarr").mkdir()
    with pytest.raises(StoreError, match="climbs out of the folder"):
        FsspecStore(fsspec.filesystem("dir", path=str(tmp_path / "base")), "../outside.zarr")


def test_a_folder_of_a_web_server_is_read_as_the_web_server(tmp_path):
    from tests.http_server import serve_plain

    group = zarrx.create_group(tmp_path / "site" / "g.zarr")
    for name in ("plain", "x#1 (K)"):
        group.create_array(name, shape=(6, 10), chunks=(2, 5), dtype="i4")[:] = VALUES
    zarrx.consolidate_metadata(tmp_path / "site" / "g.zarr")
    with serve_plain(tmp_path) as server:
        folder = DirFileSystem(path=f"{server.url}/site", fs=HTTPFileSystem())
        opened = zarrx.open_group(folder.get_mapper("g.zarr"))
        for name in ("plain", "x#1 (K)"):  # keys quoted into the URL, as below the URL itself
            np.testing.assert_array_equal(opened[name][:], VALUES)
        with pytest.raises(ReadOnlyError):
            zarrx.open_array(folder.get_mapper("g.zarr/plain"), mode="r+")[0, 0] = 1
    assert zarr.open_array(str(tmp_path / "site" / "g.zarr" / "plain"))[0, 0] == VALUES[0, 0]


def test_a_folder_of_a_bucket_is_read_and_written_as_the_bucket():
    s3fs = pytest.importorskip("s3fs")
    pytest.importorskip("moto.server")
    from tests.s3_server import serve_s3

    with serve_s3() as server:
        options = {"endpoint_url": server.url, "key": "test", "secret": "test"}
        bucket = f"dirfs-{uuid.uuid4().hex[:12]}"
        s3 = s3fs.S3FileSystem(**options, skip_instance_cache=True)
        s3.mkdir(bucket)
        folder = DirFileSystem(path=f"{bucket}/base", fs=s3)
        _dataset().zarrx.to_zarr(folder.get_mapper("ds.zarr"))
        xr.testing.assert_identical(xr.open_dataset(folder.get_mapper("ds.zarr"), engine="zarrx").load(), _dataset())
        opened = xr.open_dataset(f"s3://{bucket}/base/ds.zarr", engine="zarr", storage_options=options)
        xr.testing.assert_identical(opened.load(), _dataset())
        # S3's own writes: conditional where zarrx asks for them (partial chunks, consolidated metadata)
        assert make_store(folder.get_mapper("ds.zarr"), mode="r+").conditional_writes
