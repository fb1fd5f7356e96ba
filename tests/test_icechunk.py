"""Icechunk repositories through zarrx, against zarr-python / ``engine="zarr"`` on the same repository.

icechunk 2.x needs Python 3.12, so each group of steps runs as one script in the environment of
``tests/icechunk_env.py`` (built on first use; the tests fail, never skip, without a Python 3.12)
on a repository in local storage, and hands back what each reader saw as JSON. The expected
values are computed here, from the same recipe the scripts write. The groups:

- sessions: ``ds.zarrx.to_zarr(session.store)`` (NumPy and dask variables), append along a
  dimension, ``zarrx.create_array`` with array append and resize, ``zarrx.to_zarr`` of a dask
  array, commit; read back in new read-only sessions through ``zarrx.open_group``/``open_array``,
  ``engine="zarrx"``, zarr-python and ``engine="zarr"``, and each of them reading what the other
  wrote; time travel by snapshot id, tag and branch;
- distributed: a forked session per worker of a ``LocalCluster`` with processes, each writing its
  region through zarrx, the forks merged before the commit -- arrays and a dask-backed Dataset;
  and a write task that would lose its writes in a worker refused with zarrx's error;
- virtual chunks: a NetCDF4 file written with netCDF4, its chunks (found with h5py) registered
  as virtual references as VirtualiZarr writes them, read through zarrx like
  ``xr.open_dataset(netcdf_file)``;
- the Icechunk examples of ``docs/stack.md`` (the ``{code-block} python`` blocks with class
  ``icechunk``, which tests/test_docs.py leaves alone), run in order in one namespace.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import numpy as np
import pytest

from .icechunk_env import ROOT, run_icechunk

DOCS_PAGE = ROOT / "docs" / "stack.md"

# What every script builds its data from (the tests compute the expected values with it too).
RECIPE = """
import json, sys, warnings
import numpy as np, xarray as xr, dask, dask.array as da, zarr, zarrx, icechunk
def dataset(start, n):
    time = np.arange(start, start + n)
    t = (np.arange(start * 4, (start + n) * 4, dtype="float64") / 8).reshape(n, 4)
    u = da.from_array((np.arange(start * 4, (start + n) * 4, dtype="int32") * 3).reshape(n, 4), chunks=(2, 4))
    return xr.Dataset({"t": (("time", "x"), t, {"units": "K"}), "u": (("time", "x"), u)},
                      coords={"time": time, "x": np.arange(4)}, attrs={"title": "demo"})
def as_json(ds):
    ds = ds.load()
    return {"vars": {name: ds[name].values.tolist() for name in sorted(ds.variables)},
            "attrs": ds.attrs, "t_attrs": {k: v for k, v in ds["t"].attrs.items()}}
out = {}
"""


def dataset_json(start: int, n: int) -> dict:
    time_ = np.arange(start, start + n)
    t = (np.arange(start * 4, (start + n) * 4, dtype="float64") / 8).reshape(n, 4)
    u = (np.arange(start * 4, (start + n) * 4, dtype="int32") * 3).reshape(n, 4)
    return {
        "vars": {"t": t.tolist(), "time": time_.tolist(), "u": u.tolist(), "x": list(range(4))},
        "attrs": {"title": "demo"},
        "t_attrs": {"units": "K"},
    }


SESSIONS = RECIPE + """
repo = icechunk.Repository.create(icechunk.local_filesystem_storage(sys.argv[1]))
session = repo.writable_session("main")
store = session.store
# a Dataset (NumPy t, dask u), then appended along time: zarrx and xarray's own engine, side by side
dataset(0, 6).zarrx.to_zarr(store, group="zarrx", mode="w")
dataset(0, 6).to_zarr(store, group="peer", mode="w", zarr_format=3)
dataset(6, 4).zarrx.to_zarr(store, group="zarrx", append_dim="time")
dataset(6, 4).to_zarr(store, group="peer", append_dim="time")
# an array: created, filled, appended to, resized -- zarrx and zarr-python
arr = zarrx.create_array(store, "arr/zarrx", shape=(10,), chunks=(4,), dtype="int32", fill_value=-1)
arr[:] = np.arange(10, dtype="int32")
arr.append(np.arange(100, 105, dtype="int32"))
arr.resize(12)
arr.resize(16)
peer = zarr.create_array(store, name="arr/peer", shape=(10,), chunks=(4,), dtype="int32", fill_value=-1)
peer[:] = np.arange(10, dtype="int32")
peer.append(np.arange(100, 105, dtype="int32"))
peer.resize((12,))
peer.resize((16,))
# a dask array: zarrx.to_zarr and dask's own to_zarr; then an append of a dask array
x = da.arange(48, chunks=12, dtype="int64").reshape(6, 8)
zarrx.to_zarr(x, store, "dask/zarrx", chunks=(2, 8))
da.to_zarr(x.rechunk((2, 8)), store, component="dask/peer", zarr_format=3)
zarrx.open_array(store, "dask/zarrx", mode="r+").append(da.arange(16, chunks=8, dtype="int64").reshape(2, 8))
zarr.open_array(store, path="dask/peer", mode="r+").append(np.arange(16, dtype="int64").reshape(2, 8))
first = session.commit("first")

# a second commit changes the array; tag the first, and a branch from it
second_session = repo.writable_session("main")
zarrx.open_array(second_session.store, "arr/zarrx", mode="r+")[0:4] = 7
zarr.open_array(second_session.store, path="arr/peer", mode="r+")[0:4] = 7
second = second_session.commit("second")
repo.create_tag("v1", snapshot_id=first)
repo.create_branch("dev", snapshot_id=first)

def readers(session):
    store = session.store
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no consolidated-metadata warning: Icechunk keeps none
        found = {}
        for group in ("zarrx", "peer"):
            found[f"{group} engine=zarrx"] = as_json(xr.open_dataset(store, group=group, engine="zarrx"))
            found[f"{group} engine=zarrx chunks"] = as_json(xr.open_dataset(store, group=group, engine="zarrx", chunks={}))
            found[f"{group} engine=zarr"] = as_json(xr.open_dataset(store, group=group, engine="zarr"))
            found[f"{group} zarrx.open_group"] = sorted(zarrx.open_group(store, group))
            for name in ("arr", "dask"):
                found[f"{name}/{group} zarrx"] = zarrx.open_array(store, f"{name}/{group}")[...].tolist()
                found[f"{name}/{group} zarrx dask"] = zarrx.from_zarr(store, f"{name}/{group}").compute().tolist()
                found[f"{name}/{group} zarr"] = zarr.open_array(store, path=f"{name}/{group}", mode="r")[...].tolist()
    return found

out["main"] = readers(repo.readonly_session("main"))
out["snapshot"] = readers(repo.readonly_session(snapshot_id=first))
out["tag"] = readers(repo.readonly_session(tag="v1"))
out["branch"] = readers(repo.readonly_session("dev"))
out["second"] = readers(repo.readonly_session(snapshot_id=second))
try:
    zarrx.consolidate_metadata(repo.writable_session("main").store)
except Exception as error:
    out["consolidate"] = f"{type(error).__name__}: {error}"
try:
    zarrx.open_array(repo.readonly_session("main").store, "arr/zarrx", mode="r+")[0] = 1
except Exception as error:
    out["read-only"] = f"{type(error).__name__}: {error}"
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def sessions(tmp_path_factory):
    started = time.monotonic()
    found = run_icechunk(SESSIONS, str(tmp_path_factory.mktemp("icechunk") / "repo"))
    found["seconds"] = time.monotonic() - started
    return found


def expected_array(committed: bool) -> list[int]:
    values = np.full(16, -1, dtype="int32")
    values[:10] = np.arange(10)
    values[10:12] = [100, 101]  # resized to 12 (the rest cut), then grown back: fill value
    if committed:
        values[0:4] = 7
    return values.tolist()


def expected_dask() -> list:
    return np.concatenate([np.arange(48).reshape(6, 8), np.arange(16).reshape(2, 8)]).tolist()


def check_readers(found: dict, second: bool) -> None:
    full = dataset_json(0, 10)
    for group in ("zarrx", "peer"):
        for reader in ("engine=zarrx", "engine=zarrx chunks", "engine=zarr"):
            assert found[f"{group} {reader}"] == full, (group, reader)
        assert found[f"{group} zarrx.open_group"] == ["t", "time", "u", "x"]
        for reader in ("zarrx", "zarrx dask", "zarr"):
            assert found[f"arr/{group} {reader}"] == expected_array(second), (group, reader)
            assert found[f"dask/{group} {reader}"] == expected_dask(), (group, reader)


def test_sessions_written_and_read_through_zarrx_as_through_zarr_python(sessions):
    check_readers(sessions["main"], second=True)
    check_readers(sessions["second"], second=True)


@pytest.mark.parametrize("version", ["snapshot", "tag", "branch"])
def test_time_travel_reads_the_first_commit(sessions, version):
    check_readers(sessions[version], second=False)


def test_consolidating_an_icechunk_store_is_refused_by_name(sessions):
    assert sessions["consolidate"].startswith("StoreTypeError: ")
    assert "keeps no consolidated metadata" in sessions["consolidate"]


def test_a_read_only_session_refuses_writes_with_zarrxs_error(sessions):
    assert sessions["read-only"].startswith("ReadOnlyError: "), sessions["read-only"]


DISTRIBUTED = RECIPE + """
from dask.distributed import Client, LocalCluster

def write_rows(fork, start, stop):  # a worker's part: its rows, written through zarrx into its fork
    array = zarrx.open_array(fork.store, "grid", mode="r+")
    array[start:stop] = np.arange(start * 6, stop * 6, dtype="int64").reshape(stop - start, 6)
    return fork

def write_region(fork, part, start, stop):  # a worker's part of a Dataset: a region write
    part.load().zarrx.to_zarr(fork.store, group="ds", region={"time": slice(start, stop)})
    return fork

def chain(error):
    found = []
    while error is not None:
        found.append(f"{type(error).__name__}: {error}")
        error = error.__cause__ or error.__context__
    return found

if __name__ == "__main__":
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(sys.argv[1]))
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \\
            Client(cluster) as client:
        session = repo.writable_session("main")
        zarrx.create_array(session.store, "grid", shape=(8, 6), chunks=(2, 6), dtype="int64", fill_value=0)
        fork = session.fork()
        starts = [0, 2, 4, 6]
        forks = client.gather(client.map(write_rows, [fork] * 4, starts, [s + 2 for s in starts]))
        out["worker pids"] = len(set(client.run(lambda: __import__("os").getpid()).values()))
        session.merge(*forks)
        ds = dataset(0, 8)
        ds.zarrx.to_zarr(session.store, group="ds", mode="w", compute=False)  # metadata and coordinates
        fork = session.fork()
        parts = [ds.drop_vars(["time", "x"]).isel(time=slice(s, s + 2)) for s in starts]
        session.merge(*client.gather(client.map(write_region, [fork] * 4, parts, starts, [s + 2 for s in starts])))
        # the helper: zarrx.to_zarr's graph, each task writing into a fork it returns, merged in a tree
        from zarrx.dask.icechunk import to_icechunk
        to_icechunk(da.arange(64, chunks=8).reshape(8, 8), session, "helper/new", chunks=(2, 4))
        zarrx.create_array(session.store, "helper/region", shape=(10, 8), chunks=(2, 8), dtype="int64", fill_value=-1)
        to_icechunk(da.arange(48, chunks=4).reshape(6, 8), session, "helper/region", region=(slice(2, 8),), split_every=2)
        session.commit("distributed")
        # a dask write sent to the workers with a session would lose its writes there: refused
        lost = repo.writable_session("main")
        for name, store in (("fork", lost.fork().store), ("session", lost.store)):
            target = zarrx.open_array(store, "grid", mode="r+")
            try:
                zarrx.to_zarr(da.ones((4, 6), chunks=(2, 6), dtype="int64"), target, region=(slice(0, 4),))
                out[f"refused {name}"] = None
            except Exception as error:
                out[f"refused {name}"] = chain(error)
        try:  # dask-backed variables of a Dataset
            dataset(0, 2).zarrx.to_zarr(lost.store, group="lost", mode="w")
            out["refused dataset"] = None
        except Exception as error:
            out["refused dataset"] = chain(error)
    read = repo.readonly_session("main")
    out["grid zarrx"] = zarrx.open_array(read.store, "grid")[...].tolist()
    out["grid zarr"] = zarr.open_array(read.store, path="grid", mode="r")[...].tolist()
    for name in ("helper/new", "helper/region"):
        out[f"{name} zarrx"] = zarrx.open_array(read.store, name)[...].tolist()
        out[f"{name} zarr"] = zarr.open_array(read.store, path=name, mode="r")[...].tolist()
    out["helper/new chunks"] = list(zarr.open_array(read.store, path="helper/new", mode="r").chunks)
    out["ds engine=zarrx"] = as_json(xr.open_dataset(read.store, group="ds", engine="zarrx"))
    out["ds engine=zarr"] = as_json(xr.open_dataset(read.store, group="ds", engine="zarr"))
    print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def distributed(tmp_path_factory):
    script = tmp_path_factory.mktemp("distributed-script") / "distributed_writes.py"
    script.write_text(DISTRIBUTED)  # a file: the workers' processes import the functions from __main__
    return run_icechunk(f"exec(open({str(script)!r}).read())", str(tmp_path_factory.mktemp("icechunk") / "repo"))


def test_forked_sessions_written_by_worker_processes_are_merged_before_the_commit(distributed):
    assert distributed["worker pids"] == 2
    grid = np.arange(48).reshape(8, 6).tolist()
    assert distributed["grid zarrx"] == grid
    assert distributed["grid zarr"] == grid
    assert distributed["ds engine=zarrx"] == dataset_json(0, 8)
    assert distributed["ds engine=zarr"] == dataset_json(0, 8)


def test_to_icechunk_writes_a_dask_array_from_worker_processes_through_forks(distributed):
    new = np.arange(64).reshape(8, 8).tolist()
    region = np.full((10, 8), -1)
    region[2:8] = np.arange(48).reshape(6, 8)
    for reader in ("zarrx", "zarr"):
        assert distributed[f"helper/new {reader}"] == new, reader
        assert distributed[f"helper/region {reader}"] == region.tolist(), reader
    assert distributed["helper/new chunks"] == [2, 4]  # blocks of (1, 8) were aligned on them first


def test_to_icechunk_is_not_imported_by_zarrx_and_wants_a_session():
    import subprocess
    import sys

    import dask.array as da

    from zarrx.dask.icechunk import to_icechunk
    from zarrx.errors import UsageError

    code = "import sys, zarrx, zarrx.dask; print('zarrx.dask.icechunk' in sys.modules, 'icechunk' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.split() == ["False"] * 2
    with pytest.raises(UsageError, match="Icechunk session"):
        to_icechunk(da.ones(2), {})


@pytest.mark.parametrize("kind, array", [("fork", "/grid"), ("session", "/grid"), ("dataset", "/lost/u")])
def test_a_dask_write_that_would_lose_its_writes_in_a_worker_is_refused(distributed, kind, array):
    chain = distributed[f"refused {kind}"]
    assert chain is not None, "the write was sent to the workers"
    zarrx_errors = [text for text in chain if text.startswith(f"StoreError: cannot send a write of array {array!r}")]
    assert zarrx_errors, chain  # distributed wraps it in its TypeError for what it could not send
    assert "Icechunk session" in zarrx_errors[0] and "session.fork()" in zarrx_errors[0]


VIRTUAL = RECIPE + """
import os, h5py, netCDF4
from zarr.codecs.numcodecs import Shuffle, Zlib
folder = sys.argv[1]
path = os.path.join(folder, "data.nc")
with netCDF4.Dataset(path, "w") as nc:  # chunked, one variable plain, one shuffled and deflated
    nc.createDimension("time", 6)
    nc.createDimension("x", 8)
    t = nc.createVariable("t", "f4", ("time", "x"), chunksizes=(2, 8), fill_value=False)
    t[:] = np.arange(48, dtype="f4").reshape(6, 8) / 4
    t.units = "K"
    z = nc.createVariable("z", "i4", ("time", "x"), chunksizes=(3, 4), zlib=True, complevel=4, fill_value=False)
    z[:] = np.arange(48, dtype="i4").reshape(6, 8) * 7
    nc.createVariable("time", "i8", ("time",))[:] = np.arange(6)
    nc.title = "virtual"

# the chunks of the file as virtual references, as VirtualiZarr writes them
prefix = f"file://{folder}/"
access = {prefix: icechunk.credentials.LocalFileSystemAccess}
config = icechunk.RepositoryConfig.default()
config.set_virtual_chunk_container(icechunk.VirtualChunkContainer(prefix, icechunk.local_filesystem_store(folder)))
storage = icechunk.local_filesystem_storage(os.path.join(folder, "repo"))
repo = icechunk.Repository.create(storage, config, authorize_virtual_chunk_access=access)
session = repo.writable_session("main")
root = zarr.group(session.store, attributes={"title": "virtual"})
with h5py.File(path, "r") as h5:
    for name in ("t", "z", "time"):
        variable = h5[name]
        chunks = variable.chunks or variable.shape
        compressors = [Shuffle(elementsize=variable.dtype.itemsize)] if variable.shuffle else []
        compressors += [Zlib(level=variable.compression_opts)] if variable.compression == "gzip" else []
        attributes = {"units": variable.attrs["units"].decode()} if "units" in variable.attrs else {}
        root.create_array(name, shape=variable.shape, chunks=chunks, dtype=variable.dtype, fill_value=None,
                          compressors=compressors, dimension_names=["time", "x"][: variable.ndim], attributes=attributes)
        if variable.chunks is None:
            session.store.set_virtual_ref(f"{name}/c/0", f"file://{path}", offset=variable.id.get_offset(),
                                          length=variable.id.get_storage_size())
            continue
        for index in range(variable.id.get_num_chunks()):
            info = variable.id.get_chunk_info(index)
            coords = "/".join(str(start // size) for start, size in zip(info.chunk_offset, chunks))
            session.store.set_virtual_ref(f"{name}/c/{coords}", f"file://{path}", offset=info.byte_offset, length=info.size)
session.commit("virtual references")

def described(ds):
    return {name: {"values": ds[name].values.tolist(), "dtype": str(ds[name].dtype), "attrs": dict(ds[name].attrs)}
            for name in sorted(ds.variables)} | {"attrs": dict(ds.attrs)}

read = icechunk.Repository.open(storage, authorize_virtual_chunk_access=access).readonly_session("main")
out["netcdf"] = described(xr.open_dataset(path))
out["engine=zarrx"] = described(xr.open_dataset(read.store, engine="zarrx"))
out["engine=zarrx chunks"] = described(xr.open_dataset(read.store, engine="zarrx", chunks={}))
out["engine=zarr"] = described(xr.open_dataset(read.store, engine="zarr"))
out["zarrx.open_array"] = {name: zarrx.open_array(read.store, name)[...].tolist() for name in ("t", "z", "time")}
out["chunk types"] = {name: str(read.chunk_type(f"/{name}", [0] * (1 if name == "time" else 2))) for name in ("t", "z", "time")}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def virtual(tmp_path_factory):
    return run_icechunk(VIRTUAL, str(tmp_path_factory.mktemp("virtual")))


def test_virtual_chunks_of_a_netcdf_file_read_through_zarrx_as_the_file_itself(virtual):
    netcdf = virtual["netcdf"]
    assert netcdf["t"]["values"] == (np.arange(48, dtype="f4").reshape(6, 8) / 4).tolist()
    assert netcdf["z"]["values"] == (np.arange(48).reshape(6, 8) * 7).tolist()
    assert netcdf["attrs"] == {"title": "virtual"} and netcdf["t"]["attrs"] == {"units": "K"}
    for reader in ("engine=zarrx", "engine=zarrx chunks", "engine=zarr"):
        assert virtual[reader] == netcdf, reader
    assert virtual["zarrx.open_array"] == {name: netcdf[name]["values"] for name in ("t", "z", "time")}
    assert {kind.rpartition(".")[2].lower() for kind in virtual["chunk types"].values()} == {"virtual"}, virtual["chunk types"]


def icechunk_examples() -> list[tuple[int, str]]:
    """(line, source) of the Icechunk examples of docs/stack.md: ``{code-block} python`` blocks
    with the class ``icechunk`` (tests/test_docs.py runs only plain ``python`` blocks, in this
    interpreter, which has no icechunk)."""
    from .test_docs import code_blocks

    examples = []
    for line, source in code_blocks(DOCS_PAGE, ("{code-block}",)):
        options = re.findall(r"^:(\w+):[ \t]*(.*)$", source, flags=re.M)
        if ("class", "icechunk") in options:
            body = "\n".join(text for text in source.splitlines() if not re.match(r"^:\w+:", text))
            examples.append((line, body))
    return examples


def test_the_icechunk_examples_of_the_docs_run(tmp_path):
    examples = icechunk_examples()
    assert len(examples) >= 4, "the Icechunk section of docs/stack.md lost its examples"
    script = tmp_path / "stack_examples.py"
    script.write_text("\n".join(f"# docs/stack.md:{line}\n{source}\n" for line, source in examples)
                      + "\nimport json\nprint(json.dumps({'ran': %d}))\n" % len(examples))  # fmt: skip
    assert run_icechunk(f"exec(compile(open({str(script)!r}).read(), {str(script)!r}, 'exec'))") == {
        "ran": len(examples)
    }


# -- in this interpreter: what zarrx does with zarr-python stores that behave as Icechunk's ----------
def no_consolidation_store():
    """A zarr-python MemoryStore that, like Icechunk's store, keeps no consolidated metadata."""
    import zarr

    class NoConsolidation(zarr.storage.MemoryStore):
        @property
        def supports_consolidated_metadata(self) -> bool:
            return False

    return NoConsolidation()


def test_a_store_without_consolidated_metadata_gets_none_written_looked_for_or_warned_about():
    import warnings

    import xarray as xr

    import zarrx
    import zarrx.xarray  # noqa: F401 (the .zarrx accessors)
    from zarrx.errors import StoreTypeError

    store = no_consolidation_store()
    ds = xr.Dataset({"t": (("x",), np.arange(4.0))}, coords={"x": np.arange(4)})
    ds.zarrx.to_zarr(store, mode="w")
    ds.zarrx.to_zarr(store, group="sub", mode="w", consolidated=True)  # as xarray: not where none is kept
    assert "consolidated_metadata" not in json.loads(zarrx.storage.make_store(store).get("zarr.json"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert xr.open_dataset(store, engine="zarrx").t.values.tolist() == [0.0, 1.0, 2.0, 3.0]
        assert xr.open_dataset(store, engine="zarrx", consolidated=True).x.values.tolist() == [0, 1, 2, 3]
    with pytest.raises(StoreTypeError, match="keeps no consolidated metadata"):
        zarrx.consolidate_metadata(store)


def test_a_write_into_a_zarr_python_memory_store_is_never_sent_to_another_process(tmp_path):
    import pickle

    import zarr

    import zarrx
    from zarrx.errors import StoreError

    array = zarrx.create_array(zarr.storage.MemoryStore(), "kept", shape=(4,), chunks=(2,), dtype="int8")
    assert array.store.process_local
    pickle.dumps(array.handle)  # reading is fine: the copy reads what was there
    with pytest.raises(StoreError, match="cannot send a write of array '/kept'.*keeps its writes in this process"):
        pickle.dumps(array.handle.evolve(for_writing=True))
    assert not zarrx.create_array(zarr.storage.LocalStore(str(tmp_path)), shape=(1,), dtype="u1").store.process_local
