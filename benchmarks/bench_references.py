"""kerchunk references of a NetCDF4 file read through zarrx and through engine="zarr".

The file is written by netCDF4 (``--chunks`` chunks of 16 x 16 float32, zlib + shuffle), its
references made by kerchunk's ``SingleHdf5ToZarr``; the whole variable is read with
``xr.open_dataset("reference://", engine=..., storage_options={"fo": ..., "remote_protocol": ...,
"remote_options": {"asynchronous": True}}).values`` -- the options both engines take -- with the
file as a local file, over :mod:`tests.http_server` in a process of its own adding ``--delay``
(20 ms) to every request, and over exactly ``python -m http.server`` (which answers a byte range
with the whole file: engine="zarr" then fails, reported as such). Every measurement runs in a
**fresh process** (imports done and one read made before the clock starts, then the median of
three reads), ``--repeat`` processes per case (default 3), libraries interleaved; the table gives
the median over processes and the ratio zarrx / engine="zarr"; every read must give the file's
values (a digest checked against netCDF4's). ``--smoke`` reads every case in
one process per engine.

Usage::

    python benchmarks/bench_references.py
    python benchmarks/bench_references.py --smoke      # 16 chunks, 2 ms, one process each: CI
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # the servers of the test suite

from tests.http_server import PlainServer, ServerProcess  # noqa: E402

ENGINES = ("zarrx", "zarr")
#: the digest of the values every read must give
DIGESTS: dict[str, str] = {}

#: the script a fresh process runs: engine, then references file and protocol of each case;
#: prints the seconds and the values' digest of each case ("fails" for a case the engine fails)
READ = """
import hashlib, json, statistics, sys, time, warnings
warnings.simplefilter("ignore")
import xarray as xr
import zarrx.xarray
engine, cases = sys.argv[1], sys.argv[2:]

def read(options):
    started = time.perf_counter()
    ds = xr.open_dataset("reference://", engine=engine, consolidated=False, storage_options=options)
    values = ds["v"].values
    return time.perf_counter() - started, hashlib.sha256(values.tobytes()).hexdigest()

for fo, protocol in zip(cases[::2], cases[1::2]):
    options = {"fo": json.load(open(fo)), "remote_protocol": protocol, "remote_options": {"asynchronous": True}}
    try:
        _, digest = read(options)  # imports, file systems, connections
        print(statistics.median(read(options)[0] for _ in range(3)), digest, flush=True)
    except Exception:
        print("fails", flush=True)
"""


def write_file(folder: Path, chunks: int) -> dict:
    import netCDF4
    import numpy as np
    from kerchunk.hdf import SingleHdf5ToZarr

    path = folder / "data.nc"
    with netCDF4.Dataset(path, "w") as nc:
        nc.createDimension("t", chunks // 16)
        nc.createDimension("y", 64)
        nc.createDimension("x", 64)
        v = nc.createVariable("v", "f4", ("t", "y", "x"), zlib=True, shuffle=True, chunksizes=(1, 16, 16))
        v[:] = np.random.default_rng(0).random((chunks // 16, 64, 64), dtype="f4")
    with netCDF4.Dataset(path) as nc:
        DIGESTS["values"] = hashlib.sha256(np.asarray(nc["v"][...]).tobytes()).hexdigest()
    return SingleHdf5ToZarr(str(path), inline_threshold=0).translate()


def references_at(refs: dict, url: str, folder: Path, name: str) -> str:
    moved = {**refs, "refs": {k: [url, *v[1:]] if isinstance(v, list) else v for k, v in refs["refs"].items()}}
    path = folder / name
    path.write_text(json.dumps(moved))
    return str(path)


def measure(engine: str, cases: list[tuple[str, str]]) -> list[float | None]:
    """Seconds of each case (None: the engine failed), in one fresh process; every read that
    succeeds must give the values of the file (one digest for all)."""
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    arguments = [part for case in cases for part in case]
    result = subprocess.run([sys.executable, "-c", READ, engine, *arguments], capture_output=True, text=True,
                            env=environment, timeout=600)  # fmt: skip
    if result.returncode:
        raise RuntimeError(result.stderr[-3000:])
    seconds = []
    for line in result.stdout.splitlines():
        if line == "fails":
            seconds.append(None)
            continue
        time_taken, digest = line.split()
        if DIGESTS.setdefault("values", digest) != digest:
            raise AssertionError(f"{engine} read other values than the file holds ({cases})")
        seconds.append(float(time_taken))
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=256)
    parser.add_argument("--delay", type=float, default=0.02)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--smoke", action="store_true")
    arguments = parser.parse_args()
    if arguments.smoke:
        arguments.chunks, arguments.delay, arguments.repeat = 16, 0.002, 1
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        refs = write_file(folder, arguments.chunks)
        server = ServerProcess(["-m", "tests.http_server", str(folder), "--delay", str(arguments.delay)], cwd=REPO)
        plain = PlainServer(folder)
        try:
            cases = {
                "local file": (references_at(refs, str(folder / "data.nc"), folder, "local.json"), "file"),
                f"HTTP, {arguments.delay * 1000:g} ms": (references_at(refs, f"{server.url}/data.nc", folder, "http.json"), "http"),
                "python -m http.server": (references_at(refs, f"{plain.url}/data.nc", folder, "plain.json"), "http"),
            }  # fmt: skip
            times: dict[tuple[str, str], list[float | None]] = {}
            # one case per fresh process; --smoke: all cases in one process per engine
            groups = [list(cases)] if arguments.smoke else [[case] for case in cases]
            for _ in range(arguments.repeat):
                for group in groups:
                    for engine in ENGINES:
                        for case, seconds in zip(group, measure(engine, [cases[case] for case in group]), strict=True):
                            times.setdefault((case, engine), []).append(seconds)
        finally:
            server.close()
            plain.close()
    print(f"{arguments.chunks} chunks; seconds, median of {arguments.repeat} fresh processes; load {os.getloadavg()[0]:.1f}\n")
    print("| target | zarrx | engine=\"zarr\" | zarrx / zarr |\n| --- | --- | --- | --- |")
    for case in cases:
        medians = {}
        for engine in ENGINES:
            runs = times[(case, engine)]
            medians[engine] = None if None in runs else statistics.median(runs)
        cells = [f"{medians[e]:.3f}" if medians[e] is not None else "fails" for e in ENGINES]
        ratio = f"{medians['zarrx'] / medians['zarr']:.2f}" if None not in medians.values() else "-"
        print(f"| {case} | {cells[0]} | {cells[1]} | {ratio} |")


if __name__ == "__main__":
    main()
