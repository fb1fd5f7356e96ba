"""Sharded reads from opened shards (zarrx.io.shards): a local store opens each shard once
(``Store.range_readers``), reads its index from the open file and lets the decoding threads read
the inner chunks from it; the shard table (zarrx.io.plan.shard_table) plans product selections
without a projection per inner chunk."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import zarrx
from zarrx.codecs.sharding import ShardingCodec
from zarrx.errors import ChunkDecodeError, OutsideStoreError, StoreError
from zarrx.io.plan import plan_objects, shard_table, table_rows
from zarrx.io.selection import BasicIndexer
from zarrx.storage import LocalStore, MemoryStore, MetricsStore, RangeByteRequest, SuffixByteRequest, WrapperStore

from tests.test_small_chunks import SELECTIONS as CHUNK_SELECTIONS, _data

SELECTIONS = [*CHUNK_SELECTIONS, np.s_[44:, 30:]]  # and the edge shards, cut by the array's end


def _sharded(path, **kwargs):
    array = zarrx.create_array(str(path), shape=(50, 33), chunks=(4, 5), shards=(8, 15), dtype="f4", fill_value=-1, **kwargs)
    array[...] = _data()
    return array


class Remote(WrapperStore):
    """The same store through get_ranges: the batched path of stores with round trips."""

    def get_ranges(self, requests, *, max_size=None):
        return super().get_ranges(requests, max_size=max_size)


# -- the store's range readers ---------------------------------------------------------------------
def test_a_local_range_reader_reads_one_version_of_the_file(tmp_path):
    store = LocalStore(tmp_path)
    store.set("a/b", b"0123456789")
    with store.range_readers() as open_value:
        value = open_value("a/b")
        assert (value.key, value.size) == ("a/b", 10)
        store.set("a/b", b"abcdefghijklmnop")  # renamed over it: the open file is the old one
        assert value.read(SuffixByteRequest(3)) == b"789"
        assert value.read(RangeByteRequest(8, 20)) == b"89"
        buffer = bytearray(4)
        assert value.readinto(2, memoryview(buffer)) == 4 and buffer == b"2345"
        assert value.readinto(8, memoryview(buffer)) == 2  # short only at the end
        assert open_value("a/missing") is None and open_value("a/b/c") is None  # missing; below a file
        with pytest.raises(StoreError, match="'a'.*a folder"):
            open_value("a")  # a folder is no value, and not missing either
    assert store.get("a/b") == b"abcdefghijklmnop"


def test_a_range_reader_keeps_the_stores_link_rules(tmp_path):
    outside = tmp_path / "outside"
    outside.write_bytes(b"secret")
    root = tmp_path / "root"
    root.mkdir()
    (root / "inside").write_bytes(b"data")
    os.symlink(outside, root / "leak")
    os.symlink(root / "inside", root / "alias")
    with LocalStore(root).range_readers() as open_value:
        with pytest.raises(OutsideStoreError, match="leak"):
            open_value("leak")
        assert open_value("alias").read() == b"data"
    with LocalStore(root, follow_external_links=True).range_readers() as open_value:
        assert open_value("leak").read() == b"secret"


def test_range_readers_are_offered_only_where_reads_are_plain_file_reads(tmp_path):
    store = LocalStore(tmp_path)
    store.set("k", b"v")
    with WrapperStore(store).range_readers() as open_value:
        assert open_value("k").read() == b"v"  # a wrapper changing nothing forwards them
    for other in (MetricsStore(store), Remote(store), MemoryStore({"k": b"v"})):
        with other.range_readers() as open_value:
            assert open_value is None, other  # counting, other get_ranges, no files: none


def test_a_range_readers_block_closes_what_it_opened(tmp_path):
    store = LocalStore(tmp_path)
    store.set("k", b"value")
    before = len(os.listdir("/proc/self/fd"))
    with store.range_readers() as open_value:
        values = [open_value("k") for _ in range(20)]
        assert len(os.listdir("/proc/self/fd")) == before + 20
    assert len(os.listdir("/proc/self/fd")) == before
    assert values[0].size == 5


# -- reads -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("selection", SELECTIONS, ids=str)
def test_opened_shard_reads_equal_the_data_and_the_batched_path(tmp_path, selection):
    array = _sharded(tmp_path)
    expected = _data()[selection]
    np.testing.assert_array_equal(array[selection], expected)
    batched = zarrx.open_array(Remote(LocalStore(tmp_path)))
    np.testing.assert_array_equal(batched[selection], expected)
    np.testing.assert_array_equal(array.oindex[selection] if selection != np.s_[...] else array[...], expected)


def test_missing_shards_and_empty_inner_chunks_read_as_the_fill_value(tmp_path):
    array = zarrx.create_array(str(tmp_path), shape=(50, 33), chunks=(4, 5), shards=(8, 15), dtype="f4", fill_value=-1)
    array[9:11, 16:18] = 7  # one shard, one inner chunk of it; the rest of it is empty
    expected = np.full((50, 33), -1, dtype="f4")
    expected[9:11, 16:18] = 7
    for selection in SELECTIONS:
        np.testing.assert_array_equal(array[selection], expected[selection])


def test_index_arrays_read_through_the_object_plans(tmp_path):
    array = _sharded(tmp_path)
    rows, columns = np.array([0, 17, 49, 3]), np.array([32, 0, 5])
    assert shard_table(array.handle, zarrx.io.selection.OrthogonalIndexer((rows, columns), array.shape, (4, 5))) is None
    np.testing.assert_array_equal(array.oindex[rows, columns], _data()[np.ix_(rows, columns)])
    np.testing.assert_array_equal(array.vindex[rows[:3], columns], _data()[rows[:3], columns])


def test_the_shard_table_plans_what_plan_objects_plans(tmp_path):
    array = _sharded(tmp_path)
    handle = array.handle
    for selection in SELECTIONS:
        indexer = BasicIndexer(selection, handle.shape, handle.io_chunk_shape)
        planned = {plan.key: [projection.chunk_coords for _, projection in plan.pieces] for plan in plan_objects(handle, indexer)}
        table = {
            key: [coords for _, coords, _, _ in table_rows(per_dimension, kept)]
            for key, _, per_dimension, _, kept in shard_table(handle, BasicIndexer(selection, handle.shape, handle.io_chunk_shape))
        }
        assert table == planned, selection


def test_explain_shows_an_index_read_per_shard_and_a_read_per_inner_chunk(tmp_path):
    array = _sharded(tmp_path)
    plan = array.explain(np.s_[6:10, 3:7])  # 2 shards, 2 inner chunks of each
    kinds = [(request.kind, request.key, request.chunks) for request in plan.requests]
    assert kinds == [
        ("shard index", "c/0/0", ()), ("inner chunks", "c/0/0", ((1, 0),)), ("inner chunks", "c/0/0", ((1, 1),)),
        ("shard index", "c/1/0", ()), ("inner chunks", "c/1/0", ((2, 0),)), ("inner chunks", "c/1/0", ((2, 1),)),
    ]  # fmt: skip
    unread = array.explain(np.s_[6:10, 3:7], read_index=False)
    assert [request.kind for request in unread.requests] == ["shard index"] * 2
    assert not unread.exact


# -- damage ------------------------------------------------------------------------------------------
def test_an_index_pointing_past_the_end_of_the_file_is_refused_naming_the_shard(tmp_path):
    array = _sharded(tmp_path)
    path = tmp_path / "c" / "1" / "0"
    raw = path.read_bytes()
    index_size = 16 * 2 * 3 + 4  # 2 x 3 inner chunks, then the crc32c
    path.write_bytes(raw[: len(raw) // 3] + raw[-index_size:])  # the data cut, the index kept
    with pytest.raises(ChunkDecodeError, match=r"'c/1/0'.*points past the end"):
        array[8:16, 0:15]


E = 2**64 - 1  # an empty inner chunk's offset and size


@pytest.mark.parametrize("entries, bad", [
    ([(0, 10), (10, 20), (30, 70)], None),                    # every entry inside the 100 bytes of data
    ([(0, 10), (E, E), (90, 10)], None),                      # an empty inner chunk, the rest inside
    ([(0, 10), (60, 200), (30, 10)], ("past", (1,))),         # offset and size each inside, their sum past the end
    ([(0, 10), (E, E), (95, 60)], ("past", (2,))),            # the same beside an empty one
    ([(0, 10), (153, 0), (30, 10)], ("past", (1,))),          # an offset past the end
    ([(E, 5), (0, 10), (10, 10)], ("past", (0,))),            # half empty: an offset but no size of an empty chunk
    ([(0, E - 5), (0, 10), (10, 10)], ("past", (0,))),        # a size that would overflow the sum
    ([(0, 10), (60, 50), (30, 10)], ("index", (1,))),         # a sum inside the shard, into its index
    ([(0, 10), (E, E), (100, 52)], ("index", (2,))),          # the index's own bytes, read as data
    ([(0, 10), (101, 0), (30, 10)], ("index", (1,))),         # an offset inside the index
])  # fmt: skip
def test_an_index_is_checked_against_the_shard_size_entry_by_entry(entries, bad):
    """Every entry must lie inside a shard of known size and outside its index (at the end, after
    100 bytes of data here): all of it present, some empty, or each wrong in its own way (the
    check takes a shortcut when nothing is empty or outside the data)."""
    array = zarrx.create_array(MemoryStore(), shape=(3,), chunks=(1,), shards=(3,), dtype="u1")
    codec, spec = array.handle.sharding, array.handle.object_spec((0,))
    raw = codec.index_codecs.encode(np.array(entries, dtype=np.uint64), codec.index_spec(spec))
    size = 100 + codec.index_size(spec)  # 152 bytes: the index is bytes 100 to 152
    if bad is None:
        np.testing.assert_array_equal(codec.decode_index(raw, spec, "c/0", shard_size=size), entries)
    else:
        what = "points past the end" if bad[0] == "past" else r"points into the shard's own index \(bytes 100 to 152\)"
        with pytest.raises(ChunkDecodeError, match=rf"'c/0'.*inner chunk {re.escape(str(bad[1]))} {what}"):
            codec.decode_index(raw, spec, "c/0", shard_size=size)
    np.testing.assert_array_equal(codec.decode_index(raw, spec, "c/0"), entries)  # size unknown: not checked


@pytest.mark.parametrize("entries, bad", [
    ([(52, 10), (62, 20), (82, 70)], None),        # every entry after the 52-byte index, inside the shard
    ([(52, 10), (E, E), (142, 10)], None),         # an empty one beside them
    ([(52, 10), (0, 52), (82, 10)], (1,)),         # the index's own bytes, read as data
    ([(52, 10), (E, E), (40, 20)], (2,)),          # an entry that starts inside the index
])  # fmt: skip
def test_an_index_at_the_start_is_checked_against_its_own_bytes_with_or_without_the_size(entries, bad):
    array = zarrx.create_array(MemoryStore(), shape=(3,), chunks=(3,), dtype="u1", compressors=None,
                               serializer=ShardingCodec(chunk_shape=(1,), index_location="start"))  # fmt: skip
    codec, spec = array.handle.sharding, array.handle.object_spec((0,))
    assert codec.index_location == "start" and codec.index_size(spec) == 52
    raw = codec.index_codecs.encode(np.array(entries, dtype=np.uint64), codec.index_spec(spec))
    for size in (152, None):  # the index's bytes are known without the shard's size
        if bad is None:
            np.testing.assert_array_equal(codec.decode_index(raw, spec, "c/0", shard_size=size), entries)
        else:
            with pytest.raises(ChunkDecodeError, match=rf"'c/0'.*inner chunk {re.escape(str(bad))} points into the "
                                                       r"shard's own index \(bytes 0 to 52\)"):  # fmt: skip
                codec.decode_index(raw, spec, "c/0", shard_size=size)


class Watched(WrapperStore):
    """A local store whose range readers call ``after_read(value, byte_range, data)`` and
    ``after_readinto(value, start, found)`` after each read of theirs."""

    def after_read(self, value, byte_range, data):
        pass

    def after_readinto(self, value, start, found):
        pass

    @contextlib.contextmanager
    def range_readers(self, max_size=None):
        store = self

        class Opened:
            def __init__(self, value):
                self.value, self.key, self.size = value, value.key, value.size

            def read(self, byte_range=None):
                data = self.value.read(byte_range)
                store.after_read(self.value, byte_range, data)
                return data

            def readinto(self, start, buffer):
                found = self.value.readinto(start, buffer)
                store.after_readinto(self.value, start, found)
                return found

        with self.inner.range_readers(max_size) as open_value:
            yield lambda key: None if (value := open_value(key)) is None else Opened(value)


class CutAfterIndex(Watched):
    """Each shard changed on disk by ``change(store, key)`` right after its index is read."""

    def __init__(self, inner, change):
        super().__init__(inner)
        self.change = change

    def after_read(self, value, byte_range, data):
        self.change(self.inner, value.key)


class CountingReaders(Watched):
    """What the range readers read: (key, start, end) per read."""

    def __init__(self, inner):
        super().__init__(inner)
        self.reads = []

    def after_read(self, value, byte_range, data):
        start = value.size - len(data) if isinstance(byte_range, SuffixByteRequest) else byte_range.start
        self.reads.append((value.key, start, start + len(data)))

    def after_readinto(self, value, start, found):
        self.reads.append((value.key, start, start + found))


def test_a_shard_cut_short_while_being_read_is_an_error_not_stale_bytes(tmp_path):
    _sharded(tmp_path)
    array = zarrx.open_array(CutAfterIndex(LocalStore(tmp_path), lambda store, key: os.truncate(store.local_path(key), 10)))
    with pytest.raises(ChunkDecodeError, match=r"'c/1/0' inner chunk \(2, 0\): the shard ended .* cut short"):
        array[8:12, 0:5]


def test_a_shard_replaced_while_being_read_is_read_whole_from_its_old_version(tmp_path):
    _sharded(tmp_path)
    replacement = zarrx.create_array(str(tmp_path / "other"), shape=(50, 33), chunks=(4, 5), shards=(8, 15), dtype="f4")
    replacement[...] = -_data()

    def replace(store, key):
        store.set(key, (tmp_path / "other" / key).read_bytes())

    array = zarrx.open_array(CutAfterIndex(LocalStore(tmp_path), replace))
    np.testing.assert_array_equal(array[8:16, 0:15], _data()[8:16, 0:15])  # the version it opened
    np.testing.assert_array_equal(zarrx.open_array(str(tmp_path))[8:16, 0:15], -_data()[8:16, 0:15])


def test_reading_thousands_of_shards_keeps_the_open_files_bounded(tmp_path):
    # 1,200 shards of one inner chunk each, read whole with at most 400 descriptors
    script = f"""
import resource, numpy as np, zarrx
array = zarrx.create_array({str(tmp_path)!r}, shape=(1200, 4), chunks=(1, 4), shards=(1, 4), dtype="i4")
array[...] = np.arange(4800, dtype="i4").reshape(1200, 4)
resource.setrlimit(resource.RLIMIT_NOFILE, (400, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
assert (zarrx.open_array({str(tmp_path)!r})[...] == np.arange(4800).reshape(1200, 4)).all()
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "ok", done.stderr[-2000:]


@pytest.mark.parametrize("selection", SELECTIONS, ids=str)
def test_explain_predicts_exactly_the_reads_of_opened_shards(tmp_path, selection):
    _sharded(tmp_path)
    store = CountingReaders(LocalStore(tmp_path))
    array = zarrx.open_array(store)
    predicted = array.explain(selection)
    store.reads.clear()
    np.testing.assert_array_equal(array[selection], _data()[selection])
    def bounds(request):
        if isinstance(request.byte_range, RangeByteRequest):
            return request.key, request.byte_range.start, request.byte_range.end
        size = os.path.getsize(tmp_path / request.key)  # a suffix: the index at the end
        return request.key, size - request.byte_range.suffix, size

    assert sorted(store.reads) == sorted(map(bounds, predicted.requests))
    assert len(store.reads) > 0 or _data()[selection].size == 0
