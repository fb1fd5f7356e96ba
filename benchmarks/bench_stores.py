"""fsspec or obstore under zarrx, against zarr-python over obstore: which backend reads a URL faster.

The numbers behind zarrx's default backend per URL scheme
(:data:`zarrx.storage.obstore_urls.DEFAULT_BACKENDS`, ``docs/stack.md``). On the servers of the
test suite, started by this script on 127.0.0.1 in processes of their own:

=========================  ======================================================================
``python -m http.server``  exactly that: HTTP/1.0 (a connection per request), no byte ranges,
                           listen backlog 5
``S3 (moto)``              moto's S3 server (:mod:`tests.s3_server`)
``Azure (Azurite)``        Microsoft's emulator of Azure Blob Storage (:mod:`tests.azurite`, which
                           installs it with npm on first use); fsspec is adlfs there, the options
                           a connection string
=========================  ======================================================================

the case is **read 256 chunks**: open a (1024, 1024) float32 array in 64 x 64 chunks and read it
all, each way of reading it in a **fresh process** (imports before the clock, as in
``bench_latency.py``), ``--rounds`` (default 3) interleaved rounds, medians:

==========================  =========================================================================
way                         what
==========================  =========================================================================
``zarrx fsspec``            ``zarrx.open_array(url, storage_options={..., "zarrx_backend": "fsspec"})``
``zarrx obstore``           the same with ``"zarrx_backend": "obstore"``
``zarrx ObjectStore``       ``zarrx.open_array(zarr.storage.ObjectStore(<obstore store>))``
``zarr-python obstore``     ``zarr.open_array(zarr.storage.ObjectStore(S3Store / AzureStore / HTTPStore(...)))``
``zarr-python fsspec``      ``zarr.open_array(url, storage_options=...)`` (its own fsspec store)
==========================  =========================================================================

The table gives each way's median and its ratio to zarr-python + obstore, with the issue's
targets: zarrx by URL at most 0.9x on S3 and 1.0x on ``python -m http.server``; zarrx over
zarr-python's ``ObjectStore`` no slower than zarr-python's own on ``python -m http.server``.

Usage::

    python benchmarks/bench_stores.py                 # every server, 3 rounds
    python benchmarks/bench_stores.py --rounds 5 --output stores.md
    python benchmarks/bench_stores.py --smoke         # tiny sizes, one round: CI
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
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_latency import BUCKET, FULL, REPO, S3_CREDENTIALS, SMOKE, Sizes, start_server, write_data  # noqa: E402

WAYS = ("zarrx fsspec", "zarrx obstore", "zarrx ObjectStore", "zarr-python obstore", "zarr-python fsspec")
PEER = "zarr-python obstore"
SERVERS = {"plain": "`python -m http.server`", "s3": "S3 (moto)", "azure": "Azure (Azurite)"}
#: the container the Azure server holds the data in
CONTAINER = "bench"
#: (server, way) -> the issue's target for way / zarr-python obstore (zarrx ObjectStore: / zarr-python's own)
TARGETS = {("s3", "zarrx obstore"): 0.9, ("s3", "zarrx fsspec"): 0.9, ("plain", "zarrx obstore"): 1.0,
           ("plain", "zarrx fsspec"): 1.0, ("plain", "zarrx ObjectStore"): 1.0}  # fmt: skip


def obstore_store(kind: str, url: str, endpoint: str) -> Any:
    from obstore.store import AzureStore, HTTPStore, S3Store

    if kind == "azure":
        from tests.azurite import ACCOUNT, KEY

        return AzureStore(CONTAINER, endpoint=endpoint, account_name=ACCOUNT, account_key=KEY,
                          client_options={"allow_http": True})  # fmt: skip
    if kind == "s3":
        return S3Store(BUCKET, endpoint=endpoint, access_key_id=S3_CREDENTIALS["key"], region="us-east-1",
                       secret_access_key=S3_CREDENTIALS["secret"], client_options={"allow_http": True})  # fmt: skip
    return HTTPStore.from_url(url, client_options={"allow_http": True})


def worker(way: str, kind: str, url: str, endpoint: str) -> dict[str, Any]:
    """In the fresh process: import, then time the open and the read of every chunk."""
    import fsspec.implementations.http  # noqa: F401
    import numpy as np
    import obstore  # noqa: F401
    import s3fs  # noqa: F401
    import zarr

    import zarrx  # noqa: F401
    from zarrx import open_array as zarrx_open_array  # zarrx imports its API on first use: before the clock

    options, base = {}, url
    if kind == "s3":
        options, base = {"endpoint_url": endpoint, **S3_CREDENTIALS}, f"s3://{BUCKET}"
    elif kind == "azure":
        import adlfs  # noqa: F401

        from tests.azurite import Azurite

        options, base = {"connection_string": Azurite(endpoint).connection_string}, f"az://{CONTAINER}"
    operations = {
        "zarrx fsspec": lambda: zarrx_open_array(f"{base}/chunks.zarr", storage_options={**options, "zarrx_backend": "fsspec"}),
        "zarrx obstore": lambda: zarrx_open_array(f"{base}/chunks.zarr", storage_options={**options, "zarrx_backend": "obstore"}),
        "zarrx ObjectStore": lambda: zarrx_open_array(
            zarr.storage.ObjectStore(obstore_store(kind, url, endpoint), read_only=True), "chunks.zarr"),
        "zarr-python obstore": lambda: zarr.open_array(
            zarr.storage.ObjectStore(obstore_store(kind, url, endpoint), read_only=True), path="chunks.zarr", mode="r"),
        "zarr-python fsspec": lambda: zarr.open_array(f"{base}/chunks.zarr", mode="r", storage_options=options or None),
    }  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        started = time.perf_counter()
        try:
            values = operations[way]()[...]
        except Exception as error:  # noqa: BLE001 (reported in the table)
            return {"seconds": time.perf_counter() - started, "error": f"{type(error).__name__}: {error}"[:300]}
        seconds = time.perf_counter() - started
    return {"seconds": seconds, "digest": hashlib.sha1(np.ascontiguousarray(values).tobytes()).hexdigest()}


def measure(way: str, kind: str, url: str, endpoint: str, smoke: bool) -> dict[str, Any]:
    command = [sys.executable, __file__, "--worker", way, "--kind", kind, "--url", url, "--endpoint", endpoint]
    done = subprocess.run(command + (["--smoke"] if smoke else []), capture_output=True, text=True, timeout=300, cwd=REPO)
    if done.returncode != 0:
        raise RuntimeError(f"{way} worker failed on {kind}: {done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_server(kind: str, root: Path, rounds: int, smoke: bool) -> dict[str, list[dict[str, Any]]]:
    if kind == "azure":
        from tests.azurite import serve_azurite

        with serve_azurite() as azure:
            azure.container(CONTAINER)
            azure.filesystem().put(str(root / "chunks.zarr"), f"{CONTAINER}/chunks.zarr", recursive=True)
            return run_ways(kind, azure.url, rounds, smoke)
    server = start_server(kind, root, 0.0)
    try:
        return run_ways(kind, server.url, rounds, smoke)
    finally:
        server.close()


def run_ways(kind: str, url: str, rounds: int, smoke: bool) -> dict[str, list[dict[str, Any]]]:
    """Every way of reading, ``rounds`` times each, alternating the order; the values must agree."""
    outcomes: dict[str, list[dict[str, Any]]] = {way: [] for way in WAYS}
    for round_number in range(rounds):
        for way in WAYS if round_number % 2 == 0 else WAYS[::-1]:
            outcome = measure(way, kind, url, url, smoke)
            outcomes[way].append(outcome)
            error = outcome.get("error", "")[:100]
            print(f"{kind:<6} {way:<20} {outcome['seconds'] * 1000:8.1f} ms {error}", flush=True)
    digests = {o["digest"] for results in outcomes.values() for o in results if "digest" in o}
    if len(digests) > 1:
        raise SystemExit(f"{kind}: the ways read different values")
    return outcomes


def table(results: dict[str, dict[str, list[dict[str, Any]]]], sizes: Sizes, rounds: int) -> str:
    import importlib.metadata as metadata

    libraries = ("zarrx", "zarr", "obstore", "fsspec", "s3fs", "adlfs")
    versions = ", ".join(f"{name} {metadata.version(name)}" for name in libraries)
    lines = [
        f"Read {len(sizes.chunk_keys)} chunks, every measurement a fresh process ({versions}); median of {rounds} "
        f"interleaved rounds; load average {os.getloadavg()[0]:.1f} at the end. Ratio: to zarr-python + obstore "
        "(for zarrx ObjectStore: to zarr-python over the same ObjectStore).",
        "",
        "| server | " + " | ".join(WAYS) + " |",
        "|---|" + "---|" * len(WAYS),
    ]
    for kind, outcomes in results.items():
        peer = statistics.median(o["seconds"] for o in outcomes[PEER])
        cells = []
        for way in WAYS:
            median = statistics.median(o["seconds"] for o in outcomes[way])
            errors = [o["error"] for o in outcomes[way] if "error" in o]
            target = TARGETS.get((kind, way))
            verdict = "" if target is None else f", ≤ {target:g}: {'met' if median / peer <= target else 'missed'}"
            failed = f" ({len(errors)} failed: {errors[-1][:50]}…)" if errors else ""
            cells.append(f"{median * 1000:.0f} ms ({median / peer:.2f}{verdict}){failed}")
        lines.append(f"| {SERVERS[kind]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one round (for CI)")
    parser.add_argument("--rounds", type=int, default=None, help="fresh processes per way and server (default 3)")
    parser.add_argument("--servers", default=",".join(SERVERS), help=f"some of {','.join(SERVERS)}")
    parser.add_argument("--output", type=Path, default=None, help="also write the table (Markdown) here")
    parser.add_argument("--worker", choices=WAYS, help=argparse.SUPPRESS)
    parser.add_argument("--kind", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", help=argparse.SUPPRESS)
    arguments = parser.parse_args(argv)
    sizes = SMOKE if arguments.smoke else FULL
    if arguments.worker:
        print(json.dumps(worker(arguments.worker, arguments.kind, arguments.url, arguments.endpoint)), flush=True)
        os._exit(0)
    rounds = arguments.rounds or (1 if arguments.smoke else 3)
    kinds = [kind.strip() for kind in arguments.servers.split(",") if kind.strip()]
    if set(kinds) - set(SERVERS):
        parser.error(f"unknown servers {sorted(set(kinds) - set(SERVERS))}; choose from {', '.join(SERVERS)}")
    with tempfile.TemporaryDirectory(prefix="zarrx-bench-stores-") as folder:
        root = Path(folder)
        write_data(root, sizes)
        results = {kind: run_server(kind, root, rounds, arguments.smoke) for kind in kinds}
    text = table(results, sizes, rounds)
    print()
    print(text)
    if arguments.output is not None:
        arguments.output.write_text(text + "\n")
    failed = [(kind, way) for kind, outcomes in results.items() for way, runs in outcomes.items()
              if any("error" in o for o in runs)]  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
