"""The progress display of zarrx's long jobs (``zarrx verify``, :func:`zarrx.verify`).

One bar, ``verify [########------------]  40% 120/300 chunks 1.2 s`` on stderr: redrawn in place
on a terminal, printed once at the end otherwise (a log stays one line). ``zarrx convert`` and
``zarrx demo`` compute with dask, whose own progress bar counts its tasks.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable

__all__ = ["ProgressBar", "ProgressCallback", "progress_callback"]

#: ``progress(done, total)``, called as work finishes
ProgressCallback = Callable[[int, int], None]


class ProgressBar:
    """A :data:`ProgressCallback` drawing a bar labelled ``label`` on ``stream`` (stderr)."""

    WIDTH = 30

    def __init__(self, label: str, stream: Any = None, unit: str = "chunks") -> None:
        self.label = label
        self.unit = unit
        self.stream = stream or sys.stderr
        self.live = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.started = time.perf_counter()

    def __call__(self, done: int, total: int) -> None:
        if done < total and not self.live:
            return
        fraction = done / total if total else 1.0
        filled = round(fraction * self.WIDTH)
        bar = "#" * filled + "-" * (self.WIDTH - filled)
        elapsed = time.perf_counter() - self.started
        line = f"{self.label} [{bar}] {fraction:4.0%} {done}/{total} {self.unit} {elapsed:.1f} s"
        end = "\n" if done >= total else ""
        print(f"\r{line}" if self.live else line, end=end, file=self.stream, flush=True)


def progress_callback(progress: bool | ProgressCallback | None, label: str) -> ProgressCallback | None:
    """What a ``progress=`` argument means: True a :class:`ProgressBar`, a callable itself, else None."""
    if progress is True:
        return ProgressBar(label)
    return progress or None
