"""zarrx inside dask: the scheduler's threads, bounded scratch memory, one fork handler.

* A dask task of zarrx (``read_block``, ``write_block``) runs its read or write on the thread
  dask gives it: on dask's threaded scheduler and on a distributed worker process zarrx starts no
  thread pool of its own (``zarrx.threads-per-task``, default 1); with a larger number a task
  borrows at most that many threads of the one pool. ``arr[...]`` outside dask still uses it.
* The scratch buffers threads keep are bounded per process (``ZARRX_SCRATCH_BUDGET_BYTES``),
  measured with tracemalloc; a task gives its thread's back when it ends, to the next task on
  any thread (idle worker threads hold none).
* ``ThreadContexts`` registers one fork handler however many instances are made; instances are
  freed when unused, and a forked child starts with fresh contexts in each.

The thread counts run in fresh interpreters: the pool, once started, lives as long as its process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import dask
import numpy as np
import pytest

import zarrx
from zarrx import concurrency
from zarrx.concurrency import THREAD_NAME, call_threads, map_concurrent, task_threads, threads_per_task
from zarrx.errors import UsageError

ROOT = Path(__file__).resolve().parents[1]

#: the child's script: make a many-chunk array, run what argv[2] says, print JSON facts
SCRIPT = r"""
import gc, json, sys, threading, tracemalloc
import dask, numpy as np, zarrx
from zarrx import concurrency, scratch
from zarrx.storage import LocalStore

def zarrx_threads():
    return sorted(t.name for t in threading.enumerate() if t.name.startswith(concurrency.THREAD_NAME))

def scratch_traced():
    # live NumPy buffers allocated by zarrx/scratch.py: the scratch buffers, measured outside zarrx
    gc.collect()
    snapshot = tracemalloc.take_snapshot().filter_traces([tracemalloc.DomainFilter(True, np.lib.tracemalloc_domain)])
    snapshot = snapshot.filter_traces([tracemalloc.Filter(True, scratch.__file__)])
    return sum(stat.size for stat in snapshot.statistics("filename"))

folder, case = sys.argv[1], sys.argv[2]
data = np.arange(1024 * 1024, dtype="float64").reshape(1024, 1024) % 977
# 64 chunks of 128 KiB (decoded on the pool outside dask); dask blocks of 16 chunks
big = zarrx.create_array(LocalStore(folder + "/big.zarr"), shape=data.shape, chunks=(128, 128), dtype="float64",
                         compressors=[{"name": "zstd", "configuration": {"level": 1}}])
big[...] = data
# 2,048 chunks of 4 KiB (the small-chunk pipeline with its reader thread outside dask); 2 blocks
small = zarrx.create_array(LocalStore(folder + "/small.zarr"), shape=(512, 4096), chunks=(8, 128), dtype="int32",
                           compressors=[{"name": "zstd", "configuration": {"level": 1}}])
expected_small = np.arange(512 * 4096, dtype="int32").reshape(512, 4096)
small[...] = expected_small
# a group for xarray: 16 chunks of 128 KiB
root = zarrx.create_group(LocalStore(folder + "/ds.zarr"))
root.create_array("v", shape=(256, 1024), chunks=(128, 128), dtype="float64", dimension_names=["y", "x"])[...] = data[:256]
# what made them ran on the pool: a fresh process from here
facts = {"pool_before": zarrx_threads()}
concurrency._pool.shutdown(wait=True)
concurrency._pool = None
big, small = zarrx.open_array(LocalStore(folder + "/big.zarr")), zarrx.open_array(LocalStore(folder + "/small.zarr"))
facts["after_reset"] = zarrx_threads()
concurrency.release_scratch()  # the main thread's, from the writes above (the pool's went with its threads)
scratch._spare.clear()  # ... and freed: a fresh process
gc.collect()
facts["kept_after_reset"] = concurrency.kept_scratch_bytes()
tracemalloc.start()
workers = int(sys.argv[3]) if len(sys.argv) > 3 else 2
if case == "dask":
    x = big.to_dask(chunks=(512, 512))
    y = small.to_dask(chunks=(256, 4096))
    with dask.config.set(scheduler="threads", num_workers=workers):
        seen = x.map_blocks(lambda b: np.array([[len(zarrx_threads())]]), chunks=(1, 1)).max().compute()
        facts["correct"] = bool(np.array_equal(x.compute(), data) and np.array_equal(y.compute(), expected_small))
        out = zarrx.to_zarr(x + 1, LocalStore(folder + "/out.zarr"), chunks=(128, 128))
        facts["written"] = bool(np.array_equal(out.to_dask().compute(), data + 1))  # read in tasks too
    facts["seen_in_task"] = int(seen)
elif case == "xarray":  # xarray's own dask tasks (dask's chunk manager) read through the backend array
    import xarray as xr
    ds = xr.open_dataset(LocalStore(folder + "/ds.zarr"), engine="zarrx", chunks={"y": 256, "x": 512})
    with dask.config.set(scheduler="threads", num_workers=workers):
        facts["correct"] = bool(np.array_equal(ds.v.values, data[:256]))
elif case == "plain":
    facts["correct"] = bool(np.array_equal(big[...], data))
facts["threads"] = zarrx_threads()
facts["kept"] = concurrency.kept_scratch_bytes()
facts["traced"] = scratch_traced()
facts["budget"] = concurrency.SCRATCH_BUDGET_BYTES
facts["pool_size"] = concurrency.pool_size()
print(json.dumps(facts))
"""


def run_child(tmp_path, case: str, workers: int = 2, **environ: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **environ}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path), case, str(workers)],
        capture_output=True, text=True, env=env, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    assert facts["pool_before"], "the arrays were written on the pool: the check below would see it"
    assert facts["after_reset"] == [] and facts["kept_after_reset"] == 0
    return facts


# -- threads -------------------------------------------------------------------------------------
def test_threaded_scheduler_starts_no_pool(tmp_path):
    facts = run_child(tmp_path, "dask", ZARRX_NUM_THREADS="8")
    assert facts["correct"] and facts["written"]
    assert facts["seen_in_task"] == 0
    assert facts["threads"] == [], "zarrx started threads inside dask's tasks"


def test_xarray_tasks_read_on_their_own_threads(tmp_path):
    facts = run_child(tmp_path, "xarray", ZARRX_NUM_THREADS="8")
    assert facts["correct"]
    assert facts["threads"] == [], "zarrx started threads inside the tasks xarray made"


def test_threads_per_task_from_the_environment(tmp_path):
    # dask reads DASK_ZARRX__THREADS_PER_TASK into zarrx.threads-per-task: tasks then borrow the pool
    facts = run_child(tmp_path, "dask", ZARRX_NUM_THREADS="8", DASK_ZARRX__THREADS_PER_TASK="3")
    assert facts["correct"] and facts["written"]
    assert 1 <= len(facts["threads"]) <= facts["pool_size"] == 8


def test_plain_reads_outside_dask_keep_the_pool(tmp_path):
    facts = run_child(tmp_path, "plain", ZARRX_NUM_THREADS="4")
    assert facts["correct"]
    assert 1 <= len(facts["threads"]) <= 4


def test_one_call_inside_a_task_uses_at_most_its_threads(monkeypatch):
    monkeypatch.setenv("ZARRX_NUM_THREADS", "8")
    barrier_free = threading.Event()

    def who(item: int) -> str:
        barrier_free.wait(0.002)  # long enough for every helper to take a group
        return threading.current_thread().name

    items = list(range(200))
    for limit in (1, 2, 3):
        with task_threads(limit):
            assert call_threads() == limit
            assert len(set(map_concurrent(who, items, caller_works=True))) <= limit
            with task_threads(8):  # a nested block may lower the limit, never raise it
                assert call_threads() == limit
    outside = set(map_concurrent(who, items, caller_works=True))
    assert len(outside) > 1  # the same call outside a task spreads over the pool (however big it was made)
    assert call_threads() == 8


def test_threads_per_task_config():
    assert threads_per_task() == 1
    with dask.config.set({"zarrx.threads-per-task": 4}):
        assert threads_per_task() == 4
        with task_threads() as limit:
            assert limit == min(4, 4)
    for bad in (0, -1, "two", 1.5, True):
        with dask.config.set({"zarrx.threads-per-task": bad}), pytest.raises(UsageError, match="zarrx.threads-per-task"):
            threads_per_task()
    arr = zarrx.create_array({}, shape=(4,), chunks=(2,), dtype="int8", fill_value=3)
    with dask.config.set({"zarrx.threads-per-task": 0}), pytest.raises(UsageError, match="zarrx.threads-per-task"):
        arr.to_dask().compute(scheduler="sync")


def test_distributed_worker_process_starts_no_pool(tmp_path, monkeypatch):
    distributed = pytest.importorskip("distributed")
    monkeypatch.setenv("ZARRX_SCRATCH_BUDGET_BYTES", str(192 * 1024))  # for the worker processes
    data = np.arange(512 * 512, dtype="float64").reshape(512, 512)
    # 16 chunks of 128 KiB, decoded on the pool outside dask
    arr = zarrx.create_array(str(tmp_path / "d.zarr"), shape=data.shape, chunks=(128, 128), dtype="float64",
                             compressors=[{"name": "zstd", "configuration": {"level": 1}}])  # fmt: skip
    arr[...] = data

    def zarrx_threads() -> list[str]:
        return sorted(t.name for t in threading.enumerate() if t.name.startswith(THREAD_NAME))

    def report(block: np.ndarray) -> np.ndarray:
        # inside a task: the zarrx threads of this worker process while its tasks run
        return np.array([[len(zarrx_threads())]])

    with (
        distributed.LocalCluster(
            n_workers=1, processes=True, threads_per_worker=2, dashboard_address=None, silence_logs=40
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        x = zarrx.from_zarr(str(tmp_path / "d.zarr"), chunks=(256, 256))  # 4 chunks per block
        big = zarrx.from_zarr(str(tmp_path / "d.zarr"), chunks=(512, 512))
        np.testing.assert_array_equal(x.compute(), data)
        np.testing.assert_array_equal(big.compute(), data)
        assert int(x.map_blocks(report, chunks=(1, 1)).max().compute()) == 0
        zarrx.to_zarr(x * 2, str(tmp_path / "twice.zarr"))
        np.testing.assert_array_equal(zarrx.open_array(str(tmp_path / "twice.zarr"))[...], data * 2)
        (threads,) = client.run(zarrx_threads).values()
        assert threads == []
        (kept,) = client.run(concurrency.kept_scratch_bytes).values()
        assert 0 < kept <= 192 * 1024  # the budget the worker inherited (two threads would keep 256 KiB)

        # a larger number in the workers' config: their tasks borrow the worker's one pool
        client.run(lambda: dask.config.set({"zarrx.threads-per-task": 2}) and None)
        np.testing.assert_array_equal(zarrx.from_zarr(str(tmp_path / "d.zarr"), chunks=(512, 512)).compute(), data)
        (threads,) = client.run(zarrx_threads).values()
        (size,) = client.run(concurrency.pool_size).values()
        assert 1 <= len(threads) <= size


# -- scratch memory ------------------------------------------------------------------------------
@pytest.mark.parametrize("per_task", ["1", "4"])
def test_scratch_kept_is_bounded_per_process(tmp_path, per_task):
    # tasks on 4 of dask's threads (and with 4 per task, up to 8 pool threads) decode 128 KiB chunks
    budget = 384 * 1024
    facts = run_child(tmp_path, "dask", 4, ZARRX_NUM_THREADS="8", DASK_ZARRX__THREADS_PER_TASK=per_task,
                      ZARRX_SCRATCH_BUDGET_BYTES=str(budget))  # fmt: skip
    assert facts["correct"] and facts["written"] and facts["budget"] == budget
    assert facts["kept"] <= budget and facts["traced"] <= budget
    assert facts["kept"] == facts["traced"]  # the count is what is alive, measured outside zarrx


def test_scratch_budget_control(tmp_path):
    # the same run with the default budget keeps more than the budget above: that test can fail
    facts = run_child(tmp_path, "dask", 4, ZARRX_NUM_THREADS="8", DASK_ZARRX__THREADS_PER_TASK="4")
    assert facts["traced"] > 384 * 1024 and facts["kept"] == facts["traced"]


def test_a_task_gives_its_scratch_to_the_next_task_on_another_thread():
    def task(found: list) -> None:
        with task_threads(1):
            buffer = concurrency.scratch_array((64, 1000), np.dtype("float64"))
            buffer[...] = 1.0
            found.append(buffer.__array_interface__["data"][0])

    addresses: list[int] = []
    for _ in range(3):  # one task per new thread: each ends, the next starts elsewhere
        thread = threading.Thread(target=task, args=(addresses,))
        thread.start()
        thread.join()
    # warm memory handed from task to task, not one buffer per thread (nor fresh memory per task)
    assert len(set(addresses)) == 1


def test_scratch_accounting_follows_threads_that_end(monkeypatch):
    import gc

    import zarrx.scratch

    # no buffer given back by an earlier test's task to take: one the thread took would be freed
    # with it, and the count fall by its size (a 1 MiB buffer of decoding runs did, in a full run)
    monkeypatch.setattr(zarrx.scratch, "_spare", [])
    gc.collect()  # buffers of threads that earlier tests ended, uncounted now and not below
    before = concurrency.kept_scratch_bytes()

    def use() -> None:
        concurrency.scratch_array((256, 256), np.dtype("float64"))

    thread = threading.Thread(target=use)
    thread.start()
    thread.join()
    del thread
    gc.collect()
    assert concurrency.kept_scratch_bytes() == before  # the ended thread's buffer is freed and uncounted


# -- fork handlers -------------------------------------------------------------------------------
FORK_SCRIPT = r"""
import gc, json, os, weakref
registered = []
original = os.register_at_fork
def counting(**handlers):
    registered.append(sorted(handlers))
    return original(**handlers)
os.register_at_fork = counting  # the test's own count of registrations, made before zarrx is imported
import zarrx
from zarrx.codecs.contexts import ThreadContexts
after_import = len(registered)
made = []
instances = [ThreadContexts(lambda key, n=n: made.append(n) or object()) for n in range(500)]
parent = [c.get() for c in instances]
gone = weakref.ref(ThreadContexts(lambda key: object()))
gc.collect()
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    fresh = [c.get() for c in instances]
    os.write(write, json.dumps({"made_in_child": len(made) - 500,
                                "new": sum(a is not b for a, b in zip(fresh, parent))}).encode())
    os._exit(0)
os.waitpid(pid, 0)
child = json.loads(os.read(read, 65536))
print(json.dumps({"added": len(registered) - after_import, "collected": gone() is None, **child,
                  "same_in_parent": all(c.get() is p for c, p in zip(instances, parent))}))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX-only")
def test_one_fork_handler_for_every_thread_contexts(tmp_path):
    done = subprocess.run([sys.executable, "-c", FORK_SCRIPT], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    assert facts["added"] == 0  # 501 instances, no handler more than the import's
    assert facts["collected"]  # an unused instance is freed (a handler per instance kept each alive)
    assert facts["made_in_child"] == 500 and facts["new"] == 500  # the child made its own contexts
    assert facts["same_in_parent"]


# -- module-level caches -------------------------------------------------------------------------
def test_a_rectilinear_grid_of_many_chunks_is_not_kept_after_its_arrays():
    import gc
    import weakref

    def grid_of(edges: tuple[int, ...]) -> "weakref.ref":
        store: dict = {}
        zarrx.create_array(store, shape=(sum(edges),), chunks=(edges,), dtype="u1", fill_value=0)
        arr = zarrx.open_array(store)  # parsed from its document, through the shared cache
        assert arr[...].sum() == 0
        return weakref.ref(arr.metadata.chunk_grid)

    many = grid_of(tuple(1 + n % 3 for n in range(5000)))  # a tuple entry per chunk: not kept
    few = grid_of((1, 2, 3, 4))  # a few edges: shared by the arrays that repeat them
    gc.collect()
    assert many() is None
    assert few() is not None
