"""OME-Zarr 0.5 images written by ome-zarr-py, read through zarrx (issue 28, item 6).

ome-zarr-py writes an image as a Zarr v3 group whose ``attributes["ome"]`` hold the
multiscales metadata, and one array per pyramid level (``s0``, ``s1``, ...), sharded when
``storage_options`` give ``shards``. Every level must read through zarrx exactly as through
zarr-python, from the folder and over HTTP, and the metadata must be the same.
"""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
import zarr
from ome_zarr.format import FormatV05
from ome_zarr.writer import write_image

import zarrx
import zarrx.xarray  # noqa: F401  (the engine)

from tests.http_server import serve


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    root = tmp_path_factory.mktemp("ome")
    image = np.random.default_rng(5).integers(0, 4000, size=(2, 8, 48, 40), dtype="uint16")
    for name, options in (("sharded.ome.zarr", {"chunks": (1, 4, 8, 8), "shards": (1, 8, 16, 16)}),
                          ("chunked.ome.zarr", {"chunks": (1, 4, 16, 16)})):  # fmt: skip
        group = zarr.open_group(root / name, mode="w", zarr_format=3)
        write_image(image, group, scale_factors=(2, 4), axes="czyx", fmt=FormatV05(), storage_options=options)
    return root, image


@pytest.mark.parametrize("name", ["sharded.ome.zarr", "chunked.ome.zarr"])
def test_every_level_reads_as_zarr_python(images, name):
    root, image = images
    ours = zarrx.open_group(root / name, mode="r")
    theirs = zarr.open_group(root / name, mode="r")
    assert ours.attrs["ome"] == theirs.attrs["ome"]
    assert ours.attrs["ome"]["version"] == "0.5"
    paths = [dataset["path"] for dataset in ours.attrs["ome"]["multiscales"][0]["datasets"]]
    assert len(paths) == 3
    for path in paths:
        array, peer = ours[path], theirs[path]
        assert (array.shape, array.dtype, array.chunks, array.shards) == (peer.shape, peer.dtype, peer.chunks, peer.shards)
        assert (array.shards is not None) == name.startswith("sharded")
        assert dict(array.attrs) == dict(peer.attrs)
        np.testing.assert_array_equal(array[...], peer[...])
        np.testing.assert_array_equal(array[1, 2:7, 5:, ::3], peer[1, 2:7, 5:, ::3])
        # one level as an xarray dataset (the levels share dimension names, not lengths)
        others = [other for other in paths if other != path]
        level = xr.open_dataset(root / name, engine="zarrx", drop_variables=others, consolidated=False).load()
        peer_level = xr.open_dataset(root / name, engine="zarr", drop_variables=others, consolidated=False).load()
        xr.testing.assert_identical(level, peer_level)
        assert level[path].dims == ("c", "z", "y", "x")
    np.testing.assert_array_equal(ours[paths[0]][...], image)


def test_levels_read_over_http_as_zarr_python(images):
    root, _ = images
    with serve(root) as server:
        url = f"{server.url}/sharded.ome.zarr"
        ours = zarrx.open_group(url, mode="r")
        theirs = zarr.open_group(url, mode="r")
        assert ours.attrs["ome"] == theirs.attrs["ome"]
        for dataset in ours.attrs["ome"]["multiscales"][0]["datasets"]:
            np.testing.assert_array_equal(ours[dataset["path"]][...], theirs[dataset["path"]][...])
