"""The small-chunk read path: chunk tables (zarrx.io.plan.chunk_table), one read loop per
thread (zarrx.io.execute), and the local store's batch reader (zarrx.storage.batch_reads)."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

import zarrx
from zarrx.errors import ChunkDecodeError, OutsideStoreError, StoreError
from zarrx.io.execute import FIRST_PIPELINE_ROWS
from zarrx.io.plan import chunk_table
from zarrx.io.selection import BasicIndexer, OrthogonalIndexer
from zarrx.storage import LocalStore, MemoryStore, WrapperStore
from zarrx.storage import batch_files
from zarrx.storage.containment import RootFolder

SELECTIONS = [
    np.s_[...],
    np.s_[3:47, 5:29],
    np.s_[::3, ::-2],
    np.s_[-1:2:-5, 7],
    np.s_[11, 3:4],
    np.s_[12, 22],
    np.s_[48:, 31:],  # the edge chunks, cut by the array's end
    np.s_[5:5, :],  # empty
]


def _data(shape=(50, 33)) -> np.ndarray:
    return np.arange(np.prod(shape), dtype="f4").reshape(shape) * 0.5


class Remote(WrapperStore):
    """The same store, read as one with round trips (batched get_many, the other path)."""

    reads_are_local = False


@pytest.mark.parametrize("selection", SELECTIONS)
def test_the_table_is_the_product_of_the_projections(selection):
    array = zarrx.create_array(MemoryStore(), "t", shape=(50, 33), chunks=(4, 5), dtype="f4")
    handle = array.handle
    rows = list(chunk_table(handle, BasicIndexer(selection, handle.shape, handle.io_chunk_shape)))
    projections = list(BasicIndexer(selection, handle.shape, handle.io_chunk_shape))
    assert [row[1] for row in rows] == [p.chunk_coords for p in projections]
    assert [row[0] for row in rows] == [handle.object_key(p.chunk_coords) for p in projections]
    assert [row[2] for row in rows] == [p.out_selection for p in projections]
    for row, projection in zip(rows, projections):
        if row[3] is None:  # the whole chunk: complete and the chunk's own shape in the output
            assert projection.is_complete_chunk
            assert [s.stop - s.start for s in row[2]] == list(handle.spec.shape)
        else:
            assert row[3] == projection.chunk_selection


def test_no_table_where_chunk_selections_are_not_a_product():
    array = zarrx.create_array(MemoryStore(), "t", shape=(50, 33), chunks=(4, 5), dtype="f4")
    handle = array.handle
    assert chunk_table(handle, OrthogonalIndexer((np.array([1, 7, 3]), slice(None)), handle.shape, handle.io_chunk_shape)) is None
    sharded = zarrx.create_array(MemoryStore(), "s", shape=(50, 33), chunks=(4, 5), shards=(8, 10), dtype="f4")
    assert chunk_table(sharded.handle, BasicIndexer(np.s_[:], sharded.shape, sharded.handle.io_chunk_shape)) is None


@pytest.mark.parametrize("compressors", [None, "zstd", "gzip", "blosc"])
@pytest.mark.parametrize("selection", SELECTIONS)
def test_small_chunk_reads_equal_numpy_and_the_batched_path(tmp_path, compressors, selection):
    data = _data()
    array = zarrx.create_array(tmp_path / "a.zarr", shape=data.shape, chunks=(4, 5), dtype="f4", fill_value=-1,
                               compressors=compressors)  # fmt: skip
    array[...] = data
    array[20:28, 10:20] = -1  # these chunks are all fill value: not stored
    data[20:28, 10:20] = -1
    local = zarrx.open_array(tmp_path / "a.zarr")[selection]
    batched = zarrx.open_array(Remote(LocalStore(tmp_path / "a.zarr")))[selection]
    np.testing.assert_array_equal(local, data[selection])
    np.testing.assert_array_equal(batched, data[selection])
    assert local.dtype == batched.dtype == data.dtype


def test_a_zero_dimensional_array_and_a_missing_one(tmp_path):
    scalar = zarrx.create_array(tmp_path / "s.zarr", shape=(), chunks=(), dtype="i8", fill_value=3)
    assert scalar[...] == 3
    scalar[...] = 42
    assert zarrx.open_array(tmp_path / "s.zarr")[...] == 42
    empty = zarrx.create_array(tmp_path / "e.zarr", shape=(9, 9), chunks=(2, 2), dtype="i2", fill_value=7)
    np.testing.assert_array_equal(empty[...], np.full((9, 9), 7, "i2"))


def test_small_chunk_reads_go_through_the_batch_reader(tmp_path):
    class Counting(LocalStore):
        readers = 0
        gets = 0
        lock = threading.Lock()

        def batch_reader(self, max_size=None):
            with Counting.lock:
                Counting.readers += 1
            return super().batch_reader(max_size)

        def get(self, key, byte_range=None):
            Counting.gets += 1
            return super().get(key, byte_range)

    data = _data((64, 64))
    zarrx.create_array(tmp_path / "a.zarr", shape=data.shape, chunks=(4, 4), dtype="f4")[...] = data
    array = zarrx.open_array(Counting(tmp_path / "a.zarr"))
    Counting.readers = Counting.gets = 0
    np.testing.assert_array_equal(array[...], data)
    assert Counting.gets == 0  # 256 chunks, not one get each
    assert 1 <= Counting.readers <= 64  # a few runs of rows, a reader each


def test_a_corrupt_small_chunk_names_its_key_and_codec(tmp_path):
    array = zarrx.create_array(tmp_path / "a.zarr", shape=(40, 40), chunks=(4, 4), dtype="f4", compressors="zstd")
    array[...] = 1
    (tmp_path / "a.zarr" / "c" / "3" / "7").write_bytes(b"\x28\xb5\x2f\xfd garbage")
    with pytest.raises(ChunkDecodeError, match=r"chunk 'c/3/7': codec 'zstd'"):
        zarrx.open_array(tmp_path / "a.zarr")[...]


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc")
def test_the_batch_reader_closes_every_folder_it_opened(tmp_path, monkeypatch):
    monkeypatch.setattr(batch_files, "MAX_OPEN_FOLDERS", 8)
    data = np.arange(40 * 3, dtype="i4").reshape(40, 3)
    zarrx.create_array(tmp_path / "a.zarr", shape=data.shape, chunks=(1, 3), dtype="i4")[...] = data  # 40 folders
    before = _open_descriptors()
    np.testing.assert_array_equal(zarrx.open_array(tmp_path / "a.zarr")[...], data)
    assert _open_descriptors() == before
    (tmp_path / "a.zarr" / "c" / "17" / "0").write_bytes(b"not a chunk")  # raw bytes: 11 is not 12
    with pytest.raises(ChunkDecodeError, match="c/17/0"):
        zarrx.open_array(tmp_path / "a.zarr")[...]
    assert _open_descriptors() == before


@pytest.mark.skipif(not hasattr(os, "symlink") or os.name == "nt", reason="needs POSIX symbolic links")
def test_the_batch_reader_follows_links_inside_and_refuses_links_out(tmp_path):
    data = np.arange(16, dtype="i1").reshape(4, 4)
    zarrx.create_array(tmp_path / "store", shape=(4, 4), chunks=(2, 2), dtype="i1", compressors=None)[...] = data
    chunks = tmp_path / "store" / "c"
    (tmp_path / "store" / "spare").write_bytes((chunks / "0" / "0").read_bytes())
    (chunks / "1" / "1").unlink()
    os.symlink("../../spare", chunks / "1" / "1")  # stays inside: followed
    expected = data.copy()
    expected[2:, 2:] = data[:2, :2]
    np.testing.assert_array_equal(zarrx.open_array(tmp_path / "store")[...], expected)
    (tmp_path / "secret").write_bytes(bytes(4))
    (chunks / "1" / "0").unlink()
    os.symlink(tmp_path / "secret", chunks / "1" / "0")  # leaves the root: refused, naming the key
    with pytest.raises(OutsideStoreError, match="'c/1/0'"):
        zarrx.open_array(tmp_path / "store")[...]
    with LocalStore(tmp_path / "store", follow_external_links=True).batch_reader() as read:
        assert read("c/1/0") == bytes(4)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_the_batch_reader_refuses_what_is_not_a_file_without_blocking(tmp_path):
    zarrx.create_array(tmp_path / "store", shape=(4,), chunks=(2,), dtype="i1", compressors=None)[...] = 1
    (tmp_path / "store" / "c" / "1").unlink()
    os.mkfifo(tmp_path / "store" / "c" / "1")  # a writer-less pipe: reading it would block forever
    with pytest.raises(StoreError, match="'c/1'.*not a regular file"):
        zarrx.open_array(tmp_path / "store")[...]
    os.unlink(tmp_path / "store" / "c" / "1")
    os.mkdir(tmp_path / "store" / "c" / "1")  # a folder where a chunk should be: refused too, not the fill value
    with pytest.raises(StoreError, match="'c/1'.*a folder"):
        zarrx.open_array(tmp_path / "store")[...]


def test_the_batch_reader_reads_what_get_reads(tmp_path):
    store = LocalStore(tmp_path / "store")
    values = {f"g/{i}/{j}": os.urandom(i * 7 + j) for i in range(5) for j in range(4)}
    store.set_many(values)
    with store.batch_reader() as read:
        assert {key: read(key) for key in values} == values
        assert read("g/9/9") is None and read("nothing") is None
    with batch_files.folder_reader(RootFolder(str(tmp_path / "store"))) as read:
        assert read("g/1/2") == values["g/1/2"]


@pytest.mark.parametrize("change", [-4, 4], ids=["grew", "shrank"])
def test_the_batch_reader_reads_a_file_that_changed_size_after_fstat(tmp_path, monkeypatch, change):
    store = LocalStore(tmp_path / "store")
    store.set("a/b", b"0123456789")
    real_fstat, calls = os.fstat, []

    class Stale:  # the file's size as it was before it changed
        def __init__(self, info):
            self.st_mode, self.st_size = info.st_mode, info.st_size + change

    def stale_once(descriptor):
        calls.append(descriptor)
        return Stale(real_fstat(descriptor)) if len(calls) == 1 else real_fstat(descriptor)

    monkeypatch.setattr(os, "fstat", stale_once)
    with store.batch_reader() as read:
        assert read("a/b") == b"0123456789"
    assert len(calls) == 2  # the size proved wrong: read again from the start, as the file is now


# -- writes ------------------------------------------------------------------------------------
WRITES = [np.s_[...], np.s_[3:47, 5:29], np.s_[::3, ::-2], np.s_[11, 3:30], np.s_[48:, 31:], np.s_[8:16, 10:20]]


@pytest.mark.parametrize("selection", WRITES)
def test_small_chunk_writes_equal_numpy_and_the_batched_path(tmp_path, selection):
    before, after = _data(), -_data() - 1
    expected = before.copy()
    expected[selection] = after[selection]
    stores = {}
    for name, store in (("local", LocalStore(tmp_path / "l.zarr")), ("batched", Remote(LocalStore(tmp_path / "b.zarr")))):
        array = zarrx.create_array(store, shape=before.shape, chunks=(4, 5), dtype="f4", fill_value=-1, compressors="zstd")
        array[...] = before
        array[selection] = after[selection]
        stores[name] = store
        np.testing.assert_array_equal(zarrx.open_array(store)[...], expected)
    # the same chunk files, byte for byte, and no temporary file left behind
    local, batched = (sorted(p.relative_to(root) for p in root.rglob("*") if p.is_file())
                      for root in (tmp_path / "l.zarr", tmp_path / "b.zarr"))  # fmt: skip
    assert local == batched
    assert all((tmp_path / "l.zarr" / p).read_bytes() == (tmp_path / "b.zarr" / p).read_bytes() for p in local)


def test_writing_the_fill_value_deletes_small_chunks(tmp_path):
    array = zarrx.create_array(tmp_path / "a.zarr", shape=(40, 40), chunks=(4, 4), dtype="i2", fill_value=0)
    array[...] = 1
    array[8:24, :] = 0  # four rows of chunks, all fill value now
    stored = {p.relative_to(tmp_path / "a.zarr" / "c").parts[0] for p in (tmp_path / "a.zarr" / "c").rglob("*") if p.is_file()}
    assert stored == {str(row) for row in range(10)} - {"2", "3", "4", "5"}
    expected = np.ones((40, 40), "i2")
    expected[8:24] = 0
    np.testing.assert_array_equal(zarrx.open_array(tmp_path / "a.zarr")[...], expected)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc")
def test_the_batch_writer_leaves_no_descriptor_and_no_temporary_file(tmp_path, monkeypatch):
    monkeypatch.setattr(batch_files, "MAX_OPEN_FOLDERS", 8)
    store = LocalStore(tmp_path / "store")
    before = _open_descriptors()
    with store.batch_writer() as write:
        for i in range(30):
            for j in range(3):
                write(f"g/{i}/{j}", bytes([i, j]) * (j + 1))
    assert _open_descriptors() == before
    files = sorted(str(p.relative_to(tmp_path / "store")) for p in (tmp_path / "store").rglob("*") if p.is_file())
    assert files == sorted(f"g/{i}/{j}" for i in range(30) for j in range(3))
    assert store.get("g/17/2") == bytes([17, 2]) * 3
    with LocalStore(tmp_path / "store", read_only=True).batch_writer() as write:
        with pytest.raises(zarrx.errors.ReadOnlyError, match="'g/0/0'"):
            write("g/0/0", b"x")


# -- the small-chunk pipeline: one thread reads, the caller decodes runs in one call (zstd) ------
def _many_zstd_chunks(tmp_path, checksum=False):
    data = np.tile(_data((96, 64)), (2, 1))  # 192 x 64 in chunks of 4 x 4: 768 chunks, three runs of 256
    array = zarrx.create_array(tmp_path / "a.zarr", shape=data.shape, chunks=(4, 4), dtype="f4", fill_value=-1,
                               compressors={"name": "zstd", "configuration": {"level": 1, "checksum": checksum}})  # fmt: skip
    array[...] = data
    array[100:120, 8:24] = -1  # missing chunks inside the runs
    data[100:120, 8:24] = -1
    return data


@pytest.mark.parametrize("checksum", [False, True])
def test_the_pipeline_reads_what_the_other_paths_read(tmp_path, monkeypatch, checksum):
    from zarrx.codecs.zstd import ZstdCodec

    data = _many_zstd_chunks(tmp_path, checksum)
    calls = []
    decode_many = ZstdCodec.decode_many
    monkeypatch.setattr(ZstdCodec, "decode_many", lambda self, frames, n: calls.append(len(frames)) or decode_many(self, frames, n))
    for selection in (np.s_[...], np.s_[3:190, 1:63], np.s_[::2, ::-3]):
        calls.clear()
        np.testing.assert_array_equal(zarrx.open_array(tmp_path / "a.zarr")[selection], data[selection])
        np.testing.assert_array_equal(zarrx.open_array(Remote(LocalStore(tmp_path / "a.zarr")))[selection], data[selection])
        assert calls and max(calls) <= 256  # runs of at most PIPELINE_ROWS, decoded in one call each
        # the first and last runs short: the decoder starts early, the reader waits little at the end
        assert calls[0] <= FIRST_PIPELINE_ROWS and calls[-1] <= FIRST_PIPELINE_ROWS and max(calls) > 2 * FIRST_PIPELINE_ROWS


@pytest.mark.parametrize("damage", [b"", b"trailing", "twice", "truncated"])
def test_a_bad_chunk_in_the_pipeline_names_its_key_and_stops_the_reader(tmp_path, damage):
    _many_zstd_chunks(tmp_path)
    chunk = tmp_path / "a.zarr" / "c" / "30" / "7"
    good = chunk.read_bytes()
    damaged = {"twice": good + good, "truncated": good[:-5]} if isinstance(damage, str) else {}
    chunk.write_bytes(damaged.get(damage) or (good + damage if damage else b"\x28\xb5\x2f\xfd"))
    for _ in range(3):  # a failing read leaves no reader behind to block the next one
        with pytest.raises(ChunkDecodeError, match=r"chunk 'c/30/7': codec 'zstd'"):
            zarrx.open_array(tmp_path / "a.zarr")[...]
    chunk.write_bytes(good)
    assert zarrx.open_array(tmp_path / "a.zarr")[...].shape == (192, 64)


def test_a_store_error_in_the_pipeline_reader_reaches_the_caller(tmp_path):
    from zarrx.testing import FaultyStore

    data = _many_zstd_chunks(tmp_path)
    store = FaultyStore(LocalStore(tmp_path / "a.zarr"), fail_get=lambda key: key == "c/40/3")
    with pytest.raises(StoreError, match="'c/40/3'"):
        zarrx.open_array(store)[...]
    np.testing.assert_array_equal(zarrx.open_array(store)[:150], data[:150])  # c/40 is rows 160-163


@pytest.mark.parametrize(
    ("shape", "chunks", "selection"),
    [
        ((2400,), (4,), np.s_[...]),
        ((2400,), (4,), np.s_[5:2390]),
        ((8, 64, 64), (2, 4, 4), np.s_[...]),
        ((8, 64, 64), (2, 4, 4), np.s_[1:7, :, 3:61]),
        ((8, 64, 64), (2, 4, 4), np.s_[:, 5:60, ::-1]),
    ],
)
def test_the_pipeline_places_chunks_of_any_rank(tmp_path, monkeypatch, shape, chunks, selection):
    from zarrx.codecs.zstd import ZstdCodec

    data = np.arange(np.prod(shape), dtype="f4").reshape(shape)
    array = zarrx.create_array(tmp_path / "a.zarr", shape=shape, chunks=chunks, dtype="f4", fill_value=-1,
                               compressors={"name": "zstd", "configuration": {"level": 1}})  # fmt: skip
    array[...] = data
    calls = []
    decode_many = ZstdCodec.decode_many
    monkeypatch.setattr(ZstdCodec, "decode_many", lambda self, frames, n: calls.append(len(frames)) or decode_many(self, frames, n))
    np.testing.assert_array_equal(zarrx.open_array(tmp_path / "a.zarr")[selection], data[selection])
    assert calls  # through the pipeline


@pytest.mark.parametrize("dtype", ["u1", "<u2", ">f8", "c8", "M8[s]", "S3", [("a", "u1"), ("b", "<i4")]])
def test_values_copied_as_rows_of_bytes(dtype):
    """copy_values moves a chunk of many short rows (here 1,024 and more) as rows of bytes,
    between strided pieces of larger arrays, exactly as NumPy's assignment would; the rest untouched."""
    from zarrx.scratch import MIN_BYTE_ROWS, copy_values

    rng = np.random.default_rng(5)
    big = np.frombuffer(rng.bytes(40 * 64 * 12 * np.dtype(dtype).itemsize), dtype=dtype).reshape(40, 64, 12)
    for source in (big[:32, :40, 2:7], big[:, 1:33, :3].copy()):
        assert source.size >= MIN_BYTE_ROWS * source.shape[-1]
        out = np.zeros((48, 70, 9), dtype)
        expected = out.copy()
        where = np.s_[3 : 3 + source.shape[0], 5 : 5 + source.shape[1], 1 : 1 + source.shape[-1]]
        expected[where] = source
        copy_values(out[where], source)
        assert out.tobytes() == expected.tobytes()


@pytest.mark.parametrize("max_run", [16, 2], ids=["runs end at a row or shard", "full runs too"])
def test_whole_chunks_decoded_in_runs_go_where_they_belong(monkeypatch, max_run):
    """ChunkDecoder.put_many decodes whole chunks side by side along the last dimension into one
    run, put in place by one copy. In the order a sharded array's inner chunks come (two shards of
    2 x 2 chunks side by side), the next shard's first chunk starts where the run before stopped,
    in other rows: a new run. An absent chunk goes in place alone; the last run at the end; a
    full run (here of 2) at once."""
    import zarrx.io.decode
    from zarrx.io.decode import ChunkDecoder

    monkeypatch.setattr(zarrx.io.decode, "MAX_RUN", max_run)

    array = zarrx.create_array({}, shape=(4, 12), chunks=(2, 3), dtype="i4", fill_value=-1,
                               compressors=[{"name": "blosc", "configuration": {"cname": "lz4", "clevel": 1}}])  # fmt: skip
    handle = array.handle
    data = np.arange(48, dtype="i4").reshape(4, 12)
    order = [(0, 0), (0, 1), (1, 0), (1, 1), (0, 2), (0, 3), (1, 2), (1, 3)] if max_run > 2 else [
        (row, column) for row in range(2) for column in range(4)]  # fmt: skip
    items = []
    for row, column in order:
        where = (slice(2 * row, 2 * row + 2), slice(3 * column, 3 * column + 3))
        raw = None if (row, column) == (1, 3) else handle.pipeline.encode(data[where].copy(), handle.spec, key="c")
        items.append((raw, "c", where, None, (row, column)))
    out = np.full((4, 12), -99, "i4")
    ChunkDecoder(handle.pipeline, handle.spec, out, -1, inner=True).put_many(items)
    expected = data.copy()
    expected[2:4, 9:12] = -1
    np.testing.assert_array_equal(out, expected)


def test_side_by_side_chunks_go_into_a_strided_output(tmp_path):
    from zarrx.io.decode import ChunkDecoder

    data = _data((64, 64))
    array = zarrx.create_array(tmp_path / "a.zarr", shape=data.shape, chunks=(4, 4), dtype="f4", compressors="zstd")
    array[...] = data
    handle = array.handle
    rows = list(chunk_table(handle, BasicIndexer(np.s_[...], handle.shape, handle.io_chunk_shape)))
    with handle.store.batch_reader() as read:
        raws = [read(key) for key, _, _, _ in rows]
    raws[20] = None  # a missing chunk splits a run
    whole = np.zeros((64, 128), "f4")
    out = whole[:, ::2]  # every other element of the last dimension
    ChunkDecoder(handle.pipeline, handle.spec, out, -1.0, inner=False).put_decoded(rows, raws)
    expected = data.copy()
    expected[rows[20][2]] = -1
    np.testing.assert_array_equal(out, expected)
    assert not whole[:, 1::2].any()
