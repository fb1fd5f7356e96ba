"""zarrx as a guest of dask: nothing of dask (or anything else) replaced, and dask's array
expressions served through their own optimiser.

* After building, slicing, computing, copying and pickling zarrx arrays -- on dask's threaded
  scheduler and on a LocalCluster of worker processes -- dask's ``Array`` class and
  ``sys.meta_path`` are what they were (checked in a fresh interpreter).
* No module of zarrx assigns an attribute of something it imported (the way
  ``da.Array.__getitem__ = ...`` or ``xarray.Dataset.x = ...`` would), nor touches
  ``sys.meta_path`` / ``sys.path_hooks`` / ``builtins`` (a check of the source).
* With ``DASK_ARRAY__QUERY_PLANNING=True`` the cases of tests/expression_cases.py pass in a
  process of their own (the setting is read once, when ``dask.array`` is first imported).
"""

from __future__ import annotations

import ast
import os
import pathlib
import subprocess
import sys
import textwrap

import zarrx

PACKAGE = pathlib.Path(zarrx.__file__).parent
ROOT = PACKAGE.parent


def run_python(code: str, **environment: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **environment}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300
    )


def test_dask_and_the_import_system_are_untouched_by_building_slicing_computing_and_pickling():
    result = run_python(
        """
        import copy, pickle, sys
        import dask, dask.array as da, numpy as np
        before = dict(vars(da.Array)); getitem = da.Array.__getitem__; finders = list(sys.meta_path)
        import zarrx, xarray as xr
        arr = zarrx.create_array({}, shape=(40, 6), chunks=(4, 6), dtype="f4", fill_value=1)
        x = zarrx.from_zarr(arr)
        y = x[3:17:2, None] - 1
        assert float(y.sum().compute()) == 0.0
        z = pickle.loads(pickle.dumps(copy.deepcopy(y)))
        assert float(z.sum().compute(scheduler="threads")) == 0.0
        r = zarrx.from_zarr(arr, region=(slice(4, 9),))
        assert r.shape == (5, 6)
        root = zarrx.create_group("memory://guest", overwrite=True)
        v = root.create_array("v", shape=(8,), chunks=(2,), dtype="i2", fill_value=3, dimension_names=["t"])
        ds = xr.open_dataset("memory://guest", engine="zarrx", chunks={}, chunked_array_type="zarrx")
        assert int(ds.v.isel(t=slice(1, 5)).sum()) == 12
        assert da.Array.__getitem__ is getitem, "dask.array.Array.__getitem__ was replaced"
        after = dict(vars(da.Array))
        assert after == before, sorted(k for k in after.keys() | before.keys() if after.get(k) is not before.get(k))
        assert sys.meta_path == finders, (finders, sys.meta_path)
        print("ok")
        """
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_worker_processes_keep_dask_untouched(tmp_path):
    url = str(tmp_path / "a.zarr")
    result = run_python(
        f"""
        import dask.array as da, distributed, numpy as np, zarrx
        arr = zarrx.create_array({url!r}, shape=(60, 4), chunks=(5, 4), dtype="f8", fill_value=2.0)

        def dask_untouched():
            import dask.array as da, sys
            return da.Array.__getitem__.__module__ == "dask.array.core" and not any(
                type(finder).__module__.startswith("zarrx") for finder in sys.meta_path)

        if True:  # (run with python -c: the workers, spawned, do not run this script again)
            with distributed.LocalCluster(n_workers=1, processes=True, threads_per_worker=2,
                                          dashboard_address=None, silence_logs=40) as cluster, \\
                    distributed.Client(cluster) as client:
                x = zarrx.from_zarr({url!r})
                assert float(client.compute((x[1:] - x[:-1]).sum()).result()) == 0.0
                assert float(client.compute(x[7:22].sum()).result()) == 2.0 * 15 * 4
                assert all(client.run(dask_untouched).values())
            print("ok")
        """
    )
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-3000:]


# -- the source: no assignment to what zarrx imported ------------------------------------------------
#: attributes of the interpreter that only an import hook or a patch would change
_PROCESS_STATE = {("sys", "meta_path"), ("sys", "path_hooks"), ("sys", "modules"), ("builtins", None)}


def _imported_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.module.startswith("zarrx"):
            names.update(alias.asname or alias.name for alias in node.names)
    return names


def _root(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def patches_in(source: str) -> list[str]:
    """Statements of ``source`` that change an imported object or the import machinery."""
    tree = ast.parse(source)
    imported = _imported_names(tree)
    found = []
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        for target in targets:
            if isinstance(target, (ast.Attribute, ast.Subscript)) and _root(target) in imported:
                found.append(f"line {node.lineno}: {ast.unparse(target)}")
        if isinstance(node, ast.Call):
            func = node.func
            name = ast.unparse(func)
            if name in ("setattr", "delattr") and node.args and _root(node.args[0]) in imported:
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
            if isinstance(func, ast.Attribute) and func.attr in ("insert", "append", "extend", "remove", "clear"):
                owner = ast.unparse(func.value)
                if owner in ("sys.meta_path", "sys.path_hooks", "sys.path"):
                    found.append(f"line {node.lineno}: {name}")
    return found


def test_no_module_of_zarrx_patches_what_it_imports():
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        patches = patches_in(path.read_text())
        if patches:
            found[str(path.relative_to(ROOT))] = patches
    assert found == {}


def test_the_source_check_finds_patches():
    samples = [
        "import dask.array as da\nda.Array.__getitem__ = lambda self, index: None",
        "import sys\nsys.meta_path.insert(0, object())",
        "from xarray import Dataset\nsetattr(Dataset, 'x', 1)",
        "import numpy as np\nnp.ndarray.sum = None",
        "import sys\nsys.modules['xarray'] = None",
    ]
    assert all(patches_in(sample) for sample in samples)
    # changing what zarrx made itself is no patch
    assert patches_in("import numpy as np\nx = np.zeros(3)\nx[0] = 1\nlocal = {}\nlocal['a'] = np") == []


# -- dask's array expressions -----------------------------------------------------------------------
def test_the_expression_cases_pass_with_query_planning_on():
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(ROOT / "tests" / "expression_cases.py")],
        capture_output=True, text=True, cwd=ROOT, timeout=600,
        env={**os.environ, "DASK_ARRAY__QUERY_PLANNING": "True", "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert " passed" in result.stdout and "failed" not in result.stdout


# -- the dask-array package ---------------------------------------------------------------------------
def test_dask_array_pushes_slices_into_its_read_of_a_zarrx_array():
    """dask-array's ``from_array`` is an input expression that takes pushed-down slices; a
    ``zarrx.Array`` is an array it reads (shape, dtype, basic indexing), so a slice of a
    thousand-chunk array reads its ten chunks. In a process of its own: importing dask_array
    changes dask's configuration for the whole process."""
    result = run_python(
        """
        import numpy as np, dask_array, zarrx
        from tests.counting import CountingStore
        from zarrx.storage import MemoryStore
        counting = CountingStore(MemoryStore())
        arr = zarrx.create_array(counting, shape=(1000, 4), chunks=(1, 4), dtype="f4", fill_value=1)
        arr[:10] = np.arange(40, dtype="f4").reshape(10, 4)
        counting.reset()
        total = dask_array.from_array(arr, chunks=arr.chunks)[:10].sum()
        assert float(total.compute()) == float(np.arange(40).sum())
        assert sorted(key for key, _ in counting.chunk_requests()) == sorted(f"c/{i}/0" for i in range(10))
        # (dask-array 0.7 pushes both slices of x[2:] - x[:-2] into reads of their own, so the
        # overlap is read twice: its optimiser's choice, the same for any array it reads)
        print("ok")
        """
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]
