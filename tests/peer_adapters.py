"""The thin adapter that runs xarray's and dask's own zarr tests against zarrx.

The peers' tests call their own entry points by name: ``ds.to_zarr(...)``,
``xr.open_dataset(..., engine="zarr")``, ``xr.open_zarr(...)``, ``da.from_zarr(...)``,
``x.to_zarr(...)``. While one of those tests runs, :func:`route_xarray_to_zarrx` and
:func:`route_dask_to_zarrx` point these names at zarrx -- ``ds.zarrx.to_zarr``,
``engine="zarrx"``, :func:`zarrx.from_zarr`, :func:`zarrx.to_zarr` -- and put them back after
it. Nothing else is changed: the tests' data, calls and assertions are the peers' own, and
where a test inspects a store with zarr-python (``zarr.open_group(store)``) it reads what
zarrx wrote.

xarray's zarr classes choose the Zarr format with zarr-python's ``default_zarr_format``
setting (their ``default_zarr_format`` fixture); the adapter passes that format to zarrx's
writer when a test gives none, as xarray's writer takes it from zarr-python.

:func:`zarr_test_names` lists a peer test module's zarr tests from its source, and
:func:`load_peer_tests` loads just those (with what they use) from a module that skips itself
as a whole in some mode -- dask's ``test_array_core`` with array expressions on.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import inspect
import pathlib
import types
from typing import Any

import dask.array as da
import xarray as xr
import zarr
from xarray.backends import plugins

import zarrx

__all__ = ["route_xarray_to_zarrx", "route_dask_to_zarrx", "with_default_format", "load_peer_tests", "zarr_test_names"]


def with_default_format(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with zarr-python's default Zarr format when they give none and the write creates
    the group (modes ``w``, ``w-``): xarray's writer takes that default from zarr-python, and
    finds an existing group's format itself, as zarrx's does."""
    appends = kwargs.get("append_dim") is not None or kwargs.get("region") is not None
    creates = kwargs.get("mode") in ("w", "w-") or (kwargs.get("mode") is None and not appends)
    if kwargs.get("zarr_format") is None and creates:
        kwargs["zarr_format"] = zarr.config.get("default_zarr_format")
    return kwargs


def _keywords(method: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The keywords of a ``to_zarr`` call (positional arguments named as ``method`` names them)."""
    return with_default_format(dict(inspect.signature(method).bind_partial(*args, **kwargs).arguments))


def _dataset_to_zarr(self: xr.Dataset, *args: Any, **kwargs: Any) -> Any:
    return self.zarrx.to_zarr(**_keywords(self.zarrx.to_zarr, args, kwargs))


def _dataarray_to_zarr(self: xr.DataArray, *args: Any, **kwargs: Any) -> Any:
    return self.zarrx.to_zarr(**_keywords(self.zarrx.to_zarr, args, kwargs))


def _datatree_to_zarr(self: xr.DataTree, *args: Any, **kwargs: Any) -> Any:
    return self.zarrx.to_zarr(**_keywords(self.zarrx.to_zarr, args, kwargs))


def _zarrx_for_zarr(get_backend: Any) -> Any:
    @functools.wraps(get_backend)
    def get(engine: Any) -> Any:
        # zarrx's entry point as xarray loads it (with its open_dataset_parameters filled in)
        return plugins.list_engines()["zarrx"] if engine == "zarr" else get_backend(engine)

    return get


def route_xarray_to_zarrx(monkeypatch: Any) -> None:
    """``Dataset/DataArray/DataTree.to_zarr`` -> ``.zarrx.to_zarr``; ``engine="zarr"`` -> zarrx."""
    monkeypatch.setattr(xr.Dataset, "to_zarr", _dataset_to_zarr)
    monkeypatch.setattr(xr.DataArray, "to_zarr", _dataarray_to_zarr)
    monkeypatch.setattr(xr.DataTree, "to_zarr", _datatree_to_zarr)
    monkeypatch.setattr(plugins, "get_backend", _zarrx_for_zarr(plugins.get_backend))


def route_dask_to_zarrx(monkeypatch: Any) -> None:
    """``da.from_zarr`` -> :func:`zarrx.from_zarr`; ``da.to_zarr`` and ``x.to_zarr`` ->
    :func:`zarrx.to_zarr`, with zarrx's defaults (it lines the blocks up with the shards, as
    dask's ``to_zarr`` does)."""
    monkeypatch.setattr(da, "from_zarr", zarrx.from_zarr)
    monkeypatch.setattr(da, "to_zarr", zarrx.to_zarr)
    # dask's array-expression class (``array.query-planning``) has no ``to_zarr`` method: dask's
    # own tests call ``x.to_zarr`` all the same, so it is routed to zarrx in both modes
    monkeypatch.setattr(da.Array, "to_zarr", zarrx.to_zarr, raising=False)


def _definitions(module_name: str) -> tuple[str, ast.Module]:
    spec = importlib.util.find_spec(module_name)
    if spec is None or spec.origin is None:
        raise ImportError(f"no module {module_name!r}")
    return spec.origin, ast.parse(pathlib.Path(spec.origin).read_text(encoding="utf-8"), spec.origin)


def zarr_test_names(module_name: str) -> set[str]:
    """The top-level test functions of the installed peer module ``module_name`` that mention zarr
    (in their name, decorators or body), read from its source without importing it."""
    _, tree = _definitions(module_name)
    return {
        node.name
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.name.startswith("test_")
        and "zarr" in ast.unparse(node).lower()
    }


def _names_used(node: ast.AST) -> set[str]:
    """The names a definition refers to: in its body and decorators, and its parameters (fixtures)."""
    names = {sub.id for sub in ast.walk(node) if isinstance(sub, ast.Name)}
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        names |= {arg.arg for arg in node.args.args}
    return names


def load_peer_tests(module_name: str, tests: set[str]) -> types.ModuleType:
    """The installed peer test module ``module_name`` holding only its prologue and ``tests``.

    dask skips its ``test_array_core`` module as a whole when array expressions are on
    (``pytest.skip(..., allow_module_level=True)``, because other tests' parameters call
    functions the expressions lack), which would skip its zarr tests with it. This reads the
    module's source, as installed, and runs: every statement before its first definition or
    that skip (its imports and settings), the test functions named in ``tests``, and the
    module-level functions and fixtures those use (by name or parameter, transitively). The
    kept statements are not changed; their asserts are plain ones (pytest does not rewrite them).
    """
    origin, tree = _definitions(module_name)
    prologue: list[ast.stmt] = []
    for statement in tree.body:
        definition = isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        if definition or (isinstance(statement, ast.If) and "array_expr_enabled" in ast.unparse(statement.test)):
            break
        prologue.append(statement)
    definitions = {
        statement.name: statement
        for statement in tree.body
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    }
    missing = sorted(set(tests) - set(definitions))
    if missing:
        raise ImportError(f"{module_name} has no {missing}")
    keep, pending = set(tests), list(tests)
    while pending:
        for name in _names_used(definitions[pending.pop()]):
            if name in definitions and name not in keep and not name.startswith("test_"):
                keep.add(name)
                pending.append(name)
    body = prologue + [statement for statement in tree.body if getattr(statement, "name", None) in keep]
    module = types.ModuleType(module_name, f"{module_name}: only {sorted(keep)}")
    module.__file__ = origin
    exec(compile(ast.Module(body=body, type_ignores=[]), origin, "exec"), module.__dict__)  # noqa: S102
    return module
