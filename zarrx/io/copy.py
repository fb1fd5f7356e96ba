"""Streaming copies: an array-like source written into an array step by step, with bounded memory.

``dst[...] = src`` with ``src`` a lazy array -- a zarrx or zarr-python ``Array``, a dask array,
anything with ``shape``, ``dtype`` and ``__getitem__`` -- is written by :func:`copy_into`
without materialising ``src``: the destination region is cut into **steps** of whole stored
objects of the destination (:func:`zarrx.io.plan.object_steps`: one shard of a sharded array,
a few chunks otherwise), and for each step the source's part is read (``src[box]``), then the
step is encoded and written as a whole (:func:`zarrx.io.write.write_from`: whole objects are
never read back; a shard's inner chunks are encoded on the thread pool and the shard is
written once).

Reading and writing overlap: a reader thread reads the next step while the caller encodes and
writes the current one, at most :data:`QUEUE_STEPS` ahead. So a copy holds at most the step
being written and the one read ahead (and the written step's encoded objects) -- a few
objects, never the array. A zarrx source is read by the executor into the buffers of steps
already written, so a long copy touches no fresh memory per step. Inside a dask task given one
thread (:func:`zarrx.concurrency.task_threads`) the steps run one after the other on that thread.

When the destination stores exactly the source's units (a zarrx source of one layout with it:
its chunks or inner chunks at the same places, a codec on both sides), a step skips the block:
each unit is decoded and encoded again on its own (:mod:`zarrx.io.transcode`).

``dst[...] = src[...]`` stays what Python makes it: ``src[...]`` is read whole into memory
before the assignment sees it; write ``dst[...] = src`` for the bounded form.

A failed read or write stops the copy and raises that error; the objects written until then
stay written (as after any failed write).
"""

from __future__ import annotations

import math
import queue
import threading
from typing import Any, Iterator

import numpy as np

from zarrx.concurrency import call_threads
from zarrx.errors import SelectionError
from zarrx.io.execute import as_array_of, read_into
from zarrx.io.handle import ArrayHandle
from zarrx.io.plan import decoded_nbytes, object_steps
from zarrx.io.selection import BasicIndexer
from zarrx.io.transcode import transcode_step, transcodes
from zarrx.io.write import write_from

__all__ = ["copy_into", "is_lazy_array", "copy_region", "QUEUE_STEPS", "MIN_STEP_BYTES"]

#: steps read ahead of the one being written
QUEUE_STEPS = 1
#: a step holds at least this many decoded bytes (small objects are grouped; a larger object is
#: a step of its own)
MIN_STEP_BYTES = 256 << 10


def is_lazy_array(value: Any) -> bool:
    """Whether ``value`` is an array to be read part by part rather than whole: not a NumPy array,
    but something with ``shape``, ``dtype`` and ``__getitem__`` (a zarrx, zarr-python or dask
    array; an xarray ``DataArray``; any lazily indexed array).

    >>> import numpy as np, zarrx
    >>> is_lazy_array(np.zeros(3)), is_lazy_array([1, 2]), is_lazy_array(zarrx.create_array({}, shape=(2,), dtype="u1"))
    (False, False, True)
    """
    if isinstance(value, (np.ndarray, np.generic)):
        return False
    return all(hasattr(value, name) for name in ("shape", "dtype", "__getitem__")) and isinstance(
        getattr(value, "shape", None), tuple
    )


def copy_region(selection: Any, shape: tuple[int, ...]) -> tuple[slice, ...] | None:
    """The region a basic selection of ``shape`` covers as slices of step 1, or None when it is
    not such a box (integers, steps, arrays): such selections take the source whole.

    >>> copy_region((Ellipsis, slice(2, None)), (4, 6))
    (slice(0, 4, 1), slice(2, 6, 1))
    >>> copy_region((0, slice(None)), (4, 6)) is None
    True
    """
    items = selection if isinstance(selection, tuple) else (selection,)
    if sum(item is Ellipsis for item in items) > 1:
        return None
    if Ellipsis in items:
        at = items.index(Ellipsis)
        items = items[:at] + (slice(None),) * (len(shape) - len(items) + 1) + items[at + 1 :]
    items = items + (slice(None),) * (len(shape) - len(items))
    if len(items) != len(shape) or not all(isinstance(item, slice) for item in items):
        return None
    region = []
    for item, length in zip(items, shape):
        start, stop, step = item.indices(length)
        if step != 1:
            return None
        region.append(slice(start, max(start, stop), 1))
    return tuple(region)


def _objects_per_step(handle: ArrayHandle) -> int:
    """Objects in a step: enough chunks to keep every thread encoding (a shard's inner chunks do
    that already), and at least :data:`MIN_STEP_BYTES` of small ones."""
    object_bytes = max(1, decoded_nbytes(handle.spec))
    by_size = max(1, MIN_STEP_BYTES // object_bytes)
    return max(by_size, 1 if handle.sharding is not None else call_threads())


def _steps(handle: ArrayHandle, region: tuple[slice, ...]) -> Iterator[tuple[slice, ...]]:
    return object_steps(handle, region, _objects_per_step(handle))


class _Reader:
    """Reads the source's part of each step. A zarrx source is read by the executor into
    buffers the writer gives back (:meth:`give_back`): no fresh memory per step."""

    def __init__(self, source: Any, origin: tuple[int, ...], handle: ArrayHandle) -> None:
        self.source, self.origin, self.handle = source, origin, handle
        source_handle = getattr(source, "handle", None)
        self.direct = source_handle if isinstance(source_handle, ArrayHandle) and source_handle.dtype == handle.dtype else None
        self.free: list[np.ndarray] = []
        self.lock = threading.Lock()

    def __call__(self, box: tuple[slice, ...]) -> np.ndarray:
        """The source's part for the destination ``box`` (source coordinates start at ``origin``)."""
        part = tuple(slice(b.start - o, b.stop - o) for b, o in zip(box, self.origin))
        shape = tuple(b.stop - b.start for b in box)
        if self.direct is None:
            value = self.source[part] if part else self.source[()]
            # np.asarray reads (computes) a lazy part: a dask array's graph runs for this part only
            return as_array_of(value, self.handle.dtype, shape)
        out = self._buffer(shape)
        return read_into(self.direct, BasicIndexer(part or Ellipsis, self.direct.shape, self.direct.io_chunk_shape), out)

    def _buffer(self, shape: tuple[int, ...]) -> np.ndarray:
        nbytes = math.prod(shape) * self.handle.dtype.itemsize
        with self.lock:
            fitting = next((position for position, buffer in enumerate(self.free) if buffer.nbytes >= nbytes), None)
            flat = self.free.pop(fitting) if fitting is not None else np.empty(nbytes, dtype=np.uint8)
        return flat[:nbytes].view(self.handle.dtype).reshape(shape)

    def give_back(self, block: np.ndarray) -> None:
        """``block`` is written: its buffer may take the next step's values."""
        if self.direct is not None and block.base is not None:
            base = block
            while base.base is not None and isinstance(base.base, np.ndarray):
                base = base.base
            with self.lock:
                self.free.append(base)


def _write(handle: ArrayHandle, box: tuple[slice, ...], block: np.ndarray) -> None:
    write_from(handle, BasicIndexer(box or Ellipsis, handle.shape, handle.io_chunk_shape), block)


def copy_into(handle: ArrayHandle, source: Any, region: tuple[slice, ...]) -> None:
    """Write ``source`` (of the region's shape) into ``region`` of the array, step by step.

    Examples
    --------
    >>> import numpy as np, zarrx
    >>> src = zarrx.create_array({}, shape=(6, 6), chunks=(4, 4), dtype="i2")
    >>> src[...] = np.arange(36).reshape(6, 6)
    >>> dst = zarrx.create_array({}, shape=(6, 6), chunks=(1, 2), shards=(2, 6), dtype="i2")
    >>> copy_into(dst.handle, src, (slice(0, 6, 1), slice(0, 6, 1)))
    >>> bool((dst[...] == src[...]).all())
    True
    """
    shape = tuple(part.stop - part.start for part in region)
    if tuple(source.shape) != shape:
        raise SelectionError(f"cannot assign a value of shape {tuple(source.shape)} to a selection of shape {shape}")
    read = _Reader(source, tuple(part.start for part in region), handle)
    steps = _steps(handle, region)
    if read.direct is not None and not any(read.origin) and transcodes(read.direct, handle):
        # the same chunks in both (then the region is the whole array): each decoded and encoded again on its own
        for box in steps:
            transcode_step(read.direct, handle, box)
        return
    if call_threads() < 2:  # one thread: read, then write, one step at a time
        for box in steps:
            block = read(box)
            _write(handle, box, block)
            read.give_back(block)
        return
    _pipelined(handle, read, steps)


_DONE = object()


def _pipelined(handle: ArrayHandle, read: _Reader, steps: Iterator[tuple[slice, ...]]) -> None:
    """Steps read by a reader thread, at most :data:`QUEUE_STEPS` ahead of the one the caller
    writes: the reader takes a slot before it reads a step, the writer frees it once written."""
    ready: queue.Queue[Any] = queue.Queue()
    slots = threading.Semaphore(QUEUE_STEPS + 1)
    stop = threading.Event()

    def take_slot() -> bool:
        while not stop.is_set():
            if slots.acquire(timeout=0.1):
                return True
        return False

    def read_ahead() -> None:
        try:
            for box in steps:
                if not take_slot():
                    return
                ready.put((box, read(box)))
            ready.put(_DONE)
        except BaseException as error:  # noqa: BLE001 -- handed to the writer, which raises it
            ready.put(error)

    reader = threading.Thread(target=read_ahead, name="zarrx-copy-reader", daemon=True)
    reader.start()
    try:
        while True:
            item = ready.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            box, block = item
            del item
            _write(handle, box, block)
            read.give_back(block)
            del block
            slots.release()
    finally:
        stop.set()
        reader.join()
