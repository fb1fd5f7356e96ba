"""Processes writing parts of the same chunks (or shards) keep every value: of one machine to a
local folder, of any machine to S3.

A partial write reads the chunk, merges its values and stores the chunk whole. Threads of one
process are ordered by zarrx's in-process locks (tests/test_partial_write_threads.py); across
processes a store of local files locks each partial object in a lock file of the machine's
temporary folder (:func:`zarrx.storage.metadata_updates.object_file_locks`). Without those
locks, the writers here lose values in every run: each process's write reads chunks that another
process is about to store, and the later store drops the earlier one's values. The lock is the
object's, whichever store reaches it: through a store rooted at the folder's parent, through
zarr-python's stores of the folder (which zarrx reads and writes as its own), and, on a file
system other machines mount too, against their processes (a lock file in the store's folder).

On S3 (moto's server here; s3fs and obstore) a partial object is written only over the version
read (``If-Match`` on its ETag), read again and merged again when another process came first:
before, ``da.store(x, arr, lock=False)`` with blocks sharing chunks lost 1,000 to 3,000 of 60,000
values in most runs, through either library. So do writers through zarr-python's ``ObjectStore``
and ``FsspecStore``, which zarrx reads and writes as its own stores of the same objects.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import dask.array as da
import numpy as np
import pytest
import s3fs

import zarrx
from zarrx.errors import UsageError
from zarrx.storage import LocalStore
from zarrx.storage.metadata_updates import OBJECT_LOCK_NAME, SHARED_FILE_SYSTEMS, file_system_type, object_lock_file
from zarrx.storage.metadata_updates import shared_folder
from tests.s3_server import serve_s3

PROCESSES = 4
ROUNDS = 6
ROOT = Path(__file__).resolve().parents[1]

#: one writer process: waits for the start file, then each round writes every PROCESSES-th
#: element of the whole array (a partial write of every chunk) with that round's values
WRITER = r"""
import os, sys, tempfile, time, numpy as np, zarrx
path, name, number, count, rounds, start, way = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6]), *sys.argv[6:8]
if len(sys.argv) > 8:  # a temporary folder of its own (another machine's), or one that cannot be used
    tempfile.tempdir = sys.argv[8]
if way == "path":
    arr = zarrx.open_array(path, name, mode="r+")
elif way in ("parent", "grandparent"):  # the same chunks, keys of a store rooted one or two folders up
    parent, grandparent = os.path.dirname(path), os.path.dirname(os.path.dirname(path))
    root = parent if way == "parent" else grandparent
    arr = zarrx.open_array(root, os.path.relpath(path, root) + "/" + name, mode="r+")
elif way == "zarr ObjectStore S3":  # zarr-python's ObjectStore over obstore's S3Store: path is endpoint|bucket|prefix
    import obstore.store, zarr.storage
    endpoint, bucket, prefix = path.split("|")
    s3 = obstore.store.S3Store(bucket, prefix=prefix, endpoint=endpoint, access_key_id="k", secret_access_key="s",
                               region="us-east-1", client_options={"allow_http": True})
    arr = zarrx.open_array(zarr.storage.ObjectStore(s3), name, mode="r+")
elif way == "zarr FsspecStore S3":  # zarr-python's FsspecStore over s3fs: path is endpoint|bucket|prefix
    import zarr.storage
    endpoint, bucket, prefix = path.split("|")
    store = zarr.storage.FsspecStore.from_url(f"s3://{bucket}/{prefix}",
                                              storage_options={"endpoint_url": endpoint, "key": "k", "secret": "s"})
    arr = zarrx.open_array(store, name, mode="r+")
else:  # a zarr-python store of the same folder
    import obstore.store, zarr.storage
    store = {"zarr LocalStore": lambda: zarr.storage.LocalStore(path),
             "zarr ObjectStore": lambda: zarr.storage.ObjectStore(obstore.store.LocalStore(path)),
             "zarr FsspecStore": lambda: zarr.storage.FsspecStore.from_url("file://" + path)}[way]()
    arr = zarrx.open_array(store, name, mode="r+")
while not os.path.exists(start):
    time.sleep(0.001)
for round_number in range(rounds):
    selection = np.s_[number::count]
    arr[selection] = np.arange(arr.size, dtype=arr.dtype)[selection] + 1000 * (round_number + 1)
"""


def _race(
    path: Path | str, name: str, tmp_path: Path, *tempdirs: str, ways: tuple[str, ...] = ("path",), rounds: int = ROUNDS
) -> np.ndarray | None:
    """The array after PROCESSES writers raced (None when it is not a local folder), the n-th
    opening it the n-th of ``ways``, with the n-th of ``tempdirs`` as its temporary folder (round robin)."""
    start = tmp_path / f"start-{name}"
    children = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(path), name, str(number), str(PROCESSES), str(rounds),
                          str(start), ways[number % len(ways)], *tempdirs[number % max(1, len(tempdirs)):][:1]],
                         cwd=ROOT, stderr=subprocess.PIPE)  # fmt: skip
        for number in range(PROCESSES)
    ]
    time.sleep(1.0)  # the writers import zarrx and open the array, then wait for the start
    start.touch()
    for child in children:
        _, error = child.communicate(timeout=120)
        assert child.returncode == 0, error.decode()[-2000:]
    return zarrx.open_array(path, name)[...] if os.path.isdir(path) else None


@pytest.mark.parametrize("layout", ["chunks", "shards"])
def test_processes_writing_parts_of_the_same_chunks_keep_every_value(tmp_path, layout):
    path = tmp_path / "data.zarr"
    keywords = {"chunks": (8,)} if layout == "chunks" else {"chunks": (4,), "shards": (16,)}
    zarrx.create_array(LocalStore(path), layout, shape=(2048,), dtype="i8", fill_value=-1, **keywords)
    found = _race(path, layout, tmp_path)
    expected = np.arange(2048) + 1000 * ROUNDS
    lost = np.flatnonzero(found != expected)
    assert lost.size == 0, f"{lost.size} of {found.size} values lost, e.g. at {lost[:8].tolist()}: {found[lost[:8]]}"
    # the locks live in the machine's temporary folder: the store holds only the array
    assert os.path.realpath(object_lock_file()).startswith(os.path.realpath(tempfile.gettempdir()))
    assert os.path.exists(object_lock_file())
    assert sorted(os.listdir(path)) == [layout, "zarr.json"]


@pytest.mark.parametrize("ways", [
    ("path", "parent", "grandparent"), ("zarr LocalStore",),
    ("zarr ObjectStore", "path"), ("zarr FsspecStore", "parent"),
])  # fmt: skip
def test_writers_keep_every_value_whatever_store_or_root_each_opened_the_folder_with(tmp_path, ways):
    # an object is one file whichever store reaches it: writers locking it under another root's
    # name, or through a zarr-python store that zarrx did not lock, lost values in every run
    path = tmp_path / "data.zarr"
    zarrx.create_array(LocalStore(path), "chunks", shape=(128,), chunks=(8,), dtype="i8", fill_value=-1)
    found = _race(path, "chunks", tmp_path, ways=ways, rounds=100)  # few chunks, many rounds: many races
    lost = np.flatnonzero(found != np.arange(128) + 1000 * 100)
    assert lost.size == 0, f"{ways}: {lost.size} of {found.size} values lost, e.g. at {lost[:8].tolist()}"


def test_processes_of_machines_sharing_a_file_system_keep_every_value(tmp_path, monkeypatch):
    # two "machines": writers each with a temporary folder of its own (each machine has its own
    # /tmp), one store folder; on a network or cluster file system (ZARRX_OBJECT_LOCKS=auto, the
    # default, finds nfs, lustre, gpfs, ... in the mount table; "shared" here, on a local disk)
    # each partial write is also locked in the store's folder. With machine locks only they lose values.
    monkeypatch.setenv("ZARRX_OBJECT_LOCKS", "shared")
    path = tmp_path / "shared.zarr"
    zarrx.create_array(LocalStore(path), "chunks", shape=(128,), chunks=(8,), dtype="i8", fill_value=-1)
    machines = [tmp_path / "machine1", tmp_path / "machine2"]
    for folder in machines:
        folder.mkdir()
    found = _race(path, "chunks", tmp_path, *map(str, machines), rounds=100)
    lost = np.flatnonzero(found != np.arange(128) + 1000 * 100)
    assert lost.size == 0, f"{lost.size} of 128 values lost, e.g. at {lost[:8].tolist()}"
    assert (path / OBJECT_LOCK_NAME).exists() and sorted(LocalStore(path).list_dir("")) == ["chunks", "zarr.json"]


def test_the_file_system_of_a_folder_is_read_from_the_mount_table(tmp_path):
    table = tmp_path / "mountinfo"
    table.write_text(
        "36 35 98:0 / / rw - ext4 /dev/root rw\n"
        "40 36 0:50 / /home/me/my\\040data rw,relatime - nfs4 server:/export rw\n"
        "41 36 0:51 / /scratch rw - lustre 10.0.0.1@tcp:/fs rw\n"
        "42 41 0:52 / /scratch/local rw - tmpfs tmpfs rw\n"
    )
    found = {path: file_system_type(path, str(table)) for path in
             ["/home/me/my data/a.zarr", "/home/me/my database", "/scratch/u/a.zarr", "/scratch/local/a", "/scratchy"]}
    assert found == {"/home/me/my data/a.zarr": "nfs4", "/home/me/my database": "ext4", "/scratch/u/a.zarr": "lustre",
                     "/scratch/local/a": "tmpfs", "/scratchy": "ext4"}  # fmt: skip
    assert {"nfs4", "lustre", "gpfs"} <= SHARED_FILE_SYSTEMS and "ext4" not in SHARED_FILE_SYSTEMS
    assert not shared_folder(str(tmp_path))  # this machine's disk: its own lock file only


def test_a_bad_object_locks_setting_is_refused_naming_it(tmp_path, monkeypatch):
    monkeypatch.setenv("ZARRX_OBJECT_LOCKS", "always")
    array = zarrx.create_array(LocalStore(tmp_path / "a.zarr"), shape=(8,), chunks=(4,), dtype="i1")
    with pytest.raises(UsageError, match="ZARRX_OBJECT_LOCKS='always': expected one of auto, shared, machine"):
        array[1] = 1


def test_without_a_usable_temporary_folder_the_lock_file_is_in_the_store_and_never_listed(tmp_path):
    path = tmp_path / "data.zarr"
    zarrx.create_array(LocalStore(path), "chunks", shape=(2048,), chunks=(8,), dtype="i8", fill_value=-1)
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")  # the lock file's folder would be below a file: it cannot be made
    found = _race(path, "chunks", tmp_path, str(not_a_folder))
    np.testing.assert_array_equal(found, np.arange(2048) + 1000 * ROUNDS)
    assert (path / OBJECT_LOCK_NAME).exists()
    store = LocalStore(path)
    assert store.list_dir("") == ["chunks", "zarr.json"] and OBJECT_LOCK_NAME not in list(store.list_prefix(""))
    store.delete_prefix("")  # and never deleted (another process may hold it)
    assert (path / OBJECT_LOCK_NAME).exists() and store.list_dir("") == []


@pytest.fixture(scope="module")
def s3():
    with serve_s3() as server:
        s3fs.S3FileSystem(skip_instance_cache=True, endpoint_url=server.url, key="k", secret="s").mkdir("partial")
        yield server


def test_dask_store_without_its_lock_on_worker_processes_keeps_every_value(tmp_path, s3):
    # dask's own da.store, told to take no lock (as users do for speed), with blocks of 3000
    # across chunks of 2000: every other chunk is written in part by two tasks on two processes
    from distributed import Client, LocalCluster

    x = da.arange(200_000, chunks=3000, dtype="i4")
    with LocalCluster(n_workers=2, threads_per_worker=2, processes=True, dashboard_address=":0") as cluster:
        options = {"endpoint_url": s3.url, "key": "k", "secret": "s"}
        places = [(str(tmp_path / "a{}.zarr"), None)] * 3 + [
            ("s3://partial/race{}.zarr", {**options, "zarrx_backend": "obstore"}),
            ("s3://partial/race{}.zarr", {**options, "zarrx_backend": "fsspec"}),
        ]
        with Client(cluster):
            for attempt, (place, storage_options) in enumerate(places):
                size = 200_000 if storage_options is None else 60_000  # (moto is slow)
                arr = zarrx.create_array(place.format(attempt), shape=(size,), chunks=(2000,), dtype="i4",
                                         storage_options=storage_options)  # fmt: skip
                da.store(x[:size], arr, lock=False)
                found = arr[...]
                lost = np.flatnonzero(found != np.arange(size))
                assert lost.size == 0, f"{place.format(attempt)}: {lost.size} values lost, e.g. at {lost[:8].tolist()}"


@pytest.mark.parametrize("way", ["zarr ObjectStore S3", "zarr FsspecStore S3"])
def test_processes_writing_through_zarr_pythons_stores_on_s3_keep_every_value(tmp_path, s3, way):
    # zarr-python's stores have no conditional put: through them, these writers lost values
    options = {"endpoint_url": s3.url, "key": "k", "secret": "s"}
    name = way.split()[1].lower()
    arr = zarrx.create_array(f"s3://partial/{name}.zarr", shape=(128,), chunks=(8,), dtype="i8", fill_value=-1,
                             storage_options=options)  # fmt: skip
    _race(f"{s3.url}|partial|{name}.zarr", "", tmp_path, ways=(way,), rounds=10)
    lost = np.flatnonzero(arr[...] != np.arange(128) + 1000 * 10)
    assert lost.size == 0, f"{way}: {lost.size} of 128 values lost, e.g. at {lost[:8].tolist()}"


@pytest.mark.parametrize("backend", ["obstore", "fsspec"])
@pytest.mark.parametrize("sharded", [False, True])
def test_a_partial_write_leaving_an_s3_object_all_fill_value_stores_it_so(s3, backend, sharded):
    # S3 has no conditional delete: the object is written all fill value instead (a delete could
    # drop another process's values written in between)
    options = {"endpoint_url": s3.url, "key": "k", "secret": "s", "zarrx_backend": backend}
    layout = {"chunks": (4,), "shards": (8,)} if sharded else {"chunks": (8,)}
    arr = zarrx.create_array(f"s3://partial/{backend}{sharded}.zarr", shape=(16,), dtype="i4", fill_value=0,
                             storage_options=options, **layout)  # fmt: skip
    arr[:] = np.arange(16) + 1
    arr[0:5] = 0
    arr[8:12] = 0
    assert arr[:].tolist() == [0] * 5 + [6, 7, 8] + [0] * 4 + [13, 14, 15, 16]
    arr[5:8] = 0  # the first object is now all fill value: stored as such
    assert arr[:].tolist() == [0] * 12 + [13, 14, 15, 16]
    arr[12:16] = 0
    assert arr[:].tolist() == [0] * 16
    arr[3:5] = 0  # all fill value and absent or stored so: nothing changes
    assert arr[:].tolist() == [0] * 16
