"""``reference://`` (kerchunk JSON) opened with the options ``engine="zarr"`` needs (issue 28,
item 5): ``remote_options={"asynchronous": True}``, which zarr-python 3 requires, works with
``engine="zarrx"`` too, with the same values.

The references point into a Zarr v2 folder served over HTTP by :mod:`tests.http_server` (in a
thread of this process), written in kerchunk's version 1 format: metadata inline, chunks as
``[url, offset, length]``.
"""

from __future__ import annotations

import json
import os
import warnings

import numpy as np
import pytest
import xarray as xr

import zarrx.xarray  # noqa: F401  (the engine)
from zarrx.storage.remote import configure

from tests.http_server import serve


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    root = tmp_path_factory.mktemp("refs")
    ds = xr.Dataset({"t": (("x", "y"), np.arange(12.0).reshape(3, 4))}, coords={"x": [10, 20, 30]})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr-python on Zarr v2 without consolidated metadata
        ds.to_zarr(root / "d.zarr", mode="w", zarr_format=2, consolidated=False)
    with serve(root) as server:
        refs = {}
        for folder, _, files in os.walk(root / "d.zarr"):
            for name in files:
                path = os.path.join(folder, name)
                key = os.path.relpath(path, root / "d.zarr").replace(os.sep, "/")
                if name.startswith("."):
                    refs[key] = open(path).read()
                else:
                    refs[key] = [f"{server.url}/d.zarr/{key}", 0, os.path.getsize(path)]
        (root / "refs.json").write_text(json.dumps({"version": 1, "refs": refs}))
        yield str(root / "refs.json"), ds


def test_asynchronous_remote_options_read_as_with_engine_zarr(references):
    fo, ds = references
    options = {"fo": fo, "remote_protocol": "http", "remote_options": {"asynchronous": True}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = xr.open_dataset("reference://", engine="zarr", storage_options=options, consolidated=False).load()
    ours = xr.open_dataset("reference://", engine="zarrx", storage_options=options, consolidated=False).load()
    xr.testing.assert_identical(ours, theirs)
    np.testing.assert_array_equal(ours["t"], ds["t"])


def test_asynchronous_is_left_out_wherever_it_is_given():
    _, options = configure(
        "simplecache::reference://",
        {"asynchronous": True, "fo": "r.json", "remote_options": {"asynchronous": True, "anon": True},
         "reference": {"asynchronous": True, "target_options": {"asynchronous": True}}},
    )  # fmt: skip
    assert "asynchronous" not in options and options["remote_options"] == {"anon": True}
    assert options["reference"] == {"target_options": {}}
