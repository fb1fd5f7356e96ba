"""Every benchmark script runs end to end in its tiny --smoke mode (CI never runs the full sizes)."""

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = sorted((Path(__file__).parent.parent / "benchmarks").glob("bench_*.py"))


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.stem for s in SCRIPTS])
def test_benchmark_smoke(script, tmp_path):
    result = subprocess.run(
        [sys.executable, str(script), "--smoke"], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]


def test_there_are_benchmarks():
    assert SCRIPTS
