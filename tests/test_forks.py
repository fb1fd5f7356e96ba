"""Arrays opened before a fork are read in the forked processes, or refused clearly -- never a hang.

A common pattern: a dataset opened at the top of a script, then ``multiprocessing.Pool().map(...)``
(which forks on Linux) reading parts of it in each worker. The workers inherit the opened stores
as objects, not by pickling. Before, over HTTP and S3 (fsspec) each worker failed with fsspec's
bare ``RuntimeError: This class is not fork-safe``; through zarr-python's ``LocalStore`` it waited
forever on zarr-python's event loop of the parent; through obstore it waited forever on a
runtime whose threads the fork did not copy. Now fsspec's file systems and zarr-python's loop are
made again in the worker, and obstore's (and Icechunk's) requests, which cannot be, are a
``StoreError`` saying how to start the workers instead.

Each case runs in a fresh interpreter (so no earlier test has used obstore there), against real
servers started here: a ``tests.http_server`` and moto's S3 server.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import s3fs

import zarrx
from tests.http_server import serve
from tests.s3_server import serve_s3

ROOT = Path(__file__).resolve().parents[1]

#: opens the arrays named in argv[4:] and reads each in this process, then in a forked worker
#: (a pool of one, 60 s at most); prints {"parent"|"worker": {name: sum or "module.Error: text"}}
SCRIPT = r"""
import json, multiprocessing, sys, warnings
warnings.simplefilter("ignore")
import numpy as np, zarr, zarrx
folder, http, s3, *names = sys.argv[1:]
options = {"endpoint_url": s3, "key": "k", "secret": "s"}

def obstore_s3():
    from obstore.store import S3Store
    return S3Store("forks", endpoint=s3, access_key_id="k", secret_access_key="s", region="us-east-1",
                   client_options={"allow_http": True})

OPEN = {
    "local": lambda: zarrx.open_array(folder + "/a.zarr"),
    "http": lambda: zarrx.open_array(http + "/a.zarr"),
    "s3fs": lambda: zarrx.open_array("s3://forks/a.zarr", storage_options={**options, "zarrx_backend": "fsspec"}),
    "zarr LocalStore": lambda: zarrx.open_array(zarr.storage.LocalStore(folder + "/a.zarr")),
    "obstore": lambda: zarrx.open_array("s3://forks/a.zarr", storage_options={**options, "zarrx_backend": "obstore"}),
    "zarr ObjectStore": lambda: zarrx.open_array(zarr.storage.ObjectStore(obstore_s3(), read_only=True), "a.zarr"),
}
ARRAYS = {name: OPEN[name]() for name in names}

def read(name):
    try:
        return float(ARRAYS[name][:].sum())
    except Exception as error:
        return f"{type(error).__module__}.{type(error).__name__}: {error}"

if __name__ == "__main__":
    results = {"parent": {name: read(name) for name in ARRAYS}}
    with multiprocessing.get_context("fork").Pool(1) as pool:
        results["worker"] = dict(zip(ARRAYS, pool.map_async(read, list(ARRAYS)).get(timeout=60)))
    print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    folder = tmp_path_factory.mktemp("forks")
    zarrx.create_array(folder / "a.zarr", shape=(100,), chunks=(10,), dtype="f8")[:] = np.arange(100.0)
    with serve(folder) as http, serve_s3() as s3:
        options = {"endpoint_url": s3.url, "key": "k", "secret": "s"}
        s3fs.S3FileSystem(skip_instance_cache=True, **options).mkdir("forks")
        zarrx.create_array("s3://forks/a.zarr", shape=(100,), chunks=(10,), dtype="f8", storage_options=options)[:] = (
            np.arange(100.0)
        )
        yield str(folder), http.url, s3.url


def _run(servers, *names: str) -> dict:
    done = subprocess.run([sys.executable, "-c", SCRIPT, *servers, *names], capture_output=True, text=True,
                          timeout=180, cwd=ROOT)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_stores_used_before_a_fork_are_read_in_the_forked_worker(servers):
    names = ["local", "http", "s3fs", "zarr LocalStore"]
    results = _run(servers, *names)
    assert results["parent"] == {name: 4950.0 for name in names}
    assert results["worker"] == {name: 4950.0 for name in names}


def test_obstore_used_before_a_fork_is_a_clear_error_in_the_worker_not_a_hang(servers):
    results = _run(servers, "obstore", "zarr ObjectStore")
    assert results["parent"] == {"obstore": 4950.0, "zarr ObjectStore": 4950.0}
    for name in ("obstore", "zarr ObjectStore"):
        outcome = results["worker"][name]
        assert outcome.startswith("zarrx.errors.StoreError: cannot read or write"), outcome
        assert "forked from process" in outcome and "'spawn'" in outcome and "zarrx_backend" in outcome
