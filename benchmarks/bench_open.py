"""Opening (and writing) hierarchies on high-latency stores: round trips, zarrx beside engine="zarr".

The stores are written by xarray's own zarr engine (zarr-python), in a temporary folder:

* ``tree N``: a DataTree of N groups below the root, each 3 variables (time, x) + 2 coordinates
  (``time``, ``x``), consolidated or not (issue 32's shape is N = 40);
* ``dataset``: one Dataset of 100 variables + 4 coordinates, consolidated.

Each store is opened as a user would, ``xr.open_datatree(url, engine=..., chunks={})`` (or
``open_dataset``), from the folder itself, over :mod:`tests.http_server` in a process of its own
adding ``--delay`` (20 ms) to every request (threaded, HTTP/1.1 keep-alive, backlog 128), and from
moto's S3 server (:mod:`tests.s3_server`, no added delay). Every open runs in a **fresh process**
(the libraries' imports done before the clock starts, and the full garbage collection they leave
owed: an open that tips it pays 60-70 ms that a smaller one does not; no warm connections, no
learned concurrency), the best of ``--repeat`` runs (default 2), libraries interleaved.

Reported per open: seconds; for zarrx the time it waited for the store and the **sequential
request rounds** it made, counted by :class:`zarrx.storage.MetricsStore` (``summary().busy_seconds``,
``summary().rounds``) and its requests; and for both
libraries over HTTP the latency's cost in round trips, ``(seconds - local seconds) / delay``
(what issue 32 measures) -- or, with ``--where`` including ``http0`` (the same server adding no
delay), ``(seconds - seconds at 0 ms) / delay``, which leaves out the client's and the
server's CPU time per request (on a loaded machine tens of milliseconds for a batch of 80). With
``plain``, the stores are also opened from exactly ``python -m http.server`` (no added delay;
HTTP/1.0, a connection per request, a listen backlog of 5: what trees without consolidated
metadata are most often served from). The **write** case writes the 40-group tree (NumPy-backed) with
``dt.zarrx.to_zarr`` and with ``DataTree.to_zarr`` (engine="zarr"), consolidated, to a fresh
folder and to the S3 server.

Usage::

    python benchmarks/bench_open.py                       # 10, 40 and 200 groups; local, HTTP, S3
    python benchmarks/bench_open.py --groups 40 --where local,http
    python benchmarks/bench_open.py --groups 40 --where local,plain
    python benchmarks/bench_open.py --output table.md
    python benchmarks/bench_open.py --smoke               # 3 groups, 2 ms, local and HTTP: CI
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # the servers of the test suite

from tests.http_server import PlainServer, ServerProcess  # noqa: E402

LIBRARIES = ("zarrx", "zarr")
#: a library not measured (``--libraries``)
MISSING: dict[str, Any] = {}
BUCKET = "bench"
S3_CREDENTIALS = {"key": "bench", "secret": "bench-secret"}
WHERE = ("local", "http0", "http", "plain", "s3")


# -- the data ----------------------------------------------------------------------------------------
def make_tree(groups: int) -> Any:
    import numpy as np
    import xarray as xr

    rng = np.random.default_rng(0)
    nodes = {"/": xr.Dataset(attrs={"title": f"{groups} groups"})}
    for g in range(groups):
        nodes[f"/g{g:03d}"] = xr.Dataset(
            {f"v{k}": (("time", "x"), rng.random((24, 16), dtype="float32")) for k in range(3)},
            coords={"time": np.arange(24), "x": np.linspace(0, 1, 16)},
        )
    return xr.DataTree.from_dict(nodes)


def make_dataset() -> Any:
    import numpy as np
    import xarray as xr

    rng = np.random.default_rng(1)
    return xr.Dataset(
        {f"var{k:03d}": (("time", "lat", "lon"), rng.random((8, 6, 12), dtype="float32")) for k in range(100)},
        coords={"time": np.arange(8), "lat": np.linspace(-60, 60, 6), "lon": np.linspace(0, 330, 12), "level": [1000]},
    )


def stores_for(groups: list[int]) -> dict[str, tuple[str, bool]]:
    """store name -> (kind, consolidated)"""
    names: dict[str, tuple[str, bool]] = {}
    for n in groups:
        names[f"tree{n}_consolidated.zarr"] = ("tree", True)
        names[f"tree{n}_listed.zarr"] = ("tree", False)
    names["dataset_consolidated.zarr"] = ("dataset", True)
    return names


def write_stores(root: Path, groups: list[int]) -> None:
    """Every store, written by xarray's zarr engine (zarr-python), Zarr v3."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr-python: consolidated metadata is not part of the v3 spec
        for n in groups:
            tree = make_tree(n)
            for consolidated in (True, False):
                name = f"tree{n}_{'consolidated' if consolidated else 'listed'}.zarr"
                tree.to_zarr(root / name, mode="w", consolidated=consolidated, zarr_format=3)
        make_dataset().to_zarr(root / "dataset_consolidated.zarr", mode="w", consolidated=True, zarr_format=3)


def upload(root: Path, endpoint: str) -> None:
    import s3fs

    fs = s3fs.S3FileSystem(endpoint_url=endpoint, skip_instance_cache=True, **S3_CREDENTIALS)
    fs.mkdir(BUCKET)
    for folder in sorted(root.iterdir()):
        fs.put(str(folder), f"{BUCKET}/{folder.name}", recursive=True)


# -- one measurement, in a fresh process -------------------------------------------------------------
def worker(library: str, operation: str, url: str, options: dict[str, Any], consolidated: bool, groups: int) -> dict[str, Any]:
    import fsspec.implementations.http  # noqa: F401
    import xarray as xr

    if options:
        import s3fs  # noqa: F401
    import dask.array  # noqa: F401 (chunks={}: both libraries' variables become dask arrays)

    xr.backends.list_engines()  # xarray imports every engine on its first open
    store: Any = url
    metrics = None
    if library == "zarrx":
        import zarrx.xarray  # noqa: F401
        import zarrx.xarray.store  # noqa: F401 (what the engine imports on its first open)
        import zarr  # noqa: F401 (zarrx's engine names codecs in zarr-python's terms: imported on first open)
        from zarrx.storage import MetricsStore, make_store

        mode = "w" if operation == "write" else "r"
        metrics = store = MetricsStore(make_store(url, mode=mode, storage_options=options or None))
    else:
        import zarr  # noqa: F401
        import zarr.storage  # noqa: F401
    kwargs = {"engine": library, "chunks": {}, "consolidated": consolidated}
    if library == "zarr" and options:
        kwargs["storage_options"] = options
    tree = make_tree(groups) if operation == "write" else None
    # the imports leave a full collection owed: paid before the clock, it does not land in one
    # open (of the local folder, say) and not in another (over HTTP, whose few more objects tip it)
    gc.collect()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        started = time.perf_counter()
        if operation == "open_tree":
            opened = xr.open_datatree(store, **kwargs)
            size = len(opened.groups)
        elif operation == "open_dataset":
            opened = xr.open_dataset(store, **kwargs)
            size = len(opened.variables)
        elif library == "zarrx":
            tree.zarrx.to_zarr(store, mode="w", consolidated=True)
            size = len(tree.groups)
        else:
            tree.to_zarr(url, mode="w", consolidated=True, zarr_format=3, storage_options=options or None)
            size = len(tree.groups)
        seconds = time.perf_counter() - started
    outcome: dict[str, Any] = {"seconds": seconds, "size": size}
    if metrics is not None:
        summary = metrics.summary()
        outcome.update(rounds=summary.rounds, requests=summary.requests, store_seconds=summary.busy_seconds)
    return outcome


def measure(library: str, operation: str, url: str, options: dict[str, Any], consolidated: bool, groups: int) -> dict[str, Any]:
    command = [sys.executable, __file__, "--worker", library, "--operation", operation, "--url", url,
               "--options", json.dumps(options), "--groups", str(groups)] + (["--consolidated"] if consolidated else [])  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=REPO)
    if done.returncode != 0:
        raise RuntimeError(f"{library} {operation} {url} failed: {done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def best(library: str, operation: str, url: str, options: dict[str, Any], consolidated: bool, groups: int, repeat: int) -> dict[str, Any]:
    runs = [measure(library, operation, url, options, consolidated, groups) for _ in range(repeat)]
    return min(runs, key=lambda run: run["seconds"])


# -- the table -----------------------------------------------------------------------------------------
def _title(name: str, kind: str, consolidated: bool) -> str:
    state = "consolidated" if consolidated else "not consolidated"
    if kind == "dataset":
        return f"Dataset, 100 variables + 4 coordinates, {state}"
    return f"DataTree, {name[4:].split('_')[0]} groups x (3 variables + 2 coordinates), {state}"


def table(results: dict[tuple[str, str, str], dict[str, Any]], names: dict[str, tuple[str, bool]], where: list[str], delay: float) -> str:
    base = "HTTP 0 ms" if "http0" in where else "local"
    lines = [
        f"| store (written by xarray) | where | zarrx s | zarrx waiting for the store s | zarrx rounds (counted) "
        f"| zarrx requests "
        f"| zarrx round trips ((s - {base}) / {delay * 1000:g} ms) | engine=\"zarr\" s | engine=\"zarr\" round trips |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, (kind, consolidated) in names.items():
        for place in where:
            ours, theirs = (results.get((name, place, library), MISSING) for library in LIBRARIES)
            if ours is MISSING and theirs is MISSING:
                continue
            trips = [_round_trips(results, name, library, delay) if place == "http" else "" for library in LIBRARIES]
            zarrx = (
                ["", "", "", ""] if ours is MISSING
                else [f"{ours['seconds']:.2f}", f"{ours['store_seconds']:.2f}", str(ours["rounds"]), str(ours["requests"])]
            )  # fmt: skip
            lines.append(
                f"| {_title(name, kind, consolidated)} | {place} | {' | '.join(zarrx)} | {trips[0]} | {_seconds(theirs)} "
                f"| {trips[1]} |"
            )
    return "\n".join(lines)


def _round_trips(results: dict[tuple[str, str, str], dict[str, Any]], name: str, library: str, delay: float) -> str:
    """``library``'s latency cost at ``delay`` in round trips, against its open at 0 ms (else local)."""
    run = results.get((name, "http", library))
    base = results.get((name, "http0", library)) or results.get((name, "local", library))
    return "" if run is None or base is None else f"{(run['seconds'] - base['seconds']) / delay:.0f}"


def _seconds(run: dict[str, Any]) -> str:
    return "" if run is MISSING else f"{run['seconds']:.2f}"


def write_table(results: dict[str, dict[str, Any]], groups: int) -> str:
    lines = [
        f"| write DataTree of {groups} groups, consolidated | zarrx s | zarrx rounds (counted) | zarrx requests "
        "| engine=\"zarr\" s |",
        "|---|---|---|---|---|",
    ]
    for place, runs in results.items():
        ours, theirs = runs.get("zarrx", MISSING), runs.get("zarr", MISSING)
        zarrx = "| | |" if ours is MISSING else f"{ours['seconds']:.2f} | {ours['rounds']} | {ours['requests']} |"
        lines.append(f"| {place} | {zarrx} {_seconds(theirs)} |")
    return "\n".join(lines)


# -- driving ---------------------------------------------------------------------------------------------
def run(
    groups: list[int], where: list[str], delay: float, repeat: int, write_groups: int, libraries: tuple[str, ...] = LIBRARIES
) -> str:
    names = stores_for(groups)
    results: dict[tuple[str, str, str], dict[str, Any]] = {}
    writes: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder) / "stores"
        root.mkdir()
        write_stores(root, groups)
        servers: dict[str, ServerProcess] = {}
        try:
            for place, added in (("http", delay), ("http0", 0.0)):
                if place in where:
                    servers[place] = ServerProcess(
                        ["-m", "tests.http_server", str(root), "--delay", str(added), "--backlog", "128"], cwd=REPO
                    )
            if "plain" in where:
                servers["plain"] = PlainServer(root)
            if "s3" in where:
                servers["s3"] = ServerProcess(["-m", "tests.s3_server"], cwd=REPO)
                upload(root, servers["s3"].url)
            locations = {
                "local": (lambda name: str(root / name), {}),
                "http": (lambda name: f"{servers['http'].url}/{name}", {}),
                "http0": (lambda name: f"{servers['http0'].url}/{name}", {}),
                "plain": (lambda name: f"{servers['plain'].url}/{name}", {}),
                "s3": (lambda name: f"s3://{BUCKET}/{name}", {"endpoint_url": servers["s3"].url, **S3_CREDENTIALS} if "s3" in servers else {}),
            }
            for name, (kind, consolidated) in names.items():
                operation = "open_tree" if kind == "tree" else "open_dataset"
                for place in where:
                    url_of, options = locations[place]
                    for library in libraries:  # interleaved: each sees the same machine load
                        results[(name, place, library)] = best(
                            library, operation, url_of(name), options, consolidated, 0, repeat
                        )
                    print(f"  {name} {place}: " + ", ".join(
                        f"{lib} {results[(name, place, lib)]['seconds']:.2f} s" for lib in libraries), file=sys.stderr)  # fmt: skip
            for place in [p for p in where if p in ("local", "s3")]:
                url_of, options = locations[place]
                writes[place] = {}
                for library in libraries:
                    runs = []
                    for _ in range(repeat):
                        target = f"written-{library}-{uuid.uuid4().hex[:8]}.zarr"
                        url = str(Path(folder) / target) if place == "local" else f"s3://{BUCKET}/{target}"
                        runs.append(measure(library, "write", url, options, True, write_groups))
                    writes[place][library] = min(runs, key=lambda r: r["seconds"])
        finally:
            for server in servers.values():
                server.close()
    report = table(results, names, where, delay) + "\n\n" + write_table(writes, write_groups)
    load = os.getloadavg()
    return report + f"\n\nBest of {repeat} fresh processes each; load average {load[0]:.1f}, {load[1]:.1f}, {load[2]:.1f}.\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="3 groups, 2 ms, local and HTTP, one run (CI)")
    parser.add_argument("--groups", default=None, help="tree sizes, comma-separated (default 10,40,200)")
    parser.add_argument("--where", default=None, help=f"comma-separated, of {','.join(WHERE)}")
    parser.add_argument("--delay", type=float, default=None, help="seconds the HTTP server adds (default 0.02)")
    parser.add_argument("--repeat", type=int, default=None, help="fresh processes per measurement (best of)")
    parser.add_argument("--output", default=None, help="also write the tables to this file")
    parser.add_argument("--libraries", default=",".join(LIBRARIES), help="which to measure (default both)")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--operation", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--url", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--options", default="{}", help=argparse.SUPPRESS)
    parser.add_argument("--consolidated", action="store_true", help=argparse.SUPPRESS)
    arguments = parser.parse_args(argv)
    if arguments.worker:
        groups = int(arguments.groups or 0)
        outcome = worker(arguments.worker, arguments.operation, arguments.url, json.loads(arguments.options),
                         arguments.consolidated, groups)  # fmt: skip
        print(json.dumps(outcome))
        return 0
    smoke = arguments.smoke
    groups = [int(g) for g in (arguments.groups or ("3" if smoke else "10,40,200")).split(",")]
    where = (arguments.where or ("local,http" if smoke else ",".join(WHERE))).split(",")
    delay = arguments.delay if arguments.delay is not None else (0.002 if smoke else 0.02)
    repeat = arguments.repeat or (1 if smoke else 2)
    libraries = tuple(arguments.libraries.split(","))
    report = run(groups, where, delay, repeat, write_groups=3 if smoke else 40, libraries=libraries)
    print(report)
    if arguments.output:
        Path(arguments.output).write_text(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
