"""Crash-safe conversion: an interrupted ``zarrx convert`` never looks complete, and running it
again ends exactly where an uninterrupted one does.

* ``zarrx convert`` runs in a subprocess and is SIGKILLed at random points of its writing,
  several times over the same destination (each rerun resumes, and is killed again); after
  every kill the destination must not verify OK, and must not open as a hierarchy; the last
  rerun must leave every key and byte of an uninterrupted convert, and nothing else (no
  mark, no temporary file).
* In process, a store fault stops a convert at a chosen chunk: the rerun copies only what is
  missing or damaged (each stored object is decoded first), a rerun with other settings is
  refused naming the destination as incomplete, and ``overwrite`` starts over.
* ``migrate_v2_to_v3`` stopped before its root document leaves a valid v2 hierarchy, and a
  rerun completes it.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numcodecs
import numpy as np
import pytest
import xarray as xr
import zarr

import zarrx
from zarrx.errors import ContainsGroupError, StoreError
from zarrx.storage import LocalStore
from zarrx.storage.local import is_temporary_name
from zarrx.testing import FaultyStore
from zarrx.tools.convert_job import JOB_KEY

from tests.counting import CountingStore

pytestmark = [
    pytest.mark.filterwarnings("ignore::zarr.errors.ZarrUserWarning"),
    pytest.mark.filterwarnings("ignore::RuntimeWarning"),
]

SCRIPT = Path(sys.executable).parent / "zarrx"
#: the convert under test: re-chunked, one array sharded by dimension name, recompressed
OPTIONS = ["--chunks", "64,64", "--shards", "t=256", "--compressor", "zstd:1", "--no-progress"]
KILLS = 5


def build_source(path: Path) -> None:
    """A consolidated v2 hierarchy of ~6 MiB in ~600 chunks: a float field, and integer counts below a group."""
    root = zarrx.create_group(str(path), zarr_format=2, attributes={"title": "crash test"})
    rng = np.random.default_rng(18)
    field = root.create_array("field", shape=(1024, 768), chunks=(64, 64), dtype="<f8", zarr_format=2,
                              compressors=numcodecs.Zlib(level=1), dimension_names=["y", "x"], fill_value=np.nan)  # fmt: skip
    field[:] = rng.normal(size=(1024, 768)).round(3)
    counts = root.create_array("sub/counts", shape=(2048, 256), chunks=(128, 64), dtype="<i4", zarr_format=2,
                               compressors=numcodecs.Blosc(), dimension_names=["t", "x"])  # fmt: skip
    counts[:1500] = rng.integers(0, 1000, (1500, 256))  # the rest stays the fill value: not stored
    zarrx.consolidate_metadata(str(path))


def convert_process(source: Path, target: Path) -> subprocess.Popen:
    return subprocess.Popen([str(SCRIPT), "convert", str(source), str(target), *OPTIONS],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip


def stored(path: Path) -> dict[str, bytes]:
    """Every key of a local store and its bytes."""
    store = LocalStore(str(path), read_only=True)
    return {key: store.get(key) for key in store.list_prefix("")}


def leftovers(path: Path) -> list[str]:
    return [name for _, _, files in os.walk(path) for name in files if is_temporary_name(name) or name == JOB_KEY]


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple[Path, dict[str, bytes], float]:
    """The source, what an uninterrupted convert writes, and how long its writing takes."""
    folder = tmp_path_factory.mktemp("crash")
    build_source(folder / "src.zarr")
    process = convert_process(folder / "src.zarr", folder / "ref.zarr")
    while not (folder / "ref.zarr" / JOB_KEY).exists() and process.poll() is None:
        time.sleep(0.002)
    started = time.perf_counter()
    assert process.wait(timeout=300) == 0, process.stderr.read()
    return folder / "src.zarr", stored(folder / "ref.zarr"), time.perf_counter() - started


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_a_killed_convert_never_verifies_ok_and_resumes_to_the_same_bytes(reference, tmp_path):
    source, expected, writing = reference
    assert len(expected) > 200 and zarrx.verify(str(source)).ok
    target = tmp_path / "dst.zarr"
    rng = random.Random(18)
    interrupted = 0
    for kill in range(KILLS):
        process = convert_process(source, target)
        while not (target / JOB_KEY).exists() and process.poll() is None:
            time.sleep(0.002)
        time.sleep(rng.uniform(0.0, writing))
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=60)
        report = zarrx.verify(str(target))
        if not (target / JOB_KEY).exists():
            # the kill came after the convert's last step (removing its mark): then it is whole
            assert report.ok and stored(target) == expected, str(report)
            continue
        interrupted += 1
        assert not report.ok and [problem.key for problem in report.incomplete] == [JOB_KEY], str(report)
        assert "INCOMPLETE" in str(report)
        if not (target / "zarr.json").exists():  # the root is written after every chunk
            with pytest.raises(FileNotFoundError):
                zarr.open_group(str(target), mode="r")
        else:  # killed while writing the metadata: every chunk is there already
            assert {key: value for key, value in stored(target).items() if "/c/" in key} == {
                key: value for key, value in expected.items() if "/c/" in key
            }
    assert interrupted >= KILLS - 1, f"only {interrupted} of {KILLS} kills hit a running convert"
    verified = subprocess.run([str(SCRIPT), "verify", str(target), "--no-progress"], capture_output=True, text=True)
    assert verified.returncode == 1 and "INCOMPLETE" in verified.stdout and JOB_KEY in verified.stdout
    # the last run resumes and completes: exactly the bytes of an uninterrupted convert
    process = convert_process(source, target)
    assert process.wait(timeout=300) == 0, process.stderr.read()
    assert stored(target) == expected
    assert leftovers(target) == []
    assert zarrx.verify(str(target)).ok and zarrx.open_group(str(target)).is_consolidated
    xr.testing.assert_identical(xr.open_dataset(target, engine="zarr", group="sub").load(),
                                xr.open_dataset(source, engine="zarr", group="sub").load())  # fmt: skip


def _objects(store: CountingStore) -> int:
    """Chunk and shard writes a store saw."""
    return len([key for key in store.writes if "/c/" in key])


def test_a_failed_convert_resumes_copying_only_what_is_missing_or_damaged(tmp_path):
    source = tmp_path / "src.zarr"
    root = zarrx.create_group(str(source), zarr_format=2)
    values = np.arange(64 * 48, dtype="<i4").reshape(64, 48)
    root.create_array("a", shape=(64, 48), chunks=(8, 8), dtype="<i4", zarr_format=2)[:] = values
    settings = dict(chunks=(8, 8), compressors="zstd", progress=False)
    zarrx.convert(str(source), str(tmp_path / "ref.zarr"), **settings)
    expected = stored(tmp_path / "ref.zarr")
    nobjects = 8 * 6

    faulty = FaultyStore(LocalStore(str(tmp_path / "dst.zarr")), fail_set=lambda key: key == "a/c/5/3")
    with pytest.raises(StoreError, match="a/c/5/3"):
        zarrx.convert(str(source), faulty, **settings)
    report = zarrx.verify(str(tmp_path / "dst.zarr"))
    assert not report.ok and report.incomplete and not (tmp_path / "dst.zarr" / "zarr.json").exists()
    chunks = sorted(key for key in stored(tmp_path / "dst.zarr") if "/c/" in key)
    written = len(chunks)
    assert 0 < written < nobjects
    damaged = tmp_path / "dst.zarr" / chunks[0]
    damaged.write_bytes(damaged.read_bytes()[:-3])  # a stored chunk damaged since: written again

    with pytest.raises(ContainsGroupError, match="is an incomplete convert .*interrupted.*--overwrite"):
        zarrx.convert(str(source), str(tmp_path / "dst.zarr"), chunks=(16, 16), progress=False)
    written = len([key for key in stored(tmp_path / "dst.zarr") if "/c/" in key])  # tasks running at the fault finished
    counting = CountingStore(LocalStore(str(tmp_path / "dst.zarr")))
    resumed = zarrx.convert(str(source), counting, **settings)
    assert _objects(counting) == nobjects - written + 1  # the missing ones and the damaged one
    assert stored(tmp_path / "dst.zarr") == expected and zarrx.verify(str(tmp_path / "dst.zarr")).ok
    np.testing.assert_array_equal(resumed["a"][:], values)

    # overwrite starts over: every object is written again
    again = CountingStore(LocalStore(str(tmp_path / "dst.zarr")))
    zarrx.convert(str(source), again, **settings, overwrite=True)
    assert _objects(again) == nobjects and stored(tmp_path / "dst.zarr") == expected


def test_a_non_empty_destination_is_refused_before_anything_is_written(tmp_path):
    source = zarrx.create_array(str(tmp_path / "src.zarr"), shape=(4,), dtype="<i2")
    source[:] = 1
    (tmp_path / "dst").mkdir()
    (tmp_path / "dst" / "notes.txt").write_text("mine")
    with pytest.raises(ContainsGroupError, match="is not empty .*notes.txt"):
        zarrx.convert(str(tmp_path / "src.zarr"), str(tmp_path / "dst"), progress=False)
    assert sorted(os.listdir(tmp_path / "dst")) == ["notes.txt"]


def test_an_interrupted_migration_leaves_valid_v2_and_a_rerun_completes_it(tmp_path):
    path = tmp_path / "v2.zarr"
    root = zarrx.create_group(str(path), zarr_format=2, attributes={"title": "t"})
    root.create_array("g/a", shape=(6,), chunks=(4,), dtype="<f4", zarr_format=2, fill_value=-1.0,
                      dimension_names=["x"])[:] = [1, -1, 2, 3, 4, 5]  # fmt: skip
    zarrx.consolidate_metadata(str(path))
    before = xr.open_dataset(path, engine="zarr", group="g").load()
    faulty = FaultyStore(LocalStore(str(path)), fail_set=lambda key: key == "zarr.json")
    with pytest.raises(StoreError, match="zarr.json"):
        zarrx.migrate_v2_to_v3(faulty)
    assert (path / "g" / "a" / "zarr.json").exists() and not (path / "zarr.json").exists()
    assert zarrx.open_group(str(path)).metadata.zarr_format == 2  # still a v2 hierarchy, and a valid one
    assert zarrx.verify(str(path)).ok
    xr.testing.assert_identical(xr.open_dataset(path, engine="zarr", group="g").load(), before)
    migrated = zarrx.migrate_v2_to_v3(str(path))  # the members' documents are its own: it completes
    assert migrated.metadata.zarr_format == 3 and zarrx.open_group(str(path), zarr_format=3).is_consolidated
    for engine in ("zarr", "zarrx"):
        xr.testing.assert_identical(xr.open_dataset(path, engine=engine, group="g", zarr_format=3).load(), before)
    with pytest.raises(ContainsGroupError, match="already exists"):
        zarrx.migrate_v2_to_v3(str(path))


def test_a_migration_refuses_members_it_would_not_write(tmp_path):
    path = tmp_path / "v2.zarr"
    zarrx.create_group(str(path), zarr_format=2).create_array("a", shape=(2,), dtype="<i2", zarr_format=2)
    (path / "a" / "zarr.json").write_text('{"zarr_format": 3, "node_type": "group"}')
    with pytest.raises(ContainsGroupError, match="a/zarr.json: a Zarr v3 document that this migration would not write"):
        zarrx.migrate_v2_to_v3(str(path))
    assert not (path / "zarr.json").exists()


class SlowWrites(FaultyStore):
    """Every chunk write but the failing one takes a while: a task is still writing when another fails."""

    def set(self, key, value):
        if "/c/" in key and key != "a/c/0/1":
            time.sleep(0.2)
        super().set(key, value)


def test_a_failed_convert_has_stopped_writing_when_it_raises(tmp_path):
    source = tmp_path / "src.zarr"
    root = zarrx.create_group(str(source))
    root.create_array("a", shape=(16, 32), chunks=(8, 8), dtype="<i4")[:] = np.arange(512, dtype="<i4").reshape(16, 32)
    target = SlowWrites(LocalStore(str(tmp_path / "dst.zarr")), fail_set=lambda key: key == "a/c/0/1")
    with pytest.raises(StoreError, match="a/c/0/1"):
        zarrx.convert(str(source), target, chunks=(8, 8), progress=False)
    written = sorted(key for key in stored(tmp_path / "dst.zarr") if "/c/" in key)
    time.sleep(0.5)  # a task still running after the error would store its chunk meanwhile
    assert sorted(key for key in stored(tmp_path / "dst.zarr") if "/c/" in key) == written
    assert "a/c/0/1" not in written
