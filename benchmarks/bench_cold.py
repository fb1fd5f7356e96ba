"""Cold storage: the zarrs benchmark suite's three arrays read and copied with the page cache dropped.

The arrays of the public zarrs benchmark suite (github.com/LDeakin/zarr_benchmarks), scaled to
512 x 1024 x 1024 uint16 (1 GiB), its values ``(x + y**2 / 32 + z**3) % 65536``:

* ``uncompressed``: chunks 256 x 256 x 256, no compressor;
* ``blosc``: chunks 256 x 256 x 256, blosc blosclz level 9 bitshuffle;
* ``sharded``: shards 256 x 256 x 256 of 32 x 32 x 32 inner chunks, the same blosc.

Its benchmarks, for zarrx, zarr-python, zarr-python with the zarrs codec pipeline and tensorstore:
read all (``a[...]``), chunk by chunk (shard by shard) with N callers at a time (threads each
reading one chunk's region), read + write a copy as users write it (``dst[...] = src[...]``),
the streamed copy (``zarrx.convert``; tensorstore's ``dst.write(src)``), and ``from_zarr(...).compute()``.

**One fresh process per measurement**, best of ``--repeats`` (3), libraries interleaved; each
reports the operation's time and its peak RSS (the process's high-water mark during the
operation, reset just before it through ``/proc/self/clear_refs``; elsewhere ``getrusage``'s,
imports included) and its RSS before the operation. Every library runs with its own defaults (as
a user would: zarrx's I/O depth, zarr-python's async concurrency, tensorstore's
``file_io_concurrency``); ``--threads`` limits nothing but the BLAS/OpenMP pools.

**Cold cache** (``--cache cold``, the default): before each measurement every file of the
store is ``fsync``-ed and dropped from the page cache with ``posix_fadvise(POSIX_FADV_DONTNEED)``,
and what stays resident is counted with ``mincore`` (Linux): the table says how many pages
stayed, or that it could not drop them (no ``posix_fadvise``: not Linux). ``--cache warm`` reads
every file once before the measurement instead; ``--cache both`` runs both.

Values are checked: a read's checksum (outside the timed part) against the source's, a copy's
checksum read back from the copy.

Usage::

    python benchmarks/bench_cold.py                     # full size, cold, every row (~15 min on 2 cores)
    python benchmarks/bench_cold.py --cache both --data-dir /tmp/zarrx-cold --markdown cold.md
    python benchmarks/bench_cold.py --smoke             # tiny arrays, one repeat (CI)
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import json
import mmap
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

LIBRARIES = ("zarrx", "zarr-python", "zarrs", "tensorstore")
RESULT_MARK = "COLD-RESULT "
BLOSC = {"cname": "blosclz", "clevel": 9, "shuffle": "bitshuffle", "typesize": 2, "blocksize": 0}
#: (array, benchmark) rows of the table; the issue's rows, and the streamed copies
ROWS = (
    ("uncompressed", "read_all"), ("uncompressed", "copy"), ("uncompressed", "copy_streamed"),
    ("blosc", "read_all"), ("blosc", "chunks_2"),
    ("sharded", "read_all"), ("sharded", "chunks_1"), ("sharded", "chunks_2"), ("sharded", "chunks_8"),
    ("sharded", "copy"), ("sharded", "copy_streamed"), ("sharded", "dask_read_all"),
)  # fmt: skip
SMOKE_ROWS = (("uncompressed", "read_all"), ("blosc", "chunks_2"), ("sharded", "copy"), ("sharded", "copy_streamed"))
NAMES = {"read_all": "read all", "copy": "read + write a copy (`dst[...] = src[...]`)",
         "copy_streamed": "streamed copy (zarrx.convert; tensorstore dst.write(src))",
         "dask_read_all": "dask read all"}  # fmt: skip


def benchmark_name(array: str, benchmark: str) -> str:
    if benchmark.startswith("chunks_"):
        unit = "shard by shard" if array == "sharded" else "chunk by chunk"
        return f"{unit}, {benchmark[7:]} at a time"
    return NAMES[benchmark]


def supports(library: str, benchmark: str) -> bool:
    """Whether ``library`` has the operation (zarr-python has no streamed copy, tensorstore no dask)."""
    library = library.split("@")[0]
    if benchmark == "copy_streamed":
        return library in ("zarrx", "tensorstore")
    return not (benchmark == "dask_read_all" and library == "tensorstore")


# -- data -------------------------------------------------------------------------------------------------
def values(z0: int, z1: int, shape: tuple[int, ...]) -> np.ndarray:
    """The suite's values ``(x + y**2 / 32 + z**3) % 65536`` for planes ``z0:z1``."""
    z = np.arange(z0, z1, dtype=np.float64)[:, None, None]
    y = np.arange(shape[1], dtype=np.float64)[None, :, None]
    x = np.arange(shape[2], dtype=np.float64)[None, None, :]
    return ((x + y**2 / 32 + z**3) % 65536).astype(np.uint16)


def checksum(array: np.ndarray) -> str:
    """A cheap fingerprint of a read's values (sum and a strided sample)."""
    sample = np.ascontiguousarray(array[::3, ::5, ::7]).view(np.uint8)
    return f"{int(array.sum(dtype=np.uint64))}-{int(sample.sum(dtype=np.uint64) * 31 + sample[::97].sum(dtype=np.uint64))}"


def generate(root: Path, shape: tuple[int, ...], chunk: int, inner: int, log: Any) -> dict[str, str]:
    """Write the three arrays with zarr-python (the reference) under ``root``, unless there;
    returns the source checksum by array."""
    import zarr
    from zarr.codecs import BloscCodec

    meta = root / "source.json"
    if meta.exists() and json.loads(meta.read_text()).get("shape") == list(shape):
        return json.loads(meta.read_text())["checksums"]
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    full = np.concatenate([values(z, min(z + chunk, shape[0]), shape) for z in range(0, shape[0], chunk)])
    blosc = BloscCodec(cname="blosclz", clevel=9, shuffle="bitshuffle", typesize=2, blocksize=0)
    kinds = {"uncompressed": dict(chunks=(chunk,) * 3, compressors=None),
             "blosc": dict(chunks=(chunk,) * 3, compressors=[blosc]),
             "sharded": dict(shards=(chunk,) * 3, chunks=(inner,) * 3, compressors=[blosc])}  # fmt: skip
    for name, options in kinds.items():
        started = time.perf_counter()
        array = zarr.create_array(str(root / f"{name}.zarr"), shape=shape, dtype="uint16", fill_value=0, **options)
        for z in range(0, shape[0], chunk):
            array[z : z + chunk] = full[z : z + chunk]
        log(f"wrote {name} in {time.perf_counter() - started:.1f} s")
    checksums = dict.fromkeys(kinds, checksum(full))
    meta.write_text(json.dumps({"shape": list(shape), "checksums": checksums}))
    return checksums


# -- the page cache ------------------------------------------------------------------------------------------
def store_files(path: Path) -> list[Path]:
    return [Path(folder) / name for folder, _, names in os.walk(path) for name in names]


def drop_pages(path: Path) -> dict[str, Any]:
    """Drop the pages of every file of ``path`` from the page cache (after ``fsync``); returns what
    happened: files, bytes, pages still resident (``mincore``; None where it cannot count)."""
    if not hasattr(os, "posix_fadvise"):
        return {"dropped": False, "why": "no posix_fadvise on this platform: the cache was not dropped"}
    files = store_files(path)
    for file in files:
        descriptor = os.open(file, os.O_RDONLY)
        try:
            os.fsync(descriptor)
            os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(descriptor)
    resident, total = resident_pages(files)
    return {"dropped": True, "files": len(files), "pages": total, "resident": resident}


def warm_pages(path: Path) -> dict[str, Any]:
    """Read every file of ``path`` once (the warm mode): its pages are then in the cache."""
    files = store_files(path)
    for file in files:
        with open(file, "rb") as handle:
            while handle.read(1 << 24):
                pass
    resident, total = resident_pages(files)
    return {"dropped": False, "files": len(files), "pages": total, "resident": resident}


def resident_pages(files: list[Path]) -> tuple[int | None, int]:
    """(pages of ``files`` in the page cache, or None where ``mincore`` is not available; pages in all)."""
    page = mmap.PAGESIZE
    total = sum(-(-file.stat().st_size // page) for file in files)
    libc_name = ctypes.util.find_library("c")
    if sys.platform != "linux" or not libc_name:
        return None, total
    libc = ctypes.CDLL(libc_name, use_errno=True)
    libc.mmap.restype, libc.mmap.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                                               ctypes.c_int, ctypes.c_int, ctypes.c_long]  # fmt: skip
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    resident = 0
    for file in files:
        size = file.stat().st_size
        if not size:
            continue
        descriptor = os.open(file, os.O_RDONLY)
        try:
            address = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, descriptor, 0)
            if address in (None, ctypes.c_void_p(-1).value):
                return None, total
            vector = ctypes.create_string_buffer(-(-size // page))
            try:
                if libc.mincore(address, size, vector) != 0:
                    return None, total
                resident += sum(byte & 1 for byte in vector.raw)
            finally:
                libc.munmap(address, size)
        finally:
            os.close(descriptor)
    return resident, total


# -- one measurement (a child process) --------------------------------------------------------------------
def regions(shape: tuple[int, ...], unit: tuple[int, ...]) -> list[tuple[slice, ...]]:
    """The regions of the chunks (shards) of ``unit`` tiling ``shape``, in C order."""
    counts = [-(-length // size) for length, size in zip(shape, unit)]
    return [tuple(slice(i * size, min((i + 1) * size, length)) for i, size, length in zip(index, unit, shape))
            for index in np.ndindex(*counts)]  # fmt: skip


def open_array(library: str, path: str) -> Any:
    if library == "zarrx":
        import zarrx

        return zarrx.open_array(path, mode="r")
    if library == "tensorstore":
        import tensorstore as ts

        return ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": path}, "open": True}).result()
    import zarr

    if library == "zarrs":
        import zarrs  # noqa: F401

        zarr.config.set({"codec_pipeline.path": "zarrs.ZarrsCodecPipeline"})
    return zarr.open_array(path, mode="r")


def read(library: str, array: Any, selection: Any) -> np.ndarray:
    if library == "tensorstore":
        return array[selection].read().result()
    return array[selection]


def create_like(library: str, path: str, source_path: str) -> Any:
    """An empty array at ``path`` with the source's metadata (its chunks, shards and codecs)."""
    metadata = json.loads((Path(source_path) / "zarr.json").read_text())
    metadata.pop("attributes", None)
    if library == "tensorstore":
        import tensorstore as ts

        spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": path}, "metadata": metadata}
        return ts.open(spec, create=True, delete_existing=True).result()
    Path(path).mkdir(parents=True)
    (Path(path) / "zarr.json").write_text(json.dumps(metadata))
    if library == "zarrx":
        import zarrx

        return zarrx.open_array(path, mode="r+")
    import zarr

    return zarr.open_array(path, mode="r+")


def run_child(job: dict[str, Any]) -> dict[str, Any]:
    import resource
    import threading

    import psutil

    library, benchmark, path, target = job["library"].split("@")[0], job["benchmark"], job["path"], job["target"]
    array = open_array(library, path)
    shape = tuple(array.shape) if library != "tensorstore" else tuple(array.domain.shape)
    result: dict[str, Any] = {}
    # what the operation imports, imported before the clock
    if library == "zarrx":  # zarrx imports its layers on first use
        import zarrx.io.execute  # noqa: F401
        import zarrx.io.write  # noqa: F401
    if library == "zarrx" and benchmark in ("dask_read_all", "copy_streamed"):
        import zarrx.dask.read  # noqa: F401
        import zarrx.tools.conversion  # noqa: F401
    elif benchmark == "dask_read_all":
        import dask.array  # noqa: F401
    before = psutil.Process().memory_info().rss
    reset = reset_peak()
    started = time.perf_counter()
    check = operation(library, benchmark, array, shape, path, target, job)
    elapsed = time.perf_counter() - started
    # the high-water mark now, before the check reads anything back
    peak = peak_rss() if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if check is not None:
        result["checksum"] = check()
    result["threads"] = threading.active_count()
    return {**result, "seconds": elapsed, "peak_rss": peak, "rss_before": before}


def reset_peak() -> bool:
    """Reset the process's RSS high-water mark (Linux ``/proc/self/clear_refs``); False where it cannot."""
    try:
        with open("/proc/self/clear_refs", "w") as file:
            file.write("5")
        return True
    except OSError:
        return False


def peak_rss() -> int:
    """The RSS high-water mark since :func:`reset_peak` (``VmHWM``), in bytes."""
    with open("/proc/self/status") as file:
        return next(int(line.split()[1]) * 1024 for line in file if line.startswith("VmHWM:"))


def operation(library: str, benchmark: str, array: Any, shape: tuple[int, ...], path: str, target: str,
              job: dict[str, Any]) -> Any:  # fmt: skip
    """Run the timed operation; returns what computes the checksum of its values (None: unchecked)."""
    reader = "tensorstore" if library == "tensorstore" else "zarr-python"
    read_back = lambda: checksum(read(reader, open_array(reader, target), ...))  # noqa: E731
    if benchmark == "read_all":
        out = read(library, array, tuple(slice(None) for _ in shape))
        return lambda: checksum(out)
    if benchmark.startswith("chunks_"):
        callers, parts = int(benchmark[7:]), regions(shape, tuple(job["unit"]))
        if callers == 1:
            for region in parts:
                read(library, array, region)
        else:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(callers) as pool:
                list(pool.map(lambda region: read(library, array, region).shape, parts))
        return None
    if benchmark == "copy":
        destination = create_like(library, target, path)
        if library == "tensorstore":
            destination[...].write(array[...].read().result()).result()
        else:
            destination[...] = array[...]
        return read_back
    if benchmark == "copy_streamed":
        if library == "tensorstore":
            create_like(library, target, path).write(array).result()
        else:
            import zarrx

            zarrx.convert(path, target, progress=False)
        return read_back
    if benchmark == "dask_read_all":
        if library == "zarrx":
            import zarrx

            out = zarrx.from_zarr(path).compute()
        else:
            import dask.array as da

            out = da.from_zarr(array).compute()
        return lambda: checksum(out)
    raise SystemExit(f"unknown benchmark {benchmark!r}")


# -- the runner -----------------------------------------------------------------------------------------
def measure(job: dict[str, Any], cache: str, scratch: Path) -> dict[str, Any]:
    target = Path(job["target"])
    shutil.rmtree(target, ignore_errors=True)
    pages = drop_pages(Path(job["path"])) if cache == "cold" else warm_pages(Path(job["path"]))
    env = {**os.environ, "OMP_NUM_THREADS": str(job["threads"]), "OPENBLAS_NUM_THREADS": str(job["threads"])}
    # zarrx from this checkout, or "zarrx@<checkout>" (--baseline) from another one
    checkout = job["library"].partition("@")[2] or str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [checkout, env.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, __file__, "--worker", json.dumps(job)], capture_output=True, text=True, env=env,
                          timeout=job["timeout"])  # fmt: skip
    shutil.rmtree(target, ignore_errors=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT_MARK)]
    if done.returncode != 0 or not lines:
        return {"error": (done.stderr or done.stdout)[-1500:], "pages": pages}
    return {**json.loads(lines[-1][len(RESULT_MARK) :]), "pages": pages}


def table(results: dict[tuple[str, str, str, str], list[dict[str, Any]]], rows: Any, libraries: Any, cache: str,
          checksums: dict[str, str]) -> str:  # fmt: skip
    head = f"| array | benchmark | {' | '.join(libraries)} | values |"
    lines = [f"{cache} cache, best of the runs: operation time / peak RSS (MB)", "", head,
             "|---|---|" + "---:|" * len(libraries) + "---|"]  # fmt: skip
    for array, benchmark in rows:
        cells, agree = [], []
        for library in libraries:
            runs = [run for run in results.get((cache, array, benchmark, library), []) if "seconds" in run]
            if not supports(library, benchmark):
                cells.append("—")
                continue
            if not runs:
                cells.append("failed")
                continue
            best = min(runs, key=lambda run: run["seconds"])
            cells.append(f"{best['seconds']:.2f} s / {best['peak_rss'] / 1e6:.0f}")
            if "checksum" in best:
                agree.append(best["checksum"] == checksums[array])
        check = "n/a" if not agree else "identical" if all(agree) else "DIFFER"
        lines.append(f"| {array} | {benchmark_name(array, benchmark)} | {' | '.join(cells)} | {check} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny arrays, one repeat, a few rows (CI)")
    parser.add_argument("--cache", choices=("cold", "warm", "both"), default="cold")
    parser.add_argument("--data-dir", type=Path, default=None, help="keep (and reuse) the generated arrays here")
    parser.add_argument("--libraries", default=",".join(LIBRARIES))
    parser.add_argument("--rows", default=None, help="array:benchmark,... (default: every row)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--baseline", default=None, help="a zarrx checkout measured beside this one (zarrx@PATH)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2, help="OMP/OpenBLAS threads")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--markdown", type=Path, default=None)
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker is not None:
        print(RESULT_MARK + json.dumps(run_child(json.loads(args.worker))), flush=True)
        return 0
    shape, chunk, inner = ((64, 64, 64), 32, 8) if args.smoke else ((512, 1024, 1024), 256, 32)
    repeats = 1 if args.smoke else args.repeats
    rows = SMOKE_ROWS if args.smoke else ROWS
    if args.rows:
        rows = tuple(tuple(row.split(":")) for row in args.rows.split(","))
    libraries = [library for library in args.libraries.split(",") if library]
    available = [library for library in libraries if _importable(library.split("@")[0])]
    if args.baseline:
        libraries.insert(1, f"zarrx@{args.baseline}")
        available.insert(1, f"zarrx@{args.baseline}")
    scratch = Path(args.data_dir or tempfile.mkdtemp(prefix="zarrx-cold-"))
    log = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731
    try:
        checksums = generate(scratch / "source", shape, chunk, inner, log)
        caches = ("cold", "warm") if args.cache == "both" else (args.cache,)
        results: dict[tuple[str, str, str, str], list[dict[str, Any]]] = {}
        log(f"load average before: {os.getloadavg()}")
        for cache in caches:
            for repeat in range(repeats):
                # the libraries in a rotated order each repeat: a run right after another
                # library's copy is slower (up to 2x measured, whichever library), so none keeps
                # one place
                turn = repeat % max(1, len(available))
                for array, benchmark in rows:
                    for library in available[turn:] + available[:turn]:
                        if not supports(library, benchmark):
                            continue
                        job = {"library": library, "benchmark": benchmark, "threads": args.threads,
                               "path": str(scratch / "source" / f"{array}.zarr"), "target": str(scratch / "copy.zarr"),
                               "unit": [chunk] * 3, "timeout": 600}  # fmt: skip
                        outcome = measure(job, cache, scratch)
                        results.setdefault((cache, array, benchmark, library), []).append(outcome)
                        log(f"{cache} {repeat} {array} {benchmark} {library}: "
                            f"{outcome.get('seconds', outcome.get('error'))} pages {outcome['pages']}")  # fmt: skip
        log(f"load average after: {os.getloadavg()}")
        text = "\n\n".join(table(results, rows, libraries, cache, checksums) for cache in caches)
        pages = [run["pages"] for runs in results.values() for run in runs]
        stayed = [page["resident"] for page in pages if page.get("dropped")]
        if "cold" in caches:
            note = ("the cache could not be dropped" if any(not page.get("dropped") for page in pages if "why" in page)
                    else f"after dropping, at most {max(stayed, default=0)} pages of a store stayed resident"
                    if None not in stayed else "pages dropped; mincore could not count what stayed")  # fmt: skip
            text += f"\n\nCold cache: {note}."
        print(text)
        if args.markdown:
            args.markdown.write_text(text + "\n")
        if args.json:
            args.json.write_text(json.dumps({"|".join(key): runs for key, runs in results.items()}, indent=1))
        failed = [key for key, runs in results.items() if not any("seconds" in run for run in runs)]
        differ = [key for key, runs in results.items() for run in runs
                  if run.get("checksum") not in (None, checksums[key[1]])]  # fmt: skip
        for key in failed:
            log(f"FAILED {key}: {results[key][-1].get('error')}")
        for key in differ:
            log(f"VALUES DIFFER {key}")
        return 1 if failed or differ else 0
    finally:
        if args.data_dir is None:
            shutil.rmtree(scratch, ignore_errors=True)
        else:
            shutil.rmtree(scratch / "copy.zarr", ignore_errors=True)


def _importable(library: str) -> bool:
    import importlib.util

    return importlib.util.find_spec({"zarr-python": "zarr"}.get(library, library)) is not None


if __name__ == "__main__":
    sys.exit(main())
