"""Hostile and broken remote servers: every one ends in a clear error naming the key, in time, in
bounded memory -- never a hang, a crash or a silent wrong answer.

Servers that drip a byte every 0.5 s, stall, never answer, send 1 GiB for a 16-byte chunk,
redirect (or loop), and answer an HTML page with 200; moto's S3 server holding an object larger
than its key may hold, or answering late. All run on 127.0.0.1, started here.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("aiohttp")
s3fs = pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

import zarrx  # noqa: E402
from zarrx.errors import StoreError, StoreTimeoutError  # noqa: E402
from zarrx.storage import make_store  # noqa: E402
from tests.http_server import Drip, GzipBomb, HtmlPage, HugeBody, Redirect, Stall, serve, serve_silent  # noqa: E402
from tests.s3_server import serve_s3  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
#: a deadline short enough for the suite, and how late an error may come after it
DEADLINE = 1.5
SLACK = 1.5


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    small = zarrx.create_array(root / "small.zarr", shape=(4,), chunks=(4,), dtype="i4", compressors=None)
    small[:] = [1, 2, 3, 4]  # one chunk of exactly 16 bytes
    sharded = zarrx.create_array(root / "sharded.zarr", shape=(8, 8), chunks=(2, 2), shards=(4, 4), dtype="u1",
                                 compressors=None)  # fmt: skip
    sharded[:] = np.arange(64, dtype="u1").reshape(8, 8)
    (root / "moved").mkdir()
    for name in ("small.zarr", "sharded.zarr"):
        (root / "moved" / name).symlink_to(root / name)
    return root


def _fails_in_time(call, error_class, *words, within=DEADLINE + SLACK):
    started = time.perf_counter()
    with pytest.raises(error_class) as caught:
        call()
    elapsed = time.perf_counter() - started
    message = str(caught.value)
    for word in words:
        assert word in message, message
    assert elapsed < within, f"{elapsed:.1f} s: {message}"
    return message


# -- slow and silent servers: deadlines -----------------------------------------------------------
def test_a_server_dripping_a_chunk_ends_in_a_timeout_naming_the_key(folder):
    # one byte every 0.5 s: every read of the socket gets data, so only the request deadline ends it
    with serve(folder, behaviour=Drip(interval=0.5, size=16, paths="/c/")) as server:
        url = f"{server.url}/small.zarr"
        array = zarrx.open_array(url, storage_options={"zarrx_request_deadline": DEADLINE})
        message = _fails_in_time(lambda: array[:], StoreTimeoutError, "'c/0'", f"{url}/c/0", "zarrx_request_deadline")
        assert "1.5 s" in message


def test_a_server_dripping_metadata_ends_in_a_timeout_naming_the_document(folder):
    with serve(folder, behaviour=Drip(interval=0.5, size=200, paths="zarr.json")) as server:
        options = {"zarrx_request_deadline": DEADLINE}
        _fails_in_time(lambda: zarrx.open_array(f"{server.url}/small.zarr", storage_options=options),
                       StoreTimeoutError, "'zarr.json'")  # fmt: skip


def test_a_stalled_server_ends_in_a_timeout_within_the_read_timeout_and_its_retries(folder):
    with serve(folder, behaviour=Stall(paths="/c/")) as server:
        options = {"zarrx_timeout": 0.3, "zarrx_retries": 2}
        array = zarrx.open_array(f"{server.url}/small.zarr", storage_options=options)
        # three attempts of 0.3 s and two short backoffs
        _fails_in_time(lambda: array[:], StoreTimeoutError, "'c/0'", "zarrx_timeout", within=0.9 + 0.3 + SLACK)
        assert isinstance(StoreTimeoutError("x"), TimeoutError)


def test_a_stalled_server_ends_at_the_request_deadline(folder):
    with serve(folder, behaviour=Stall(paths="/c/")) as server:
        array = zarrx.open_array(f"{server.url}/small.zarr", storage_options={"zarrx_request_deadline": DEADLINE})
        _fails_in_time(lambda: array[:], StoreTimeoutError, "'c/0'", "request deadline")


def test_a_server_that_never_answers_ends_in_a_timeout_naming_the_key():
    with serve_silent() as url:  # connections are queued by the kernel and never accepted
        options = {"zarrx_request_deadline": DEADLINE}
        _fails_in_time(lambda: zarrx.open_array(f"{url}/x.zarr", storage_options=options), StoreTimeoutError,
                       "'zarr.json'", f"{url}/x.zarr/zarr.json")  # fmt: skip


def test_the_batch_deadline_bounds_a_batch_of_requests_that_each_keep_theirs(folder):
    many = zarrx.create_array(folder / "many.zarr", shape=(64,), chunks=(1,), dtype="u1", compressors=None)
    many[:] = 1
    with serve(folder, delay=0.3) as server:
        options = {"zarrx_batch_deadline": 1.0, "zarrx_max_concurrency": 2}
        array = zarrx.open_array(f"{server.url}/many.zarr", storage_options=options)
        # 64 requests of 0.3 s, two at a time: ~10 s, each well within its own deadline
        _fails_in_time(lambda: array[:], StoreTimeoutError, "zarrx_batch_deadline", within=1.0 + SLACK)


# -- bodies larger than the key may hold ---------------------------------------------------------
@pytest.mark.parametrize("content_length", [True, False], ids=["declared", "undeclared"])
def test_a_gigabyte_for_a_16_byte_chunk_is_refused_naming_the_key_and_url(folder, content_length):
    behaviour = HugeBody(size=2**30, content_length=content_length, paths="/c/")
    with serve(folder, behaviour=behaviour) as server:
        url = f"{server.url}/small.zarr"
        array = zarrx.open_array(url)
        message = _fails_in_time(lambda: array[:], StoreError, "'c/0'", f"{url}/c/0", "16 bytes", within=10)
        assert ("1073741824" in message) == content_length
        assert behaviour.sent < 2**30  # the rest was never read


def test_a_gigabyte_for_a_range_is_refused(folder):
    # a server ignoring Range (200 and everything) for a shard index of a few dozen bytes
    with serve(folder, behaviour=HugeBody(size=2**30, paths="/c/")) as server:
        array = zarrx.open_array(f"{server.url}/sharded.zarr")
        _fails_in_time(lambda: array[0:1, 0:1], StoreError, "'c/0/0'", "bytes the value may hold", within=10)


def test_a_gigabyte_of_metadata_is_refused_at_the_read_size_limit(folder):
    with serve(folder, behaviour=HugeBody(size=2**30, content_length=False, paths="zarr.json")) as server:
        options = {"zarrx_max_read_size": 2**20}
        message = _fails_in_time(lambda: zarrx.open_array(f"{server.url}/small.zarr", storage_options=options),
                                 StoreError, "'zarr.json'", "zarrx_max_read_size", within=10)  # fmt: skip
        assert "1048576" in message


_MEMORY_PROBE = """
import json, sys
import aiohttp, fsspec.implementations.http
import zarrx
from zarrx.errors import StoreError

def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024

before = status("VmRSS")
with open("/proc/self/clear_refs", "w") as reset:
    reset.write("5")  # the peak (VmHWM) starts again from here
try:
    zarrx.open_array(sys.argv[1], storage_options=json.loads(sys.argv[2]))[:]
    outcome = "read"
except StoreError as error:
    outcome = str(error)
print(json.dumps({"increase": status("VmHWM") - before, "outcome": outcome}))
"""


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="peak memory is measured through Linux's /proc")
@pytest.mark.parametrize(
    "behaviour, options, key",
    [
        (lambda: HugeBody(size=2**30, content_length=True, paths="/c/"), {}, "'c/0'"),
        (lambda: HugeBody(size=2**30, content_length=False, paths="/c/"), {}, "'c/0'"),
        # 1 MiB of gzip -- within the limit, as its Content-Length says -- that decompresses to 1 GiB
        (lambda: GzipBomb(size=2**30, paths="zarr.json"), {"zarrx_max_read_size": 4 * 2**20}, "'zarr.json'"),
    ],
    ids=["declared", "undeclared", "gzip"],
)
def test_peak_memory_on_a_gigabyte_body_stays_under_100_mb(folder, behaviour, options, key):
    with serve(folder, behaviour=behaviour()) as server:
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(_MEMORY_PROBE), f"{server.url}/small.zarr", json.dumps(options)],
            capture_output=True, text=True, timeout=120, cwd=REPO,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert key in result["outcome"], result
    assert result["increase"] < 100 * 2**20, result


# -- answers that are not the object --------------------------------------------------------------
def test_redirects_are_followed(folder):
    with serve(folder, behaviour=Redirect(prefix="/moved")) as server:
        assert zarrx.open_array(f"{server.url}/small.zarr")[:].tolist() == [1, 2, 3, 4]
        sharded = zarrx.open_array(f"{server.url}/sharded.zarr")
        np.testing.assert_array_equal(sharded[1:3, 2:7], np.arange(64).reshape(8, 8)[1:3, 2:7])
        assert all(r.path.startswith("/moved/") for r in server.requests if r.status in (200, 206))


def test_a_redirect_loop_ends_in_an_error_naming_the_key(folder):
    with serve(folder, behaviour=Redirect(loop=True, paths="/c/")) as server:
        array = zarrx.open_array(f"{server.url}/small.zarr")
        _fails_in_time(lambda: array[:], StoreError, "'c/0'", "redirect loop", within=5)
        assert server.count() <= 1 + 11  # the document, then the chunk and its 10 redirects


@pytest.mark.parametrize("paths, key", [("zarr.json", "'zarr.json'"), ("/c/", "'c/0'")])
def test_an_html_page_answered_with_200_is_refused_naming_the_key(folder, paths, key):
    with serve(folder, behaviour=HtmlPage(paths=paths)) as server:
        message = _fails_in_time(lambda: zarrx.open_array(f"{server.url}/small.zarr")[:], StoreError, key, "HTML",
                                 within=5)  # fmt: skip
        assert "200" in message


# -- S3 --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def s3():
    with serve_s3() as server:
        s3fs.S3FileSystem(endpoint_url=server.url, key="k", secret="s", skip_instance_cache=True).mkdir("hostile")
        yield server


def _s3(server, **extra):
    return {"endpoint_url": server.url, "key": "k", "secret": "s", **extra}


def test_an_s3_object_larger_than_its_key_may_hold_is_refused_before_its_body_is_read(s3):
    url = f"s3://hostile/{uuid.uuid4().hex}"
    array = zarrx.create_array(url, shape=(4,), chunks=(4,), dtype="i4", compressors=None, storage_options=_s3(s3))
    array[:] = 7
    make_store(url, mode="w", storage_options=_s3(s3)).set("c/0", bytes(2**22))  # 4 MiB where 16 bytes belong
    message = _fails_in_time(lambda: zarrx.open_array(url, storage_options=_s3(s3))[:], StoreError,
                             "'c/0'", f"{url}/c/0", "4194304", within=10)  # fmt: skip
    assert "ContentLength" in message or "Content-Length" in message


def test_a_late_s3_answer_ends_in_a_timeout_naming_the_key_for_reads_and_writes(s3):
    url = f"s3://hostile/{uuid.uuid4().hex}"
    array = zarrx.create_array(url, shape=(4,), chunks=(2,), dtype="i4", storage_options=_s3(s3))
    array[:] = 5
    options = _s3(s3, zarrx_request_deadline=DEADLINE, zarrx_retries=0)
    reader = zarrx.open_array(url, storage_options=options)
    writer = zarrx.open_array(url, mode="r+", storage_options=options)
    s3.delay = DEADLINE + 2
    try:
        _fails_in_time(lambda: reader[:], StoreTimeoutError, "'c/", f"{url}/c/", within=DEADLINE + SLACK)
        _fails_in_time(lambda: writer.__setitem__(slice(None), 6), StoreTimeoutError, "write", "'c/",
                       within=DEADLINE + SLACK)  # fmt: skip
    finally:
        s3.delay = 0.0
