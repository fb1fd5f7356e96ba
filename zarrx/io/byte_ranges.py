"""Coalescing byte ranges: many small reads of one object become few larger ones.

Every request to an object store costs a round trip (tens of milliseconds); a
gap of a few KiB costs far less to read than a second request. Ranges of one
key whose gap is at most ``max_gap`` bytes are merged into one request, and each
original range is then cut out of the merged bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

__all__ = ["CoalescedRange", "coalesce", "DEFAULT_MAX_GAP"]

#: ranges this close are read together (also what tensorstore's and object_store's defaults are near)
DEFAULT_MAX_GAP = 64 * 1024


@dataclass(frozen=True)
class CoalescedRange:
    start: int
    end: int
    #: (position in the input, start, end) of each original range inside [start, end)
    members: tuple[tuple[int, int, int], ...]


def coalesce(ranges: Sequence[tuple[int, int]], max_gap: int = DEFAULT_MAX_GAP) -> list[CoalescedRange]:
    """Merge ``[start, end)`` ranges of one object whose gaps are at most ``max_gap`` bytes.

    Examples
    --------
    >>> [(r.start, r.end) for r in coalesce([(0, 10), (10, 20), (100, 110)], max_gap=50)]
    [(0, 20), (100, 110)]
    >>> [(r.start, r.end) for r in coalesce([(0, 10), (12, 20)], max_gap=0)]
    [(0, 10), (12, 20)]
    """
    order = sorted(range(len(ranges)), key=lambda i: ranges[i])
    merged: list[CoalescedRange] = []
    start = end = 0
    members: list[tuple[int, int, int]] = []
    for position in order:
        lo, hi = ranges[position]
        if members and lo - end <= max_gap:
            end = max(end, hi)
        else:
            if members:
                merged.append(CoalescedRange(start, end, tuple(members)))
            start, end, members = lo, hi, []
        members.append((position, lo, hi))
    if members:
        merged.append(CoalescedRange(start, end, tuple(members)))
    return merged
