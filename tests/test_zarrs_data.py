"""zarrs' published test data, regenerated.

zarrs' test data (``zarrs/tests/data`` of github.com/zarrs/zarrs) is zarr.json documents and binary
chunks; only the documents can be fetched here (``tests/data/zarrs``). So:

* the arrays zarrs' generator scripts write with zarr-python (``v2_generate.py``,
  ``v3_generate.py``: every compressor, zfpy and pcodec, C and F order) are written again by
  zarr-python, as the scripts do, and read with zarrx and with zarrs (zarr-python running
  zarrs-python's codec pipeline);
* the arrays zarrs writes itself (``optional``, ``optional`` of ``optional``, ``bitround``) get
  their published documents and chunks assembled here, in the layout zarrs documents, from the
  values their descriptions state.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numcodecs
import numpy as np
import pytest
import zarr
from numcodecs import zarr3 as numcodecs_zarr3

import zarrx
from zarrx.errors import ChunkDecodeError

DATA = Path(__file__).parent / "data" / "zarrs"
#: the values of every array of v2_generate.py and v3_generate.py
VALUES = np.arange(100).reshape(10, 10)

pytestmark = [
    pytest.mark.filterwarnings("ignore::zarr.errors.UnstableSpecificationWarning"),
    pytest.mark.filterwarnings("ignore::zarr.errors.ZarrUserWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),  # numcodecs.zarr3 "not part of the Zarr spec"
]


def read_with_zarrs(path: Path) -> np.ndarray:
    """The array as zarr-python reads it through zarrs' codec pipeline (Rust; zarr-python's own
    codecs only for what zarrs-python does not take)."""
    with zarr.config.set({"codec_pipeline.path": "zarrs.ZarrsCodecPipeline"}):
        return zarr.open_array(str(path))[...]


V2_COMPRESSORS = {
    "none": None,
    "blosc": numcodecs.Blosc(cname="zstd", clevel=1, shuffle=numcodecs.Blosc.BITSHUFFLE),
    "gzip": numcodecs.GZip(level=9),
    "bz2": numcodecs.BZ2(level=9),
    "zstd": numcodecs.Zstd(level=5, checksum=False),
    "zfpy": numcodecs.ZFPY(mode=4, tolerance=0.01),
    "pcodec": numcodecs.PCodec(level=8, mode_spec="auto"),
}
#: v2_generate.py writes F order only without a compressor and with blosc
V2_ARRAYS = [("C", name) for name in V2_COMPRESSORS] + [("F", "none"), ("F", "blosc")]


@pytest.mark.parametrize(("order", "compressor"), V2_ARRAYS)
def test_v2_generate_arrays(tmp_path, order, compressor):
    path = tmp_path / f"array_{compressor}_{order}.zarr"
    codec = V2_COMPRESSORS[compressor]
    array = zarr.create_array(str(path), zarr_format=2, shape=[10, 10], chunks=[5, 5], dtype=np.float32, fill_value=0.0,
                              compressors=[codec] if codec else None, order=order)  # fmt: skip
    array[...] = VALUES
    array.attrs["key"] = "value"
    read = zarrx.open_array(str(path))
    tolerance = 0.01 if compressor == "zfpy" else 0
    assert np.abs(read[...] - VALUES).max() <= tolerance
    # zarrs-python cannot read F-order v2 arrays (test_zarrs_python_refuses_f_order_v2): zarr-python's reader then
    reference = read_with_zarrs(path) if order == "C" else zarr.open_array(str(path))[...]
    np.testing.assert_array_equal(read[...], reference)
    assert read.attrs["key"] == "value"


def test_zarrs_python_refuses_f_order_v2(tmp_path):
    """A limit of zarrs-python 0.2 (not of zarrs): F-order v2 chunks fail in its pipeline."""
    array = zarr.create_array(str(tmp_path), zarr_format=2, shape=[10, 10], chunks=[5, 5], dtype=np.float32, order="F")
    array[...] = VALUES
    with pytest.raises(ValueError, match="C contiguous"):
        read_with_zarrs(tmp_path)
    np.testing.assert_array_equal(zarrx.open_array(str(tmp_path))[...], VALUES)


def test_v2_pcodec_array_as_published(tmp_path):
    """The published .zarray of array_pcodec_C.zarr, its chunks written by numcodecs' PCodec: zarrx
    used to hand pcodec a buffer of bytes, which pcodec refuses as "corruption" (its chunks hold
    float32 numbers); it now hands it the chunk's element type."""
    path = tmp_path / "array_pcodec_C.zarr"
    path.mkdir()
    document = json.loads((DATA / "array_pcodec_C.zarray").read_text())
    (path / ".zarray").write_text(json.dumps(document))
    codec = numcodecs.get_codec(document["compressor"])
    for i in range(2):
        for j in range(2):
            chunk = np.ascontiguousarray(VALUES[5 * i : 5 * i + 5, 5 * j : 5 * j + 5], dtype="<f4")
            (path / f"{i}.{j}").write_bytes(codec.encode(chunk))
    np.testing.assert_array_equal(zarrx.open_array(str(path))[...], VALUES)
    np.testing.assert_array_equal(read_with_zarrs(path), VALUES)
    (path / "1.1").write_bytes((path / "1.1").read_bytes()[:-3])
    with pytest.raises(ChunkDecodeError, match="1.1"):
        zarrx.open_array(str(path))[...]


V3_COMPRESSORS = {
    "none": None,
    "adler32": numcodecs_zarr3.Adler32(),
    "blosc": zarr.codecs.BloscCodec(cname="zstd", clevel=1, shuffle=zarr.codecs.BloscShuffle.bitshuffle),
    "gzip": zarr.codecs.GzipCodec(level=9),
    "bz2": numcodecs_zarr3.BZ2(level=9),
    "zstd": zarr.codecs.ZstdCodec(level=5, checksum=False),
    "fletcher32": numcodecs_zarr3.Fletcher32(),
    "zlib": numcodecs_zarr3.Zlib(level=8),
}
V3_SERIALIZERS = {"zfpy": numcodecs_zarr3.ZFPY(mode=4, tolerance=0.01), "pcodec": numcodecs_zarr3.PCodec(level=8, mode_spec="auto")}


@pytest.mark.parametrize("name", [*V3_COMPRESSORS, *V3_SERIALIZERS])
def test_v3_generate_arrays(tmp_path, name):
    path = tmp_path / f"array_{name}.zarr"
    arguments = {"serializer": V3_SERIALIZERS[name], "compressors": []} if name in V3_SERIALIZERS else {
        "compressors": [V3_COMPRESSORS[name]] if V3_COMPRESSORS[name] else None}
    array = zarr.create_array(str(path), zarr_format=3, shape=[10, 10], chunks=[5, 5], dtype=np.float32, fill_value=0.0,
                              **arguments)  # fmt: skip
    array[...] = VALUES
    array.attrs["key"] = "value"
    read = zarrx.open_array(str(path))
    assert np.abs(read[...] - VALUES).max() <= (0.01 if name == "zfpy" else 0)
    np.testing.assert_array_equal(read[...], read_with_zarrs(path))


# -- arrays zarrs writes itself ----------------------------------------------------------------------
def _packbits_bool(mask: np.ndarray) -> bytes:
    """packbits of a bool chunk as zarrs writes it: element i is bit i, least significant first."""
    return np.packbits(mask.reshape(-1).astype(np.uint8), bitorder="little").tobytes()


def _optional_chunk(valid: np.ndarray, data: bytes) -> bytes:
    """zarrs' optional codec: u64 mask length, u64 data length, the mask, the present values."""
    mask = _packbits_bool(valid)
    return struct.pack("<QQ", len(mask), len(data)) + mask + data


def _grid(description: str) -> list[list[str]]:
    return [line.split() for line in description.splitlines()[-4:]]


def _write_document(path: Path, name: str) -> dict:
    document = json.loads((DATA / name).read_text())
    path.mkdir(parents=True)
    (path / "zarr.json").write_text(json.dumps(document))
    return document


def test_zarrs_optional_array(tmp_path):
    document = _write_document(tmp_path / "array", "array_optional.zarr.json")
    grid = _grid(document["attributes"]["description"])
    for i in range(2):
        for j in range(2):
            cells = [row[2 * j : 2 * j + 2] for row in grid[2 * i : 2 * i + 2]]
            valid = np.array([[cell != "N" for cell in row] for row in cells])
            data = bytes(int(cell) for row in cells for cell in row if cell != "N")
            (tmp_path / "array" / "c" / str(i)).mkdir(parents=True, exist_ok=True)
            (tmp_path / "array" / "c" / str(i) / str(j)).write_bytes(_optional_chunk(valid, data))
    array = zarrx.open_array(str(tmp_path / "array"))
    values = array[...]
    expected_valid = np.array([[cell != "N" for cell in row] for row in grid])
    np.testing.assert_array_equal(values["valid"], expected_valid)
    np.testing.assert_array_equal(values["value"][expected_valid], [int(cell) for row in grid for cell in row if cell != "N"])
    assert (values["value"][~expected_valid] == 0).all()
    assert array.fill_value["valid"] == False  # noqa: E712  (null: missing)
    assert array.dimension_names == ("y", "x")
    # zarrx writes the chunks zarrs wrote
    copy = zarrx.create_array(str(tmp_path / "copy"), shape=(4, 4), chunks=(2, 2), dtype=array.metadata.data_type,
                              serializer=array.metadata.codecs.array_bytes, compressors=None)  # fmt: skip
    copy[...] = values
    for key in ["c/0/0", "c/0/1", "c/1/0"]:
        assert (tmp_path / "copy" / key).read_bytes() == (tmp_path / "array" / key).read_bytes()
    assert not (tmp_path / "copy" / "c/1/1").exists()  # all missing: the fill value, left out
    assert json.loads((tmp_path / "copy" / "zarr.json").read_text())["data_type"] == document["data_type"]


def test_zarrs_optional_of_optional_array(tmp_path):
    """Cells: a number (present, present), SN (Some(None): present, inner missing), N (missing);
    the fill value [null] is Some(None)."""
    document = _write_document(tmp_path / "array", "array_optional_nested.zarr.json")
    grid = _grid(document["attributes"]["description"])
    for i in range(2):
        for j in range(2):
            cells = [cell for row in grid[2 * i : 2 * i + 2] for cell in row[2 * j : 2 * j + 2]]
            outer = np.array([cell != "N" for cell in cells]).reshape(2, 2)
            present = [cell for cell in cells if cell != "N"]
            inner = np.array([cell != "SN" for cell in present])
            data = _optional_chunk(inner, bytes(int(cell) for cell in present if cell != "SN")) if present else b""
            (tmp_path / "array" / "c" / str(i)).mkdir(parents=True, exist_ok=True)
            (tmp_path / "array" / "c" / str(i) / str(j)).write_bytes(_optional_chunk(outer, data))
    (tmp_path / "array" / "c" / "1" / "0").unlink()  # all SN: the fill value, as zarrs leaves it out
    values = zarrx.open_array(str(tmp_path / "array"))[...]
    outer = np.array([[cell != "N" for cell in row] for row in grid])
    inner = np.array([[cell not in ("N", "SN") for cell in row] for row in grid])
    np.testing.assert_array_equal(values["valid"], outer)
    np.testing.assert_array_equal(values["value"]["valid"], inner)
    np.testing.assert_array_equal(values["value"]["value"][inner], [int(c) for row in grid for c in row if c not in ("N", "SN")])


def test_optional_refuses_inconsistent_chunks(tmp_path):
    _write_document(tmp_path / "array", "array_optional.zarr.json")
    array = zarrx.open_array(str(tmp_path / "array"))
    (tmp_path / "array" / "c" / "0").mkdir(parents=True)
    chunk = tmp_path / "array" / "c" / "0" / "0"
    for raw, message in [
        (_optional_chunk(np.array([[True, True], [False, False]]), b"\x01"), "expected 2 bytes"),
        (_optional_chunk(np.zeros((2, 2), bool), b"\x01"), "marks no element present"),
        (_optional_chunk(np.ones((2, 2), bool), bytes(4))[:-1], "the header states"),
        (b"\x01", "16-byte header"),
    ]:
        chunk.write_bytes(raw)
        with pytest.raises(ChunkDecodeError, match=message):
            array[:2, :2]


@pytest.mark.parametrize(("name", "values"), [
    ("bitround_uint8.zarr.json", np.array([0, 1, 7, 9, 100, 127, 128, 200, 254, 255], dtype=np.uint8)),
    ("bitround_float32.zarr.json", np.array([0.0, 1.1, -2.2, 3.3e10, 1e-20, np.inf, -0.0, 100.0, 7.77], dtype=np.float32)),
])  # fmt: skip
def test_zarrs_bitround_arrays(tmp_path, name, values):
    """The published documents; the chunk zarrs would store is computed here with zarrs' rule."""
    _write_document(tmp_path / "array", name)
    width = 8 * values.dtype.itemsize
    maxbits = {np.dtype(np.float32): lambda v: 23}.get(values.dtype, lambda v: v.bit_length())
    unsigned = values.view(f"u{values.dtype.itemsize}")
    rounded = []
    for value in map(int, unsigned):
        drop = maxbits(value) - 3
        if drop > 0:
            value = min(value + ((value >> drop) & 1) + (1 << (drop - 1)) - 1, 2**width - 1) >> drop << drop
        rounded.append(value)
    stored = np.array(rounded, dtype=unsigned.dtype).view(values.dtype)
    array = zarrx.open_array(str(tmp_path / "array"), mode="r+")
    array[...] = values
    assert (tmp_path / "array" / "c" / "0").read_bytes() == stored.astype(values.dtype.newbyteorder("<")).tobytes()
    np.testing.assert_array_equal(array[...], stored)
