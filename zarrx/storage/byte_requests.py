"""Byte requests: which part of a stored value to read (zarr-python 3's ``ByteRequest`` forms).

:class:`RangeByteRequest` (``[start, end)``), :class:`OffsetByteRequest` (from an offset to the
end) and :class:`SuffixByteRequest` (the last bytes); :func:`byte_bounds`, :func:`open_bounds`
and :func:`slice_value` turn them into positions. :mod:`zarrx.storage.store` re-exports them.
"""

from __future__ import annotations

from dataclasses import dataclass

from zarrx.errors import UsageError

__all__ = [
    "ByteRequest", "RangeByteRequest", "OffsetByteRequest", "SuffixByteRequest", "byte_bounds", "open_bounds",
    "slice_value",
]  # fmt: skip


@dataclass(frozen=True)
class RangeByteRequest:
    """Bytes ``[start, end)``; the part past the end of the value is simply absent."""

    start: int
    end: int

    def __post_init__(self) -> None:
        if self.start < 0 or self.end < self.start:
            raise UsageError(f"RangeByteRequest needs 0 <= start <= end, found start={self.start}, end={self.end}")


@dataclass(frozen=True)
class OffsetByteRequest:
    """Bytes from ``offset`` to the end (empty when ``offset`` is past the end)."""

    offset: int

    def __post_init__(self) -> None:
        if self.offset < 0:
            raise UsageError(f"OffsetByteRequest needs offset >= 0, found {self.offset}")


@dataclass(frozen=True)
class SuffixByteRequest:
    """The last ``suffix`` bytes (the whole value when it is shorter)."""

    suffix: int

    def __post_init__(self) -> None:
        if self.suffix < 0:
            raise UsageError(f"SuffixByteRequest needs suffix >= 0, found {self.suffix}")


ByteRequest = RangeByteRequest | OffsetByteRequest | SuffixByteRequest


def byte_bounds(byte_range: ByteRequest | None, size: int) -> tuple[int, int]:
    """``(start, end)`` of what ``byte_range`` asks for in a value of ``size`` bytes, clipped to it.

    The one conversion of a byte request into positions: every store reads ranges through it.
    A range from a corrupt shard index may start past any seekable offset or be longer than any
    buffer; clipped, it reads as absent bytes.

    Examples
    --------
    >>> byte_bounds(SuffixByteRequest(3), 10), byte_bounds(RangeByteRequest(8, 20), 10), byte_bounds(None, 4)
    ((7, 10), (8, 10), (0, 4))
    """
    match byte_range:
        case None:
            return 0, size
        case RangeByteRequest(start, end):
            return min(start, size), min(end, size)
        case OffsetByteRequest(offset):
            return min(offset, size), size
        case SuffixByteRequest(suffix):
            return max(0, size - suffix), size
    raise TypeError(f"expected a ByteRequest or None, found {byte_range!r}")


def open_bounds(byte_range: ByteRequest | None) -> tuple[int | None, int | None] | None:
    """``(start, end)`` as fsspec's ``cat_file``/``cat_ranges`` take them, where the size of the value
    is not known: ``None`` for an open end, a negative start for a suffix; None for an empty range
    (which needs no read).

    Examples
    --------
    >>> open_bounds(SuffixByteRequest(3)), open_bounds(OffsetByteRequest(5)), open_bounds(RangeByteRequest(4, 4))
    ((-3, None), (5, None), None)
    """
    match byte_range:
        case None:
            return None, None
        case RangeByteRequest(start, end):
            return (start, end) if end > start else None
        case OffsetByteRequest(offset):
            return offset, None
        case SuffixByteRequest(suffix):
            return (-suffix, None) if suffix else None  # start=-0 would mean the whole value
    raise TypeError(f"expected a ByteRequest or None, found {byte_range!r}")


def slice_value(value: bytes, byte_range: ByteRequest | None) -> bytes:
    """The part of ``value`` that ``byte_range`` asks for (all of it for None).

    Examples
    --------
    >>> slice_value(b"0123456789", SuffixByteRequest(3))
    b'789'
    """
    if byte_range is None:
        return value
    start, end = byte_bounds(byte_range, len(value))
    return value[start:end]
