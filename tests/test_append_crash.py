"""Appends and resizes that never look complete when interrupted.

As ``tests/test_convert_crash.py`` does for convert, a writer process is SIGKILLed at random
points and what it leaves is judged by a reader. The kill points are random store mutations
(a chunk, a metadata document, a consolidated copy, a deletion) rather than random instants: an
append of a few KiB takes milliseconds, so timers would mostly miss it. The writer is a forked
child whose store kills its own process (``SIGKILL``: no ``finally``, no clean-up) when the
chosen mutation is about to happen.

After each kill, both views -- the array's own ``zarr.json`` and the root's consolidated
metadata, as xarray opens it -- must each show the old array or the new one, never a mix
(values and shape); ``zarrx verify`` must flag every state that is not the old or the new
array whole (chunks past the shape, a stale consolidated copy). Then the append is run again as
a job would run it (read the array, append if it has not grown) and the result must be exactly
the uninterrupted one, with verify OK.

Cases, in turn over 50 random kill points: a NumPy append, a sharded NumPy append, a dask append
(``arr.append`` of a dask array), an xarray ``append_dim`` write of dask data, and a shrinking
resize.
"""

from __future__ import annotations

import os
import random
import shutil
import traceback
import signal
import warnings

import dask
import dask.array as da
import numpy as np
import pytest
import xarray as xr

import zarrx
from zarrx.storage import LocalStore, WrapperStore

pytestmark = [
    pytest.mark.skipif(not hasattr(os, "fork") or not hasattr(signal, "SIGKILL"), reason="needs fork and SIGKILL"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),  # fork() of a process with threads
    pytest.mark.filterwarnings("ignore:The input Dask array writes part of a chunk"),  # the old edge's chunk
]

KILL_POINTS = 50
OLD = np.arange(10 * 6, dtype="int32").reshape(10, 6)
NEW_ROWS = -np.arange(7 * 6, dtype="int32").reshape(7, 6) - 1
NEW = np.concatenate([OLD, NEW_ROWS])
SHRUNK = OLD[:5]


class KillingStore(WrapperStore):
    """Kills its process (SIGKILL) just before its ``kill_at``-th mutation (key written or deleted);
    counts them in ``mutations``."""

    def __init__(self, inner, kill_at: int | None = None) -> None:
        super().__init__(inner)
        self.kill_at, self.mutations = kill_at, 0

    def _mutation(self) -> None:
        self.mutations += 1
        if self.mutations == self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    def set(self, key, value):
        self._mutation()
        super().set(key, value)

    def set_many(self, items):
        for key, value in items.items():
            self.set(key, value)

    def batch_writer(self):
        import contextlib

        return contextlib.nullcontext(self.set)

    def delete(self, key):
        self._mutation()
        super().delete(key)

    def delete_many(self, keys):
        for key in keys:
            self.delete(key)

    def delete_prefix(self, prefix):
        self.delete_many(list(self.list_prefix(prefix)))


def build(path: str) -> None:
    root = zarrx.create_group(path)
    root.create_array("plain", shape=OLD.shape, chunks=(4, 3), dtype="int32", fill_value=0)[:] = OLD
    root.create_array("sharded", shape=OLD.shape, chunks=(2, 3), shards=(4, 6), dtype="int32", fill_value=0)[:] = OLD
    root.create_array("lazy", shape=OLD.shape, chunks=(4, 3), dtype="int32", fill_value=0)[:] = OLD
    root.create_array("shrinking", shape=OLD.shape, chunks=(4, 3), dtype="int32", fill_value=0)[:] = OLD
    dataset = xr.Dataset({"v": (("t", "x"), OLD)}, coords={"t": np.arange(10)})
    dataset.zarrx.to_zarr(path, group="ds", mode="w", encoding={"v": {"chunks": (4, 3)}, "t": {"chunks": (4,)}})
    zarrx.consolidate_metadata(path)


def _appended_dataset() -> xr.Dataset:
    return xr.Dataset({"v": (("t", "x"), NEW_ROWS)}, coords={"t": np.arange(10, 17)}).chunk({"t": 4})


def _array(store, name: str) -> zarrx.Array:
    """The array as a writer opens it (its own ``zarr.json``)."""
    return zarrx.open_array(store, name, mode="r+")


#: each case: what the writer does to the store, and the arrays (path -> old, new values) it changes
CASES = {
    "numpy append": (lambda store: _array(store, "plain").append(NEW_ROWS), {"plain": (OLD, NEW)}),
    "sharded append": (lambda store: _array(store, "sharded").append(NEW_ROWS), {"sharded": (OLD, NEW)}),
    "dask append": (
        lambda store: _array(store, "lazy").append(da.from_array(NEW_ROWS, chunks=(2, 3))),
        {"lazy": (OLD, NEW)},
    ),
    "xarray append_dim": (
        lambda store: _appended_dataset().zarrx.to_zarr(store, group="ds", append_dim="t", align_chunks=True),
        {"ds/v": (OLD, NEW), "ds/t": (np.arange(10), np.arange(17))},
    ),
    "shrinking resize": (lambda store: _array(store, "shrinking").resize(5, 6), {"shrinking": (OLD, SHRUNK)}),
}


def run_killed(path: str, case: str, kill_at: int | None) -> tuple[bool, int]:
    """Run ``case`` on ``path`` in a forked child killed before mutation ``kill_at``; ``(killed,
    mutations done)`` (the count only when it ran to the end)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the writer
        os.close(read)
        code = 1
        try:
            dask.config.set(scheduler="synchronous")  # the parent's thread pool does not survive fork
            store = KillingStore(LocalStore(path), kill_at)
            CASES[case][0](store)
            os.write(write, str(store.mutations).encode())
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as pipe:
        output = pipe.read()
    _, status = os.waitpid(pid, 0)
    killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    assert killed or os.WEXITSTATUS(status) == 0, f"{case}: the writer failed (status {status})"
    return killed, 0 if killed else int(output)


def views(path: str, node: str) -> dict[str, np.ndarray]:
    """The array at ``node`` as its own zarr.json shows it, and as the consolidated metadata does."""
    consolidated = zarrx.open_group(path)
    assert consolidated.is_consolidated
    return {"zarr.json": zarrx.open_array(path, node)[:], "consolidated": consolidated[node][:]}


def which(values: np.ndarray, old: np.ndarray, new: np.ndarray) -> str:
    for name, expected in (("old", old), ("new", new)):
        if values.shape == expected.shape and np.array_equal(values, expected):
            return name
    return "mixed"


def rerun(path: str, case: str) -> None:
    """Run the job again as a pipeline would: look at the array as a writer does (its own
    ``zarr.json``), and append (resize) if it has not grown (shrunk) yet."""
    changes = CASES[case][1]
    node = next(iter(changes))
    if which(zarrx.open_array(path, node)[:], *changes[node]) == "old":
        CASES[case][0](LocalStore(path))
    elif case == "shrinking resize":
        _array(LocalStore(path), node).resize(SHRUNK.shape)  # finishes an interrupted clean-up


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> tuple[str, dict[str, int]]:
    """The hierarchy before any case, and how many mutations each case makes when not killed."""
    folder = tmp_path_factory.mktemp("append-crash")
    base = str(folder / "base.zarr")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        build(base)
    totals = {}
    for case in CASES:
        scratch = str(folder / "scratch.zarr")
        shutil.copytree(base, scratch)
        killed, totals[case] = run_killed(scratch, case, None)
        assert not killed and totals[case] > 2
        for node, (_, new) in CASES[case][1].items():
            assert all(which(values, *CASES[case][1][node]) == "new" for values in views(scratch, node).values())
        assert zarrx.verify(scratch).ok
        shutil.rmtree(scratch)
    return base, totals


def test_a_killed_append_shows_the_old_or_the_new_array_and_a_rerun_completes_it(base, tmp_path):
    source, totals = base
    rng = random.Random(30)
    outcomes: dict[str, dict[str, int]] = {case: {} for case in CASES}
    for point in range(KILL_POINTS):
        case = list(CASES)[point % len(CASES)]
        kill_at = rng.randint(1, totals[case])
        path = str(tmp_path / f"kill{point}.zarr")
        shutil.copytree(source, path)
        killed, _ = run_killed(path, case, kill_at)
        assert killed, f"{case}: not killed at mutation {kill_at} of {totals[case]}"
        seen = {}
        for node, (old, new) in CASES[case][1].items():
            for view, values in views(path, node).items():
                seen[node, view] = which(values, old, new)
        assert "mixed" not in seen.values(), f"{case} killed at mutation {kill_at}: {seen}"
        consolidated = {state for (node, view), state in seen.items() if view == "consolidated"}
        assert len(consolidated) == 1, f"{case} killed at {kill_at}: the consolidated view mixes {seen}"
        report = zarrx.verify(path)
        whole = set(seen.values()) == {"old"} and not report.past_edge
        if not whole:  # anything but the old array untouched is flagged
            assert not report.ok and (report.past_edge or report.stale_consolidated), f"{case} at {kill_at}: {report}"
        state = "old" if set(seen.values()) == {"old"} else "new" if set(seen.values()) == {"new"} else "new, stale copy"
        outcomes[case][state] = outcomes[case].get(state, 0) + 1
        rerun(path, case)
        for node, (old, new) in CASES[case][1].items():
            assert all(which(values, old, new) == "new" for values in views(path, node).values()), f"{case} at {kill_at}"
        report = zarrx.verify(path)
        assert report.ok and not report.past_edge_values, f"{case} killed at {kill_at}, rerun: {report}"
        shutil.rmtree(path)
    print(f"\nkill points: {KILL_POINTS}; mutations per case {totals}; outcomes {outcomes}")
    assert all(outcomes[case].get("old") for case in CASES), outcomes  # kills before the metadata
