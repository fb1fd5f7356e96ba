"""Counting what the reliability tests did (faults injected, crashes survived, examples run).

A test module adds to :data:`FIGURES` and imports :func:`report_figures`, an autouse
module fixture that prints the module's figures when it finishes, on the terminal (not
captured), e.g. ``reliability figures (test_faults): faults injected = 412``. These are the
numbers the reliability issue's closing note reports.
"""

from __future__ import annotations

import collections
import contextlib
import threading

import pytest

__all__ = ["FIGURES", "add", "report_figures"]

#: (module, figure name) -> count
FIGURES: collections.Counter[tuple[str, str]] = collections.Counter()
_LOCK = threading.Lock()


def add(module: str, name: str, count: int = 1) -> None:
    with _LOCK:
        FIGURES[module.rpartition(".")[2], name] += count


@pytest.fixture(scope="module", autouse=True)
def report_figures(request):
    module = request.module.__name__.rpartition(".")[2]
    yield
    figures = {name: count for (owner, name), count in sorted(FIGURES.items()) if owner == module}
    if not figures:
        return
    text = ", ".join(f"{name} = {count}" for name, count in figures.items())
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is None:
        return
    with capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext():
        reporter.write_line(f"\nreliability figures ({module}): {text}")
