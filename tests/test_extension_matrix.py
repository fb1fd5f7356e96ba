"""Which implementation reads which registered extension, measured: the table of
``docs/format-support.md``.

zarrx writes one small array per extension; each peer opens every one of them and reads it
whole -- zarr-python 3.1 (this environment), zarr-python 3.2+ (``tests/zarr_next.py``),
tensorstore and zarrs (``tests/zarrs_peer.py``) -- and a read counts only when it returns the
values zarrx wrote, bit for bit. The peers' writes are measured where their own tests are
(``test_ml_dtypes.py``, ``test_registry_codecs.py``, ``test_rectilinear.py``,
``test_zarrs_data.py``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorstore as ts
import zarr

import zarrx
from zarrx.codecs import BitroundCodec, BytesCodec, ConditionalCodec, PackBitsCodec, ReshapeCodec, ZfpCodec, ZstdCodec
from zarrx.codecs.optional import OptionalCodec

from .test_ml_dtypes import in_memory, stored_bits
from .zarr_next import run_zarr_next
from .zarrs_peer import zarrs_read

#: extension -> create_array keywords (shape (4, 6), chunks (2, 3) unless given)
EXTENSIONS: dict[str, dict[str, Any]] = {
    **{name: {"dtype": name} for name in [
        "bfloat16", "float8_e3m4", "float8_e4m3", "float8_e4m3fn", "float8_e4m3b11fnuz", "float8_e4m3fnuz", "float8_e5m2",
        "float8_e5m2fnuz", "float8_e8m0fnu", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn", "int2", "int4", "uint2",
        "uint4", "complex_bfloat16", "complex_float16", "complex_float32", "complex_float64", "complex_float8_e4m3",
        "complex_float6_e2m3fn", "complex_float4_e2m1fn",
    ]},
    "optional": {"dtype": {"name": "optional", "configuration": {"name": "uint8", "configuration": {}}},
                 "serializer": OptionalCodec(mask_codecs=[PackBitsCodec()], data_codecs=[BytesCodec()])},
    "bitround": {"dtype": "float32", "filters": [BitroundCodec(keepbits=6)]},
    "packbits": {"dtype": "int4", "serializer": PackBitsCodec()},
    "reshape": {"dtype": "uint16", "filters": [ReshapeCodec(shape=[-1])]},
    "zfp": {"dtype": "float32", "serializer": ZfpCodec(mode="reversible")},
    "conditional": {"dtype": "uint16", "compressors": [ConditionalCodec(codecs=[ZstdCodec(level=1)])]},
    "n5_default": {"dtype": "uint16", "chunk_key_encoding": {"name": "v2", "separator": "/"},
                   "serializer": {"name": "n5_default", "configuration": {"codecs": [
                       {"name": "transpose", "configuration": {"order": [1, 0]}}, {"name": "bytes", "configuration": {"endian": "big"}}]}}},
    "rectilinear": {"dtype": "uint16", "chunks": ((1, 3), (2, 4))},
    "rectilinear, sharded": {"dtype": "uint16", "chunks": (2, 2), "shards": ((2, 2), (2, 4))},
}  # fmt: skip

#: what each peer reads of zarrx's arrays (the measured answer; see the module docstring)
READS = {
    "zarr-python 3.1": set(),
    "zarr-python 3.2+": {"rectilinear", "rectilinear, sharded"},
    "tensorstore": {"bfloat16", "float8_e3m4", "float8_e4m3fn", "float8_e4m3b11fnuz", "float8_e4m3fnuz", "float8_e5m2",
                    "float8_e5m2fnuz", "float8_e8m0fnu", "float4_e2m1fn", "int2", "int4"},
    "zarrs": {name for name in EXTENSIONS if name not in ("float8_e4m3fn", "optional", "bitround", "zfp", "conditional", "n5_default")},
}  # fmt: skip
PEERS = list(READS)


def _values(name: str, array: zarrx.Array) -> np.ndarray:
    if name == "optional":
        values = np.zeros(array.shape, dtype=array.dtype)
        values["value"] = np.arange(24).reshape(4, 6)
        values["valid"] = np.arange(24).reshape(4, 6) % 3 != 0
        return values
    data_type = EXTENSIONS[name]["dtype"]
    if data_type in ("uint16", "float32"):
        return np.linspace(0, 1000, 24).reshape(4, 6).astype(data_type)
    return in_memory(data_type, stored_bits(data_type, (4, 6), seed=9))


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> dict[str, tuple[Path, np.ndarray, int]]:
    """Every extension's array, its values and its stored bytes per element."""
    root = tmp_path_factory.mktemp("matrix")
    arrays = {}
    for name, keywords in EXTENSIONS.items():
        path = root / name.replace(", ", "-")
        # no compressor: zarrs 0.23 refuses zstd without its optional "checksum" member, which zarrx
        # leaves out (test_zarrs_wants_the_optional_zstd_checksum); the table is about the extensions
        keywords = {"chunks": (2, 3), "compressors": None, **keywords}
        array = zarrx.create_array(str(path), shape=(4, 6), fill_value=None, **keywords)
        array[...] = _values(name, array)
        arrays[name] = (path, array[...], array.metadata.data_type.item_size)
    return arrays


def _same(entry: tuple[Path, np.ndarray, int], raw: bytes) -> bool:
    """Whether a peer's elements (in the bytes codec's layout) are zarrx's values, bit for bit --
    read as that layout says (zarrs hands int4 back sign-extended to its byte: the upper bits are
    ignored)."""
    path, values, item_size = entry
    if len(raw) != values.size * item_size:
        return False
    data_type = zarrx.open_array(str(path)).metadata.data_type
    return data_type.from_stored(np.frombuffer(raw, np.uint8), values.shape, "<").tobytes() == values.tobytes()


def _reads(peer: str, written: dict[str, tuple[Path, np.ndarray, int]]) -> set[str]:
    read = set()
    if peer == "zarr-python 3.2+":
        script = (
            "out = {}\n"
            "for path in sys.argv[1:]:\n"
            "    try:\n        out[path] = zarr.open_array(path)[...].tobytes().hex()\n"
            "    except Exception as error:\n        out[path] = None\n"
            "print(json.dumps(out))\n"
        )
        results = json.loads(run_zarr_next(script, *(str(path) for path, _, _ in written.values())))
        return {name for name, entry in written.items()
                if results[str(entry[0])] is not None and _same(entry, bytes.fromhex(results[str(entry[0])]))}  # fmt: skip
    for name, entry in written.items():
        path, _, item_size = entry
        try:
            if peer == "zarr-python 3.1":
                raw = np.asarray(zarr.open_array(str(path))[...]).tobytes()
            elif peer == "tensorstore":
                store = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}}).result()
                raw = store.read().result().tobytes()
            else:
                raw = zarrs_read(path, item_size).tobytes()
        except Exception:  # the peer refuses the array: it does not read this extension
            continue
        if _same(entry, raw):
            read.add(name)
    return read


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("peer", PEERS)
def test_which_peer_reads_which_extension(written, peer):
    for name, (path, values, _) in written.items():  # zarrx itself reads every one
        assert zarrx.open_array(str(path))[...].tobytes() == values.tobytes(), name
    assert _reads(peer, written) == READS[peer]


def test_zarrs_wants_the_optional_zstd_checksum(tmp_path):
    """A departure of zarrs 0.23: zstd's "checksum" is optional in the registry; zarrs refuses it absent."""
    array = zarrx.create_array(str(tmp_path), shape=(4,), dtype="uint8", compressors=[ZstdCodec(level=1)])
    array[...] = 1
    assert "checksum" not in json.loads((tmp_path / "zarr.json").read_text())["codecs"][1]["configuration"]
    with pytest.raises(TypeError, match="checksum"):
        zarrs_read(tmp_path, 1)
