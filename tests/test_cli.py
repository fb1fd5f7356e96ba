"""The ``zarrx`` command line, run as users run it: the installed console script, in a subprocess.

Each command is checked against what is really stored (shapes, codecs, chunk keys), user
mistakes must end in one line on stderr with exit status 2 and no traceback, and ``verify``
must find chunks corrupted by hand. The helpers of the command line (option parsing, the
progress bar) are checked in-process.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest

import zarrx
from zarrx.tools.cli import ProgressBar, parse_storage_options
from zarrx.codecs import Crc32cCodec, ZstdCodec
from zarrx.errors import UsageError

SCRIPT = Path(sys.executable).parent / ("zarrx.exe" if os.name == "nt" else "zarrx")


def zarrx_cli(*arguments: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run the installed ``zarrx`` console script."""
    assert SCRIPT.exists(), f"the console script is not installed at {SCRIPT} (pip install -e .)"
    return subprocess.run([str(SCRIPT), *map(str, arguments)], capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def hierarchy(tmp_path) -> Path:
    """A small hierarchy: a sharded float array, and a group with a gzip and a crc32c array."""
    path = tmp_path / "data.zarr"
    root = zarrx.create_group(str(path), attributes={"title": "cli test", "history": ["made", "by", "a test"]})
    t2m = root.create_array(
        "t2m", shape=(8, 6), chunks=(2, 3), shards=(4, 6), dtype="float32", fill_value=np.nan,
        compressors=[ZstdCodec(level=3)], dimension_names=["time", "x"], attributes={"units": "K"},
    )  # fmt: skip
    t2m[...] = np.arange(48, dtype="float32").reshape(8, 6)
    obs = root.create_group("obs")
    count = obs.create_array(
        "count", shape=(10,), chunks=(5,), dtype="int16", compressors=[{"name": "gzip", "configuration": {"level": 5}}]
    )
    count[...] = np.arange(1, 11)
    flags = obs.create_array("flags", shape=(6,), chunks=(2,), dtype="uint8", compressors=[Crc32cCodec()])
    flags[...] = np.arange(1, 7)
    return path


# -- tree, info ---------------------------------------------------------------------------------
def test_tree_shows_shapes_dtypes_chunks_shards_codecs(hierarchy):
    result = zarrx_cli("tree", hierarchy)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "/"
    t2m = next(line for line in lines if "t2m" in line)
    assert "t2m (8, 6) float32 chunks=(2, 3) shards=(4, 6) codecs=[sharding_indexed[bytes, zstd(level=3)]]" in t2m
    assert any("count (10,) int16 chunks=(5,) codecs=[bytes, gzip(level=5)]" in line for line in lines)
    assert any("flags (6,) uint8 chunks=(2,) codecs=[bytes, crc32c]" in line for line in lines)
    # nesting: obs's members are drawn below it
    assert re.search(r"obs\n│   ├── count .*\n│   └── flags", result.stdout), result.stdout


def test_tree_depth_and_member_cap(tmp_path):
    root = zarrx.create_group(str(tmp_path / "many.zarr"))
    for index in range(12):
        root.create_array(f"a{index:02d}", shape=(1,), dtype="int8")
    root.create_group("g").create_group("deeper").create_array("x", shape=(1,), dtype="int8")
    result = zarrx_cli("tree", tmp_path / "many.zarr", "--max-children", "5", "--depth", "1")
    assert result.returncode == 0, result.stderr
    assert "a04" in result.stdout and "a05" not in result.stdout
    assert "… and 8 more" in result.stdout
    assert "deeper" not in result.stdout


def test_info_of_an_array_and_a_group(hierarchy):
    result = zarrx_cli("info", hierarchy, "--path", "t2m")
    assert result.returncode == 0, result.stderr
    info = dict(
        (label.strip(), value.strip())
        for label, _, value in (line.partition(" : ") for line in result.stdout.splitlines())
        if _
    )
    stored = sum(file.stat().st_size for file in (hierarchy / "t2m" / "c").rglob("*") if file.is_file())
    assert info["Shape"] == "(8, 6)" and info["Data type"] == "float32"
    assert info["Chunk shape"] == "(2, 3)" and info["Shard shape"] == "(4, 6)"
    assert "zstd(level=3)" in info["Codecs"] and "crc32c" in info["Codecs"]  # the shard index's codecs too
    assert info["Fill value"] == '"NaN"' and info["Dimension names"] == "time, x"
    assert info["No. bytes stored"].startswith(f"{stored} ")
    assert info["Compression ratio"] == f"{8 * 6 * 4 / stored:.2f}"
    assert info["Initialized"] == "2/2 shards" and info["No. chunks"] == "8 (4, 2)" and info["No. shards"] == "2 (2, 1)"
    assert "  units: K" in result.stdout

    result = zarrx_cli("info", hierarchy)
    assert result.returncode == 0, result.stderr
    assert "zarrx.Group (Zarr v3)" in result.stdout and "1 array(s), 1 group(s)" in result.stdout
    assert '  history: ["made", "by", "a test"]' in result.stdout
    assert "t2m (8, 6) float32" in result.stdout  # the members


def test_info_has_one_layout_for_arrays_sharded_arrays_and_groups(hierarchy):
    """The same labels for every array, sharded or not, at one column for arrays and groups."""
    outputs = {path: zarrx_cli("info", hierarchy, "--path", path) for path in ("t2m", "obs/count", "obs")}
    labels = {}
    for path, result in outputs.items():
        assert result.returncode == 0, result.stderr
        rows = [line for line in result.stdout.splitlines() if not line.startswith("  ")]
        assert len({line.index(" : ") for line in rows}) == 1, result.stdout  # one label column
        labels[path] = [line.partition(" : ")[0].strip() for line in rows]
    assert labels["t2m"] == labels["obs/count"]
    assert {"No. chunks", "No. shards", "Initialized"} <= set(labels["t2m"])
    assert labels["obs"][-2:] == ["Attributes", "Children"]
    assert outputs["obs/count"].stdout.count("not sharded") == 2 and "Initialized       : 2/2 chunks" in outputs["obs/count"].stdout
    assert "  count (10,) int16 chunks=(5,)" in outputs["obs"].stdout and "Members:" not in outputs["obs"].stdout


# -- verify ---------------------------------------------------------------------------------------
def test_verify_passes_then_names_every_bad_chunk(hierarchy):
    result = zarrx_cli("verify", hierarchy)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OK: every stored chunk decodes" in result.stdout
    assert re.search(r"verify \[#+\] 100% 7/7 chunks", result.stderr)  # the progress bar's last state

    shard = hierarchy / "t2m" / "c" / "1" / "0"
    shard.write_bytes(shard.read_bytes()[:-10])  # truncated: the shard index is cut
    flags = hierarchy / "obs" / "flags" / "c" / "1"
    data = bytearray(flags.read_bytes())
    data[0] ^= 0xFF  # one flipped bit: the crc32c checksum fails
    flags.write_bytes(bytes(data))
    (hierarchy / "obs" / "count" / "c" / "0").unlink()  # missing: reads as the fill value

    result = zarrx_cli("verify", hierarchy, "--no-progress")
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stderr == ""  # no progress bar, no error: the report is the output
    out = result.stdout
    assert "FAILED: 2 corrupt chunk(s)" in out
    corrupt = out[out.index("corrupt chunks: 2") :]
    assert re.search(r"^  obs/flags/c/1: .*crc32c.*checksum", corrupt, re.M), out
    assert re.search(r"^  t2m/c/1/0: ", corrupt, re.M), out
    assert re.search(r"missing chunks .*: 1\n  obs/count/c/0$", out, re.M), out

    # only the array with the missing chunk: fine, unless every chunk must be there
    assert zarrx_cli("verify", hierarchy, "--path", "obs/count", "--no-progress").returncode == 0
    strict = zarrx_cli("verify", hierarchy, "--path", "obs/count", "--no-progress", "--require-all-chunks")
    assert strict.returncode == 1, strict.stdout + strict.stderr
    assert "FAILED (--require-all-chunks): 1 stored object(s) missing in 1 array(s):" in strict.stdout
    assert "  /obs/count: 1 of 2 chunks missing, e.g. obs/count/c/0" in strict.stdout
    assert "reads as the array's fill value" in strict.stdout and "interrupted" in strict.stdout


def test_verify_and_convert_name_an_unfinished_convert(hierarchy, tmp_path):
    from zarrx.errors import StoreError
    from zarrx.storage import LocalStore
    from zarrx.testing import FaultyStore

    target = tmp_path / "copy.zarr"
    with pytest.raises(StoreError):
        zarrx.convert(str(hierarchy), FaultyStore(LocalStore(str(target)), fail_set=lambda key: key == "obs/flags/c/1"),
                      progress=False)  # fmt: skip
    verified = zarrx_cli("verify", target, "--no-progress")
    assert verified.returncode == 1, verified.stdout + verified.stderr
    assert "FAILED: 0 corrupt chunk(s), 0 invalid metadata document(s), an unfinished convert" in verified.stdout
    assert "INCOMPLETE: an interrupted (or running) zarrx convert" in verified.stdout
    assert "  zarrx-convert-incomplete.json: an unfinished zarrx convert" in verified.stdout
    other = zarrx_cli("convert", hierarchy, target, "--compressor", "gzip", "--no-progress")
    assert other.returncode == 2 and "is an incomplete convert" in other.stderr and "--overwrite" in other.stderr
    resumed = zarrx_cli("convert", hierarchy, target, "--no-progress")
    assert resumed.returncode == 0, resumed.stderr
    assert "Resumed the interrupted convert" in resumed.stdout and "Converted" in resumed.stdout
    assert zarrx_cli("verify", target, "--no-progress").returncode == 0


# -- consolidate ----------------------------------------------------------------------------------
def test_consolidate_writes_consolidated_metadata(hierarchy):
    assert "consolidated_metadata" not in json.loads((hierarchy / "zarr.json").read_text())
    result = zarrx_cli("consolidate", f"file://{hierarchy}")
    assert result.returncode == 0, result.stderr
    assert "Consolidated the metadata of 4 node(s) below '/' into its zarr.json" in result.stdout
    document = json.loads((hierarchy / "zarr.json").read_text())
    assert set(document["consolidated_metadata"]["metadata"]) == {"t2m", "obs", "obs/count", "obs/flags"}
    root = zarrx.open_group(str(hierarchy))
    assert root.is_consolidated and root["obs/count"][...].sum() == 55


# -- mistakes ---------------------------------------------------------------------------------------
MISTAKES = {
    "missing path": (["tree", "{tmp}/nowhere.zarr"], "nowhere.zarr: no such file or directory"),
    "not a Zarr store": (["info", "{tmp}"], "is not a Zarr store: no array or group at '/'"),
    "node not found": (["info", "{tmp}/data.zarr", "--path", "obs/nope"], "no array or group at '/obs/nope'"),
    "option without =": (["tree", "{tmp}/data.zarr", "--storage-option", "anon"], "--storage-option: expected key=value"),
    "option for a local path": (["verify", "{tmp}/data.zarr", "--storage-option", "anon=true"], "storage_options"),
    "unknown protocol": (["tree", "nosuchprotocol://bucket/x.zarr"], "nosuchprotocol"),
    "consolidate an array": (["consolidate", "{tmp}/data.zarr", "--path", "t2m"], "expected a group at '/t2m'"),
    "empty memory store": (["tree", "memory://nothing-here"], "memory://nothing-here is not a Zarr store"),
    "demo over other files": (["demo", "{tmp}/occupied"], "weather.zarr exists and is not a Zarr hierarchy"),
}


@pytest.mark.parametrize("case", MISTAKES)
def test_mistakes_are_one_line_with_status_2(hierarchy, case):
    arguments, fragment = MISTAKES[case]
    (hierarchy.parent / "occupied" / "weather.zarr").mkdir(parents=True)
    (hierarchy.parent / "occupied" / "weather.zarr" / "notes.txt").write_text("not Zarr")
    result = zarrx_cli(*(argument.format(tmp=hierarchy.parent) for argument in arguments))
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("zarrx: error: ") and result.stderr.count("\n") == 1, result.stderr
    assert fragment in result.stderr


def test_python_m_zarrx_runs_the_same_command_line():
    result = subprocess.run([sys.executable, "-m", "zarrx", "--version"], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.strip() == f"zarrx {zarrx.__version__}"


# -- storage options reach the store ----------------------------------------------------------------
def test_storage_options_reach_an_s3_store():
    pytest.importorskip("moto.server")
    s3fs = pytest.importorskip("s3fs")
    from tests.s3_server import serve_s3

    with serve_s3() as server:
        options = {"endpoint_url": server.url, "key": "test", "secret": "test"}
        s3fs.S3FileSystem(skip_instance_cache=True, **options).mkdir("cli-bucket")
        url = f"s3://cli-bucket/{uuid.uuid4().hex}.zarr"
        array = zarrx.create_array(url, shape=(6, 4), chunks=(3, 4), dtype="int32", storage_options=options)
        array[...] = 7
        flags = [f"--storage-option={key}={value}" for key, value in options.items()]
        server.reset()
        result = zarrx_cli("info", url, *flags, "--storage-option", 'config_kwargs={"retries": {"max_attempts": 1}}')
        assert result.returncode == 0, result.stderr
        assert "(6, 4)" in result.stdout and "Initialized       : 2/2 chunks" in result.stdout
        assert server.count("GET") >= 1  # the command's requests went to this server, with these options

        verified = zarrx_cli("verify", url, *flags, "--no-progress")
        assert verified.returncode == 0 and "2 stored chunk(s) checked" in verified.stdout


def test_tree_and_verify_over_http(hierarchy):
    pytest.importorskip("aiohttp")
    from tests.http_server import serve

    with serve(hierarchy.parent) as server:
        url = f"{server.url}/{hierarchy.name}"
        tree = zarrx_cli("tree", url)
        assert tree.returncode == 0, tree.stderr
        assert "t2m (8, 6) float32 chunks=(2, 3) shards=(4, 6)" in tree.stdout and "flags (6,) uint8" in tree.stdout
        verified = zarrx_cli("verify", url, "--no-progress")
        assert verified.returncode == 0 and "5 stored chunk(s) and 2 shard(s) checked" in verified.stdout
        assert any(request.path.endswith("/t2m/c/1/0") for request in server.requests)


def test_storage_option_values_are_json_when_they_parse():
    options = parse_storage_options(["anon=true", "n=3", "name=my-bucket", 'kw={"a": [1, 2]}', "url=http://x?a=b", "e="])
    assert options == {"anon": True, "n": 3, "name": "my-bucket", "kw": {"a": [1, 2]}, "url": "http://x?a=b", "e": ""}
    assert parse_storage_options(None) is None
    with pytest.raises(UsageError, match="expected key=value"):
        parse_storage_options(["=1"])


def test_progress_bar_draws_once_when_not_on_a_terminal():
    stream = io.StringIO()
    bar = ProgressBar("verify", stream)
    bar(3, 10)
    assert stream.getvalue() == ""
    bar(10, 10)
    assert re.fullmatch(r"verify \[#{30}\] 100% 10/10 chunks \d+\.\d s\n", stream.getvalue())


# -- demo -------------------------------------------------------------------------------------------
def test_demo_writes_opens_reduces_and_prints_a_table(tmp_path):
    import xarray as xr

    result = zarrx_cli("demo", tmp_path / "here")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    path = tmp_path / "here" / "weather.zarr"
    assert str(path) in out
    for variable in ("t2m", "precip", "wind"):
        assert f"{variable} (365, 91, 180) float32 chunks=(30, 46, 90) shards=(30, 92, 180)" in out
    assert "engine='zarrx'" in out and "100% Completed" in out  # lazily opened, dask's progress bar
    rows = re.findall(r"^(2023-\d\d)((?:\s+-?\d+\.\d\d){5})$", out, re.M)
    assert [month for month, _ in rows] == [f"2023-{month:02d}" for month in range(1, 13)]

    # the table's numbers are the data's: recompute July's global mean temperature from the store
    ds = xr.open_dataset(path, engine="zarrx", chunks={})
    assert ds.t2m.attrs["standard_name"] == "air_temperature" and ds.time.dtype.kind == "M"
    assert ds.t2m.encoding["shards"] == (30, 92, 180)
    july = float(ds.t2m.sel(time="2023-07").weighted(np.cos(np.deg2rad(ds.lat))).mean().compute()) - 273.15
    assert float(rows[6][1].split()[0]) == pytest.approx(july, abs=0.006)
    assert zarrx.verify(str(path)).ok and zarrx.open_group(str(path)).is_consolidated
