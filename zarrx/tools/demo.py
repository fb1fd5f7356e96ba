"""``zarrx demo``: the whole system in one command.

A synthetic year of daily weather (time x lat x lon: temperature, precipitation, wind, CF
attributes) is written with ``ds.zarrx.to_zarr`` as sharded Zarr v3, opened lazily with
``xr.open_dataset(..., engine="zarrx", chunks={})``, reduced to area-weighted monthly means by
dask with a progress bar, and summarised: the tree and a table.
"""

from __future__ import annotations

import os
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from zarrx.errors import UsageError
from zarrx.nodes.api import open_group
from zarrx.nodes.group import Group
from zarrx.tools import display

__all__ = ["demo_dataset", "write_demo_dataset", "run_demo"]

DEMO_SHAPE = {"time": 365, "lat": 91, "lon": 180}
DEMO_CHUNKS = (30, 46, 90)  # encoded one by one: ~0.5 MB of float32
DEMO_SHARDS = (30, 92, 180)  # stored objects (and dask tasks): a month-ish of the whole globe


def demo_dataset(seed: int = 42) -> Any:
    """A year of synthetic daily weather on a 2° grid: temperature, precipitation, wind speed."""
    import pandas as pd
    import xarray as xr

    rng = np.random.default_rng(seed)
    ntime, nlat, nlon = DEMO_SHAPE.values()
    time_ = pd.date_range("2023-01-01", periods=ntime, freq="D")
    lat = np.linspace(-90.0, 90.0, nlat)
    lon = np.arange(0.0, 360.0, 360.0 / nlon)
    day = np.arange(ntime)[:, None, None]
    sin_lat = np.sin(np.deg2rad(lat))[None, :, None]
    wave = np.sin(np.deg2rad(lon) * 2)[None, None, :]
    season = np.cos(2 * np.pi * (day - 200) / 365)  # +1 in mid-July
    land = 2 + 2 * sin_lat  # more land in the north: a larger seasonal swing there
    shape = (ntime, nlat, nlon)

    t2m = 300 - 45 * sin_lat**2 + (12 * sin_lat + land) * season + 3 * wave + rng.normal(0, 2.0, shape)
    wet_chance = 0.25 + 0.5 * np.exp(-((lat[None, :, None] - 8 * season) ** 2) / 200)  # the ITCZ follows the sun
    precip = np.where(rng.random(shape) < wet_chance, rng.gamma(0.8, 6.0, shape), 0.0)
    jets = 4 + 6 * np.exp(-((np.abs(lat[None, :, None]) - 50) ** 2) / 300) * (1 + 0.3 * np.abs(season))
    wind = jets * rng.weibull(2.0, shape)

    dims = ("time", "lat", "lon")
    return xr.Dataset(
        {
            "t2m": (dims, t2m.astype("float32"), {
                "units": "K", "long_name": "2 metre air temperature", "standard_name": "air_temperature"}),
            "precip": (dims, precip.astype("float32"), {
                "units": "mm day-1", "long_name": "daily precipitation", "standard_name": "lwe_precipitation_rate"}),
            "wind": (dims, wind.astype("float32"), {
                "units": "m s-1", "long_name": "10 metre wind speed", "standard_name": "wind_speed"}),
        },
        coords={
            "time": ("time", time_, {"standard_name": "time", "long_name": "time"}),
            "lat": ("lat", lat, {"units": "degrees_north", "standard_name": "latitude", "long_name": "latitude"}),
            "lon": ("lon", lon, {"units": "degrees_east", "standard_name": "longitude", "long_name": "longitude"}),
        },
        attrs={
            "title": "zarrx demo: synthetic daily weather",
            "Conventions": "CF-1.8",
            "source": "random numbers shaped like weather (zarrx demo)",
        },
    )  # fmt: skip


def write_demo_dataset(path: str) -> Group:
    """Write :func:`demo_dataset` to ``path`` (replacing it) as sharded Zarr v3, consolidated."""
    import zarrx.xarray  # noqa: F401  (the ds.zarrx accessor)

    dataset = demo_dataset()
    compressors = [{"name": "zstd", "configuration": {"level": 3}}]
    encoding = {
        name: {"chunks": DEMO_CHUNKS, "shards": DEMO_SHARDS, "compressors": compressors}
        for name in dataset.data_vars
    }
    dataset.zarrx.to_zarr(path, mode="w", encoding=encoding, consolidated=True)
    return open_group(path, mode="r")


def run_demo(directory: str | None) -> int:
    folder = Path(directory) if directory else Path(tempfile.mkdtemp(prefix="zarrx-demo-"))
    path = str(folder / "weather.zarr")
    if os.path.exists(path) and (not os.path.isdir(path) or os.listdir(path)) and not os.path.exists(
        os.path.join(path, "zarr.json")
    ):
        raise UsageError(f"{path} exists and is not a Zarr hierarchy; give the demo another DIR")
    folder.mkdir(parents=True, exist_ok=True)

    import xarray as xr
    from dask.diagnostics import ProgressBar as DaskProgressBar

    started = time.perf_counter()
    root = write_demo_dataset(path)
    print(f"1. Wrote a synthetic year of daily weather to {path} in {time.perf_counter() - started:.1f} s\n")
    print(display.tree_text(root))

    dataset = xr.open_dataset(path, engine="zarrx", chunks={})
    tasks = sum(variable.data.npartitions for variable in dataset.data_vars.values())
    print(f"\n2. Opened it lazily with xarray (engine='zarrx'): {len(dataset.data_vars)} variables, "
          f"{tasks} dask chunks (one per shard), nothing read yet\n")  # fmt: skip
    print(dataset)

    weights = np.cos(np.deg2rad(dataset.lat))  # a grid cell's area shrinks toward the poles
    band = lambda low, high: dataset.t2m.sel(lat=slice(low, high)).weighted(weights).mean(("lat", "lon"))  # noqa: E731
    means = dataset.weighted(weights).mean(("lat", "lon"))
    summary = xr.Dataset({
        "global": means.t2m - 273.15, "north": band(30, 60) - 273.15, "south": band(-60, -30) - 273.15,
        "precip": means.precip, "wind": means.wind,
    }).resample(time="1MS").mean()  # fmt: skip
    print(f"\n3. Area-weighted monthly means, computed in parallel by dask's threaded scheduler ({os.cpu_count()} cores):")
    started = time.perf_counter()
    with DaskProgressBar(out=sys.stdout):
        result = summary.compute()
    seconds = time.perf_counter() - started
    columns = {"global": "t2m °C", "north": "30-60°N °C", "south": "30-60°S °C", "precip": "precip mm/day", "wind": "wind m/s"}
    print(f"\n{'month':<8}" + "".join(f"{title:>14}" for title in columns.values()))
    for index, month in enumerate(result.time.values):
        print(f"{str(month)[:7]:<8}" + "".join(f"{float(result[name][index]):>14.2f}" for name in columns))
    nbytes = sum(variable.nbytes for variable in dataset.data_vars.values())
    print(f"\nReduced {display.human_bytes(nbytes)} in {seconds:.2f} s. Next, try:")
    quoted = shlex.quote(path)
    for command in (f"zarrx tree {quoted}", f"zarrx info {quoted} --path t2m", f"zarrx verify {quoted}"):
        print(f"  {command}")
    return 0
