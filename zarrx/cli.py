"""The ``zarrx`` command line.

``zarrx demo [DIR]`` writes a small synthetic weather hierarchy (time x lat x
lon, CF-style attributes, dimension names) with zarrx, reads it back from disk
and prints the tree and a short summary, so a newcomer sees the whole path --
create, chunk, encode, store, open, decode -- work in one command.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

import numpy as np

import zarrx
from zarrx.errors import ZarrxError

__all__ = ["main"]


def write_demo_dataset(path: str) -> zarrx.Group:
    """A year of daily synthetic 2 m temperature and precipitation on a 1° grid."""
    rng = np.random.default_rng(42)
    ntime, nlat, nlon = 365, 181, 360
    lat = np.linspace(-90, 90, nlat)
    lon = np.arange(nlon, dtype="float64")
    days = np.arange(ntime)
    seasonal = 15 * np.cos(2 * np.pi * (days - 200) / 365)[:, None, None] * np.sign(lat)[None, :, None]
    base = 288 - 40 * np.abs(np.sin(np.deg2rad(lat)))[None, :, None]
    t2m = (base + seasonal + rng.normal(0, 2, (ntime, nlat, nlon))).astype("float32")
    precip = rng.gamma(0.5, 2.0, (ntime, nlat, nlon)).astype("float32")

    root = zarrx.create_group(path, overwrite=True, attributes={"title": "zarrx demo: synthetic daily weather", "Conventions": "CF-1.8"})
    dims = ["time", "lat", "lon"]
    coords = {
        "time": (days, {"units": "days since 2024-01-01", "calendar": "standard"}),
        "lat": (lat, {"units": "degrees_north", "standard_name": "latitude"}),
        "lon": (lon, {"units": "degrees_east", "standard_name": "longitude"}),
    }
    for name, (values, attrs) in coords.items():
        coord = root.create_array(name, shape=values.shape, dtype=values.dtype, dimension_names=[name], attributes=attrs)
        coord[...] = values
    variables = {
        "t2m": (t2m, {"units": "K", "long_name": "2 metre temperature"}),
        "precip": (precip, {"units": "mm day-1", "long_name": "total precipitation"}),
    }
    for name, (values, attrs) in variables.items():
        variable = root.create_array(
            name, shape=values.shape, chunks=(73, 91, 90), dtype=values.dtype,
            dimension_names=dims, attributes=attrs, fill_value=np.nan,
        )  # fmt: skip
        variable[...] = values
    zarrx.consolidate_metadata(path)
    return root


def run_demo(directory: str | None) -> int:
    folder = Path(directory) if directory else Path(tempfile.mkdtemp(prefix="zarrx-demo-"))
    path = str(folder / "weather.zarr")
    started = time.perf_counter()
    write_demo_dataset(path)
    written = time.perf_counter() - started
    root = zarrx.open_group(path, mode="r")
    print(f"Wrote {path} in {written:.2f} s\n")
    print(root.tree())
    t2m = root["t2m"]
    print()
    print(t2m.info_complete())
    started = time.perf_counter()
    data = t2m[...]
    read = time.perf_counter() - started
    lat = root["lat"][...]
    print(f"\nRead t2m ({data.nbytes / 2**20:.1f} MiB) in {read:.2f} s")
    print("\nZonal-mean 2 m temperature (K), annual mean:")
    print(f"{'latitude':>10} {'t2m':>8}")
    zonal = data.mean(axis=(0, 2))
    for index in range(0, len(lat), 30):
        print(f"{lat[index]:>10.0f} {zonal[index]:>8.2f}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="zarrx", description="Zarr v3 for the dask/xarray world.")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="write a sample dataset, read it back and summarise it")
    demo.add_argument("directory", nargs="?", help="where to write weather.zarr (default: a new temporary folder)")
    args = parser.parse_args(argv)
    try:
        if args.command == "demo":
            return run_demo(args.directory)
    except ZarrxError as error:
        print(f"zarrx: {error}", file=sys.stderr)
        return 1
    return 2


if __name__ == "__main__":
    sys.exit(main())
