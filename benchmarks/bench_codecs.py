"""Codec back-ends side by side: microseconds per call, per library, in one run.

For each codec zarrx writes and reads (zstd, gzip, blosc, crc32c) this script times the
libraries that could do the work, on the same frames, in the same process:

* **sizes**: a tiny chunk (2.4 KiB: 600 float32, the 6,400-chunk case of issue 20) and a
  large one (1 MiB); the data is a smooth field plus Gaussian noise rounded to 1e-3, as in
  ``bench_suite.py`` (it compresses to about 90%);
* **operations**: decode (into a preallocated buffer when the library can) and encode;
* **threads**: 1 and 2 worker threads (never the main thread, as zarrx's executor), each
  building its own per-thread state (contexts) before the clock starts; the figure is the
  wall time divided by the number of calls, so a library that releases the GIL halves it
  on 2 threads;
* **median** of ``--repeats`` timed runs, each ``--seconds`` long (calls counted beforehand),
  the back-ends of a cell interleaved run by run; before each cell the script waits (up to
  ``--wait-idle`` seconds) until other processes leave the CPUs idle, and says when they did not.

Rows marked ``zarrx`` go through zarrx's own codec (its checks and its chosen back-end);
the others call a library directly. The script imports the zarrx of its own checkout, so
the same script copied into an older checkout gives that version's ``zarrx`` rows (the
"before" of a change). ``--smoke`` runs everything tiny, for CI.

Usage::

    python benchmarks/bench_codecs.py                       # the table of docs/performance.md
    python benchmarks/bench_codecs.py --codecs zstd,gzip --markdown codecs.md
    python benchmarks/bench_codecs.py --smoke
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numcodecs.blosc  # noqa: E402
import numcodecs.zstd  # noqa: E402

from zarrx.codecs import BloscCodec, Crc32cCodec, GzipCodec, ZstdCodec  # noqa: E402

from bench_suite import wait_for_idle  # noqa: E402  (this folder: the suite's idle check)

#: one call: (encoded or decoded chunk, output buffer of the decoded size) -> anything
Call = Callable[[Any, np.ndarray], Any]
#: builds a call inside the thread that makes it (per-thread contexts are made there)
Backend = Callable[[], Call]

ZSTD_LEVEL = 1
GZIP_LEVEL = 5
BLOSC = {"cname": "lz4", "clevel": 5, "shuffle": "shuffle", "typesize": 4}


def chunk_data(size: int, seed: int) -> np.ndarray:
    """``size`` bytes of float32: a smooth field plus noise rounded to 1e-3 (as bench_suite.py)."""
    rng = np.random.default_rng(seed)
    count = size // 4
    field = np.sin(np.linspace(0, 8 * np.pi, count)) * 10 + rng.normal(0, 0.5, count)
    return np.round(field, 3).astype("float32").view(np.uint8)


# -- the libraries, one builder per (codec, operation, back-end) -------------------------------


def _zstandard_decoder() -> Call:
    import zstandard

    context = zstandard.ZstdDecompressor()

    def call(frame: Any, out: np.ndarray) -> None:
        out[:] = np.frombuffer(context.decompress(frame, allow_extra_data=False), np.uint8)

    return call


def _zstandard_fresh_decoder() -> Call:
    import zstandard

    return lambda frame, out: zstandard.ZstdDecompressor().decompress(frame)


def _zstandard_reader() -> Call:
    import zstandard

    context = zstandard.ZstdDecompressor()
    return lambda frame, out: context.stream_reader(frame).readinto(memoryview(out))


def _zstandard_encoder() -> Call:
    import zstandard

    context = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_content_size=True)
    return lambda data, out: context.compress(data)


def _bounded_gzip(module: Any) -> Backend:
    """Decoding as GzipCodec does it (one member, at most one byte past the size) with ``module``."""

    def build() -> Call:
        def call(stream: Any, out: np.ndarray) -> None:
            decompressor = module.decompressobj(wbits=47)
            result = decompressor.decompress(stream, out.nbytes + 1)
            assert decompressor.eof and len(result) == out.nbytes

        return call

    return build


def _isal_module() -> Any:
    from isal import isal_zlib

    return isal_zlib


def _zlib_ng_module() -> Any:
    from zlib_ng import zlib_ng

    return zlib_ng


def _deflate_decoder() -> Call:
    import deflate

    return lambda stream, out: deflate.gzip_decompress(stream)


def _deflate_encoder() -> Call:
    import deflate

    return lambda data, out: deflate.gzip_compress(data, GZIP_LEVEL)


def _blosc2_decoder() -> Call:
    import blosc2

    return lambda chunk, out: blosc2.decompress(chunk, dst=out)


def _blosc2_context_decoder() -> Call:
    import blosc2

    return lambda chunk, out: blosc2.decompress2(chunk, dst=out, nthreads=1)


def _google_crc32c() -> Call:
    import google_crc32c

    return lambda data, out: google_crc32c.value(data)


def _crc32c_package() -> Call:
    import crc32c

    return lambda data, out: crc32c.crc32c(data)


def _payload(checksum: Call) -> Call:
    """The checksum of a stored chunk's payload (a view: all but the last 4 bytes)."""
    return lambda data, out: checksum(np.frombuffer(data, np.uint8)[:-4], out)


def _codec_decoder(codec: Any) -> Backend:
    def build() -> Call:
        if codec.decodes_into:
            return codec.decode_into
        return lambda data, out: codec.decode(data, out.nbytes, out.nbytes)

    return build


def _codec_encoder(codec: Any) -> Backend:
    return lambda: lambda data, out: codec.encode(data)


def _optional(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


_zstd = ZstdCodec(level=ZSTD_LEVEL)
_gzip = GzipCodec(level=GZIP_LEVEL)
_blosc = BloscCodec(**BLOSC)
_crc32c = Crc32cCodec()

#: codec -> how its chunks are made (decoded bytes -> stored bytes), the reference writer
ENCODERS: dict[str, Callable[[np.ndarray], bytes]] = {
    "zstd": lambda data: bytes(numcodecs.zstd.compress(data, ZSTD_LEVEL, False)),
    "gzip": lambda data: zlib.compress(data, GZIP_LEVEL, wbits=31),
    "blosc": lambda data: bytes(numcodecs.blosc.compress(data, b"lz4", 5, 1, 0, 4)),
    "crc32c": _crc32c.encode,
}

#: (codec, operation) -> back-end name -> (builder, module it needs)
BACKENDS: dict[tuple[str, str], dict[str, tuple[Backend, str]]] = {
    ("zstd", "decode"): {
        "numcodecs.zstd (context per call)": (lambda: numcodecs.zstd.decompress, "numcodecs"),
        "zstandard, context per call": (_zstandard_fresh_decoder, "zstandard"),
        "zstandard, per-thread context, + copy": (_zstandard_decoder, "zstandard"),
        "zstandard stream_reader.readinto (no copy)": (_zstandard_reader, "zstandard"),
        "zarrx ZstdCodec.decode_into": (_codec_decoder(_zstd), "zarrx"),
    },
    ("zstd", "encode"): {
        "numcodecs.zstd (context per call)": (lambda: lambda data, out: numcodecs.zstd.compress(data, ZSTD_LEVEL), "numcodecs"),
        "zstandard, per-thread context": (_zstandard_encoder, "zstandard"),
        "zarrx ZstdCodec.encode": (_codec_encoder(_zstd), "zarrx"),
    },
    ("gzip", "decode"): {
        "zlib (bounded)": (_bounded_gzip(zlib), "zlib"),
        "isal (bounded)": (lambda: _bounded_gzip(_isal_module())(), "isal"),
        "zlib-ng (bounded)": (lambda: _bounded_gzip(_zlib_ng_module())(), "zlib_ng"),
        "deflate (libdeflate, unbounded)": (_deflate_decoder, "deflate"),
        "zarrx GzipCodec.decode": (_codec_decoder(_gzip), "zarrx"),
    },
    ("gzip", "encode"): {
        "zlib": (lambda: lambda data, out: zlib.compress(data, GZIP_LEVEL, wbits=31), "zlib"),
        "zlib-ng (other bytes)": (lambda: lambda data, out: _zlib_ng_module().compress(data, GZIP_LEVEL, wbits=31), "zlib_ng"),
        "isal level 3 (other bytes)": (lambda: lambda data, out: _isal_module().compress(data, 3, wbits=31), "isal"),
        "deflate (other bytes)": (_deflate_encoder, "deflate"),
        "zarrx GzipCodec.encode": (_codec_encoder(_gzip), "zarrx"),
    },
    ("blosc", "decode"): {
        "numcodecs.blosc": (lambda: numcodecs.blosc.decompress, "numcodecs"),
        "blosc2.decompress (global context and lock)": (_blosc2_decoder, "blosc2"),
        "blosc2.decompress2 (context per call, 1 thread)": (_blosc2_context_decoder, "blosc2"),
        "zarrx BloscCodec.decode_into": (_codec_decoder(_blosc), "zarrx"),
    },
    ("blosc", "encode"): {
        "numcodecs.blosc": (lambda: lambda data, out: numcodecs.blosc.compress(data, b"lz4", 5, 1, 0, 4), "numcodecs"),
        "zarrx BloscCodec.encode": (_codec_encoder(_blosc), "zarrx"),
    },
    ("crc32c", "decode"): {
        "google_crc32c.value": (lambda: _payload(_google_crc32c()), "google_crc32c"),
        "crc32c.crc32c": (lambda: _payload(_crc32c_package()), "crc32c"),
        "zarrx Crc32cCodec.decode": (_codec_decoder(_crc32c), "zarrx"),
    },
    ("crc32c", "encode"): {
        "google_crc32c.value": (_google_crc32c, "google_crc32c"),
        "crc32c.crc32c": (_crc32c_package, "crc32c"),
        "zarrx Crc32cCodec.encode": (_codec_encoder(_crc32c), "zarrx"),
    },
}


# -- timing ------------------------------------------------------------------------------------


def run_threads(backend: Backend, inputs: list[Any], size: int, threads: int, calls: int) -> float:
    """Wall seconds for ``calls`` calls split over ``threads`` new threads (state built untimed).

    The clock is read in the workers (first start to last end): the main thread may wait for
    the GIL after the barrier and would miss the start of a short run.
    """
    barrier = threading.Barrier(threads)
    spans: list[tuple[float, float]] = []
    errors: list[BaseException] = []

    def work(index: int) -> None:
        try:
            call = backend()
            out = np.empty(size, dtype=np.uint8)
            mine = [inputs[(index + i * threads) % len(inputs)] for i in range(calls // threads)]
            call(mine[0], out)  # warm: first-call setup is not timed
        except BaseException as error:  # noqa: BLE001 - reported after the run
            errors.append(error)
            mine, call, out = [], None, None
        barrier.wait()
        start = time.perf_counter()
        for item in mine:
            call(item, out)
        spans.append((start, time.perf_counter()))

    workers = [threading.Thread(target=work, args=(index,)) for index in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    if errors:
        raise errors[0]
    return max(end for _, end in spans) - min(start for start, _ in spans)


def calls_for(backend: Backend, inputs: list[Any], size: int, threads: int, seconds: float) -> int:
    """How many calls take about ``seconds`` on one thread (a multiple of ``threads``)."""
    calls = max(2, len(inputs))
    while (elapsed := run_threads(backend, inputs, size, 1, calls)) < seconds / 10:
        calls *= 4
    return max(threads * 2, int(seconds / (elapsed / calls)) // threads * threads)


def measure(backends: dict[str, Backend], inputs: list[Any], size: int, threads: int, seconds: float,
            repeats: int) -> dict[str, float]:  # fmt: skip
    """Median microseconds per call (wall time / calls) of each back-end, the back-ends' runs
    interleaved (a, b, c, a, b, c...) so that all of them see the same load of a shared machine."""
    calls = {name: calls_for(backend, inputs, size, threads, seconds) for name, backend in backends.items()}
    runs: dict[str, list[float]] = {name: [] for name in backends}
    for _ in range(repeats):
        for name, backend in backends.items():
            runs[name].append(run_threads(backend, inputs, size, threads, calls[name]) / calls[name] * 1e6)
    return {name: statistics.median(values) for name, values in runs.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes and times, for CI")
    parser.add_argument("--codecs", default="zstd,gzip,blosc,crc32c")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=0.15, help="length of one timed run")
    parser.add_argument("--markdown", type=Path, help="also write the table to this file")
    parser.add_argument("--wait-idle", type=float, default=60.0,
                        help="before each cell, wait up to this many seconds for other processes to leave the CPUs idle")  # fmt: skip
    args = parser.parse_args(argv)
    sizes = {"2.4 KiB": 2400, "1 MiB": 1 << 20}
    if args.smoke:
        sizes, args.repeats, args.seconds, args.wait_idle = {"2.4 KiB": 2400, "64 KiB": 1 << 16}, 1, 0.002, 0
    codecs = args.codecs.split(",")
    import numcodecs

    versions = {name: _version(name) for name in ("numcodecs", "zstandard", "isal", "zlib_ng", "deflate",
                                                  "blosc2", "google_crc32c", "crc32c")}  # fmt: skip
    versions["zlib"] = zlib.ZLIB_RUNTIME_VERSION
    print(f"# python {sys.version.split()[0]}, numpy {np.__version__}, numcodecs {numcodecs.__version__}")
    print("# " + ", ".join(f"{name} {version}" for name, version in versions.items()))
    lines = ["| codec | operation | back-end | " + " | ".join(f"{label}, {t} thread{'s' * (t > 1)}"
                                                              for label in sizes for t in (1, 2)) + " |"]  # fmt: skip
    lines.append("|---|---|---|" + "---:|" * (2 * len(sizes)))
    print(lines[0])
    print(lines[1])
    for (codec, operation), backends in BACKENDS.items():
        if codec not in codecs:
            continue
        cells: dict[str, list[str]] = {name: [] for name in backends}
        available = {name: backend for name, (backend, module) in backends.items()
                     if module in ("zarrx", "zlib") or _optional(module)}  # fmt: skip
        for size in sizes.values():
            decoded = [chunk_data(size, seed) for seed in range(8 if size < 1 << 16 else 2)]
            inputs = [ENCODERS[codec](data) for data in decoded] if operation == "decode" else decoded
            for threads in (1, 2):
                if args.wait_idle and (busy := wait_for_idle(args.wait_idle) or 0.0) > 0.1:
                    print(f"# {codec} {operation} {size} B {threads}: others kept {busy:.0%} of the CPUs busy", flush=True)
                medians = measure(available, inputs, size, threads, args.seconds, args.repeats)
                for name in backends:
                    cells[name].append(f"{medians[name]:.1f}" if name in medians else "not installed")
        for name, values in cells.items():
            line = f"| {codec} | {operation} | {name} | " + " | ".join(values) + " |"
            lines.append(line)
            print(line, flush=True)
    if args.markdown:
        args.markdown.write_text("\n".join(lines) + "\n")
    return 0


def _version(module: str) -> str:
    try:
        from importlib.metadata import version

        return version({"zlib_ng": "zlib-ng", "google_crc32c": "google-crc32c"}.get(module, module))
    except Exception:  # noqa: BLE001 - not installed
        return "not installed"


if __name__ == "__main__":
    sys.exit(main())
