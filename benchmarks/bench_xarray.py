"""Opening a many-variable store: ``xr.open_dataset(engine="zarrx")`` vs ``engine="zarr"``.

One local store of ``--variables`` (200) small float32 variables on two dimensions with
coordinates and CF attributes, written by xarray's own ``to_zarr`` (Zarr v3), in two copies:
with consolidated metadata and without. Each engine opens each copy, lazily
(``chunks=None``) and as dask arrays (``chunks={}``), with the matching ``consolidated=``
(True / False, so neither engine probes for what is not there). A check compares the two
engines' datasets once with ``xr.testing.assert_identical``.

Each timing is the median of ``--repeat`` runs after one warm-up run. Run::

    python benchmarks/bench_xarray.py            # 200 variables, 15 runs each
    python benchmarks/bench_xarray.py --smoke    # 20 variables, 2 runs each
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings
from typing import Callable

import numpy as np
import xarray as xr
import zarr

import zarrx
import zarrx.xarray  # noqa: F401 (engine and accessors)


def median_time(function: Callable[[], object], repeat: int) -> float:
    times = []
    for run in range(repeat + 1):  # the first run warms up (imports, caches) and is not counted
        start = time.perf_counter()
        function()
        if run:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def many_variables(count: int) -> xr.Dataset:
    rng = np.random.default_rng(0)
    return xr.Dataset(
        {
            f"var{i:03d}": (("time", "cell"), rng.random((8, 16), dtype=np.float32), {"units": "K", "index": i})
            for i in range(count)
        },
        coords={"time": np.arange(8), "cell": np.arange(16)},
        attrs={"title": "many variables"},
    )


def run(count: int, repeat: int, root: str) -> list[tuple[str, float, float]]:
    dataset = many_variables(count)
    paths = {}
    for consolidated in (True, False):
        paths[consolidated] = os.path.join(root, f"many-{consolidated}.zarr")
        dataset.to_zarr(paths[consolidated], mode="w", zarr_format=3, consolidated=consolidated)
    rows = []
    for consolidated, path in paths.items():
        for chunks in (None, {}):

            def open_with(engine: str) -> xr.Dataset:
                return xr.open_dataset(path, engine=engine, consolidated=consolidated, chunks=chunks)

            xr.testing.assert_identical(open_with("zarrx"), open_with("zarr"))
            label = f"{count} variables, {'consolidated' if consolidated else 'not consolidated'}, chunks={chunks}"
            ours = median_time(lambda: open_with("zarrx"), repeat)
            theirs = median_time(lambda: open_with("zarr"), repeat)
            rows.append((label, ours, theirs))
    return rows


def print_table(rows: list[tuple[str, float, float]]) -> None:
    width = max(len(label) for label, _, _ in rows)
    print(f"{'open_dataset':<{width}}  {'zarrx':>10}  {'zarr':>10}  {'zarr / zarrx':>12}")
    for label, ours, theirs in rows:
        print(f"{label:<{width}}  {ours * 1e3:>8.1f}ms  {theirs * 1e3:>8.1f}ms  {theirs / ours:>11.2f}x")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="20 variables, two runs each: checks the script works")
    parser.add_argument("--variables", type=int, help="variables in the store (default 200)")
    parser.add_argument("--repeat", type=int, help="runs per timing (median reported)")
    args = parser.parse_args(argv)
    count = args.variables or (20 if args.smoke else 200)
    repeat = args.repeat or (2 if args.smoke else 15)
    print(
        f"zarrx {zarrx.__version__}, xarray {xr.__version__}, zarr-python {zarr.__version__}, "
        f"numpy {np.__version__}, Python {sys.version.split()[0]}, local directory store, median of {repeat}\n"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr-python's warnings about its own v3 extensions
        with tempfile.TemporaryDirectory(prefix="bench-xarray-") as root:
            rows = run(count, repeat, root)
    print_table(rows)


if __name__ == "__main__":
    main()
