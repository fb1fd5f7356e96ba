"""What the hostile-input probe found (issue 30): each case a clean zarrx.errors error naming
what is wrong, and nothing deleted.

* ``zarrx convert SRC DST --overwrite`` where DST overlaps SRC (is it, holds it, is inside it):
  refused before anything is touched;
* a shard index whose entries point into the index itself: refused, naming the shard;
* a chunk (or shard) key that is a folder: refused, naming the key, by every way of reading.
"""

from __future__ import annotations

import os
import uuid

import fsspec
import numpy as np
import pytest

import zarrx
from zarrx.errors import ChunkDecodeError, StoreError, UsageError
from zarrx.storage import LocalStore, MemoryStore
from zarrx.tools.cli import main


def _files(folder) -> dict[str, bytes]:
    """Every file below ``folder`` and its bytes (what must survive a refused command)."""
    found = {}
    for parent, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(parent, name)
            with open(path, "rb") as file:
                found[os.path.relpath(path, folder)] = file.read()
    return found


# -- convert into (or around) its own source ------------------------------------------------


@pytest.fixture
def data(tmp_path, monkeypatch):
    """``data/src``: a small v2 array; the working directory is ``tmp_path`` (relative paths)."""
    monkeypatch.chdir(tmp_path)
    source = zarrx.create_array(str(tmp_path / "data" / "src"), shape=(6,), chunks=(2,), dtype="i2", zarr_format=2)
    source[:] = np.arange(6)
    return tmp_path / "data"


@pytest.mark.parametrize("src, dst, relation", [
    ("data/src", "data", "holds the source"),                 # the probe's case: overwrite deleted the source
    ("data/src", ".", "holds the source"),
    ("data/src", "data/src/copy", "is inside the source"),
    ("data/src", "data/../data/src", "is the source store itself"),
    ("data/src", "link-to-src", "is the source store itself"),   # a symbolic link to the source
    ("data/src", "link-to-data", "holds the source"),
    ("link-to-src", "data/src/inner", "is inside the source"),
])  # fmt: skip
def test_convert_refuses_a_destination_overlapping_the_source_before_touching_anything(data, capsys, src, dst, relation):
    os.symlink("data/src", "link-to-src")
    os.symlink("data", "link-to-data")
    before = _files(data)
    assert main(["convert", src, dst, "--overwrite", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("zarrx: error: cannot convert ") and err.count("\n") == 1, err
    assert relation in err and "Traceback" not in err
    assert "LocalStore(" in err and err.count("LocalStore(") == 2  # naming both
    assert _files(data) == before  # nothing deleted, nothing written
    with pytest.raises(UsageError, match=f"cannot convert .* into .*{relation}"):
        zarrx.convert(src, dst, overwrite=True, progress=False)
    assert _files(data) == before


def test_convert_of_a_node_refuses_its_own_folder_but_takes_a_sibling(data):
    group = zarrx.create_group(str(data / "tree"))
    group.create_array("a", shape=(4,), chunks=(2,), dtype="i1")[:] = [1, 2, 3, 4]
    before = _files(data / "tree")
    for dst in ("data/tree/a", "data/tree/a/x", "data/tree", "data"):
        with pytest.raises(UsageError, match="node '/a'"):
            zarrx.convert("data/tree", dst, path="a", overwrite=True, progress=False)
    assert _files(data / "tree") == before
    copy = zarrx.convert("data/tree", "data/tree/b", path="a", progress=False)  # beside the node: fine
    assert copy[:].tolist() == [1, 2, 3, 4]
    assert zarrx.open_array("data/tree", "a")[:].tolist() == [1, 2, 3, 4]


def test_convert_refuses_overlapping_urls_after_normalizing_them():
    root = f"memory://probe-{uuid.uuid4().hex}"
    source = zarrx.create_array(f"{root}/data/src", shape=(4,), chunks=(2,), dtype="i1")
    source[:] = [1, 2, 3, 4]
    fs = fsspec.filesystem("memory")
    try:
        before = sorted(fs.find(root))
        for dst in (f"{root}/data", f"{root}/data/src/", f"{root}/data/x/../src/deeper", root):
            with pytest.raises(UsageError, match="cannot convert .* into "):
                zarrx.convert(f"{root}/data/src", dst, overwrite=True, progress=False)
        assert sorted(fs.find(root)) == before
        assert zarrx.convert(f"{root}/data/src", f"{root}/data/srcx", progress=False)[:].tolist() == [1, 2, 3, 4]
    finally:
        fs.rm(root, recursive=True)


def test_convert_between_mappings_refuses_only_the_same_one():
    source = zarrx.create_array({}, shape=(2,), chunks=(1,), dtype="i1")
    with pytest.raises(UsageError, match="is the source store itself"):
        zarrx.convert(source.store, source.store, overwrite=True, progress=False)
    assert zarrx.convert(source.store, MemoryStore(), progress=False).shape == (2,)


# -- a shard index pointing into itself -----------------------------------------------------


def _point_into_the_index(store, key, array, inner=0):
    """Rewrite the index of shard ``key`` so that inner chunk ``inner`` is the index's own bytes."""
    codec, spec = array.handle.sharding, array.handle.object_spec((0,))
    raw = bytearray(store.get(key))
    size = codec.index_size(spec)
    start = 0 if codec.index_location == "start" else len(raw) - size
    entries = codec.decode_index(bytes(raw[start : start + size]), spec, key).copy()
    entries.reshape(-1, 2)[inner] = (start, size)
    raw[start : start + size] = codec.index_codecs.encode(entries, codec.index_spec(spec))  # a valid checksum
    store.set(key, bytes(raw))


@pytest.mark.parametrize("where", ["local", "memory"])
def test_a_shard_index_pointing_into_itself_is_refused_naming_the_shard(tmp_path, where):
    store = LocalStore(tmp_path / "s.zarr") if where == "local" else MemoryStore()
    # raw inner chunks of 16 bytes, the index's size (16 x 2 + 4 = 36) is no multiple: any cut is wrong
    array = zarrx.create_array(store, shape=(8,), chunks=(2,), shards=(8,), dtype="i8", compressors=None)
    array[...] = np.arange(8)
    _point_into_the_index(store, "c/0", array)
    before = store.get("c/0")
    message = r"'c/0'.*inner chunk \(0,\) points into the shard's own index"
    with pytest.raises(ChunkDecodeError, match=message):
        array[...]  # a whole shard: its size is known
    for read in (lambda: array[0:2], lambda: array[0]):
        # a partial read of a local file knows the size too; a store read in byte ranges does not,
        # and then the index's bytes fail to decode as the inner chunk (here: the wrong size)
        with pytest.raises(ChunkDecodeError, match=message if where == "local" else "'c/0 inner chunk"):
            read()
    with pytest.raises(ChunkDecodeError, match="'c/0'.*own index"):
        array[1] = 5  # a partial write reads the shard first
    assert store.get("c/0") == before  # nothing written, nothing deleted


def test_a_shard_index_at_the_start_pointing_into_itself_is_refused_on_every_read(tmp_path):
    from zarrx.codecs.sharding import ShardingCodec

    store = MemoryStore()
    array = zarrx.create_array(store, shape=(8,), chunks=(8,), dtype="i8", compressors=None,
                               serializer=ShardingCodec(chunk_shape=(2,), index_location="start"))  # fmt: skip
    array[...] = np.arange(8)
    _point_into_the_index(store, "c/0", array, inner=3)
    for read in (lambda: array[...], lambda: array[6:8], lambda: array[7]):  # whole and partial reads
        with pytest.raises(ChunkDecodeError, match=r"'c/0'.*inner chunk \(3,\) points into the shard's own index"):
            read()
    with pytest.raises(ChunkDecodeError, match="'c/0'.*own index"):
        array[0:2]  # the index is refused whole, whichever inner chunks a read wants


# -- a chunk key that is a folder -----------------------------------------------------------


@pytest.mark.parametrize("sharded", [False, True], ids=["chunk", "shard"])
def test_a_chunk_key_that_is_a_folder_is_refused_naming_the_key(tmp_path, sharded):
    options = dict(chunks=(2, 2), shards=(4, 4)) if sharded else dict(chunks=(2, 2))
    array = zarrx.create_array(str(tmp_path / "a.zarr"), shape=(8, 8), dtype="i2", fill_value=-1, **options)
    array[...] = 7
    key = "c/1/0"
    path = tmp_path / "a.zarr" / "c" / "1" / "0"
    path.unlink()
    path.mkdir()
    (path / "stray").write_bytes(b"x")  # a folder with something in it
    array = zarrx.open_array(str(tmp_path / "a.zarr"), mode="r+")
    unit = 4 if sharded else 2
    reads = [lambda: array[...], lambda: array[unit : unit + 1, 0:1], lambda: array.oindex[[unit], [0, 1]]]
    for read in reads:
        with pytest.raises(StoreError, match=f"'{key}'.*a folder"):
            read()
    with pytest.raises(StoreError, match=f"'{key}'"):
        array[unit, 0] = 3  # a partial write reads it first
    assert (path / "stray").read_bytes() == b"x"  # nothing deleted
    assert array[0:unit, :].tolist() == [[7] * 8] * unit  # the rest reads as stored


@pytest.mark.parametrize("content", [False, True], ids=["empty", "with-a-file"])
def test_verify_reports_a_folder_at_a_chunk_key_as_unreadable_not_missing(tmp_path, content):
    array = zarrx.create_array(str(tmp_path / "a.zarr"), shape=(6,), chunks=(2,), dtype="i2")
    array[...] = 7
    path = tmp_path / "a.zarr" / "c" / "1"
    path.unlink()
    path.mkdir()
    if content:
        (path / "stray").write_bytes(b"x")
    report = zarrx.verify(str(tmp_path / "a.zarr"))
    assert not report.ok and [problem.key for problem in report.corrupt] == ["c/1"]
    assert "a folder" in report.corrupt[0].error and report.missing == [] and report.missing_count == 0
    (path / "stray").unlink(missing_ok=True)
    path.rmdir()  # absent now: missing, which is legal
    report = zarrx.verify(str(tmp_path / "a.zarr"))
    assert report.ok and report.missing == ["c/1"]


def test_every_way_a_local_store_reads_refuses_a_folder_at_a_key(tmp_path):
    from zarrx.storage.store import RangeByteRequest

    store = LocalStore(tmp_path / "s")
    store.set("c/0/0", b"chunk")
    store.set("c/0/1/x", b"inside")  # c/0/1 is a folder
    key = "c/0/1"
    reads = {
        "get": lambda: store.get(key),
        "get range": lambda: store.get(key, RangeByteRequest(0, 2)),
        "get_many": lambda: store.get_many(["c/0/0", key]),
        "get_ranges": lambda: store.get_ranges([("c/0/0", RangeByteRequest(0, 1)), (key, RangeByteRequest(0, 1))]),
    }
    for name, read in reads.items():
        with pytest.raises(StoreError, match=f"'{key}'.*a folder"):
            read()
    with store.batch_reader() as read_file, pytest.raises(StoreError, match=f"'{key}'.*a folder"):
        read_file(key)
    with store.range_readers() as open_value:
        if open_value is not None:
            with pytest.raises(StoreError, match=f"'{key}'.*a folder"):
                open_value(key)
    # a missing key, or one below a file, is still absent; a folder is no value
    assert store.get("c/0/2") is None and store.get("c/0/0/x") is None
    assert not store.exists(key) and store.exists("c/0/0")
    assert store.get("c/0/1/x") == b"inside"
