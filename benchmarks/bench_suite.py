"""The side-by-side benchmark suite: zarrx against zarr-python 3, zarrs and tensorstore.

One run generates its own data, writes it once (with zarr-python, the reference
implementation, so every reader reads the very same bytes), then times each library
on each case **in a process of its own** (one subprocess per library per case) with
the same thread budget (``--threads``, default 2):

* zarrx: ``ZARRX_NUM_THREADS``;
* zarr-python: ``threading.max_workers`` (its thread pool; the event loop is one more thread);
* zarrs (zarr-python with ``codec_pipeline.path = "zarrs.ZarrsCodecPipeline"``):
  ``threading.max_workers``, which zarrs uses for its Rust thread pool;
* tensorstore: ``data_copy_concurrency`` and ``file_io_concurrency`` limits; no chunk cache;
* everyone: ``OMP/OPENBLAS/MKL/NUMEXPR/RAYON_NUM_THREADS`` and blosc's own thread count;
  dask's threaded scheduler gets ``num_workers``.

Every result is hashed and compared with the hash of the source data (reads) or of
what zarr-python reads back (writes): every library must return identical values.

Each worker runs the operation once untimed (warm-up: imports, pools, page cache),
then ``--repeats`` timed runs; ``--rounds`` workers per library and case are interleaved
and the table gives the median of all their runs. Peak memory is the RSS high-water mark
of the worker during a run minus its RSS just before the run (Linux: the mark is reset
through ``/proc/self/clear_refs`` before each run; elsewhere ``resource.getrusage``),
median over the timed runs; minor page faults per run are counted too.

The stores the write cases (i) and (j) make, thousands of small files, are moved aside into
``<data dir>/discarded`` after each run and deleted only when the whole run ends: deleting them
between runs made the next run's file creates slower for every library (see :func:`discard`).

For a shared machine: before each worker the runner waits for idle CPUs (``--wait-idle``),
measures the CPU share other processes took while the worker ran and reruns the worker
when it was over ``--max-others``; and the workers import a snapshot of the zarrx package
taken at the start (``--live-zarrx`` to turn that off), so edits to the checkout during a
run do not mix versions.

The **floor** column is the fastest Python-orchestrated version of the same work: the
raw chunk bytes read from disk with plain ``open().read()`` (``os.pread`` for shards)
and decoded with numcodecs on a ``--threads`` thread pool into one preallocated output
(straight into it where a chunk is a contiguous piece of it, else through one scratch
buffer per thread, kept for the whole run), with all index maths done before the clock
starts. It is a reference, not a bound: zarrs, decoding in Rust, beats it. For the write
case it is the mirror image: numcodecs encodes each chunk and the bytes go to a file.

Cases (``--cases a,b,...``; default all):

a. full read of a 256 MiB float32 array in 2 MiB chunks, zstd level 1;
b. the same with blosc lz4 + shuffle;
c. full read of a 2000 x 2000 float32 array in 25 x 25 chunks (6,400 chunks);
d. 30 random 20 x 100 x 100 region reads from a sharded array (shards 64 x 256 x 256,
   inner chunks 16 x 32 x 32, zstd level 1);
e. writing the 256 MiB array of (a) with zstd level 1;
f. ``from_zarr(a).sum().compute()``: zarrx.from_zarr vs dask.array.from_zarr on zarr-python;
g. ``xarray.open_dataset`` of a 200-variable store: engine="zarrx" vs engine="zarr",
   with and without consolidated metadata;
h. peak memory of (a) and (e) (measured in those runs; selecting h runs them);
i. writing the array of (c) in its 6,400 chunks of 25 x 25, zstd level 1 (a fresh store each run);
j. 200 appends of one 100 x 100 f4 time step to a (t, 100, 100) array in chunks of one step, zstd
   level 1 -- the "one chunk per time step" pattern (``Array.append``; tensorstore: resize, write).

The **per-chunk** table divides each time by the chunks the case decodes or encodes: (c) and (i)
6,400, (d) the inner chunks its 30 regions touch, (j) one per append.

Usage::

    python benchmarks/bench_suite.py                 # full sizes, ~15 minutes on 2 cores
    python benchmarks/bench_suite.py --cases a,c     # some cases
    python benchmarks/bench_suite.py --smoke         # tiny sizes, one repeat: CI
    python benchmarks/bench_suite.py --data-dir /tmp/zarrx-bench --json results.json --markdown table.md

``--data-dir`` keeps the generated stores and reuses them on the next run.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import hashlib
import importlib.metadata
import json
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

LIBRARIES = ("zarrx", "zarr-python", "zarrs", "tensorstore")
FLOOR = "floor"
COLUMNS = (*LIBRARIES, FLOOR)
ZSTD_LEVEL = 1
RESULT_MARK = "BENCH-RESULT "


# -- sizes ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sizes:
    big_shape: tuple[int, ...]  # (a), (b), (e), (f)
    big_chunks: tuple[int, ...]
    tiny_shape: tuple[int, ...]  # (c)
    tiny_chunks: tuple[int, ...]
    sharded_shape: tuple[int, ...]  # (d)
    shards: tuple[int, ...]
    inner_chunks: tuple[int, ...]
    region: tuple[int, ...]
    regions: int
    variables: int  # (g)
    variable_shape: tuple[int, int]
    appends: int  # (j)
    step_shape: tuple[int, int]


FULL = Sizes(
    big_shape=(256, 512, 512), big_chunks=(8, 256, 256),  # 256 MiB in 128 chunks of 2 MiB
    tiny_shape=(2000, 2000), tiny_chunks=(25, 25),
    sharded_shape=(256, 512, 512), shards=(64, 256, 256), inner_chunks=(16, 32, 32),
    region=(20, 100, 100), regions=30,
    variables=200, variable_shape=(8, 16),
    appends=200, step_shape=(100, 100),
)  # fmt: skip
SMOKE = Sizes(
    big_shape=(16, 64, 64), big_chunks=(4, 32, 32),
    tiny_shape=(100, 100), tiny_chunks=(25, 25),
    sharded_shape=(32, 64, 64), shards=(16, 32, 32), inner_chunks=(8, 16, 16),
    region=(10, 20, 20), regions=5,
    variables=10, variable_shape=(4, 6),
    appends=5, step_shape=(10, 10),
)  # fmt: skip


# -- cases ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One line of the table: a case, possibly one of several variants."""

    case: str
    variant: str
    libraries: tuple[str, ...]

    @property
    def key(self) -> str:
        return self.case + (f" ({self.variant})" if self.variant else "")


def rows_for(cases: Sequence[str]) -> list[Row]:
    rows = []
    for case in cases:
        if case in "abcd":
            rows.append(Row(case, "", COLUMNS))
        elif case in "ij":
            rows.append(Row(case, "", LIBRARIES))
        elif case == "e":
            rows.append(Row(case, "", COLUMNS))
        elif case == "f":
            rows.append(Row(case, "", ("zarrx", "zarr-python", "zarrs")))
        elif case == "g":
            for variant in ("consolidated", "not consolidated"):
                rows.append(Row(case, variant, ("zarrx", "zarr-python", "zarrs")))
    return rows


def describe(case: str, sizes: Sizes) -> str:
    big = f"{_shape(sizes.big_shape)} f4 {_mib(math.prod(sizes.big_shape) * 4)}, chunks {_shape(sizes.big_chunks)}"
    return {
        "a": f"read {big}, zstd {ZSTD_LEVEL}",
        "b": f"read {big}, blosc lz4+shuffle",
        "c": f"read {_shape(sizes.tiny_shape)} f4, chunks {_shape(sizes.tiny_chunks)} "
        f"({math.prod(-(-s // c) for s, c in zip(sizes.tiny_shape, sizes.tiny_chunks)):,} chunks)",
        "d": f"{sizes.regions} reads of {_shape(sizes.region)} from shards {_shape(sizes.shards)} / "
        f"inner {_shape(sizes.inner_chunks)}",
        "e": f"write {big}, zstd {ZSTD_LEVEL}",
        "f": "from_zarr(a).sum().compute() (dask threads)",
        "g": f"xr.open_dataset, {sizes.variables} variables",
        "i": f"write {_shape(sizes.tiny_shape)} f4, chunks {_shape(sizes.tiny_chunks)} ({chunk_count('i', sizes):,} chunks)",
        "j": f"{sizes.appends} appends of {_shape(sizes.step_shape)} f4, a chunk per step",
    }[case]


def chunk_count(case: str, sizes: Sizes) -> int | None:
    """How many chunks (inner chunks for (d)) a case decodes or encodes per run."""
    if case in "ci":
        return math.prod(-(-s // c) for s, c in zip(sizes.tiny_shape, sizes.tiny_chunks))
    if case == "d":
        return sum(
            math.prod(len(range(r.start // c, (r.stop - 1) // c + 1)) for r, c in zip(region, sizes.inner_chunks))
            for region in random_regions(sizes.sharded_shape, sizes.region, sizes.regions)
        )
    if case == "j":
        return sizes.appends
    return None


def _shape(shape: Sequence[int]) -> str:
    return "x".join(str(s) for s in shape)


def _mib(nbytes: float) -> str:
    return f"{nbytes / 2**20:.0f} MiB" if nbytes >= 2**20 else f"{nbytes / 2**10:.0f} KiB"


# -- data -------------------------------------------------------------------------------------


def make_data(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """A smooth field plus noise rounded to 1e-3: compresses like measured data, not like zeros."""
    axes = [np.arange(n, dtype=np.float32) for n in shape]
    data = np.zeros(shape, dtype=np.float32)
    for dim, (axis, period) in enumerate(zip(axes, (7.0, 13.0, 5.0))):
        index = [None] * len(shape)
        index[dim] = slice(None)
        data += np.sin(axis / period * (dim + 1))[tuple(index)]
    data += np.random.default_rng(seed).standard_normal(shape, dtype=np.float32) * 0.05
    return np.round(data, 3).astype(np.float32)


def random_regions(shape: Sequence[int], region: Sequence[int], count: int, seed: int = 1) -> list[tuple[slice, ...]]:
    rng = np.random.default_rng(seed)
    regions = []
    for _ in range(count):
        starts = [int(rng.integers(0, n - r + 1)) for n, r in zip(shape, region)]
        regions.append(tuple(slice(s, s + r) for s, r in zip(starts, region)))
    return regions


def digest(*arrays: Any) -> str:
    """A hash of the values, shapes and dtypes of ``arrays``."""
    h = hashlib.blake2b(digest_size=16)
    for array in arrays:
        array = np.ascontiguousarray(np.asarray(array))
        h.update(f"{array.dtype.str}{array.shape}".encode())
        h.update(memoryview(array).cast("B"))
    return h.hexdigest()


def dataset_digest(ds: Any) -> str:
    """A hash of an xarray dataset: names, dims, dtypes, attributes and values of every variable."""
    h = hashlib.blake2b(digest_size=16)
    h.update(repr(sorted(ds.attrs.items())).encode())
    for name in sorted(ds.variables):
        variable = ds.variables[name]
        h.update(f"{name}{variable.dims}{sorted(variable.attrs.items())!r}".encode())
        h.update(digest(variable.values).encode())
    return h.hexdigest()


def _zstd_codecs() -> list[Any]:
    import zarr

    return [zarr.codecs.ZstdCodec(level=ZSTD_LEVEL, checksum=False)]


def _write_zarr_python(path: Path, data: np.ndarray, chunks: tuple[int, ...], compressors: Any, **kwargs: Any) -> None:
    import zarr

    array = zarr.create_array(
        str(path), shape=data.shape, chunks=chunks, dtype=data.dtype, fill_value=0, compressors=compressors,
        overwrite=True, **kwargs,
    )  # fmt: skip
    array[...] = data


def prepare_data(root: Path, sizes: Sizes, cases: Sequence[str], log: Callable[[str], None]) -> dict[str, Any]:
    """Write every store the selected cases read (skipped when ``root`` already holds them); expected hashes."""
    import warnings

    import zarr

    warnings.filterwarnings("ignore", module="zarr")
    manifest_path = root / "manifest.json"
    fingerprint = json.dumps(dataclasses.asdict(sizes), sort_keys=True)
    manifest: dict[str, Any] = {}
    if manifest_path.exists():
        manifest = json.loads(manifest_path.read_text())
        if manifest.get("sizes") != fingerprint:
            manifest = {}
    manifest["sizes"] = fingerprint
    expected: dict[str, Any] = manifest.setdefault("expected", {})

    def needs(name: str) -> bool:
        return name not in expected or not (root / name).exists()

    def done(name: str, value: Any, started: float) -> None:
        expected[name] = value
        manifest_path.write_text(json.dumps(manifest, indent=1))
        log(f"  wrote {name:<14} {time.perf_counter() - started:6.1f} s  {_stored(root / name)}")

    big_needed = any(c in cases for c in "abef")
    if big_needed and (needs("source.npy") or needs("a.zarr") or ("b" in cases and needs("b.zarr"))):
        started = time.perf_counter()
        data = make_data(sizes.big_shape)
        np.save(root / "source.npy", data)
        done("source.npy", digest(data), started)
        started = time.perf_counter()
        _write_zarr_python(root / "a.zarr", data, sizes.big_chunks, _zstd_codecs())
        done("a.zarr", digest(data), started)
        if "f" in cases or "a.sum" not in expected:
            import dask.array as da

            expected["a.sum"] = float(da.from_array(data, chunks=sizes.big_chunks).sum().compute())
        if "b" in cases:
            started = time.perf_counter()
            blosc = [zarr.codecs.BloscCodec(cname="lz4", clevel=5, shuffle="shuffle", typesize=4)]
            _write_zarr_python(root / "b.zarr", data, sizes.big_chunks, blosc)
            done("b.zarr", digest(data), started)
        del data
    if ("c" in cases or "i" in cases) and (needs("c.zarr") or needs("tiny.npy")):
        started = time.perf_counter()
        data = make_data(sizes.tiny_shape, seed=2)
        np.save(root / "tiny.npy", data)
        done("tiny.npy", digest(data), started)
        _write_zarr_python(root / "c.zarr", data, sizes.tiny_chunks, _zstd_codecs())
        done("c.zarr", digest(data), started)
    if "j" in cases and needs("steps.npy"):
        started = time.perf_counter()
        data = make_data((sizes.appends, *sizes.step_shape), seed=5)
        np.save(root / "steps.npy", data)
        done("steps.npy", digest(data), started)
    if "d" in cases and needs("d.zarr"):
        started = time.perf_counter()
        data = make_data(sizes.sharded_shape, seed=3)
        _write_zarr_python(root / "d.zarr", data, sizes.inner_chunks, _zstd_codecs(), shards=sizes.shards)
        regions = random_regions(sizes.sharded_shape, sizes.region, sizes.regions)
        done("d.zarr", digest(*(data[r] for r in regions)), started)
    if "g" in cases and (needs("g-consolidated.zarr") or needs("g-not-consolidated.zarr")):
        import xarray as xr

        dataset = many_variables(sizes)
        for consolidated, name in ((True, "g-consolidated.zarr"), (False, "g-not-consolidated.zarr")):
            started = time.perf_counter()
            dataset.to_zarr(root / name, mode="w", zarr_format=3, consolidated=consolidated)
            done(name, dataset_digest(xr.open_dataset(root / name, engine="zarr", consolidated=consolidated)), started)
    return expected


def many_variables(sizes: Sizes) -> Any:
    import xarray as xr

    rng = np.random.default_rng(4)
    dims = ("time", "cell")
    return xr.Dataset(
        {
            f"var{i:03d}": (dims, np.round(rng.random(sizes.variable_shape, dtype=np.float32), 3),
                            {"units": "K", "long_name": f"variable {i}", "index": i})  # fmt: skip
            for i in range(sizes.variables)
        },
        coords={"time": np.arange(sizes.variable_shape[0]), "cell": np.arange(sizes.variable_shape[1])},
        attrs={"title": "many variables"},
    )


def _stored(path: Path) -> str:
    if path.is_file():
        return _mib(path.stat().st_size)
    files = [p for p in path.rglob("*") if p.is_file()]
    return f"{_mib(sum(p.stat().st_size for p in files))} in {len(files):,} files"


# -- the worker: one library, one case, in its own process ------------------------------------


#: where the harness puts stores of many small files it is done with (emptied when the run ends)
DISCARDED = "discarded"


def discard(path: Path) -> None:
    """Move a store the harness is done with out of the way, into ``<data dir>/discarded``, instead
    of deleting it there and then.

    On a file system without a journal (ext4 on the benchmark machine) the inode allocator skips,
    one by one, every inode freed in the last 60 to 360 seconds when it creates a file (ext4's
    ``recently_deleted()``). Deleting the 200 to 6,400 files of one timed run made every create of
    the next run, by any library, up to 50 times slower -- a cost of the harness, not of the
    library measured: zarrx's appends of (j) took 2.1 ms each in its first round and 8.5 ms in its
    second, once every library's first-round stores had been deleted. A rename frees no inode.
    """
    if path.exists():
        trash = path.parent / DISCARDED
        trash.mkdir(exist_ok=True)
        path.rename(trash / f"{path.name}-{os.getpid()}-{time.monotonic_ns()}")


def thread_env(threads: int) -> dict[str, str]:
    """Environment variables that give every library (and what it links) the same thread budget."""
    n = str(threads)
    return {
        "ZARRX_NUM_THREADS": n,
        "ZARR_THREADING__MAX_WORKERS": n,
        "OMP_NUM_THREADS": n,
        "OPENBLAS_NUM_THREADS": n,
        "MKL_NUM_THREADS": n,
        "NUMEXPR_MAX_THREADS": n,
        "RAYON_NUM_THREADS": n,
        "BLOSC_NTHREADS": n,
        "TOKIO_WORKER_THREADS": n,
    }


def _status_kib(field: str) -> int | None:
    try:
        match = re.search(rf"^{field}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.MULTILINE)
    except OSError:
        return None
    return int(match.group(1)) if match else None


class PeakMemory:
    """RSS high-water mark during a block, above the RSS when it started (bytes)."""

    def __enter__(self) -> "PeakMemory":
        gc.collect()
        self.reset = False
        try:
            Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
            self.reset = True
        except OSError:
            pass
        rss = _status_kib("VmRSS")
        if rss is None:
            import resource

            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # Linux: KiB
        self.baseline = rss * 1024
        return self

    def __exit__(self, *exc: Any) -> None:
        hwm = _status_kib("VmHWM") if self.reset else None
        if hwm is None:
            import resource

            hwm = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            if sys.platform == "darwin":
                hwm //= 1024
        self.peak = max(0, hwm * 1024 - self.baseline)


@dataclass
class Job:
    case: str
    variant: str
    library: str
    root: str
    sizes: dict[str, Any]
    repeats: int
    threads: int
    round: int = 0
    profile: str | None = None  # where a zarrx worker writes its pyinstrument profile


def configure(library: str, threads: int) -> None:
    """Library settings that environment variables do not cover (call before opening anything)."""
    if library in ("zarr-python", "zarrs"):
        import zarr

        settings: dict[str, Any] = {"threading.max_workers": threads}
        if library == "zarrs":
            import zarrs  # noqa: F401

            settings["codec_pipeline.path"] = "zarrs.ZarrsCodecPipeline"
        zarr.config.set(settings)
    try:
        from numcodecs import blosc

        blosc.set_nthreads(threads)
    except ImportError:
        pass


def tensorstore_spec(path: Path, threads: int) -> dict[str, Any]:
    return {
        "driver": "zarr3",
        "kvstore": {"driver": "file", "path": str(path)},
        "context": {
            "cache_pool": {"total_bytes_limit": 0},
            "data_copy_concurrency": {"limit": threads},
            "file_io_concurrency": {"limit": threads},
        },
    }


class Operation:
    """What a worker times: ``setup()`` (untimed), ``run()`` (timed), ``check(result)`` -> hash."""

    def setup(self) -> None:
        pass

    def run(self) -> Any:
        raise NotImplementedError

    def check(self, result: Any) -> str:
        return digest(result)

    out_nbytes = 0
    note = ""


class Unavailable(Exception):
    """The library cannot do this case (reported as n/a with the reason)."""


def full_reader(library: str, path: Path, threads: int) -> Callable[[], np.ndarray]:
    if library == "zarrx":
        import zarrx

        array = zarrx.open_array(str(path))
        return lambda: array[...]
    if library in ("zarr-python", "zarrs"):
        import zarr

        array = zarr.open_array(str(path), mode="r")
        return lambda: array[...]
    if library == "tensorstore":
        import tensorstore as ts

        store = ts.open({**tensorstore_spec(path, threads), "open": True}).result()
        return lambda: store.read().result()
    if library == FLOOR:
        return FloorReader(path, threads)
    raise ValueError(library)


class FullRead(Operation):
    def __init__(self, job: Job, name: str) -> None:
        self.read = full_reader(job.library, Path(job.root) / name, job.threads)

    def run(self) -> Any:
        result = self.read()
        self.out_nbytes = result.nbytes
        return result


class RegionReads(Operation):
    def __init__(self, job: Job) -> None:
        sizes = Sizes(**{k: tuple(v) if isinstance(v, list) else v for k, v in job.sizes.items()})
        self.regions = random_regions(sizes.sharded_shape, sizes.region, sizes.regions)
        path = Path(job.root) / "d.zarr"
        if job.library == "zarrx":
            import zarrx

            array = zarrx.open_array(str(path))
            self.read = lambda region: array[region]
        elif job.library in ("zarr-python", "zarrs"):
            import zarr

            array = zarr.open_array(str(path), mode="r")
            self.read = lambda region: array[region]
        elif job.library == "tensorstore":
            import tensorstore as ts

            store = ts.open({**tensorstore_spec(path, job.threads), "open": True}).result()
            self.read = lambda region: store[region].read().result()
        else:
            self.read = FloorShardReader(path, job.threads)

    def run(self) -> Any:
        results = [self.read(region) for region in self.regions]
        self.out_nbytes = sum(r.nbytes for r in results)
        return results

    def check(self, result: Any) -> str:
        return digest(*result)


class Write(Operation):
    """Write a source array to a fresh store (creation untimed), zstd level 1, in the chunks of the
    store read in the matching read case: (e) the source of (a) like a.zarr, (i) that of (c) like c.zarr."""

    def __init__(self, job: Job) -> None:
        root = Path(job.root)
        self.library, self.threads = job.library, job.threads
        source, like = {"e": ("source.npy", "a.zarr"), "i": ("tiny.npy", "c.zarr")}[job.case]
        self.data = np.load(root / source)
        self.out_nbytes = self.data.nbytes
        self.template = json.loads((root / like / "zarr.json").read_text())
        self.chunks = tuple(self.template["chunk_grid"]["configuration"]["chunk_shape"])
        self.target = root / f"{job.case}-{job.library}-{job.round}.zarr"
        self.many_files = job.case == "i"
        if job.library == FLOOR:
            self.writer = FloorWriter(self.target, self.template, job.threads)

    def setup(self) -> None:
        self._remove()
        data = self.data
        if self.library == "zarrx":
            import zarrx

            self.array = zarrx.create_array(
                str(self.target), shape=data.shape, chunks=self.chunks, dtype=data.dtype, fill_value=0,
                compressors=[{"name": "zstd", "configuration": {"level": ZSTD_LEVEL, "checksum": False}}],
            )  # fmt: skip
        elif self.library in ("zarr-python", "zarrs"):
            import zarr

            self.array = zarr.create_array(
                str(self.target), shape=data.shape, chunks=self.chunks, dtype=data.dtype, fill_value=0,
                compressors=_zstd_codecs(),
            )  # fmt: skip
        elif self.library == "tensorstore":
            import tensorstore as ts

            fields = ("shape", "data_type", "chunk_grid", "chunk_key_encoding", "fill_value", "codecs")
            metadata = {field: self.template[field] for field in fields}
            spec = {**tensorstore_spec(self.target, self.threads), "metadata": metadata}
            self.array = ts.open(spec, create=True, delete_existing=True).result()
        else:
            self.writer.setup()

    def run(self) -> Any:
        if self.library == "tensorstore":
            self.array.write(self.data).result()
        elif self.library == FLOOR:
            self.writer(self.data)
        else:
            self.array[...] = self.data
        return None

    def check(self, result: Any) -> str:
        """What zarr-python (the reference) reads back from the written store."""
        import zarr

        codecs = json.loads((self.target / "zarr.json").read_text())["codecs"]
        names = [c["name"] for c in codecs]
        if names != ["bytes", "zstd"]:
            raise SystemExit(f"{self.library} wrote codecs {names}, expected bytes + zstd")
        self.note = _stored(self.target)
        value = digest(zarr.open_array(str(self.target), mode="r")[...])
        self._remove()
        return value

    def _remove(self) -> None:
        """(e)'s 230 MiB store is deleted at once (its 128 chunks free few inodes); (i)'s 6,400 files
        are only moved aside (see :func:`discard`)."""
        if self.many_files:
            discard(self.target)
        else:
            shutil.rmtree(self.target, ignore_errors=True)


class Append(Operation):
    """Append time steps one at a time to a fresh (0, ...) array in chunks of one step (creation untimed)."""

    def __init__(self, job: Job) -> None:
        root = Path(job.root)
        self.library, self.threads = job.library, job.threads
        self.steps = np.load(root / "steps.npy")
        self.out_nbytes = self.steps.nbytes
        self.target = root / f"j-{job.library}-{job.round}.zarr"

    def setup(self) -> None:
        discard(self.target)
        shape, chunks = (0, *self.steps.shape[1:]), (1, *self.steps.shape[1:])
        if self.library == "zarrx":
            import zarrx

            self.array = zarrx.create_array(
                str(self.target), shape=shape, chunks=chunks, dtype="f4", fill_value=0,
                compressors=[{"name": "zstd", "configuration": {"level": ZSTD_LEVEL, "checksum": False}}],
            )  # fmt: skip
        elif self.library in ("zarr-python", "zarrs"):
            import zarr

            self.array = zarr.create_array(str(self.target), shape=shape, chunks=chunks, dtype="f4", fill_value=0,
                                           compressors=_zstd_codecs())  # fmt: skip
        else:
            import tensorstore as ts

            metadata = {
                "shape": list(shape), "data_type": "float32", "fill_value": 0,
                "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunks)}},
                "chunk_key_encoding": {"name": "default"},
                "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                           {"name": "zstd", "configuration": {"level": ZSTD_LEVEL, "checksum": False}}],
            }  # fmt: skip
            spec = {**tensorstore_spec(self.target, self.threads), "metadata": metadata}
            self.array = ts.open(spec, create=True, delete_existing=True).result()

    def run(self) -> Any:
        array = self.array
        if self.library == "tensorstore":
            for index, step in enumerate(self.steps):
                array = array.resize(exclusive_max=[index + 1, *step.shape], expand_only=True).result()
                array[index].write(step).result()
            return None
        for step in self.steps:
            array.append(step[None])
        return None

    def check(self, result: Any) -> str:
        import zarr

        value = digest(zarr.open_array(str(self.target), mode="r")[...])
        discard(self.target)
        return value


class DaskSum(Operation):
    def __init__(self, job: Job) -> None:
        import dask

        dask.config.set(scheduler="threads", num_workers=job.threads)
        self.path = str(Path(job.root) / "a.zarr")
        self.library = job.library

    def run(self) -> Any:
        if self.library == "zarrx":
            import zarrx

            return zarrx.from_zarr(self.path).sum().compute()
        import dask.array as da

        return da.from_zarr(self.path).sum().compute()

    def check(self, result: Any) -> str:
        return f"{float(result):.9g}"


class XarrayOpen(Operation):
    def __init__(self, job: Job) -> None:
        import warnings

        import xarray as xr

        warnings.filterwarnings("ignore")
        self.consolidated = job.variant == "consolidated"
        self.path = Path(job.root) / f"g-{job.variant.replace(' ', '-')}.zarr"
        self.engine = "zarrx" if job.library == "zarrx" else "zarr"
        if self.engine not in xr.backends.list_engines():
            raise Unavailable(f'xarray engine="{self.engine}" is not registered')
        self.xr = xr

    def run(self) -> Any:
        return self.xr.open_dataset(self.path, engine=self.engine, consolidated=self.consolidated, chunks=None)

    def check(self, result: Any) -> str:
        return dataset_digest(result)


def make_operation(job: Job) -> Operation:
    if job.library == "tensorstore" and job.case in "fg":
        raise Unavailable("no dask/xarray integration in tensorstore")
    if job.library == FLOOR and job.case in "fg":
        raise Unavailable("no floor")
    configure(job.library, job.threads)
    if job.case in "abc":
        return FullRead(job, f"{job.case}.zarr")
    if job.case == "d":
        return RegionReads(job)
    if job.case in "ei":
        return Write(job)
    if job.case == "j":
        return Append(job)
    if job.case == "f":
        return DaskSum(job)
    if job.case == "g":
        return XarrayOpen(job)
    raise ValueError(job.case)


def worker(job: Job) -> dict[str, Any]:
    try:
        operation = make_operation(job)
    except Unavailable as reason:
        return {"na": str(reason)}
    import resource

    times, peaks, faults = [], [], []
    result: Any = None
    profiler = None
    for attempt in range(job.repeats + 1):  # the first run warms up and is not counted
        result = None
        operation.setup()
        if attempt == 1 and job.profile:
            from pyinstrument import Profiler

            profiler = Profiler(interval=0.0005)
            profiler.start()
        with PeakMemory() as memory:
            faults_before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            start = time.perf_counter()
            result = operation.run()
            elapsed = time.perf_counter() - start
            faults_after = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        if attempt:
            times.append(elapsed)
            peaks.append(memory.peak)
            faults.append(faults_after - faults_before)
    if profiler is not None:
        profiler.stop()
        Path(job.profile).write_text(profiler.output_text(unicode=True, show_all=False))
    zarrx_module = sys.modules.get("zarrx")
    return {
        "zarrx_file": getattr(zarrx_module, "__file__", None),
        "times": times,
        "peaks": peaks,
        "faults": faults,
        "hash": operation.check(result),
        "out_nbytes": operation.out_nbytes,
        "note": operation.note,
    }


# -- the floor: numcodecs on a thread pool, everything precomputed -----------------------------


def _decompressor(codecs: list[dict[str, Any]]) -> Callable[[Any, Any], Any]:
    names = [c["name"] for c in codecs]
    if names[0] != "bytes" or codecs[0].get("configuration", {}).get("endian", "little") != sys.byteorder:
        raise Unavailable(f"floor: codecs {names}")
    if names[1:] == ["zstd"]:
        from numcodecs import zstd

        return zstd.decompress
    if names[1:] == ["blosc"]:
        from numcodecs import blosc

        return blosc.decompress
    raise Unavailable(f"floor: codecs {names}")


def _chunk_path(root: Path, meta: dict[str, Any], coords: Sequence[int]) -> str:
    encoding = meta["chunk_key_encoding"]
    separator = encoding.get("configuration", {}).get("separator", "/")
    return str(root / ("c" + separator + separator.join(map(str, coords))))


def _grid(shape: Sequence[int], chunks: Sequence[int]) -> list[tuple[int, ...]]:
    return list(np.ndindex(*(-(-s // c) for s, c in zip(shape, chunks))))


def _split(items: list[Any], groups: int) -> list[list[Any]]:
    size = max(1, -(-len(items) // groups))
    return [items[i : i + size] for i in range(0, len(items), size)]


class FloorReader:
    """Read every chunk file and decode it with numcodecs into one preallocated output.

    Each pool thread keeps one scratch buffer for the whole run: a chunk's bytes are read with
    ``read()``, decoded into the scratch buffer (or straight into the output where the chunk is a
    contiguous piece of it), then copied into the output. (Of the variants tried this was the
    fastest: ``readinto`` a reused bytearray was slower, by 2x for blosc; reading a group of chunks
    before decoding them, or decoding into a fresh array per chunk, caused 20-60k page faults.)
    """

    def __init__(self, root: Path, threads: int) -> None:
        import threading
        from concurrent.futures import ThreadPoolExecutor

        meta = json.loads((root / "zarr.json").read_text())
        self.shape = tuple(meta["shape"])
        self.chunks = tuple(meta["chunk_grid"]["configuration"]["chunk_shape"])
        self.dtype = np.dtype(meta["data_type"])
        self.decompress = _decompressor(meta["codecs"])
        self.jobs = []
        for coords in _grid(self.shape, self.chunks):
            out_sel = tuple(slice(i * c, min((i + 1) * c, s)) for i, c, s in zip(coords, self.chunks, self.shape))
            chunk_sel = tuple(slice(0, o.stop - o.start) for o in out_sel)
            self.jobs.append((_chunk_path(root, meta, coords), out_sel, chunk_sel))
        self.groups = _split(self.jobs, threads * 4)
        self.pool = ThreadPoolExecutor(threads)
        self.chunk_nbytes = math.prod(self.chunks) * self.dtype.itemsize
        self.fill = meta["fill_value"]
        self.local = threading.local()

    def _scratch(self) -> np.ndarray:
        scratch = getattr(self.local, "scratch", None)
        if scratch is None:
            scratch = self.local.scratch = np.empty(self.chunk_nbytes, dtype=np.uint8)
        return scratch

    def _decode_group(self, group: list[Any], out: np.ndarray) -> None:
        scratch = self._scratch()
        chunk = scratch.view(self.dtype).reshape(self.chunks)
        for path, out_sel, chunk_sel in group:
            try:
                with open(path, "rb", buffering=0) as file:
                    raw = file.read()
            except FileNotFoundError:
                out[out_sel] = self.fill
                continue
            target = out[out_sel]
            if target.flags.c_contiguous and target.shape == self.chunks:
                self.decompress(raw, target.reshape(-1).view(np.uint8))
            else:
                self.decompress(raw, scratch)
                target[...] = chunk[chunk_sel]

    def __call__(self) -> np.ndarray:
        out = np.empty(self.shape, dtype=self.dtype)
        list(self.pool.map(self._decode_group, self.groups, [out] * len(self.groups)))
        return out


class FloorShardReader:
    """Region reads from shards: read the index of each touched shard, then the wanted inner
    chunks with ``os.pread``, decoded with numcodecs on the pool (index CRCs not checked)."""

    def __init__(self, root: Path, threads: int) -> None:
        import threading
        from concurrent.futures import ThreadPoolExecutor

        meta = json.loads((root / "zarr.json").read_text())
        (sharding,) = meta["codecs"]
        config = sharding["configuration"]
        if config.get("index_location", "end") != "end":
            raise Unavailable("floor: index at the start")
        self.root, self.meta = root, meta
        self.shape = tuple(meta["shape"])
        self.shard = tuple(meta["chunk_grid"]["configuration"]["chunk_shape"])
        self.inner = tuple(config["chunk_shape"])
        self.per_shard = tuple(s // c for s, c in zip(self.shard, self.inner))
        self.dtype = np.dtype(meta["data_type"])
        self.decompress = _decompressor(config["codecs"])
        self.index_size = math.prod(self.per_shard) * 16 + 4  # uint64 pairs + crc32c
        self.pool = ThreadPoolExecutor(threads)
        self.threads = threads
        self.inner_nbytes = math.prod(self.inner) * self.dtype.itemsize
        self.local = threading.local()

    def _decode_group(self, group: list[Any], out: np.ndarray) -> None:
        scratch = getattr(self.local, "scratch", None)
        if scratch is None:
            scratch = self.local.scratch = np.empty(self.inner_nbytes, dtype=np.uint8)
        chunk = scratch.view(self.dtype).reshape(self.inner)
        for fd, offset, nbytes, out_sel, chunk_sel in group:
            self.decompress(os.pread(fd, nbytes, offset), scratch)
            out[out_sel] = chunk[chunk_sel]

    def __call__(self, region: tuple[slice, ...]) -> np.ndarray:
        out = np.empty(tuple(r.stop - r.start for r in region), dtype=self.dtype)
        ranges = [range(r.start // c, (r.stop - 1) // c + 1) for r, c in zip(region, self.inner)]
        indexes: dict[tuple[int, ...], tuple[int, np.ndarray]] = {}
        jobs = []
        for coords in np.ndindex(*(len(r) for r in ranges)):
            inner = tuple(r[i] for r, i in zip(ranges, coords))
            shard = tuple(i // n for i, n in zip(inner, self.per_shard))
            if shard not in indexes:
                fd = os.open(_chunk_path(self.root, self.meta, shard), os.O_RDONLY)
                size = os.fstat(fd).st_size
                raw = os.pread(fd, self.index_size, size - self.index_size)
                indexes[shard] = (fd, np.frombuffer(raw, "<u8", count=(self.index_size - 4) // 8).reshape(*self.per_shard, 2))
            fd, index = indexes[shard]
            offset, nbytes = index[tuple(i % n for i, n in zip(inner, self.per_shard))]
            lo = [max(r.start, i * c) for r, i, c in zip(region, inner, self.inner)]
            hi = [min(r.stop, (i + 1) * c) for r, i, c in zip(region, inner, self.inner)]
            out_sel = tuple(slice(a - r.start, b - r.start) for a, b, r in zip(lo, hi, region))
            chunk_sel = tuple(slice(a - i * c, b - i * c) for a, b, i, c in zip(lo, hi, inner, self.inner))
            jobs.append((fd, int(offset), int(nbytes), out_sel, chunk_sel))
        groups = _split(jobs, self.threads)
        list(self.pool.map(self._decode_group, groups, [out] * len(groups)))
        for fd, _ in indexes.values():
            os.close(fd)
        return out


class FloorWriter:
    """Encode every chunk with numcodecs zstd on the pool and write it to its file (no atomic rename)."""

    def __init__(self, root: Path, template: dict[str, Any], threads: int) -> None:
        import threading
        from concurrent.futures import ThreadPoolExecutor

        self.root, self.meta = root, template
        self.shape = tuple(template["shape"])
        self.chunks = tuple(template["chunk_grid"]["configuration"]["chunk_shape"])
        self.level = template["codecs"][1]["configuration"]["level"]
        self.jobs = []
        for coords in _grid(self.shape, self.chunks):
            sel = tuple(slice(i * c, (i + 1) * c) for i, c in zip(coords, self.chunks))
            self.jobs.append((_chunk_path(root, template, coords), sel))
        if any(s % c for s, c in zip(self.shape, self.chunks)):
            raise Unavailable("floor: partial chunks")
        self.groups = _split(self.jobs, threads * 4)
        self.pool = ThreadPoolExecutor(threads)
        self.local = threading.local()

    def setup(self) -> None:
        self.root.mkdir(parents=True)
        (self.root / "zarr.json").write_text(json.dumps(self.meta))
        for folder in {os.path.dirname(path) for path, _ in self.jobs}:
            os.makedirs(folder, exist_ok=True)

    def _encode_group(self, group: list[Any], data: np.ndarray) -> None:
        from numcodecs import zstd

        scratch = getattr(self.local, "scratch", None)
        if scratch is None:  # one contiguous staging buffer per thread, for the whole run
            scratch = self.local.scratch = np.empty(self.chunks, dtype=data.dtype)
        for path, sel in group:
            np.copyto(scratch, data[sel])
            encoded = zstd.compress(scratch, self.level)
            with open(path, "wb", buffering=0) as file:
                file.write(encoded)

    def __call__(self, data: np.ndarray) -> None:
        list(self.pool.map(self._encode_group, self.groups, [data] * len(self.groups)))


# -- the parent: run every worker, print the tables --------------------------------------------


def _cpu_jiffies() -> tuple[int, int] | None:
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    return sum(fields), fields[3] + fields[4]  # total, idle + iowait


def busy_fraction(window: float = 0.5) -> float | None:
    """The share of all CPUs busy over ``window`` seconds (Linux); this process sleeps meanwhile."""
    before = _cpu_jiffies()
    time.sleep(window)
    after = _cpu_jiffies()
    if before is None or after is None or after[0] == before[0]:
        return None
    return 1 - (after[1] - before[1]) / (after[0] - before[0])


def _children_cpu() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def wait_for_idle(max_wait: float, threshold: float = 0.10) -> float | None:
    """Wait (at most ``max_wait`` s) until other processes leave the CPUs idle; the last busy share seen."""
    deadline = time.monotonic() + max_wait
    busy = busy_fraction()
    while busy is not None and busy > threshold and time.monotonic() < deadline:
        busy = busy_fraction(1.0)
    return busy


#: put first on the workers' PYTHONPATH (the zarrx snapshot)
WORKER_PATH: list[str] = []


def run_worker(job: Job, timeout: float) -> dict[str, Any]:
    env = {**os.environ, **thread_env(job.threads)}
    if WORKER_PATH:
        env["PYTHONPATH"] = os.pathsep.join([*WORKER_PATH, *filter(None, [os.environ.get("PYTHONPATH")])])
    command = [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(dataclasses.asdict(job))]
    try:
        completed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    for line in completed.stdout.splitlines():
        if line.startswith(RESULT_MARK):
            return json.loads(line[len(RESULT_MARK) :])
    tail = (completed.stderr or completed.stdout).strip().splitlines()[-8:]
    return {"error": f"exit {completed.returncode}: " + " | ".join(tail)}


def versions() -> dict[str, str]:
    out = {}
    for name in ("zarrx", "zarr", "zarrs", "tensorstore", "numcodecs", "numpy", "dask", "xarray"):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    out["python"] = platform.python_version()
    return out


def machine() -> dict[str, str]:
    cpu = platform.processor() or platform.machine()
    memory = ""
    try:
        match = re.search(r"model name\s*:\s*(.+)", Path("/proc/cpuinfo").read_text())
        cpu = match.group(1).strip() if match else cpu
        total = re.search(r"MemTotal:\s+(\d+) kB", Path("/proc/meminfo").read_text())
        memory = f"{int(total.group(1)) / 2**20:.1f} GiB" if total else ""
    except OSError:
        pass
    return {"cpus": str(os.cpu_count()), "cpu": cpu, "memory": memory, "os": platform.platform()}


def zarrx_fingerprint(folder: Path | None = None) -> str:
    """A hash of zarrx's source files: the run warns when they change under it (shared checkouts)."""
    if folder is None:
        try:
            import zarrx
        except ImportError:
            return "?"
        folder = Path(zarrx.__file__).parent
    h = hashlib.blake2b(digest_size=8)
    for path in sorted(folder.rglob("*.py")):
        h.update(path.read_bytes())
    return h.hexdigest()


def snapshot_zarrx(root: Path) -> Path | None:
    """Copy zarrx's package into ``root`` so every worker imports the same code, even while others
    edit the checkout; the folder to put first on the workers' PYTHONPATH (None: zarrx not found)."""
    try:
        import zarrx
    except ImportError:
        return None
    source = Path(zarrx.__file__).parent
    target = root / "zarrx-snapshot"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target / "zarrx", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return target


def git_commit() -> str:
    try:
        import zarrx

        folder = Path(zarrx.__file__).parent
        commit = subprocess.run(["git", "-C", str(folder), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True, timeout=10).stdout.strip()  # fmt: skip
        dirty = subprocess.run(["git", "-C", str(folder), "status", "--porcelain", "--", "."],
                               capture_output=True, text=True, timeout=10).stdout.strip()  # fmt: skip
    except (ImportError, OSError, subprocess.SubprocessError):
        return "?"
    return (commit or "?") + (" + uncommitted changes" if dirty else "")


def load_average() -> str:
    try:
        return ", ".join(f"{value:.2f}" for value in os.getloadavg())
    except OSError:
        return "?"


def merge(entries: dict[str, dict[str, Any]], library: str, result: dict[str, Any]) -> None:
    """Pool a worker's result into the library's entry (times and peaks add up; any error wins)."""
    entry = entries.setdefault(library, {})
    if "error" in result or "error" in entry:
        error = entry.get("error") or result["error"]
        entry.clear()
        entry["error"] = error
        return
    if "na" in result:
        entry.update(result)
        return
    if "hash" in entry and entry["hash"] != result["hash"]:
        entry["mismatch"] = f"rounds disagree: {entry['hash']} vs {result['hash']}"
    for field in ("times", "peaks", "faults"):
        entry[field] = entry.get(field, []) + result[field]
    for field in ("hash", "out_nbytes", "note", "zarrx_file"):
        entry[field] = result[field]
    for field in ("busy_before", "others_busy"):
        if field in result:
            entry[field] = max(entry.get(field, 0.0), result[field])


def summarise(result: dict[str, Any]) -> dict[str, Any]:
    if "times" in result:
        result["median"] = statistics.median(result["times"])
        result["min"] = min(result["times"])
        result["peak"] = statistics.median(result["peaks"])
        result["faults_median"] = statistics.median(result["faults"])
    return result


@dataclass
class Target:
    name: str
    text: str
    check: Callable[[dict[str, dict[str, Any]]], tuple[bool | None, str]]


def _time(results: dict[str, dict[str, Any]], row: str, library: str) -> float | None:
    return results.get(row, {}).get(library, {}).get("median")


def _ratio_target(row: str, other: str, factor: float, stretch: str | None = None):
    """zarrx at least ``factor`` x faster than ``other``."""

    def check(results):
        ours, theirs = _time(results, row, "zarrx"), _time(results, row, other)
        if ours is None or theirs is None:
            return None, "not measured"
        speedup = theirs / ours
        detail = f"{other} / zarrx = {speedup:.2f}x (target >= {factor}x)"
        if stretch:
            stretch_time = _time(results, row, stretch)
            if stretch_time is not None:
                detail += f"; zarrx / {stretch} = {ours / stretch_time:.2f}"
        return speedup >= factor, detail

    return check


def _fastest_and_floor(row: str):
    def check(results):
        ours = _time(results, row, "zarrx")
        others = {lib: _time(results, row, lib) for lib in LIBRARIES[1:]}
        others = {lib: t for lib, t in others.items() if t is not None}
        floor = _time(results, row, FLOOR)
        if ours is None or not others or floor is None:
            return None, "not measured"
        best = min(others, key=others.get)
        fastest, near_floor = ours <= others[best], ours <= 1.10 * floor
        return fastest and near_floor, (
            f"zarrx / fastest other ({best}) = {ours / others[best]:.2f} (target <= 1); "
            f"zarrx / floor = {ours / floor:.2f} (target <= 1.10)"
        )

    return check


def _within(row: str, other: str, factor: float):
    def check(results):
        ours, theirs = _time(results, row, "zarrx"), _time(results, row, other)
        if ours is None or theirs is None:
            return None, "not measured"
        return ours <= factor * theirs, f"zarrx / {other} = {ours / theirs:.2f} (target <= {factor})"

    return check


def _memory(row: str, factor: float):
    def check(results):
        entry = results.get(row, {}).get("zarrx", {})
        if "peak" not in entry or not entry.get("out_nbytes"):
            return None, "not measured"
        times = entry["peak"] / entry["out_nbytes"]
        return times <= factor, f"zarrx peak {_mib(entry['peak'])} = {times:.2f}x the output (target <= {factor}x)"

    return check


TARGETS = [
    Target("a", "(a) zstd read: fastest, within 10% of the floor", _fastest_and_floor("a")),
    Target("b", "(b) blosc read: fastest, within 10% of the floor", _fastest_and_floor("b")),
    Target("c", "(c) 6,400 tiny chunks: no slower than tensorstore", _within("c", "tensorstore", 1.0)),
    Target("d", "(d) sharded region reads: no slower than tensorstore", _within("d", "tensorstore", 1.0)),
    Target("e", "(e) write: >= 1.4x zarr-python", _ratio_target("e", "zarr-python", 1.4)),
    Target("f", "(f) dask sum: >= 1.3x da.from_zarr", _ratio_target("f", "zarr-python", 1.3)),
    Target("g", "(g) xarray open, consolidated: >= 2x engine=zarr", _ratio_target("g (consolidated)", "zarr-python", 2)),
    Target("g", "(g) xarray open, not consolidated: >= 2x engine=zarr", _ratio_target("g (not consolidated)", "zarr-python", 2)),
    Target("h", "(h) peak memory of the full read (a): <= 1.2x output", _memory("a", 1.2)),
    Target("i", "(i) 6,400 tiny-chunk write: <= 0.5x zarr-python", _within("i", "zarr-python", 0.5)),
    Target("j", "(j) appends, a chunk per step: <= 0.5x zarr-python", _within("j", "zarr-python", 0.5)),
]  # fmt: skip


def _cell_time(entry: dict[str, Any] | None) -> str:
    if not entry:
        return "-"
    if "na" in entry:
        return "n/a"
    if "error" in entry:
        return "error"
    return f"{entry['median'] * 1e3:.1f}"


def render(rows: list[Row], results: dict[str, dict[str, Any]], sizes: Sizes, markdown: bool) -> str:
    lines: list[str] = []

    def table(header: list[str], body: list[list[str]], left: bool = False) -> None:
        if markdown:
            lines.append("| " + " | ".join(header) + " |")
            lines.append("|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|")
            lines.extend("| " + " | ".join(r) + " |" for r in body)
        else:
            widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]
            fmt = lambda r: "  ".join(
                c.ljust(w) if i == 0 or (left and i == len(r) - 1) else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))
            ).rstrip()
            lines.append(fmt(header))
            lines.append("-" * len(fmt(header)))
            lines.extend(fmt(r) for r in body)
        lines.append("")

    label = lambda row: f"{row.key}: {describe(row.case, sizes)}"
    lines.append("Median time in ms (lower is better); 'floor' = numcodecs decode/encode on the same threads:")
    lines.append("")
    table(
        ["case", *COLUMNS, "values"],
        [[label(row), *(_cell_time(results[row.key].get(lib)) for lib in COLUMNS), _values(results[row.key])]
         for row in rows],
    )  # fmt: skip
    lines.append("Ratio zarrx / other (below 1: zarrx is faster):")
    lines.append("")
    body = []
    for row in rows:
        ours = results[row.key].get("zarrx", {}).get("median")
        cells = []
        for lib in COLUMNS[1:]:
            theirs = results[row.key].get(lib, {}).get("median")
            cells.append(f"{ours / theirs:.2f}" if ours and theirs else "-")
        body.append([row.key, *cells])
    table(["case", *(f"zarrx/{lib}" for lib in COLUMNS[1:])], body)
    counted = [row for row in rows if chunk_count(row.case, sizes)]
    if counted:
        lines.append("Per chunk, µs (the median time divided by the chunks decoded or encoded):")
        lines.append("")
        table(
            ["case", "chunks", *LIBRARIES],
            [[row.key, f"{chunk_count(row.case, sizes):,}",
              *(f"{results[row.key][lib]['median'] * 1e6 / chunk_count(row.case, sizes):.1f}"
                if "median" in results[row.key].get(lib, {}) else "-" for lib in LIBRARIES)]
             for row in counted],
        )  # fmt: skip
    lines.append("Peak memory above the worker's baseline, MiB (median over runs; x = times the output):")
    lines.append("")
    body = []
    for row in rows:
        cells = []
        for lib in COLUMNS:
            entry = results[row.key].get(lib, {})
            if "peak" not in entry:
                cells.append("-")
                continue
            cell = f"{entry['peak'] / 2**20:.0f}"
            if entry.get("out_nbytes") and row.case in "abce":
                cell += f" ({entry['peak'] / entry['out_nbytes']:.2f}x)"
            cells.append(cell)
        body.append([row.key, *cells])
    table(["case", *COLUMNS], body)
    lines.append("Minor page faults per run, thousands (first touches of fresh memory; median over runs):")
    lines.append("")
    body = [
        [row.key, *(f"{results[row.key][lib]['faults_median'] / 1000:.1f}" if "faults_median" in results[row.key].get(lib, {})
                    else "-" for lib in COLUMNS)]
        for row in rows
    ]  # fmt: skip
    table(["case", *COLUMNS], body)
    notes = []
    for row in rows:
        for lib in COLUMNS:
            entry = results[row.key].get(lib, {})
            if "na" in entry and lib != FLOOR and not (lib == "tensorstore" and row.case in "fg"):
                notes.append(f"{row.key} {lib}: n/a: {entry['na']}")
            if "error" in entry:
                notes.append(f"{row.key} {lib}: ERROR: {entry['error']}")
            if entry.get("mismatch"):
                notes.append(f"{row.key} {lib}: VALUES DIFFER: {entry['mismatch']}")
            if entry.get("others_busy", 0) > 0.10:
                notes.append(f"{row.key} {lib}: other processes used {entry['others_busy']:.0%} of the CPUs "
                             "during its most disturbed worker")
            if entry.get("note") and row.case in "ei":
                notes.append(f"{row.key} {lib}: stored {entry['note']}")
    if notes:
        lines.append("Notes:")
        lines.extend(("- " if markdown else "  ") + note for note in notes)
        lines.append("")
    selected = {row.case for row in rows}
    verdicts = []
    for target in TARGETS:
        if target.name not in selected and not (target.name == "h" and "a" in selected):
            continue
        met, detail = target.check(results)
        verdicts.append([target.text, {True: "met", False: "MISSED", None: "n/a"}[met], detail])
    if verdicts:
        lines.append("Targets:")
        lines.append("")
        table(["target", "status", "measured"], verdicts, left=True)
    return "\n".join(lines)


def _values(row_results: dict[str, Any]) -> str:
    entries = [e for e in row_results.values() if "hash" in e]
    if not entries:
        return "-"
    if any(e.get("mismatch") for e in entries):
        return "DIFFER"
    return f"identical ({len(entries)})"


def check_values(row: Row, row_results: dict[str, Any], expected: dict[str, Any]) -> None:
    """Mark every library whose result differs from the reference."""
    if row.case == "f":
        reference = expected.get("a.sum")
        for entry in row_results.values():
            if "hash" in entry and reference is not None:
                value = float(entry["hash"])
                if not math.isclose(value, reference, rel_tol=1e-6):
                    entry["mismatch"] = f"sum {value!r}, expected {reference!r}"
        return
    reference = {
        "a": expected.get("a.zarr"), "b": expected.get("b.zarr"), "c": expected.get("c.zarr"),
        "d": expected.get("d.zarr"), "e": expected.get("source.npy"),
        "i": expected.get("tiny.npy"), "j": expected.get("steps.npy"),
        "g": expected.get(f"g-{row.variant.replace(' ', '-')}.zarr"),
    }[row.case]  # fmt: skip
    for entry in row_results.values():
        if "hash" in entry and entry["hash"] != reference:
            entry["mismatch"] = f"hash {entry['hash']}, expected {reference}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one repeat: checks the runner works (CI)")
    parser.add_argument("--cases", default="abcdefghij", help="which cases, e.g. a,b,e (default: all)")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per worker process (after a warm-up)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="worker processes per library and case, interleaved; the median pools all their runs")
    parser.add_argument("--jobs", type=int, help="workers run at once (default 1; 4 with --smoke, which times nothing)")
    parser.add_argument("--threads", type=int, default=2, help="the thread budget of every library")
    parser.add_argument("--libraries", default=",".join(COLUMNS), help="subset of " + ",".join(COLUMNS))
    parser.add_argument("--data-dir", type=Path, help="where the stores go; kept and reused (default: a temp dir)")
    parser.add_argument("--json", type=Path, help="also write the raw results here")
    parser.add_argument("--markdown", type=Path, help="also write the tables as Markdown here")
    parser.add_argument("--profile-dir", type=Path, help="profile the zarrx workers' timed runs with pyinstrument")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per worker")
    parser.add_argument("--max-others", type=float, default=0.10,
                        help="rerun a worker when other processes used more than this share of the CPUs meanwhile")
    parser.add_argument("--attempts", type=int, default=3, help="most runs of one worker (see --max-others)")
    parser.add_argument("--wait-idle", type=float, help="before each worker, wait up to this many seconds for "
                        "other processes to leave the CPUs idle (default 120; 0 with --smoke)")
    parser.add_argument("--live-zarrx", action="store_true",
                        help="workers import zarrx from where it is installed, not from a snapshot taken at the start")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.worker:
        job = Job(**json.loads(args.worker))
        print(RESULT_MARK + json.dumps(worker(job)), flush=True)
        return 0

    sizes = SMOKE if args.smoke else FULL
    repeats = 1 if args.smoke else max(1, args.repeats)
    rounds = 1 if args.smoke else max(1, args.rounds)
    if args.jobs is None:
        args.jobs = 4 if args.smoke else 1
    if args.wait_idle is None:
        args.wait_idle = 0 if args.smoke else 120
    cases = sorted({c for c in args.cases.replace(",", "") if c in "abcdefghij"})
    if "h" in cases:
        cases = sorted({*cases, "a", "e"})
    libraries = [lib.strip() for lib in args.libraries.split(",") if lib.strip()]
    rows = rows_for(cases)
    out = print

    info = {"machine": machine(), "versions": versions(), "threads": args.threads, "repeats": repeats,
            "rounds": rounds, "smoke": args.smoke, "load_before": load_average(),
            "zarrx_source": zarrx_fingerprint(), "zarrx_commit": git_commit()}  # fmt: skip
    out(f"machine: {info['machine']['cpus']} CPUs, {info['machine']['cpu']}, {info['machine']['memory']}, "
        f"{info['machine']['os']}")  # fmt: skip
    out("versions: " + ", ".join(f"{k} {v}" for k, v in info["versions"].items()))
    out(f"thread budget {args.threads} per library; each library in its own process; {rounds} round(s) of "
        f"{repeats} timed run(s) after one warm-up each, median of all; load average {info['load_before']}\n")  # fmt: skip

    temporary = args.data_dir is None
    root = Path(tempfile.mkdtemp(prefix="zarrx-bench-")) if temporary else args.data_dir
    root.mkdir(parents=True, exist_ok=True)
    try:
        if not args.live_zarrx:
            snapshot = snapshot_zarrx(root)
            if snapshot is not None:
                WORKER_PATH[:] = [str(snapshot)]
                info["zarrx_source"] = zarrx_fingerprint(snapshot / "zarrx")
                out(f"zarrx {info['zarrx_commit']}: workers import a snapshot of it ({snapshot}, source hash "
                    f"{info['zarrx_source']})")  # fmt: skip
        shutil.rmtree(root / DISCARDED, ignore_errors=True)  # an interrupted run's
        out(f"data in {root}:")
        expected = prepare_data(root, sizes, cases, out)
        out("")
        results: dict[str, dict[str, Any]] = {row.key: {} for row in rows}
        jobs = []
        for row in rows:  # rounds interleaved within a case: drift from other load hits every library alike
            for round_ in range(rounds):
                for library in row.libraries:
                    if library not in libraries:
                        continue
                    profile = None
                    if args.profile_dir and library == "zarrx" and round_ == 0:
                        args.profile_dir.mkdir(parents=True, exist_ok=True)
                        name = row.case + ("-" + row.variant.replace(" ", "-") if row.variant else "")
                        profile = str(args.profile_dir / f"zarrx-{name}.txt")
                    sizes_json = dataclasses.asdict(sizes)
                    jobs.append((row, Job(row.case, row.variant, library, str(root), sizes_json, repeats,
                                          args.threads, round_, profile)))  # fmt: skip

        def attempt(job: Job) -> dict[str, Any]:
            busy = wait_for_idle(args.wait_idle) if args.wait_idle > 0 else None
            cpu_before, children_before = _cpu_jiffies(), _children_cpu()
            result = run_worker(job, args.timeout)
            cpu_after, children_after = _cpu_jiffies(), _children_cpu()
            if busy is not None:
                result["busy_before"] = busy
            if args.jobs == 1 and cpu_before and cpu_after and cpu_after[0] > cpu_before[0]:
                # CPU time the rest of the machine used while the worker ran (the worker's own time left out)
                total = cpu_after[0] - cpu_before[0]
                busy_jiffies = total - (cpu_after[1] - cpu_before[1])
                ours = (children_after - children_before) * os.sysconf("SC_CLK_TCK")
                result["others_busy"] = max(0.0, (busy_jiffies - ours) / total)
            return result

        def launch(item: tuple[Row, Job]) -> tuple[Row, Job, dict[str, Any], float]:
            """Run a worker; again (up to --attempts times) while other processes took over --max-others
            of the CPUs meanwhile, keeping the least disturbed attempt."""
            started = time.perf_counter()
            best: dict[str, Any] | None = None
            for _ in range(max(1, args.attempts)):
                result = attempt(item[1])
                if best is None or result.get("others_busy", 0) < best.get("others_busy", 0):
                    best = result
                if "times" not in result or result.get("others_busy", 0) <= args.max_others:
                    break
            return (*item, best, time.perf_counter() - started)

        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max(1, args.jobs)) as pool:
            for row, job, entry, seconds in pool.map(launch, jobs):
                merge(results[row.key], job.library, entry)
                status = (f"{statistics.median(entry['times']) * 1e3:9.1f} ms" if "times" in entry
                          else "n/a: " + entry["na"] if "na" in entry else "ERROR: " + entry.get("error", "?"))  # fmt: skip
                busy = f", CPUs {entry['busy_before']:.0%} busy before" if "busy_before" in entry else ""
                busy += f", others used {entry['others_busy']:.0%} of the CPUs meanwhile" if "others_busy" in entry else ""
                out(f"  {row.key:<22} {job.library:<12} round {job.round + 1}  {status}   ({seconds:.0f} s{busy})", flush=True)
        for row in rows:
            for entry in results[row.key].values():
                summarise(entry)
            check_values(row, results[row.key], expected)
        info["load_after"] = load_average()
        out(f"\nload average (1, 5, 15 min): before {info['load_before']}, after {info['load_after']}")
        if args.live_zarrx and zarrx_fingerprint() != info["zarrx_source"]:
            out("WARNING: zarrx's source files changed during the run; the zarrx timings may mix versions")
            info["zarrx_source_changed"] = True
        out("")
        text = render(rows, results, sizes, markdown=False)
        out(text)
        if args.markdown:
            m = info["machine"]
            header = (
                f"Machine: {m['cpus']} CPUs ({m['cpu']}), {m['memory']}, {m['os']}.  \n"
                f"Versions: {', '.join(f'{k} {v}' for k, v in info['versions'].items())}; zarrx {info['zarrx_commit']} "
                f"(source hash {info['zarrx_source']}).  \n"
                f"Thread budget {args.threads}; {rounds} round(s) of {repeats} timed runs per library and case; "
                f"load average before {info['load_before']}, after {info['load_after']}.\n\n"
            )
            args.markdown.write_text(header + render(rows, results, sizes, markdown=True))
        if args.json:
            args.json.write_text(json.dumps({"info": info, "sizes": dataclasses.asdict(sizes), "results": results}, indent=1))
        failures = [f"{key} {lib}" for key, row in results.items() for lib, e in row.items()
                    if "error" in e or e.get("mismatch")]  # fmt: skip
        if failures:
            out("FAILED: " + ", ".join(failures))
            return 1
        return 0
    finally:
        shutil.rmtree(root / DISCARDED, ignore_errors=True)
        if temporary:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
