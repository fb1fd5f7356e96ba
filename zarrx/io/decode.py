"""Decoding stored chunks into a read's output: the one decode loop of reads, shards and verify.

:class:`ChunkDecoder` decodes one chunk (or inner chunk) per call into the output array:
straight into it where the chunk is a contiguous piece of it (no copy at all), else through a
scratch buffer each thread keeps (no fresh memory per chunk); a missing chunk fills its piece with
the fill value. Chunks large enough go to the thread pool (:mod:`zarrx.io.concurrency`): codecs
release the GIL, so decoding runs on every core. :func:`decode_stored` decodes a stored object
only to check it (``zarrx verify``): a shard one inner chunk at a time.
"""

from __future__ import annotations

import math
import threading
from typing import Any, Callable, Iterable, NamedTuple, Sequence, TypeVar

import numpy as np

from zarrx.codecs.base import ChunkSpec
from zarrx.codecs.bytes import BytesCodec
from zarrx.codecs.pipeline import CodecPipeline, decode_failure
from zarrx.errors import ChunkDecodeError
from zarrx.concurrency import call_io_depth, map_concurrent, map_io, map_runs, scratch_array, scratch_bytes
from zarrx.scratch import MIN_BYTE_ROWS, copy_values, many_rows
from zarrx.io.handle import ArrayHandle
from zarrx.io.plan import ChunkRow
from zarrx.io.selection import ChunkProjection
from zarrx.io.spans import SpanPiece
from zarrx.storage.local import IO_RANGE_BYTES
from zarrx.storage.store import RangeReader

__all__ = [
    "ChunkDecoder", "Item", "StoredRange", "MIN_THREADED_CHUNK_BYTES", "caller_can_work", "worth_threads", "decode_stored",
]  # fmt: skip

T = TypeVar("T")
#: a chunk to put in place: its bytes (None: the fill value; a :class:`StoredRange`: still in its
#: open shard; a :class:`~zarrx.io.spans.SpanPiece`: in a part of its shard read ahead), key,
#: where it goes, what part of it goes there (None: all of it, the output piece's own shape) and
#: its coordinates
Item = tuple[Any, str, tuple[Any, ...], "tuple[Any, ...] | None", tuple[int, ...]]


class StoredRange(NamedTuple):
    """An inner chunk still in its open shard: bytes ``[start, end)`` of ``value``, read by the
    thread that decodes it (:meth:`ChunkDecoder.put_many`)."""

    value: RangeReader
    start: int
    end: int


def _read_stored(stored: StoredRange, key: str, coords: tuple[int, ...], inner: bool,
                 into: memoryview | None = None) -> memoryview:  # fmt: skip
    """The bytes of ``stored``, read into ``into`` or else this thread's scratch bytes (valid until
    its next read)."""
    value, start, end = stored
    view = scratch_bytes(end - start) if into is None else into
    found = value.readinto(start, view)
    if found != end - start and inner:  # the index was checked against the file's size when it was opened
        raise ChunkDecodeError(
            f"chunk {key!r} inner chunk {coords}: the shard ended at byte {start + found} while reading bytes "
            f"[{start}, {end}) its index gives (it was cut short in place while being read)"
        )
    if found != end - start:  # a whole chunk's file, of the size it had when it was opened
        raise ChunkDecodeError(
            f"chunk {key!r}: the file ended at byte {start + found} while reading its bytes [{start}, {end}) "
            "(it was cut short in place while being read)"
        )
    return view


def _read_in_ranges(stored: StoredRange, key: str, coords: tuple[int, ...], inner: bool, target: np.ndarray) -> None:
    """A whole chunk stored as its values are in memory, into ``target``, its strided piece of the
    output: read in ranges of about :data:`~zarrx.storage.local.IO_RANGE_BYTES` that are blocks of
    the chunk (whole slices along one dimension), up to :func:`~zarrx.concurrency.call_io_depth`
    in flight on the I/O pool, each put in place by the thread that read it. The copies overlap
    the reads still in flight, and no thread holds the whole chunk: 1 GiB in 32 MiB chunks read
    cold in 0.78-0.81 s instead of 0.97-0.99 s, where each chunk was read whole, then copied."""
    shape, dtype = target.shape, target.dtype
    axis = next(axis for axis in range(len(shape)) if math.prod(shape[axis + 1 :]) * dtype.itemsize <= IO_RANGE_BYTES)
    block = math.prod(shape[axis + 1 :]) * dtype.itemsize  # the bytes of one slice along ``axis``
    step = max(1, IO_RANGE_BYTES // block)
    ranges = [(lead, first) for lead in np.ndindex(*shape[:axis]) for first in range(0, shape[axis], step)]

    def read_range(where: tuple[tuple[int, ...], int]) -> None:
        lead, first = where
        last = min(shape[axis], first + step)
        offset = stored.start + int(np.ravel_multi_index((*lead, first), shape[: axis + 1])) * block
        view = _read_stored(StoredRange(stored.value, offset, offset + (last - first) * block), key, coords, inner)
        values = np.frombuffer(view, dtype).reshape(last - first, *shape[axis + 1 :])
        copy_values(target[(*lead, slice(first, last))], values)

    map_io(read_range, ranges)


def stored_as_in_memory(pipeline: CodecPipeline, spec: ChunkSpec) -> bool:
    """Whether a stored chunk of ``spec`` is its values' bytes as they are in memory (no codec but
    ``bytes`` in native order): its file can be read straight into the output."""
    return (not pipeline.array_array and not pipeline.bytes_bytes and type(pipeline.array_bytes) is BytesCodec
            and spec.nbytes is not None and not spec.dtype.hasobject
            and pipeline.array_bytes.stores_memory_layout(spec))  # fmt: skip


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
        #: whole chunks :meth:`put_many` decodes side by side before putting them in place together
        self.per_run = chunks_per_run(spec)
        #: the pipeline decodes many chunks in one call (:meth:`put_decoded`); not per-chunk specs
        self.decodes_many = spec_of is None and spec.nbytes is not None and pipeline.decodes_many(spec)
        self.direct_out = (
            self.decodes_into and out.flags.c_contiguous and out.flags.writeable and out.dtype == spec.dtype
            and (spec_of is not None or _contiguous_piece(spec.shape, out.shape))
        )  # fmt: skip
        #: whole chunks are read from their files straight into ``out`` (stored as in memory)
        self.read_into_out = (
            spec_of is None and out.flags.c_contiguous and out.flags.writeable and out.dtype == spec.dtype
            and _contiguous_piece(spec.shape, out.shape) and stored_as_in_memory(pipeline, spec)
        )  # fmt: skip
        #: whole chunks this large, stored as in memory, go into a strided piece of ``out`` in
        #: ranges, each put in place by the I/O thread that read it (:func:`_read_in_ranges`)
        self.read_in_ranges = (
            spec_of is None and spec.nbytes is not None and spec.nbytes >= 2 * IO_RANGE_BYTES and out.dtype == spec.dtype
            and stored_as_in_memory(pipeline, spec)
        )  # fmt: skip

    def run(self, function: Callable[[T], None], items: Sequence[T]) -> None:
        run_maybe_threaded(function, items, self.threaded, self.pipeline)

    def place(self, projection: ChunkProjection, key: str, raw: Any) -> None:
        """Decode ``raw`` (None: absent, the fill value) into ``out`` at ``projection``."""
        self.put(*self.item(raw, projection, key))

    def _spec_at(self, coords: tuple[int, ...]) -> ChunkSpec:
        return self.spec if self.spec_of is None else self.spec_of(coords)

    def _fills_exactly(self, out_selection: tuple[Any, ...], spec: ChunkSpec) -> bool:
        """Whether a complete chunk's piece of ``out`` has the chunk's own shape (not cut by an edge)."""
        return 0 < len(out_selection) == len(spec.shape) and all(
            isinstance(item, slice) and item.stop - item.start == length for item, length in zip(out_selection, spec.shape)
        )

    def put(self, raw: Any, key: str, out_selection: tuple[Any, ...], chunk_selection: tuple[Any, ...] | None,
            coords: tuple[int, ...]) -> None:
        """Decode ``raw`` (None: the fill value), the chunk at ``coords``, and put
        ``chunk[chunk_selection]`` at ``out[out_selection]``; ``chunk_selection`` None: the whole
        chunk, which then decodes straight into ``out`` where that piece of it is contiguous."""
        out = self.out
        if raw is None:
            out[out_selection] = self.fill_value
            return
        spec = self._spec_at(coords)
        target = None
        if chunk_selection is None and self.direct_out:
            target = out[(*out_selection, Ellipsis)]  # a view even for 0-d output
            if not target.flags.c_contiguous:
                target = None
        buffer = target if target is not None else scratch_array(spec.shape, spec.dtype) if self.decodes_into else None
        try:
            chunk = self.pipeline.decode(raw, spec, key, out=buffer)
        except ChunkDecodeError:
            if not self.inner:
                raise
            # decode again for an error naming the inner chunk (the name is built only on failure)
            self.pipeline.decode(raw, spec, f"{key} inner chunk {coords}")
            raise
        if chunk is not target:
            _put(out, out_selection, chunk if chunk_selection is None else chunk[chunk_selection])

    def put_rows(self, rows: Iterable[ChunkRow], read: Callable[[str], Any]) -> None:
        """Read each row's chunk with ``read``, decode it and put it in place (see :meth:`put_many`)."""
        self.put_many((read(key), key, out_selection, chunk_selection, coords)
                      for key, coords, out_selection, chunk_selection in rows)  # fmt: skip

    def put_decoded(self, rows: Sequence[ChunkRow], raws: Sequence[Any]) -> None:
        """Put the chunks of ``rows`` (their stored bytes ``raws``, None: absent) in place, decoded
        in one :meth:`~zarrx.codecs.pipeline.CodecPipeline.decode_many` call (the pipeline decodes many).

        Whole chunks side by side along the output's last dimension (consecutive rows of one row
        of chunks) go in place with one NumPy copy for all of them (:func:`_put_side_by_side`);
        a part of a chunk goes alone.
        """
        spec, out = self.spec, self.out
        present = range(len(raws)) if None not in raws else [position for position, raw in enumerate(raws) if raw is not None]
        if present:
            frames = raws if len(present) == len(raws) else [raws[p] for p in present]
            decoded = self.pipeline.decode_many(frames, spec, [rows[p][0] for p in present])
            chunks = np.frombuffer(b"".join(decoded), dtype=spec.dtype).reshape(len(present), *spec.shape)
            first = end = stop = 0  # the run of whole chunks chunks[first:end], up to ``stop`` in the last dimension
            lead: tuple[Any, ...] | None = None
            for index, position in enumerate(present):
                _, _, out_selection, chunk_selection = rows[position]
                if chunk_selection is not None:
                    _put(out, out_selection, chunks[index][chunk_selection])
                    continue
                last = out_selection[-1]
                if index == end and last.start == stop and out_selection[:-1] == lead:
                    end, stop = end + 1, last.stop
                    continue
                _put_side_by_side(out, chunks[first:end], lead, stop)
                first, end, stop, lead = index, index + 1, last.stop, out_selection[:-1]
            _put_side_by_side(out, chunks[first:end], lead, stop)
        if len(present) < len(rows):
            for row, raw in zip(rows, raws):
                if raw is None:
                    out[row[2]] = self.fill_value

    def item(self, raw: Any, projection: ChunkProjection, key: str) -> Item:
        """What :meth:`put_many` takes for ``raw`` at ``projection`` (as :meth:`place` puts it)."""
        coords = projection.chunk_coords
        whole = projection.is_complete_chunk and self._fills_exactly(projection.out_selection, self._spec_at(coords))
        return raw, key, projection.out_selection, None if whole else projection.chunk_selection, coords

    def put_many(self, items: Iterable[Item]) -> None:
        """:meth:`put` each ``(raw, key, out_selection, chunk_selection, coords)`` on this thread:
        the loop of small-chunk and shard reads, with this thread's scratch buffer and the
        pipeline's one direct codec (when it has one) called without a pipeline step per chunk.
        Whole chunks side by side along the output's last dimension are decoded into a run of
        :attr:`per_run` slots of the scratch buffer and put in place by one copy: one hand-over
        of the GIL for the run instead of one per chunk (a sharded read of 1 GiB in 32**3
        inner chunks: 0.87-0.91 s instead of 0.92-0.98)."""
        spec, out, fill_value, put, inner = self.spec, self.out, self.fill_value, self.put, self.inner
        direct = None if self.spec_of is not None else self.pipeline.direct_codec(spec)
        if direct is not None:
            # whole chunks side by side along the output's last dimension are decoded into the
            # slots of a run and put in place together (:func:`_put_side_by_side`)
            per_run = self.per_run
            slots = scratch_array((per_run, *spec.shape), spec.dtype)
            slot_bytes, slot_size = slots.reshape(-1).view(np.uint8), slots.nbytes // per_run
            first_slot = slot_bytes[:slot_size]
        read_into_out, read_in_ranges, nbytes = self.read_into_out, self.read_in_ranges, spec.nbytes
        part = view = None  # the part of a shard read ahead the last pieces were in, its bytes
        taken = 0  # pieces of it decoded here
        run = stop = 0  # chunks decoded into slots[:run], not yet in place, whose piece ends at ``stop``
        lead: tuple[Any, ...] = ()  # and is out[(*lead, slice(..., stop))]
        for raw, key, out_selection, chunk_selection, coords in items:
            if type(raw) is SpanPiece:
                if raw.part is not part:
                    if part is not None:
                        part.reads.done(part, taken)
                    part, taken = raw.part, 0
                    view = part.reads.wait(part)
                taken += 1
                start, end = raw.start - part.start, raw.end - part.start
                if end > len(view):
                    raise part.reads.cut_short(raw, key, coords, len(view))
                raw = view[start:end]
            elif type(raw) is StoredRange:
                if (read_into_out or read_in_ranges) and chunk_selection is None and raw.end - raw.start == nbytes:
                    target = out[(*out_selection, Ellipsis)]
                    if read_into_out and target.flags.c_contiguous:  # the chunk's bytes are its piece of the output
                        _read_stored(raw, key, coords, inner, memoryview(target.reshape(-1).view(np.uint8)))
                        continue
                    if read_in_ranges and call_io_depth() > 1:
                        _read_in_ranges(raw, key, coords, inner, target)
                        continue
                raw = _read_stored(raw, key, coords, inner)
            if raw is None:
                out[out_selection] = fill_value
            elif direct is None or (chunk_selection is None and self.direct_out):
                put(raw, key, out_selection, chunk_selection, coords)
            else:
                last = out_selection[-1] if chunk_selection is None and out_selection else None
                if run and (last is None or last.start != stop or out_selection[:-1] != lead):
                    _put_side_by_side(out, slots[:run], lead, stop)
                    run = 0
                target = slot_bytes[run * slot_size : (run + 1) * slot_size] if run else first_slot
                try:
                    decoded = direct.decode_where(raw, target)
                except Exception as error:
                    raise decode_failure(f"{key} inner chunk {coords}" if inner else key, direct, error) from error
                if decoded is target and last is not None and per_run > 1:
                    lead, stop = (out_selection[:-1], last.stop) if not run else (lead, last.stop)
                    run += 1
                    if run == per_run:  # in place while its values are in the cache
                        _put_side_by_side(out, slots[:run], lead, stop)
                        run = 0
                else:
                    chunk = slots[run, ...] if decoded is target else np.frombuffer(decoded, spec.dtype).reshape(spec.shape)
                    _put(out, out_selection, chunk if chunk_selection is None else chunk[chunk_selection])
            # let this chunk's bytes go before the next are read: holding two large values at once
            # makes the allocator hand out fresh memory each time (22k page faults reading 128
            # chunks of 2 MiB, 25% of the read's time)
            raw = decoded = chunk = None
        if run:
            _put_side_by_side(out, slots[:run], lead, stop)
        if part is not None:
            part.reads.done(part, taken)

    def run_items(self, items: list[Item], in_order: int | None = None) -> None:
        """:meth:`put_many` over ``items`` in a few runs on the pool (when worth it), else here;
        ``in_order``: in runs of that many items taken in their order (items read ahead in order)."""
        if not self.threaded:
            self.put_many(items)
        elif in_order:
            runs = [items[start : start + in_order] for start in range(0, len(items), in_order)]
            map_concurrent(self.put_many, runs, caller_works=caller_can_work(self.pipeline), in_order=True)
        else:
            map_runs(self.put_many, items, caller_works=caller_can_work(self.pipeline))


#: whole chunks :meth:`ChunkDecoder.put_many` decodes side by side before one copy puts them in
#: place, up to this many bytes of them (a copy per chunk: two hand-overs of the GIL a chunk)
RUN_BYTES = 2**20
#: and up to this many
MAX_RUN = 16


def chunks_per_run(spec: ChunkSpec) -> int:
    """How many chunks of ``spec`` a run of :meth:`ChunkDecoder.put_many` takes (1: no runs)."""
    return max(1, min(MAX_RUN, RUN_BYTES // max(1, spec.nbytes or RUN_BYTES)))


def _put(out: np.ndarray, out_selection: tuple[Any, ...], values: Any) -> None:
    """``out[out_selection] = values``: by :func:`~zarrx.scratch.copy_values` where the selection
    picks a view of ``out`` (slices and ints), the rows of a chunk copied as bytes."""
    if (type(values) is np.ndarray and values.size >= MIN_BYTE_ROWS and many_rows(values)
            and all(type(part) in (slice, int) for part in out_selection)):  # fmt: skip
        copy_values(out[(*out_selection, Ellipsis)], values)  # (a view even when all are ints)
    else:
        out[out_selection] = values


def _put_side_by_side(out: np.ndarray, chunks: np.ndarray, lead: tuple[Any, ...] | None, stop: int) -> None:
    """Put ``chunks`` (count, *chunk shape), whole chunks side by side along the last dimension
    and ending at ``stop`` there, at ``out[(*lead, ...)]``, in one copy: the output's piece, its
    last dimension split into (count, chunk length), takes the chunks with their first axis moved there."""
    count = len(chunks)
    if not count:
        return
    length = chunks.shape[-1]
    target = out[(*lead, slice(stop - count * length, stop))]
    pieces = target.reshape(*target.shape[:-1], count, length)  # splitting an axis: always a view
    if not np.may_share_memory(pieces, out):  # (never expected: a copy would lose the values)
        raise RuntimeError("internal error: the output's piece could not be viewed chunk by chunk")
    rank = chunks.ndim - 1
    copy_values(pieces, chunks.transpose((*range(1, rank), 0, rank)))  # np.moveaxis(chunks, 0, -2), 20x cheaper


def _contiguous_piece(chunk_shape: tuple[int, ...], out_shape: tuple[int, ...]) -> bool:
    """Whether a piece of ``chunk_shape`` can be contiguous in a C-contiguous array of ``out_shape``:
    after its first dimension longer than 1, it spans the whole of every later one."""
    if len(chunk_shape) != len(out_shape):
        return False
    first = next((dimension for dimension, length in enumerate(chunk_shape) if length > 1), len(chunk_shape))
    return chunk_shape[first + 1 :] == out_shape[first + 1 :]


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
