"""Security: a store is data, never code; keys stay in the store; sizes are bounded; secrets stay secret.

* Nothing from a store is unpickled or evaluated: a full read of hostile stores (pickle object
  codecs in v2 and v3 spellings, pickle payloads as chunk bytes, attributes and fill values that
  look like code) runs with ``pickle``, ``marshal``, ``eval``, ``exec`` and ``numpy.load`` made
  to fail, and a payload's marker file never appears. (The v2 pickle refusal itself is tested in
  ``tests/test_v2.py::test_a_pickle_payload_in_the_store_is_never_executed``.)
* Keys are built only from validated node names and integer chunk coordinates: every key a
  whole workflow hands to the store is checked, and key encodings from metadata cannot inject
  separators. (Hostile names are refused in ``tests/test_bad_input.py``.)
* Shapes and chunk sizes that would overflow or demand absurd memory are refused with a zarrx
  error before anything is allocated (measured with ``tracemalloc``).
* Credentials in ``storage_options`` or in a URL never appear in a repr, an error message
  (with its chain of causes) or a log record.
"""

from __future__ import annotations

import builtins
import json
import logging
import marshal
import pickle
import re
import subprocess
import sys
import textwrap
import traceback
import tracemalloc
import uuid
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pytest
from fsspec.implementations.memory import MemoryFileSystem
from hypothesis import given, settings
from hypothesis import strategies as st

import zarrx
from zarrx.errors import GraphTooLargeError, MetadataError, NodeNotFoundError, ZarrxError
from zarrx.storage import MemoryStore
from zarrx.storage.paths import validate_key, validate_node_name
from zarrx.storage.store import Store
from zarrx.tools.verify import verify
from tests.figures import add, report_figures  # noqa: F401 (report_figures is an autouse fixture)

KiB, MiB = 2**10, 2**20


# -- nothing is unpickled or evaluated -------------------------------------------------------------
class Exploit:
    """Unpickling this writes a marker file (as a real exploit would run a command)."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (Path(self.marker), "pwned"))


def v3_array(codecs: list, dtype: Any = "int32", shape=(2,), chunks=(2,), **extra) -> bytes:
    document = {
        "zarr_format": 3, "node_type": "array", "shape": list(shape), "data_type": dtype,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunks)}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": "" if dtype == "string" else 0, "codecs": codecs, "attributes": {}, **extra,
    }  # fmt: skip
    return json.dumps(document).encode()


def hostile_stores(marker: str) -> dict[str, dict[str, bytes]]:
    """Stores whose metadata or chunks would run code if zarrx unpickled or evaluated anything."""
    payload = pickle.dumps(Exploit(marker))
    object_payload = pickle.dumps(np.array([Exploit(marker)], dtype=object))
    v2 = {"zarr_format": 2, "shape": [1], "chunks": [1], "dtype": "|O", "fill_value": None, "order": "C"}
    vlen_bytes = zarrx.create_array({}, shape=(2,), chunks=(2,), dtype="bytes", compressors=None)
    vlen_bytes[...] = np.array([payload, b"__import__('os').system('true')"], dtype=object)
    stores = {
        "v2-pickle-filter": {".zgroup": b'{"zarr_format": 2}', "x/.zarray": json.dumps({**v2, "filters": [{"id": "pickle"}], "compressor": None}).encode(), "x/0": object_payload},
        "v2-pickle-compressor": {"x/.zarray": json.dumps({**v2, "filters": None, "compressor": {"id": "pickle"}}).encode(), "x/0": object_payload},
        "v3-numcodecs.pickle": {"x/zarr.json": v3_array([{"name": "bytes"}, {"name": "numcodecs.pickle"}]), "x/c/0": payload},
        "v3-pickle-serializer": {"x/zarr.json": v3_array([{"name": "numcodecs.pickle"}], dtype="string"), "x/c/0": payload},
        "v3-pickle-optional": {"x/zarr.json": v3_array([{"name": "bytes"}, {"name": "pickle", "must_understand": False}]), "x/c/0": payload},
        "pickle-as-vlen-bytes": {f"x/{key}": bytes(value) for key, value in vlen_bytes.store.mapping.items()},
        "pickle-as-raw-chunk": {"x/zarr.json": v3_array([{"name": "bytes", "configuration": {"endian": "little"}}], shape=(len(payload) // 4,), chunks=(len(payload) // 4,)), "x/c/0": payload[: len(payload) // 4 * 4]},
        "code-in-attributes": {"x/zarr.json": v3_array([{"name": "bytes", "configuration": {"endian": "little"}}], attributes={"__reduce__": "os.system", "eval": "__import__('os').system('touch x')", "py/object": "os.system"})},
        "code-as-fill-value": {"x/zarr.json": v3_array([{"name": "bytes"}]).replace(b'"fill_value": 0', b'"fill_value": "__import__(\'os\').system(\'true\')"')},
        "code-as-dtype": {"x/.zarray": json.dumps({**v2, "dtype": "__import__('os').system('true')", "filters": None, "compressor": None}).encode()},
        "code-as-structured-dtype": {"x/.zarray": json.dumps({**v2, "dtype": [["a", "eval('1')"]], "filters": None, "compressor": None}).encode()},
    }  # fmt: skip
    return stores


def read_everything(store: Store) -> list[str]:
    """Every way to read the store; the outcome of each (a value's type or the zarrx error class)."""
    outcomes = []
    attempts = [
        lambda: zarrx.open_array(store, "x")[...],
        lambda: zarrx.open_array(store, "x").attrs.asdict(),
        lambda: zarrx.open_array(store, "x").fill_value,
        lambda: dict(zarrx.open_group(store).members(max_depth=None)),
        lambda: zarrx.from_zarr(store, "x").compute(scheduler="threads"),
        lambda: verify(store),
    ]
    for attempt in attempts:
        try:
            outcomes.append(type(attempt()).__name__)
        except ZarrxError as error:
            outcomes.append(type(error).__name__)
    return outcomes


def test_nothing_from_a_store_is_unpickled_or_evaluated(tmp_path, monkeypatch):
    marker = str(tmp_path / "pwned")
    pickle.loads(pickle.dumps(Exploit(marker)))  # the payload works when unpickled ...
    assert Path(marker).exists()
    Path(marker).unlink()
    stores = hostile_stores(marker)
    for mapping in stores.values():  # warm up: lazy imports define classes (dataclasses use exec)
        read_everything(MemoryStore(dict(mapping)))
    called: list[str] = []

    def refuse(name: str, original):
        def refused(*args: Any, **kwargs: Any) -> Any:
            caller = sys._getframe(1).f_globals.get("__name__", "")
            if caller.startswith(("dask.", "distributed.")):
                return original(*args, **kwargs)  # dask checks its own pickles of the graph it builds
            called.append(f"{name} from {caller}")
            raise AssertionError(f"{name} was called while reading a store")

        return refused

    for module, name in [(pickle, "loads"), (pickle, "load"), (pickle, "Unpickler"), (marshal, "loads"),
                         (builtins, "eval"), (builtins, "exec"), (np, "load")]:  # fmt: skip
        monkeypatch.setattr(module, name, refuse(f"{module.__name__}.{name}", getattr(module, name)))
    outcomes = {name: read_everything(MemoryStore(dict(mapping))) for name, mapping in stores.items()}
    monkeypatch.undo()
    assert called == [] and not Path(marker).exists()  # ... and zarrx never ran it
    add(__name__, "hostile stores read with unpickling and eval refused", len(stores))
    # what was refused, and what was read as plain data
    assert outcomes["v2-pickle-filter"][0] == "UnsupportedExtensionError"
    assert outcomes["v2-pickle-compressor"][0] == "UnsupportedExtensionError"
    assert outcomes["v3-numcodecs.pickle"][0] == "UnknownCodecError"
    assert outcomes["v3-pickle-serializer"][0] == "UnknownCodecError"
    assert outcomes["pickle-as-vlen-bytes"][0] == "ndarray"
    assert zarrx.open_array(MemoryStore(stores["pickle-as-vlen-bytes"]), "x")[0] == pickle.dumps(Exploit(marker))
    assert outcomes["code-in-attributes"][1] == "dict"


# -- keys come only from validated names and integer coordinates -----------------------------------
class KeyCheckingStore(Store):
    """Wraps a store and records every key and prefix it is handed."""

    def __init__(self, inner: Store) -> None:
        self.inner, self.keys = inner, []

    def _see(self, key: str) -> str:
        self.keys.append(key)
        return key

    def get(self, key, byte_range=None):
        return self.inner.get(self._see(key), byte_range)

    def get_many(self, keys):
        return self.inner.get_many([self._see(key) for key in keys])

    def get_ranges(self, requests):
        return self.inner.get_ranges([(self._see(key), byte_range) for key, byte_range in requests])

    def set(self, key, value):
        self.inner.set(self._see(key), value)

    def set_many(self, items):
        self.inner.set_many({self._see(key): value for key, value in items.items()})

    def delete(self, key):
        self.inner.delete(self._see(key))

    def delete_many(self, keys):
        self.inner.delete_many([self._see(key) for key in keys])

    def delete_prefix(self, prefix):
        self.inner.delete_prefix(self._see(prefix))

    def list_prefix(self, prefix):
        return self.inner.list_prefix(self._see(prefix))

    def list_dir(self, prefix):
        return self.inner.list_dir(self._see(prefix))


#: every name a node key may end with: metadata documents, and chunk keys made of digits
#: what follows the node path in a key: a metadata document (or the mark verify looks for, of an
#: unfinished convert: zarrx.tools.convert_job), or a chunk key
KEY_ENDINGS = re.compile(r"(zarr\.json|\.zarray|\.zgroup|\.zattrs|\.zmetadata|zarrx-convert-incomplete\.json|c([./][0-9]+)*|[0-9]+([./][0-9]+)*)?")

node_names = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="/\\\x00"), min_size=1, max_size=12
).filter(lambda name: _valid_name(name))


def _valid_name(name: str) -> bool:
    try:
        validate_node_name(name)
    except ZarrxError:
        return False
    return True


@settings(max_examples=40, deadline=None, database=None)
@given(
    names=st.lists(node_names, min_size=1, max_size=3, unique=True),
    zarr_format=st.sampled_from([2, 3]),
    separator=st.sampled_from(["/", "."]),
)
def test_every_key_is_a_validated_node_path_and_integer_coordinates(names, zarr_format, separator):
    inner = MemoryStore()
    store = KeyCheckingStore(inner)
    path = "/".join(names)
    encoding = {"name": "v2" if zarr_format == 2 else "default", "separator": separator}
    arr = zarrx.create_array(store, path, shape=(5, 7), chunks=(2, 3), dtype="int16", fill_value=0,
                             zarr_format=zarr_format, chunk_key_encoding=encoding)  # fmt: skip
    arr[...] = np.arange(35).reshape(5, 7)
    arr[1:3, 2:6] = 0
    assert zarrx.open_array(store, path)[...].sum() == np.arange(35).reshape(5, 7).sum() - np.arange(35).reshape(5, 7)[1:3, 2:6].sum()
    arr.attrs["a"] = 1
    arr.resize(3, 3)
    list(zarrx.open_group(store).members(max_depth=None))
    zarrx.consolidate_metadata(store)
    assert verify(store).ok
    del zarrx.open_group(store, mode="r+")[names[0]]
    for key in store.keys:
        if key == "" or key.endswith("/"):
            continue  # a listing prefix
        validate_key(key)  # inside the store, no '..', no absolute path
        rest = key
        for name in names:  # the key is node names, then a document or a chunk key
            if not rest.startswith(name + "/"):
                break
            rest = rest[len(name) + 1 :]
        assert KEY_ENDINGS.fullmatch(rest), f"key {key!r} is not a node path and a document or chunk key"
    add(__name__, "store keys checked", len(store.keys))


@pytest.mark.parametrize("separator", ["/../", "\\", "", "//", "..", "a", "%", None, 1])
def test_chunk_key_separators_from_metadata_are_only_slash_or_dot(separator):
    document = json.loads(v3_array([{"name": "bytes"}]))
    document["chunk_key_encoding"] = {"name": "default", "configuration": {"separator": separator}}
    store = MemoryStore({"zarr.json": json.dumps(document).encode()})
    with pytest.raises(MetadataError, match="separator"):
        zarrx.open_array(store)


# -- absurd sizes are refused before anything is allocated -----------------------------------------
def refused_before_allocating(call, error: type[ZarrxError], *fragments: str) -> int:
    """``call()`` raises ``error`` naming ``fragments`` having allocated almost nothing; the peak in bytes."""
    tracemalloc.start()
    try:
        with pytest.raises(error) as caught:
            call()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    for fragment in fragments:
        assert fragment in str(caught.value)
    assert peak < 4 * MiB, f"{peak / MiB:.0f} MiB allocated before the refusal"
    add(__name__, "absurd sizes refused before allocating", 1)
    return peak


def sharded(chunk_shape: list[int], index: list | None = None) -> list:
    return [{"name": "sharding_indexed", "configuration": {
        "chunk_shape": chunk_shape, "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "index_codecs": index or [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
    }}]  # fmt: skip


HUGE_METADATA = {
    "chunk-2**40x2**40": (v3_array([{"name": "bytes"}], shape=(2**40, 2**40), chunks=(2**40, 2**40)), "chunk_grid"),
    "chunk-2**62-elements-of-int8": (v3_array([{"name": "bytes"}], dtype="int8", shape=(2**62,), chunks=(2**62,)), "chunk_grid"),
    "chunk-of-strings": (v3_array([{"name": "vlen-utf8"}], dtype="string", shape=(2**40,), chunks=(2**40,)), "chunk_grid"),
    "shard-index-2**40-entries": (v3_array(sharded([1]), shape=(2**40,), chunks=(2**40,)), "shard index"),
    "shard-index-2**20x2**20-entries": (v3_array(sharded([1, 1]), shape=(2**20, 2**20), chunks=(2**20, 2**20)), "shard index"),
    "inner-chunk-2**40": (v3_array(sharded([2**40]), shape=(2**41,), chunks=(2**41,)), "inner chunk"),
    "transposed-shard": (v3_array([{"name": "transpose", "configuration": {"order": [0]}}, *sharded([1])], shape=(2**36,), chunks=(2**36,)), "chunk"),
}  # fmt: skip


def test_lengths_past_int64_are_refused_before_allocating():
    """A chunk of 2**80 elements is refused sooner still: no int64 index reaches past 2**63 - 1."""
    document = v3_array([{"name": "bytes"}], dtype="int8", shape=(2**80,), chunks=(2**80,))
    refused_before_allocating(lambda: zarrx.open_array(MemoryStore({"zarr.json": document})), MetadataError, "shape", "int64")


@pytest.mark.parametrize("case", HUGE_METADATA)
def test_metadata_asking_for_absurd_memory_is_refused_before_allocating(case):
    document, fragment = HUGE_METADATA[case]
    store = MemoryStore({"zarr.json": document, "c/0": b"\0" * 64})
    refused_before_allocating(lambda: zarrx.open_array(store, mode="r+"), MetadataError, fragment, "ZARRX_MAX_CHUNK_BYTES")


@pytest.mark.parametrize(
    "keywords",
    [
        {"shape": (2**40, 2**40), "chunks": (2**40, 2**40)},
        {"shape": (2**40,), "chunks": (1,), "shards": (2**40,)},
        {"shape": (2**36,), "chunks": (2**36,), "shards": (2**36,)},
        {"shape": (2**33,), "chunks": (2**33,), "dtype": "string"},
    ],
    ids=["chunks", "shard-index", "inner-chunks", "strings"],
)
def test_creating_arrays_with_absurd_chunks_is_refused_before_allocating(keywords):
    keywords = {"dtype": "int32", **keywords}
    refused_before_allocating(lambda: zarrx.create_array({}, **keywords), MetadataError, "in memory")


def test_the_chunk_size_limit_is_configurable(monkeypatch):
    monkeypatch.setenv("ZARRX_MAX_CHUNK_BYTES", str(64 * KiB))
    with pytest.raises(MetadataError, match="over zarrx's limit of 65536 bytes"):
        zarrx.create_array({}, shape=(100, 100), chunks=(100, 100), dtype="int64")
    zarrx.create_array({}, shape=(100, 100), chunks=(100, 100), dtype="int16")  # 20,000 bytes
    sharded_array = zarrx.create_array({}, shape=(1000, 1000), chunks=(50, 50), shards=(1000, 1000), dtype="int16")
    sharded_array[...] = 1  # shards read in parts are bounded by their inner chunks and index only
    assert sharded_array[999, 999] == 1


def test_reading_a_little_of_a_huge_array_allocates_little():
    bytes_codec = [{"name": "bytes", "configuration": {"endian": "little"}}]
    store = MemoryStore({"zarr.json": v3_array(bytes_codec, shape=(2**62, 2**62), chunks=(2**10, 2**10))})
    arr = zarrx.open_array(store, mode="r+")
    tracemalloc.start()
    try:
        assert arr[2**62 - 1, 2**62 - 3] == 0 and arr[5:9, 2**61 : 2**61 + 3].shape == (4, 3)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * MiB


def test_reading_all_of_a_huge_array_is_refused_with_a_zarrx_error():
    # chunks of 2**20: larger ones are refused when the metadata is parsed (check_chunk_size);
    # int32 needs the bytes codec's endian, or the metadata is refused before the read
    codecs = [{"name": "bytes", "configuration": {"endian": "little"}}]
    store = MemoryStore({"zarr.json": v3_array(codecs, shape=(2**62,), chunks=(2**20,))})
    refused_before_allocating(lambda: zarrx.open_array(store)[...], ZarrxError, "2**62")


HUGE_READ = textwrap.dedent(
    """
    import json, resource, sys
    import zarrx
    from zarrx.errors import ZarrxError
    from zarrx.storage import MemoryStore
    document = json.loads(sys.argv[1])
    arr = zarrx.open_array(MemoryStore({"zarr.json": json.dumps(document).encode()}))
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as statm:
        current = int(statm.read().split()[0]) * 4096
    resource.setrlimit(resource.RLIMIT_AS, (current + 256 * 2**20, hard))
    try:
        arr[...]
    except ZarrxError as error:
        print("zarrx error:", error)
        sys.exit(0)
    except MemoryError:
        print("MemoryError")
    sys.exit(1)
    """
)


HUGE_GRAPH = textwrap.dedent(
    """
    import json, resource, sys
    import zarrx
    from zarrx.errors import GraphTooLargeError
    shape, chunks, limit = json.loads(sys.argv[1]), json.loads(sys.argv[2]), int(sys.argv[3])
    arr = zarrx.create_array({}, shape=tuple(shape), chunks=tuple(chunks), dtype="int8")
    if limit:  # a small machine: the estimate follows the address-space limit
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        with open("/proc/self/statm") as statm:
            current = int(statm.read().split()[0]) * 4096
        resource.setrlimit(resource.RLIMIT_AS, (current + limit, hard))
    try:
        arr.to_dask()
    except GraphTooLargeError as error:
        print(str(error))
        sys.exit(0)
    except MemoryError:
        print("bare MemoryError")
    sys.exit(1)
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc and RLIMIT_AS")
@pytest.mark.parametrize(
    "shape, chunks, limit, count",
    [([10**12], [1], 0, "1000000000000"), ([10**9] * 3, [1] * 3, 0, str(10**27)), ([2 * 10**7], [1], 512 * MiB, "20000000")],
    ids=["10**12-chunks", "10**27-chunks", "2*10**7-chunks-in-512-MiB"],
)
def test_a_dask_graph_that_cannot_be_built_is_a_zarrx_error_naming_the_array_and_the_count(shape, chunks, limit, count):
    """``to_dask()`` of 10**12 chunks: a GraphTooLargeError naming the array and the count and
    suggesting chunks=, at once -- not a MemoryError after minutes of swapping (issue 22)."""
    child = subprocess.run(
        [sys.executable, "-c", HUGE_GRAPH, json.dumps(shape), json.dumps(chunks), str(limit)],
        capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[1],
    )  # fmt: skip
    assert child.returncode == 0, child.stdout + child.stderr[-1000:]
    for fragment in ("array '/'", f"has {count}", "chunks=(", "cannot be built"):
        assert fragment in child.stdout, child.stdout


def test_the_suggested_chunks_build_a_graph():
    array = zarrx.create_array({}, shape=(10**12,), chunks=(1000,), dtype="int8")
    with pytest.raises(GraphTooLargeError) as refused:
        array.to_dask()
    suggested = eval(str(refused.value).split("e.g. chunks=")[1].split(" --")[0])  # a tuple of ints
    dask_array = array.to_dask(chunks=suggested)
    assert dask_array.shape == (10**12,) and len(dask_array.chunks[0]) <= 10**5
    assert int(dask_array[:3].sum().compute()) == 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc and RLIMIT_AS")
def test_reading_all_of_an_array_of_countless_chunks_is_refused_with_a_zarrx_error():
    document = json.loads(v3_array([{"name": "bytes", "configuration": {"endian": "little"}}], shape=(2**62,), chunks=(4,)))
    child = subprocess.run(
        [sys.executable, "-c", HUGE_READ, json.dumps(document)],
        capture_output=True, text=True, timeout=60, cwd=Path(__file__).resolve().parents[1],
    )  # fmt: skip
    assert child.returncode == 0, child.stdout + child.stderr[-1000:]


def test_v2_metadata_asking_for_absurd_memory_is_refused_before_allocating():
    document = {"zarr_format": 2, "shape": [2**40, 2**40], "chunks": [2**40, 2**40], "dtype": "<i4",
                "fill_value": 0, "order": "C", "filters": None, "compressor": None}  # fmt: skip
    store = MemoryStore({".zarray": json.dumps(document).encode()})
    refused_before_allocating(lambda: zarrx.open_array(store, mode="r+"), MetadataError, "chunk")


# -- credentials stay secret -----------------------------------------------------------------------
KEY, SECRET, PASSWORD = "AKIAZARRXTESTKEY0001", "zarrx/test+secret=value", "p4ssw0rd-zarrx"


class CredentialFileSystem(MemoryFileSystem):
    """An in-memory "object store" that needs credentials and, like many back ends, echoes them.

    Its error messages repeat the key, the secret and the URL with its password, as botocore
    or aiohttp messages can; zarrx must keep them out of what it shows.
    """

    protocol = "zarrxtest-s3"
    root_marker = ""

    def __init__(self, key: str | None = None, secret: str | None = None, **kwargs: Any) -> None:
        if not (key or "").startswith("AKIA"):
            raise ValueError(f"invalid credentials: key {key!r} with secret {secret!r}")
        super().__init__(**kwargs)
        self.key, self.secret = key, secret

    @classmethod
    def _strip_protocol(cls, path):
        # like fsspec's HTTP file system: the URL is the path, user:password included
        return path.rstrip("/")

    def unstrip_protocol(self, name: str) -> str:
        return name

    def cat_file(self, path, start=None, end=None, **kwargs):
        if "forbidden" in path:
            raise PermissionError(
                f"AccessDenied for {path} with key {self.key} and secret {self.secret} "
                f"(signed URL {path}?X-Amz-Signature=abc&X-Amz-Credential={self.key})"
            )
        return super().cat_file(path, start=start, end=end, **kwargs)


@pytest.fixture
def secret_store():
    fsspec.register_implementation(CredentialFileSystem.protocol, CredentialFileSystem, clobber=True)
    url = f"{CredentialFileSystem.protocol}://user:{PASSWORD}@bucket-{uuid.uuid4().hex}/data.zarr"
    return url, {"key": KEY, "secret": SECRET}


def secrets_in(text: str) -> list[str]:
    return [secret for secret in (KEY, SECRET, PASSWORD) if secret in text]


def shown(error: BaseException) -> str:
    """An error as a traceback shows it, with every cause and context."""
    return "".join(traceback.format_exception(error))


def test_credentials_never_appear_in_reprs_errors_or_logs(secret_store, caplog):
    url, options = secret_store
    caplog.set_level(logging.DEBUG)
    texts: list[str] = []
    root = zarrx.create_group(url, storage_options=options)
    arr = root.create_array("a", shape=(4, 4), chunks=(2, 2), dtype="int32")
    arr[...] = 1
    texts += [repr(arr.store), repr(arr), repr(root), str(arr.info), str(arr.info_complete()), root.tree()]
    texts += [repr(zarrx.from_zarr(url, "a", storage_options=options)), str(verify(url, storage_options=options))]
    arr.store.set("forbidden/zarr.json", b"{}")  # a key the back end refuses to read, echoing credentials
    texts.append(str(verify(url, storage_options=options)))
    failures = [
        lambda: zarrx.open_array(url, "missing", storage_options=options),
        lambda: zarrx.open_group(url, "forbidden", storage_options=options),
        lambda: zarrx.open_array(url, "a", storage_options=options, mode="r").__setitem__(0, 2),
        lambda: zarrx.create_array(url, "a", shape=(1,), storage_options=options),
        lambda: zarrx.open(url, storage_options={**options, "key": "BAD-" + KEY}),
    ]
    for failure in failures:
        with pytest.raises(ZarrxError) as caught:
            failure()
        texts.append(shown(caught.value))
        add(__name__, "errors checked for credentials", 1)
    leaks = {text[:300]: secrets_in(text) for text in texts if secrets_in(text)}
    assert leaks == {}
    # logs: zarrx logs nothing of its own; what the back end logs holds no storage option. (fsspec
    # back ends log paths at DEBUG level, so a password written into a URL can reach their logs;
    # docs/reliability.md says to pass credentials as storage options.)
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert logged and KEY not in logged and SECRET not in logged
    assert not [record for record in caplog.records if record.name.startswith("zarrx")]


def test_a_password_in_a_memory_url_is_not_shown():
    url = f"memory://user:{PASSWORD}@bucket-{uuid.uuid4().hex}/data.zarr"
    store = zarrx.storage.make_store(url, mode="w")
    assert PASSWORD not in repr(store)
    with pytest.raises(NodeNotFoundError) as caught:
        zarrx.open_array(store, "x")
    assert PASSWORD not in shown(caught.value)
