"""Sizes as people read them, for every message and display of zarrx (the one place they are formatted)."""

from __future__ import annotations

__all__ = ["human_bytes", "count_text"]


def human_bytes(nbytes: float) -> str:
    """A byte count with a binary unit.

    Examples
    --------
    >>> human_bytes(1536), human_bytes(12), human_bytes(3 * 2**40)
    ('1.5 KiB', '12 B', '3.0 TiB')
    """
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(nbytes) < 1024:
            return f"{int(nbytes)} B" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024
    return f"{nbytes:.1f} TiB"


def count_text(number: int) -> str:
    """``number``, with its power of two when it is one (sizes from metadata often are).

    Examples
    --------
    >>> count_text(2**40), count_text(1000)
    ('1099511627776 (2**40)', '1000')
    """
    if number >= 2**20 and number & (number - 1) == 0:
        return f"{number} (2**{number.bit_length() - 1})"
    return str(number)
