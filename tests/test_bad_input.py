"""Bad input through the public API, on real stores (a LocalStore in ``tmp_path`` and a MemoryStore).

The contract (DESIGN.md, "Errors" and "Rules that keep data safe"): a corrupt or truncated
chunk, a checksum mismatch, a chunk that decodes to the wrong size, a compressed chunk that
would expand past its expected size, an unknown codec, data type or required extension, and a
node name that would leave the store each raise the documented :class:`ZarrxError` subclass,
whose message names the chunk key, the document key and field, or the bad path component.
Never a bare ``KeyError``/``ValueError``/``struct.error``/``JSONDecodeError``/``OSError``,
never a hang, and a decompression bomb costs no more memory than the chunk it pretends to be.

Every read of hostile data runs through :func:`hostile`, which fails the test when the call
does not return within :data:`TIMEOUT` seconds and caps the address space while it runs, so a
regression shows up as a failure rather than a hung or swapping test run. The unit-level
counterparts of these cases are in ``test_codecs.py``, ``test_metadata.py`` and ``test_paths.py``.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import gzip
import json
import os
import resource
import struct
import tempfile
import threading
import time
import tracemalloc
import zlib
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import zarrx
from zarrx.codecs import BloscCodec, Crc32cCodec, GzipCodec, TransposeCodec, ZstdCodec
from zarrx.errors import (
    BoundsCheckError,
    ChunkDecodeError,
    ConflictingDimensionsError,
    ContainsArrayError,
    ContainsGroupError,
    InvalidPathError,
    MetadataError,
    NodeNotFoundError,
    OutsideStoreError,
    StoreError,
    UnknownCodecError,
    UnsupportedExtensionError,
    ZarrxError,
)
from zarrx.storage import LocalStore, MemoryStore

#: seconds any one read of hostile data may take before the test calls it a hang
TIMEOUT = 10.0
KiB, MiB, GiB = 2**10, 2**20, 2**30
#: extra address space a hostile read may map: room for thread stacks and malloc arenas of a
#: thread pool as wide as the machine, not for a never-ending read (``/dev/zero``)
ADDRESS_SPACE_HEADROOM = GiB + (os.cpu_count() or 1) * 80 * MiB


# -- shared helpers ------------------------------------------------------------------------------


@pytest.fixture(params=["local", "memory"])
def store(request, tmp_path):
    """An empty store of each kind; the local one lives in ``tmp_path/store``."""
    return LocalStore(tmp_path / "store") if request.param == "local" else MemoryStore()


@contextlib.contextmanager
def bounded_address_space(headroom: int = ADDRESS_SPACE_HEADROOM):
    """Cap the process's address space at its current size plus ``headroom`` (Linux)."""
    try:
        with open("/proc/self/statm") as statm:
            current = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (current + headroom, hard))
    except (OSError, ValueError, AttributeError):  # not Linux: no cap, the timeout still applies
        yield
        return
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def hostile(call: Callable[[], Any], timeout: float = TIMEOUT) -> Any:
    """``call()`` on a daemon thread with a capped address space; its result, or its exception.

    Fails the test (rather than hanging it) when the call is still running after ``timeout``.
    """
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = call()
        except BaseException as error:  # handed to the test thread below
            outcome["error"] = error

    thread = threading.Thread(target=run, daemon=True, name="hostile-read")
    with bounded_address_space():
        thread.start()
        thread.join(timeout)
    if thread.is_alive():
        pytest.fail(f"no result after {timeout} s: a read of hostile data hangs")
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("result")


def check_error(error_class: type[ZarrxError], call: Callable[[], Any], *fragments: str) -> ZarrxError:
    """``call`` raises exactly ``error_class`` whose message contains every fragment.

    Any exception that is not a ZarrxError propagates and fails the test with its traceback.
    """
    with pytest.raises(ZarrxError) as info:
        hostile(call)
    message = str(info.value)
    assert type(info.value) is error_class, f"expected {error_class.__name__}, got {info.type.__name__}: {message}"
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} is not named in: {message}"
    return info.value


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every file (with its bytes) and folder below ``root``."""
    found: dict[str, bytes | None] = {}
    for folder, folders, files in os.walk(root):
        for name in folders:
            found[os.path.relpath(os.path.join(folder, name), root)] = None
        for name in files:
            path = os.path.join(folder, name)
            found[os.path.relpath(path, root)] = Path(path).read_bytes()
    return found


# -- corrupt chunks --------------------------------------------------------------------------------

#: codec chains: create_array keywords, and the codecs that may find a corrupt chunk
CHAINS: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
    "zstd": ({"compressors": [ZstdCodec(level=1)]}, ("zstd",)),
    "zstd-checksum": ({"compressors": [ZstdCodec(level=1, checksum=True)]}, ("zstd",)),
    "gzip": ({"compressors": [GzipCodec(level=5)]}, ("gzip",)),
    "blosc": ({"compressors": [BloscCodec(cname="lz4", clevel=5, shuffle="shuffle", typesize=4)]}, ("blosc",)),
    "crc32c": ({"compressors": [Crc32cCodec()]}, ("crc32c",)),
    "zstd-crc32c": ({"compressors": [ZstdCodec(level=1), Crc32cCodec()]}, ("crc32c", "zstd")),
    "transpose-gzip": ({"filters": [TransposeCodec(order=(1, 0))], "compressors": [GzipCodec(level=1)]}, ("gzip",)),
    "none": ({"compressors": None}, ("bytes",)),
}
#: chains whose stored bytes carry a checksum, so a flipped byte is always detected
CHECKSUMMED = ("zstd-checksum", "gzip", "crc32c", "zstd-crc32c", "transpose-gzip")
CHUNK_KEY = "x/c/1/0"
DATA = np.arange(64, dtype="int32").reshape(8, 8) * 1001


def create(store, chain: str, path: str = "x", *, dtype="int32", shape=(8, 8), chunks=(4, 4), data=None):
    """An array of ``chain`` at ``path`` below a root group, filled with ``data`` (default DATA)."""
    zarrx.create_group(store, overwrite=True)
    array = zarrx.create_array(store, path, shape=shape, chunks=chunks, dtype=dtype, fill_value=0, **CHAINS[chain][0])
    array[...] = DATA if data is None else data
    return array


def foreign_chunk(chain: str, dtype: str = "int32", chunks: tuple[int, ...] = (4, 4)) -> bytes:
    """A valid chunk of ``chain`` for another data type or chunk shape (of another byte size)."""
    store = MemoryStore()
    create(store, chain, dtype=dtype, shape=chunks, chunks=chunks, data=np.ones(chunks, dtype=dtype))
    return store.get("x/c/0/0")


def flip_middle(raw: bytes) -> bytes:
    middle = len(raw) // 2
    return raw[:middle] + bytes([raw[middle] ^ 0xFF]) + raw[middle + 1 :]


CORRUPTIONS: dict[str, Callable[[bytes, str], bytes]] = {
    "truncated-half": lambda raw, chain: raw[: len(raw) // 2],
    "truncated-by-one": lambda raw, chain: raw[:-1],
    "one-byte-too-long": lambda raw, chain: raw + b"\x00",
    "doubled": lambda raw, chain: raw + raw,
    "random": lambda raw, chain: np.random.default_rng(7).bytes(len(raw)),
    "random-short": lambda raw, chain: b"\x28\xb5\x2f\xfd\x01",
    "empty": lambda raw, chain: b"",
    "other-dtype": lambda raw, chain: foreign_chunk(chain, dtype="int16"),
    "other-shape": lambda raw, chain: foreign_chunk(chain, chunks=(2, 4)),
}


@pytest.mark.parametrize(
    "chain, corruption",
    # (random bytes of the right size are valid raw data: only a checksum or a compressor can tell)
    [(chain, name) for chain in CHAINS for name in CORRUPTIONS if (chain, name) != ("none", "random")],
)
def test_corrupt_chunk(store, chain, corruption):
    create(store, chain)
    store.set(CHUNK_KEY, CORRUPTIONS[corruption](store.get(CHUNK_KEY), chain))
    array = zarrx.open_array(store, "x")
    error = check_error(ChunkDecodeError, lambda: array[...], repr(CHUNK_KEY))
    assert any(f"codec {name!r}" in str(error) for name in CHAINS[chain][1]), f"no codec named in: {error}"
    np.testing.assert_array_equal(array[:4], DATA[:4])  # the intact chunks still read


@pytest.mark.parametrize("chain", CHECKSUMMED)
def test_flipped_byte_fails_the_checksum(store, chain):
    create(store, chain)
    store.set(CHUNK_KEY, flip_middle(store.get(CHUNK_KEY)))
    error = check_error(ChunkDecodeError, lambda: zarrx.open_array(store, "x")[...], repr(CHUNK_KEY))
    if chain.endswith("crc32c"):
        assert "checksum mismatch" in str(error)


READS: dict[str, Callable[[Any], Any]] = {
    "getitem": lambda array: array[...],
    "scalar": lambda array: array[5, 1],
    "slice-step": lambda array: array[::3, ::3],
    "oindex": lambda array: array.oindex[[5, 6], [0, 3]],
    "vindex": lambda array: array.vindex[[5, 0], [1, 7]],
    "asarray": lambda array: np.asarray(array),
    "partial-write": lambda array: array.__setitem__((5, 1), 9),
    "resize-trim": lambda array: array.resize((6, 6)),
}


@pytest.mark.parametrize("read", READS)
def test_every_access_path_reports_the_corrupt_chunk(store, read):
    create(store, "crc32c")
    corrupt = flip_middle(store.get(CHUNK_KEY))
    store.set(CHUNK_KEY, corrupt)
    array = zarrx.open_array(store, "x", mode="r+")
    check_error(ChunkDecodeError, lambda: READS[read](array), repr(CHUNK_KEY), "crc32c")
    assert store.get(CHUNK_KEY) == corrupt  # a failed read-modify-write leaves the stored bytes alone
    assert zarrx.open_array(store, "x").shape == (8, 8)


def vlen_chunk(*elements: bytes, count: int | None = None) -> bytes:
    """The vlen-utf8/vlen-bytes encoding: u32le count, then u32le length and bytes per element."""
    body = b"".join(struct.pack("<I", len(element)) + element for element in elements)
    return struct.pack("<I", len(elements) if count is None else count) + body


def vlen_with_length(length: int) -> bytes:
    return vlen_chunk(b"ab") + struct.pack("<I", length) + b"cd"


VLEN_CORRUPTIONS = {  # name: (stored chunk for a chunk of 2 elements, data types it applies to)
    "count-too-small": (vlen_chunk(b"ab", b"cd", count=1), ("string", "bytes")),
    "count-too-large": (vlen_chunk(b"ab", b"cd", count=3), ("string", "bytes")),
    "count-huge": (vlen_chunk(b"ab", b"cd", count=2**32 - 1), ("string", "bytes")),
    "count-only": (struct.pack("<I", 2), ("string", "bytes")),
    "short-count": (b"\x02\x00", ("string", "bytes")),
    "empty": (b"", ("string", "bytes")),
    "length-past-end": (vlen_with_length(3), ("string", "bytes")),
    "length-huge": (vlen_with_length(2**32 - 1), ("string", "bytes")),
    "truncated-length": (vlen_chunk(b"ab") + b"\x02\x00", ("string", "bytes")),
    "invalid-utf8": (vlen_chunk(b"ab", b"\xff\xfe"), ("string",)),
    "truncated-utf8-sequence": (vlen_chunk(b"ab", b"\xe6\x97"), ("string",)),
    "utf8-surrogate": (vlen_chunk(b"ab", b"\xed\xa0\x80"), ("string",)),
    "utf8-overlong": (vlen_chunk(b"ab", b"\xc0\xaf"), ("string",)),
}


@pytest.mark.parametrize(
    "dtype, corruption",
    [(dtype, name) for name, (_, dtypes) in VLEN_CORRUPTIONS.items() for dtype in dtypes],
)
def test_corrupt_variable_length_chunk(store, dtype, corruption):
    zarrx.create_group(store)
    codec = "vlen-utf8" if dtype == "string" else "vlen-bytes"
    values = ["ab", "cd", "é", ""] if dtype == "string" else [b"ab", b"cd", b"\x00", b""]
    array = zarrx.create_array(store, "s", shape=(4,), chunks=(2,), dtype=dtype, compressors=None)
    array[...] = np.array(values, dtype=array.dtype)
    store.set("s/c/1", VLEN_CORRUPTIONS[corruption][0])
    array = zarrx.open_array(store, "s")
    check_error(ChunkDecodeError, lambda: array[...], "'s/c/1'", repr(codec))
    assert list(array[:2]) == values[:2]


def test_trailing_bytes_after_the_last_element_are_corruption(store):
    """numcodecs decodes the elements and ignores what follows; zarrx calls it corruption (issue 22)."""
    for dtype, codec_name, values in (("string", "vlen-utf8", ["ab", "é"]), ("bytes", "vlen-bytes", [b"ab", b"\x00"])):
        array = zarrx.create_array(store, dtype, shape=(4,), chunks=(2,), dtype=dtype, compressors=None, overwrite=True)
        array[...] = np.array(values * 2, dtype=array.dtype)
        key = f"{dtype}/c/1"
        store.set(key, store.get(key) + b"garbage!")
        check_error(ChunkDecodeError, lambda: array[...], repr(key), repr(codec_name), "8 bytes follow the last")
        report = zarrx.verify(store, dtype)
        assert [problem.key for problem in report.corrupt] == [key] and not report.ok
        assert list(array[:2]) == values


# -- decompression bombs -----------------------------------------------------------------------------


def zstd_zeros_frame(size: int, *, declared: int | None) -> bytes:
    """A zstd frame of ``size`` zero bytes as RLE blocks (4 bytes per 128 KiB), declaring
    ``declared`` as its content size, or no size when None (RFC 8878 sections 3.1.1.1-3.1.1.2)."""
    frame = bytearray(struct.pack("<I", 0xFD2FB528))
    if declared is None:
        frame += bytes([0x00, 17 - 10 << 3])  # no content size, not single segment; window 128 KiB
    else:
        frame += bytes([0xE0]) + struct.pack("<Q", declared)  # 8-byte content size, single segment
    block = 128 * KiB
    sizes = [block] * (size // block) + ([size % block] if size % block else [])
    for position, length in enumerate(sizes):
        last = position == len(sizes) - 1
        frame += ((length << 3) | (1 << 1) | last).to_bytes(3, "little") + b"\x00"  # RLE block of zeros
    return bytes(frame)


def deflate_zeros(size: int, segment: int = MiB) -> bytes:
    """Raw DEFLATE of ``size`` zero bytes, built from one compressed segment repeated: a full
    flush resets the compressor, so every segment of zeros compresses to the same bytes."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    piece = compressor.compress(bytes(segment)) + compressor.flush(zlib.Z_FULL_FLUSH)
    return piece * (size // segment) + compressor.flush(zlib.Z_FINISH)


def gzip_zeros(size: int) -> bytes:
    crc = 0
    zeros = bytes(MiB)
    for _ in range(size // MiB):
        crc = zlib.crc32(zeros, crc)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    return header + deflate_zeros(size) + struct.pack("<II", crc, size % 2**32)


def blosc_with(**fields: int) -> bytes:
    """A valid blosc chunk of 64 KiB (lz4, shuffle) with header fields overwritten."""
    codec = BloscCodec(cname="lz4", clevel=5, shuffle="shuffle", typesize=8)
    raw = bytearray(codec.encode(np.arange(8192.0).tobytes()))
    offsets = {"flags": (2, "B"), "nbytes": (4, "<I"), "blocksize": (8, "<I"), "cbytes": (12, "<I")}
    for name, value in fields.items():
        offset, form = offsets[name]
        struct.pack_into(form, raw, offset, value)
    return bytes(raw)


def test_bomb_builders_make_valid_streams():
    size = 3 * MiB + 5
    assert ZstdCodec().decode(zstd_zeros_frame(size, declared=None), size, 4 * MiB).tobytes() == bytes(size)
    assert ZstdCodec().decode(zstd_zeros_frame(MiB, declared=MiB), None, 2 * MiB).tobytes() == bytes(MiB)
    assert gzip.decompress(gzip_zeros(4 * MiB)) == bytes(4 * MiB)


BOMB_KEY = "b/c/1"
BOMBS: dict[str, tuple[str, Callable[[], bytes]]] = {  # name: (compressor, stored bytes)
    "zstd-declares-1GiB": ("zstd", lambda: zstd_zeros_frame(GiB, declared=GiB)),
    "zstd-undeclared-1GiB": ("zstd", lambda: zstd_zeros_frame(GiB, declared=None)),
    "zstd-declares-64KiB-holds-1GiB": ("zstd", lambda: zstd_zeros_frame(GiB, declared=64 * KiB)),
    "gzip-1GiB": ("gzip", lambda: gzip_zeros(GiB)),
    "gzip-1024-members-of-1MiB": ("gzip", lambda: gzip.compress(bytes(MiB), 9, mtime=0) * 1024),
    "zlib-1GiB": ("gzip", lambda: b"\x78\xda" + deflate_zeros(GiB)),
    "blosc-nbytes-1GiB": ("blosc", lambda: blosc_with(nbytes=GiB)),
    "blosc-memcpyed-1GiB": ("blosc", lambda: blosc_with(flags=0x02 | 0x01, nbytes=GiB)),
    "blosc-blocksize-1GiB": ("blosc", lambda: blosc_with(blocksize=GiB)),
    "blosc-cbytes-1GiB": ("blosc", lambda: blosc_with(cbytes=GiB)),
}
BOMB_COMPRESSORS = {
    "zstd": ZstdCodec(level=1),
    "gzip": GzipCodec(level=1),
    "blosc": BloscCodec(cname="lz4", typesize=8),
}


@functools.cache
def bomb_bytes(name: str) -> bytes:
    return BOMBS[name][1]()


@pytest.mark.parametrize("bomb", BOMBS)
def test_decompression_bomb_is_refused_in_bounded_time_and_memory(store, bomb):
    compressor, _ = BOMBS[bomb]
    zarrx.create_group(store)
    array = zarrx.create_array(store, "b", shape=(16384,), chunks=(8192,), dtype="float64",
                               compressors=[BOMB_COMPRESSORS[compressor]])  # fmt: skip
    array[...] = 1.5  # 64 KiB chunks
    store.set(BOMB_KEY, bomb_bytes(bomb))
    array = zarrx.open_array(store, "b")
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * KiB
    tracemalloc.start()
    try:
        start = time.perf_counter()
        check_error(ChunkDecodeError, lambda: array[...], repr(BOMB_KEY), repr(compressor))
        elapsed = time.perf_counter() - start
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    rss_growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * KiB - rss_before
    assert elapsed < 2.0, f"refusing the bomb took {elapsed:.2f} s"
    assert peak < 4 * MiB, f"peak traced memory {peak / MiB:.1f} MiB for a 64 KiB chunk"
    assert rss_growth < 256 * MiB, f"resident memory grew by {rss_growth / MiB:.0f} MiB"
    np.testing.assert_array_equal(array[:8192], 1.5)


@pytest.mark.parametrize(
    "name, stored",
    [
        ("zstd-declares-4GiB", lambda: zstd_zeros_frame(4 * MiB, declared=4 * GiB)),
        ("zstd-undeclared", lambda: zstd_zeros_frame(4 * MiB, declared=None)),
    ],
)
def test_variable_length_chunk_bomb_is_refused(store, name, stored):
    """A vlen chunk has no fixed decoded size: a frame past the pipeline's bound, or one that
    does not declare its size, is refused before anything is allocated."""
    zarrx.create_group(store)
    array = zarrx.create_array(store, "s", shape=(4,), chunks=(4,), dtype="string", compressors=[ZstdCodec(level=1)])
    array[...] = np.array(["a", "b", "c", "d"], dtype=array.dtype)
    store.set("s/c/0", stored())
    tracemalloc.start()
    try:
        check_error(ChunkDecodeError, lambda: zarrx.open_array(store, "s")[...], "'s/c/0'", "'zstd'")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * MiB


# -- corrupt shards -------------------------------------------------------------------------------------

SHARD_KEY = "x/c/1/0"
INDEX_SIZE = 4 * 16 + 4  # 2x2 inner chunks of (offset, nbytes) uint64 pairs, then the crc32c
EMPTY = 2**64 - 1


def with_entry(raw: bytes, offset: int, nbytes: int, payload: bytes = b"") -> bytes:
    """The shard ``raw`` with ``payload`` added and the first index entry replaced (checksum kept valid)."""
    entries = np.frombuffer(raw[-INDEX_SIZE:-4], dtype="<u8").copy()
    entries[:2] = offset, nbytes
    return raw[:-INDEX_SIZE] + payload + Crc32cCodec().encode(entries.tobytes())


def with_inner_chunk(raw: bytes, inner_chunk: bytes) -> bytes:
    """The shard ``raw`` with its first inner chunk replaced by ``inner_chunk``."""
    return with_entry(raw, len(raw) - INDEX_SIZE, len(inner_chunk), inner_chunk)


SHARD_CORRUPTIONS: dict[str, Callable[[bytes], bytes]] = {
    "truncated-half": lambda raw: raw[: len(raw) // 2],
    "empty": lambda raw: b"",
    "index-only": lambda raw: raw[-INDEX_SIZE:],
    "no-index": lambda raw: raw[:-INDEX_SIZE],
    "random": lambda raw: np.random.default_rng(3).bytes(len(raw)),
    "index-checksum": lambda raw: raw[:-10] + bytes([raw[-10] ^ 1]) + raw[-9:],
    "offset-past-end": lambda raw: with_entry(raw, 2**40, 10),
    "nbytes-past-end": lambda raw: with_entry(raw, 0, 2**40),
    "nbytes-2**62": lambda raw: with_entry(raw, 0, 2**62),
    "offset-2**63": lambda raw: with_entry(raw, 2**63, 1),
    "offset-plus-nbytes-overflows": lambda raw: with_entry(raw, 2**64 - 2, 2**64 - 3),
    "half-empty-entry": lambda raw: with_entry(raw, EMPTY, 5),
    "entry-covers-index": lambda raw: with_entry(raw, len(raw) - INDEX_SIZE, INDEX_SIZE),
    "entry-one-byte-short": lambda raw: with_entry(raw, 0, int(np.frombuffer(raw[-INDEX_SIZE:-4], "<u8")[1]) - 1),
    "zero-length-entry": lambda raw: with_entry(raw, 0, 0),
    "inner-zstd-bomb": lambda raw: with_inner_chunk(raw, zstd_zeros_frame(GiB, declared=None)),
    "inner-chunk-of-other-size": lambda raw: with_inner_chunk(raw, ZstdCodec(level=1).encode(bytes(32))),
}
SHARD_READS = {
    "whole-shard": (slice(4, 8), slice(0, 4)),
    "one-inner-chunk": (slice(4, 6), slice(0, 2)),
    "scalar": (4, 0),
}


@pytest.mark.parametrize("read", SHARD_READS)
@pytest.mark.parametrize("corruption", SHARD_CORRUPTIONS)
def test_corrupt_shard(store, corruption, read):
    """Whole-shard reads check the index against the shard; partial reads fetch ranges the index
    names, however absurd, and must still fail on the shard's key in bounded memory."""
    zarrx.create_group(store)
    array = zarrx.create_array(store, "x", shape=(8, 8), chunks=(2, 2), shards=(4, 4), dtype="int32",
                               fill_value=0, compressors=[ZstdCodec(level=1)])  # fmt: skip
    array[...] = DATA
    store.set(SHARD_KEY, SHARD_CORRUPTIONS[corruption](store.get(SHARD_KEY)))
    array = zarrx.open_array(store, "x")
    tracemalloc.start()
    try:
        check_error(ChunkDecodeError, lambda: array[SHARD_READS[read]], f"'{SHARD_KEY}")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * MiB, f"peak traced memory {peak / MiB:.1f} MiB reading a 168-byte shard"
    np.testing.assert_array_equal(array[:4], DATA[:4])


# -- invalid metadata ---------------------------------------------------------------------------------

ARRAY_DOCUMENT = {
    "zarr_format": 3,
    "node_type": "array",
    "shape": [8, 8],
    "data_type": "int32",
    "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4, 4]}},
    "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
    "fill_value": 0,
    "codecs": [
        {"name": "bytes", "configuration": {"endian": "little"}},
        {"name": "zstd", "configuration": {"level": 1}},
    ],
    "attributes": {"units": "m"},
    "dimension_names": ["y", "x"],
}
GROUP_DOCUMENT = {"zarr_format": 3, "node_type": "group", "attributes": {"title": "g"}}
DROP = object()  # a change that deletes the member


def codec(name: str, **configuration: Any) -> dict[str, Any]:
    return {"name": name, "configuration": configuration} if configuration else {"name": name}


LITTLE, ZSTD, GZIP = codec("bytes", endian="little"), codec("zstd", level=1), codec("gzip", level=1)
TIME = {"name": "numpy.datetime64", "configuration": {"unit": "s", "scale_factor": 1}}
UTF32 = {"name": "fixed_length_utf32", "configuration": {"length_bytes": 8}}


def changed(document: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of ``document`` with dotted paths (``"chunk_grid.configuration.chunk_shape"``)
    set to new values, or deleted with DROP."""
    document = copy.deepcopy(document)
    for path, value in changes.items():
        *parents, last = path.split(".")
        target = document
        for name in parents:
            target = target[name]
        if value is DROP:
            del target[last]
        else:
            target[last] = value
    return document


def fill(data_type: Any, fill_value: Any, serializer: Any = LITTLE) -> dict[str, Any]:
    return {"data_type": data_type, "fill_value": fill_value, "codecs": [serializer]}


def codecs(*chain: Any) -> dict[str, Any]:
    return {"codecs": list(chain)}


def transposed(order: Any) -> dict[str, Any]:
    return codecs(codec("transpose", order=order), LITTLE)


def case(name: str, change: dict[str, Any] | bytes, error: type[ZarrxError], *fragments: str):
    """One bad document: the change to the valid one (or its raw bytes), the error, what it names."""
    return pytest.param(change, error, fragments, id=name)


SHAPE = "chunk_grid.configuration.chunk_shape"
DOCUMENT_CASES = [  # for array and group documents alike
    case("invalid-json", b'{"zarr_format": 3,', MetadataError, "not valid JSON"),
    case("python-literal", b"{'zarr_format': 3}", MetadataError, "not valid JSON"),
    case("empty-file", b"", MetadataError, "empty"),
    case("whitespace", b"  \n", MetadataError, "JSON"),
    case("invalid-utf8", b'{"zarr_format": 3, "node_type": "\xff"}', MetadataError, "JSON"),
    case("top-level-array", b'[{"zarr_format": 3}]', MetadataError, "JSON object", "list"),
    case("top-level-number", b"3", MetadataError, "JSON object"),
    case("top-level-null", b"null", MetadataError, "JSON object"),
    case("top-level-string", b'"zarr.json"', MetadataError, "JSON object"),
    case("deeply-nested", b"[" * 100_000 + b"]" * 100_000, MetadataError, "JSON"),
    # a member named twice: Python's json keeps the last, other readers the first (issue 22)
    case("duplicate-member", b'{"zarr_format": 3, "node_type": "group", "node_type": "array"}',
         MetadataError, "'node_type' appears twice"),  # fmt: skip
    case("duplicate-nested-member", b'{"zarr_format": 3, "node_type": "group", "attributes": {"a": 1, "a": 2}}',
         MetadataError, "'a' appears twice"),  # fmt: skip
    case("deeply-nested-attributes", b'{"attributes": ' + b'{"a": ' * 100_000, MetadataError, "JSON"),
    case("no-zarr-format", {"zarr_format": DROP}, MetadataError, "zarr_format"),
    case("zarr-format-4", {"zarr_format": 4}, MetadataError, "zarr_format", "4"),
    case("zarr-format-2", {"zarr_format": 2}, MetadataError, "zarr_format"),
    case("zarr-format-string", {"zarr_format": "3"}, MetadataError, "zarr_format"),
    case("zarr-format-true", {"zarr_format": True}, MetadataError, "zarr_format"),
    case("zarr-format-nan", {"zarr_format": float("nan")}, MetadataError, "zarr_format"),
    case("no-node-type", {"node_type": DROP}, MetadataError, "node_type"),
    case("node-type-table", {"node_type": "table"}, MetadataError, "node_type", "'table'"),
    case("node-type-number", {"node_type": 1}, MetadataError, "node_type"),
    case("node-type-list", {"node_type": ["array"]}, MetadataError, "node_type"),
    case("attributes-list", {"attributes": [1, 2]}, MetadataError, "attributes"),
    case("attributes-string", {"attributes": "units=m"}, MetadataError, "attributes"),
    case("required-extension", {"spatial": {"name": "proj"}}, UnsupportedExtensionError, "spatial"),
    case("required-extension-true", {"spatial": {"name": "proj", "must_understand": True}},
         UnsupportedExtensionError, "spatial"),  # fmt: skip
    case("unknown-plain-member", {"chunk_memory_layout": "C"}, UnsupportedExtensionError, "chunk_memory_layout"),
]

ARRAY_CASES = [
    *[case(f"missing-{name}", {name: DROP}, MetadataError, name)
      for name in ("shape", "data_type", "chunk_grid", "chunk_key_encoding", "fill_value", "codecs")],  # fmt: skip
    # shape and chunk grid
    case("shape-negative", {"shape": [-1, 8]}, MetadataError, "shape", "-1"),
    case("shape-float", {"shape": [8.0, 8]}, MetadataError, "shape"),
    case("shape-bool", {"shape": [True, 8]}, MetadataError, "shape"),
    case("shape-string", {"shape": "8,8"}, MetadataError, "shape"),
    case("shape-null", {"shape": None}, MetadataError, "shape"),
    case("shape-nan", {"shape": [float("nan"), 8]}, MetadataError, "shape"),
    case("shape-nested", {"shape": [[8], 8]}, MetadataError, "shape"),
    case("shape-object", {"shape": {"y": 8, "x": 8}}, MetadataError, "shape"),
    # lengths int64 indexing cannot address (issue 22: a shape of 2**64 was accepted)
    case("shape-2**64", {"shape": [2**64, 8]}, MetadataError, "shape", str(2**64), "int64"),
    case("shape-2**63", {"shape": [8, 2**63]}, MetadataError, "shape", str(2**63), "int64"),
    case("chunk-shape-2**63", {SHAPE: [2**63, 4]}, MetadataError, SHAPE, str(2**63), "int64"),
    case("chunk-grid-unknown", {"chunk_grid.name": "rectangular"},
         UnsupportedExtensionError, "chunk_grid", "rectangular"),  # fmt: skip
    case("chunk-grid-rectilinear-with-chunk-shape", {"chunk_grid.name": "rectilinear"}, MetadataError, "chunk_grid"),
    case("chunk-grid-number", {"chunk_grid": 4}, MetadataError, "chunk_grid"),
    case("chunk-grid-no-name", {"chunk_grid.name": DROP}, MetadataError, "chunk_grid.name"),
    case("chunk-grid-short-form", {"chunk_grid": "regular"}, MetadataError, SHAPE),
    case("chunk-grid-no-configuration", {"chunk_grid.configuration": {}}, MetadataError, SHAPE),
    case("chunk-shape-rank-1", {SHAPE: [4]}, MetadataError, SHAPE),
    case("chunk-shape-rank-3", {SHAPE: [4, 4, 1]}, MetadataError, SHAPE),
    case("chunk-shape-zero", {SHAPE: [0, 4]}, MetadataError, SHAPE),
    case("chunk-shape-negative", {SHAPE: [-4, 4]}, MetadataError, SHAPE),
    case("chunk-shape-float", {SHAPE: [4.5, 4]}, MetadataError, SHAPE),
    case("chunk-grid-extra-member", {"chunk_grid.configuration.count": 2}, MetadataError, "chunk_grid.configuration"),
    case("chunk-grid-configuration-list", {"chunk_grid.configuration": [4]}, MetadataError, "chunk_grid.configuration"),
    # chunk key encoding
    case("key-encoding-unknown", {"chunk_key_encoding.name": "v5"},
         UnsupportedExtensionError, "chunk_key_encoding", "v5"),  # fmt: skip
    case("key-separator-dash", {"chunk_key_encoding.configuration.separator": "-"}, MetadataError, "separator"),
    case("key-separator-dotdot", {"chunk_key_encoding.configuration.separator": "/../"}, MetadataError, "separator"),
    case("key-encoding-short-form", {"chunk_key_encoding": {"name": "v2", "separator": "."}},
         MetadataError, "chunk_key_encoding"),  # fmt: skip
    case("key-encoding-number", {"chunk_key_encoding": 2}, MetadataError, "chunk_key_encoding"),
    # data type
    case("data-type-unknown", {"data_type": "float128"}, UnsupportedExtensionError, "data_type", "float128"),
    case("data-type-unknown-object", {"data_type": {"name": "bfloat17"}}, UnsupportedExtensionError, "data_type"),
    case("data-type-numpy-string", {"data_type": "<i4"}, UnsupportedExtensionError, "data_type"),
    case("data-type-optional", {"data_type": {"name": "int32", "must_understand": False}},
         MetadataError, "data_type.must_understand"),  # fmt: skip
    case("data-type-number", {"data_type": 4}, MetadataError, "data_type"),
    case("data-type-empty", {"data_type": ""}, MetadataError, "data_type"),
    case("data-type-configured", {"data_type": codec("int32", bits=32)}, MetadataError, "data_type.configuration"),
    case("raw-bits-r7", {"data_type": "r7", "fill_value": [0]}, MetadataError, "data_type"),
    case("datetime-unit", {"data_type": codec("numpy.datetime64", unit="eons", scale_factor=1)},
         MetadataError, "data_type.configuration"),  # fmt: skip
    # fill values
    case("fill-int8-300", fill("int8", 300), MetadataError, "fill_value", "300"),
    case("fill-uint8-negative", fill("uint8", -1), MetadataError, "fill_value"),
    case("fill-uint64-2**64", fill("uint64", 2**64), MetadataError, "fill_value"),
    case("fill-int32-fraction", fill("int32", 1.5), MetadataError, "fill_value"),
    case("fill-int32-string", fill("int32", "0"), MetadataError, "fill_value"),
    case("fill-int32-bool", fill("int32", True), MetadataError, "fill_value"),
    case("fill-int32-null", fill("int32", None), MetadataError, "fill_value"),
    case("fill-int32-nan", fill("int32", float("nan")), MetadataError, "fill_value"),
    case("fill-bool-int", fill("bool", 0), MetadataError, "fill_value"),
    case("fill-bool-string", fill("bool", "true"), MetadataError, "fill_value"),
    case("fill-float32-lowercase-nan", fill("float32", "nan"), MetadataError, "fill_value"),
    case("fill-float64-short-hex", fill("float64", "0x7ff8"), MetadataError, "fill_value"),
    case("fill-float32-list", fill("float32", [1.0]), MetadataError, "fill_value"),
    case("fill-complex64-one-part", fill("complex64", [1.0]), MetadataError, "fill_value"),
    case("fill-complex128-number", fill("complex128", 1.0), MetadataError, "fill_value"),
    case("fill-complex64-bad-part", fill("complex64", [1.0, "i"]), MetadataError, "fill_value"),
    case("fill-r16-three-bytes", fill("r16", [1, 2, 3]), MetadataError, "fill_value"),
    case("fill-r16-byte-256", fill("r16", [256, 0]), MetadataError, "fill_value"),
    case("fill-datetime-string", fill(TIME, "2020"), MetadataError, "fill_value"),
    case("fill-string-number", fill("string", 5, codec("vlen-utf8")), MetadataError, "fill_value"),
    case("fill-bytes-bad-base64", fill("bytes", "!!!", codec("vlen-bytes")), MetadataError, "fill_value"),
    case("fill-utf32-too-long", fill(UTF32, "abc"), MetadataError, "fill_value"),
    # codecs
    case("codecs-object", {"codecs": LITTLE}, MetadataError, "codecs"),
    case("codecs-string", {"codecs": "bytes"}, MetadataError, "codecs"),
    case("codecs-empty", codecs(), MetadataError, "codecs", "array -> bytes"),
    case("codec-unknown", codecs(LITTLE, codec("lzma9")), UnknownCodecError, "codecs[1]", "lzma9"),
    case("codec-unknown-short-form", codecs(LITTLE, "lzma9"), UnknownCodecError, "codecs[1]", "lzma9"),
    case("codec-unknown-serializer", codecs(codec("sharding_magic")), UnknownCodecError, "codecs[0]", "sharding_magic"),
    case("codec-number", codecs(LITTLE, 5), MetadataError, "codecs[1]"),
    case("codec-no-name", codecs(LITTLE, {"configuration": {"level": 1}}), MetadataError, "codecs[1].name"),
    case("codec-configuration-list", codecs(LITTLE, {"name": "gzip", "configuration": [1]}),
         MetadataError, "codecs[1].configuration"),  # fmt: skip
    case("codec-configuration-outside", codecs(LITTLE, {"name": "gzip", "level": 1}),
         MetadataError, "codecs[1]", "level"),  # fmt: skip
    case("gzip-level-12", codecs(LITTLE, codec("gzip", level=12)), MetadataError, "codecs[1]", "level"),
    case("gzip-no-level", codecs(LITTLE, codec("gzip")), MetadataError, "codecs[1]", "level"),
    case("zstd-level-string", codecs(LITTLE, codec("zstd", level="3")), MetadataError, "codecs[1]", "level"),
    case("zstd-unknown-member", codecs(LITTLE, codec("zstd", level=1, dict="x")), MetadataError, "codecs[1]", "dict"),
    case("blosc-cname", codecs(LITTLE, codec("blosc", cname="rar", clevel=5)), MetadataError, "codecs[1]", "cname"),
    case("blosc-typesize-0", codecs(LITTLE, codec("blosc", cname="lz4", clevel=5, typesize=0)),
         MetadataError, "codecs[1]", "typesize"),  # fmt: skip
    case("crc32c-configured", codecs(LITTLE, codec("crc32c", seed=1)), MetadataError, "codecs[1]", "seed"),
    case("two-serializers", codecs(LITTLE, LITTLE), MetadataError, "codecs", "exactly one array -> bytes"),
    case("compressor-before-serializer", codecs(ZSTD, LITTLE), MetadataError, "codecs", "order"),
    case("transpose-after-serializer", codecs(LITTLE, codec("transpose", order=[1, 0])), MetadataError, "codecs"),
    case("no-serializer", codecs(codec("transpose", order=[1, 0]), GZIP), MetadataError, "codecs"),
    case("bytes-no-endian", codecs(codec("bytes")), MetadataError, "codecs", "endian"),
    case("bytes-endian-middle", codecs(codec("bytes", endian="middle")), MetadataError, "codecs[0]", "endian"),
    case("bytes-for-string", fill("string", "", LITTLE), MetadataError, "codecs", "bytes"),
    case("vlen-utf8-for-int32", codecs(codec("vlen-utf8")), MetadataError, "codecs", "vlen-utf8"),
    case("vlen-bytes-for-string", fill("string", "", codec("vlen-bytes")), MetadataError, "codecs", "vlen-bytes"),
    case("transpose-repeated-axis", transposed([0, 0]), MetadataError, "codecs[0]", "transpose", "order"),
    case("transpose-1-for-2d", transposed([1]), MetadataError, "codecs[0]", "transpose", "order"),
    case("transpose-axis-out-of-range", transposed([0, 2]), MetadataError, "codecs[0]", "transpose", "order"),
    case("transpose-too-short", transposed([0]), MetadataError, "codecs", "transpose", "order"),
    case("transpose-too-long", transposed([2, 0, 1]), MetadataError, "codecs", "transpose", "order"),
    case("transpose-negative", transposed([-1, 0]), MetadataError, "codecs[0]", "transpose", "order"),
    case("transpose-strings", transposed(["1", "0"]), MetadataError, "codecs[0]", "transpose", "order"),
    case("transpose-letter", transposed("X"), MetadataError, "codecs[0]", "transpose", "order"),
    case("transpose-no-order", codecs(codec("transpose"), LITTLE), MetadataError, "codecs[0]", "order"),
    # dimension names, storage transformers
    case("dimension-names-short", {"dimension_names": ["y"]}, MetadataError, "dimension_names"),
    case("dimension-names-long", {"dimension_names": ["z", "y", "x"]}, MetadataError, "dimension_names"),
    case("dimension-names-numbers", {"dimension_names": [1, 2]}, MetadataError, "dimension_names"),
    case("dimension-names-string", {"dimension_names": "yx"}, MetadataError, "dimension_names"),
    case("storage-transformer", {"storage_transformers": [codec("chunk-manifest")]},
         UnsupportedExtensionError, "storage_transformers[0]", "chunk-manifest"),  # fmt: skip
    case("storage-transformer-short-form", {"storage_transformers": ["chunk-manifest"]},
         UnsupportedExtensionError, "storage_transformers[0]"),  # fmt: skip
    case("storage-transformers-object", {"storage_transformers": {"name": "x"}}, MetadataError, "storage_transformers"),
    case("storage-transformer-number", {"storage_transformers": [7]}, MetadataError, "storage_transformers[0]"),
]

GROUP_CASES = [
    case("consolidated-kind", {"consolidated_metadata": {"kind": "offsite", "metadata": {}}},
         MetadataError, "consolidated_metadata.kind"),  # fmt: skip
    case("consolidated-list", {"consolidated_metadata": [1]}, MetadataError, "consolidated_metadata"),
    case("consolidated-entries", {"consolidated_metadata": {"kind": "inline", "metadata": {"a": 1}}},
         MetadataError, "consolidated_metadata.metadata"),  # fmt: skip
]


def document_bytes(base: dict[str, Any], change: dict[str, Any] | bytes) -> bytes:
    return change if isinstance(change, bytes) else json.dumps(changed(base, change)).encode()


ARRAY_OPENERS: dict[str, Callable[[Any], Any]] = {
    "open_array": lambda store: zarrx.open_array(store, path="x"),
    "open": lambda store: zarrx.open(store, path="x"),
    "open-r+": lambda store: zarrx.open(store, path="/x/", mode="r+"),
    "group[name]": lambda store: zarrx.open_group(store, mode="r")["x"],
    "members": lambda store: zarrx.open_group(store, mode="r").members(),
}
GROUP_OPENERS: dict[str, Callable[[Any], Any]] = {
    "open_group": lambda store: zarrx.open_group(store, path="g", mode="r"),
    "open": lambda store: zarrx.open(store, path="g"),
    "group[name]": lambda store: zarrx.open_group(store, mode="r")["g"],
    "tree": lambda store: zarrx.open_group(store, mode="r").tree(),
}


@pytest.mark.parametrize("opener", ARRAY_OPENERS)
@pytest.mark.parametrize("change, error, fragments", DOCUMENT_CASES + ARRAY_CASES)
def test_invalid_array_metadata(store, opener, change, error, fragments):
    zarrx.create_group(store)
    store.set("x/zarr.json", document_bytes(ARRAY_DOCUMENT, change))
    check_error(error, lambda: ARRAY_OPENERS[opener](store), "x/zarr.json", *fragments)


@pytest.mark.parametrize("opener", GROUP_OPENERS)
@pytest.mark.parametrize("change, error, fragments", DOCUMENT_CASES + GROUP_CASES)
def test_invalid_group_metadata(store, opener, change, error, fragments):
    zarrx.create_group(store)
    store.set("g/zarr.json", document_bytes(GROUP_DOCUMENT, change))
    check_error(error, lambda: GROUP_OPENERS[opener](store), "g/zarr.json", *fragments)


@pytest.mark.parametrize("change, error, fragments", DOCUMENT_CASES)
def test_invalid_root_metadata(store, change, error, fragments):
    store.set("zarr.json", document_bytes(GROUP_DOCUMENT, change))
    check_error(error, lambda: zarrx.open(store), "zarr.json", *fragments)
    check_error(error, lambda: zarrx.open_group(store, mode="a"), "zarr.json", *fragments)


@pytest.mark.parametrize(
    "change, error, fragments", [case for case in DOCUMENT_CASES + ARRAY_CASES if isinstance(case.values[0], dict)][::2]
)
def test_invalid_metadata_inside_consolidated_metadata(store, change, error, fragments):
    """A child document from the parent's consolidated metadata is checked like a stored one."""
    root = zarrx.create_group(store)
    root.create_array("x", shape=(8, 8), chunks=(4, 4), dtype="int32")
    zarrx.consolidate_metadata(store)
    document = json.loads(store.get("zarr.json"))
    document["consolidated_metadata"]["metadata"]["x"] = changed(ARRAY_DOCUMENT, change)
    store.set("zarr.json", json.dumps(document).encode())
    check_error(error, lambda: zarrx.open_group(store, mode="r")["x"], "x/zarr.json", *fragments)


@pytest.mark.parametrize(
    "change",
    [
        {"spatial": {"name": "proj", "must_understand": False}},
        {"storage_transformers": [{"name": "chunk-manifest", "must_understand": False}]},
        codecs(LITTLE, {"name": "lzma9", "must_understand": False}, {"name": "zstd", "configuration": {"level": 1}}),
        {"dimension_names": [None, "x"]},
        {"zarr_format": 3, "attributes": DROP, "dimension_names": DROP},
    ],
    ids=["extension", "storage-transformer", "codec", "null-dimension-name", "optional-members-absent"],
)
def test_optional_extensions_still_open(store, change):
    """The controls: what the spec lets a reader ignore is ignored, and the data reads."""
    create(store, "zstd")
    store.set("x/zarr.json", document_bytes(ARRAY_DOCUMENT, change))
    np.testing.assert_array_equal(hostile(lambda: zarrx.open_array(store, "x")[...]), DATA)


def test_node_of_the_wrong_kind_or_absent(store):
    create(store, "none")
    zarrx.create_group(store, "g")
    check_error(ContainsArrayError, lambda: zarrx.open_group(store, "x", mode="r"), "'/x'")
    check_error(ContainsGroupError, lambda: zarrx.open_array(store, "g"), "'/g'")
    check_error(NodeNotFoundError, lambda: zarrx.open_array(store, "nope"), "'nope/zarr.json'")
    check_error(NodeNotFoundError, lambda: zarrx.open_group(store, mode="r")["g/nope"], "'g/nope/zarr.json'")
    check_error(NodeNotFoundError, lambda: zarrx.open(store, "x/c"), "'x/c/zarr.json'")


# -- hostile node names ---------------------------------------------------------------------------------

#: name: the component the error must name (as its repr)
HOSTILE_NAMES = {
    "..": "..",
    "../x": "..",
    "../../../../tmp/x": "..",
    "a/../../b": "..",
    "a/..": "..",
    ".": ".",
    "./a": ".",
    "...": "...",
    "a//b": "",
    "__zarr": "__zarr",
    "a/__meta": "__meta",
    "zarr.json": "zarr.json",
    "a/zarr.json": "zarr.json",
    "a\x00b": "a\x00b",
    "a\\b": "a\\b",
    "..\\..\\x": "..\\..\\x",
    "a/b\\..\\..": "b\\..\\..",
}
#: only as a child name: the empty name and absolute paths (a top-level ``path`` is store-relative,
#: but ``group["/x"]`` must not silently mean ``group/x`` rather than the root's ``x``)
HOSTILE_CHILD_NAMES = {**HOSTILE_NAMES, "": "", "/": "/", "/etc/passwd": "/etc/passwd", "/x": "/x"}

PATH_OPERATIONS: dict[str, Callable[[Any, str], Any]] = {
    "create_array": lambda store, name: zarrx.create_array(store, name, shape=(2,), dtype="int8"),
    "create_group": lambda store, name: zarrx.create_group(store, name),
    "open-a": lambda store, name: zarrx.open(store, path=name, mode="a"),
    "open-r": lambda store, name: zarrx.open(store, path=name),
    "open_group-w": lambda store, name: zarrx.open_group(store, path=name, mode="w"),
    "open_array-w": lambda store, name: zarrx.open_array(store, path=name, mode="w", shape=(2,), dtype="int8"),
    "consolidate": lambda store, name: zarrx.consolidate_metadata(store, name),
}
CHILD_OPERATIONS: dict[str, Callable[[Any, str], Any]] = {
    "group[name]": lambda group, name: group[name],
    "group.get": lambda group, name: group.get(name),
    "group.create_array": lambda group, name: group.create_array(name, shape=(2,), dtype="int8"),
    "group.create_group": lambda group, name: group.create_group(name),
    "group.require_group": lambda group, name: group.require_group(name),
    "del group[name]": lambda group, name: group.__delitem__(name),
    "group[name] = value": lambda group, name: group.__setitem__(name, np.arange(3)),
}


def populated(store):
    """A hierarchy for the name tests: / with arrays x and sub/x, group sub (where operations run)."""
    root = zarrx.create_group(store)
    root.create_array("x", shape=(2,), dtype="int8")[...] = 1
    sub = root.create_group("sub")
    sub.create_array("x", shape=(2,), dtype="int8")[...] = 2
    return sub


def check_refused_and_untouched(store, tmp_path, call, component):
    before = snapshot(tmp_path), sorted(os.listdir(tmp_path.parent)), dict(getattr(store, "mapping", {}))
    check_error(InvalidPathError, call, repr(component))
    after = snapshot(tmp_path), sorted(os.listdir(tmp_path.parent)), dict(getattr(store, "mapping", {}))
    assert after == before, "a refused operation changed the store or wrote outside it"


#: names the spec reserves ('__' prefix): other writers made such nodes (xarray's
#: "__xarray_dataarray_variable__"), so they are read, looked up and deleted, but never created
RESERVED_NAMES = ("__zarr", "a/__meta")
READING_OPERATIONS = ("open-r", "consolidate", "group[name]", "group.get", "del group[name]")


def refused_cases(names, operations):
    return [(name, operation) for name in names for operation in operations
            if not (name in RESERVED_NAMES and operation in READING_OPERATIONS)]  # fmt: skip


@pytest.mark.parametrize("name, operation", refused_cases(HOSTILE_NAMES, PATH_OPERATIONS))
def test_hostile_path_is_refused(store, tmp_path, name, operation):
    populated(store)
    check_refused_and_untouched(store, tmp_path, lambda: PATH_OPERATIONS[operation](store, name), HOSTILE_NAMES[name])


@pytest.mark.parametrize("name, operation", refused_cases(HOSTILE_CHILD_NAMES, CHILD_OPERATIONS))
def test_hostile_child_name_is_refused(store, tmp_path, name, operation):
    sub = populated(store)
    call = lambda: CHILD_OPERATIONS[operation](sub, name)  # noqa: E731
    check_refused_and_untouched(store, tmp_path, call, HOSTILE_CHILD_NAMES[name])


@pytest.mark.parametrize("name", RESERVED_NAMES)
def test_reserved_names_are_read_but_never_created(store, name):
    sub = populated(store)
    with pytest.raises(NodeNotFoundError):
        sub[name]
    assert sub.get(name) is None
    with pytest.raises(NodeNotFoundError):
        zarrx.open(store, path=name)
    # a node another writer made under such a name is found, listed and deleted
    parts = name.split("/")
    for depth in range(1, len(parts) + 1):
        store.set(f"sub/{'/'.join(parts[:depth])}/zarr.json", json.dumps(GROUP_DOCUMENT).encode())
    assert sub[name].path == f"sub/{name}"
    assert parts[-1] in list(zarrx.open_group(store, "/".join(["sub", *parts[:-1]])))
    del sub[name]
    assert sub.get(name) is None


@pytest.mark.parametrize("name", [None, 3, b"..", ("a",), ["a", ".."]], ids=repr)
def test_name_that_is_not_a_string_is_refused(store, tmp_path, name):
    sub = populated(store)
    for call in (lambda: sub[name], lambda: sub.create_group(name), lambda: zarrx.open(store, path=name, mode="a")):
        check_refused_and_untouched(store, tmp_path, call, name)


@pytest.mark.parametrize("name", ["..", "../x", "a/../../b", "", "zarr.json", "a\\b"])
def test_hostile_name_inside_consolidated_metadata(store, name):
    """Consolidated metadata names children by path: a hostile one is refused (or, when it is
    no direct child, ignored) and never turns into a store key."""
    root = zarrx.create_group(store)
    root.create_array("x", shape=(2,), dtype="int8")
    zarrx.consolidate_metadata(store)
    document = json.loads(store.get("zarr.json"))
    document["consolidated_metadata"]["metadata"][name] = GROUP_DOCUMENT
    store.set("zarr.json", json.dumps(document).encode())
    group = zarrx.open_group(store, mode="r")
    try:
        members = hostile(lambda: dict(group.members(max_depth=None)))
    except InvalidPathError as error:
        assert repr(name) in str(error)
    else:
        assert set(members) == {"x"}
    check_error(InvalidPathError, lambda: group[name], repr(HOSTILE_CHILD_NAMES[name]))


def passwd_mtime() -> int | None:
    return Path("/etc/passwd").stat().st_mtime_ns if Path("/etc/passwd").exists() else None


def test_absolute_top_level_path_stays_inside_the_store(tmp_path):
    """A top-level ``path`` is relative to the store root whatever its leading '/' (as in
    zarr-python): ``/etc/passwd`` names the node ``etc/passwd`` inside the store."""
    outside = tmp_path / "outside"
    outside.mkdir()
    store_root = tmp_path / "store"
    for path in ("/etc/passwd", str(outside / "victim")):
        before = snapshot(outside), passwd_mtime()
        array = zarrx.create_array(store_root, path, shape=(2,), dtype="int8", fill_value=3)
        array[...] = 4
        assert (store_root / path.lstrip("/") / "zarr.json").is_file()
        assert (snapshot(outside), passwd_mtime()) == before
        assert zarrx.open_array(store_root, path).path == path.strip("/")


@pytest.mark.parametrize("name", ["we\\ird", "...", "__zarr"])
def test_folders_that_are_not_node_names_in_a_listing(tmp_path, name):
    """A folder someone else made whose name is no node name is skipped or refused (with a
    ZarrxError naming it) when the group is listed; it never becomes a key that leaves the store."""
    root = zarrx.create_group(tmp_path / "store")
    root.create_array("ok", shape=(2,), dtype="int8")
    (tmp_path / "store" / name).mkdir()
    (tmp_path / "store" / name / "zarr.json").write_bytes(json.dumps(GROUP_DOCUMENT).encode())
    before = snapshot(tmp_path)
    try:
        members = hostile(lambda: dict(zarrx.open_group(tmp_path / "store", mode="r").members(max_depth=None)))
    except InvalidPathError as error:
        assert repr(name)[1:-1] in str(error)
    else:
        assert "ok" in members
    assert snapshot(tmp_path) == before


# -- a store that fails ----------------------------------------------------------------------------------


def replace_with(path: Path, kind: str) -> None:
    """Put something that is not a regular file (or a broken one) where ``path`` is."""
    if path.is_file():
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    {
        "directory": lambda: path.mkdir(),
        "fifo": lambda: os.mkfifo(path),
        "symlink-loop": lambda: path.symlink_to(path.name),
        "symlink-to-dev-zero": lambda: path.symlink_to("/dev/zero"),
        "symlink-to-dev-urandom": lambda: path.symlink_to("/dev/urandom"),
        "dangling-symlink": lambda: path.symlink_to(path.parent / "nowhere"),
        "parent-is-file": lambda: (path.parent.rename(path.parent.with_name("moved")), path.parent.write_bytes(b"x")),
    }[kind]()


def release_fifo(path: Path) -> None:
    """Unblock a reader stuck opening the FIFO ``path`` (a writer opening it lets it see EOF)."""
    with contextlib.suppress(OSError):
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))


STORE_FAILURES = {  # what is at the chunk's path: the result the store contract gives
    "directory": StoreError,  # a folder holds no value: it is not read as missing (the fill value)
    "dangling-symlink": "missing",
    "parent-is-file": "missing",  # (both chunks x/c/1/0 and x/c/1/1 are then missing)
    "symlink-loop": StoreError,
    "fifo": StoreError,
    "symlink-to-dev-zero": OutsideStoreError,  # a link out of the store root: refused before opening
    "symlink-to-dev-urandom": OutsideStoreError,
}


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs POSIX FIFOs and symlinks")
@pytest.mark.parametrize("kind", STORE_FAILURES)
@pytest.mark.parametrize("target", ["chunk", "metadata"])
def test_local_store_failure(tmp_path, kind, target):
    """Not-a-file at a key reads as missing (a dangling link, a file where a folder of the key
    should be) or fails with a StoreError naming the key (a folder, a FIFO, a device, a link
    loop): never a bare OSError, never a read that blocks or never ends."""
    create(tmp_path / "store", "zstd")
    key = CHUNK_KEY if target == "chunk" else "x/zarr.json"
    path = tmp_path / "store" / key
    replace_with(path, kind)
    read = lambda: zarrx.open_array(tmp_path / "store", "x")[...]  # noqa: E731
    try:
        if isinstance(STORE_FAILURES[kind], type):
            check_error(STORE_FAILURES[kind], read, repr(key))
        elif target == "chunk":
            expected = DATA.copy()
            expected[4:, : 8 if kind == "parent-is-file" else 4] = 0  # the fill value
            np.testing.assert_array_equal(hostile(read), expected)
        else:
            check_error(NodeNotFoundError, read, repr(key))
    finally:
        if kind == "fifo":
            release_fifo(path)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs POSIX symlinks")
@pytest.mark.parametrize("kind", ["symlink-to-dev-zero", "symlink-to-dev-urandom"])
def test_a_device_behind_a_followed_external_link_is_a_store_error(tmp_path, kind):
    """A store that follows links out of its root still refuses what is not a regular file."""
    create(tmp_path / "store", "zstd")
    replace_with(tmp_path / "store" / CHUNK_KEY, kind)
    store = LocalStore(tmp_path / "store", follow_external_links=True)
    check_error(StoreError, lambda: zarrx.open_array(store, "x")[...], repr(CHUNK_KEY), "not a regular file")


# -- strict parsing of every document ------------------------------------------------------------------
V2_ARRAY = b'{"zarr_format": 2, "shape": [4], "chunks": [2], "dtype": "<i4", "compressor": null, "fill_value": 0, "order": "C", "filters": null}'


@pytest.mark.parametrize(
    "documents, key, fragments",
    [
        ({".zarray": V2_ARRAY.replace(b'"order": "C"', b'"order": "C", "order": "F"'), ".zattrs": b"{}"},
         ".zarray", ("'order' appears twice",)),
        ({".zarray": V2_ARRAY, ".zattrs": b'{"units": "m", "units": "km"}'}, ".zattrs", ("'units' appears twice",)),
        ({".zarray": V2_ARRAY.replace(b'"shape": [4]', b'"shape": [18446744073709551616]'), ".zattrs": b"{}"},
         ".zarray", ("shape", "18446744073709551616", "int64")),
        ({".zarray": V2_ARRAY.replace(b'"chunks": [2]', b'"chunks": [9223372036854775808]'), ".zattrs": b"{}"},
         ".zarray", ("chunks", "int64")),
    ],
    ids=["zarray-duplicate", "zattrs-duplicate", "zarray-shape-2**64", "zarray-chunks-2**63"],
)  # fmt: skip
def test_v2_documents_are_parsed_strictly(store, documents, key, fragments):
    for name, raw in documents.items():
        store.set(f"x/{name}", raw)
    store.set(".zgroup", b'{"zarr_format": 2}')
    check_error(MetadataError, lambda: zarrx.open_array(store, "x", zarr_format=2), f"x/{key}", *fragments)


def test_duplicate_members_in_consolidated_metadata_are_refused(store):
    root = zarrx.create_group(store, zarr_format=2)
    root.create_array("x", shape=(2,), dtype="int8")
    zarrx.consolidate_metadata(store)
    raw = store.get(".zmetadata").replace(b'"zarr_consolidated_format": 1', b'"zarr_consolidated_format": 1, "metadata": {}')
    store.set(".zmetadata", raw)
    check_error(MetadataError, lambda: zarrx.open_group(store, mode="r"), ".zmetadata", "'metadata' appears twice")
    v3 = MemoryStore()
    zarrx.create_group(v3).create_array("x", shape=(2,), dtype="int8")
    zarrx.consolidate_metadata(v3)
    raw = v3.get("zarr.json").replace(b'"kind": "inline"', b'"kind": "inline", "kind": "inline"')
    v3.set("zarr.json", raw)
    check_error(MetadataError, lambda: zarrx.open_group(v3, mode="r"), "zarr.json", "'kind' appears twice")


def test_the_longest_dimension_int64_can_address_is_accepted_and_read():
    array = zarrx.create_array({}, shape=(2**63 - 1,), chunks=(1000,), dtype="int8", fill_value=3)
    array[-1] = 5
    assert (array[-1], array[2**63 - 2], array[0]) == (5, 5, 3)
    for call in (lambda: array.resize(2**63), lambda: zarrx.create_array({}, shape=(2**64,), dtype="int8"),
                 lambda: zarrx.create_array({}, shape=(4,), chunks=(2**63,), dtype="int8")):  # fmt: skip
        check_error(MetadataError, call, "int64", "2**63 - 1")


# -- messages and classes ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "read, index",
    [
        (lambda array: array[-100], "-100"),
        (lambda array: array[8], "8"),
        (lambda array: array.oindex[[1, -100]], "-100"),
        (lambda array: array.vindex[[2, -9]], "-9"),
        (lambda array: array.get_basic_selection(-9), "-9"),
        (lambda array: array.__setitem__(-100, 1), "-100"),
        # an unsigned index past int64 once wrapped around to -1, the last element: a wrong answer
        (lambda array: array.oindex[np.array([2**64 - 1], dtype="uint64")], str(2**64 - 1)),
        (lambda array: array.vindex[np.array([2**63], dtype="uint64")], str(2**63)),
    ],
    ids=["int", "int-past-end", "oindex", "vindex", "basic", "write", "oindex-uint64", "vindex-uint64"],
)
def test_an_index_out_of_bounds_is_named_as_written(read, index):
    """``a[-100]`` on a length-8 array names -100, the dimension and its length (not "index -92")."""
    array = zarrx.create_array({}, shape=(8,), chunks=(4,), dtype="int8")
    array[:] = np.arange(8)
    check_error(BoundsCheckError, lambda: read(array), f"index {index} is out of bounds", "dimension 0", "length 8")


def test_conflicting_dimension_lengths_are_a_zarrx_error_naming_them(tmp_path):
    import xarray as xr

    import zarrx.xarray  # noqa: F401 (engine="zarrx")

    root = zarrx.create_group(tmp_path / "store")
    root.create_array("a", shape=(3,), dtype="int8", dimension_names=["x"])
    root.create_array("b", shape=(4,), dtype="int8", dimension_names=["x"])
    for open_ in (lambda: xr.open_dataset(tmp_path / "store", engine="zarrx"),
                  lambda: xr.open_datatree(tmp_path / "store", engine="zarrx")):  # fmt: skip
        error = check_error(ConflictingDimensionsError, open_, "'x'", "3 in array 'a'", "4 in array 'b'", "drop_variables")
        assert isinstance(error, ValueError)
    opened = xr.open_dataset(tmp_path / "store", engine="zarrx", drop_variables=["b"])
    assert opened.sizes == {"x": 3}


# -- property: mutated metadata and chunks ------------------------------------------------------------------

FUZZ_CHAINS: dict[str, tuple[dict[str, Any], bool]] = {  # create keywords, whether corruption is always detected
    "crc32c": ({"compressors": [Crc32cCodec()]}, True),
    "zstd-checksum": ({"compressors": [ZstdCodec(level=1, checksum=True)]}, True),
    "gzip": ({"compressors": [GzipCodec(level=5)]}, True),
    "transpose-zstd-crc32c": (
        {"filters": [TransposeCodec(order=(1, 0))], "compressors": [ZstdCodec(level=1), Crc32cCodec()]},
        True,
    ),
    "string-gzip": ({"dtype": "string", "compressors": [GzipCodec(level=1)]}, True),
    "zstd": ({"compressors": [ZstdCodec(level=1)]}, False),
    "blosc": ({"compressors": [BloscCodec(cname="lz4", clevel=5, shuffle="bitshuffle", typesize=4)]}, False),
    "blosc-zstd": ({"compressors": [BloscCodec(cname="zstd", clevel=3, shuffle="shuffle", typesize=4)]}, False),
    "none": ({"compressors": None}, False),
    "string-none": ({"dtype": "string", "compressors": None}, False),
    "bytes-zstd": ({"dtype": "bytes", "compressors": [ZstdCodec(level=1)]}, False),
    "sharded-crc32c": ({"chunks": (2, 2), "shards": (4, 4), "compressors": [Crc32cCodec()]}, True),
    "sharded-zstd": ({"chunks": (2, 4), "shards": (4, 4), "compressors": [ZstdCodec(level=1)]}, False),
}
STRINGS = np.array(["", "a", "héllo", "日本語", "x" * 30, "zarr"] * 11)[:64].reshape(8, 8)


@functools.cache
def fuzz_fixture(chain: str) -> tuple[dict[str, bytes], np.ndarray]:
    """The stored keys of an 8x8 array (4x4 chunks or shards) of ``chain`` and the data it holds."""
    keywords = dict(FUZZ_CHAINS[chain][0])
    dtype, chunks = keywords.pop("dtype", "int32"), keywords.pop("chunks", (4, 4))
    mapping: dict[str, bytes] = {}
    array = zarrx.create_array(MemoryStore(mapping), "x", shape=(8, 8), chunks=chunks, dtype=dtype, **keywords)
    if dtype == "string":
        data = STRINGS.astype(array.dtype)
    elif dtype == "bytes":
        data = np.array([value.encode() for value in STRINGS.reshape(-1)], dtype=object).reshape(8, 8)
    else:
        data = DATA
    array[...] = data
    return mapping, array[...]


JSON_POOL = [
    None, True, False, 0, 1, -1, 3, 4, 2**31, 2**63, 2**64, -(2**63) - 1, 10**30, 0.5, -0.0, 1e308,
    float("nan"), float("inf"), float("-inf"), "", "x", "NaN", "0x7fc00000", "bytes", "regular", "default",
    "int32", "string", "array", "group", "../..", "/", "c", [], [0], [1, 0], [-1], [4, 4], [2**64, 1],
    [[4]], ["x", None], {}, {"name": "x"}, {"name": "bytes"}, {"name": "zstd", "configuration": {"level": 99}},
    {"must_understand": False}, {"name": "transpose", "configuration": {"order": [0, 0]}}, {"a": {"b": [{"c": []}]}},
]  # fmt: skip


def member_paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    """The path of every member and element inside a JSON value."""
    if isinstance(value, dict):
        children = value.items()
    elif isinstance(value, list):
        children = enumerate(value)
    else:
        return []
    paths = []
    for name, child in children:
        paths.append((*prefix, name))
        paths.extend(member_paths(child, (*prefix, name)))
    return paths


@st.composite
def mutated_document(draw, document: dict[str, Any]) -> bytes:
    document = json.loads(json.dumps(document))
    for _ in range(draw(st.integers(1, 4))):
        paths = member_paths(document)
        if not paths:
            break
        *parents, last = draw(st.sampled_from(paths))
        container = document
        for name in parents:
            container = container[name]
        operation = draw(st.sampled_from(["delete", "replace", "replace", "wrap", "stringify", "nest"]))
        if operation == "delete":
            del container[last]
        elif operation == "replace":
            container[last] = copy.deepcopy(draw(st.sampled_from(JSON_POOL)))
        elif operation == "wrap":
            container[last] = [container[last]]
        elif operation == "stringify":
            container[last] = json.dumps(container[last])
        else:
            container[last] = {"name": container[last], "configuration": copy.deepcopy(container[last])}
    text = json.dumps(document).encode()
    if draw(st.integers(0, 9)) == 0:  # now and then a damaged text as well
        cut = draw(st.integers(0, len(text)))
        text = text[:cut] + draw(st.binary(max_size=3)) + text[cut + 1 :]
    return text


@contextlib.contextmanager
def fuzz_store(kind: str, mapping: dict[str, bytes]):
    """A store of ``kind`` holding a copy of ``mapping`` (a LocalStore in a fresh folder)."""
    if kind == "memory":
        yield MemoryStore(dict(mapping))
        return
    with tempfile.TemporaryDirectory(prefix="zarrx-fuzz-") as folder:
        store = LocalStore(folder)
        store.set_many(mapping)
        yield store


def read_or_zarrx_error(store) -> tuple[np.ndarray, np.ndarray] | None:
    """``x`` read whole (a bounded corner of it) and in part, or None when zarrx refused with a ZarrxError."""

    def read() -> tuple[np.ndarray, np.ndarray]:
        array = zarrx.open_array(store, "x")
        return array[(slice(0, 8),) * array.ndim], array[(slice(1, 3),) * array.ndim]

    try:
        return hostile(read)
    except ZarrxError:
        return None


@settings(max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(chain=st.sampled_from(sorted(FUZZ_CHAINS)), kind=st.sampled_from(["memory", "local"]), data=st.data())
def test_mutated_metadata_opens_correctly_or_raises_zarrx_error(chain, kind, data):
    mapping, expected = fuzz_fixture(chain)
    original = json.loads(mapping["x/zarr.json"])
    document = data.draw(mutated_document(original))
    with fuzz_store(kind, {**mapping, "x/zarr.json": document}) as store:
        result = read_or_zarrx_error(store)
    if result is not None and json.loads(document) == original:
        np.testing.assert_array_equal(result[0], expected)


@st.composite
def mutated_chunk(draw, raw: bytes) -> bytes:
    for _ in range(draw(st.integers(1, 3))):
        position = draw(st.integers(0, max(0, len(raw) - 1)))
        operation = draw(st.sampled_from(["truncate", "flip", "insert", "delete", "replace", "duplicate"]))
        if operation == "truncate":
            raw = raw[:position]
        elif operation == "flip" and raw:
            raw = raw[:position] + bytes([raw[position] ^ (1 << draw(st.integers(0, 7)))]) + raw[position + 1 :]
        elif operation == "insert":
            raw = raw[:position] + draw(st.binary(min_size=1, max_size=8)) + raw[position:]
        elif operation == "delete":
            raw = raw[:position] + raw[position + draw(st.integers(1, 8)) :]
        elif operation == "replace":
            raw = draw(st.binary(max_size=80))
        else:
            raw = raw + raw
    return raw


@settings(max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    chain=st.sampled_from(sorted(FUZZ_CHAINS)),
    kind=st.sampled_from(["memory", "local"]),
    chunk=st.sampled_from(["x/c/0/0", "x/c/1/1"]),
    data=st.data(),
)
def test_mutated_chunk_reads_correctly_or_raises_zarrx_error(chain, kind, chunk, data):
    mapping, expected = fuzz_fixture(chain)
    stored = data.draw(mutated_chunk(mapping[chunk]))
    with fuzz_store(kind, {**mapping, chunk: stored}) as store:
        result = read_or_zarrx_error(store)
    if result is None:
        return
    whole, part = result
    assert whole.shape == expected.shape and whole.dtype == expected.dtype
    if FUZZ_CHAINS[chain][1] or stored == mapping[chunk]:
        np.testing.assert_array_equal(whole, expected)
        np.testing.assert_array_equal(part, expected[1:3, 1:3])
