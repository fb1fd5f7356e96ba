"""engine="zarrx" and ds.zarrx.to_zarr against xarray's own zarr engine, on the same stores.

Every comparison opens one store with both engines and asks ``xr.testing.assert_identical``.
Stores come from xarray's writer (zarr-python, format 3 and 2) and from zarrx's writer (format 3
and 2).
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import warnings

import dask
import dask.array as da
from dask.delayed import Delayed
import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr

import zarrx
import zarrx.xarray  # registers the .zarrx accessors
from zarrx.errors import ChunkAlignmentError, ContainsGroupError, InvalidPathError, MetadataError, UsageError
from zarrx.storage import LocalStore
from zarrx.xarray import MissingDimensionsError, ZarrxBackendEntrypoint

from tests.counting import CountingStore

pytestmark = pytest.mark.filterwarnings(
    # zarr-python warns about its own v3 string / fixed-length types and about writing v2 consolidated metadata
    "ignore::UserWarning",
    "ignore::FutureWarning",
    "ignore::RuntimeWarning",
)


class ListingCountingStore(CountingStore):
    """CountingStore that also counts listings; ``calls`` is every request the store answered."""

    def reset(self):
        super().reset()
        self.listings = 0
        self.single_gets = 0
        self.batch_sizes = []

    def get_many(self, keys):
        self.batch_sizes.append(len(keys))
        return super().get_many(keys)

    def get(self, key, byte_range=None):
        self.single_gets += 1
        return super().get(key, byte_range)

    def list_dir(self, prefix):
        self.listings += 1
        return super().list_dir(prefix)

    def list_prefix(self, prefix):
        self.listings += 1
        return super().list_prefix(prefix)

    @property
    def calls(self):
        return self.single_gets + self.batches + self.listings


# -- datasets --------------------------------------------------------------------------------------
def cf_dataset() -> xr.Dataset:
    """A small climate-model-like dataset touching every CF coding xarray does for Zarr."""
    rng = np.random.default_rng(42)
    time = pd.date_range("2000-01-01", periods=6, freq="6h")
    temperature = (280 + 10 * rng.random((6, 3, 4))).astype("float32")
    temperature[0, 0, 0] = np.nan
    precipitation = rng.random((6, 3, 4)) * 50
    precipitation[1, 1, 1] = np.nan
    ds = xr.Dataset(
        {
            "tas": (("time", "lat", "lon"), temperature, {"units": "K", "standard_name": "air_temperature"}),
            # packed: int16 on disk with scale/offset and a _FillValue standing for NaN
            "pr": (
                ("time", "lat", "lon"),
                precipitation,
                {"units": "mm"},
                {"dtype": "int16", "scale_factor": 0.01, "add_offset": 20.0, "_FillValue": -32768},
            ),
            "land": (("lat", "lon"), rng.random((3, 4)) > 0.5),
            "station": (("lon",), np.array(["Oslo", "Lima", "", "Ürümqi"], dtype=object)),
            "code": (("lon",), np.array(["ab", "c", "def", "g"])),  # fixed-length unicode
            "lead": (("time",), pd.to_timedelta(np.arange(6) * 90, "min")),
            "model_time": (
                ("time",),
                xr.date_range("2000-01-01", periods=6, freq="D", calendar="noleap", use_cftime=True),
            ),
            "day360": (
                ("time",),
                xr.date_range("2000-02-28", periods=6, freq="D", calendar="360_day", use_cftime=True),
                {},
                {"units": "days since 1999-01-01", "calendar": "360_day"},
            ),
            "count": (("lat",), np.array([1, 2, 3], dtype="uint8")),
            "mask_nan": (("lon",), np.array([1.0, np.nan, 3.0, np.nan])),
            "time_bnds": (("time", "nv"), np.stack([time.values, time.values + np.timedelta64(6, "h")], axis=1)),
        },
        coords={
            "time": ("time", time, {"bounds": "time_bnds"}),
            "lat": ("lat", np.array([-10.0, 0.0, 10.0], dtype="float32"), {"units": "degrees_north"}),
            "lon": ("lon", np.arange(4) * 90.0, {"units": "degrees_east"}),
            "height": ((), 2.0, {"units": "m"}),  # scalar coordinate (stored in 'coordinates')
            "area": (("lat", "lon"), np.ones((3, 4))),
        },
        attrs={"title": "zarrx interop", "Conventions": "CF-1.8", "history": ["made", "by", "tests"]},
    )
    ds.time.encoding = {"units": "hours since 2000-01-01", "calendar": "proleptic_gregorian"}
    return ds


WRITERS = ("zarr3", "zarr2", "zarrx")


def write(ds, path, writer, **kwargs):
    if writer == "zarrx":
        ds.zarrx.to_zarr(path, mode="w", **kwargs)
    else:
        ds.to_zarr(path, mode="w", zarr_format=int(writer[-1]), **kwargs)
    return path


@pytest.fixture(scope="module", params=WRITERS)
def cf_store(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(request.param) / "cf.zarr"
    write(cf_dataset(), str(path), request.param)
    return request.param, str(path)


def open_both(path, **kwargs):
    return xr.open_dataset(path, engine="zarr", **kwargs), xr.open_dataset(path, engine="zarrx", **kwargs)


def outcome(open_function):
    """The opened dataset, or the type of the error opening raised (both engines must agree)."""
    try:
        return open_function().load()
    except Exception as error:  # noqa: BLE001 - compared, not swallowed
        return type(error)


# -- reading: same as engine="zarr" ----------------------------------------------------------------
DECODERS = ("mask_and_scale", "decode_times", "decode_timedelta", "use_cftime", "concat_characters", "decode_coords")
DECODING = [
    dict(zip(DECODERS, combo))
    for combo in itertools.product(
        (True, False), (True, False), (None, True, False), (None, True), (True, False), (True, False, "all")
    )
]


def test_identical_for_every_decoding_combination(cf_store):
    writer, path = cf_store
    for kwargs in [{"decode_cf": False}, *DECODING]:
        expected = outcome(lambda: xr.open_dataset(path, engine="zarr", **kwargs))
        actual = outcome(lambda: xr.open_dataset(path, engine="zarrx", **kwargs))
        if isinstance(expected, type):
            assert actual is expected, (writer, kwargs)
        else:
            xr.testing.assert_identical(actual, expected)


def test_decoded_values_are_the_written_ones(cf_store):
    writer, path = cf_store
    ds = xr.open_dataset(path, engine="zarrx")
    original = cf_dataset()
    xr.testing.assert_allclose(ds.pr, original.pr, atol=0.006)
    assert ds.pr.encoding["scale_factor"] == 0.01 and ds.pr.encoding["dtype"] == np.dtype("int16")
    xr.testing.assert_identical(ds.tas, original.tas)
    assert ds.time.encoding["units"] == "hours since 2000-01-01"
    assert ds.model_time.encoding["calendar"] == "noleap"
    assert list(ds.station.values) == ["Oslo", "Lima", "", "Ürümqi"]
    assert ds.land.dtype == bool and ds.lead.dtype.kind == "m"
    assert "height" in ds.coords and "area" in ds.coords
    assert ds.attrs["history"] == ["made", "by", "tests"]


@pytest.mark.parametrize("chunks", [None, {}, "auto", -1])
def test_identical_with_dask_chunks(cf_store, chunks):
    _, path = cf_store
    expected = outcome(lambda: xr.open_dataset(path, engine="zarr", chunks=chunks))
    actual = outcome(lambda: xr.open_dataset(path, engine="zarrx", chunks=chunks))
    if isinstance(expected, type):  # dask cannot auto-chunk the cftime (object) variables
        assert actual is expected
        return
    xr.testing.assert_identical(actual, expected)


def test_zarrx_written_store_opens_identically_to_xarray_written_one(tmp_path):
    ds = cf_dataset()
    ours = write(ds, str(tmp_path / "zarrx.zarr"), "zarrx")
    theirs = write(ds, str(tmp_path / "zarr.zarr"), "zarr3")
    for engine in ("zarr", "zarrx"):
        xr.testing.assert_identical(
            xr.open_dataset(ours, engine=engine), xr.open_dataset(theirs, engine="zarr")
        )
    # the metadata zarrx writes are the ones xarray's engine writes (up to canonical defaults)
    for name in ds.variables:
        a, b = zarr.open_array(ours, path=name), zarr.open_array(theirs, path=name)
        layout = [(x.dtype, x.shape, x.chunks, x.metadata.dimension_names) for x in (a, b)]
        assert layout[0] == layout[1]
        assert dict(a.attrs) == dict(b.attrs)
        np.testing.assert_array_equal(np.asarray(a.fill_value), np.asarray(b.fill_value))


def test_datasets_move_between_engines_and_writers(tmp_path):
    """Encodings carry over: numcodecs objects (engine="zarr" on v2) into zarrx's writer, and the
    JSON codecs engine="zarrx" reports into xarray's own writer."""
    source = xr.open_dataset(write(cf_dataset(), str(tmp_path / "v2.zarr"), "zarr2"), engine="zarr")
    assert type(source.tas.encoding["compressors"][0]).__name__ == "Blosc"
    source.zarrx.to_zarr(str(tmp_path / "v3.zarr"))
    xr.testing.assert_identical(xr.open_dataset(str(tmp_path / "v3.zarr"), engine="zarr"), source)
    compressor = zarrx.open_array(str(tmp_path / "v3.zarr"), path="tas").metadata.codecs.bytes_bytes[0]
    assert compressor.to_json()["name"] == "blosc" and compressor.to_json()["configuration"]["cname"] == "lz4"
    reopened = xr.open_dataset(str(tmp_path / "v3.zarr"), engine="zarrx")
    reopened.to_zarr(str(tmp_path / "again.zarr"), zarr_format=3)
    xr.testing.assert_identical(xr.open_dataset(str(tmp_path / "again.zarr"), engine="zarr"), source)


def test_zarrx_writes_zarr_v2_readable_by_xarray(tmp_path):
    ds = cf_dataset()
    path = str(tmp_path / "v2.zarr")
    ds.zarrx.to_zarr(path, mode="w", zarr_format=2)
    theirs = write(ds, str(tmp_path / "zarr2.zarr"), "zarr2")
    xr.testing.assert_identical(xr.open_dataset(path, engine="zarr"), xr.open_dataset(theirs, engine="zarr"))
    xr.testing.assert_identical(xr.open_dataset(path, engine="zarrx"), xr.open_dataset(theirs, engine="zarr"))


@pytest.mark.parametrize("fmt", [3, 2])
@pytest.mark.parametrize("use_mask", [None, True, False])
def test_fill_value_as_mask_follows_xarrays_rules(tmp_path, fmt, use_mask):
    """Zarr fill_value vs CF _FillValue, compared with xarray's own ZarrStore (engine="zarr"'s
    open_dataset drops use_zarr_fill_value_as_mask; zarrx honours it)."""
    from xarray.backends.store import StoreBackendEntrypoint
    from xarray.backends.zarr import ZarrStore

    path = str(tmp_path / f"fill{fmt}.zarr")
    group = zarr.open_group(path, mode="w", zarr_format=fmt)
    attributes = {"_ARRAY_DIMENSIONS": ["x"]} if fmt == 2 else {}
    ints = group.create_array("ints", shape=(4,), dtype="int16", fill_value=-1, attributes=attributes,
                              **({"dimension_names": ["x"]} if fmt == 3 else {}))
    ints[:] = [1, -1, 3, 4]
    floats = group.create_array("floats", shape=(4,), dtype="float32", fill_value=0.0, attributes=attributes,
                                **({"dimension_names": ["x"]} if fmt == 3 else {}))
    floats[:] = [0.0, 1.0, np.nan, 2.0]
    store = ZarrStore.open_group(path, mode="r", use_zarr_fill_value_as_mask=use_mask)
    expected = StoreBackendEntrypoint().open_dataset(store)
    actual = xr.open_dataset(path, engine="zarrx", use_zarr_fill_value_as_mask=use_mask)
    xr.testing.assert_identical(actual, expected)
    masks = use_mask if use_mask is not None else fmt == 2
    assert bool(np.isnan(actual.ints.values[1])) == masks


def test_v3_fill_value_attribute_decoding(tmp_path):
    """xarray writes a float _FillValue as base64; zarrx decodes it, and keeps a plain number."""
    path = str(tmp_path / "fv.zarr")
    xr.Dataset({"v": ("x", np.array([1.0, np.nan]), {}, {"_FillValue": -9.0})}).to_zarr(path, zarr_format=3)
    expected, actual = open_both(path, mask_and_scale=False)
    xr.testing.assert_identical(actual, expected)
    assert actual.v.attrs["_FillValue"] == -9.0
    group = zarrx.create_group(str(tmp_path / "plain.zarr"))
    array = group.create_array("v", shape=(2,), dtype="float64", dimension_names=["x"], attributes={"_FillValue": -9.0})
    array[:] = [1.0, -9.0]
    ds = xr.open_dataset(str(tmp_path / "plain.zarr"), engine="zarrx")
    assert np.isnan(ds.v.values[1])  # engine="zarr" raises: it expects base64 text


def test_encoding_keys(tmp_path):
    path = str(tmp_path / "enc.zarr")
    group = zarrx.create_group(path)
    array = group.create_array(
        "v", shape=(8, 6), chunks=(2, 3), shards=(4, 6), dtype="float32", fill_value=np.nan,
        compressors=[{"name": "gzip", "configuration": {"level": 2}}], dimension_names=["y", "x"],
    )
    array[:] = np.arange(48).reshape(8, 6)
    group.create_array("s", shape=(3,), dtype=str, dimension_names=["z"])
    ds = xr.open_dataset(path, engine="zarrx")
    encoding = ds.v.encoding
    assert encoding["chunks"] == (2, 3) and encoding["shards"] == (4, 6)
    assert encoding["preferred_chunks"] == {"y": 4, "x": 6}
    # codec objects, the ones engine="zarr" gives (zarr-python's)
    theirs = xr.open_dataset(path, engine="zarr").v.encoding
    assert encoding["compressors"] == theirs["compressors"] == (zarr.codecs.GzipCodec(level=2),)
    assert encoding["compressors"][0].level == 2
    assert encoding["filters"] == () == theirs["filters"]
    assert encoding["serializer"] == theirs["serializer"] == zarr.codecs.BytesCodec(endian="little")
    assert np.isnan(encoding["fill_value"]) and encoding["dtype"] == np.dtype("float32")
    assert ds.s.encoding["dtype"] == np.dtypes.StringDType() and ds.s.encoding["serializer"] == zarr.codecs.VLenUTF8Codec()
    # the codec objects are accepted back by both writers
    ds.load().to_zarr(str(tmp_path / "again-zarr.zarr"), zarr_format=3)
    ds.zarrx.to_zarr(str(tmp_path / "again-zarrx.zarr"))
    for again in ("again-zarr.zarr", "again-zarrx.zarr"):
        stored = zarrx.open_array(str(tmp_path / again), path="v")
        assert (stored.chunks, stored.shards) == ((2, 3), (4, 6))
        assert stored.metadata.codecs.array_bytes.codecs.bytes_bytes[0].to_json()["name"] == "gzip"


def test_chunks_follow_storage_chunks_and_shards(tmp_path):
    path = str(tmp_path / "sharded.zarr")
    group = zarrx.create_group(path)
    group.create_array("plain", shape=(100, 10), chunks=(7, 5), dtype="int8", dimension_names=["a", "b"])
    group.create_array("sharded", shape=(100, 10), chunks=(5, 5), shards=(20, 10), dtype="int8",
                       dimension_names=["c", "d"])
    ds = xr.open_dataset(path, engine="zarrx", chunks={})
    assert ds.plain.chunks == ((7,) * 14 + (2,), (5, 5))
    assert ds.sharded.chunks == ((20,) * 5, (10,))  # one dask task per shard
    # xarray's own engine splits shards into their inner chunks, so its tasks share shards
    assert xr.open_dataset(path, engine="zarr", chunks={}).sharded.chunks == ((5,) * 20, (5, 5))
    auto = xr.open_dataset(path, engine="zarrx", chunks="auto")
    assert all(size % 20 == 0 for size in auto.sharded.chunks[0][:-1])


# -- lazy indexing ---------------------------------------------------------------------------------
@pytest.fixture
def counted(tmp_path):
    path = tmp_path / "lazy.zarr"
    group = zarrx.create_group(str(path))
    values = np.arange(40 * 30).reshape(40, 30)
    group.create_array("v", shape=(40, 30), chunks=(10, 10), dtype="int64", dimension_names=["t", "x"])[:] = values
    group.create_array("t", shape=(40,), chunks=(40,), dtype="int64", dimension_names=["t"])[:] = np.arange(40) * 10
    store = ListingCountingStore(LocalStore(str(path), read_only=True))
    return store, values


def chunk_keys(store):
    return sorted({key for key, _ in store.chunk_requests() if key.startswith("v/")})


def test_isel_with_lists_reads_only_the_chunks_needed(counted):
    store, values = counted
    ds = xr.open_dataset(store, engine="zarrx")
    store.reset()
    picked = ds.v.isel(t=[35, 2, 2], x=[29, 0])
    np.testing.assert_array_equal(picked.values, values[[35, 2, 2]][:, [29, 0]])
    assert chunk_keys(store) == ["v/c/0/0", "v/c/0/2", "v/c/3/0", "v/c/3/2"]
    store.reset()
    points = ds.v.isel(t=xr.DataArray([5, 33], dims="p"), x=xr.DataArray([25, 1], dims="p"))  # vectorized
    np.testing.assert_array_equal(points.values, values[[5, 33], [25, 1]])
    assert chunk_keys(store) == ["v/c/0/2", "v/c/3/0"]
    store.reset()
    mixed = ds.v.isel(t=xr.DataArray([[1, 12]], dims=("p", "q")), x=slice(0, 5))  # vectorized with a slice
    np.testing.assert_array_equal(mixed.values, values[[[1, 12]], :5])
    assert chunk_keys(store) == ["v/c/0/0", "v/c/1/0"]
    store.reset()
    by_label = ds.v.sel(t=[100, 350])
    np.testing.assert_array_equal(by_label.values, values[[10, 35]])
    assert chunk_keys(store) == ["v/c/1/0", "v/c/1/1", "v/c/1/2", "v/c/3/0", "v/c/3/1", "v/c/3/2"]
    assert float(ds.v[3, 4]) == values[3, 4]  # a scalar comes back as a 0-d array


# -- opening many variables ------------------------------------------------------------------------
@pytest.mark.parametrize("consolidated", [True, False])
def test_opening_100_variables_takes_a_bounded_number_of_requests(tmp_path, consolidated):
    ds = xr.Dataset(
        {f"v{i:03d}": (("time", "x"), np.zeros((2, 3), dtype="float32"), {"i": i}) for i in range(100)},
        coords={"time": [0, 1], "x": [1.0, 2.0, 3.0]},
    )
    path = str(tmp_path / "many.zarr")
    ds.zarrx.to_zarr(path, consolidated=consolidated)
    store = ListingCountingStore(LocalStore(path, read_only=True))
    opened = xr.open_dataset(store, engine="zarrx", consolidated=None if consolidated else False)
    assert len(opened.data_vars) == 100
    metadata_reads = [key for key, _ in store.requests if key.endswith("zarr.json")]
    if consolidated:
        # the root document holds everything; then the two coordinates' data (for their indexes),
        # in one batch (zarrx.nodes.prefetch.read_together)
        assert metadata_reads == ["zarr.json"] and store.listings == 0
        assert store.calls == 2
    else:
        # the root document, one listing, one batch of the 102 arrays' documents, one of the coordinates' data
        assert store.listings == 1 and 102 in store.batch_sizes and len(metadata_reads) == 103
        assert store.calls == 4


def test_consolidated_true_without_consolidated_metadata_is_a_clear_error(tmp_path):
    path = str(tmp_path / "plain.zarr")
    xr.Dataset({"v": ("x", [1, 2])}).zarrx.to_zarr(path, consolidated=False)
    with pytest.raises(MetadataError, match="consolidated=True.*consolidate_metadata"):
        xr.open_dataset(path, engine="zarrx", consolidated=True)
    # None falls back to listing the store, with engine="zarr"'s RuntimeWarning
    with pytest.warns(RuntimeWarning, match="(?s)Failed to open Zarr store with consolidated metadata.*plain.zarr"):
        fallback = xr.open_dataset(path, engine="zarrx", consolidated=None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # False asks for the listing: no warning
        xr.open_dataset(path, engine="zarrx", consolidated=False)
    xr.testing.assert_identical(fallback, xr.open_dataset(path, engine="zarrx", consolidated=False))


def test_consolidated_metadata_is_used_or_ignored_as_asked(tmp_path):
    path = str(tmp_path / "cons.zarr")
    xr.Dataset({"v": ("x", [1, 2])}, coords={"x": [0, 1]}).zarrx.to_zarr(path)
    assert zarrx.open_group(path).is_consolidated
    store = ListingCountingStore(LocalStore(path, read_only=True))
    xr.open_dataset(store, engine="zarrx", consolidated=True)
    assert store.listings == 0
    store.reset()
    xr.open_dataset(store, engine="zarrx", consolidated=False)
    assert store.listings == 1
    # a group below the root is found in the root's consolidated metadata, with one read
    tree = xr.DataTree.from_dict({"/": xr.Dataset(), "/a/b": xr.Dataset({"w": ("y", [1.0])})})
    tree.zarrx.to_zarr(str(tmp_path / "tree.zarr"))
    store = ListingCountingStore(LocalStore(str(tmp_path / "tree.zarr"), read_only=True))
    ds = xr.open_dataset(store, engine="zarrx", group="a/b", consolidated=True)
    assert ds.w.values.tolist() == [1.0] and store.listings == 0 and store.single_gets == 1


# -- groups and trees ------------------------------------------------------------------------------
def nested_tree() -> xr.DataTree:
    return xr.DataTree.from_dict(
        {
            "/": xr.Dataset(coords={"time": pd.date_range("2020-01-01", periods=3)}, attrs={"level": "root"}),
            "/ocean": xr.Dataset({"sst": (("time", "cell"), np.arange(6.0).reshape(3, 2), {"units": "degC"})}),
            "/ocean/bio": xr.Dataset({"chl": ("time", np.array([0.1, np.nan, 0.3]))}),
            "/atmosphere": xr.Dataset({"name": ("site", np.array(["a", "bc"], dtype=object))}, coords={"site": [7, 8]}),
            "/empty": xr.Dataset(attrs={"note": "no variables"}),
        }
    )


@pytest.mark.parametrize("writer", ["zarr3", "zarr2", "zarrx"])
def test_open_datatree_and_groups_match_engine_zarr(tmp_path, writer):
    tree = nested_tree()
    path = str(tmp_path / "tree.zarr")
    if writer == "zarrx":
        tree.zarrx.to_zarr(path)
    else:
        tree.to_zarr(path, zarr_format=int(writer[-1]))
    expected = xr.open_datatree(path, engine="zarr")
    xr.testing.assert_identical(xr.open_datatree(path, engine="zarrx"), expected)
    xr.testing.assert_identical(xr.open_datatree(path, engine="zarrx", chunks={}), expected)
    groups = xr.open_groups(path, engine="zarrx")
    assert list(groups) == list(xr.open_groups(path, engine="zarr"))
    for name, ds in xr.open_groups(path, engine="zarr").items():
        xr.testing.assert_identical(groups[name], ds)
    sub = xr.open_datatree(path, engine="zarrx", group="ocean")
    xr.testing.assert_identical(sub, xr.open_datatree(path, engine="zarr", group="ocean"))
    assert list(xr.open_groups(path, engine="zarrx", group="/ocean")) == ["/", "/bio"]


def test_datatree_round_trip_with_zarrx_on_both_sides(tmp_path):
    tree = nested_tree()
    path = str(tmp_path / "tree.zarr")
    tree.zarrx.to_zarr(path, encoding={"/ocean": {"sst": {"chunks": (1, 2), "dtype": "float32"}}})
    back = xr.open_datatree(path, engine="zarrx")
    xr.testing.assert_equal(back, tree)
    assert back["ocean"].sst.encoding["chunks"] == (1, 2) and back["ocean"].sst.dtype == np.float32
    assert back.attrs == {"level": "root"} and back["empty"].attrs == {"note": "no variables"}
    with pytest.raises(UsageError, match="not groups of the tree"):
        tree.zarrx.to_zarr(str(tmp_path / "bad.zarr"), encoding={"/nowhere": {}})


# -- writing ---------------------------------------------------------------------------------------
def test_modes(tmp_path):
    path = str(tmp_path / "modes.zarr")
    ds = xr.Dataset({"a": ("x", [1, 2, 3])}, attrs={"v": 1})
    ds.zarrx.to_zarr(path)
    with pytest.raises(ContainsGroupError):
        ds.zarrx.to_zarr(path)  # w- refuses an existing group
    ds.assign(a=ds.a * 10).zarrx.to_zarr(path, mode="w")
    assert xr.open_dataset(path, engine="zarrx").a.values.tolist() == [10, 20, 30]
    xr.Dataset({"b": ("x", [4.0, 5.0, 6.0])}, attrs={"v": 2}).zarrx.to_zarr(path, mode="a")
    both = xr.open_dataset(path, engine="zarrx")
    assert sorted(both.data_vars) == ["a", "b"] and both.attrs == {"v": 2}
    with pytest.raises(UsageError, match="mode='r\\+'"):
        xr.Dataset({"c": ("x", [0, 0, 0])}).zarrx.to_zarr(path, mode="r+")
    xr.Dataset({"a": ("x", [7, 8, 9])}).zarrx.to_zarr(path, mode="r+")
    assert xr.open_dataset(path, engine="zarrx").a.values.tolist() == [7, 8, 9]
    with pytest.raises(UsageError, match="mode"):
        ds.zarrx.to_zarr(path, mode="x")
    with pytest.raises(UsageError, match="append_dim"):
        ds.zarrx.to_zarr(path, mode="w", append_dim="x")


def test_write_into_a_group_of_an_existing_store(tmp_path):
    path = str(tmp_path / "groups.zarr")
    xr.Dataset({"a": ("x", [1])}).zarrx.to_zarr(path)
    xr.Dataset({"b": ("y", [2.0])}).zarrx.to_zarr(path, group="sub/deeper", mode="a")
    assert xr.open_dataset(path, engine="zarr", group="sub/deeper").b.values.tolist() == [2.0]
    assert "a" in xr.open_dataset(path, engine="zarrx")


@pytest.mark.parametrize("mode", ["a", "a-"])
def test_append_keeps_the_stored_encoding(tmp_path, mode):
    path = str(tmp_path / "append.zarr")
    first = xr.Dataset(
        {"v": ("time", np.arange(4.0)), "static": ("x", [1, 2])},
        coords={"time": pd.date_range("2001-01-01", periods=4)},
    )
    first.zarrx.to_zarr(path, encoding={"time": {"units": "hours since 2000-01-01", "dtype": "int32"},
                                        "v": {"chunks": (3,)}})
    second = xr.Dataset(
        {"v": ("time", [4.0, np.nan]), "static": ("x", [9, 9])},
        coords={"time": pd.date_range("2001-01-05", periods=2)},
    )
    second.zarrx.to_zarr(path, mode=mode, append_dim="time")
    for engine in ("zarr", "zarrx"):
        back = xr.open_dataset(path, engine=engine)
        assert back.sizes["time"] == 6
        np.testing.assert_array_equal(back.v.values, [0, 1, 2, 3, 4, np.nan])
        assert back.time.encoding["units"] == "hours since 2000-01-01"
        assert back.time.encoding["dtype"] == np.dtype("int32")
        assert back.v.encoding["chunks"] == (3,)
        assert back.static.values.tolist() == ([9, 9] if mode == "a" else [1, 2])
    expected = xr.concat([first.v, second.v], dim="time")
    xr.testing.assert_identical(xr.open_dataset(path, engine="zarrx").v, expected)


def test_append_with_dask_blocks_on_the_grid(tmp_path):
    path = str(tmp_path / "append-dask.zarr")
    first = xr.Dataset({"v": (("time", "x"), np.zeros((4, 3)))})
    first.zarrx.to_zarr(path, encoding={"v": {"chunks": (2, 3)}})
    more = xr.Dataset({"v": (("time", "x"), np.ones((4, 3)))}).chunk({"time": 2})
    more.zarrx.to_zarr(path, append_dim="time")
    assert xr.open_dataset(path, engine="zarrx").v.values.sum() == 12
    misaligned = xr.Dataset({"v": (("time", "x"), np.ones((3, 3)))}).chunk({"time": 1})
    with pytest.raises(ChunkAlignmentError, match="'v'.*align_chunks"):
        misaligned.zarrx.to_zarr(path, append_dim="time")
    assert zarrx.open_array(path, path="v").shape == (8, 3)  # the failed append left no trace
    misaligned.zarrx.to_zarr(path, append_dim="time", align_chunks=True)
    assert xr.open_dataset(path, engine="zarrx").v.values.sum() == 21


def test_region_writes(tmp_path):
    path = str(tmp_path / "region.zarr")
    template = xr.Dataset(
        {"v": (("time", "x"), np.zeros((6, 4)))},
        coords={"time": pd.date_range("2002-01-01", periods=6), "x": [10, 20, 30, 40]},
    )
    template.zarrx.to_zarr(path, encoding={"v": {"chunks": (2, 4)}})
    update = template.isel(time=slice(2, 4)).assign(v=lambda d: d.v + 5)
    update.zarrx.to_zarr(path, region="auto")
    update.drop_vars(["time", "x"]).assign(v=lambda d: d.v * 2).zarrx.to_zarr(path, region={"time": slice(4, 6)})
    back = xr.open_dataset(path, engine="zarrx")
    assert back.v.sum("x").values.tolist() == [0, 0, 20, 20, 40, 40]
    xr.testing.assert_identical(back, xr.open_dataset(path, engine="zarr"))
    with pytest.raises(UsageError, match="drop_vars"):
        template.assign(other=("x", [1, 2, 3, 4])).isel(time=[0]).drop_vars("time").zarrx.to_zarr(
            path, region={"time": slice(0, 1)}
        )
    shifted = template.isel(time=slice(1, 3)).drop_vars(["time", "x"]).chunk({"time": 2})
    with pytest.raises(ChunkAlignmentError, match="grid"):  # r+: a region sharing chunks with its neighbours
        shifted.zarrx.to_zarr(path, region={"time": slice(1, 3)})
    shifted.zarrx.to_zarr(path, region={"time": slice(1, 3)}, safe_chunks=False)


def test_encoding_for_new_variables(tmp_path):
    path = str(tmp_path / "encoding.zarr")
    ds = xr.Dataset({
        "a": (("y", "x"), np.random.default_rng(0).random((8, 8))),
        "b": ("y", np.arange(8.0)),
        "c": ("y", np.arange(8)),
    })
    encoding = {
        "a": {"chunks": (2, 4), "shards": (4, 8), "compressors": [zarrx.codecs.GzipCodec(level=3)], "dtype": "float32"},
        "b": {"scale_factor": 0.5, "dtype": "int8", "_FillValue": -1,
              "compressors": [zarr.codecs.ZstdCodec(level=5)], "filters": []},
        "c": {"fill_value": 7, "compressors": None,
              "serializer": {"name": "bytes", "configuration": {"endian": "big"}}},
    }
    ds.zarrx.to_zarr(path, encoding=encoding)
    a, b, c = (zarrx.open_array(path, path=name) for name in "abc")
    assert (a.chunks, a.shards, a.dtype) == ((2, 4), (4, 8), np.dtype("float32"))
    assert b.dtype == np.dtype("int8") and b.attrs["scale_factor"] == 0.5 and b.attrs["_FillValue"] == -1
    assert b.metadata.codecs.bytes_bytes[0].to_json() == {"name": "zstd", "configuration": {"level": 5}}
    assert c.fill_value == 7 and c.metadata.codecs.bytes_bytes == ()
    assert c.metadata.codecs.array_bytes.to_json() == {"name": "bytes", "configuration": {"endian": "big"}}
    back = xr.open_dataset(path, engine="zarr")
    xr.testing.assert_allclose(back.a, ds.a.astype("float32"))
    xr.testing.assert_identical(back.b, ds.b)
    with pytest.raises(ValueError, match="unexpected encoding"):
        ds.zarrx.to_zarr(str(tmp_path / "bad.zarr"), encoding={"c": {"colour": "red"}})


def test_compute_false_returns_a_delayed_parallel_write(tmp_path):
    path = str(tmp_path / "delayed.zarr")
    ds = xr.Dataset(
        {"v": (("t", "x"), da.arange(64.0, chunks=16).reshape(8, 8).rechunk((2, 4)))},
        coords={"t": np.arange(8)},
    )
    delayed = ds.zarrx.to_zarr(path, compute=False)
    assert isinstance(delayed, Delayed)
    pending = xr.open_dataset(path, engine="zarrx")  # metadata and NumPy data are there already
    assert pending.t.values.tolist() == list(range(8)) and np.isnan(pending.v.values).all()
    array = zarrx.open_array(path, path="v")
    assert array.nchunks_initialized == 0
    delayed.compute()
    assert array.nchunks_initialized == 8  # one block per chunk, each written by its task
    np.testing.assert_array_equal(xr.open_dataset(path, engine="zarrx").v.values, np.arange(64.0).reshape(8, 8))


def test_dask_backed_dataset_written_in_parallel(tmp_path):
    rng = np.random.default_rng(1)
    values = rng.random((40, 12, 10))
    ds = xr.Dataset(
        {
            "field": (("time", "y", "x"), da.from_array(values, chunks=(10, 6, 5))),
            "packed": (("time", "y", "x"), da.from_array(values * 100, chunks=(10, 6, 5)), {},
                       {"dtype": "int16", "scale_factor": 0.01}),
        },
        coords={"time": pd.date_range("2010-01-01", periods=40)},
    )
    path = str(tmp_path / "parallel.zarr")
    with dask.config.set(scheduler="threads", num_workers=4):
        ds.zarrx.to_zarr(path)
    back = xr.open_dataset(path, engine="zarrx", chunks={})
    assert back.field.chunks == ((10,) * 4, (6, 6), (5, 5))
    np.testing.assert_array_equal(back.field.values, values)
    np.testing.assert_allclose(back.packed.values, np.round(values * 100, 2), atol=0.006)
    xr.testing.assert_identical(back.load(), xr.open_dataset(path, engine="zarr").load())


def test_safe_chunks_are_shard_aware(tmp_path):
    path = str(tmp_path / "shards.zarr")
    ds = xr.Dataset({"v": (("t",), da.arange(16.0, chunks=2))})  # blocks of one inner chunk
    with pytest.raises(ChunkAlignmentError, match="'v'.*same shard"):
        ds.zarrx.to_zarr(path, encoding={"v": {"chunks": (2,), "shards": (8,)}})
    assert "v" not in zarrx.open_group(path)  # nothing half-written is left behind
    ds.zarrx.to_zarr(path, mode="w", encoding={"v": {"chunks": (2,), "shards": (8,)}}, align_chunks=True)
    back = xr.open_dataset(path, engine="zarrx", chunks={})
    assert back.v.chunks == ((8, 8),) and back.v.values.tolist() == list(range(16))


def test_distributed_processes_read_and_write(tmp_path):
    distributed = pytest.importorskip("distributed")
    source, target = str(tmp_path / "in.zarr"), str(tmp_path / "out.zarr")
    values = np.arange(24 * 6, dtype="float64").reshape(24, 6)
    xr.Dataset({"v": (("t", "x"), values)}).zarrx.to_zarr(source, encoding={"v": {"chunks": (4, 6)}})
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
    with cluster, distributed.Client(cluster):
        ds = xr.open_dataset(source, engine="zarrx", chunks={})  # backend arrays travel to the workers
        assert float(ds.v.sum().compute()) == values.sum()
        (ds * 2).zarrx.to_zarr(target)  # each worker writes its own blocks
    np.testing.assert_array_equal(xr.open_dataset(target, engine="zarr").v.values, values * 2)


def test_memory_url_and_datatree_append(tmp_path):
    def tree(start, length):
        time = pd.date_range(start, periods=length)
        return xr.DataTree.from_dict({
            "/": xr.Dataset({"v": ("time", np.arange(length))}, coords={"time": time}),
            "/static": xr.Dataset({"s": ("z", [1, 2])}),
            "/sub": xr.Dataset({"w": ("time", np.arange(length) * 2.0)}),
        })

    url = f"memory://{tmp_path.name}/tree.zarr"
    tree("2000-01-01", 3).zarrx.to_zarr(url, mode="w")
    tree("2000-01-04", 2).zarrx.to_zarr(url, append_dim="time")
    back = xr.open_datatree(url, engine="zarrx", chunks={}, storage_options={})
    assert back.v.values.tolist() == [0, 1, 2, 0, 1] and back["sub"].w.values.tolist() == [0, 2, 4, 0, 2]
    assert back["static"].s.values.tolist() == [1, 2] and back.sizes["time"] == 5


def test_dataarray_accessor(tmp_path):
    unnamed = xr.DataArray(np.arange(3.0), dims="x")
    unnamed.zarrx.to_zarr(str(tmp_path / "da.zarr"))
    for engine in ("zarr", "zarrx"):
        xr.testing.assert_identical(xr.open_dataarray(str(tmp_path / "da.zarr"), engine=engine), unnamed)
    named = xr.DataArray(np.arange(3.0), dims="x", name="x")  # named like its dimension
    named.zarrx.to_zarr(str(tmp_path / "named.zarr"))
    xr.testing.assert_identical(xr.open_dataarray(str(tmp_path / "named.zarr"), engine="zarr"), named)


# -- errors and plumbing ---------------------------------------------------------------------------
def test_array_without_dimension_names_is_named_in_the_error(tmp_path):
    path = str(tmp_path / "nodims.zarr")
    group = zarrx.create_group(path)
    group.create_array("good", shape=(2,), dtype="int8", dimension_names=["x"])
    group.create_array("anonymous", shape=(2, 3), dtype="int8")
    group.create_array("scalar", shape=(), dtype="int8")  # 0-d: needs no names
    with pytest.raises(MissingDimensionsError, match="'/anonymous'.*dimension_names.*drop_variables=\\['anonymous'\\]"):
        xr.open_dataset(path, engine="zarrx")
    ds = xr.open_dataset(path, engine="zarrx", drop_variables=["anonymous"])
    assert sorted(ds.variables) == ["good", "scalar"]


def test_guess_can_open(tmp_path):
    entrypoint = ZarrxBackendEntrypoint()
    path = tmp_path / "no-suffix"
    xr.Dataset({"a": ("x", [1])}).zarrx.to_zarr(str(path))
    assert entrypoint.guess_can_open(str(path)) and entrypoint.guess_can_open(path / "zarr.json")
    assert entrypoint.guess_can_open("s3://bucket/data.zarr/") and entrypoint.guess_can_open("x/.zgroup")
    assert not entrypoint.guess_can_open(str(tmp_path / "data.nc")) and not entrypoint.guess_can_open(b"bytes")
    assert xr.open_dataset(path / "zarr.json", engine="zarrx").a.values.tolist() == [1]
    assert "zarrx" in xr.backends.list_engines()


def test_importing_zarrx_does_not_import_xarray():
    code = "import sys, zarrx; print('xarray' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
    code = "import xarray as xr; xr.open_dataset; import zarrx.xarray; print(hasattr(xr.Dataset, 'zarrx'))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "True"


def test_opening_without_chunks_does_not_import_dask(tmp_path):
    # dask.array (and the scipy it imports where installed) took ~0.4 s of the first open;
    # engine="zarr" does not import it either unless asked for dask arrays
    path = tmp_path / "d.zarr"
    xr.Dataset({"a": ("x", np.arange(4))}, coords={"x": np.arange(4)}).zarrx.to_zarr(str(path))
    code = (
        "import sys, xarray as xr; "
        f"ds = xr.open_dataset({str(path)!r}, engine='zarrx'); assert ds.a.values.tolist() == [0, 1, 2, 3]; "
        "print('dask.array' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
    code = code.replace("engine='zarrx'", "engine='zarrx', chunks={}").replace("ds.a.values", "ds.a.compute().values")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "True"  # the check sees dask when it is used


@pytest.mark.parametrize("fmt", [2, 3])
@pytest.mark.parametrize("consolidated", [True, False])
def test_an_unnamed_dataarray_written_by_xarray_opens(tmp_path, fmt, consolidated):
    # xarray stores it as "__xarray_dataarray_variable__", a name the spec reserves: read, never created
    path = str(tmp_path / "da.zarr")
    xr.DataArray(np.arange(6.0), dims="x", attrs={"units": "K"}).to_zarr(path, zarr_format=fmt, consolidated=consolidated)
    assert list(zarrx.open_group(path)) == ["__xarray_dataarray_variable__"]
    xr.testing.assert_identical(xr.open_dataarray(path, engine="zarrx"), xr.open_dataarray(path, engine="zarr"))
    with pytest.raises(InvalidPathError, match="starts with '__'"):
        zarrx.open_group(path, mode="a").create_array("__mine", shape=(1,), dtype="int8")
