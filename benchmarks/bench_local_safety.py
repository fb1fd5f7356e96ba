"""What keeping a local store safe costs: contained key resolution and consolidated metadata kept true.

zarrx resolves every key of a local store inside its root (``openat2`` with ``RESOLVE_BENEATH`` on
Linux, else a walk of folder descriptors) and updates consolidated metadata at every metadata
write; zarr-python does neither. This script times, on one local folder per library, in one run:

1. **read many small chunks**: ``arr[...]`` of a (1024, 1024) uint8 array in 32 x 32 chunks
   (1,024 chunks of 1 KiB, no compression): per-chunk cost dominates;
2. **write many small chunks**: ``arr[...] = values`` of the same array;
3. **attribute updates**: 100 ``arr.attrs[...] = ...`` on an array two groups deep, in a hierarchy
   without consolidated metadata and in one consolidated at the root (zarr-python leaves its
   consolidated copy stale; zarrx rewrites it);
4. **appends**: 50 ``arr.append(row)`` of one row to a (n, 64) float32 array, likewise.

Each case runs ``--repeat`` times after a warm-up; the table gives medians and the ratio
zarr-python / zarrx (above 1: zarrx faster). zarrx's store requests per operation are counted with
a :class:`~zarrx.storage.MetricsStore` (reads are batched: one ``get_many`` call for the ancestors).
Run it on another checkout of zarrx with ``PYTHONPATH=/path/to/checkout`` to compare versions.

Usage::

    python benchmarks/bench_local_safety.py                        # full size, 7 runs each
    python benchmarks/bench_local_safety.py --data-dir /dev/shm    # on a tmpfs: no disk noise
    python benchmarks/bench_local_safety.py --smoke                # tiny: CI
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np
import zarr

import zarrx
from zarrx.storage import LocalStore, MetricsStore


def median_time(function: Callable[[], Any], repeat: int) -> float:
    function()  # warm-up
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def chunk_cases(folder: Path, shape: tuple[int, int], chunks: tuple[int, int], repeat: int) -> dict[str, tuple[float, float]]:
    values = np.random.default_rng(0).integers(0, 255, shape, dtype="uint8")
    ours = zarrx.create_array(folder / "zarrx.zarr", shape=shape, chunks=chunks, dtype="uint8", compressors=None)
    theirs = zarr.create_array(str(folder / "zarr.zarr"), shape=shape, chunks=chunks, dtype="uint8", compressors=None)
    write = {"zarrx": lambda: ours.__setitem__(Ellipsis, values), "zarr-python": lambda: theirs.__setitem__(Ellipsis, values)}
    write_times = {name: median_time(call, repeat) for name, call in write.items()}
    assert np.array_equal(ours[...], theirs[...])
    read = {"zarrx": lambda: ours[...], "zarr-python": lambda: theirs[...]}
    read_times = {name: median_time(call, repeat) for name, call in read.items()}
    count = (shape[0] // chunks[0]) * (shape[1] // chunks[1])
    return {
        f"read {count} chunks of {chunks[0] * chunks[1]} B": (read_times["zarrx"], read_times["zarr-python"]),
        f"write {count} chunks of {chunks[0] * chunks[1]} B": (write_times["zarrx"], write_times["zarr-python"]),
    }


def hierarchy(library: Any, path: Path, consolidated: bool) -> None:
    root = library.open_group(str(path), mode="w")
    root.create_group("a").create_group("b").create_array("x", shape=(1, 64), chunks=(1, 64), dtype="float32")
    for name in ("u", "v", "w"):
        root.create_group(name)
    if consolidated:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # zarr-python: consolidated metadata is not in the v3 spec
            library.consolidate_metadata(str(path))


def metadata_cases(folder: Path, updates: int, appends: int, repeat: int) -> tuple[dict[str, tuple[float, float]], dict[str, str]]:
    times: dict[str, tuple[float, float]] = {}
    requests: dict[str, str] = {}
    row = np.ones((1, 64), dtype="float32")
    for consolidated in (False, True):
        label = "consolidated" if consolidated else "not consolidated"
        measured = {}
        for library in (zarrx, zarr):
            path = folder / f"{library.__name__}-{label.replace(' ', '-')}.zarr"

            def attributes() -> None:
                hierarchy(library, path, consolidated)
                array = library.open_array(str(path), path="a/b/x", mode="r+")
                started = time.perf_counter()
                for i in range(updates):
                    array.attrs[f"k{i % 5}"] = i
                measured.setdefault((library.__name__, "attributes"), []).append(time.perf_counter() - started)

            def append() -> None:
                hierarchy(library, path, consolidated)
                array = library.open_array(str(path), path="a/b/x", mode="r+")
                started = time.perf_counter()
                for _ in range(appends):
                    array.append(row)
                measured.setdefault((library.__name__, "append"), []).append(time.perf_counter() - started)

            for case in (attributes, append):
                for _ in range(repeat + 1):
                    case()
        for case, count in (("attributes", updates), ("append", appends)):
            ours = statistics.median(measured[("zarrx", case)][1:]) / count
            theirs = statistics.median(measured[("zarr", case)][1:]) / count
            times[f"{'attribute update' if case == 'attributes' else 'append one row'}, {label}"] = (ours, theirs)
        hierarchy(zarrx, folder / "counted.zarr", consolidated)
        store = MetricsStore(LocalStore(folder / "counted.zarr"))
        array = zarrx.open_array(store, "a/b/x", mode="r+")
        store.reset()
        array.attrs["counted"] = 1
        summary = store.summary()
        requests[label] = ", ".join(f"{name} {metrics.calls}x{metrics.requests // max(metrics.calls, 1)}"
                                    for name, metrics in summary.items() if metrics.calls)  # fmt: skip
    return times, requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one run (CI)")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--data-dir", default=None, help="where the stores go (a tmpfs such as /dev/shm takes the disk out)")
    args = parser.parse_args()
    repeat = 1 if args.smoke else args.repeat
    shape, chunks = ((64, 64), (16, 16)) if args.smoke else ((1024, 1024), (32, 32))
    folder = Path(tempfile.mkdtemp(prefix="zarrx-bench-safety-", dir=args.data_dir))
    try:
        rows = chunk_cases(folder, shape, chunks, repeat)
        metadata, requests = metadata_cases(folder, 5 if args.smoke else 100, 3 if args.smoke else 50, repeat)
        rows.update(metadata)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"zarrx {zarrx.__file__}\n")
    print("| case | zarrx | zarr-python | zarr-python / zarrx |")
    print("|---|---|---|---|")
    for name, (ours, theirs) in rows.items():
        unit, scale = ("ms", 1e3) if ours > 1e-3 else ("µs", 1e6)
        print(f"| {name} | {ours * scale:.1f} {unit} | {theirs * scale:.1f} {unit} | {theirs / ours:.2f}x |")
    print("\nzarrx's store calls for one attribute update (calls x requests each):")
    for label, text in requests.items():
        print(f"  {label}: {text}")


if __name__ == "__main__":
    main()
