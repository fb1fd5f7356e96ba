"""Decoding stored chunks into a read's output: the one decode loop of reads, shards and verify.

:class:`ChunkDecoder` decodes one chunk (or inner chunk) per call into the output array:
straight into it where the chunk is a contiguous piece of it (no copy at all), else through a
scratch buffer each thread keeps (no fresh memory per chunk); a missing chunk fills its piece with
the fill value. Chunks large enough go to the thread pool (:mod:`zarrx.io.concurrency`): codecs
release the GIL, so decoding runs on every core. :func:`decode_stored` decodes a stored object
only to check it (``zarrx verify``): a shard one inner chunk at a time.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Sequence, TypeVar

import numpy as np

from zarrx.codecs.base import ChunkSpec
from zarrx.codecs.pipeline import CodecPipeline
from zarrx.errors import ChunkDecodeError
from zarrx.concurrency import map_concurrent, scratch_array
from zarrx.io.handle import ArrayHandle
from zarrx.io.selection import ChunkProjection

__all__ = ["ChunkDecoder", "MIN_THREADED_CHUNK_BYTES", "caller_can_work", "worth_threads", "decode_stored"]

T = TypeVar("T")

#: chunks smaller than this decode faster on one thread: per-chunk Python work holds
#: the GIL longer than the codec releases it (measured: 2.5 KiB float32 zstd chunks,
#: 0.60 s on one thread vs 0.98 s on two for 6,400 chunks)
MIN_THREADED_CHUNK_BYTES = 64 * 1024


def worth_threads(spec: ChunkSpec) -> bool:
    """Whether chunks of ``spec`` are big enough to decode on the pool (see MIN_THREADED_CHUNK_BYTES)."""
    nbytes = spec.nbytes
    return nbytes is None or nbytes >= MIN_THREADED_CHUNK_BYTES


def caller_can_work(pipeline: CodecPipeline) -> bool:
    """Whether the calling thread may decode beside the pool (see map_concurrent's caller_works):
    not the main thread when a codec would start threads of its own there."""
    return not (pipeline.threads_on_main_thread and threading.current_thread() is threading.main_thread())


def run_maybe_threaded(function: Callable[[T], Any], items: Sequence[T], threaded: bool, pipeline: CodecPipeline) -> list[Any]:
    """``[function(item) for item in items]``, on the pool when ``threaded``."""
    if threaded:
        return map_concurrent(function, items, caller_works=caller_can_work(pipeline))
    return [function(item) for item in items]


class ChunkDecoder:
    """Decodes chunks of ``spec`` with ``pipeline`` into ``out`` at their projections.

    ``inner_of`` names the stored object the chunks are inner chunks of (sharding): a decode
    error then names the inner chunk too.
    """

    def __init__(self, pipeline: CodecPipeline, spec: ChunkSpec, out: np.ndarray, fill_value: Any, *, inner: bool,
                 spec_of: Callable[[tuple[int, ...]], ChunkSpec] | None = None) -> None:
        self.pipeline, self.spec, self.out = pipeline, spec, out
        #: the spec of each chunk where chunks differ in shape (a rectilinear grid), by coordinates
        self.spec_of = spec_of
        self.fill_value = fill_value
        self.inner = inner
        self.threaded = worth_threads(spec)
        self.decodes_into = pipeline.decodes_into(spec)
        self.direct_out = (
            self.decodes_into and out.flags.c_contiguous and out.flags.writeable and out.dtype == spec.dtype
        )

    def run(self, function: Callable[[T], None], items: Sequence[T]) -> None:
        run_maybe_threaded(function, items, self.threaded, self.pipeline)

    def place(self, projection: ChunkProjection, key: str, raw: Any) -> None:
        """Decode ``raw`` (None: absent, the fill value) into ``out`` at ``projection``."""
        out = self.out
        spec = self.spec if self.spec_of is None else self.spec_of(projection.chunk_coords)
        if raw is None:
            out[projection.out_selection] = self.fill_value
            return
        target = None
        if self.direct_out and projection.is_complete_chunk:
            # whole chunk into a slice-only piece of out (is_complete_chunk rules out index arrays)
            target = out[(*projection.out_selection, Ellipsis)]  # a view even for 0-d output
            if target.shape != spec.shape or not target.flags.c_contiguous:
                target = None
        buffer = target if target is not None else scratch_array(spec.shape, spec.dtype) if self.decodes_into else None
        try:
            chunk = self.pipeline.decode(raw, spec, key, out=buffer)
        except ChunkDecodeError:
            if not self.inner:
                raise
            # decode again for an error naming the inner chunk (the name is built only on failure)
            self.pipeline.decode(raw, spec, f"{key} inner chunk {projection.chunk_coords}")
            raise
        if chunk is not target:
            out[projection.out_selection] = chunk[projection.chunk_selection]

    def place_job(self, job: tuple[Any, ChunkProjection, str]) -> None:
        raw, projection, key = job
        self.place(projection, key, raw)


def decode_stored(handle: ArrayHandle, key: str, raw: Any, coords: tuple[int, ...] | None = None) -> None:
    """Decode a stored object (at grid ``coords``, needed on a rectilinear grid) only to check it;
    raises ChunkDecodeError naming what is wrong.

    A shard read in parts is checked the way reads take it: its index (every entry inside the
    shard), then each inner chunk, one at a time, so memory stays one inner chunk.
    """
    codec = handle.sharding
    spec = handle.spec if coords is None else handle.object_spec(coords)
    if codec is None:
        handle.pipeline.decode(raw, spec, key=key)
        return
    index = codec.read_index(raw, spec, key, whole=True)
    view = memoryview(raw)
    for inner, start, end in index.stored():
        codec.codecs.decode(view[start:end], handle.inner_spec, key=f"{key} inner chunk {inner}")
