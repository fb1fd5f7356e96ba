"""Copying a 1 GiB array (issue 31): zarrx's streaming copy against zarr-python, zarrs and tensorstore.

The zarrs benchmark suite's arrays, scaled to 512 x 1024 x 1024 uint16 (1 GiB) for a 2-core
machine:

* ``uncompressed``: chunks 256³, no compression;
* ``sharded``: shards 256³ of 32³ inner chunks, blosc blosclz level 9 with bitshuffle.

Each case copies the array into a new array of the same layout, with every form below, **each
measurement in a process of its own** (``--repeats`` processes per form, interleaved; the table
gives the median time, CPU time (user + system: less affected by a busy machine) and the median
peak RSS above the worker's RSS just before the copy,
its *baseline*: imports done, arrays opened):

* ``zarrx dst[...] = src[...]``: the form users write (reads the source whole, then writes);
* ``zarrx dst[...] = src``: the streaming copy (a few destination shards in memory);
* ``zarrx convert``: ``zarrx.convert(src, dst)`` (dask tasks, each copying one step);
* ``zarrx to_zarr``: ``zarrx.to_zarr(zarrx.from_zarr(src), dst)``;
* ``zarr-python`` and ``zarrs`` (zarr-python with ``zarrs.ZarrsCodecPipeline``): ``dst[...] = src[...]``;
* ``tensorstore dst.write(src.read())``: the same form in tensorstore;
* ``tensorstore dst.write(src)``: tensorstore's streamed copy.

Every library gets the same thread budget (``--threads``, default 2; tensorstore's
``data_copy_concurrency``, its I/O concurrency left at its default). After its timed copy a
worker checks the copy against the source (``--no-check`` to skip). ``--cold`` drops the
source's pages from the page cache before each copy (``posix_fadvise(POSIX_FADV_DONTNEED)`` on
its files; the script says when the platform cannot).

The issue's targets: the user's form at or below the best ``dst[...] = src[...]``-style writer;
the streaming forms within 1.2x tensorstore's streamed copy, with peak RSS at most the baseline
plus 4 destination shards (chunks) per thread.

Usage::

    python benchmarks/bench_copy.py                     # full size (~10 minutes on 2 cores)
    python benchmarks/bench_copy.py --cold --repeats 3 --markdown copy.md
    python benchmarks/bench_copy.py --smoke             # tiny, one repeat, the sharded case: CI
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

FULL_SHAPE = (512, 1024, 1024)
SMOKE_SHAPE = (64, 64, 64)
BLOSC = {"name": "blosc", "configuration": {"cname": "blosclz", "clevel": 9, "shuffle": "bitshuffle", "typesize": 2, "blocksize": 0}}
FORMS = (
    "zarrx dst[...] = src[...]",
    "zarrx dst[...] = src",
    "zarrx convert",
    "zarrx to_zarr",
    "zarr-python",
    "zarrs",
    "tensorstore dst.write(src.read())",
    "tensorstore dst.write(src)",
)
STREAMING = ("zarrx dst[...] = src", "zarrx convert", "zarrx to_zarr")
USER_FORMS = ("zarr-python", "zarrs", "tensorstore dst.write(src.read())")


def layout(case: str, smoke: bool) -> dict[str, Any]:
    """The array's shape, chunks, shards and compressors, as zarrx.create_array takes them."""
    if case == "uncompressed":
        unit = (32,) * 3 if smoke else (256,) * 3
        return {"chunks": unit, "shards": None, "compressors": None}
    return {"chunks": (8,) * 3 if smoke else (32,) * 3, "shards": (32,) * 3 if smoke else (256,) * 3, "compressors": BLOSC}


def object_bytes(case: str, smoke: bool) -> int:
    settings = layout(case, smoke)
    return int(np.prod(settings["shards"] or settings["chunks"])) * 2


def make_source(path: Path, case: str, shape: tuple[int, ...], smoke: bool) -> None:
    """The source array: smooth values with some noise (compressible, as measurements are)."""
    import zarrx

    if (path / "zarr.json").exists():
        return
    array = zarrx.create_array(str(path), shape=shape, dtype="uint16", fill_value=0, **layout(case, smoke))
    rng = np.random.default_rng(31)
    step = max(1, shape[0] // 16)
    j, k = np.meshgrid(np.arange(shape[1]), np.arange(shape[2]), indexing="ij")
    for start in range(0, shape[0], step):
        i = np.arange(start, min(shape[0], start + step))[:, None, None]
        slab = (i * 7 + j * 3 + k) % 4096 + rng.integers(0, 16, size=(len(i), *j.shape))
        array[start : start + len(i)] = slab.astype("uint16")
    os.sync()


def drop_cache(path: Path) -> bool:
    """The pages of every file under ``path`` dropped from the page cache; False when the platform cannot."""
    if not hasattr(os, "posix_fadvise"):
        return False
    for folder, _, files in os.walk(path):
        for name in files:
            descriptor = os.open(os.path.join(folder, name), os.O_RDONLY)
            try:
                os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(descriptor)
    return True


def _status_kib(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def rss_mark() -> int:
    """The RSS now (bytes), after resetting the high-water mark to it where Linux allows."""
    gc.collect()
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass
    rss = _status_kib("VmRSS")
    if rss is None:
        import resource

        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss * 1024


def rss_peak() -> int:
    hwm = _status_kib("VmHWM")
    if hwm is None:
        import resource

        hwm = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return hwm * 1024


def tensorstore_spec(path: Path, threads: int) -> dict[str, Any]:
    return {
        "driver": "zarr3",
        "kvstore": {"driver": "file", "path": str(path)},
        "context": {"cache_pool": {"total_bytes_limit": 0}, "data_copy_concurrency": {"limit": threads}},
    }


def prepare(form: str, source: Path, target: Path, threads: int) -> Callable[[], Any]:
    """The copy of ``form``, ready to run: libraries imported, arrays opened or created."""
    if form.startswith("zarrx"):
        import zarrx

        src = zarrx.open_array(str(source))
        kwargs = dict(shape=src.shape, dtype=src.dtype, fill_value=src.fill_value, chunks=src.chunks, shards=src.shards,
                      compressors=_compressors(src))  # fmt: skip
        if form in ("zarrx convert", "zarrx to_zarr"):  # imported before the baseline, as the others' libraries
            import dask.array  # noqa: F401
            import dask.diagnostics  # noqa: F401
            import zarrx.dask.write  # noqa: F401
            import zarrx.tools.conversion  # noqa: F401
        if form == "zarrx convert":
            return lambda: zarrx.convert(str(source), str(target), progress=False)
        if form == "zarrx to_zarr":
            create = {key: value for key, value in kwargs.items() if key not in ("shape", "dtype")}
            return lambda: zarrx.to_zarr(zarrx.from_zarr(str(source)), str(target), **create)
        dst = zarrx.create_array(str(target), **kwargs)
        if form == "zarrx dst[...] = src":
            return lambda: dst.__setitem__(Ellipsis, src)
        return lambda: dst.__setitem__(Ellipsis, src[...])
    if form in ("zarr-python", "zarrs"):
        import zarr

        settings = {"threading.max_workers": threads}
        if form == "zarrs":
            import zarrs  # noqa: F401

            settings["codec_pipeline.path"] = "zarrs.ZarrsCodecPipeline"
        zarr.config.set(settings)
        src = zarr.open_array(str(source), mode="r")
        dst = zarr.create_array(str(target), shape=src.shape, dtype=src.dtype, chunks=src.chunks, shards=src.shards,
                                compressors=src.compressors, fill_value=src.fill_value)  # fmt: skip
        return lambda: dst.__setitem__(Ellipsis, src[...])
    import tensorstore as ts

    src = ts.open({**tensorstore_spec(source, threads), "open": True}).result()
    metadata = json.loads((source / "zarr.json").read_text())
    metadata = {key: value for key, value in metadata.items() if key not in ("attributes", "zarr_format", "node_type")}
    dst = ts.open({**tensorstore_spec(target, threads), "metadata": metadata}, create=True, delete_existing=True).result()
    if form == "tensorstore dst.write(src)":
        return lambda: dst.write(src).result()
    return lambda: dst.write(src.read().result()).result()


def _compressors(src: Any) -> Any:
    from zarrx.codecs.sharding import ShardingCodec

    pipeline = src.metadata.codecs
    if isinstance(pipeline.array_bytes, ShardingCodec):
        pipeline = pipeline.array_bytes.codecs
    return list(pipeline.bytes_bytes) or None


def check(source: Path, target: Path) -> None:
    """The copy holds the source's values (read slab by slab with zarrx)."""
    import zarrx

    src, dst = zarrx.open_array(str(source)), zarrx.open_array(str(target))
    step = max(1, src.shape[0] // 8)
    for start in range(0, src.shape[0], step):
        if not np.array_equal(src[start : start + step], dst[start : start + step]):
            raise SystemExit(f"{target}: the copy differs from the source in rows {start}:{start + step}")


def worker(job: dict[str, Any]) -> None:
    os.environ["ZARRX_NUM_THREADS"] = str(job["threads"])
    source, target = Path(job["source"]), Path(job["target"])
    try:
        from numcodecs import blosc

        blosc.set_nthreads(job["threads"])
    except ImportError:
        pass
    import dask

    dask.config.set(num_workers=job["threads"])
    copy = prepare(job["form"], source, target, job["threads"])
    dropped = drop_cache(source) if job["cold"] else None
    baseline = rss_mark()
    cpu, start = os.times(), time.perf_counter()
    copy()
    elapsed = time.perf_counter() - start
    cpu_end = os.times()
    peak = rss_peak()
    if job["check"]:
        check(source, target)
    cpu_time = (cpu_end.user - cpu.user) + (cpu_end.system - cpu.system)
    print(json.dumps({"time": elapsed, "cpu": cpu_time, "peak": peak - baseline, "baseline": baseline, "dropped": dropped}))


def run_job(job: dict[str, Any]) -> dict[str, Any] | str:
    environment = {**os.environ, "ZARRX_NUM_THREADS": str(job["threads"]), "OMP_NUM_THREADS": "1",
                   "RAYON_NUM_THREADS": str(job["threads"]), "BLOSC_NTHREADS": str(job["threads"])}  # fmt: skip
    try:
        done = subprocess.run([sys.executable, __file__, "--worker", json.dumps(job)], capture_output=True, text=True,
                              env=environment, timeout=job["timeout"])  # fmt: skip
    finally:
        shutil.rmtree(job["target"], ignore_errors=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["?"])[-1]
        return f"failed: {last[:120]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def available(form: str) -> str | None:
    module = {"zarr-python": "zarr", "zarrs": "zarrs"}.get(form) or ("tensorstore" if form.startswith("tensorstore") else None)
    if module is None:
        return None
    try:
        __import__(module)
    except ImportError:
        return f"{module} is not installed"
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny arrays, one repeat")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", help="where the source arrays are made (and kept); default a temporary folder")
    parser.add_argument("--cases", help="uncompressed,sharded (default; --smoke: sharded)")
    parser.add_argument("--forms", default=",".join(FORMS), help="comma-separated forms (see the module docstring)")
    parser.add_argument("--repeats", type=int, default=3, help="processes per form and case")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cold", action="store_true", help="drop the source's pages before each copy")
    parser.add_argument("--no-check", action="store_true", help="do not compare each copy with its source")
    parser.add_argument("--markdown", help="also write the table to this file")
    args = parser.parse_args()
    if args.worker:
        worker(json.loads(args.worker))
        return
    repeats = 1 if args.smoke else args.repeats
    cases = args.cases or ("sharded" if args.smoke else "uncompressed,sharded")
    shape = SMOKE_SHAPE if args.smoke else FULL_SHAPE
    forms = [form for form in args.forms.split(",") if form]
    keep = args.data_dir is not None
    root = Path(args.data_dir or tempfile.mkdtemp(prefix="zarrx-bench-copy-"))
    root.mkdir(parents=True, exist_ok=True)
    lines = [f"copy of a {'x'.join(map(str, shape))} uint16 array, {args.threads} threads, "
             f"{'cold' if args.cold else 'warm'} cache, median of {repeats} processes", "",
             "| case | form | time (s) | CPU time (s) | peak RSS above baseline (MB) | baseline RSS (MB) | bound (MB) |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    try:
        for case in cases.split(","):
            source = root / f"{case}-{'smoke' if args.smoke else 'full'}.zarr"
            make_source(source, case, shape, args.smoke)
            bound = 4 * object_bytes(case, args.smoke) * args.threads
            results: dict[str, list[Any]] = {form: [] for form in forms}
            for _ in range(repeats):  # the forms interleaved, each repeat a process of its own
                for form in forms:
                    reason = available(form)
                    if reason:
                        results[form].append(reason)
                        continue
                    job = {"form": form, "source": str(source), "target": str(root / "copy.zarr"), "threads": args.threads,
                           "cold": args.cold, "check": not args.no_check, "timeout": 120 if args.smoke else 900}  # fmt: skip
                    results[form].append(run_job(job))
            for form in forms:
                runs = [r for r in results[form] if isinstance(r, dict)]
                if not runs:
                    lines.append(f"| {case} | {form} | {results[form][0]} | | | | |")
                    continue
                time_s = statistics.median(r["time"] for r in runs)
                cpu_s = statistics.median(r["cpu"] for r in runs)
                peak = statistics.median(r["peak"] for r in runs) / 1e6
                baseline = statistics.median(r["baseline"] for r in runs) / 1e6
                lines.append(f"| {case} | {form} | {time_s:.2f} | {cpu_s:.2f} | {peak:.0f} | {baseline:.0f} | "
                             f"{bound / 1e6:.0f} |")  # fmt: skip
                print(lines[-1], flush=True)
            failures = [r for form in forms for r in results[form] if isinstance(r, str) and r.startswith("failed")]
            if failures:
                print("\n".join(lines))
                raise SystemExit(f"{case}: {failures[0]}")
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
    table = "\n".join(lines)
    print(table)
    if args.markdown:
        Path(args.markdown).write_text(table + "\n")


if __name__ == "__main__":
    main()
