"""The codecs' library back-ends (docs/performance.md, "Codec back-ends").

zstd runs on python-zstandard with a context per thread (zarrx.codecs.contexts): the frames
must stay standard (content size recorded, checksum honoured) and read by every peer both
ways, the safety checks of the module must hold with the new library, and the reused
contexts must be right with many threads at once and in forked processes.
"""

from __future__ import annotations

import gzip
import io
import json
import multiprocessing
import threading
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numcodecs
import numcodecs.zstd
import numpy as np
import pytest
import tensorstore as ts
import zarr

import zarrx
from zarrx.codecs import GzipCodec, ZstdCodec, codec_from_json
from zarrx.codecs.contexts import ThreadContexts
from zarrx.codecs import zstd as zstd_module
from zarrx.codecs.zstd import IN_PLACE_FROM, frame_content_size
from zarrx.errors import ChunkDecodeError

from .zarrs_peer import zarrs_read, zarrs_write

KiB, MiB = 1024, 1024 * 1024


def field(size: int, seed: int = 0) -> np.ndarray:
    """``size`` bytes of float32 that compress somewhat (a smooth field plus rounded noise)."""
    rng = np.random.default_rng(seed)
    count = -(-size // 4)
    values = np.sin(np.linspace(0, 6, count)) * 10 + rng.normal(0, 0.5, count)
    return np.round(values, 3).astype("float32").view(np.uint8)[:size]


def frame_descriptor(frame: bytes) -> int:
    return frame[4]


# -- the frames zarrx writes ---------------------------------------------------------------------

CODECS = [ZstdCodec(), ZstdCodec(level=1), ZstdCodec(level=-7, checksum=True), ZstdCodec(level=19, checksum=True),
          ZstdCodec(level=-131072)]  # fmt: skip
SIZES = [0, 1, 2400, 300 * KiB, 2 * MiB]


@pytest.mark.parametrize("codec", CODECS, ids=repr)
@pytest.mark.parametrize("size", SIZES)
def test_frames_record_size_and_checksum_and_decode_in_numcodecs(codec, size) -> None:
    data = field(size, seed=size)
    frame = bytes(codec.encode(data))
    assert frame_content_size(frame) == size  # recorded, also for 0 bytes
    assert bool(frame_descriptor(frame) & 0x04) == codec.checksum  # Content_Checksum_Flag
    theirs = bytes(numcodecs.zstd.compress(data, codec.level, codec.checksum))
    if size:
        assert bytes(numcodecs.zstd.decompress(frame)) == data.tobytes()
    else:  # numcodecs fails to decompress any empty frame, its own too: the same 9 bytes
        assert frame == theirs
    assert bytes(codec.decode(theirs, size, size)) == data.tobytes()
    out = np.empty(size, dtype=np.uint8)
    codec.decode_into(theirs, out)
    assert out.tobytes() == data.tobytes()


def test_checksum_is_checked() -> None:
    frame = bytearray(ZstdCodec(level=3, checksum=True).encode(field(4000)))
    frame[-1] ^= 0xFF  # the checksum's last byte
    with pytest.raises(ChunkDecodeError, match="checksum"):
        ZstdCodec().decode(bytes(frame), 4000, 4000)
    with pytest.raises(ChunkDecodeError, match="checksum"):
        ZstdCodec().decode_into(bytes(frame), np.empty(4000, dtype=np.uint8))


@pytest.mark.parametrize(
    ("mangle", "message"),
    [
        (lambda frame: frame[:-2], "corrupt zstd data"),  # half the checksum: the frame is not complete
        (lambda frame: frame[:-200], "corrupt zstd data"),
        (lambda frame: frame + b"\x00", "corrupt zstd data"),  # a byte after the frame
        (lambda frame: frame + frame, "corrupt zstd data"),  # a second frame
    ],
    ids=["truncated-checksum", "truncated", "trailing-byte", "two-frames"],
)
@pytest.mark.parametrize("size", [4000, IN_PLACE_FROM, MiB + 3])  # decoded and copied / decoded in place
def test_one_whole_frame(mangle, message, size) -> None:
    data = field(size)
    frame = mangle(bytes(ZstdCodec(level=3, checksum=True).encode(data)))
    with pytest.raises(ChunkDecodeError, match=message):
        ZstdCodec().decode(frame, size, size)
    with pytest.raises(ChunkDecodeError, match=message):
        ZstdCodec().decode_into(frame, np.empty(size, dtype=np.uint8))
    with pytest.raises(ChunkDecodeError, match=message):  # the frame in a NumPy buffer, as the stores give it
        ZstdCodec().decode_into(np.frombuffer(frame, np.uint8), np.empty(size, dtype=np.uint8))


@pytest.mark.parametrize("size", [IN_PLACE_FROM - 1, IN_PLACE_FROM, 3 * MiB])
@pytest.mark.parametrize("checksum", [False, True])
def test_corrupt_blocks_are_found_in_both_paths(size, checksum) -> None:
    data = field(size, seed=3)
    frame = bytes(ZstdCodec(level=1, checksum=checksum).encode(data))
    out = np.empty(size, dtype=np.uint8)
    ZstdCodec().decode_into(np.frombuffer(frame, np.uint8), out)
    assert out.tobytes() == data.tobytes()
    reserved = bytearray(frame)
    reserved[zstd_module._frame_header(frame)[0]] |= 0b110  # the first block's type: 3, reserved
    noise = bytearray(frame)
    noise[len(frame) // 2 : len(frame) // 2 + 64] = bytes(range(64))
    # without a checksum, noise may decode to other values: only the checksum finds it for sure
    for broken in (reserved, noise) if checksum else (reserved,):
        with pytest.raises(ChunkDecodeError, match="corrupt zstd data|decodes to"):
            ZstdCodec().decode_into(bytes(broken), out)


def _header_frames() -> list[tuple[str, bytes]]:
    """Frames and near-frames whose headers take every branch of RFC 8878's frame header."""
    import struct

    import zstandard

    data = field(70_000).tobytes()
    frames = [(f"level {level} size {size}", zstandard.ZstdCompressor(level=level).compress(data[:size]))
              for level in (1, 19) for size in (0, 1, 200, 300, 65_791, 70_000)]  # fmt: skip
    frames += [("no size", zstandard.ZstdCompressor(write_content_size=False).compress(data)),
               ("no size, empty", zstandard.ZstdCompressor(write_content_size=False).compress(b""))]  # fmt: skip
    dictionary = zstandard.train_dictionary(2048, [field(300, seed=seed).tobytes() for seed in range(300)])
    assert dictionary.dict_id()  # its frames carry a Dictionary_ID field
    frames.append(("dictionary id", zstandard.ZstdCompressor(dict_data=dictionary, write_dict_id=True).compress(data[:5000])))
    sized = frames[3][1]
    frames += [
        ("skippable", struct.pack("<II", 0x184D2A50, 4) + b"abcd"),
        ("reserved bit", sized[:4] + bytes([sized[4] | 0x08]) + sized[5:]),
        ("bad magic", b"\x00" + sized[1:]),
        ("truncated header", sized[:5]),
        ("too short", sized[:3]),
        ("empty", b""),
    ]
    return frames


@pytest.mark.parametrize("name, frame", _header_frames(), ids=[name for name, _ in _header_frames()])
def test_frame_content_size_agrees_with_the_spec_parse(name, frame) -> None:
    """frame_content_size asks libzstd first (cheaper) and parses the header itself where libzstd
    cannot say (skippable frames, bad headers, a size of 0): the two must agree on every frame,
    given as bytes or as a uint8 view, and a bad header must fail with the parse's message."""
    try:
        expected: int | None | str = zstd_module._frame_header(frame)[1]
    except ChunkDecodeError as error:
        expected = str(error)
    for given in (frame, memoryview(frame), np.frombuffer(frame, dtype=np.uint8)):
        if isinstance(expected, str):
            with pytest.raises(ChunkDecodeError) as raised:
                frame_content_size(given)
            assert str(raised.value) == expected
        else:
            assert frame_content_size(given) == expected


def test_frame_without_size_fills_exactly_the_expected_size() -> None:
    import zstandard

    data = field(6000)
    unsized = zstandard.ZstdCompressor(level=3, write_content_size=False).compress(data.tobytes())
    assert frame_content_size(unsized) is None
    assert bytes(ZstdCodec().decode(unsized, 6000, 6000)) == data.tobytes()
    for wrong in (5999, 6001, 0):
        with pytest.raises(ChunkDecodeError, match=f"expected {wrong}|full frame"):
            ZstdCodec().decode_into(unsized, np.empty(wrong, dtype=np.uint8))
    empty = zstandard.ZstdCompressor(write_content_size=False).compress(b"")
    ZstdCodec().decode_into(empty, np.empty(0, dtype=np.uint8))


# -- many frames in one call (decode_many): the frames are checked together, as decode checks one --
def _frames_of_many_writers(size: int) -> list[bytes]:
    """Frames of ``size`` bytes from several writers and of several shapes, side by side: zarrx's
    (with and without a checksum), numcodecs', one without a recorded size, one of several blocks
    (a small window), and the few bytes of an RLE block (a chunk of one repeated value)."""
    import zstandard

    data = [field(size, seed=seed) for seed in range(4)]
    # blocks are at most the window: 1 KiB here
    blocks = zstandard.ZstdCompressor(compression_params=zstandard.ZstdCompressionParameters(
        compression_level=3, window_log=10, write_content_size=True))  # fmt: skip
    return [
        bytes(ZstdCodec(level=1).encode(data[0])),
        bytes(ZstdCodec(level=3, checksum=True).encode(data[1])),
        bytes(numcodecs.zstd.compress(data[2], 1)),
        zstandard.ZstdCompressor(level=3, write_content_size=False).compress(data[3].tobytes()),
        blocks.compress(data[0].tobytes()),
        bytes(ZstdCodec(level=1).encode(np.zeros(size, np.uint8))),
        bytes(ZstdCodec(level=1, checksum=True).encode(np.zeros(size, np.uint8))),
    ]


@pytest.mark.parametrize("size", [2400, 300 * KiB])
def test_decode_many_reads_frames_of_every_writer_and_shape(size) -> None:
    frames = _frames_of_many_writers(size)
    header_size = zstd_module._frame_header(frames[4])[0]
    assert not frames[4][header_size] & 1  # its first block is not its last
    assert len(frames[5]) < zstd_module._HEAD_SIZE or size > 128 * KiB  # shorter than what the batched check reads
    expected = [bytes(ZstdCodec().decode(frame, size, size)) for frame in frames]
    for order in (frames, frames[::-1], frames[5:] + frames[:5]):  # each kind first once
        decoded = ZstdCodec().decode_many(order, size)
        assert [bytes(chunk) for chunk in decoded] == [expected[frames.index(frame)] for frame in order]
    views = [np.frombuffer(frame, np.uint8) for frame in frames]  # buffers that are not bytes
    assert [bytes(chunk) for chunk in ZstdCodec().decode_many(views, size)] == expected


BROKEN_FRAMES = {
    "trailing-byte": lambda frame: frame + b"\x00",
    "two-frames": lambda frame: frame + frame,
    "truncated": lambda frame: frame[:-3],
    "truncated-to-the-header": lambda frame: frame[: zstd_module._frame_header(frame)[0]],
    "only-the-magic": lambda frame: frame[:4],
    "empty": lambda frame: b"",
    "bad-magic": lambda frame: b"\x29" + frame[1:],
    "reserved-block": lambda frame: _with_byte(frame, zstd_module._frame_header(frame)[0], lambda b: b | 0b110),
    "reserved-header-bit": lambda frame: _with_byte(frame, 4, lambda b: b | 0x08),
    "other-declared-size": lambda frame: bytes(ZstdCodec(level=1).encode(field(len(frame) + 7))),
}


def _with_byte(frame: bytes, position: int, change) -> bytes:
    return frame[:position] + bytes([change(frame[position])]) + frame[position + 1 :]


@pytest.mark.parametrize("damage", list(BROKEN_FRAMES))
@pytest.mark.parametrize("where", [0, 1, 4, 6])  # the first (whose header is the model), a later one
def test_decode_many_refuses_any_frame_that_is_not_one_whole_frame(damage, where) -> None:
    size = 2400
    frames = _frames_of_many_writers(size)
    frames[where] = BROKEN_FRAMES[damage](frames[where])
    with pytest.raises(ChunkDecodeError):
        ZstdCodec().decode_many(frames, size)
    with pytest.raises(ChunkDecodeError):  # and decode agrees, which names the chunk
        ZstdCodec().decode(frames[where], size, size)


@pytest.mark.parametrize("size", [2400, 64 * KiB, 300 * KiB])
def test_decode_where_gives_the_decoded_bytes_in_its_own_buffer_only_below_the_limit(size) -> None:
    frames = _frames_of_many_writers(size)
    for frame in frames:
        out = np.empty(size, np.uint8)
        decoded = ZstdCodec().decode_where(frame, out)
        assert bytes(decoded) == bytes(ZstdCodec().decode(frame, size, size))
        assert (decoded is out) == (size >= zstd_module.OWN_BUFFER_BELOW)


@pytest.mark.parametrize("damage", list(BROKEN_FRAMES))
@pytest.mark.parametrize("size", [2400, 300 * KiB])
def test_decode_where_refuses_what_decode_into_refuses(damage, size) -> None:
    frame = BROKEN_FRAMES[damage](bytes(ZstdCodec(level=1).encode(field(size))))
    with pytest.raises(ChunkDecodeError):
        ZstdCodec().decode_into(frame, np.empty(size, np.uint8))
    with pytest.raises(ChunkDecodeError):
        ZstdCodec().decode_where(frame, np.empty(size, np.uint8))


# -- the peers read zarrx's arrays, zarrx reads theirs ---------------------------------------------

PEER_CODECS = [ZstdCodec(level=1), ZstdCodec(level=5, checksum=True), ZstdCodec(level=-3)]
SHAPE, CHUNKS = (300, 1000), (30, 1000)  # 117 KiB chunks and a partial last one: 10 of them


def values() -> np.ndarray:
    return field(SHAPE[0] * SHAPE[1] * 4, seed=7).view("float32").reshape(SHAPE)


def _zarrs_metadata(codec: ZstdCodec) -> dict:
    """The array's metadata with ``checksum`` written out: zarrs refuses zstd without it."""
    return {
        "shape": list(SHAPE), "data_type": "float32", "fill_value": 0.0,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(CHUNKS)}},
        "chunk_key_encoding": {"name": "default"},
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                   {"name": "zstd", "configuration": {"level": codec.level, "checksum": codec.checksum}}],
    }  # fmt: skip


def read_with_zarrs(path: Path) -> np.ndarray:
    """The array as zarrs' Rust core reads it (tests/zarrs_peer.py), zarrx's frames as they are."""
    document = json.loads((path / "zarr.json").read_text())
    codec = ZstdCodec.from_json(document["codecs"][-1]["configuration"])
    (path / "zarr.json").write_text(json.dumps({**document, **_zarrs_metadata(codec)}))
    return zarrs_read(path, 4).view("<f4")


PEER_READERS = {
    "zarr-python": lambda path: zarr.open_array(str(path))[...],
    "tensorstore": lambda path: ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}})
    .result()
    .read()
    .result(),
    "zarrs": read_with_zarrs,
    "numcodecs": lambda path: np.concatenate(
        [np.frombuffer(numcodecs.zstd.decompress((path / "c" / str(i) / "0").read_bytes()), "<f4").reshape(-1, 1000)
         for i in range(10)]  # fmt: skip
    ),
}


@pytest.mark.parametrize("codec", PEER_CODECS, ids=repr)
@pytest.mark.parametrize("peer", PEER_READERS)
def test_peers_read_what_zarrx_writes(tmp_path, codec, peer) -> None:
    data = values()
    zarrx.create_array(str(tmp_path / "a"), shape=SHAPE, chunks=CHUNKS, dtype="float32", compressors=[codec])[...] = data
    np.testing.assert_array_equal(PEER_READERS[peer](tmp_path / "a"), data)


def _write_with_zarr_python(path: Path, codec: ZstdCodec, data: np.ndarray) -> None:
    zarr_codec = zarr.codecs.ZstdCodec(level=codec.level, checksum=codec.checksum)
    zarr.create_array(str(path), shape=SHAPE, chunks=CHUNKS, dtype="float32", compressors=[zarr_codec])[...] = data


def _write_with_zarrs(path: Path, codec: ZstdCodec, data: np.ndarray) -> None:
    zarrs_write(path, _zarrs_metadata(codec), data)


def _write_with_tensorstore(path: Path, codec: ZstdCodec, data: np.ndarray) -> None:
    metadata = {
        "shape": list(SHAPE), "data_type": "float32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(CHUNKS)}},
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, codec.to_json()],
    }  # fmt: skip
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}, "metadata": metadata}
    ts.open(spec, create=True).result().write(data).result()


PEER_WRITERS = {"zarr-python": _write_with_zarr_python, "zarrs": _write_with_zarrs, "tensorstore": _write_with_tensorstore}


@pytest.mark.parametrize("codec", PEER_CODECS, ids=repr)
@pytest.mark.parametrize("peer", PEER_WRITERS)
def test_zarrx_reads_what_peers_write(tmp_path, codec, peer) -> None:
    data = values()
    PEER_WRITERS[peer](tmp_path / "a", codec, data)
    frame = (tmp_path / "a" / "c" / "0" / "0").read_bytes()
    assert bool(frame_descriptor(frame) & 0x04) == codec.checksum
    array = zarrx.open_array(str(tmp_path / "a"))
    np.testing.assert_array_equal(array[...], data)
    np.testing.assert_array_equal(array[5:37, 100:900], data[5:37, 100:900])


# -- threads and processes ---------------------------------------------------------------------------


def _work(sizes: list[int]) -> list[tuple[bytes, bytes]]:
    """Encode and decode one frame per size with three codecs: (frame, decoded bytes) each."""
    results = []
    for index, size in enumerate(sizes):
        codec = CODECS[index % 3]
        data = field(size, seed=index)
        frame = bytes(codec.encode(data))
        out = np.empty(size, dtype=np.uint8)
        codec.decode_into(frame, out)
        results.append((frame, out.tobytes() + bytes(codec.decode(frame, size, size))))
    return results


WORK = [[(task * 7919 + item * 104729) % (40 * KiB) + 1 for item in range(40)] for task in range(16)]


def test_many_threads_give_the_single_thread_results() -> None:
    expected = [_work(sizes) for sizes in WORK]
    barrier = threading.Barrier(8)

    def in_thread(sizes: list[int]) -> list[tuple[bytes, bytes]]:
        barrier.wait()  # the first tasks of the 8 threads start together
        return _work(sizes) + _work(sizes)

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(in_thread, WORK))  # 16 tasks: two rounds of 8 threads at once
    for sizes, result, single in zip(WORK, results, expected):
        assert result == single + single
        for frame, decoded in single:
            assert decoded[: len(decoded) // 2] == decoded[len(decoded) // 2 :]
            assert frame_content_size(frame) == len(decoded) // 2


def test_forked_processes_give_the_parent_results() -> None:
    expected = [_work(sizes) for sizes in WORK[:4]]  # the parent's threads now hold contexts
    with ThreadPoolExecutor(2) as pool:  # ... and so do two of its threads
        assert list(pool.map(_work, WORK[:2])) == expected[:2]
    with multiprocessing.get_context("fork").Pool(2) as processes:
        assert processes.map(_work, WORK[:4]) == expected


def test_dask_forked_process_pool_writes_and_reads(tmp_path) -> None:
    import dask
    import dask.array as da

    url, data = str(tmp_path / "p.zarr"), values()
    x = da.from_array(data, chunks=CHUNKS)
    codec = ZstdCodec(level=3, checksum=True)
    zarrx.to_zarr(x, url, "a", chunks=CHUNKS, compressors=[codec])  # this process's contexts exist before the fork
    settings = {"scheduler": "processes", "num_workers": 2, "multiprocessing.context": "fork"}
    with dask.config.set(settings):
        zarrx.to_zarr(x * 2, url, "b", chunks=CHUNKS, compressors=[codec])
        np.testing.assert_array_equal(zarrx.from_zarr(url, "a").compute(), data)
    np.testing.assert_array_equal(zarrx.open_array(url, "b")[...], data * 2)


# -- the per-thread contexts ---------------------------------------------------------------------------


def test_contexts_are_per_thread_and_per_key() -> None:
    made: list[object] = []

    def make(key: object) -> object:
        made.append(key)
        return object()

    contexts = ThreadContexts(make, max_keys=2)
    first = contexts.get("a")
    assert contexts.get("a") is first and made == ["a"]
    with ThreadPoolExecutor(1) as pool:
        other = pool.submit(contexts.get, "a").result()
    assert other is not first and made == ["a", "a"]
    contexts.get("b")
    contexts.get("c")  # a third key: the others are dropped (bounded per thread)
    assert contexts.get("a") is not first and made == ["a", "a", "b", "c", "a"]


#: made before any fork, in the test process's main thread (pool processes fork from it)
FORK_CONTEXTS: ThreadContexts[object] = ThreadContexts(lambda key: object())


def _contexts_in_child() -> tuple[bool, bool]:
    """(whether the parent's context came along, whether a new one is made and kept)."""
    inherited = getattr(FORK_CONTEXTS._local, "contexts", None) is not None
    return inherited, FORK_CONTEXTS.get() is FORK_CONTEXTS.get()


def test_contexts_are_forgotten_in_a_forked_child() -> None:
    parent = FORK_CONTEXTS.get()
    with multiprocessing.get_context("fork").Pool(1) as processes:
        assert processes.apply(_contexts_in_child) == (False, True)
    assert FORK_CONTEXTS.get() is parent  # the parent keeps its own


# -- gzip: decoded with ISA-L, written with zlib -----------------------------------------------------


@pytest.mark.parametrize("level", range(10))
@pytest.mark.parametrize("size", [0, 2400, 300 * KiB])
def test_gzip_writes_zlib_bytes_and_reads_every_writer(level, size) -> None:
    data = field(size, seed=level)
    codec = GzipCodec(level=level)
    assert codec.encode(data) == zlib.compress(data, level, wbits=31)  # the bytes of today and of zarr-python
    named = io.BytesIO()
    with gzip.GzipFile("chunk.bin", "wb", level, named, mtime=1) as file:  # FNAME in the header
        file.write(data.tobytes())
    streams = {
        "numcodecs": bytes(numcodecs.GZip(level=level).encode(data)),
        "gzip module, file name": named.getvalue(),
        "zlib header": zlib.compress(data, level),
        "members": gzip.compress(data[: size // 3]) + gzip.compress(data[size // 3 :], level),
    }
    for name, stream in streams.items():
        assert bytes(codec.decode(stream, size, size)) == data.tobytes(), name
        assert bytes(codec.decode(stream, None, size)) == data.tobytes(), name


def test_v2_zlib_compressor_reads_with_isal(tmp_path) -> None:
    data = values()
    zarr.create_array(str(tmp_path / "v2"), shape=SHAPE, chunks=CHUNKS, dtype="float32", zarr_format=2,
                      compressors=numcodecs.Zlib(level=4))[...] = data  # fmt: skip
    np.testing.assert_array_equal(zarrx.open_array(str(tmp_path / "v2"))[...], data)
    stream = (tmp_path / "v2" / "0.0").read_bytes()
    codec = codec_from_json({"name": "numcodecs.zlib", "configuration": {"level": 4}}, "codecs")
    decoded = codec.decode(stream, 120000, 120000)
    assert bytes(decoded) == data[:30].tobytes()
    with pytest.raises(ChunkDecodeError, match="larger than the expected"):
        codec.decode(stream, 1000, 1000)
    with pytest.raises(ChunkDecodeError, match="corrupt zlib"):
        codec.decode(stream[:8] + bytes(8) + stream[16:], 120000, 120000)
