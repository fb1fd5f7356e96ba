"""explain(): the plan of a read is exactly the requests the read then makes, and costs no chunk read."""

from __future__ import annotations

import numpy as np
import pytest

import zarrx
from zarrx.codecs import BytesCodec, Crc32cCodec, ShardingCodec, ZstdCodec
from zarrx.errors import UsageError
from zarrx.tools.explain import Explanation, explain
from zarrx.storage import MemoryStore, RangeByteRequest, Store, SuffixByteRequest
from tests.counting import Wrapping


class BatchRecorder(Wrapping):
    """Records every store call as one batch: a list of ``(key, byte_range)``."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.batches: list[list[tuple[str, object]]] = []

    def get(self, key, byte_range=None):
        self.batches.append([(key, byte_range)])
        return self.inner.get(key, byte_range)

    def get_many(self, keys):
        self.batches.append([(key, None) for key in keys])
        return self.inner.get_many(keys)

    def get_ranges(self, requests):
        self.batches.append(list(requests))
        return self.inner.get_ranges(requests)

    def exists(self, key):
        return self.get(key) is not None  # a read, recorded


def _planned_batches(plan: Explanation) -> list[list[tuple[str, object]]]:
    return [
        [(r.key, r.byte_range) for r in plan.batch(b)]
        for b in range(plan.nbatches)
    ]


def check_plan(array, selection, indexing="auto", expect_index_requests=None):
    """explain(array, selection) lists exactly the batches the read makes, and reads no chunk."""
    recorder = BatchRecorder(array.store)
    opened = zarrx.open_array(recorder, array.path, mode="r")
    recorder.batches.clear()
    plan = explain(opened, selection, indexing=indexing)
    explain_reads = recorder.batches[:]
    recorder.batches.clear()
    reader = {"auto": lambda s: opened[s], "basic": lambda s: opened[s], "oindex": lambda s: opened.oindex[s],
              "vindex": lambda s: opened.vindex[s]}[indexing]  # fmt: skip
    result = reader(selection)
    assert _planned_batches(plan) == recorder.batches
    assert plan.nbatches == len(recorder.batches)
    assert plan.nrequests == sum(map(len, recorder.batches))
    # explain's own reads: nothing, or one batch of shard-index ranges
    assert sum(map(len, explain_reads)) == plan.index_requests
    index_range = array.metadata.codecs.array_bytes.index_range(array.metadata.chunk_spec) if array.shards else None
    assert all(byte_range == index_range for batch in explain_reads for _, byte_range in batch)
    assert len(explain_reads) <= 1
    if expect_index_requests is not None:
        assert plan.index_requests == expect_index_requests
    assert plan.shape == np.shape(result) or plan.shape == np.asarray(result).shape
    return plan


@pytest.fixture
def plain():
    array = zarrx.create_array(MemoryStore(), "data/x", shape=(40, 30), chunks=(8, 7), dtype="i4")
    array[:] = np.arange(1200).reshape(40, 30)
    array[32:, :] = 0  # all fill value: those chunks are not stored (still requested)
    return array


@pytest.mark.parametrize(
    "selection, indexing",
    [
        (Ellipsis, "auto"),
        (np.s_[3:17, 5:9], "auto"),
        (np.s_[::7, 29], "auto"),
        (np.s_[35, 2], "auto"),
        (np.s_[30:40, :], "auto"),
        (([1, 30, 2], [0, 29]), "oindex"),
        (np.s_[[39, 0, 9]], "auto"),
        ((np.array([0, 39, 8]), np.array([1, 29, 7])), "vindex"),
    ],
)
def test_plan_of_unsharded_reads_is_the_read(plain, selection, indexing):
    plan = check_plan(plain, selection, indexing, expect_index_requests=0)
    assert all(r.kind == "chunk" and r.byte_range is None for r in plan.requests)
    assert plan.exact


def test_plan_names_the_keys_and_counts():
    array = zarrx.create_array({}, shape=(100, 100), chunks=(10, 10), dtype="i2")
    plan = explain(array, np.s_[5:25, 0:10])
    assert plan.keys == ("c/0/0", "c/1/0", "c/2/0")
    # a store whose reads are local is read chunk by chunk (the small-chunk loop): a get each
    assert (plan.nrequests, plan.nbatches, plan.nchunks, plan.index_requests) == (3, 3, 3, 0)
    assert plan.nbytes is None  # whole objects: their size is not known without asking
    assert [r.chunks for r in plan.requests] == [((0, 0),), ((1, 0),), ((2, 0),)]
    text = str(plan)
    assert "3 request(s) in 3 batch(es)" in text and "c/2/0" in text


def test_large_reads_are_planned_in_the_same_batches():
    # 16 MiB out of 1 MiB chunks: the read goes in batches of 8 MiB (zarrx.io.plan.batch_limit)
    array = zarrx.create_array(MemoryStore(), shape=(2048, 1024), chunks=(128, 1024), dtype="f8", compressors=None)
    array[:256] = 1.0
    plan = check_plan(array, Ellipsis)
    assert plan.nbatches == 2 and plan.nrequests == 16


@pytest.fixture(params=["end", "start"])
def sharded(request):
    codec = ShardingCodec(
        chunk_shape=(4, 4),
        codecs=[BytesCodec(), ZstdCodec(level=1)],
        index_codecs=[BytesCodec(), Crc32cCodec()],
        index_location=request.param,
    )
    array = zarrx.create_array(
        MemoryStore(), "s", shape=(64, 64), chunks=(16, 32), serializer=codec, compressors=None, dtype="i4"
    )
    assert array.shards == (16, 32)
    data = np.arange(64 * 64, dtype="i4").reshape(64, 64)
    data[0:4, 8:12] = 0  # an empty inner chunk inside shard (0, 0)
    array[:] = data
    array[48:, 32:] = 0  # shard (3, 1) absent
    return array


@pytest.mark.parametrize(
    "selection",
    [
        np.s_[1:7, 2:13],  # one shard, part: index + merged neighbours
        np.s_[0:4, 0:16],  # crosses the empty inner chunk
        np.s_[0:16, 0:32],  # exactly one whole shard
        np.s_[0:20, 30:34],  # four shards, parts
        np.s_[50:60, 40:50],  # an absent shard: its index is asked for, nothing more
        np.s_[::5, ::9],
        Ellipsis,
    ],
)
def test_plan_of_sharded_reads_is_the_read(sharded, selection):
    plan = check_plan(sharded, selection)
    kinds = {r.kind for r in plan.requests}
    assert kinds <= {"shard", "shard index", "inner chunks"}
    partial_shards = {r.key for r in plan.requests if r.kind == "shard index"}
    assert plan.index_requests == len(partial_shards)


def test_small_sharded_read_is_index_then_merged_ranges(sharded):
    plan = explain(sharded, np.s_[1:7, 2:13])
    # the second batch reads the index again beside the inner chunks (a check the shard did not change)
    assert [r.kind for r in plan.requests] == ["shard index", "shard index", "inner chunks"]
    index = plan.batch(0)[0]
    assert index.byte_range in (SuffixByteRequest(index.nbytes), RangeByteRequest(0, index.nbytes))
    assert plan.batch(1)[0].byte_range == index.byte_range
    merged = plan.batch(1)[1]
    assert isinstance(merged.byte_range, RangeByteRequest)
    # 2 x 4 inner chunks, one of them empty (no bytes, no request): 7 in one merged range
    assert len(merged.chunks) == 7 and (0, 2) not in merged.chunks
    assert plan.nbytes is not None


def test_read_index_false_reads_nothing(sharded):
    recorder = BatchRecorder(sharded.store)
    opened = zarrx.open_array(recorder, "s")
    recorder.batches.clear()
    plan = explain(opened, np.s_[1:7, 2:13], read_index=False)
    assert recorder.batches == []
    assert not plan.exact and plan.index_requests == 0
    assert [r.kind for r in plan.requests] == ["shard index"]
    assert "not planned" in str(plan)


def test_vindex_on_sharded(sharded):
    check_plan(sharded, (np.array([0, 63, 17]), np.array([5, 60, 33])), indexing="vindex")


def test_unknown_indexing_is_refused(plain):
    with pytest.raises(UsageError, match="indexing"):
        explain(plain, Ellipsis, indexing="fancy")
