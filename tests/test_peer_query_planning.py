"""The peer suites again with dask's array expressions: dask's own (``DASK_ARRAY__QUERY_PLANNING=True``)
and the separate ``dask-array`` package as xarray's chunk manager.

dask reads ``array.query-planning`` once, when ``dask.array`` is first imported, so each run is
a separate ``python -m pytest`` of the peer modules with that setting (and
``ZARRX_EXPECT_DASK_ARRAY_EXPRESSIONS=1``, which makes ``tests/conftest.py`` stop the run unless
``dask.array.array_expr_enabled()`` is true and a new dask array carries a ``dask._expr.Expr``).
``XR_USE_DASK_ARRAY=1`` -- xarray's own switch -- makes ``tests/conftest.py`` register
``dask_array.xarray`` as xarray's "dask" chunk manager (query planning stays off: dask-array is a
package of its own). The normal run of the same modules is the "off" mode, unchanged.

What must hold in these modes:

- ``tests/test_peer_dask.py`` with expressions on: every test passes, or is in its
  ``DIFFERENCES`` (strict xfails) -- there is no dask baseline, since dask's own
  ``from_zarr``/``to_zarr`` raise NotImplementedError with expressions on.
- the xarray peer suites: zarrx fails no test that xarray's own ``engine="zarr"`` passes in the
  same mode. With dask 2026.8 xarray itself fails hundreds of its zarr tests with expressions on
  (dask's expression ``Array`` lacks ``__array_function__``, ``store``, ``vindex``...), so every
  test zarrx fails is run again without zarrx (``tests/peer_baseline_xarray.py``, the same
  classes) and counts only where that run passed it. The message names each such test and its
  error. (With dask-array, xarray's own engine passes them all.)
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BASELINE = "tests/peer_baseline_xarray.py"
EXPRESSIONS_ON = {"DASK_ARRAY__QUERY_PLANNING": "True", "ZARRX_EXPECT_DASK_ARRAY_EXPRESSIONS": "1"}


def run_suite(paths: list[str], env: dict[str, str], report: Path) -> dict[str, tuple[str, str]]:
    """Run pytest on ``paths`` (relative to the repository) in a new interpreter with ``env``
    added; the outcome (passed, failed, xfailed, skipped) and message of each test, by ``Class::test[id]``."""
    environment = {**os.environ, **env}
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--tb=no", f"--junitxml={report}"]
    done = subprocess.run(
        [*command, *paths], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=1800
    )
    if done.returncode not in (0, 1) or not report.exists():
        output = f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        raise AssertionError(f"pytest {paths} did not run (exit {done.returncode}):\n{output}")
    return outcomes(report)


def outcomes(report: Path) -> dict[str, tuple[str, str]]:
    """``Class::test[id]`` (module-level tests: ``test[id]``) -> (outcome, message) from a JUnit report."""
    results: dict[str, tuple[str, str]] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        module_and_class = case.get("classname", "")
        scope = module_and_class.rsplit(".", 1)[-1] if ".Test" in module_and_class else ""
        key = f"{scope}::{case.get('name')}" if scope else str(case.get("name"))
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error") and outcome != "failed":
                outcome, message = "failed", child.get("message", "")
            elif child.tag == "skipped" and outcome == "passed":
                outcome = "xfailed" if child.get("type") == "pytest.xfail" else "skipped"
                message = child.get("message", "")
        if results.get(key, ("",))[0] != "failed":  # a failure and a teardown error: the first says why
            results[key] = (outcome, message)
    return results


def listing(failures: dict[str, str]) -> str:
    """One line per failed test: its key and the first line of its error."""
    return "\n".join(f"  {key}: {(message.splitlines() or [''])[0][:200]}" for key, message in sorted(failures.items()))


def test_dask_peer_suite_with_array_expressions(tmp_path):
    results = run_suite(["tests/test_peer_dask.py"], EXPRESSIONS_ON, tmp_path / "dask.xml")
    ran = [key for key, (outcome, _) in results.items() if outcome != "skipped"]
    assert len(ran) >= 25, f"dask's zarr tests did not run with array expressions on: {sorted(results)}"
    failures = {key: message for key, (outcome, message) in results.items() if outcome == "failed"}
    assert not failures, f"{len(failures)} of dask's zarr tests fail with array expressions on:\n{listing(failures)}"


def xarray_failures_beyond_xarrays_own(env: dict[str, str], tmp_path: Path) -> tuple[dict[str, str], int]:
    """The xarray peer suites' failures in the mode ``env`` sets that xarray's own engine does not
    share (every test of theirs zarrx fails is run again without zarrx), and how many it shares."""
    suites = ["tests/test_peer_xarray.py", "tests/test_peer_xarray_datatree.py"]
    results = run_suite(suites, env, tmp_path / "zarrx.xml")
    assert sum(outcome == "passed" for outcome, _ in results.values()) >= 500, "the xarray peer suites did not run"
    failures = {key: message for key, (outcome, message) in results.items() if outcome == "failed"}
    if not failures:
        return {}, 0
    baseline_ids = collected(BASELINE, env)
    again = [baseline_ids[key] for key in failures if key in baseline_ids]
    args = tmp_path / "baseline-args.txt"
    args.write_text("\n".join(again) + "\n", encoding="utf-8")
    baseline = run_suite([f"@{args}"], env, tmp_path / "baseline.xml") if again else {}
    shared = {key for key, (outcome, _) in baseline.items() if outcome == "failed"}
    return {key: message for key, message in failures.items() if key not in shared}, len(shared)


def collected(path: str, env: dict[str, str]) -> dict[str, str]:
    """``Class::test[id]`` -> pytest node id, of the tests in ``path`` (collected in the mode ``env`` sets)."""
    environment = {**os.environ, **env}
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only", path]
    done = subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=600)
    ids = [line for line in done.stdout.splitlines() if line.startswith(f"{path}::")]
    assert ids, f"no tests collected from {path}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return {node.split("::", 1)[1]: node for node in ids}


def test_xarray_peer_suites_with_array_expressions(tmp_path):
    worse, shared = xarray_failures_beyond_xarrays_own(EXPRESSIONS_ON, tmp_path)
    assert not worse, (
        f"{len(worse)} xarray peer tests fail with array expressions on where xarray's engine='zarr' passes "
        f"them (or does not have them); {shared} more fail for both:\n{listing(worse)}"
    )


#: xarray peer tests zarrx fails with dask-array as xarray's chunk manager, where engine="zarr"
#: passes: strict -- each must keep failing (remove it here when it passes)
DASK_ARRAY_DIFFERENCES: dict[str, str] = dict.fromkeys(
    [f"TestZarrxDatatreeIO::test_to_zarr_no_redundant_computation[zarr_format={fmt}]" for fmt in (2, 3)],
    "zarrx writes a dask-array array through that array's own graph (x.__dask_graph__(), which dask-array "
    "optimises per array), so two variables of a tree derived from one computation run it once each; xarray's "
    "engine hands all of them to dask-array's store in one call",
)


def test_xarray_peer_suites_with_the_dask_array_package(tmp_path):
    """The separate ``dask-array`` package as xarray's "dask" chunk manager (xarray's own switch,
    ``XR_USE_DASK_ARRAY=1``): dask's array expressions in their own package, beside dask."""
    if importlib.util.find_spec("dask_array") is None:  # not imported here: its import changes dask's config
        pytest.skip("the dask-array package is not installed")
    worse, shared = xarray_failures_beyond_xarrays_own({"XR_USE_DASK_ARRAY": "1"}, tmp_path)
    unexpected = {key: message for key, message in worse.items() if key not in DASK_ARRAY_DIFFERENCES}
    assert not unexpected, (
        f"{len(unexpected)} xarray peer tests fail with dask-array as xarray's chunk manager where xarray's "
        f"engine='zarr' passes them (or does not have them); {shared} more fail for both:\n{listing(unexpected)}"
    )
    assert sorted(set(DASK_ARRAY_DIFFERENCES) - set(worse)) == [], "these pass now: remove them from the list"
