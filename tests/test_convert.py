"""Conversion to Zarr v3: ``zarrx.convert`` (a parallel copy), ``zarrx.migrate_v2_to_v3``
(metadata only, in place) and the ``zarrx convert`` command.

After a conversion the values, attributes and dimension names are those of the source, and
the result opens in zarr-python as Zarr v3. A v2 ``_ARRAY_DIMENSIONS`` attribute becomes the
v3 ``dimension_names`` (zarr-python's ``migrate v3`` leaves it an attribute and writes no
dimension names; zarrx follows the v3 spec, where dimension names have their own field).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import pytest
import zarr
from xarray.backends.zarr import FillValueCoder
from zarr.core.dtype import VariableLengthBytes

import zarrx
from zarrx.tools.cli import main
from zarrx.tools.migration import MaskLostWarning
from zarrx.errors import ContainsGroupError, MetadataError, UnsupportedExtensionError, UsageError

from .test_draft import draft_store, zarr_python_2_store  # noqa: F401 (fixtures)
from .test_v2 import assert_values, values_for

pytestmark = [
    pytest.mark.filterwarnings("ignore::zarr.errors.UnstableSpecificationWarning"),
    pytest.mark.filterwarnings("ignore::zarr.errors.ZarrUserWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
]

#: v2 arrays of a zarr-python hierarchy: name -> create_array keywords
V2_ARRAYS: dict[str, dict[str, Any]] = {
    "blosc": dict(dtype="<f8", compressors=numcodecs.Blosc(), fill_value=np.nan),
    "zlib-F": dict(dtype=">i4", compressors=numcodecs.Zlib(level=1), order="F"),
    "delta-nested": dict(dtype="<i8", filters=[numcodecs.Delta(dtype="<i8")], chunk_key_encoding={"name": "v2", "separator": "/"}),
    "lz4": dict(dtype="<u2", compressors=numcodecs.LZ4()),
    "bz2-null-fill": dict(dtype="<f4", compressors=numcodecs.BZ2(), fill_value=None),
    "gzip": dict(dtype="|b1", compressors=numcodecs.GZip()),
    "text": dict(dtype=str),
    "bytes": dict(dtype=VariableLengthBytes()),
    "unicode": dict(dtype=">U4"),
    "time": dict(dtype="<M8[s]"),
    "struct": dict(dtype=[("a", "<i2"), ("b", "<f8")]),
}


def build_v2(path: Path) -> dict[str, np.ndarray]:
    """A zarr-python v2 hierarchy with one array per case; returns what each array holds."""
    root = zarr.open_group(str(path), mode="w", zarr_format=2, attributes={"title": "v2 data"})
    root.create_group("sub").attrs["level"] = 1
    expected = {}
    for index, (name, kwargs) in enumerate(V2_ARRAYS.items()):
        array = root.create_array(f"sub/{name}" if index % 2 else name, shape=(7, 5), chunks=(3, 2), **kwargs)
        values = values_for(array.dtype, (7, 5), seed=index)
        array[:5] = values[:5]
        array.attrs.update({"_ARRAY_DIMENSIONS": ["y", "x"], "units": name})
        expected[array.path] = array[:]
    return expected


def assert_cf_fill_value(attributes: dict[str, Any], v2_array: Any) -> None:
    """Pops the attribute by which xarray masks in v3 what it masks in the v2 ``v2_array`` (its fill value)."""
    fill_value, dtype = v2_array.metadata.fill_value, v2_array.dtype
    if fill_value is None or dtype.kind in "MmV" or isinstance(fill_value, bytes):
        assert "_FillValue" not in attributes and "missing_value" not in attributes
    elif dtype.kind in "biufc":
        decoded = FillValueCoder.decode(attributes.pop("_FillValue"), dtype)
        assert decoded == fill_value or (np.isnan(decoded) and np.isnan(fill_value))
    else:
        assert attributes.pop("missing_value") == fill_value


def assert_v3_copy(path: Path, expected: dict[str, np.ndarray], v2_path: Path | None = None) -> None:
    v2_path = v2_path or path
    ours = zarrx.open_group(str(path))
    theirs = zarr.open_group(str(path), mode="r", zarr_format=3)
    assert ours.metadata.zarr_format == 3 and theirs.attrs["title"] == "v2 data"
    assert ours["sub"].attrs["level"] == 1
    for name, values in expected.items():
        array = ours[name]
        assert array.metadata.zarr_format == 3
        attributes = array.attrs.asdict()
        assert_cf_fill_value(attributes, zarr.open_array(str(v2_path), path=name, mode="r", zarr_format=2))
        assert array.dimension_names == ("y", "x") and attributes == {"units": name.split("/")[-1]}
        assert_values(array[:], values)
        if name.endswith("struct"):
            continue  # zarr-python 3.1 reads only the legacy "structured" name (test_interop's disagreements)
        their_array = theirs[name]
        assert their_array.metadata.dimension_names == ("y", "x")
        assert_values(their_array[:], values)


def test_convert_v2_to_v3(tmp_path):
    expected = build_v2(tmp_path / "v2")
    with pytest.warns(MaskLostWarning, match="'/sub/bytes': xarray reads the v2 fill value b''"):
        zarrx.convert(str(tmp_path / "v2"), str(tmp_path / "v3"), progress=False)
    assert_v3_copy(tmp_path / "v3", expected, tmp_path / "v2")
    blosc = zarrx.open_array(str(tmp_path / "v3"), "blosc")
    assert blosc.chunks == (3, 2) and [c["name"] for c in blosc.metadata.to_json()["codecs"]] == ["bytes", "blosc"]
    assert zarrx.open_array(str(tmp_path / "v3"), "delta-nested").metadata.to_json()["codecs"][0]["name"] == "numcodecs.delta"
    assert not (tmp_path / "v3" / ".zgroup").exists()


def test_migrate_v2_to_v3_keeps_chunks_and_reads_in_zarr_python(tmp_path):
    expected = build_v2(tmp_path / "v2")
    before = {p: p.read_bytes() for p in (tmp_path / "v2").rglob("*") if p.is_file()}
    with pytest.warns(MaskLostWarning, match="'/sub/bytes'"):
        zarrx.migrate_v2_to_v3(str(tmp_path / "v2"))
    after = {p: p.read_bytes() for p in (tmp_path / "v2").rglob("*") if p.is_file()}
    assert {p: v for p, v in after.items() if p.name != "zarr.json"} == before  # v2 documents and chunks untouched
    assert len(after) - len(before) == len(V2_ARRAYS) + 2  # a zarr.json per array and group
    assert_v3_copy(tmp_path / "v2", expected)
    zlib_f = json.loads((tmp_path / "v2" / "sub" / "zlib-F" / "zarr.json").read_text())
    assert zlib_f["chunk_key_encoding"] == {"name": "v2", "configuration": {"separator": "."}}
    assert [c["name"] for c in zlib_f["codecs"]] == ["transpose", "bytes", "numcodecs.zlib"]
    assert zlib_f["codecs"][1]["configuration"] == {"endian": "big"}
    assert zarr.open_array(str(tmp_path / "v2"), path="sub/zlib-F", mode="r", zarr_format=2).metadata.zarr_format == 2
    with pytest.raises(ContainsGroupError, match="already exists"):
        zarrx.migrate_v2_to_v3(str(tmp_path / "v2"))


def test_migration_without_a_v3_equivalent_writes_nothing(tmp_path):
    root = zarrx.create_group(str(tmp_path / "v2"), zarr_format=2)
    root.create_array("fine", shape=(2,), dtype="<i2")
    document = json.loads((tmp_path / "v2" / "fine" / ".zarray").read_text())
    (tmp_path / "v2" / "ragged").mkdir()
    (tmp_path / "v2" / "ragged" / ".zarray").write_text(
        json.dumps({**document, "dtype": "|O", "fill_value": None, "filters": [{"id": "vlen-array", "dtype": "<i4"}]})
    )
    with pytest.raises(UnsupportedExtensionError, match="'/ragged'.*no Zarr v3 equivalent"):
        zarrx.migrate_v2_to_v3(str(tmp_path / "v2"))
    assert not list((tmp_path / "v2").rglob("zarr.json"))
    mixed = {"shape": [1], "chunks": [1], "dtype": [["a", "<i2"], ["b", ">i2"]], "fill_value": None, "order": "C",
             "filters": None, "compressor": None, "zarr_format": 2}  # fmt: skip
    store = {".zarray": json.dumps(mixed).encode()}
    with pytest.raises(UnsupportedExtensionError, match="mixed byte orders"):
        zarrx.migrate_v2_to_v3(store)
    assert zarrx.convert(store, {}, progress=False)[:].tolist() == [(0, 0)]  # a copy is fine


def test_convert_draft_to_v3(tmp_path, draft_store, zarr_python_2_store):  # noqa: F811
    zarrx.convert(zarr_python_2_store, str(tmp_path / "a"), progress=False)
    root = zarrx.open_group(str(tmp_path / "a"))
    assert root.metadata.zarr_format == 3 and sorted(root) == ["arthur", "flags"]
    assert root["arthur/dent"].attrs.asdict() == {"question": "life", "answer": 42}
    np.testing.assert_array_equal(root["arthur/dent"][:], np.arange(50).reshape(5, 10))
    assert zarr.open_array(str(tmp_path / "a"), path="flags", mode="r")[:].tolist() == [True, False, True, False, True, True]
    array = zarrx.convert(draft_store, str(tmp_path / "b"), path="foo/times", progress=False)
    assert array.dtype == np.dtype("M8[ns]") and array.chunks == (4, 2)
    np.testing.assert_array_equal(array[:], zarrx.open_array(draft_store, "foo/times")[:])
    deep = zarrx.convert(draft_store, str(tmp_path / "c"), path="deep", chunks=(5, 4), progress=False)
    assert deep["er/f"].chunks == (5, 4)
    np.testing.assert_array_equal(deep["er/f"][:], np.arange(20).reshape(5, 4))
    assert "data" not in {p.name for p in (tmp_path / "c").iterdir()}  # the v3 layout, not the draft's


def test_convert_v3_rechunks_shards_and_recompresses(tmp_path):
    source = zarrx.create_array(str(tmp_path / "s"), shape=(20, 30), chunks=(7, 7), dtype="<f4",
                                dimension_names=["t", "x"], attributes={"units": "K"}, fill_value=-1)  # fmt: skip
    values = np.arange(600, dtype="<f4").reshape(20, 30)
    source[:18] = values[:18]
    expected = source[:]
    target = zarrx.convert(str(tmp_path / "s"), str(tmp_path / "t"), chunks=(5, 10), shards=(10, 30),
                           compressors=[{"name": "gzip", "configuration": {"level": 1}}], progress=False)  # fmt: skip
    assert target.chunks == (5, 10) and target.shards == (10, 30)
    assert target.dimension_names == ("t", "x") and target.attrs.asdict() == {"units": "K"} and target.fill_value == -1
    inner = target.metadata.codecs.array_bytes.codecs
    assert [c.name for c in inner.bytes_bytes] == ["gzip"]
    assert_values(target[:], expected)
    assert_values(zarr.open_array(str(tmp_path / "t"), mode="r")[:], expected)
    kept = zarrx.convert(str(tmp_path / "t"), str(tmp_path / "k"), progress=False)  # keep: same shards and codecs
    assert kept.shards == (10, 30) and kept.chunks == (5, 10) and kept.metadata.codecs == target.metadata.codecs
    unsharded = zarrx.convert(str(tmp_path / "t"), str(tmp_path / "u"), chunks=-1, compressors=None, progress=False)
    assert unsharded.shards is None and unsharded.chunks == (20, 30) and unsharded.metadata.codecs.bytes_bytes == ()
    assert_values(unsharded[:], expected)


def test_convert_rechunks_a_hierarchy_of_mixed_ranks_by_dimension_name(tmp_path):
    root = zarrx.create_group(str(tmp_path / "s"))
    cube = root.create_array("t2m", shape=(12, 8, 10), chunks=(1, 8, 10), dtype="<f4", dimension_names=["time", "lat", "lon"])
    cube[...] = np.arange(960, dtype="<f4").reshape(12, 8, 10)
    lat = root.create_array("lat", shape=(8,), chunks=(8,), dtype="<f8", dimension_names=["lat"])
    lat[...] = np.linspace(-80, 80, 8)
    flags = root.create_array("flags", shape=(5,), chunks=(2,), shards=(4,), dtype="u1")  # no dimension names
    flags[...] = 1
    with pytest.raises(MetadataError, match="chunks: expected 1 chunk lengths .*by dimension name"):
        zarrx.convert(str(tmp_path / "s"), str(tmp_path / "bad"), chunks=(6, 4, 5), progress=False)
    out = zarrx.convert(str(tmp_path / "s"), str(tmp_path / "t"), chunks={"time": 6, "lat": 4},
                        shards={"time": 12}, progress=False)  # fmt: skip
    assert out["t2m"].chunks == (6, 4, 10) and out["t2m"].shards == (12, 4, 10)
    assert out["lat"].chunks == (4,) and out["lat"].shards is None
    assert out["flags"].chunks == (2,) and out["flags"].shards == (4,)  # untouched: kept with its shards
    for name in ("t2m", "lat", "flags"):
        assert_values(out[name][...], root[name][...])
    # the same from the command line
    assert main(["convert", str(tmp_path / "s"), str(tmp_path / "cli"), "--chunks", "time=6,lat=4", "--no-progress"]) == 0
    assert zarrx.open_array(str(tmp_path / "cli"), "t2m").chunks == (6, 4, 10)
    assert zarrx.open_array(str(tmp_path / "cli"), "lat").chunks == (4,)


def test_convert_refuses_a_non_empty_destination_and_shows_progress(tmp_path, capsys):
    zarrx.create_array(str(tmp_path / "s"), shape=(4,), dtype="<i2", fill_value=3)
    zarrx.create_group(str(tmp_path / "t"))
    with pytest.raises(ContainsGroupError, match="overwrite=True"):
        zarrx.convert(str(tmp_path / "s"), str(tmp_path / "t"))
    converted = zarrx.convert(str(tmp_path / "s"), str(tmp_path / "t"), overwrite=True)
    assert converted[:].tolist() == [3, 3, 3, 3]
    assert "Completed" in capsys.readouterr().out  # dask's progress bar
    with pytest.raises(MetadataError, match="chunks: expected 1 chunk lengths for shape"):
        zarrx.convert(str(tmp_path / "s"), {}, chunks=(2, 2), progress=False)


# -- the command line -------------------------------------------------------------------------------


def test_cli_converts_and_migrates(tmp_path, capsys):
    expected = build_v2(tmp_path / "v2")
    assert main(["convert", str(tmp_path / "v2"), str(tmp_path / "v3"), "--chunks", "4,4",
                 "--compressor", "zstd:3", "--no-progress"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "Converted" in out and "blosc (7, 5) float64 chunks=(4, 4)" in out
    assert_v3_copy(tmp_path / "v3", expected, tmp_path / "v2")
    codecs = zarrx.open_array(str(tmp_path / "v3"), "blosc").metadata.to_json()["codecs"]
    assert codecs[-1] == {"name": "zstd", "configuration": {"level": 3}}
    assert main(["convert", str(tmp_path / "v2"), "--migrate-in-place"]) == 0
    assert "Migrated" in capsys.readouterr().out
    assert_v3_copy(tmp_path / "v2", expected)


@pytest.mark.parametrize(
    "arguments, fragment",
    [
        (["convert", "{tmp}/missing", "{tmp}/out"], "no array or group"),
        (["convert", "{tmp}/src", "{tmp}/out", "--chunks", "a,b"], "--chunks: expected comma-separated integers"),
        (["convert", "{tmp}/src", "{tmp}/out", "--chunks", "x=a"], "or lengths by dimension name"),
        (["convert", "{tmp}/src", "{tmp}/out", "--chunks", "2,2,2"], "chunks"),
        (["convert", "{tmp}/src", "{tmp}/out", "--compressor", "snappy"], "--compressor: unknown codec 'snappy'"),
        (["convert", "{tmp}/src", "{tmp}/out", "--storage-option", "nokey"], "--storage-option: expected key=value"),
        (["convert", "{tmp}/src", "{tmp}/src", "--overwrite"], "the source store itself"),
        (["convert", "{tmp}/src", "{tmp}/other"], "already holds"),
        (["convert", "{tmp}/src"], "needs SRC and DST"),
        (["convert", "{tmp}/src", "{tmp}/out", "--migrate-in-place"], "give no DST"),
        (["convert", "{tmp}/src", "--migrate-in-place"], "no array or group"),
    ],
)
def test_cli_reports_mistakes_on_one_line(tmp_path, capsys, arguments, fragment):
    zarrx.create_array(str(tmp_path / "src"), shape=(4, 4), dtype="<i2")
    zarrx.create_group(str(tmp_path / "other"))
    assert main([a.format(tmp=tmp_path) for a in arguments]) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and captured.err.startswith("zarrx: error: "), captured.err
    assert fragment in captured.err and "Traceback" not in captured.err


def test_console_script_prints_no_traceback(tmp_path):
    result = subprocess.run([sys.executable, "-m", "zarrx.tools.cli", "convert", str(tmp_path / "nope"), str(tmp_path / "out")],
                            capture_output=True, text=True)  # fmt: skip
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith("zarrx: error: no array or group")


# -- checked before anything is written -------------------------------------------------------------


@pytest.mark.parametrize(
    "settings",
    [
        dict(chunks=(3,), shards=(5,)),  # shards not a multiple of the chunks (was rounded to 6)
        dict(chunks=(2, 2)),  # chunks of the wrong rank
        dict(chunks=(2,), shards=(4, 4)),  # shards of the wrong rank
        dict(chunks=(0,)),
        dict(compressors="snappy"),  # an unknown compressor
        dict(compressors=[{"name": "zstd", "configuration": {"level": 99}}]),
        dict(compressors=[zarr.codecs.BytesCodec()]),  # no compressor at all
    ],
    ids=["shards-not-a-multiple", "chunks-rank", "shards-rank", "chunks-zero", "unknown-compressor", "bad-level", "not-a-compressor"],
)
def test_convert_refuses_what_create_array_refuses_before_writing_a_byte(tmp_path, settings):
    source = zarrx.create_array(str(tmp_path / "src"), shape=(10,), chunks=(5,), dtype="<i2", zarr_format=2)
    source[:] = np.arange(10)
    with pytest.raises(MetadataError) as expected:
        zarrx.create_array({}, shape=(10,), dtype="<i2", **settings)
    with pytest.raises(type(expected.value)) as found:
        zarrx.convert(str(tmp_path / "src"), str(tmp_path / "dst"), progress=False, **settings)
    assert str(expected.value) in str(found.value) and "array '/'" in str(found.value)
    assert not [files for _, _, files in os.walk(tmp_path / "dst") if files]  # not a byte written


def test_shards_past_the_shape_are_cut_to_whole_chunks_not_rounded(tmp_path):
    source = zarrx.create_array(str(tmp_path / "src"), shape=(10, 7), chunks=(5, 7), dtype="<i2")
    source[:] = np.arange(70).reshape(10, 7)
    cut = zarrx.convert(str(tmp_path / "src"), str(tmp_path / "a"), chunks=(3, 3), shards=(30, -1), progress=False)
    assert cut.chunks == (3, 3) and cut.shards == (12, 9)  # one shard of whole chunks covering the shape
    assert_values(cut[:], source[:])
    assert main(["convert", str(tmp_path / "src"), str(tmp_path / "b"), "--chunks", "3,3", "--shards", "5,3", "--no-progress"]) == 2


# -- consolidated metadata ------------------------------------------------------------------------


def _consolidated_members(path: Path) -> list[str] | None:
    document = json.loads((path / "zarr.json").read_text()).get("consolidated_metadata")
    return None if document is None else sorted(document["metadata"])


def test_the_destination_is_consolidated_when_the_source_was_or_on_request(tmp_path):
    root = zarrx.create_group(str(tmp_path / "v2"), zarr_format=2)
    root.create_array("a", shape=(4,), dtype="<i2", zarr_format=2)[:] = 1
    root.create_array("g/b", shape=(3,), dtype="<f4", zarr_format=2)[:] = 2
    plain = tmp_path / "plain"
    zarrx.convert(str(tmp_path / "v2"), str(plain), progress=False)
    assert _consolidated_members(plain) is None
    zarrx.convert(str(tmp_path / "v2"), str(tmp_path / "asked"), consolidate=True, progress=False)
    assert _consolidated_members(tmp_path / "asked") == ["a", "g", "g/b"]
    zarrx.consolidate_metadata(str(tmp_path / "v2"))
    root.create_array("late", shape=(2,), dtype="<i2", zarr_format=2)  # the consolidated metadata is stale now
    zarrx.convert(str(tmp_path / "v2"), str(tmp_path / "kept"), progress=False)
    assert _consolidated_members(tmp_path / "kept") == ["a", "g", "g/b", "late"]  # every member, as stored
    assert sorted(zarr.open_consolidated(str(tmp_path / "kept"), zarr_format=3)) == ["a", "g", "late"]
    assert main(["convert", str(tmp_path / "v2"), str(tmp_path / "cli"), "--no-consolidate", "--no-progress"]) == 0
    assert _consolidated_members(tmp_path / "cli") is None
    zarrx.migrate_v2_to_v3(str(tmp_path / "v2"))  # in place too: .zmetadata was there
    assert _consolidated_members(tmp_path / "v2") == ["a", "g", "g/b", "late"]
