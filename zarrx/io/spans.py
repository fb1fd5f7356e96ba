"""Parts of open shards read ahead on the I/O pool, their inner chunks decoded from memory.

A read of many inner chunks of a local shard (:mod:`zarrx.io.shards`) groups them into **parts**:
neighbouring inner chunks of one open file, up to :data:`~zarrx.storage.local.IO_RANGE_BYTES`
(an inner chunk larger than that alone), each read with one ``pread`` on the I/O pool
(:func:`zarrx.concurrency.start_io`) while the decoding threads decode the parts before it from
memory. On cold storage that keeps many reads in flight (a disk, NFS, a parallel file system
serve many at once) instead of one per decoding thread; on warm storage each part is one copy
from the page cache instead of one read per inner chunk.

Memory stays bounded: :class:`SpanReads` holds parts of at most ``budget`` bytes at once (being
read, read, or being decoded; :data:`HELD_BYTES_PER_THREAD` per decoding thread by default, and
always one part) and starts the next when the last inner chunk of one has been decoded, reusing
its buffer (part buffers are kept, process-wide, up to :data:`KEPT_BUFFER_BYTES`). A part wanted
before its turn (the window full of parts other threads are decoding) is read by the thread that
wants it, so no thread ever waits on another's decoding; inside a scheduler's task given one
thread (:func:`~zarrx.concurrency.call_io_depth` 1) every part is read so, by its decoding thread.

Each part is read from the file the shard's index was read from, so index and inner chunks
are one version of the shard whoever renames another over it.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future
from typing import NamedTuple

import numpy as np

from zarrx.concurrency import call_io_depth, call_threads, start_io
from zarrx.errors import ChunkDecodeError
from zarrx.storage.store import RangeReader

__all__ = ["SpanReads", "SpanPart", "SpanPiece", "HELD_BYTES_PER_THREAD"]

#: bytes of parts a read holds at once per decoding thread
HELD_BYTES_PER_THREAD = 16 * 2**20
#: part buffers are allocated in multiples of this (so the next parts, of about the same size,
#: fit in them) ...
BUFFER_STEP = 256 * 1024
#: ... and up to this many bytes of them are kept, process-wide, for the next parts of any read
#: (a fresh buffer costs a page fault per 4 KiB: 32k reading 1 GiB of 32 MiB shards one by one)
KEPT_BUFFER_BYTES = 32 * 2**20

_kept: list[np.ndarray] = []
_kept_lock = threading.Lock()


class SpanPart:
    """Bytes ``[start, end)`` of an open shard holding ``left`` wanted inner chunks not yet decoded."""

    __slots__ = ("reads", "value", "start", "end", "left", "buffer", "future")

    def __init__(self, reads: "SpanReads", value: RangeReader, start: int, end: int, left: int) -> None:
        self.reads, self.value, self.start, self.end, self.left = reads, value, start, end, left
        self.buffer: np.ndarray | None = None
        #: the read's bytes found (None: not started)
        self.future: Future[int] | None = None

    def _read(self) -> int:
        assert self.buffer is not None
        return self.value.readinto(self.start, memoryview(self.buffer)[: self.end - self.start])


class SpanPiece(NamedTuple):
    """An inner chunk inside a part: bytes ``[start, end)`` of its shard."""

    part: SpanPart
    start: int
    end: int


class SpanReads:
    """The parts of one read, in the order its decoding threads will want them (see the module docstring).

    Examples
    --------
    >>> import tempfile, zarrx.storage
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     store = zarrx.storage.LocalStore(folder)
    ...     store.set("shard", bytes(range(10)))
    ...     with store.range_readers() as open_value:
    ...         reads = SpanReads(budget=1)
    ...         part = reads.part(open_value("shard"), 2, 8, pieces=2)
    ...         found = bytes(reads.wait(part))
    ...         reads.done(part, 2); reads.close()
    >>> found, reads.most_held, reads.held
    (b'\\x02\\x03\\x04\\x05\\x06\\x07', 6, 0)
    """

    def __init__(self, budget: int | None = None) -> None:
        self.ahead = call_io_depth() > 1  # else no I/O pool: each part read by its decoding thread
        self.budget = budget if budget is not None else HELD_BYTES_PER_THREAD * call_threads()
        self.parts: list[SpanPart] = []
        self.next = 0  # the first part not started, or past it
        self.held = 0
        #: the most bytes of parts held at once (at most ``budget`` or one part, plus a part per
        #: thread reading one out of turn)
        self.most_held = 0
        self.lock = threading.Lock()

    def part(self, value: RangeReader, start: int, end: int, pieces: int) -> SpanPart:
        """A part of ``pieces`` inner chunks, read after the ones before it (started now if the window has room)."""
        part = SpanPart(self, value, start, end, pieces)
        with self.lock:
            self.parts.append(part)
            if self.ahead:
                self._fill()
        return part

    def wait(self, part: SpanPart) -> memoryview:
        """The bytes of ``part``, once read (read here if it was not started): fewer than asked
        only where its file was cut short after its index was read (see :meth:`cut_short`)."""
        mine = None
        if part.future is None:
            with self.lock:
                if part.future is None and self.ahead:
                    self._fill()
                if part.future is None:  # not its turn yet: this thread reads it
                    self._hold(part)
                    part.future = mine = Future()
        if mine is not None:
            try:
                mine.set_result(part._read())
            except BaseException as error:
                mine.set_exception(error)
        found = part.future.result()
        assert part.buffer is not None
        return memoryview(part.buffer)[:found]

    def cut_short(self, piece: SpanPiece, key: str, coords: tuple[int, ...], found: int) -> ChunkDecodeError:
        """The error of ``piece`` (inner chunk ``coords`` of shard ``key``) past the ``found``
        bytes of its part."""
        return ChunkDecodeError(  # the index was checked against the file's size when it was opened
            f"chunk {key!r} inner chunk {coords}: the shard ended at byte {piece.part.start + found} while reading "
            f"bytes [{piece.start}, {piece.end}) its index gives (it was cut short in place while being read)"
        )

    def done(self, part: SpanPart, pieces: int) -> None:
        """``pieces`` inner chunks of ``part`` are decoded: its buffer goes to the next part after its last."""
        with self.lock:
            part.left -= pieces
            if part.left:
                return
            self.held -= part.end - part.start
            if part.buffer is not None:
                _keep(part.buffer)
            part.buffer = part.value = None  # type: ignore[assignment]
            if self.ahead:
                self._fill()

    def close(self) -> None:
        """Stop starting parts, and wait for the reads started (before the files they read are closed)."""
        with self.lock:
            self.next = len(self.parts)
            self.ahead = False
            started = [part.future for part in self.parts if part.future is not None]
        for future in started:
            if not future.cancel():
                future.exception()  # waits; an error was raised to the thread that took it, if any

    def _fill(self) -> None:
        """Start the next parts, in order, while they fit in ``budget`` (with the lock held)."""
        parts = self.parts
        while self.next < len(parts):
            part = parts[self.next]
            if part.future is None and self.held and self.held + part.end - part.start > self.budget:
                return
            self.next += 1
            if part.future is None:
                self._hold(part)
                part.future = start_io(part._read)

    def _hold(self, part: SpanPart) -> None:
        nbytes = part.end - part.start
        part.buffer = _buffer(nbytes)
        self.held += nbytes
        self.most_held = max(self.most_held, self.held)


def _buffer(nbytes: int) -> np.ndarray:
    """A buffer of ``nbytes`` or more: a kept one, else a new one."""
    with _kept_lock:
        for position, buffer in enumerate(_kept):
            if len(buffer) >= nbytes:
                return _kept.pop(position)
    return np.empty(-(-nbytes // BUFFER_STEP) * BUFFER_STEP, dtype=np.uint8)


def _keep(buffer: np.ndarray) -> None:
    """Keep ``buffer`` for the next parts (within :data:`KEPT_BUFFER_BYTES`), else let it go."""
    with _kept_lock:
        if sum(map(len, _kept)) + len(buffer) <= KEPT_BUFFER_BYTES:
            _kept.append(buffer)


def _forget_kept_after_fork() -> None:
    global _kept_lock
    _kept_lock = threading.Lock()  # (it may have been held at the fork; the buffers stay valid)


if hasattr(os, "register_at_fork"):  # not on Windows, which does not fork
    os.register_at_fork(after_in_child=_forget_kept_after_fork)
