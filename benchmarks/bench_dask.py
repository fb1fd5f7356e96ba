"""zarrx's dask integration against dask.array's own Zarr functions on zarr-python.

Both sides work on local directories holding the same data with the same codecs
(bytes + zstd level 0, each library's default) and use dask's threaded scheduler:

* read:  ``zarrx.from_zarr(p).sum().compute()``  vs ``dask.array.from_zarr(p).sum().compute()``
  (chunked, and sharded: each library's default blocks, which for zarrx is one
  task per shard and for dask.array.from_zarr one per inner chunk; plus zarrx
  with inner-chunk blocks to compare like with like);
* write: ``zarrx.to_zarr(x, p)``  vs ``dask.array.to_zarr(x, p)``, x in memory;
* a 1,000,000-chunk array (metadata only): opening it and building the dask
  array, computing a 20x14 selection, and summing a 20x20 corner.

Each timing is the median of ``--repeat`` runs. Run::

    python benchmarks/bench_dask.py            # the full sizes (about a minute)
    python benchmarks/bench_dask.py --smoke    # tiny sizes, a few seconds
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Callable

import dask
import dask.array as da
import numpy as np
import zarr

import zarrx


@dataclass(frozen=True)
class Sizes:
    shape: tuple[int, int]
    chunks: tuple[int, int]
    shards: tuple[int, int]
    many_shape: tuple[int, int]  # the array with many chunks (of 10 x 10)
    repeat: int


FULL = Sizes(shape=(4096, 4096), chunks=(256, 256), shards=(1024, 1024), many_shape=(10_000, 10_000), repeat=5)
SMOKE = Sizes(shape=(256, 256), chunks=(64, 64), shards=(128, 128), many_shape=(300, 300), repeat=2)
MANY_CHUNKS = (10, 10)


def median_time(function: Callable[[], object], repeat: int, setup: Callable[[], object] | None = None) -> float:
    times = []
    for run in range(repeat + 1):  # the first run warms up (imports, caches) and is not counted
        if setup is not None:
            setup()
        start = time.perf_counter()
        function()
        if run:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def sample_data(shape: tuple[int, int]) -> np.ndarray:
    """Smooth values with some noise: compressible, like most measured data."""
    rng = np.random.default_rng(0)
    rows, columns = np.indices(shape, dtype=np.float32)
    return (np.sin(rows / 50) * np.cos(columns / 70) * 100 + rng.integers(0, 4, shape)).astype(np.float32)


def write_both(
    root: str, name: str, data: np.ndarray, chunks: tuple[int, int], shards: tuple[int, int] | None
) -> tuple[str, str]:
    """The same data as a zarrx array and a zarr-python array; their paths."""
    ours, theirs = os.path.join(root, f"{name}-zarrx.zarr"), os.path.join(root, f"{name}-zarr.zarr")
    layout = {"shape": data.shape, "dtype": data.dtype, "chunks": chunks, "shards": shards, "overwrite": True}
    zarrx.create_array(ours, **layout)[...] = data
    zarr.create_array(theirs, **layout)[...] = data
    return ours, theirs


def remover(path: str) -> Callable[[], None]:
    return lambda: shutil.rmtree(path, ignore_errors=True)


def run(sizes: Sizes, root: str) -> list[tuple[str, float, float]]:
    rows = []
    data = sample_data(sizes.shape)
    expected = float(data.sum(dtype=np.float64))

    def check(result: object) -> None:
        if not np.isclose(float(result), expected, rtol=1e-4):
            raise AssertionError(f"wrong sum {result} (expected {expected})")

    # reading
    for label, shards in [("chunked", None), ("sharded", sizes.shards)]:
        ours, theirs = write_both(root, label, data, sizes.chunks, shards)
        zarrx_time = median_time(lambda: check(zarrx.from_zarr(ours).sum().compute()), sizes.repeat)
        dask_time = median_time(lambda: check(da.from_zarr(theirs).sum().compute()), sizes.repeat)
        rows.append((f"read sum, {label} {sizes.shape} / {shards or sizes.chunks}", zarrx_time, dask_time))
        if shards is not None:
            inner = median_time(lambda: check(zarrx.from_zarr(ours, chunks=sizes.chunks).sum().compute()), sizes.repeat)
            rows.append((f"read sum, sharded, blocks of inner chunks {sizes.chunks}", inner, dask_time))

    # writing
    x = da.from_array(data, chunks=sizes.chunks)
    out_ours, out_theirs = os.path.join(root, "out-zarrx.zarr"), os.path.join(root, "out-zarr.zarr")
    zarrx_time = median_time(lambda: zarrx.to_zarr(x, out_ours, overwrite=True), sizes.repeat, remover(out_ours))
    dask_time = median_time(lambda: da.to_zarr(x, out_theirs, mode="w"), sizes.repeat, remover(out_theirs))
    np.testing.assert_array_equal(zarrx.open_array(out_ours)[...], zarr.open_array(out_theirs)[...])
    rows.append((f"write {sizes.shape} in blocks {sizes.chunks}", zarrx_time, dask_time))

    x = da.from_array(data, chunks=sizes.shards)
    zarrx_time = median_time(
        lambda: zarrx.to_zarr(x, out_ours, overwrite=True, chunks=sizes.chunks, shards=sizes.shards),
        sizes.repeat,
        remover(out_ours),
    )
    dask_time = median_time(
        lambda: da.to_zarr(x, out_theirs, mode="w", chunks=sizes.chunks, shards=sizes.shards),
        sizes.repeat,
        remover(out_theirs),
    )
    np.testing.assert_array_equal(zarrx.open_array(out_ours)[...], data)
    np.testing.assert_array_equal(zarr.open_array(out_theirs)[...], data)
    rows.append((f"write sharded {sizes.shards} / {sizes.chunks}", zarrx_time, dask_time))

    # a million chunks: metadata and a corner of data
    corner = np.arange(100 * 100, dtype=np.float32).reshape(100, 100)
    many_ours, many_theirs = os.path.join(root, "many-zarrx.zarr"), os.path.join(root, "many-zarr.zarr")
    layout = {"shape": sizes.many_shape, "dtype": "float32", "chunks": MANY_CHUNKS, "fill_value": 0, "overwrite": True}
    array = zarrx.create_array(many_ours, **layout)
    array[:100, :100] = corner
    zarr.create_array(many_theirs, **layout)[:100, :100] = corner
    nchunks = array.nchunks
    rows.append(
        (
            f"open + build graph, {nchunks:,} chunks",
            median_time(lambda: zarrx.from_zarr(many_ours), sizes.repeat),
            median_time(lambda: da.from_zarr(many_theirs), sizes.repeat),
        )
    )
    ours_x, theirs_x = zarrx.from_zarr(many_ours), da.from_zarr(many_theirs)
    selection = np.s_[5:25, 3:17]
    np.testing.assert_array_equal(ours_x[selection].compute(), corner[selection])
    np.testing.assert_array_equal(theirs_x[selection].compute(), corner[selection])
    rows.append(
        (
            f"compute a 20x14 selection, {nchunks:,} chunks",
            median_time(lambda: ours_x[selection].compute(), sizes.repeat),
            median_time(lambda: theirs_x[selection].compute(), sizes.repeat),
        )
    )
    rows.append(
        (
            f"open, build, compute the selection, {nchunks:,} chunks",
            median_time(lambda: zarrx.from_zarr(many_ours)[selection].compute(), sizes.repeat),
            median_time(lambda: da.from_zarr(many_theirs)[selection].compute(), sizes.repeat),
        )
    )
    rows.append(
        (
            f"sum of a 20x20 corner, {nchunks:,} chunks",
            median_time(lambda: ours_x[:20, :20].sum().compute(), sizes.repeat),
            median_time(lambda: theirs_x[:20, :20].sum().compute(), sizes.repeat),
        )
    )
    return rows


def print_table(rows: list[tuple[str, float, float]]) -> None:
    width = max(len(label) for label, _, _ in rows)
    header = f"{'operation':<{width}}  {'zarrx':>10}  {'dask+zarr':>10}  {'ratio':>7}"
    print(header)
    print("-" * len(header))
    for label, ours, theirs in rows:
        print(f"{label:<{width}}  {ours * 1e3:>8.1f}ms  {theirs * 1e3:>8.1f}ms  {theirs / ours:>6.1f}x")
    print("ratio: dask.array + zarr-python time / zarrx time (above 1: zarrx is faster)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, two runs each: checks the script works")
    parser.add_argument("--repeat", type=int, help="runs per timing (median reported)")
    parser.add_argument("--dir", help="where to write the arrays (default: a temporary folder)")
    args = parser.parse_args(argv)
    sizes = SMOKE if args.smoke else FULL
    if args.repeat:
        sizes = Sizes(sizes.shape, sizes.chunks, sizes.shards, sizes.many_shape, args.repeat)
    print(
        f"zarrx {zarrx.__version__}, zarr-python {zarr.__version__}, dask {dask.__version__}, numpy {np.__version__}, "
        f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, threaded scheduler, median of {sizes.repeat}\n"
    )
    with dask.config.set(scheduler="threads"):
        if args.dir:
            os.makedirs(args.dir, exist_ok=True)
            rows = run(sizes, args.dir)
        else:
            with tempfile.TemporaryDirectory(prefix="bench-dask-") as root:
                rows = run(sizes, root)
    print_table(rows)


if __name__ == "__main__":
    main()
