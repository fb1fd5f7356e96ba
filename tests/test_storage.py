"""The store conformance suite (:class:`StoreSuite`), run on every store, plus store-specific tests."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import fsspec
import numpy as np
import pytest

from zarrx.errors import StoreTypeError, UsageError
from fsspec.implementations.local import LocalFileSystem
from fsspec.implementations.memory import MemoryFileSystem

from zarrx.errors import InvalidPathError, ReadOnlyError, StoreError
from zarrx.storage import (
    FsspecStore,
    LocalStore,
    MemoryStore,
    OffsetByteRequest,
    RangeByteRequest,
    Store,
    SuffixByteRequest,
    make_store,
)
from zarrx import concurrency as concurrency_module

DIGITS = b"0123456789"

BYTE_RANGES = [
    (RangeByteRequest(2, 5), b"234"),
    (RangeByteRequest(0, 10), DIGITS),
    (RangeByteRequest(0, 0), b""),
    (RangeByteRequest(4, 4), b""),
    (RangeByteRequest(8, 20), b"89"),  # runs past the end
    (RangeByteRequest(10, 12), b""),  # starts at the end
    (RangeByteRequest(20, 30), b""),  # starts past the end
    (OffsetByteRequest(0), DIGITS),
    (OffsetByteRequest(7), b"789"),
    (OffsetByteRequest(10), b""),
    (OffsetByteRequest(25), b""),
    (SuffixByteRequest(3), b"789"),
    (SuffixByteRequest(10), DIGITS),
    (SuffixByteRequest(25), DIGITS),  # longer than the value
    (SuffixByteRequest(0), b""),
]

# Keys that would leave the root or alias another key.
BAD_KEYS = ["../x", "/etc/passwd", "a/../../x", "a/..", "..", ".", "a/./b", "a//b", "a/", "", "a\\..\\x", "a\x00b"]

WRITES = {
    "set": lambda store, key: store.set(key, b"x"),
    "set_many": lambda store, key: store.set_many({key: b"x"}),
    "delete": lambda store, key: store.delete(key),
    "delete_many": lambda store, key: store.delete_many([key]),
    "delete_prefix": lambda store, key: store.delete_prefix(key + "/"),
}


class StoreSuite:
    """Every behaviour of the :class:`Store` contract.

    A subclass gives a fresh ``location`` fixture (where the data lives) and
    ``open_store(location, read_only)``, which must give stores sharing the data.
    """

    #: whether an unpickled store sees later writes of the original (False for memory)
    pickle_shares_data = True

    def open_store(self, location, read_only: bool = False) -> Store:
        raise NotImplementedError

    @pytest.fixture
    def store(self, location) -> Store:
        return self.open_store(location)

    @pytest.fixture
    def hierarchy(self, store) -> Store:
        """A small hierarchy: a group, an array with chunks, v2-style keys and dotted chunk keys."""
        store.set_many(
            {
                "zarr.json": b"root",
                "a/zarr.json": b"a",
                "a/b/zarr.json": b"b",
                "a/b/c/0/0": b"chunk00",
                "a/b/c/0/1": b"chunk01",
                "a/bc/zarr.json": b"bc",
                "v2/.zarray": b"{}",
                "v2/.zattrs": b"{}",
                "v2/0.0": b"v2 chunk",
                "v2/0.1": b"v2 chunk",
            }
        )
        return store

    # -- get / set ------------------------------------------------------------
    def test_get_missing_is_none(self, store):
        assert store.get("missing") is None
        assert store.get("missing/deeper/key") is None

    def test_set_then_get(self, store):
        store.set("a/b/zarr.json", b"{}")
        value = store.get("a/b/zarr.json")
        assert value == b"{}"
        assert type(value) is bytes

    def test_overwrite(self, store):
        store.set("k", b"first, longer value")
        store.set("k", b"second")
        assert store.get("k") == b"second"

    def test_zero_length_value(self, store):
        store.set("empty", b"")
        assert store.get("empty") == b""
        assert store.exists("empty")
        assert store.get("empty", RangeByteRequest(0, 5)) == b""
        assert store.get("empty", SuffixByteRequest(4)) == b""
        assert store.get_many(["empty"]) == {"empty": b""}

    @pytest.mark.parametrize("value", [bytearray(b"abc"), memoryview(b"abc"), np.frombuffer(b"abc", dtype="u1")])
    def test_bytes_like_values(self, store, value):
        store.set("k", value)
        result = store.get("k")
        assert result == b"abc" and type(result) is bytes

    def test_stored_value_does_not_follow_the_callers_buffer(self, store):
        buffer = bytearray(b"abc")
        store.set("k", buffer)
        buffer[:] = b"xyz"
        assert store.get("k") == b"abc"

    def test_large_value(self, store):
        value = os.urandom(5 * 2**20)
        store.set("big", value)
        assert store.get("big") == value
        assert store.get("big", RangeByteRequest(2**20, 2**20 + 7)) == value[2**20 : 2**20 + 7]

    @pytest.mark.parametrize(
        "key", ["c.0.1", "a/c.0.1", "0.0.0", "x.y/z.w", ".zarray", "a/.zattrs", "α/β", "a b/c", "x[0]", "y*", "q?"]
    )
    def test_keys_with_dots_and_unusual_characters(self, store, key):
        store.set(key, key.encode())
        assert store.get(key) == key.encode()
        assert store.get_many([key, "missing"]) == {key: key.encode(), "missing": None}
        assert key in list(store.list_prefix(""))
        store.delete(key)
        assert store.get(key) is None

    # -- byte ranges ------------------------------------------------------------
    @pytest.mark.parametrize("byte_range, expected", BYTE_RANGES, ids=repr)
    def test_byte_range(self, store, byte_range, expected):
        store.set("a/digits", DIGITS)
        assert store.get("a/digits", byte_range) == expected

    @pytest.mark.parametrize(
        "byte_range",
        [
            RangeByteRequest(0, 3),
            RangeByteRequest(0, 0),
            OffsetByteRequest(2),
            SuffixByteRequest(2),
            SuffixByteRequest(0),
        ],
        ids=repr,
    )
    def test_byte_range_of_missing_key_is_none(self, store, byte_range):
        assert store.get("missing", byte_range) is None
        assert store.get_ranges([("missing", byte_range)]) == [None]

    def test_get_ranges_in_order_with_repeats_and_missing_keys(self, store):
        store.set("a/digits", DIGITS)
        store.set("letters", b"abcdef")
        requests = [(key, byte_range) for byte_range, _ in BYTE_RANGES for key in ("a/digits", "missing")]
        requests.append(("letters", SuffixByteRequest(2)))
        requests.append(("letters", RangeByteRequest(1, 3)))
        expected = [value for _, value in BYTE_RANGES for value in (value, None)] + [b"ef", b"bc"]
        assert store.get_ranges(requests) == expected
        assert store.get_ranges([]) == []

    # -- batches ---------------------------------------------------------------
    def test_get_many_with_missing_keys(self, hierarchy):
        keys = ["a/zarr.json", "nope", "a/b/c/0/1", "a/b/c/9/9", "v2/0.0", "a/zarr.json"]
        assert hierarchy.get_many(keys) == {
            "a/zarr.json": b"a",
            "nope": None,
            "a/b/c/0/1": b"chunk01",
            "a/b/c/9/9": None,
            "v2/0.0": b"v2 chunk",
        }
        assert hierarchy.get_many([]) == {}

    def test_set_many_then_get_many(self, store):
        items = {f"arr/c/{i}/{j}": f"{i},{j}".encode() * (i + 1) for i in range(10) for j in range(10)}
        store.set_many(items)
        assert store.get_many(list(items)) == items
        store.set_many({})

    # -- delete ----------------------------------------------------------------
    def test_delete(self, hierarchy):
        hierarchy.delete("a/b/c/0/0")
        assert hierarchy.get("a/b/c/0/0") is None
        assert hierarchy.get("a/b/c/0/1") == b"chunk01"

    def test_delete_missing_is_ok(self, store):
        store.delete("missing")
        store.delete("missing/deeper/key")
        store.delete_many(["missing", "other/missing"])
        store.delete_prefix("missing/")

    def test_delete_many(self, hierarchy):
        hierarchy.delete_many(["a/b/c/0/0", "a/b/c/0/1", "missing"])
        assert sorted(hierarchy.list_prefix("a/b/")) == ["a/b/zarr.json"]

    def test_delete_last_key_leaves_no_prefix_behind(self, hierarchy):
        hierarchy.delete_many(["a/b/c/0/0", "a/b/c/0/1"])
        assert hierarchy.list_dir("a/b/") == ["zarr.json"]
        assert hierarchy.list_dir("a/b/c/") == []

    def test_delete_prefix(self, hierarchy):
        hierarchy.delete_prefix("a/b/")
        assert sorted(hierarchy.list_prefix("a/")) == ["a/bc/zarr.json", "a/zarr.json"]
        assert hierarchy.list_dir("a/") == ["bc", "zarr.json"]
        assert hierarchy.get("zarr.json") == b"root"

    def test_delete_prefix_of_everything(self, hierarchy):
        hierarchy.delete_prefix("")
        assert list(hierarchy.list_prefix("")) == []
        assert hierarchy.list_dir("") == []
        hierarchy.set("zarr.json", b"again")  # the store still works
        assert hierarchy.get("zarr.json") == b"again"

    def test_delete_prefix_with_glob_characters_deletes_only_that_prefix(self, store):
        store.set_many({"a[b]/zarr.json": b"1", "ab/zarr.json": b"2", "a*/zarr.json": b"3", "aX/zarr.json": b"4"})
        store.delete_prefix("a[b]/")
        store.delete_prefix("a*/")
        assert sorted(store.list_prefix("")) == ["aX/zarr.json", "ab/zarr.json"]

    def test_delete_prefix_on_a_key_is_not_the_key(self, hierarchy):
        hierarchy.delete_prefix("a/zarr.json/")
        assert hierarchy.get("a/zarr.json") == b"a"

    # -- listing ----------------------------------------------------------------
    def test_list_prefix(self, hierarchy):
        assert sorted(hierarchy.list_prefix("")) == sorted(
            [
                "zarr.json",
                "a/zarr.json",
                "a/b/zarr.json",
                "a/b/c/0/0",
                "a/b/c/0/1",
                "a/bc/zarr.json",
                "v2/.zarray",
                "v2/.zattrs",
                "v2/0.0",
                "v2/0.1",
            ]
        )
        assert sorted(hierarchy.list_prefix("a/b/")) == ["a/b/c/0/0", "a/b/c/0/1", "a/b/zarr.json"]
        assert sorted(hierarchy.list_prefix("a/b/c/0/")) == ["a/b/c/0/0", "a/b/c/0/1"]
        assert sorted(hierarchy.list_prefix("v2/")) == ["v2/.zarray", "v2/.zattrs", "v2/0.0", "v2/0.1"]
        assert list(hierarchy.list_prefix("missing/")) == []

    def test_list_prefix_without_slash_is_a_string_prefix(self, hierarchy):
        assert sorted(hierarchy.list_prefix("a/b")) == ["a/b/c/0/0", "a/b/c/0/1", "a/b/zarr.json", "a/bc/zarr.json"]
        assert sorted(hierarchy.list_prefix("v2/0.")) == ["v2/0.0", "v2/0.1"]

    def test_list_dir(self, hierarchy):
        assert hierarchy.list_dir("") == ["a", "v2", "zarr.json"]
        assert hierarchy.list_dir("a/") == ["b", "bc", "zarr.json"]
        assert hierarchy.list_dir("a/b/") == ["c", "zarr.json"]
        assert hierarchy.list_dir("a/b/c/0/") == ["0", "1"]
        assert hierarchy.list_dir("v2/") == [".zarray", ".zattrs", "0.0", "0.1"]
        assert hierarchy.list_dir("a") == ["b", "bc", "zarr.json"]  # the '/' is implied

    def test_list_dir_of_missing_prefix_or_key_is_empty(self, hierarchy):
        assert hierarchy.list_dir("missing/") == []
        assert hierarchy.list_dir("a/zarr.json/") == []

    def test_list_empty_store(self, store):
        assert list(store.list_prefix("")) == []
        assert store.list_dir("") == []

    # -- exists -----------------------------------------------------------------
    def test_exists(self, hierarchy):
        assert hierarchy.exists("a/zarr.json")
        assert "a/zarr.json" in hierarchy
        assert not hierarchy.exists("missing")
        assert "missing" not in hierarchy

    #: whether a prefix is a folder, which reading it as a key refuses (a local folder): a
    #: chunk's key made a folder would otherwise read as the fill value
    prefix_is_a_folder = False

    def test_a_prefix_is_not_a_key(self, hierarchy):
        reads = [lambda: hierarchy.get("a/b"), lambda: hierarchy.get("a/b", RangeByteRequest(0, 2)),
                 lambda: hierarchy.get_many(["a/b"])["a/b"]]  # fmt: skip
        for read in reads:
            if self.prefix_is_a_folder:
                with pytest.raises(StoreError, match="'a/b'.*a folder"):
                    read()
            else:
                assert read() is None
        assert not hierarchy.exists("a/b")
        hierarchy.delete("a/b")
        assert hierarchy.get("a/b/zarr.json") == b"b"

    # -- keys that escape or alias -------------------------------------------------
    @pytest.mark.parametrize("key", BAD_KEYS, ids=repr)
    def test_bad_keys_are_refused(self, store, key):
        for operation in (
            lambda: store.get(key),
            lambda: store.get_many([key]),
            lambda: store.get_ranges([(key, RangeByteRequest(0, 1))]),
            lambda: store.set(key, b"x"),
            lambda: store.set_many({key: b"x"}),
            lambda: store.delete(key),
            lambda: store.exists(key),
        ):
            with pytest.raises(InvalidPathError, match="invalid store key"):
                operation()

    @pytest.mark.parametrize("prefix", ["../", "/", "a//", "/etc/", "a/../../"], ids=repr)
    def test_bad_prefixes_are_refused(self, store, prefix):
        with pytest.raises(InvalidPathError, match="invalid key prefix"):
            store.list_prefix(prefix)
        with pytest.raises(InvalidPathError):
            store.list_dir(prefix)
        with pytest.raises(InvalidPathError):
            store.delete_prefix(prefix)

    # -- read-only ---------------------------------------------------------------
    @pytest.mark.parametrize("write", WRITES.values(), ids=WRITES.keys())
    def test_read_only_refuses_writes_naming_the_key(self, location, hierarchy, write):
        read_only = self.open_store(location, read_only=True)
        assert read_only.read_only
        with pytest.raises(ReadOnlyError, match="a/b/zarr.json"):
            write(read_only, "a/b/zarr.json")
        assert read_only.get("a/b/zarr.json") == b"b"
        assert hierarchy.get("a/b/zarr.json") == b"b"

    def test_read_only_reads(self, location, hierarchy):
        read_only = self.open_store(location, read_only=True)
        assert read_only.get_many(["a/zarr.json", "nope"]) == {"a/zarr.json": b"a", "nope": None}
        assert read_only.list_dir("") == ["a", "v2", "zarr.json"]
        assert read_only != hierarchy

    # -- identity -------------------------------------------------------------------
    def test_pickle_round_trip(self, hierarchy):
        clone = pickle.loads(pickle.dumps(hierarchy))
        assert type(clone) is type(hierarchy)
        assert clone.read_only == hierarchy.read_only
        assert clone.get("a/b/c/0/1") == b"chunk01"
        assert sorted(clone.list_prefix("")) == sorted(hierarchy.list_prefix(""))
        if self.pickle_shares_data:
            assert clone == hierarchy
            assert hash(clone) == hash(hierarchy)
            hierarchy.set("later", b"seen")
            assert clone.get("later") == b"seen"

    def test_pickle_keeps_read_only(self, location, hierarchy):
        clone = pickle.loads(pickle.dumps(self.open_store(location, read_only=True)))
        with pytest.raises(ReadOnlyError):
            clone.set("k", b"v")

    def test_equality_and_repr(self, location):
        assert self.open_store(location) == self.open_store(location)
        assert self.open_store(location) != self.open_store(location, read_only=True)
        assert type(self.open_store(location)).__name__ in repr(self.open_store(location))
        assert "read_only=True" in repr(self.open_store(location, read_only=True))


# -- the stores -------------------------------------------------------------------------
class TestLocalStore(StoreSuite):
    prefix_is_a_folder = True

    @pytest.fixture
    def location(self, tmp_path):
        return tmp_path / "store"

    def open_store(self, location, read_only=False):
        return LocalStore(location, read_only=read_only)


class TestMemoryStore(StoreSuite):
    pickle_shares_data = False

    @pytest.fixture
    def location(self):
        return {}

    def open_store(self, location, read_only=False):
        return MemoryStore(location, read_only=read_only)


class TestFsspecMemoryStore(StoreSuite):
    @pytest.fixture
    def location(self):
        root = f"memory://zarrx-test-{uuid.uuid4().hex}"
        yield root
        fs = fsspec.filesystem("memory")
        if fs.exists(root):
            fs.rm(root, recursive=True)

    def open_store(self, location, read_only=False):
        return FsspecStore.from_url(location, read_only=read_only)

    def test_unpickled_in_another_process_it_refuses_to_work(self, hierarchy):
        # there the memory file system is empty: reads would silently give fill values
        script = "import pickle, sys; pickle.loads(sys.stdin.buffer.read())"
        run = subprocess.run([sys.executable, "-c", script], input=pickle.dumps(hierarchy), capture_output=True)
        assert run.returncode != 0
        assert "StoreError: cannot use the in-memory store memory://" in run.stderr.decode()


class TestFsspecLocalStore(StoreSuite):
    @pytest.fixture
    def location(self, tmp_path):
        return str(tmp_path / "store")

    def open_store(self, location, read_only=False):
        return FsspecStore(LocalFileSystem(), location, read_only=read_only)


# -- LocalStore ---------------------------------------------------------------------
def _temporary_files(folder: Path) -> list[str]:
    return [name for _, _, names in os.walk(folder) for name in names if name.endswith(".tmp")]


def test_local_set_leaves_no_temporary_files(tmp_path):
    store = LocalStore(tmp_path)
    store.set_many({f"a/c/{i}": b"x" * i for i in range(20)})
    store.set("a/c/0", b"again")
    assert _temporary_files(tmp_path) == []
    assert sorted(os.listdir(tmp_path / "a" / "c")) == sorted(str(i) for i in range(20))


def test_local_failed_write_keeps_old_value_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    store = LocalStore(tmp_path)
    store.set("k", b"old")

    def failing_replace(source, target, **folders):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(StoreError, match="'k'"):
        store.set("k", b"new")
    monkeypatch.undo()
    assert store.get("k") == b"old"
    assert _temporary_files(tmp_path) == []


def test_local_concurrent_reader_never_sees_a_torn_value(tmp_path):
    store = LocalStore(tmp_path)
    size = 4 * 2**20
    store.set("a/chunk", b"\x00" * size)
    stop = threading.Event()
    seen: list[int] = []
    torn: list[bytes] = []

    def read_until_stopped():
        while not stop.is_set():
            value = store.get("a/chunk")
            if value is None or len(value) != size or value.count(value[:1]) != size:
                torn.append(value[:16] if value else value)
            else:
                seen.append(value[0])

    readers = [threading.Thread(target=read_until_stopped) for _ in range(2)]
    for reader in readers:
        reader.start()
    try:
        for pattern in range(1, 40):
            store.set("a/chunk", bytes([pattern]) * size)
    finally:
        stop.set()
        for reader in readers:
            reader.join()
    assert torn == []
    assert len(set(seen)) > 1  # the readers did overlap the writes
    assert _temporary_files(tmp_path) == []


@pytest.mark.parametrize("key", ["../x", "/x", "a/../../x", "../store-sibling/x", "a\\..\\..\\x"])
def test_local_keys_cannot_escape_the_root(tmp_path, key):
    root = tmp_path / "root"
    store = LocalStore(root)
    store.set("inside", b"1")
    with pytest.raises(InvalidPathError):
        store.set(key, b"escaped")
    with pytest.raises(InvalidPathError):
        store.set_many({"fine": b"1", key: b"escaped"})
    with pytest.raises(InvalidPathError):
        store.get(key)
    with pytest.raises(InvalidPathError):
        store.delete(key)
    with pytest.raises(InvalidPathError):
        store.delete_prefix(key + "/")
    assert sorted(os.listdir(tmp_path)) == ["root"]
    assert not os.path.exists("/x")


def test_local_delete_removes_empty_folders_up_to_the_root(tmp_path):
    root = tmp_path / "root"
    store = LocalStore(root)
    store.set("a/b/c/0/0", b"1")
    store.set("a/zarr.json", b"2")
    store.delete("a/b/c/0/0")
    assert sorted(os.listdir(root / "a")) == ["zarr.json"]
    store.delete("a/zarr.json")
    assert os.listdir(root) == []  # the root itself stays
    store.set("x/y", b"1")
    store.delete_prefix("x/")
    assert os.listdir(root) == []


def test_local_list_skips_temporary_files_but_not_dot_files(tmp_path):
    store = LocalStore(tmp_path)
    store.set("a/.zarray", b"{}")
    (tmp_path / "a" / f".0.0.{uuid.uuid4().hex}.tmp").write_bytes(b"half written")
    assert list(store.list_prefix("")) == ["a/.zarray"]
    assert store.list_dir("a/") == [".zarray"]


def test_local_read_only_on_missing_root_creates_nothing(tmp_path):
    store = LocalStore(tmp_path / "missing", read_only=True)
    assert store.get("zarr.json") is None
    assert list(store.list_prefix("")) == []
    assert store.list_dir("") == []
    assert not (tmp_path / "missing").exists()


def test_local_write_below_a_file_is_a_store_error_naming_the_key(tmp_path):
    store = LocalStore(tmp_path)
    store.set("a", b"a file")
    with pytest.raises(StoreError, match="'a/b'"):
        store.set("a/b", b"x")


def test_local_root_is_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    store = LocalStore("relative.zarr")
    assert store.root == str(tmp_path / "relative.zarr")
    assert store == LocalStore(tmp_path / "relative.zarr")


def test_local_get_many_of_1000_keys_is_concurrent_and_correct(tmp_path, monkeypatch):
    store = LocalStore(tmp_path)
    items = {f"c/{i // 100}/{i % 100}": os.urandom(i % 50) + str(i).encode() for i in range(1000)}
    store.set_many(items)
    threads = set()
    original_get = LocalStore.get

    def recording_get(self, key, byte_range=None):
        threads.add(threading.get_ident())
        return original_get(self, key, byte_range)

    monkeypatch.setattr(LocalStore, "get", recording_get)
    keys = list(items) + ["c/missing/0"]
    assert store.get_many(keys) == {**items, "c/missing/0": None}
    assert threads and threading.get_ident() not in threads  # read on the pool's threads


def test_local_get_ranges_reads_many_files_concurrently(tmp_path):
    store = LocalStore(tmp_path)
    store.set_many({f"s/{i}": bytes(range(i, i + 20)) for i in range(50)})
    requests = [(f"s/{i}", RangeByteRequest(j, j + 3)) for i in range(50) for j in (0, 5, 17)]
    expected = [bytes(range(i + j, i + min(j + 3, 20))) for i in range(50) for j in (0, 5, 17)]
    assert store.get_ranges(requests) == expected


def test_local_small_batches_run_inline(tmp_path, monkeypatch):
    store = LocalStore(tmp_path)
    store.set("k", b"v")
    monkeypatch.setattr(concurrency_module, "_get_pool", lambda: pytest.fail("a tiny batch used the pool"))
    assert store.get_many(["k", "k2"]) == {"k": b"v", "k2": None}
    store.set_many({"a": b"1", "b": b"2"})


def _read_in_child(store: LocalStore, keys: list[str]) -> dict[str, bytes | None]:
    return store.get_many(keys)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_local_pool_is_replaced_after_fork(tmp_path):
    store = LocalStore(tmp_path)
    items = {f"c/{i}": str(i).encode() for i in range(64)}
    store.set_many(items)
    assert store.get_many(list(items)) == items  # the parent's pool exists now
    with multiprocessing.get_context("fork").Pool(1) as pool:
        assert pool.apply_async(_read_in_child, (store, list(items))).get(timeout=60) == items


def test_local_store_works_in_a_spawned_process(tmp_path):
    store = LocalStore(tmp_path)
    store.set_many({"a/zarr.json": b"{}", "a/c/0": b"chunk"})
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        assert pool.apply_async(store.get, ("a/c/0",)).get(timeout=120) == b"chunk"
        assert pool.apply_async(store.get_many, (["a/zarr.json", "nope"],)).get(timeout=60) == {
            "a/zarr.json": b"{}",
            "nope": None,
        }
        pool.apply_async(store.set, ("a/c/1", b"from the child")).get(timeout=60)
    assert store.get("a/c/1") == b"from the child"


# -- FsspecStore --------------------------------------------------------------------
class _FailingMemoryFileSystem(MemoryFileSystem):
    """A memory file system that fails like remote back ends do.

    Reads of paths containing 'forbidden' are denied; like some HTTP servers,
    it answers a range starting past the end with an error (416) and knows no
    suffix ranges (negative start).
    """

    protocol = "zarrx-failing-memory"

    def cat_file(self, path, start=None, end=None, **kwargs):
        if "forbidden" in path:
            raise PermissionError(f"access denied: {path}")
        if start is not None and (start < 0 or start >= self.size(path)):
            raise OSError(f"416 Range Not Satisfiable: {path} bytes={start}-{end}")
        return super().cat_file(path, start=start, end=end, **kwargs)


@pytest.fixture
def failing_store():
    fs = _FailingMemoryFileSystem(skip_instance_cache=True)
    root = f"/zarrx-test-{uuid.uuid4().hex}"
    store = FsspecStore(fs, root)
    store.set_many({"ok": b"fine", "forbidden": b"secret"})
    yield store
    fs.rm(root, recursive=True)


def test_fsspec_backend_errors_are_store_errors_naming_the_key(failing_store):
    assert failing_store.get_many(["ok", "missing"]) == {"ok": b"fine", "missing": None}
    with pytest.raises(StoreError, match="'forbidden'") as caught:
        failing_store.get("forbidden")
    assert isinstance(caught.value.__cause__, PermissionError)
    with pytest.raises(StoreError, match="'forbidden'"):
        failing_store.get_many(["ok", "forbidden", "missing"])
    with pytest.raises(StoreError, match="'forbidden'"):
        failing_store.get_ranges([("ok", RangeByteRequest(0, 1)), ("forbidden", SuffixByteRequest(2))])


def test_fsspec_refused_ranges_are_retried_knowing_the_size(failing_store):
    failing_store.set("digits", DIGITS)
    for byte_range, expected in BYTE_RANGES:
        assert failing_store.get("digits", byte_range) == expected, byte_range
    requests = [("digits", byte_range) for byte_range, _ in BYTE_RANGES] + [("missing", OffsetByteRequest(3))]
    assert failing_store.get_ranges(requests) == [expected for _, expected in BYTE_RANGES] + [None]


def test_fsspec_get_many_is_one_batch_call(monkeypatch):
    store = FsspecStore.from_url(f"memory://zarrx-test-{uuid.uuid4().hex}")
    store.set_many({f"c/{i}": bytes([i]) for i in range(10)})
    calls = []
    original = type(store.fs).cat_ranges

    def counting_cat_ranges(self, paths, starts, ends, **kwargs):
        calls.append(len(paths))
        return original(self, paths, starts, ends, **kwargs)

    monkeypatch.setattr(type(store.fs), "cat_ranges", counting_cat_ranges)
    assert store.get_many([f"c/{i}" for i in range(12)]) == {
        f"c/{i}": (bytes([i]) if i < 10 else None) for i in range(12)
    }
    assert store.get_ranges([(f"c/{i}", OffsetByteRequest(0)) for i in range(3)]) == [b"\x00", b"\x01", b"\x02"]
    assert calls == [12, 3]
    store.delete_prefix("")


def test_fsspec_local_writes_are_atomic_and_tidy(tmp_path):
    store = FsspecStore(LocalFileSystem(), str(tmp_path))
    store.set("a/b/c/0", b"x")
    assert _temporary_files(tmp_path) == []
    store.delete("a/b/c/0")
    assert os.listdir(tmp_path) == []


def test_fsspec_from_url_with_storage_options():
    store = FsspecStore.from_url("simplecache::memory://zarrx-test-chained", storage_options={"memory": {}})
    assert isinstance(store, FsspecStore)


# -- make_store ---------------------------------------------------------------------
def test_make_store_returns_a_store_as_is():
    store = MemoryStore()
    assert make_store(store, mode="w") is store


def test_make_store_refuses_storage_options_with_a_store():
    with pytest.raises(StoreError, match="storage_options") as caught:
        make_store(MemoryStore(), storage_options={"anon": True, "secret": "hunter2"})
    assert "'secret'" in str(caught.value)
    assert "hunter2" not in str(caught.value)  # option values may be credentials


@pytest.mark.parametrize("as_path", [str, Path], ids=["str", "Path"])
def test_make_store_local_paths(tmp_path, monkeypatch, as_path):
    monkeypatch.chdir(tmp_path)
    store = make_store(as_path("data.zarr"), mode="w")
    assert store == LocalStore(tmp_path / "data.zarr")
    assert not store.read_only
    with pytest.raises(StoreError, match="storage_options"):
        make_store(as_path("data.zarr"), storage_options={"auto_mkdir": True})


def test_make_store_file_urls(tmp_path):
    assert make_store(f"file://{tmp_path}/a b.zarr") == LocalStore(tmp_path / "a b.zarr", read_only=True)
    assert make_store(f"file://{tmp_path}/a%20b.zarr") == LocalStore(tmp_path / "a b.zarr", read_only=True)
    assert make_store(f"file://localhost{tmp_path}/x") == LocalStore(tmp_path / "x", read_only=True)


def test_make_store_home_directory():
    assert make_store("~/data.zarr").root == os.path.join(os.path.expanduser("~"), "data.zarr")


@pytest.mark.parametrize("url", ["memory://zarrx-make-store", "simplecache::memory://zarrx-make-store"])
def test_make_store_fsspec_urls(url):
    store = make_store(url, mode="a")
    assert isinstance(store, FsspecStore)
    assert not store.read_only
    store.set("k", b"v")
    assert make_store(url).get("k") == b"v"
    store.delete_prefix("")


def test_make_store_fsmap(tmp_path):
    memory_map = fsspec.get_mapper(f"memory://zarrx-test-{uuid.uuid4().hex}")
    store = make_store(memory_map, mode="w")
    assert isinstance(store, FsspecStore) and store.root == memory_map.root
    store.set("k", b"v")
    assert memory_map["k"] == b"v"
    assert make_store(fsspec.get_mapper(str(tmp_path))) == LocalStore(tmp_path, read_only=True)


def test_make_store_dict_and_none():
    mapping: dict = {}
    store = make_store(mapping, mode="w")
    store.set("zarr.json", b"{}")
    assert mapping == {"zarr.json": b"{}"}
    fresh = make_store(None, mode="w")
    assert isinstance(fresh, MemoryStore) and list(fresh.list_prefix("")) == []


@pytest.mark.parametrize("mode, read_only", [("r", True), ("r+", False), ("a", False), ("w", False), ("w-", False)])
def test_make_store_modes(tmp_path, mode, read_only):
    assert make_store(tmp_path, mode=mode).read_only is read_only
    assert make_store({}, mode=mode).read_only is read_only
    assert make_store("memory://zarrx-modes", mode=mode).read_only is read_only


def test_make_store_bad_arguments():
    with pytest.raises(UsageError, match="mode"):
        make_store({}, mode="rw")
    with pytest.raises(StoreTypeError, match="as a store"):
        make_store(42)
    with pytest.raises(TypeError):  # also the builtin, for code that does not know zarrx
        make_store(42)


# -- byte requests ----------------------------------------------------------------------
@pytest.mark.parametrize(
    "make",
    [
        lambda: RangeByteRequest(-1, 2),
        lambda: RangeByteRequest(5, 2),
        lambda: OffsetByteRequest(-3),
        lambda: SuffixByteRequest(-1),
    ],
)
def test_invalid_byte_requests(make):
    with pytest.raises(ValueError):
        make()
