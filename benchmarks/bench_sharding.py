"""Random small-region reads of a sharded array: zarrx, zarr-python 3 and tensorstore.

Case (d) of the performance issue: a 3-d float32 array in shards of 64 x 256 x 256 holding inner
chunks of 16 x 32 x 32 (64 KiB each; bytes + zstd level 1, index bytes + crc32c at the end). Each
library writes its own copy of the same data once; then each library reads the same 30 random
20 x 100 x 100 regions from every copy, ``--repeats`` times, interleaved so that drift affects all
alike. A pass is the 30 reads; the table gives the median pass time of each reader on each copy,
and zarrx's ratio to the others (below 1: zarrx is faster). Every region read is checked to be
identical across libraries and to the source data.

It also counts what zarrx asks the store for when it reads one region: batched calls, byte-range
requests, and bytes read against the bytes of the region and of the shards it touches.

All three libraries run in this one process with their default thread pools (zarrx: the CPU
count, tensorstore: its own defaults, zarr-python: its event loop and thread pool); the copies
sit in the page cache, so this times decoding and per-request overhead, not the disk. No cache of
decoded chunks is used by any library (tensorstore's cache pool is set to 0 bytes).

Usage::

    python benchmarks/bench_sharding.py            # 256 x 512 x 512 float32 (256 MiB), 7 passes
    python benchmarks/bench_sharding.py --smoke    # 64 x 256 x 256 (16 MiB, one shard), 1 pass: CI
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import tensorstore as ts
import zarr

import zarrx
from zarrx.storage import LocalStore
from zarrx.storage.store import Store

SHARDS = (64, 256, 256)
INNER_CHUNKS = (16, 32, 32)
REGION = (20, 100, 100)
ZSTD_LEVEL = 1
#: the codecs all three libraries write, as spec JSON (checked after writing)
CODECS = [
    {
        "name": "sharding_indexed",
        "configuration": {
            "chunk_shape": list(INNER_CHUNKS),
            "codecs": [
                {"name": "bytes", "configuration": {"endian": "little"}},
                {"name": "zstd", "configuration": {"level": ZSTD_LEVEL, "checksum": False}},
            ],
            "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
            "index_location": "end",
        },
    }
]
LIBRARIES = ("zarrx", "zarr-python", "tensorstore")


# -- data and writers ---------------------------------------------------------------------------


def make_data(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Smooth fields plus noise rounded to 1e-3: compresses like measured data, not like zeros."""
    z, y, x = (np.arange(n, dtype=np.float32) for n in shape)
    data = np.sin(z / 7)[:, None, None] + np.cos(y / 13)[None, :, None] * np.sin(x / 5)[None, None, :]
    data += np.random.default_rng(seed).standard_normal(shape, dtype=np.float32) * 0.05
    return np.round(data, 3).astype(np.float32)


def write_zarrx(path: Path, data: np.ndarray) -> None:
    array = zarrx.create_array(
        str(path), shape=data.shape, chunks=INNER_CHUNKS, shards=SHARDS, dtype="float32",
        compressors=[{"name": "zstd", "configuration": {"level": ZSTD_LEVEL, "checksum": False}}],
    )  # fmt: skip
    array[...] = data


def write_zarr_python(path: Path, data: np.ndarray) -> None:
    array = zarr.create_array(
        str(path), shape=data.shape, chunks=INNER_CHUNKS, shards=SHARDS, dtype="float32",
        compressors=[zarr.codecs.ZstdCodec(level=ZSTD_LEVEL, checksum=False)],
    )  # fmt: skip
    array[...] = data


def _tensorstore_spec(path: Path) -> dict[str, Any]:
    return {
        "driver": "zarr3",
        "kvstore": {"driver": "file", "path": str(path)},
        "context": {"cache_pool": {"total_bytes_limit": 0}},
    }


def write_tensorstore(path: Path, data: np.ndarray) -> None:
    metadata = {
        "shape": list(data.shape),
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(SHARDS)}},
        "data_type": "float32",
        "fill_value": 0.0,
        "codecs": CODECS,
    }
    array = ts.open({**_tensorstore_spec(path), "metadata": metadata}, create=True).result()
    array.write(data).result()


WRITERS: dict[str, Callable[[Path, np.ndarray], None]] = {
    "zarrx": write_zarrx,
    "zarr-python": write_zarr_python,
    "tensorstore": write_tensorstore,
}


def check_codecs(path: Path, writer: str) -> None:
    """The three copies must be coded alike, or the comparison says nothing."""
    codecs = json.loads((path / "zarr.json").read_text())["codecs"]
    configuration = codecs[0]["configuration"]
    configuration.setdefault("index_location", "end")  # tensorstore leaves the defaults out
    for codec in configuration["codecs"]:
        if codec["name"] == "zstd":
            codec["configuration"].setdefault("checksum", False)
    if codecs != CODECS:
        raise SystemExit(f"{writer} wrote codecs {json.dumps(codecs)}, expected {json.dumps(CODECS)}")


# -- readers ------------------------------------------------------------------------------------

Region = tuple[slice, ...]


def open_reader(library: str, path: Path) -> Callable[[Region], np.ndarray]:
    """A function reading one region; opening (metadata) is not timed."""
    if library == "zarrx":
        array = zarrx.open_array(str(path))
        return lambda region: array[region]
    if library == "zarr-python":
        array = zarr.open_array(str(path), mode="r")
        return lambda region: array[region]
    array = ts.open({**_tensorstore_spec(path), "open": True}).result()
    return lambda region: array[region].read().result()


def random_regions(shape: tuple[int, ...], count: int, seed: int = 1) -> list[Region]:
    rng = np.random.default_rng(seed)
    regions = []
    for _ in range(count):
        starts = [int(rng.integers(0, n - r + 1)) for n, r in zip(shape, REGION)]
        regions.append(tuple(slice(s, s + r) for s, r in zip(starts, REGION)))
    return regions


def time_pass(read: Callable[[Region], np.ndarray], regions: Sequence[Region]) -> float:
    start = time.perf_counter()
    for region in regions:
        read(region)
    return time.perf_counter() - start


# -- what zarrx fetches -------------------------------------------------------------------------


class CountingStore(Store):
    """Delegates to a store and counts batched calls, byte-range requests and bytes read."""

    def __init__(self, inner: Store) -> None:
        self.inner, self.read_only = inner, inner.read_only
        self.batches, self.requests, self.bytes_read = 0, [], 0

    def _count(self, key: str, byte_range: Any, value: bytes | None) -> bytes | None:
        if not key.endswith("zarr.json"):
            self.requests.append((key, byte_range))
            self.bytes_read += len(value) if value is not None else 0
        return value

    def get(self, key, byte_range=None):
        return self._count(key, byte_range, self.inner.get(key, byte_range))

    def get_many(self, keys):
        self.batches += 1
        values = self.inner.get_many(keys)
        for key in keys:
            self._count(key, None, values[key])
        return values

    def get_ranges(self, requests):
        self.batches += 1
        values = self.inner.get_ranges(requests)
        for (key, byte_range), value in zip(requests, values):
            self._count(key, byte_range, value)
        return values

    def set(self, key, value):
        self.inner.set(key, value)

    def delete(self, key):
        self.inner.delete(key)

    def list_prefix(self, prefix):
        return self.inner.list_prefix(prefix)

    def list_dir(self, prefix):
        return self.inner.list_dir(prefix)


def count_requests(path: Path, region: Region) -> dict[str, Any]:
    store = CountingStore(LocalStore(path))
    array = zarrx.open_array(store)
    store.batches, store.requests, store.bytes_read = 0, [], 0
    array[region]
    shards = sorted({key for key, _ in store.requests})
    inner = [
        len(range(r.start // c, (r.stop - 1) // c + 1)) for r, c in zip(region, INNER_CHUNKS)
    ]
    return {
        "region": "[" + ", ".join(f"{r.start}:{r.stop}" for r in region) + "]",
        "region_bytes": int(np.prod(REGION)) * 4,
        "inner_chunks": int(np.prod(inner)),
        "shards": len(shards),
        "shard_bytes": sum((path / key).stat().st_size for key in shards),
        "batches": store.batches,
        "requests": len(store.requests),
        "index_requests": sum(type(byte_range).__name__ == "SuffixByteRequest" for _, byte_range in store.requests),
        "bytes_read": store.bytes_read,
    }


# -- the run ------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="16 MiB, 5 regions, 1 pass: for CI")
    parser.add_argument("--shape", type=int, nargs=3, help="array shape (default 256 512 512, 256 MiB)")
    parser.add_argument("--regions", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=7, help="passes over the regions per reader and copy")
    parser.add_argument("--dir", type=Path, help="where to write the copies (default: a temporary directory)")
    parser.add_argument("--keep", action="store_true", help="keep the written copies")
    args = parser.parse_args(argv)
    shape = tuple(args.shape or ((64, 256, 256) if args.smoke else (256, 512, 512)))
    count, repeats = (5, 1) if args.smoke else (args.regions, args.repeats)
    warnings.filterwarnings("ignore", module="zarr")

    root = Path(tempfile.mkdtemp(prefix="bench_sharding_", dir=args.dir))
    try:
        data = make_data(shape)
        print(f"array {shape} float32 ({data.nbytes / 2**20:.0f} MiB), shards {SHARDS}, inner chunks {INNER_CHUNKS}, "
              f"zstd level {ZSTD_LEVEL}; {count} regions of {REGION}, {repeats} pass(es)")  # fmt: skip
        versions = {name: importlib.metadata.version(name) for name in ("zarrx", "zarr", "tensorstore", "numpy")}
        print(", ".join(f"{name} {version}" for name, version in versions.items()) + f", Python {sys.version.split()[0]}")

        print("\nwrite (once, seconds):")
        for writer, write in WRITERS.items():
            start = time.perf_counter()
            write(root / writer, data)
            elapsed = time.perf_counter() - start
            check_codecs(root / writer, writer)
            stored = sum(p.stat().st_size for p in (root / writer).rglob("*") if p.name != "zarr.json")
            print(f"  {writer:<12} {elapsed:7.2f} s   {stored / 2**20:7.1f} MiB stored")

        regions = random_regions(shape, count)
        readers = {(library, writer): open_reader(library, root / writer) for library in LIBRARIES for writer in WRITERS}

        # identical values: every reader, every copy, every region, against the source
        for region in regions:
            expected = data[region]
            for (library, writer), read in readers.items():
                if not np.array_equal(read(region), expected):
                    raise SystemExit(f"{library} reading the {writer} copy differs from the source at {region}")
        print(f"\nvalues: identical across {len(readers)} reader x copy pairs and the source, {count} regions each")

        passes: dict[tuple[str, str], list[float]] = {key: [] for key in readers}
        for _ in range(repeats):
            for key, read in readers.items():  # interleaved: drift hits every reader alike
                passes[key].append(time_pass(read, regions))
        medians = {key: statistics.median(times) for key, times in passes.items()}

        print(f"\nmedian time of {count} region reads (ms; per read in parentheses), reader down, copy across:")
        print(f"  {'reader':<12}" + "".join(f"{writer + ' copy':>26}" for writer in WRITERS))
        for library in LIBRARIES:
            cells = [f"{medians[library, w] * 1e3:9.1f} ({medians[library, w] / count * 1e3:6.2f})" for w in WRITERS]
            print(f"  {library:<12}" + "".join(f"{cell:>26}" for cell in cells))
        print("\nratio zarrx / other (below 1: zarrx faster):")
        print(f"  {'other':<12}" + "".join(f"{writer + ' copy':>26}" for writer in WRITERS))
        for library in LIBRARIES[1:]:
            cells = [f"{medians['zarrx', w] / medians[library, w]:.2f}" for w in WRITERS]
            print(f"  {library:<12}" + "".join(f"{cell:>26}" for cell in cells))

        counts = count_requests(root / "zarrx", regions[0])
        print(f"\nzarrx requests for one region read {counts['region']} of the zarrx copy:")
        print(f"  {counts['inner_chunks']} inner chunks in {counts['shards']} shards; {counts['batches']} batched store calls, "
              f"{counts['requests']} byte-range requests ({counts['index_requests']} of them shard indexes)")  # fmt: skip
        print(f"  {counts['bytes_read'] / 2**10:.0f} KiB read for a {counts['region_bytes'] / 2**10:.0f} KiB region "
              f"({counts['bytes_read'] / counts['shard_bytes']:.1%} of the {counts['shard_bytes'] / 2**20:.1f} MiB "
              f"of the shards it touches)")  # fmt: skip
    finally:
        if args.keep:
            print(f"\ncopies kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
