"""Reads over a high-latency store: zarrx vs zarr-python on one loopback HTTP server.

Every request to an object store costs tens of milliseconds whatever its size, so what
matters remotely is how many round trips a read takes and how many requests are in
flight at once. This benchmark serves a folder over HTTP from a separate process
(:mod:`tests.http_server`: byte ranges, folder listings, and a fixed ``--delay``, 20 ms by
default, added to every request) and counts the requests the server sees. Both libraries
read the same data from the same server in one run, each through fsspec's HTTP file
system with its default settings (zarrx: up to 64 requests in flight; zarr-python: 10):

1. **read 256 chunks**: open a (256, 256) float32 array in 16 x 16 chunks and read it all;
2. **open 100 variables**: ``xr.open_dataset(url, engine=...)`` of a store of 100 variables
   on (time, cell) with two coordinates, written by xarray (Zarr v3), with consolidated
   metadata (``consolidated=True``) and without (``consolidated=False``: list the group,
   read every array's ``zarr.json``); ``engine="zarrx"`` vs ``engine="zarr"``;
3. **sharded region**: open a (64, 512, 512) float32 array in shards of 64 x 256 x 256
   (inner chunks 16 x 32 x 32, zstd) and read a 20 x 100 x 100 region crossing two shards.

Each case runs once to warm up (imports, connection pools), then ``--repeat`` times; the
table gives the median wall time and the requests of one run (the same every run), and
the most requests the server had in flight at once. Results are checked to be equal
between the libraries.

Usage::

    python benchmarks/bench_latency.py                 # 20 ms per request, 5 runs each
    python benchmarks/bench_latency.py --output t.md   # also write the table to t.md
    python benchmarks/bench_latency.py --smoke         # tiny sizes, 2 ms, one run: CI
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import xarray as xr
import zarr

import zarrx
import zarrx.xarray  # noqa: F401 (engine="zarrx")

REPO = Path(__file__).resolve().parent.parent
LIBRARIES = ("zarrx", "zarr-python")


@dataclass(frozen=True)
class Sizes:
    array: tuple[int, ...]
    chunks: tuple[int, ...]
    variables: int
    sharded: tuple[int, ...]
    shards: tuple[int, ...]
    inner: tuple[int, ...]
    region: tuple[slice, ...]


FULL = Sizes(
    array=(256, 256), chunks=(16, 16), variables=100,
    sharded=(64, 512, 512), shards=(64, 256, 256), inner=(16, 32, 32),
    region=(slice(10, 30), slice(130, 230), slice(170, 270)),
)  # fmt: skip
SMOKE = Sizes(
    array=(64, 64), chunks=(16, 16), variables=10,
    sharded=(32, 128, 128), shards=(32, 64, 64), inner=(16, 32, 32),
    region=(slice(3, 13), slice(20, 60), slice(40, 80)),
)  # fmt: skip


# -- data ---------------------------------------------------------------------------------------
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


def write_data(root: Path, sizes: Sizes) -> None:
    rng = np.random.default_rng(0)
    chunked = zarrx.create_array(root / "chunks.zarr", shape=sizes.array, chunks=sizes.chunks, dtype="f4")
    chunked[:] = rng.random(sizes.array, dtype=np.float32)
    sharded = zarrx.create_array(
        root / "sharded.zarr", shape=sizes.sharded, chunks=sizes.inner, shards=sizes.shards, dtype="f4",
        compressors=[{"name": "zstd", "configuration": {"level": 1, "checksum": False}}],
    )  # fmt: skip
    z = np.arange(sizes.sharded[0], dtype=np.float32)[:, None, None]
    y = np.arange(sizes.sharded[1], dtype=np.float32)[None, :, None]
    x = np.arange(sizes.sharded[2], dtype=np.float32)[None, None, :]
    sharded[:] = np.round(np.sin(z / 7) + np.cos(y / 13) * np.sin(x / 5), 3)
    dataset = many_variables(sizes.variables)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr-python warns that v3 consolidated metadata is not in the spec
        dataset.to_zarr(root / "variables_consolidated.zarr", zarr_format=3, consolidated=True)
        dataset.to_zarr(root / "variables.zarr", zarr_format=3, consolidated=False)


# -- the server ---------------------------------------------------------------------------------
class Server:
    """tests/http_server.py in a process of its own."""

    def __init__(self, directory: Path, delay: float) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.http_server", str(directory), "--delay", str(delay)],
            cwd=REPO, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.url = self.process.stdout.readline().strip()
        if not self.url.startswith("http://"):
            self.close()
            raise RuntimeError(f"the HTTP server did not start (it printed {self.url!r})")

    def _control(self, path: str) -> dict[str, Any]:
        with urllib.request.urlopen(self.url + path, timeout=10) as response:
            return json.load(response)

    def reset(self) -> None:
        self._control("/__reset__")

    def stats(self) -> dict[str, Any]:
        return self._control("/__stats__")

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


# -- the cases ----------------------------------------------------------------------------------
def cases(url: str, sizes: Sizes) -> dict[str, dict[str, Callable[[], Any]]]:
    """case -> library -> the operation (from the URL: opening is part of it)."""
    n_chunks = int(np.prod([-(-s // c) for s, c in zip(sizes.array, sizes.chunks)]))
    region = sizes.region
    shape = "x".join(str(s.stop - s.start) for s in region)

    def open_dataset(engine: str, name: str, consolidated: bool) -> Callable[[], xr.Dataset]:
        return lambda: xr.open_dataset(f"{url}/{name}", engine=engine, consolidated=consolidated)

    return {
        f"read {n_chunks} chunks": {
            "zarrx": lambda: zarrx.open_array(f"{url}/chunks.zarr")[:],
            "zarr-python": lambda: zarr.open_array(f"{url}/chunks.zarr", mode="r")[:],
        },
        f"xarray open, {sizes.variables} variables, consolidated": {
            "zarrx": open_dataset("zarrx", "variables_consolidated.zarr", True),
            "zarr-python": open_dataset("zarr", "variables_consolidated.zarr", True),
        },
        f"xarray open, {sizes.variables} variables, not consolidated": {
            "zarrx": open_dataset("zarrx", "variables.zarr", False),
            "zarr-python": open_dataset("zarr", "variables.zarr", False),
        },
        f"sharded region {shape}": {
            "zarrx": lambda: zarrx.open_array(f"{url}/sharded.zarr")[region],
            "zarr-python": lambda: zarr.open_array(f"{url}/sharded.zarr", mode="r")[region],
        },
    }


def check_same(case: str, results: dict[str, Any]) -> None:
    first, second = (results[library] for library in LIBRARIES)
    if isinstance(first, xr.Dataset):
        xr.testing.assert_identical(first.load(), second.load())
    else:
        np.testing.assert_array_equal(first, second, err_msg=case)


@dataclass
class Measurement:
    seconds: float
    requests: int
    in_flight: int


def measure(server: Server, operation: Callable[[], Any], repeat: int) -> tuple[Measurement, Any]:
    result = operation()  # warm-up: imports, connection pools, fsspec's file system instances
    times, stats = [], {}
    for _ in range(repeat):
        server.reset()
        started = time.perf_counter()
        result = operation()  # for xarray: the open (which reads the index coordinates), not the data
        times.append(time.perf_counter() - started)
        stats = server.stats()
    return Measurement(statistics.median(times), stats["requests"], stats["max_in_flight"]), result


def table(results: dict[str, dict[str, Measurement]], delay: float) -> str:
    versions = f"zarrx {importlib.metadata.version('zarrx')}, zarr-python {zarr.__version__}"
    lines = [
        f"Loopback HTTP server adding {delay * 1000:g} ms to every request ({versions}; "
        "wall time is the median of the runs; requests per run; most requests in flight at once).",
        "",
        "| case | zarrx | zarr-python | zarrx speed-up |",
        "|---|---|---|---|",
    ]
    for case, by_library in results.items():
        cells = [
            f"{m.seconds * 1000:.0f} ms, {m.requests} requests (≤{m.in_flight} at once)"
            for m in (by_library[library] for library in LIBRARIES)
        ]
        speedup = by_library["zarr-python"].seconds / by_library["zarrx"].seconds
        lines.append(f"| {case} | {cells[0]} | {cells[1]} | {speedup:.1f}x |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, a 2 ms delay, one run (for CI)")
    parser.add_argument("--delay", type=float, default=None, help="seconds added to every request (default 0.02)")
    parser.add_argument("--repeat", type=int, default=None, help="timed runs per case (default 5)")
    parser.add_argument("--output", type=Path, default=None, help="also write the table (Markdown) here")
    arguments = parser.parse_args(argv)
    sizes = SMOKE if arguments.smoke else FULL
    delay = arguments.delay if arguments.delay is not None else (0.002 if arguments.smoke else 0.02)
    repeat = arguments.repeat or (1 if arguments.smoke else 5)

    with tempfile.TemporaryDirectory(prefix="zarrx-bench-latency-") as folder:
        root = Path(folder)
        write_data(root, sizes)
        server = Server(root, delay)
        try:
            results: dict[str, dict[str, Measurement]] = {}
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # zarr-python's warnings about v3 consolidated metadata
                for case, operations in cases(server.url, sizes).items():
                    values = {}
                    results[case] = {}
                    for library in LIBRARIES:
                        results[case][library], values[library] = measure(server, operations[library], repeat)
                        print(f"{case:<48} {library:<12} {results[case][library].seconds * 1000:8.1f} ms "
                              f"{results[case][library].requests:5d} requests", flush=True)  # fmt: skip
                    check_same(case, values)
        finally:
            server.close()
    text = table(results, delay)
    print()
    print(text)
    if arguments.output is not None:
        arguments.output.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
