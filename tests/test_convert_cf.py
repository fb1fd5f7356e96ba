"""A migration never changes a value: xarray-written Zarr v2 stores, converted to v3 by copy
(``zarrx.convert``) and in place (``zarrx.migrate_v2_to_v3``), read back identical -- values,
dtypes, attributes, coordinates -- with both ``engine="zarr"`` and ``engine="zarrx"``.

The reference is what xarray's own ``engine="zarr"`` reads from the v2 store. The matrix covers
what CF decoding depends on: packed integers (``scale_factor``, ``add_offset``, ``_FillValue``)
holding NaN, floats masked by NaN or by a sentinel, integers masked by a sentinel, times
(``units``, ``calendar``, NaT, a cftime calendar), durations, strings (variable length, fixed
width, bytes, a char dimension), booleans, coordinates and group attributes; and the v2 quirks
that change decoded values: a null fill value, a fill value that xarray masks although no CF
attribute says so (zarr-python's default 0), ``dimension_separator``, filters, F order,
big-endian data and object arrays.
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import numcodecs
import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr

import zarrx
from zarrx.tools.cli import main

pytestmark = [
    pytest.mark.filterwarnings("ignore::zarr.errors.UnstableSpecificationWarning"),
    pytest.mark.filterwarnings("ignore::zarr.errors.ZarrUserWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::RuntimeWarning"),  # xarray: "failed to open consolidated metadata"
    pytest.mark.filterwarnings("ignore:.*non-nanosecond.*:UserWarning"),
]

ENGINES = ("zarr", "zarrx")
MODES = ("copy", "in-place", "cli-copy", "cli-in-place")


def cf_dataset() -> tuple[xr.Dataset, dict[str, dict]]:
    """What CF decoding depends on, as xarray writes it; and the encodings that write it."""
    rng = np.random.default_rng(18)
    times = pd.date_range("2000-01-01", periods=12, freq="6h")
    stamps = times.values.copy()
    stamps[3] = np.datetime64("NaT")
    packed = rng.normal(280.0, 5.0, (12, 4)).round(2)
    packed[2, 1] = packed[7, 3] = np.nan
    masked = rng.normal(0.0, 1.0, (12, 4)).astype("float32")
    masked[0, 0] = np.nan
    sentinel = rng.normal(10.0, 1.0, (12, 4))
    sentinel[5, 2] = np.nan
    counts = rng.integers(0, 100, (12, 4)).astype("float64")
    counts[1, 1] = np.nan
    dataset = xr.Dataset(
        {
            "packed": (("time", "x"), packed, {"units": "K", "long_name": "air temperature"}),
            "masked": (("time", "x"), masked, {"units": "1"}),
            "sentinel": (("time", "x"), sentinel),
            "counts": (("time", "x"), counts),
            "stamps": ("time", stamps),
            "noleap": ("time", xr.date_range("2001-02-27", periods=12, freq="D", calendar="noleap", use_cftime=True)),
            "duration": ("time", (stamps - stamps[0]).astype("timedelta64[ns]")),
            "names": ("x", np.array(["alpha", "", "γ", "delta"], dtype=object)),
            "fixed": ("x", np.array(["ab", "", "c", "dddd"], dtype="U4")),
            "raw": ("x", np.array([b"ab", b"", b"c", b"ddd"], dtype="S3")),
            "chars": ("x", np.array([b"ab", b"", b"c", b"ddd"], dtype="S3")),
            "flags": (("time", "x"), rng.random((12, 4)) > 0.5),
        },
        coords={
            "time": times,
            "x": [10.0, 20.0, 30.0, 40.0],
            "lat": ("x", np.linspace(-60.0, 60.0, 4), {"units": "degrees_north"}),
            "label": ("x", np.array(["p", "q", "r", "s"], dtype=object)),
        },
        attrs={"title": "a CF matrix", "Conventions": "CF-1.8", "history": ["made", "by", "tests"]},
    )
    encoding = {
        "packed": {"dtype": "int16", "scale_factor": 0.01, "add_offset": 280.0, "_FillValue": -32768},
        "sentinel": {"_FillValue": -9999.0},
        "counts": {"dtype": "int32", "_FillValue": -1},
        "stamps": {"units": "hours since 2000-01-01", "calendar": "proleptic_gregorian", "dtype": "int64"},
        "noleap": {"units": "days since 2001-01-01", "calendar": "noleap"},
        "chars": {"dtype": "S1"},
        "masked": {"chunks": (5, 3)},
        "flags": {"chunks": (4, 4)},
    }
    return dataset, encoding


def write_xarray_v2(path: Path) -> None:
    """The CF matrix, written by xarray as Zarr v2 (consolidated, as xarray does by default)."""
    dataset, encoding = cf_dataset()
    dataset.to_zarr(path, zarr_format=2, mode="w", encoding=encoding)


def write_quirks_v2(path: Path) -> None:
    """v2 arrays whose decoding depends on v2 rules, written by zarr-python (not consolidated)."""
    root = zarr.open_group(str(path), mode="w", zarr_format=2, attributes={"source": "zarr-python"})
    rng = np.random.default_rng(2)
    cases = {
        # zarr-python's default fill value 0: xarray reads v2 zeros as missing
        "default-fill": dict(dtype="<i4", data=rng.integers(0, 3, (6, 5)).astype("<i4")),
        "null-fill": dict(dtype="<f8", fill_value=None, data=rng.normal(size=(6, 5))),
        "nested": dict(dtype="<f4", fill_value=-1.0, chunk_key_encoding={"name": "v2", "separator": "/"},
                       data=np.where(rng.random((6, 5)) > 0.7, -1.0, rng.normal(size=(6, 5))).astype("<f4")),
        "delta-zlib": dict(dtype="<i8", fill_value=None, filters=[numcodecs.Delta(dtype="<i8")],
                           compressors=numcodecs.Zlib(level=3), data=np.arange(30, dtype="<i8").reshape(6, 5) * 7),
        "scaled-filter": dict(dtype="<f8", fill_value=None,
                              filters=[numcodecs.FixedScaleOffset(offset=0, scale=100, dtype="<f8", astype="<i4")],
                              data=rng.normal(size=(6, 5)).round(2)),
        "fortran-big": dict(dtype=">i2", fill_value=-7, order="F", compressors=numcodecs.GZip(level=1),
                            data=np.where(rng.random((6, 5)) > 0.8, -7, rng.integers(-5, 5, (6, 5))).astype(">i2")),
        "bitshuffle": dict(dtype="<u2", fill_value=None, compressors=numcodecs.Blosc(cname="zstd", shuffle=2),
                           data=rng.integers(0, 1000, (6, 5)).astype("<u2")),
        "text": dict(dtype=str, fill_value="", data=np.array([["", "a", "bb", "ccc", "d"]] * 6, dtype=object)),
        "yes-no": dict(dtype="|b1", fill_value=False, data=rng.random((6, 5)) > 0.5),
    }
    for name, case in cases.items():
        data = case.pop("data")
        array = root.create_array(name, shape=(6, 5), chunks=(4, 2), **case)
        array[:] = data
        array.attrs.update({"_ARRAY_DIMENSIONS": ["row", "col"], "note": name})


STORES = {"xarray": write_xarray_v2, "zarr-python": write_quirks_v2}


def migrated(source: Path, target: Path, mode: str) -> Path:
    """``source`` (v2) converted to v3 in ``mode``; the path to open."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # what xarray cannot mask in v3 is tested apart
        if mode == "copy":
            zarrx.convert(str(source), str(target), progress=False)
        elif mode == "cli-copy":
            assert main(["convert", str(source), str(target), "--no-progress"]) == 0
        else:
            shutil.copytree(source, target)
            if mode == "in-place":
                zarrx.migrate_v2_to_v3(str(target))
            else:
                assert main(["convert", str(target), "--migrate-in-place"]) == 0
    return target


@pytest.fixture(scope="module", params=sorted(STORES))
def v2_store(request, tmp_path_factory) -> tuple[Path, xr.Dataset]:
    path = tmp_path_factory.mktemp(request.param) / "v2.zarr"
    STORES[request.param](path)
    return path, xr.open_dataset(path, engine="zarr", zarr_format=2).load()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("engine", ENGINES)
def test_v2_stores_read_back_identical_after_migration(v2_store, tmp_path, mode, engine):
    source, reference = v2_store
    target = migrated(source, tmp_path / "v3.zarr", mode)
    assert json.loads((target / "zarr.json").read_text())["node_type"] == "group"
    converted = xr.open_dataset(target, engine=engine, zarr_format=3).load()
    xr.testing.assert_identical(converted, reference)
    for name, variable in reference.variables.items():  # identical() compares values, not dtypes
        assert converted[name].dtype == variable.dtype, name
    # both engines read the v2 source alike too (the reference is engine="zarr")
    xr.testing.assert_identical(xr.open_dataset(source, engine="zarrx").load(), reference)


def test_the_nan_of_a_packed_variable_stays_nan(tmp_path):
    """The issue's case: int16 with scale_factor and _FillValue holding NaN read back as -327.68."""
    dataset = xr.Dataset({"t": ("x", np.array([1.5, np.nan, -2.25]))})
    dataset.to_zarr(tmp_path / "v2.zarr", zarr_format=2,
                    encoding={"t": {"dtype": "int16", "scale_factor": 0.01, "_FillValue": -32768}})  # fmt: skip
    zarrx.convert(str(tmp_path / "v2.zarr"), str(tmp_path / "v3.zarr"), progress=False)
    stored = zarrx.open_array(str(tmp_path / "v3.zarr"), "t")
    assert stored[:].tolist() == [150, -32768, -225] and stored.fill_value == -32768
    assert stored.attrs.asdict() == {"scale_factor": 0.01, "_FillValue": -32768}
    for engine in ENGINES:
        values = xr.open_dataset(tmp_path / "v3.zarr", engine=engine).t.values
        np.testing.assert_array_equal(values, [1.5, np.nan, -2.25])


def test_float_fill_values_are_xarray_base64(tmp_path):
    """A v2 float fill value becomes the base64 text xarray's zarr backend writes for v3."""
    dataset = xr.Dataset({"v": ("x", np.array([1.0, np.nan], dtype="float32"))})
    dataset.to_zarr(tmp_path / "v2.zarr", zarr_format=2, encoding={"v": {"_FillValue": -9999.0}})
    dataset.to_zarr(tmp_path / "xarray-v3.zarr", zarr_format=3, encoding={"v": {"_FillValue": -9999.0}})
    zarrx.convert(str(tmp_path / "v2.zarr"), str(tmp_path / "v3.zarr"), progress=False)
    ours = json.loads((tmp_path / "v3.zarr" / "v" / "zarr.json").read_text())
    theirs = json.loads((tmp_path / "xarray-v3.zarr" / "v" / "zarr.json").read_text())
    assert ours["attributes"]["_FillValue"] == theirs["attributes"]["_FillValue"] == "AAAAAICHw8A="
    assert ours["fill_value"] == -9999.0


def test_a_mask_xarray_cannot_keep_in_v3_is_named(tmp_path):
    """A v2 byte-string fill value is masked by xarray's v2 reader; v3 has no attribute xarray masks
    bytes by, so the conversion warns, naming the array, rather than change values silently."""
    root = zarr.open_group(str(tmp_path / "v2.zarr"), mode="w", zarr_format=2)
    array = root.create_array("b", shape=(3,), chunks=(3,), dtype="|S2", fill_value=b"")
    array[:] = np.array([b"a", b"", b"bb"], dtype="S2")
    array.attrs["_ARRAY_DIMENSIONS"] = ["x"]
    assert np.isnan(xr.open_dataset(tmp_path / "v2.zarr", engine="zarr").b.values[1])
    with pytest.warns(zarrx.tools.migration.MaskLostWarning, match=r"'/b': xarray reads the v2 fill value b''"):
        zarrx.convert(str(tmp_path / "v2.zarr"), str(tmp_path / "v3.zarr"), progress=False)
    with pytest.warns(zarrx.tools.migration.MaskLostWarning, match="'/b'"):
        zarrx.migrate_v2_to_v3(str(tmp_path / "v2.zarr"))
