"""Million-chunk arrays: graph cost that follows the selection (issues 21 and 29), zarrx against its peers.

The data: one consolidated Zarr v3 group written by zarrx and read by every library, holding
three float32 variables ``t2m``, ``u10``, ``v10`` of shape (``--steps``, 64, 64) in chunks of
(1, 64, 64) -- 1,000,000 chunks each -- with dimension names (time, y, x), of which only the
first 20 time steps are stored (the rest reads as the fill value: what is measured is graph
work), and, in the subgroup ``reductions`` (out of the datasets' way), an array ``whole`` of
(``--whole``, 16, 16) in chunks of (1, 16, 16) for whole-array reductions.

The cases (each library's run of each case in a process of its own, so its peak memory --
the process' high-water mark, imports included -- is the case's; one warm-up run, then the
median of ``--repeat``):

* ``dask``: ``from_zarr(store, "t2m")[:10].sum().compute()``: ``zarrx.from_zarr`` vs
  ``dask.array.from_zarr`` on zarr-python; zarrx's ``region=(slice(0, 10),)`` (the selection
  given when the array is made); and zarrx with dask's array expressions
  (``DASK_ARRAY__QUERY_PLANNING=True``, where zarrx's read takes the pushed-down slice;
  ``dask.array.from_zarr`` is not implemented there as of dask 2026.8);
* ``xarray``: ``xr.open_dataset(store, chunks={}).isel(time=slice(0, 10)).mean().compute()``:
  engine="zarrx" with ``chunked_array_type="zarrx"``, engine="zarrx" without it (dask's chunk
  manager), engine="zarr"; and the recipe of docs/giant-datasets.md: ``open_dataset`` without
  chunks, ``isel``, then ``ds.zarrx.chunk()``;
* ``pattern``: ``open_dataset(chunks=None).isel(time=slice(0, 10)).chunk().mean()``, the way
  to the same gain without the opt-in, for both engines;
* ``whole``: ``from_zarr(store, "reductions/whole").sum().compute()``: zarrx vs
  dask.array.from_zarr;
* ``fallback``: what still pays the full price -- a list index (``x[[0, 5, 9]].sum()``) and
  arithmetic before the selection (``(x * 2)[:10].sum()``) -- zarrx vs dask.array.from_zarr;
* ``cluster``: the dask and xarray cases on ``LocalCluster(processes=True)`` (two workers).

``--baseline DIR`` adds a row per zarrx case run with the zarrx package in ``DIR`` (e.g. a
``git archive main zarrx`` of the version before), for before/after figures in the same run.
Every case checks that the libraries computed the same value. Run::

    python benchmarks/bench_giant.py                      # 1,000,000 steps, 100,000-chunk whole
    python benchmarks/bench_giant.py --cases dask,xarray  # some cases
    python benchmarks/bench_giant.py --smoke              # tiny, one run each: checks it works
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

VARIABLES = ("t2m", "u10", "v10")
WHOLE = "reductions/whole"
STORED_STEPS = 20

#: case -> the libraries run on it, in the order printed (the first is the reference)
CASES: dict[str, tuple[str, ...]] = {
    "dask": (
        "dask.array.from_zarr", "zarrx.from_zarr", "zarrx.from_zarr region=", "zarrx.from_zarr (expressions)",
    ),
    "xarray": ('engine="zarr"', 'engine="zarrx"', 'engine="zarrx" + opt-in', 'engine="zarrx" select, .zarrx.chunk()'),
    "pattern": ('engine="zarr"', 'engine="zarrx"'),
    "whole": ("dask.array.from_zarr", "zarrx.from_zarr"),
    "fallback-list": ("dask.array.from_zarr", "zarrx.from_zarr"),
    "fallback-arithmetic": ("dask.array.from_zarr", "zarrx.from_zarr"),
    "cluster-dask": ("dask.array.from_zarr", "zarrx.from_zarr"),
    "cluster-xarray": ('engine="zarr"', 'engine="zarrx" + opt-in'),
}
#: the zarrx row of each case a --baseline run repeats (without the opt-in, which it lacks)
BASELINE_ROWS = {
    "dask": "zarrx.from_zarr",
    "xarray": 'engine="zarrx"',
    "pattern": 'engine="zarrx"',
    "whole": "zarrx.from_zarr",
    "fallback-list": "zarrx.from_zarr",
    "fallback-arithmetic": "zarrx.from_zarr",
    "cluster-dask": "zarrx.from_zarr",
}
#: (case, row, reference row, largest ratio): the issue's targets
TARGETS = [
    ("dask", "zarrx.from_zarr region=", "dask.array.from_zarr", 0.05),
    ("dask", "zarrx.from_zarr", "dask.array.from_zarr", 0.5),
    ("dask", "zarrx.from_zarr (expressions)", "dask.array.from_zarr", 0.05),
    ("xarray", 'engine="zarrx" select, .zarrx.chunk()', 'engine="zarr"', 0.05),
]


@dataclass(frozen=True)
class Sizes:
    steps: int
    whole: int
    repeat: int


FULL = Sizes(steps=1_000_000, whole=100_000, repeat=3)
SMOKE = Sizes(steps=2_000, whole=1_000, repeat=1)


# -- the data ----------------------------------------------------------------------------------
def write_data(folder: str, sizes: Sizes) -> str:
    import zarrx

    path = os.path.join(folder, f"giant-{sizes.steps}-{sizes.whole}.zarr")
    if os.path.exists(os.path.join(path, "zarr.json")):
        return path
    root = zarrx.create_group(path, overwrite=True)
    rng = np.random.default_rng(0)
    for name in VARIABLES:
        variable = root.create_array(
            name, shape=(sizes.steps, 64, 64), chunks=(1, 64, 64), dtype="float32", fill_value=np.nan,
            dimension_names=["time", "y", "x"], attributes={"units": "K"},
        )
        variable[:STORED_STEPS] = rng.normal(288, 5, (STORED_STEPS, 64, 64)).astype("float32")
    whole = root.create_group("reductions").create_array(
        "whole", shape=(sizes.whole, 16, 16), chunks=(1, 16, 16), dtype="float32", fill_value=1.0,
        dimension_names=["step", "v", "w"],
    )
    whole[:STORED_STEPS] = 2.0
    zarrx.consolidate_metadata(path)
    return path


# -- one case in one process -------------------------------------------------------------------
def _case_function(case: str, row: str, path: str) -> Callable[[], float]:
    """What the worker times: a function computing one number."""
    import dask.array as da
    import xarray as xr

    import zarrx

    def dask_array(name: str) -> Any:
        return zarrx.from_zarr(path, name) if row.startswith("zarrx") else da.from_zarr(path, component=name)

    def first_ten() -> Any:
        if "region=" in row:
            return zarrx.from_zarr(path, "t2m", region=(slice(0, 10),))
        return dask_array("t2m")[:10]

    def xarray_dataset(chunks: Any) -> Any:
        engine = "zarrx" if "zarrx" in row else "zarr"
        options = {"chunked_array_type": "zarrx"} if "opt-in" in row else {}
        return xr.open_dataset(path, engine=engine, chunks=chunks, **options)

    def xarray_first_ten() -> Any:
        if ".zarrx.chunk()" in row:  # select, then chunk along the stored chunks
            return xarray_dataset(None).isel(time=slice(0, 10)).zarrx.chunk()
        return xarray_dataset({}).isel(time=slice(0, 10))

    functions: dict[str, Callable[[], float]] = {
        "dask": lambda: float(first_ten().sum().compute()),
        "xarray": lambda: float(xarray_first_ten().mean().compute().t2m),
        "pattern": lambda: float(xarray_dataset(None).isel(time=slice(0, 10)).chunk().mean().compute().t2m),
        "whole": lambda: float(dask_array(WHOLE).sum().compute()),
        "fallback-list": lambda: float(dask_array("t2m")[[0, 5, 9]].sum().compute()),
        "fallback-arithmetic": lambda: float((dask_array("t2m") * 2)[:10].sum().compute()),
    }
    functions["cluster-dask"] = functions["dask"]
    functions["cluster-xarray"] = functions["xarray"]
    return functions[case]


def worker(case: str, row: str, path: str, repeat: int) -> dict[str, Any]:
    """Time one case (a warm-up run, then ``repeat``); the value it computed and the peak memory."""
    warnings.simplefilter("ignore")
    import dask

    function = _case_function(case, row, path)
    cluster = client = None
    if case.startswith("cluster"):
        import distributed

        cluster = distributed.LocalCluster(
            n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None, silence_logs=40
        )
        client = distributed.Client(cluster)
    try:
        with dask.config.set(scheduler=client or "threads"):
            value = function()
            times = []
            for _ in range(repeat):
                start = time.perf_counter()
                function()
                times.append(time.perf_counter() - start)
    finally:
        if client is not None:
            client.close()
            cluster.close()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    return {"median": statistics.median(times), "value": value, "peak_mib": peak}


def run_worker(case: str, row: str, path: str, repeat: int, baseline: str | None) -> dict[str, Any]:
    command = [sys.executable, os.path.abspath(__file__), "--worker", case, row, path, str(repeat)]
    if baseline:
        command += ["--baseline", baseline]
    # dask reads array.query-planning once, when dask.array is first imported: a process of its own
    environment = {**os.environ, "DASK_ARRAY__QUERY_PLANNING": str("(expressions)" in row)}
    completed = subprocess.run(command, capture_output=True, text=True, cwd=tempfile.gettempdir(), env=environment)
    if completed.returncode:
        raise RuntimeError(f"{case} / {row} failed:\n{completed.stdout[-2000:]}{completed.stderr[-4000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


# -- the table -----------------------------------------------------------------------------------
def run(sizes: Sizes, cases: list[str], folder: str, baseline: str | None) -> list[dict[str, Any]]:
    path = write_data(folder, sizes)
    results = []
    for case in cases:
        rows = list(CASES[case])
        jobs = [(row, None) for row in rows]
        if baseline and case in BASELINE_ROWS:
            jobs.append((BASELINE_ROWS[case] + " (baseline)", baseline))
        reference = None
        for row, package in jobs:
            result = run_worker(case, row.removesuffix(" (baseline)"), path, sizes.repeat, package)
            result.update(case=case, row=row)
            if reference is None:
                reference = result
            elif not np.isclose(result["value"], reference["value"], rtol=1e-5, equal_nan=True):
                raise AssertionError(f"{case}: {row} computed {result['value']}, {reference['row']} {reference['value']}")
            result["ratio"] = result["median"] / reference["median"]
            results.append(result)
            print(f"  {case:<20} {row:<34} {result['median'] * 1e3:>10.1f} ms  {result['peak_mib']:>7.0f} MiB", flush=True)
    return results


def print_table(results: list[dict[str, Any]], sizes: Sizes) -> None:
    print("\n| case | library | median | x first row | peak memory |\n|---|---|---:|---:|---:|")
    for result in results:
        print(
            f"| {result['case']} | {result['row']} | {result['median'] * 1e3:.1f} ms | {result['ratio']:.3f} | "
            f"{result['peak_mib']:.0f} MiB |"
        )
    print()
    by_row = {(result["case"], result["row"]): result for result in results}
    for case, row, reference, limit in TARGETS:
        if (case, row) in by_row and (case, reference) in by_row:
            ratio = by_row[case, row]["median"] / by_row[case, reference]["median"]
            verdict = "met" if ratio <= limit else "MISSED"
            note = " (smoke sizes: not meaningful)" if sizes is SMOKE else ""
            print(f"target {case}: {row} <= {limit}x {reference}: {ratio:.3f}x {verdict}{note}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one run each: checks the script works")
    parser.add_argument("--steps", type=int, help="time steps (chunks) of each variable")
    parser.add_argument("--whole", type=int, help="chunks of the array reduced whole")
    parser.add_argument("--repeat", type=int, help="timed runs per case (after a warm-up run)")
    parser.add_argument("--cases", help=f"comma-separated, of: {', '.join(CASES)} (default: all)")
    parser.add_argument("--data-dir", help="where to write the store (kept and reused; default: a temporary folder)")
    parser.add_argument("--baseline", help="a folder holding another zarrx package, timed too (before/after)")
    parser.add_argument("--worker", nargs=4, metavar=("CASE", "ROW", "PATH", "REPEAT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        if args.baseline:
            sys.path.insert(0, args.baseline)
        case, row, path, repeat = args.worker
        print(json.dumps(worker(case, row, path, int(repeat))))
        return
    sizes = SMOKE if args.smoke else FULL
    sizes = Sizes(args.steps or sizes.steps, args.whole or sizes.whole, args.repeat or sizes.repeat)
    cases = args.cases.split(",") if args.cases else list(CASES)
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        parser.error(f"unknown cases {unknown}; known: {list(CASES)}")
    import dask
    import xarray
    import zarr

    import zarrx

    print(
        f"zarrx {zarrx.__version__}, zarr-python {zarr.__version__}, dask {dask.__version__}, xarray "
        f"{xarray.__version__}, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs; {sizes.steps:,} chunks per "
        f"variable, whole: {sizes.whole:,} chunks; median of {sizes.repeat} after a warm-up run\n"
    )
    if args.data_dir:
        os.makedirs(args.data_dir, exist_ok=True)
        results = run(sizes, cases, args.data_dir, args.baseline)
    else:
        with tempfile.TemporaryDirectory(prefix="bench-giant-") as folder:
            results = run(sizes, cases, folder, args.baseline)
    print_table(results, sizes)


if __name__ == "__main__":
    main()
