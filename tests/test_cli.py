"""The command line: ``zarrx demo`` runs end to end and leaves a readable hierarchy."""

import subprocess
import sys

import numpy as np

import zarrx
from zarrx.cli import main


def test_demo_writes_and_summarises(tmp_path, capsys):
    assert main(["demo", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "t2m (365, 181, 360) float32" in out
    assert "Zonal-mean" in out
    root = zarrx.open_group(str(tmp_path / "weather.zarr"))
    assert root.is_consolidated
    assert root["t2m"].dimension_names == ("time", "lat", "lon")
    assert np.isfinite(root["t2m"][0, 0, :5]).all()


def test_console_script_is_installed(tmp_path):
    result = subprocess.run([sys.executable, "-m", "zarrx.cli", "demo", str(tmp_path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
