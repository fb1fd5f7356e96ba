"""Many processes, one hierarchy: metadata updates from concurrent processes never lose each other.

A pipeline of independent jobs: 4 processes each create and write 10 arrays in one consolidated
group at once, 3 rounds, setting an attribute of each; meanwhile one of them appends to a shared
array whose attributes the others set, and each sets an attribute of the group. Every array must
be visible through the group as opened (its consolidated metadata), and every value, append and
attribute kept:

* on a local folder, where updates run under an advisory lock on the store's root folder;
* on moto's S3 server, which honours ``If-Match`` / ``If-None-Match`` on ``PutObject``, where
  each consolidated document is rewritten only over the version read (one round: S3 requests
  are slow);
* on a store offering neither (the local folder with its lock hidden), copies may be lost --
  and then ``zarrx verify`` names every member the consolidated copy misses.

The processes come from one spawned pool per module (4 workers, started once); each round they
start together at a given instant.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import time
import uuid

import numpy as np
import pytest
import s3fs

import zarrx
from zarrx.storage import LocalStore, WrapperStore
from zarrx.storage.metadata_updates import LOCK_NAME

from tests.s3_server import serve_s3

PROCESSES, ARRAYS, ROUNDS = 4, 10, 3


class WithoutLock(WrapperStore):
    """A local folder that hides its metadata lock: a store with neither ability."""

    locks_metadata = False

    def lock_metadata(self):
        return contextlib.nullcontext()


def _store(target: str, mode: str, storage_options: dict | None):
    if mode == "nolock":
        return WithoutLock(LocalStore(target))
    return zarrx.storage.make_store(target, mode="a", storage_options=storage_options)


def create_and_write(target: str, worker: int, start_at: float, mode: str, storage_options: dict | None) -> list[str]:
    """One job: create and write ARRAYS arrays in the group at ``target``, starting at ``start_at``."""
    if mode == "parent" and worker % 2:  # the same group, through a store rooted at its parent folder
        group = zarrx.open_group(LocalStore(os.path.dirname(target)), os.path.basename(target), mode="a")
    else:
        group = zarrx.open_group(_store(target, mode, storage_options), mode="a")
    shared = group["shared"]  # one array: worker 0 appends to it, the others set its attributes
    time.sleep(max(0.0, start_at - time.time()))
    names = []
    for index in range(ARRAYS):
        name = f"p{worker}_{index}"
        array = group.create_array(name, shape=(8,), chunks=(4,), dtype="int32", fill_value=-1)
        array[:] = np.arange(8, dtype="int32") + 100 * worker + index
        array.attrs["job"] = worker  # an attribute update too: another read-modify-write
        if worker == 0:
            shared.append(np.array([index], dtype="int32"))
        else:
            shared.attrs[f"w{worker}_{index}"] = index
        names.append(name)
    group.attrs[f"job{worker}"] = "done"  # the group's own document, which holds the consolidated copies
    return names


@pytest.fixture(scope="module")
def pool():
    with multiprocessing.get_context("spawn").Pool(PROCESSES) as workers:
        workers.map(time.sleep, [0] * PROCESSES)  # started and importing before the first round
        yield workers


def _round(pool, target: str, mode: str = "local", storage_options: dict | None = None) -> list[str]:
    store = _store(target, mode, storage_options)
    zarrx.create_group(store, attributes={"title": "jobs"}).create_array("shared", shape=(0,), chunks=(4,), dtype="int32")
    zarrx.consolidate_metadata(store)
    start_at = time.time() + 0.3
    jobs = [(target, worker, start_at, mode, storage_options) for worker in range(PROCESSES)]
    return sorted(name for names in pool.starmap(create_and_write, jobs) for name in names)


def _visible(target: str, storage_options: dict | None = None) -> list[str]:
    """The arrays the group shows when opened as xarray opens it (its consolidated metadata)."""
    group = zarrx.open_group(target, storage_options=storage_options)
    assert group.is_consolidated
    return sorted(name for name, _ in group.arrays() if name != "shared")


def _check_values(target: str, names: list[str], storage_options: dict | None = None) -> None:
    """Every array's values and attribute; the shared array appended to by one process while the
    others set its attributes; the group's attributes set by each process (both views)."""
    for group in (zarrx.open_group(target, storage_options=storage_options), zarrx.open_group(target, mode="r+", storage_options=storage_options)):
        shared = group["shared"]
        np.testing.assert_array_equal(shared[:], np.arange(ARRAYS))
        assert {f"w{worker}_{index}" for worker in range(1, PROCESSES) for index in range(ARRAYS)} == set(shared.attrs)
        assert dict(group.attrs) == {"title": "jobs", **{f"job{worker}": "done" for worker in range(PROCESSES)}}
    group = zarrx.open_group(target, storage_options=storage_options)
    for name in names:
        worker, index = (int(part) for part in name[1:].split("_"))
        np.testing.assert_array_equal(group[name][:], np.arange(8) + 100 * worker + index)
        assert group[name].attrs["job"] == worker


def test_four_processes_creating_arrays_in_one_local_group_lose_none(pool, tmp_path):
    for round_ in range(ROUNDS):
        target = str(tmp_path / f"round{round_}.zarr")
        written = _round(pool, target)
        assert len(written) == PROCESSES * ARRAYS
        assert _visible(target) == written, f"round {round_}: {len(_visible(target))} of {len(written)} visible"
        _check_values(target, written)
        report = zarrx.verify(target)
        assert report.ok and not report.unknown, str(report)
        # the lock is the root folder's: nothing added to the store
        assert not (tmp_path / f"round{round_}.zarr" / LOCK_NAME).exists()


def test_processes_whose_stores_are_rooted_at_the_group_and_at_its_parent_lose_none(pool, tmp_path):
    # one hierarchy, two roots: before, each root had its own lock and these writers lost members,
    # attributes and appends
    (tmp_path / "data").mkdir()
    for round_ in range(ROUNDS):
        target = str(tmp_path / "data" / f"round{round_}.zarr")
        written = _round(pool, target, mode="parent")
        assert _visible(target) == written, f"round {round_}: {len(_visible(target))} of {len(written)} visible"
        _check_values(target, written)


@pytest.mark.parametrize("backend", ["fsspec", "obstore"])  # s3fs's IfMatch, obstore's put modes
def test_four_processes_on_s3_with_conditional_writes_lose_none(pool, backend):
    with serve_s3() as s3:
        options = {"endpoint_url": s3.url, "key": "k", "secret": "s", "zarrx_backend": backend}
        bucket = f"jobs-{backend}"  # moto's buckets outlive its server in this process
        s3fs.S3FileSystem(skip_instance_cache=True, endpoint_url=s3.url, key="k", secret="s").mkdir(bucket)
        store = zarrx.storage.make_store(f"s3://{bucket}/x.zarr", mode="a", storage_options=options)
        assert store.conditional_writes and not store.locks_metadata
        target = f"s3://{bucket}/{uuid.uuid4().hex}.zarr"  # one round: each costs ~7 s of S3 requests
        written = _round(pool, target, "s3", options)
        visible = _visible(target, options)
        assert visible == written, f"{len(visible)} of {len(written)} visible"
        _check_values(target, written, options)
        refused = [request for request in s3.requests if request.method == "PUT" and request.status == 412]
        assert refused, "the processes never wrote one document at once: the test did not test"
        print(f"\nS3: {len(refused)} conditional writes refused (412) and retried")


def test_without_lock_or_conditional_writes_verify_names_every_missing_member(pool, tmp_path):
    lost = []
    for round_ in range(ROUNDS):
        target = str(tmp_path / f"round{round_}.zarr")
        written = _round(pool, target, "nolock")
        assert len(written) == PROCESSES * ARRAYS
        missing = sorted(set(written) - set(_visible(target)))
        named = sorted(
            problem.node.rsplit("/", 1)[-1] for problem in zarrx.verify(target).stale_consolidated
            if "missing from the consolidated metadata" in problem.error
        )  # fmt: skip
        assert named == missing
        lost.append(len(missing))
    print(f"\nwithout a lock: {lost} of {PROCESSES * ARRAYS} arrays missing from the consolidated metadata per round")


def test_verify_names_each_member_a_stale_consolidated_copy_misses(tmp_path):
    # what a lost update leaves: a consolidated document rewritten from a version before others' members
    target = tmp_path / "stale.zarr"
    root = zarrx.create_group(str(target))
    root.create_array("kept", shape=(2,), dtype="int8")
    zarrx.consolidate_metadata(str(target))
    before = (target / "zarr.json").read_bytes()
    for name in ("late_a", "late_b", "sub/late_c"):
        root.create_array(name, shape=(2,), dtype="int8")
    (target / "zarr.json").write_bytes(before)
    assert "late_a" not in json.loads(before)["consolidated_metadata"]["metadata"]
    report = zarrx.verify(str(target))
    assert not report.ok
    named = sorted(problem.node for problem in report.stale_consolidated if "missing from the consolidated" in problem.error)
    assert named == ["/late_a", "/late_b", "/sub", "/sub/late_c"]
    assert "late_a" in str(report) and "zarrx consolidate" in str(report)
    zarrx.consolidate_metadata(str(target))
    assert zarrx.verify(str(target)).ok


def test_the_lock_file_of_file_systems_that_cannot_lock_folders_is_never_listed_nor_deleted(tmp_path):
    # on NFS the lock is a file in the root folder: it must stay invisible, and stay put when the
    # whole store is replaced (a new file would let two processes hold "the" lock at once)
    target = tmp_path / "nfs-like.zarr"
    zarrx.create_array(str(target), shape=(4,), chunks=(2,), dtype="int8")[:] = 1
    lock = target / LOCK_NAME
    lock.write_bytes(b"")
    inode = lock.stat().st_ino
    store = LocalStore(str(target))
    assert LOCK_NAME not in store.list_dir("") and LOCK_NAME not in list(store.list_prefix(""))
    assert zarrx.verify(str(target)).unknown == []
    zarrx.create_group(str(target), overwrite=True)
    assert store.list_dir("") == ["zarr.json"] and lock.stat().st_ino == inode
    assert LocalStore(str(target / "sub")).list_dir("") == []  # only the root's lock file is hidden
