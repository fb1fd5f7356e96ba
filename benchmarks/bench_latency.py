"""Remote reads on ordinary and unfriendly servers: zarrx vs zarr-python, side by side in one run.

Each server is started by this script on 127.0.0.1 in a process of its own, serving the
same folder (or, for S3, the same objects):

=================================  ===================================================================
``python -m http.server``          exactly that: HTTP/1.0 (a connection per request), no byte
                                   ranges, listen backlog 5; read by URL, and through zarr-python's
                                   ``ObjectStore`` over obstore's ``HTTPStore`` by both libraries
``20 ms, backlog 5``               :mod:`tests.http_server` adding 20 ms to every request, keep-alive,
                                   byte ranges, the listen backlog of 5 most small servers keep
``20 ms, backlog 128``             the same, tuned: backlog 128
``20 ms, 503 above 16 in flight``  backlog 128; more than 16 requests in flight are answered 503 with
                                   ``Retry-After: 0`` (S3's SlowDown, GCS's 429)
``... no keep-alive``              the three servers above closing the connection after every answer
                                   (as HTTP/1.0 servers do): every request a new connection
``S3 (moto)``                      moto's S3 server (:mod:`tests.s3_server`), through s3fs
``stalled``                        accepts requests and never answers: the time until the read fails,
                                   zarrx with a 2 s request deadline, zarr-python with its defaults
                                   (given up after ``--stall-wait`` seconds)
=================================  ===================================================================

The case on every server is **read 256 chunks**: open a (1024, 1024) float32 array in 64 x 64
chunks (zstd) from its URL and read it all. On the 20 ms backlog 128 server three more cases run:
``xr.open_dataset`` of 100 variables with and without consolidated metadata, and a 20 x 100 x 100
region of a sharded array (shards 64 x 256 x 256, inner chunks 16 x 32 x 32).

Every measurement is a **fresh process** (no warm connection pool, no learned concurrency): it
imports the library (zarrx's API, which ``import zarrx`` leaves to the first use, included; and aiohttp, fsspec's HTTP file system, s3fs and xarray's engines, which
both libraries would otherwise import on the first URL or open), then times the open and the
read, and checks the values (a hash equal between the libraries). ``--rounds`` (default 3) rounds interleave the libraries
(zarrx, zarr-python, then zarr-python, zarrx, ...) so both see the same machine load; the table
gives medians, the zarrx / zarr-python ratio, the issue's target, and where the server counts
them the requests of the last run, the most in flight at once and the 503s answered.

The **floor** column reads the same 256 chunks with plain aiohttp, no decoding, told the
server's best level in advance: on the tuned server 64 requests at once from the start, on the
throttling one exactly 16 (the most it serves; the 503s it still answered are counted). It is
how fast a Python client can be against that server on this machine in this run: the physical
bound of the row. (On the servers with a backlog of 5 the same client waits for TCP's
retransmissions of dropped connection attempts: 2.7 s to over a minute per read when tried.)

Usage::

    python benchmarks/bench_latency.py                   # every server, 3 rounds
    python benchmarks/bench_latency.py --output t.md     # also write the table to t.md
    python benchmarks/bench_latency.py --servers plain,backlog5 --rounds 5
    python benchmarks/bench_latency.py --smoke           # tiny sizes, 2 ms, one round: CI
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # the servers of the test suite

from tests.http_server import ServerProcess  # noqa: E402
LIBRARIES = ("zarrx", "zarr-python")
FLOOR = "aiohttp"
BUCKET = "bench"
S3_CREDENTIALS = {"key": "bench", "secret": "bench-secret"}
#: the request deadline zarrx gets on the stalled server
STALL_DEADLINE = 2.0
#: server -> requests the floor keeps in flight (the server's best level, known in advance)
FLOOR_CONCURRENCY = {"backlog128": 64, "throttle16": 16, "close128": 64, "closethrottle16": 16}


@dataclass(frozen=True)
class Sizes:
    array: tuple[int, ...]
    chunks: tuple[int, ...]
    variables: int
    sharded: tuple[int, ...]
    shards: tuple[int, ...]
    inner: tuple[int, ...]
    region: tuple[tuple[int, int], ...]

    @property
    def chunk_keys(self) -> list[str]:
        grid = [-(-size // chunk) for size, chunk in zip(self.array, self.chunks)]
        return [f"c/{i}/{j}" for i in range(grid[0]) for j in range(grid[1])]


FULL = Sizes(
    array=(1024, 1024), chunks=(64, 64), variables=100,
    sharded=(64, 512, 512), shards=(64, 256, 256), inner=(16, 32, 32),
    region=((10, 30), (130, 230), (170, 270)),
)  # fmt: skip
SMOKE = Sizes(
    array=(128, 128), chunks=(32, 32), variables=10,
    sharded=(32, 128, 128), shards=(32, 64, 64), inner=(16, 32, 32),
    region=((3, 13), (20, 60), (40, 80)),
)  # fmt: skip


# -- data ---------------------------------------------------------------------------------------
def write_data(root: Path, sizes: Sizes) -> None:
    import numpy as np
    import xarray as xr

    import zarrx

    rng = np.random.default_rng(0)
    chunked = zarrx.create_array(root / "chunks.zarr", shape=sizes.array, chunks=sizes.chunks, dtype="f4")
    chunked[:] = rng.random(sizes.array, dtype=np.float32)
    sharded = zarrx.create_array(
        root / "sharded.zarr", shape=sizes.sharded, chunks=sizes.inner, shards=sizes.shards, dtype="f4",
        compressors=[{"name": "zstd", "configuration": {"level": 1, "checksum": False}}],
    )  # fmt: skip
    z, y, x = (np.arange(n, dtype=np.float32) for n in sizes.sharded)
    sharded[:] = np.round(np.sin(z[:, None, None] / 7) + np.cos(y[None, :, None] / 13) * np.sin(x[None, None, :] / 5), 3)
    dataset = xr.Dataset(
        {
            f"var{i:03d}": (("time", "cell"), rng.random((8, 16), dtype=np.float32), {"units": "K", "index": i})
            for i in range(sizes.variables)
        },
        coords={"time": np.arange(8), "cell": np.arange(16)},
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr-python warns that v3 consolidated metadata is not in the spec
        dataset.to_zarr(root / "variables_consolidated.zarr", zarr_format=3, consolidated=True)
        dataset.to_zarr(root / "variables.zarr", zarr_format=3, consolidated=False)


def upload(root: Path, endpoint: str) -> None:
    import s3fs

    fs = s3fs.S3FileSystem(endpoint_url=endpoint, skip_instance_cache=True, **S3_CREDENTIALS)
    fs.mkdir(BUCKET)
    fs.put(str(root / "chunks.zarr"), f"{BUCKET}/chunks.zarr", recursive=True)


# -- the servers --------------------------------------------------------------------------------
class Server(ServerProcess):
    """A server in a process of its own; :mod:`tests.http_server` ones count their requests."""

    def __init__(self, arguments: list[str]) -> None:
        super().__init__(arguments, cwd=REPO)
        self.counts = arguments[:2] == ["-m", "tests.http_server"]

    def _control(self, path: str) -> dict[str, Any]:
        with urllib.request.urlopen(self.url + path, timeout=10) as response:
            return json.load(response)

    def reset(self) -> None:
        if self.counts:
            self._control("/__reset__")

    def stats(self) -> dict[str, Any] | None:
        return self._control("/__stats__") if self.counts else None

#: server -> (title, how to start it, cases run on it)
SERVERS: dict[str, tuple[str, list[str], tuple[str, ...]]] = {
    "plain": ("`python -m http.server`", ["-m", "http.server", "0", "--bind", "127.0.0.1", "--directory", "{root}"],
              ("read", "read_objectstore")),
    "backlog5": ("{delay} ms, backlog 5", ["-m", "tests.http_server", "{root}", "--delay", "{delay}", "--backlog", "5"],
                 ("read",)),
    "backlog128": ("{delay} ms, backlog 128", ["-m", "tests.http_server", "{root}", "--delay", "{delay}", "--backlog", "128"],
                   ("read", "open_consolidated", "open_listed", "sharded")),
    "throttle16": ("{delay} ms, 503 + Retry-After above 16 in flight",
                   ["-m", "tests.http_server", "{root}", "--delay", "{delay}", "--backlog", "128", "--throttle", "16",
                    "--retry-after", "0"], ("read",)),
    "close5": ("{delay} ms, no keep-alive, backlog 5",
               ["-m", "tests.http_server", "{root}", "--delay", "{delay}", "--backlog", "5", "--no-keep-alive"], ("read",)),
    "close128": ("{delay} ms, no keep-alive, backlog 128",
                 ["-m", "tests.http_server", "{root}", "--delay", "{delay}", "--backlog", "128", "--no-keep-alive"],
                 ("read",)),
    "closethrottle16": ("{delay} ms, no keep-alive, 503 + Retry-After above 16 in flight",
                        ["-m", "tests.http_server", "{root}", "--delay", "{delay}", "--backlog", "128", "--throttle", "16",
                         "--retry-after", "0", "--no-keep-alive"], ("read",)),
    "s3": ("S3 (moto)", ["-m", "tests.s3_server"], ("read",)),
    "stalled": ("stalled (never answers)", ["-m", "tests.http_server", "{root}", "--stall"], ("stalled",)),
}  # fmt: skip
#: the issue's targets: zarrx / zarr-python at most this on the 256-chunk read
TARGETS: dict[Any, float] = {"plain": 1.0, "backlog5": 0.5, "backlog128": 0.25, "throttle16": 0.5, "close5": 0.5, "close128": 0.5,
           "closethrottle16": 0.5, ("plain", "read_objectstore"): 1.0}


def start_server(kind: str, root: Path, delay: float) -> Server:
    server = Server([argument.format(root=root, delay=delay) for argument in SERVERS[kind][1]])
    if kind == "s3":
        upload(root, server.url)
    return server


def case_title(case: str, sizes: Sizes) -> str:
    shape = "x".join(str(stop - start) for start, stop in sizes.region)
    return {
        "read": f"read {len(sizes.chunk_keys)} chunks",
        "read_objectstore": f"read {len(sizes.chunk_keys)} chunks through zarr-python's ObjectStore (obstore)",
        "open_consolidated": f"xarray open, {sizes.variables} variables, consolidated",
        "open_listed": f"xarray open, {sizes.variables} variables, not consolidated",
        "sharded": f"sharded region {shape}",
        "stalled": "read until the error",
    }[case]


# -- one measurement: a fresh process ------------------------------------------------------------
def worker(library: str, case: str, url: str, options: dict[str, Any], sizes: Sizes) -> dict[str, Any]:
    """Run in the fresh process: import, then time the open and the read."""
    import fsspec.implementations.http  # noqa: F401
    import numpy as np
    import s3fs  # noqa: F401
    import xarray as xr

    if library == FLOOR:
        return floor(url, sizes, options["concurrency"])
    xr.backends.list_engines()  # xarray imports every engine (zarrx's imports dask) on its first open
    if library == "zarrx":
        import zarrx
        import zarrx.xarray  # noqa: F401
        from zarrx import open_array as zarrx_open_array  # zarrx imports its API on first use: before the clock, as `import zarr`

        open_array = lambda path: zarrx_open_array(f"{url}/{path}", storage_options=options or None)  # noqa: E731
        engine = "zarrx"
    else:
        import zarr

        open_array = lambda path: zarr.open_array(f"{url}/{path}", mode="r", storage_options=options or None)  # noqa: E731
        engine = "zarr"
    region = tuple(slice(start, stop) for start, stop in sizes.region)

    def through_object_store():
        from obstore.store import HTTPStore
        from zarr.storage import ObjectStore

        store = ObjectStore(HTTPStore.from_url(url, client_options={"allow_http": True}), read_only=True)
        if library == "zarrx":
            return zarrx_open_array(store, "chunks.zarr")[...]
        return zarr.open_array(store, path="chunks.zarr", mode="r")[...]

    operations = {
        "read": lambda: open_array("chunks.zarr")[...],
        "read_objectstore": through_object_store,
        "stalled": lambda: open_array("chunks.zarr")[...],
        "sharded": lambda: open_array("sharded.zarr")[region],
        "open_consolidated": lambda: xr.open_dataset(f"{url}/variables_consolidated.zarr", engine=engine, consolidated=True),
        "open_listed": lambda: xr.open_dataset(f"{url}/variables.zarr", engine=engine, consolidated=False),
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        started = time.perf_counter()
        try:
            result = operations[case]()
        except Exception as error:  # noqa: BLE001 (the stalled case reports its error)
            return {"seconds": time.perf_counter() - started, "error": f"{type(error).__name__}: {error}"[:300]}
        seconds = time.perf_counter() - started
    if isinstance(result, xr.Dataset):
        digest = hashlib.sha1(repr(sorted(result.variables)).encode() + np.asarray(result["var007"]).tobytes()).hexdigest()
    else:
        digest = hashlib.sha1(np.ascontiguousarray(result).tobytes()).hexdigest()
    return {"seconds": seconds, "digest": digest}


def floor(url: str, sizes: Sizes, concurrency: int) -> dict[str, Any]:
    """zarr.json, then every chunk, with aiohttp: ``concurrency`` requests at once from the start,
    no decoding, no retries (a refused request counts in ``refused``)."""
    import asyncio

    import aiohttp

    statuses: list[int] = []

    async def run() -> int:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:
            slots = asyncio.Semaphore(concurrency)

            async def get(key: str) -> int:
                async with slots, session.get(f"{url}/chunks.zarr/{key}") as response:
                    statuses.append(response.status)
                    return len(await response.read())

            await get("zarr.json")
            return sum(await asyncio.gather(*(get(key) for key in sizes.chunk_keys)))

    started = time.perf_counter()
    received = asyncio.run(run())
    refused = sum(status != 200 for status in statuses)
    return {"seconds": time.perf_counter() - started, "bytes": received, "refused": refused}


@dataclass
class Result:
    seconds: list[float] = field(default_factory=list)
    digests: set[str] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)
    stats: dict[str, Any] | None = None
    #: requests the server refused the floor in its last run
    refused: int = 0

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)


def measure(library: str, case: str, server: Server, url: str, options: dict[str, Any], smoke: bool, wait: float) -> dict[str, Any]:
    """One fresh worker process; the server's counts of its requests."""
    server.reset()
    command = [sys.executable, __file__, "--worker", library, "--case", case, "--url", url,
               "--options", json.dumps(options)] + (["--smoke"] if smoke else [])  # fmt: skip
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=wait + 60, cwd=REPO)
    except subprocess.TimeoutExpired:
        return {"seconds": wait + 60, "error": "killed: no answer"}
    if done.returncode != 0:
        raise RuntimeError(f"{library} worker failed on {case}: {done.stderr[-3000:]}")
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    outcome["stats"] = server.stats()
    return outcome


def options_for(kind: str, library: str, endpoint: str, wait: float) -> dict[str, Any]:
    if library == FLOOR:
        return {"concurrency": FLOOR_CONCURRENCY[kind]}
    if kind == "s3":
        return {"endpoint_url": endpoint, **S3_CREDENTIALS}
    if kind == "stalled":
        if library == "zarrx":
            return {"zarrx_request_deadline": STALL_DEADLINE}
        return {"zarrx_give_up_after": wait}  # read by the worker: zarr-python has no such option
    return {}


def run_stalled(library: str, url: str, options: dict[str, Any], sizes: Sizes) -> dict[str, Any]:
    """The stalled case: zarr-python is given up on after ``zarrx_give_up_after`` seconds."""
    wait = options.pop("zarrx_give_up_after", None)
    if wait is None:
        return worker(library, "stalled", url, options, sizes)
    import threading

    answer: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: answer.update(worker(library, "stalled", url, options, sizes)), daemon=True)
    started = time.perf_counter()
    thread.start()
    thread.join(wait)
    return answer or {"seconds": time.perf_counter() - started, "error": f"no error after {wait:g} s (given up)"}


def title(kind: str, delay: float) -> str:
    return SERVERS[kind][0].format(delay=f"{delay * 1000:g}")


def _cell(result: Result) -> str:
    text = f"{result.median * 1000:.0f} ms"
    if result.errors:
        text += f" ({result.errors[-1][:60]}…)"
    stats = result.stats
    if stats and stats["requests"]:
        refused = stats.get("statuses", {}).get("503", 0)
        text += f", {stats['requests']} req, ≤{stats['max_in_flight']} at once{f', {refused} × 503' if refused else ''}"
    return text


def _floor_cell(floor: Result, peer: Result) -> str:
    """The floor's median, its ratio to zarr-python (the best ratio this machine allows) and the
    requests the server refused it in the last run."""
    refused = f", {floor.refused} × 503" if floor.refused else ""
    return f"{floor.median * 1000:.0f} ms ({floor.median / peer.median:.2f}{refused})"


def table(results: dict[tuple[str, str], dict[str, Result]], sizes: Sizes, delay: float, rounds: int) -> str:
    versions = f"zarrx {importlib.metadata.version('zarrx')}, zarr-python {importlib.metadata.version('zarr')}"
    lines = [
        f"Servers on 127.0.0.1, every measurement a fresh process ({versions}); median of {rounds} interleaved "
        f"rounds; the 20 ms servers add {delay * 1000:g} ms to every request; requests of the last run, most "
        f"in flight at once, 503s answered; floor: aiohttp at the server's best level known in advance "
        f"({', '.join(f'{n} at once on {title(k, delay)}' for k, n in FLOOR_CONCURRENCY.items())}), no decoding.",
        "",
        "| server | case | zarrx | zarr-python | zarrx / zarr-python | target | floor |",
        "|---|---|---|---|---|---|---|",
    ]
    for (kind, case), by_library in results.items():
        ratio = by_library["zarrx"].median / by_library["zarr-python"].median
        target = TARGETS.get(kind if case == "read" else (kind, case))
        verdict = "" if target is None else (f"≤ {target:g}: met" if ratio <= target else f"≤ {target:g}: missed")
        floor_cell = _floor_cell(by_library[FLOOR], by_library["zarr-python"]) if FLOOR in by_library else ""
        lines.append(
            f"| {title(kind, delay)} | {case_title(case, sizes)} | {_cell(by_library['zarrx'])} | "
            f"{_cell(by_library['zarr-python'])} | {ratio:.2f} | {verdict} | {floor_cell} |"
        )
    return "\n".join(lines)


def run_case(kind: str, case: str, server: Server, rounds: int, smoke: bool, wait: float) -> dict[str, Result]:
    """Every library, ``rounds`` times each, interleaved; checks they read the same values."""
    # a floor only where a fixed level is the fastest way: on small backlogs it waits for TCP's
    # retransmissions (seconds to minutes), and it does not read S3
    libraries = LIBRARIES + ((FLOOR,) if case == "read" and kind in FLOOR_CONCURRENCY else ())
    by_library = {library: Result() for library in libraries}
    url = f"s3://{BUCKET}" if kind == "s3" else server.url
    for round_number in range(rounds):
        for library in libraries if round_number % 2 == 0 else libraries[::-1]:
            outcome = measure(library, case, server, url, options_for(kind, library, server.url, wait), smoke, wait)
            result = by_library[library]
            result.seconds.append(outcome["seconds"])
            result.stats = outcome.get("stats")
            result.refused = outcome.get("refused", 0)
            if "error" in outcome:
                result.errors.append(outcome["error"])
            elif "digest" in outcome:
                result.digests.add(outcome["digest"])
            print(f"{kind:<12} {case:<18} {library:<12} {outcome['seconds'] * 1000:8.1f} ms"
                  f"{'  ' + outcome['error'][:100] if 'error' in outcome else ''}", flush=True)  # fmt: skip
    if case != "stalled":
        failed = [library for library, result in by_library.items() if result.errors]
        digests = set().union(*(by_library[library].digests for library in LIBRARIES))
        if failed or len(digests) != 1:
            raise SystemExit(f"{kind} {case}: results differ or failed: {failed} {by_library}")
    return by_library


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, a 2 ms delay, one round (for CI)")
    parser.add_argument("--delay", type=float, default=None, help="seconds added to every request (default 0.02)")
    parser.add_argument("--rounds", type=int, default=None, help="fresh processes per library and case (default 3)")
    parser.add_argument("--servers", default=",".join(SERVERS), help=f"some of {','.join(SERVERS)}")
    parser.add_argument("--stall-wait", type=float, default=None, help="seconds to wait for zarr-python on the stalled server")
    parser.add_argument("--output", type=Path, default=None, help="also write the table (Markdown) here")
    parser.add_argument("--worker", choices=(*LIBRARIES, FLOOR), help=argparse.SUPPRESS)
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--options", default="{}", help=argparse.SUPPRESS)
    arguments = parser.parse_args(argv)
    sizes = SMOKE if arguments.smoke else FULL
    if arguments.worker:
        options = json.loads(arguments.options)
        if arguments.case == "stalled":
            outcome = run_stalled(arguments.worker, arguments.url, options, sizes)
        else:
            outcome = worker(arguments.worker, arguments.case, arguments.url, options, sizes)
        print(json.dumps(outcome), flush=True)
        os._exit(0)  # a stalled read may leave threads waiting
    delay = arguments.delay if arguments.delay is not None else (0.002 if arguments.smoke else 0.02)
    rounds = arguments.rounds or (1 if arguments.smoke else 3)
    wait = arguments.stall_wait if arguments.stall_wait is not None else (3.0 if arguments.smoke else 15.0)
    kinds = [kind.strip() for kind in arguments.servers.split(",") if kind.strip()]
    unknown = sorted(set(kinds) - set(SERVERS))
    if unknown:
        parser.error(f"unknown servers {unknown}; choose from {', '.join(SERVERS)}")

    results: dict[tuple[str, str], dict[str, Result]] = {}
    with tempfile.TemporaryDirectory(prefix="zarrx-bench-latency-") as folder:
        root = Path(folder)
        write_data(root, sizes)
        for kind in kinds:
            server = start_server(kind, root, delay)
            try:
                for case in SERVERS[kind][2]:
                    results[(kind, case)] = run_case(kind, case, server, rounds, arguments.smoke, wait)
            finally:
                server.close()
    text = table(results, sizes, delay, rounds)
    print()
    print(text)
    if arguments.output is not None:
        arguments.output.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
