"""The shape of the package (docs/architecture.md): layers that import only downwards, no import
cycle (function-local imports count), no module past 500 lines, no module shadowed by a name,
and ``explain()`` predicting exactly the requests a read makes."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import numpy as np
import pytest

import zarrx
from zarrx.storage import MemoryStore, MetricsStore
from zarrx.tools.explain import explain

PACKAGE = Path(zarrx.__file__).parent

#: the layers, bottom first: a module may import from its own layer and the ones below it
LAYERS = [
    ("zarrx.errors", "zarrx.sizes", "zarrx.scratch", "zarrx.concurrency", "zarrx.extension"),
    ("zarrx.storage", "zarrx.dtypes"),
    ("zarrx.codecs",),
    ("zarrx.metadata",),
    ("zarrx.io",),
    ("zarrx.nodes",),
    ("zarrx.dask", "zarrx.testing"),
    ("zarrx.xarray",),
    ("zarrx.tools",),
    ("zarrx.__main__",),
]
MAX_LINES = 500


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _imports(name: str, path: Path) -> set[str]:
    """The zarrx modules ``name`` imports anywhere in its code (function bodies included)."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            # "from zarrx.tools import display" imports the module zarrx.tools.display
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in MODULES:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _layer(name: str) -> int | None:
    for rank, members in enumerate(LAYERS):
        if any(name == member or name.startswith(member + ".") for member in members):
            return rank
    return None  # the package itself: the top


def test_every_module_has_a_layer():
    assert [name for name in MODULES if name != "zarrx" and _layer(name) is None] == []


def test_layers_import_only_downwards():
    upward = [
        (name, target)
        for name, targets in GRAPH.items()
        for target in targets
        if _layer(name) is not None and (_layer(target) is None or _layer(target) > _layer(name))
    ]
    assert upward == []


def test_nothing_inside_imports_the_package_facade():
    assert [name for name, targets in GRAPH.items() if "zarrx" in targets] == []


def test_no_import_cycle():
    # Tarjan's strongly connected components: a component of more than one module is a cycle
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(name: str) -> None:
        index[name] = low[name] = len(index)
        stack.append(name)
        on_stack.add(name)
        for target in GRAPH[name]:
            if target not in index:
                visit(target)
                low[name] = min(low[name], low[target])
            elif target in on_stack:
                low[name] = min(low[name], index[target])
        if low[name] == index[name]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == name:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for name in GRAPH:
        if name not in index:
            visit(name)
    assert cycles == []


def test_a_cycle_would_be_found():
    """The checks above see function-local imports (the graph is not empty where they are)."""
    assert "zarrx.io.copy" in GRAPH["zarrx.tools.conversion"]  # imported inside _copy_tasks()
    assert "zarrx.xarray" in GRAPH["zarrx.tools.demo"]


def test_no_module_is_past_500_lines():
    long = {name: n for name, path in MODULES.items() if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_no_module_is_shadowed_by_a_name():
    """``zarrx.a.b`` names the module wherever it is reached through attributes."""
    for info in pkgutil.walk_packages(zarrx.__path__, "zarrx."):
        if info.name == "zarrx.__main__":
            continue
        module = importlib.import_module(info.name)
        parent, _, child = info.name.rpartition(".")
        assert getattr(importlib.import_module(parent), child) is module, info.name


# -- explain() is the read ---------------------------------------------------------------------
def _sharded_array():
    store = MetricsStore(MemoryStore())
    array = zarrx.create_array(store, "s", shape=(64, 64), chunks=(4, 4), shards=(16, 32), dtype="i4")
    data = np.arange(64 * 64, dtype="i4").reshape(64, 64)
    data[0:4, 8:12] = 0  # an empty inner chunk of shard (0, 0)
    array[:] = data
    array[48:, 32:] = 0  # shard (3, 1) absent
    return store, array


def _plain_array():
    store = MetricsStore(MemoryStore())
    array = zarrx.create_array(store, "p", shape=(40, 30), chunks=(8, 7), dtype="i4")
    array[:] = np.arange(1200).reshape(40, 30)
    array[32:, :] = 0  # these chunks are all fill value: not stored
    return store, array


@pytest.mark.parametrize(
    "make, selection",
    [
        (_plain_array, np.s_[3:17, 5:9]),  # unsharded
        (_plain_array, np.s_[30:40, :]),  # partly missing
        (_plain_array, np.s_[33:40, 0:20]),  # fill only: every chunk missing
        (_sharded_array, np.s_[1:7, 2:13]),  # sharded, part of a shard
        (_sharded_array, np.s_[0:16, 0:32]),  # a whole shard
        (_sharded_array, np.s_[0:4, 8:12]),  # fill only: an empty inner chunk
        (_sharded_array, np.s_[50:60, 40:50]),  # fill only: an absent shard
        (_sharded_array, np.s_[::5, ::9]),
    ],
)
def test_explain_predicts_exactly_what_a_metrics_store_counts(make, selection):
    store, array = make()
    store.reset()
    plan = explain(array, selection)
    planning = store.summary()
    assert planning.requests == plan.index_requests  # explain read only shard indexes
    store.reset()
    array[selection]
    counted = store.summary()
    predicted_ranges = sum(1 for r in plan.requests if r.kind != "chunk")
    predicted_keys = sum(1 for r in plan.requests if r.kind == "chunk")
    assert counted["get_ranges"].requests == predicted_ranges
    assert counted["get_many"].requests + counted["get"].requests == predicted_keys
    assert counted.calls == plan.nbatches
    assert counted["get_ranges"].bytes <= (plan.nbytes or counted["get_ranges"].bytes)
