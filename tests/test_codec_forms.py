"""Codecs in every form users hold them write what zarr-python writes, and read back identically.

The forms: zarrx codec objects, their JSON, zarr-python codec objects, numcodecs codec objects
and short names (``"zstd"``, ``"blosc"``, ``"zlib"`` ...), everywhere codecs are accepted --
``create_array`` (v3 and v2), xarray encodings (``ds.zarrx.to_zarr``), ``zarrx.convert`` and
``zarrx convert --compressor``. Each form has a *peer*: the zarr-python codec object (v3) or
numcodecs object (v2) meaning the same, and the test compares the stored codec metadata with
what zarr-python itself stores for the peer -- so what depends on the array (blosc's
``typesize`` = the item size, its ``shuffle``) is filled in as zarr-python fills it -- then
reads the values back with zarr-python. Encodings read back as inspectable codec objects
(``.cname``, ``.clevel``, ``.level``, ``.shuffle``) equal to what ``engine="zarr"`` gives, and
written again they store the same codecs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import numcodecs
import numpy as np
import pytest
import xarray as xr
import zarr
import zarr.codecs.numcodecs as zarr_numcodecs

import zarrx
import zarrx.xarray  # noqa: F401 (registers ds.zarrx)
from zarrx import codecs as zc
from zarrx.codecs import codec_from_json
from zarrx.errors import MetadataError, UnknownCodecError
from zarrx.tools.cli import main

pytestmark = [
    pytest.mark.filterwarnings("ignore::zarr.errors.ZarrUserWarning"),
    pytest.mark.filterwarnings("ignore::zarr.errors.UnstableSpecificationWarning"),
]

SHAPE, CHUNKS = (64, 48), (16, 16)
DATA = (np.arange(64 * 48, dtype="<f4").reshape(SHAPE) % 97) / 4
Blosc = numcodecs.Blosc

#: form -> (the form, as users hold it; zarr-python's v3 peer; numcodecs' v2 peer or None)
FORMS: dict[str, tuple[Callable[[], Any], Callable[[], Any], Callable[[], Any] | None]] = {
    "zarrx-zstd": (lambda: zc.ZstdCodec(level=3), lambda: zarr.codecs.ZstdCodec(level=3), lambda: numcodecs.Zstd(level=3)),
    "json-zstd": (lambda: {"name": "zstd", "configuration": {"level": 3}}, lambda: zarr.codecs.ZstdCodec(level=3),
                  lambda: numcodecs.Zstd(level=3)),
    "zarr-zstd": (lambda: zarr.codecs.ZstdCodec(level=3), lambda: zarr.codecs.ZstdCodec(level=3),
                  lambda: numcodecs.Zstd(level=3)),
    "numcodecs-zstd": (lambda: numcodecs.Zstd(level=3), lambda: zarr.codecs.ZstdCodec(level=3),
                       lambda: numcodecs.Zstd(level=3)),
    "name-zstd": (lambda: "zstd", lambda: zarr.codecs.ZstdCodec(level=0), lambda: numcodecs.Zstd(level=0)),
    "zarrx-blosc": (lambda: zc.BloscCodec(cname="lz4", clevel=5, shuffle="shuffle"),
                    lambda: zarr.codecs.BloscCodec(cname="lz4", clevel=5, shuffle="shuffle"),
                    lambda: Blosc(cname="lz4", clevel=5, shuffle=Blosc.SHUFFLE)),
    "zarr-blosc-shuffle": (lambda: zarr.codecs.BloscCodec(shuffle="shuffle"), lambda: zarr.codecs.BloscCodec(shuffle="shuffle"),
                           lambda: Blosc(cname="zstd", clevel=5, shuffle=Blosc.SHUFFLE)),
    "zarr-blosc-default": (lambda: zarr.codecs.BloscCodec(), lambda: zarr.codecs.BloscCodec(),
                           lambda: Blosc(cname="zstd", clevel=5, shuffle=Blosc.AUTOSHUFFLE)),
    "numcodecs-blosc": (lambda: Blosc(), lambda: zarr.codecs.BloscCodec(cname="lz4", clevel=5, shuffle="shuffle"),
                        lambda: Blosc()),
    "numcodecs-bitshuffle": (lambda: Blosc(cname="zstd", clevel=3, shuffle=Blosc.BITSHUFFLE),
                             lambda: zarr.codecs.BloscCodec(cname="zstd", clevel=3, shuffle="bitshuffle"),
                             lambda: Blosc(cname="zstd", clevel=3, shuffle=Blosc.BITSHUFFLE)),
    "name-blosc": (lambda: "blosc", lambda: zarr.codecs.BloscCodec(),
                   lambda: Blosc(cname="zstd", clevel=5, shuffle=Blosc.AUTOSHUFFLE)),
    "zarrx-gzip": (lambda: zc.GzipCodec(level=4), lambda: zarr.codecs.GzipCodec(level=4), lambda: numcodecs.GZip(level=4)),
    "numcodecs-gzip": (lambda: numcodecs.GZip(level=4), lambda: zarr.codecs.GzipCodec(level=4),
                       lambda: numcodecs.GZip(level=4)),
    "name-gzip": (lambda: "gzip", lambda: zarr.codecs.GzipCodec(level=5), lambda: numcodecs.GZip(level=5)),
    "numcodecs-zlib": (lambda: numcodecs.Zlib(level=3), lambda: zarr_numcodecs.Zlib(level=3), lambda: numcodecs.Zlib(level=3)),
    "zarr-numcodecs-zlib": (lambda: zarr_numcodecs.Zlib(level=3), lambda: zarr_numcodecs.Zlib(level=3),
                            lambda: numcodecs.Zlib(level=3)),
    "name-lz4": (lambda: "lz4", lambda: zarr_numcodecs.LZ4(acceleration=1), lambda: numcodecs.LZ4()),
    "name-crc32c": (lambda: "crc32c", lambda: zarr.codecs.Crc32cCodec(), None),
    "list-of-forms": (lambda: [numcodecs.Zstd(level=1), "crc32c"],
                      lambda: [zarr.codecs.ZstdCodec(level=1), zarr.codecs.Crc32cCodec()], None),
}


def stored_codecs(path: Path, name: str = "") -> list[Any]:
    """The codecs in the array's zarr.json (v3, parsed: zarrx writes zstd's ``checksum: false``
    not at all, as the zstd extension asks, where zarr-python writes it) or its filters and
    compressor (v2, as stored)."""
    folder = path / name if name else path
    if (folder / "zarr.json").exists():
        return [codec_from_json(codec, "codecs") for codec in json.loads((folder / "zarr.json").read_text())["codecs"]]
    document = json.loads((folder / ".zarray").read_text())
    return [document["filters"], document["compressor"]]


def theirs(path: Path, compressors: Any, zarr_format: int = 3) -> list[dict[str, Any]]:
    """What zarr-python stores for the peer, and checks our values against its read."""
    array = zarr.create_array(str(path), shape=SHAPE, chunks=CHUNKS, dtype="<f4", fill_value=0,
                              compressors=compressors, zarr_format=zarr_format)  # fmt: skip
    array[:] = DATA
    return stored_codecs(path)


def read_by_zarr_python(path: Path, name: str = "") -> np.ndarray:
    return zarr.open_array(str(path), path=name, mode="r")[:]


@pytest.mark.parametrize("form", FORMS)
def test_create_array_takes_every_form_as_zarr_python_writes_it(form, tmp_path):
    make, peer, _ = FORMS[form]
    array = zarrx.create_array(str(tmp_path / "ours"), shape=SHAPE, chunks=CHUNKS, dtype="<f4", fill_value=0,
                               compressors=make())  # fmt: skip
    array[:] = DATA
    assert stored_codecs(tmp_path / "ours") == theirs(tmp_path / "theirs", peer())
    np.testing.assert_array_equal(read_by_zarr_python(tmp_path / "ours"), DATA)


@pytest.mark.parametrize("form", [form for form, (_, _, v2) in FORMS.items() if v2 is not None])
def test_v2_arrays_take_every_form_as_zarr_python_writes_it(form, tmp_path):
    make, _, peer = FORMS[form]
    array = zarrx.create_array(str(tmp_path / "ours"), shape=SHAPE, chunks=CHUNKS, dtype="<f4", fill_value=0,
                               compressors=make(), zarr_format=2)  # fmt: skip
    array[:] = DATA
    assert stored_codecs(tmp_path / "ours") == theirs(tmp_path / "theirs", peer(), zarr_format=2)
    np.testing.assert_array_equal(read_by_zarr_python(tmp_path / "ours"), DATA)


@pytest.mark.parametrize("form", FORMS)
def test_xarray_encodings_take_every_form(form, tmp_path):
    make, peer, _ = FORMS[form]
    dataset = xr.Dataset({"v": (("y", "x"), DATA)})
    dataset.zarrx.to_zarr(str(tmp_path / "ours"), encoding={"v": {"compressors": make(), "chunks": CHUNKS}})
    dataset.to_zarr(tmp_path / "theirs", zarr_format=3, encoding={"v": {"compressors": peer(), "chunks": CHUNKS}})
    assert stored_codecs(tmp_path / "ours", "v") == stored_codecs(tmp_path / "theirs", "v")
    np.testing.assert_array_equal(read_by_zarr_python(tmp_path / "ours", "v"), DATA)


@pytest.mark.parametrize("form", FORMS)
def test_convert_takes_every_form(form, tmp_path):
    make, peer, _ = FORMS[form]
    source = zarrx.create_array(str(tmp_path / "src"), shape=SHAPE, chunks=(32, 48), dtype="<f4", fill_value=0,
                                compressors=None, zarr_format=2)  # fmt: skip
    source[:] = DATA
    zarrx.convert(str(tmp_path / "src"), str(tmp_path / "ours"), chunks=CHUNKS, compressors=make(), progress=False)
    assert stored_codecs(tmp_path / "ours") == theirs(tmp_path / "theirs", peer())
    np.testing.assert_array_equal(read_by_zarr_python(tmp_path / "ours"), DATA)


@pytest.mark.parametrize(
    "option, peer",
    [
        ("zstd:3", zarr.codecs.ZstdCodec(level=3)),
        ("blosc:3", zarr.codecs.BloscCodec(clevel=3)),
        ("gzip", zarr.codecs.GzipCodec(level=5)),
        ("zlib:2", zarr_numcodecs.Zlib(level=2)),
        ("lz4", zarr_numcodecs.LZ4(acceleration=1)),
        ('[{"id": "blosc", "cname": "lz4", "clevel": 1, "shuffle": 1}]', zarr.codecs.BloscCodec(cname="lz4", clevel=1, shuffle="shuffle")),
    ],
)
def test_the_compressor_option_takes_names_levels_and_json(option, peer, tmp_path):
    source = zarrx.create_array(str(tmp_path / "src"), shape=SHAPE, chunks=CHUNKS, dtype="<f4", fill_value=0)
    source[:] = DATA
    assert main(["convert", str(tmp_path / "src"), str(tmp_path / "ours"), "--compressor", option, "--no-progress"]) == 0
    assert stored_codecs(tmp_path / "ours") == theirs(tmp_path / "theirs", peer)


@pytest.mark.parametrize(
    "filters, peer_filters, serializer",
    [
        # (zarr-python 3.1 writes wrong bytes for a transpose before numcodecs.delta, and misreads
        # numcodecs filters under a big-endian bytes codec, its own writes too: not combined here)
        ([zarr.codecs.TransposeCodec(order=(1, 0)), numcodecs.Delta(dtype="<i4")],
         [zarr.codecs.TransposeCodec(order=(1, 0)), zarr_numcodecs.Delta(dtype="<i4", astype="<i4")],
         zarr.codecs.BytesCodec(endian="little")),
        ([{"name": "transpose", "configuration": {"order": [1, 0]}}], [zarr.codecs.TransposeCodec(order=(1, 0))],
         zarr.codecs.BytesCodec(endian="big")),
        ([{"id": "astype", "encode_dtype": "<i8", "decode_dtype": "<i4"}],
         [zarr_numcodecs.AsType(encode_dtype="<i8", decode_dtype="<i4")], {"name": "bytes", "configuration": {"endian": "little"}}),
    ],
    ids=["zarr-and-numcodecs-objects", "json-and-big-endian", "numcodecs-config"],
)
def test_filters_and_serializers_in_every_form(filters, peer_filters, serializer, tmp_path):
    data = np.arange(64 * 48, dtype="<i4").reshape(SHAPE)
    ours = zarrx.create_array(str(tmp_path / "ours"), shape=SHAPE, chunks=CHUNKS, dtype="<i4", fill_value=0,
                              filters=filters, serializer=serializer, compressors="zstd")  # fmt: skip
    ours[:] = data
    zarr.create_array(
        str(tmp_path / "theirs"), shape=SHAPE, chunks=CHUNKS, dtype="<i4", fill_value=0, filters=peer_filters,
        serializer=serializer, compressors=zarr.codecs.ZstdCodec(level=0),
    )  # fmt: skip
    assert stored_codecs(tmp_path / "ours") == stored_codecs(tmp_path / "theirs")
    np.testing.assert_array_equal(read_by_zarr_python(tmp_path / "ours"), data)


def test_blosc_shuffles_by_the_item_size(tmp_path):
    """numcodecs' Blosc and zarr-python's BloscCodec(shuffle=...) leave the type size to the array:
    it is the item size (a type size of 1 would make the shuffle a no-op)."""
    for dtype, size in (("<f8", 8), ("<i2", 2), ("|u1", 1)):
        for form in (Blosc(shuffle=Blosc.SHUFFLE), zarr.codecs.BloscCodec(shuffle="shuffle"), "blosc"):
            array = zarrx.create_array({}, shape=(100,), dtype=dtype, compressors=form)
            blosc = array.metadata.codecs.bytes_bytes[0]
            assert blosc.typesize == size, (dtype, form)
            assert blosc.shuffle == ("bitshuffle" if form == "blosc" and size == 1 else "shuffle")


def test_forms_that_are_no_codec_are_refused_as_create_array_refuses_them():
    with pytest.raises(UnknownCodecError, match=r"compressors\[0\]: unknown codec 'snappy'"):
        zarrx.create_array({}, shape=(4,), dtype="f4", compressors="snappy")
    with pytest.raises(MetadataError, match=r"compressors\[0\]: 'bytes' is an array -> bytes codec"):
        zarrx.create_array({}, shape=(4,), dtype="f4", compressors=[zarr.codecs.BytesCodec()])
    with pytest.raises(MetadataError, match=r"filters\[0\]: the codec 'transpose' has no default configuration"):
        zarrx.create_array({}, shape=(4,), dtype="f4", filters="transpose")
    with pytest.raises(MetadataError, match=r"compressors\[0\]: expected a codec"):
        zarrx.create_array({}, shape=(4,), dtype="f4", compressors=[3.5])
    with pytest.raises(MetadataError, match="pickle"):
        zarrx.create_array({}, shape=(4,), dtype="f4", zarr_format=2, compressors="pickle")


def test_encodings_read_back_as_codec_objects_and_round_trip(tmp_path):
    """What xarray's own test_compressor_encoding checks, with engine="zarrx": the encoding holds
    codec objects equal to the ones written, with their settings readable, and written again by
    either engine they store the same codecs."""
    blosc = zarr.codecs.BloscCodec(cname="zstd", clevel=3, shuffle="shuffle", typesize=8, blocksize=0)
    dataset = xr.Dataset({"v": (("y", "x"), DATA.astype("f8"))})
    dataset.zarrx.to_zarr(str(tmp_path / "a"), encoding={"v": {"compressors": (blosc,), "chunks": CHUNKS}})
    opened = xr.open_dataset(tmp_path / "a", engine="zarrx")
    encoding = opened.v.encoding
    assert encoding["compressors"] == (blosc,) == xr.open_dataset(tmp_path / "a", engine="zarr").v.encoding["compressors"]
    codec = encoding["compressors"][0]
    assert (codec.cname.value, codec.clevel, codec.shuffle.value, codec.typesize) == ("zstd", 3, "shuffle", 8)
    assert encoding["serializer"] == zarr.codecs.BytesCodec(endian="little")
    assert zc.BloscCodec(cname="zstd", clevel=3, shuffle="shuffle", typesize=8) == codec  # zarrx's equals zarr-python's
    opened.load().zarrx.to_zarr(str(tmp_path / "b"))
    opened.load().to_zarr(tmp_path / "c", zarr_format=3)
    assert stored_codecs(tmp_path / "b", "v") == stored_codecs(tmp_path / "c", "v") == stored_codecs(tmp_path / "a", "v")
    # v2 encodings are numcodecs objects, as engine="zarr" gives them
    dataset.to_zarr(tmp_path / "v2", zarr_format=2, encoding={"v": {"compressors": (Blosc(cname="zstd", clevel=3, shuffle=2),)}})
    v2 = xr.open_dataset(tmp_path / "v2", engine="zarrx").v.encoding["compressors"]
    assert v2 == (Blosc(cname="zstd", clevel=3, shuffle=2),) and v2[0].clevel == 3
