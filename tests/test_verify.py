"""zarrx.tools.verify (zarrx.verify): every stored chunk decoded, each problem reported by key, nothing else judged wrongly.

A healthy hierarchy (v3, sharded, variable-length, v2, written by zarrx and by zarr-python)
verifies clean; each kind of damage -- truncated, random, checksum-failing, wrong-size
chunks, a corrupt shard index or inner chunk, an unreadable chunk, invalid metadata -- is
reported under its own key while every other chunk is still checked; missing chunks, unknown
keys and leftover temporary files are reported separately and do not fail the check.
"""

from __future__ import annotations

import json
import re
import threading

import numpy as np
import pytest

import zarrx
from zarrx.codecs import BytesCodec, Crc32cCodec, GzipCodec, ZstdCodec
from zarrx.errors import NodeNotFoundError, ReadOnlyError
from zarrx.storage import LocalStore, MemoryStore
from zarrx.testing import FaultyStore
from zarrx.tools.verify import Problem, VerifyReport, verify
from tests.figures import add, report_figures  # noqa: F401 (report_figures is an autouse fixture)
from tests.test_draft import draft_store  # noqa: F401 (a fixture: the 2022 draft layout's seed hierarchy)

DATA = np.arange(100, dtype="int32").reshape(10, 10)
STRINGS = np.array(["", "a", "héllo", "日本語", "zarr", "x" * 30])


def build(store) -> dict[str, list[str]]:
    """A hierarchy of every kind of array, each fully written; its chunk keys by array."""
    root = zarrx.create_group(store, attributes={"title": "verify"})
    plain = root.create_array("g/plain", shape=(10, 10), chunks=(4, 4), dtype="int32",
                              compressors=[ZstdCodec(level=1), Crc32cCodec()])  # fmt: skip
    plain[...] = DATA
    raw = root.create_array("g/raw", shape=(10,), chunks=(5,), dtype="float64", compressors=None)
    raw[...] = np.linspace(0, 1, 10)
    sharded = root.create_array("sharded", shape=(8, 8), chunks=(2, 2), shards=(4, 4), dtype="float32")
    sharded[...] = np.arange(64, dtype="float32").reshape(8, 8) + 1
    text = root.create_array("text", shape=(6,), chunks=(3,), dtype="string", compressors=[GzipCodec(level=1)])
    text[...] = STRINGS
    return {
        "g/plain": [f"g/plain/c/{i}/{j}" for i in range(3) for j in range(3)],
        "g/raw": ["g/raw/c/0", "g/raw/c/1"],
        "sharded": [f"sharded/c/{i}/{j}" for i in range(2) for j in range(2)],
        "text": ["text/c/0", "text/c/1"],
    }


@pytest.fixture(params=["memory", "local"])
def store(request, tmp_path):
    return MemoryStore() if request.param == "memory" else LocalStore(tmp_path / "data.zarr")


def keys(problems: list[Problem]) -> list[str]:
    return [problem.key for problem in problems]


def test_a_healthy_hierarchy_verifies_clean(store):
    chunks = build(store)
    report = verify(store)
    assert report.ok and bool(report)
    assert report.corrupt == [] and report.bad_metadata == []
    assert report.missing == [] and report.unknown == [] and report.temporary == []
    assert report.chunks_checked == sum(map(len, chunks.values()))
    assert [array.path for array in report.arrays] == sorted(chunks)
    assert {array.path: array.stored for array in report.arrays} == {path: len(k) for path, k in chunks.items()}
    assert report.groups == ["/", "/g"]
    assert "OK" in str(report) and "FAILED" not in str(report)


@pytest.mark.parametrize(
    "key, damage, fragment",
    [
        ("g/plain/c/1/1", lambda raw: raw[: len(raw) // 2], "crc32c"),  # truncated
        ("g/plain/c/0/2", lambda raw: raw[:-1] + bytes([raw[-1] ^ 1]), "checksum"),  # checksum mismatch
        ("g/plain/c/2/0", lambda raw: bytes(range(256)) * 3, "crc32c"),  # random bytes
        ("g/raw/c/1", lambda raw: raw + b"\0", "expected 40 bytes"),  # a raw chunk too long
        ("g/raw/c/0", lambda raw: raw[:-8], "expected 40 bytes"),  # too short
        ("sharded/c/1/0", lambda raw: raw[:-4] + b"\0\0\0\0", "shard index"),  # index checksum
        ("sharded/c/0/1", lambda raw: b"\xff" * 4 + raw[4:], "inner chunk"),  # an inner chunk
        ("sharded/c/1/1", lambda raw: raw[:10], "index"),  # a shard shorter than its index
        ("text/c/1", lambda raw: raw[:-3], "gzip"),
    ],
)
def test_each_damaged_chunk_is_reported_by_key_with_its_error(store, key, damage, fragment):
    build(store)
    store.set(key, damage(store.get(key)))
    report = verify(store)
    assert not report.ok
    assert keys(report.corrupt) == [key]
    assert fragment in report.corrupt[0].error and key in str(report)
    assert report.chunks_checked == 17  # every other chunk was still checked
    assert "FAILED: 1 corrupt chunk(s)" in str(report)
    add(__name__, "damaged chunks reported by key", 1)


def test_every_damaged_chunk_of_every_array_is_reported(store):
    chunks = build(store)
    damaged = sorted(k for k in (chunks["g/plain"][::2] + chunks["sharded"][1:] + chunks["text"]))
    for key in damaged:
        store.set(key, b"not a chunk")
    report = verify(store)
    assert keys(report.corrupt) == damaged
    add(__name__, "damaged chunks reported by key", len(damaged))
    assert all(problem.key in problem.error for problem in report.corrupt)  # the error names the chunk too


def test_a_shard_with_a_corrupt_inner_chunk_names_the_inner_chunk(store):
    build(store)
    raw = bytearray(store.get("sharded/c/0/0"))
    raw[3] ^= 0xFF  # the magic number of the first inner chunk's zstd frame; the index still points right
    store.set("sharded/c/0/0", bytes(raw))
    report = verify(store)
    assert keys(report.corrupt) == ["sharded/c/0/0"]
    assert "inner chunk (0, 0)" in report.corrupt[0].error and "zstd" in report.corrupt[0].error


def test_checksummed_shards_catch_a_flipped_inner_byte(store):
    arr = zarrx.create_array(store, "a", shape=(8,), chunks=(2,), shards=(8,), dtype="int64", compressors=[Crc32cCodec()])
    arr[...] = np.arange(8)
    raw = bytearray(store.get("a/c/0"))
    raw[20] ^= 1
    store.set("a/c/0", bytes(raw))
    report = verify(store)
    assert keys(report.corrupt) == ["a/c/0"]
    assert "inner chunk (1,)" in report.corrupt[0].error and "checksum" in report.corrupt[0].error


def test_missing_chunks_are_information_not_failure(store):
    arr = zarrx.create_array(store, "a", shape=(6, 6), chunks=(2, 2), dtype="int16", fill_value=7)
    arr[:2, :] = 1
    arr[4:, 4:] = 7  # all fill value: not stored
    report = verify(store)
    assert report.ok
    assert report.missing_count == 6
    assert report.missing == [f"a/c/{i}/{j}" for i in (1, 2) for j in range(3)]
    assert report.arrays[0].stored == 3 and report.arrays[0].missing == 6
    assert "missing chunks" in str(report) and "not an error" in str(report)


def test_missing_chunks_of_a_huge_grid_are_counted_not_listed():
    store = MemoryStore()
    arr = zarrx.create_array(store, "a", shape=(10**7, 10**6), chunks=(10, 10), dtype="int8")
    arr[0, 0] = 1
    report = verify(store)
    assert report.ok and report.chunks_checked == 1
    assert report.missing_count == 10**11 - 1 and report.missing == []


def test_unknown_keys_are_listed_but_do_not_fail(store):
    build(store)
    stray = {
        "g/plain/notes.txt": b"a note",  # a file among the chunks
        "g/plain/c/7": b"x",  # the wrong number of coordinates
        "g/plain/c/0/0/extra": b"x",  # below a chunk key
        "folder/file.bin": b"x",  # a folder that is not a node
        "README": b"x",
    }
    if isinstance(store, LocalStore):
        del stray["g/plain/c/0/0/extra"]  # a file cannot also be a folder
    store.set_many(stray)
    report = verify(store)
    assert report.ok and report.chunks_checked == 17
    assert report.unknown == sorted(stray)
    assert "unknown keys" in str(report)
    # a chunk outside the grid is the trace of an interrupted append (tests/test_append_crash.py)
    store.set("g/plain/c/9/9", store.get("g/plain/c/0/0"))
    report = verify(store)
    assert not report.ok and [problem.key for problem in report.past_edge] == ["g/plain/c/9/9"]
    assert report.unknown == sorted(stray) and "UNFINISHED APPEND" in str(report)


def test_invalid_metadata_is_reported_and_the_rest_still_checked(store):
    build(store)
    store.set("broken/zarr.json", b'{"zarr_format": 3, "node_type": "array", "shape": [-1]}')
    store.set("broken/c/0", b"anything")  # below a node that cannot be read: not judged
    store.set("g/plain/c/0/0", b"bad")
    report = verify(store)
    assert not report.ok
    assert keys(report.bad_metadata) == ["broken/zarr.json"]
    assert "shape" in report.bad_metadata[0].error
    assert keys(report.corrupt) == ["g/plain/c/0/0"]
    assert report.unknown == []
    assert report.chunks_checked == 17


def test_invalid_metadata_of_the_verified_node_itself():
    store = MemoryStore({"zarr.json": b"{"})
    report = verify(store)
    assert not report.ok and keys(report.bad_metadata) == ["'zarr.json' or '.zarray' or '.zgroup'"]
    assert "not valid JSON" in str(report)


def test_a_chunk_the_store_cannot_read_is_reported_by_key(store):
    build(store)
    faulty = FaultyStore(store, fail_get=lambda key: key == "g/plain/c/2/2")
    report = verify(faulty)
    assert keys(report.corrupt) == ["g/plain/c/2/2"]
    assert "cannot read it" in report.corrupt[0].error and "injected fault" in report.corrupt[0].error
    assert report.chunks_checked == 16
    # the batch failed, then the chunk alone, so the others were read and checked
    assert faulty.injected == [("get", "g/plain/c/2/2")] * 2


def test_temporary_files_of_interrupted_writes_are_reported_apart(tmp_path):
    store = LocalStore(tmp_path / "data.zarr")
    build(store)
    leftover = tmp_path / "data.zarr" / "g" / "plain" / "c" / "1" / f".2.{'0' * 32}.tmp"
    leftover.write_bytes(b"half a chunk")
    report = verify(store)
    assert report.ok and report.unknown == [] and report.chunks_checked == 17
    assert report.temporary == ["g/plain/c/1/.2.00000000000000000000000000000000.tmp"]
    assert "safe to delete" in str(report)


def test_decoding_runs_on_the_thread_pool(monkeypatch):
    store = MemoryStore()
    arr = zarrx.create_array(store, "a", shape=(64,), chunks=(1,), dtype="int8", compressors=None)
    arr[...] = 1
    threads = set()
    original = BytesCodec.decode

    def recording(self, data, spec):
        threads.add(threading.current_thread().name)
        return original(self, data, spec)

    monkeypatch.setattr(BytesCodec, "decode", recording)
    monkeypatch.setenv("ZARRX_NUM_THREADS", "4")
    assert verify(store).chunks_checked == 64
    assert any(name.startswith("zarrx-worker") for name in threads)


def test_progress(store, capsys):
    build(store)
    calls = []
    verify(store, progress=lambda done, total: calls.append((done, total)))
    assert calls and calls[-1] == (17, 17)
    verify(store, progress=True)  # the command line's bar (zarrx.tools.progress), drawn once off a terminal
    assert re.search(r"verify \[#{30}\] 100% 17/17 chunks", capsys.readouterr().err)


def test_nodes_paths_and_urls(store, tmp_path):
    build(store)
    assert [a.path for a in verify(store, "g").arrays] == ["g/plain", "g/raw"]
    assert [a.path for a in verify(store, "/g/raw/").arrays] == ["g/raw"]
    group = zarrx.open_group(store, "g")
    assert verify(group).chunks_checked == 11 and verify(group, "raw").chunks_checked == 2
    assert verify(zarrx.open_array(store, "sharded")).chunks_checked == 4
    with pytest.raises(NodeNotFoundError, match="nothing"):
        verify(store, "nothing")
    url = tmp_path / "url.zarr"
    build(LocalStore(url))
    assert verify(str(url)).ok and verify(f"file://{url}").chunks_checked == 17


def test_verify_never_writes(tmp_path):
    store = LocalStore(tmp_path / "data.zarr")
    build(store)
    store.set("g/plain/c/0/0", b"bad")
    read_only = LocalStore(tmp_path / "data.zarr", read_only=True)
    before = {key: read_only.get(key) for key in read_only.list_prefix("")}
    report = verify(read_only)
    assert not report.ok
    assert {key: read_only.get(key) for key in read_only.list_prefix("")} == before
    with pytest.raises(ReadOnlyError):
        read_only.set("x", b"")


def test_consolidated_metadata_does_not_hide_nodes(store):
    build(store)
    zarrx.consolidate_metadata(store)
    late = zarrx.create_array({}, shape=(4,), chunks=(2,), dtype="int8")
    store.set("late/zarr.json", late.metadata.to_bytes())  # another writer: not in the consolidated metadata
    zarrx.open_array(store, "late", mode="r+")[...] = 1
    store.set("late/c/1", b"bad")
    report = verify(store)
    assert "late" in [a.path for a in report.arrays]
    assert keys(report.corrupt) == ["late/c/1"]
    assert [(p.key, p.node) for p in report.stale_consolidated] == [("zarr.json", "/late")]


# -- consolidated metadata that disagrees with the members (issue 22) ---------------------------------
@pytest.mark.parametrize("zarr_format", [3, 2])
def test_stale_consolidated_metadata_is_reported_by_member(store, zarr_format):
    """Another writer (not zarrx, which keeps it true) changed the members after consolidation."""
    root = zarrx.create_group(store, zarr_format=zarr_format)
    x = root.create_array("x", shape=(4,), chunks=(2,), dtype="int8")
    root.create_array("g/y", shape=(2,), dtype="int8")
    zarrx.consolidate_metadata(store)
    assert verify(store).ok and verify(store).stale_consolidated == []
    changed = x.metadata.evolve(shape=(6,), attributes={"units": "m"})
    for name, raw in changed.documents().items():  # another writer appends, without updating it
        store.set(f"x/{name}", raw)
    for name, raw in root.metadata.documents().items():
        store.set(f"late/{name}", raw)  # adds a group
    store.delete_prefix("g/y/")  # and deletes an array
    report = verify(store)
    assert not report.ok
    document = "zarr.json" if zarr_format == 3 else ".zmetadata"
    found = {problem.node: problem.error for problem in report.stale_consolidated}
    assert {problem.key for problem in report.stale_consolidated} == {document}
    assert sorted(found) == ["/g/y", "/late", "/x"]
    assert "not stored" in found["/g/y"] and "missing from the consolidated metadata" in found["/late"]
    assert "shape" in found["/x"] and "[6]" in found["/x"] and "[4]" in found["/x"]
    assert "run `zarrx consolidate`" in str(report) and "FAILED" in str(report)
    zarrx.consolidate_metadata(store)
    assert verify(store).ok


def test_an_invalid_consolidated_copy_is_reported(store):
    root = zarrx.create_group(store)
    root.create_array("x", shape=(4,), dtype="int8")
    zarrx.consolidate_metadata(store)
    document = json.loads(store.get("zarr.json"))
    document["consolidated_metadata"]["metadata"]["x"]["shape"] = "four"
    store.set("zarr.json", json.dumps(document).encode())
    report = verify(store)
    assert not report.ok and [(p.key, p.node) for p in report.stale_consolidated] == [("zarr.json", "/x")]
    assert "invalid" in report.stale_consolidated[0].error


def test_zarrx_verify_is_the_function_the_documentation_shows(store, tmp_path):
    """``zarrx.verify(store)`` (issue 22: ``zarrx.verify.verify(store)`` was documented, and failed)."""
    import importlib
    from pathlib import Path

    module = importlib.import_module("zarrx.tools.verify")
    assert zarrx.verify is module.verify is verify  # importing the module does not shadow the function
    build(store)
    report = zarrx.verify(store, "g", progress=False)
    assert isinstance(report, module.VerifyReport) and report.ok and [a.path for a in report.arrays] == ["g/plain", "g/raw"]
    docs = Path(__file__).resolve().parents[1] / "docs"
    pages = {page: page.read_text() for page in [*docs.rglob("*.md"), docs.parent / "README.md"]}
    assert not [page for page, text in pages.items() if "verify.verify" in text]
    assert any("zarrx.verify(store" in text for text in pages.values())


def test_zarr_v2_hierarchy(store):
    root = zarrx.create_group(store, zarr_format=2)
    arr = root.create_array("a", shape=(5, 5), chunks=(2, 2), dtype="<i2", dimension_separator="/")
    arr[...] = 3
    text = root.create_array("t", shape=(4,), chunks=(2,), dtype="string")
    text[...] = STRINGS[:4]
    zarrx.consolidate_metadata(store)
    report = verify(store)
    assert report.ok and report.unknown == [] and report.chunks_checked == 11
    store.set("a/1/1", b"\x00")
    store.set("a/zz", b"?")
    report = verify(store)
    assert keys(report.corrupt) == ["a/1/1"] and report.unknown == ["a/zz"]


def test_draft_layout_hierarchy(draft_store):  # noqa: F811
    report = verify(MemoryStore(dict(draft_store)))
    assert report.ok and report.unknown == [] and report.chunks_checked == 7
    draft_store["data/root/foo/baz/c1/0"] = b"bad"
    draft_store["data/root/foo/junk"] = b"?"
    report = verify(MemoryStore(draft_store))
    assert keys(report.corrupt) == ["data/root/foo/baz/c1/0"] and report.unknown == ["data/root/foo/junk"]


def test_hierarchy_written_by_zarr_python(tmp_path):
    zarr = pytest.importorskip("zarr")
    root = zarr.open_group(str(tmp_path / "zp.zarr"), mode="w")
    a = root.create_array("a", shape=(10, 10), chunks=(3, 3), dtype="int32")
    a[...] = DATA
    s = root.create_array("s", shape=(8, 8), chunks=(2, 2), shards=(4, 4), dtype="float64")
    s[...] = 1.0
    report = verify(str(tmp_path / "zp.zarr"))
    assert report.ok and report.unknown == [] and report.chunks_checked == 16 + 4


def test_report_is_printable_and_bounded():
    report = VerifyReport(store="MemoryStore()", path="")
    report.corrupt = [Problem(f"a/c/{i}", "/a", f"chunk 'a/c/{i}': bad") for i in range(50)]
    text = str(report)
    assert "FAILED: 50 corrupt chunk(s)" in text and "a/c/0: chunk 'a/c/0': bad" in text
    assert "... and 30 more" in text and "a/c/49" not in text


@pytest.mark.parametrize("dtype, value", [("str", "abc"), ("U", "abc"), ("S", b"abc")])
def test_v2_arrays_of_zero_size_dtypes_are_refused_or_read_back(dtype, value):
    from zarrx.errors import MetadataError

    store = MemoryStore()
    try:
        arr = zarrx.create_array(store, "x", shape=(4,), chunks=(2,), dtype=dtype, zarr_format=2)
    except MetadataError:
        return  # refused: fine
    arr[...] = value
    report = verify(store)
    assert report.ok, str(report)
