"""zarrx: Zarr v3 for the dask/xarray world.

Open a hierarchy with :func:`open`, :func:`open_group` or :func:`open_array`,
create one with :func:`create_group` / :func:`create_array`; arrays index like
NumPy and groups like dicts. Zarr v2 and the 2022 draft layout open the same way;
:func:`convert` and :func:`migrate_v2_to_v3` turn them into Zarr v3; :func:`verify` decodes
every stored chunk and reports the bad ones. Errors are in :mod:`zarrx.errors`.

This module is the top of the package: it gathers the public names from the layers
(``docs/architecture.md``) and provides the conveniences the core offers on behalf of the
layers above it (``arr.to_dask()``, ``arr.explain()``, ``str(node)``; see
:mod:`zarrx.nodes.conveniences`). Nothing inside the package imports it.

It also gives xarray objects their ``.zarrx`` accessor (``ds.zarrx.to_zarr(...)``) in any
session that uses xarray, without importing xarray itself: at once when xarray is already
imported, else right after xarray's own import (a one-shot import hook), so ``import zarrx``
costs nothing to a program that never uses xarray.
"""

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from typing import Any

from zarrx.nodes import conveniences
from zarrx.nodes.api import consolidate_metadata, create_array, create_group, open, open_array, open_group
from zarrx.nodes.array import Array
from zarrx.nodes.group import Group
from zarrx.tools import display as _display  # noqa: F401 (provides str(node), _repr_html_, tree)
from zarrx.tools import explain as _explain  # noqa: F401 (provides Array.explain)
from zarrx.tools.conversion import convert, migrate_v2_to_v3
from zarrx.tools.verify import verify

__version__ = "0.1.0"

#: names loaded on first use, so ``import zarrx`` does not import dask
_LAZY = {"from_zarr": "zarrx.dask.read", "to_zarr": "zarrx.dask.write"}


def _to_dask(array: Array, chunks: Any = None, region: Any = None) -> Any:
    return importlib.import_module("zarrx.dask.read").array_to_dask(array, chunks, region=region)


def _append_dask(array: Array, x: Any, axis: int = 0) -> tuple[int, ...]:
    return importlib.import_module("zarrx.dask.append").append_dask(array, x, axis)


conveniences.provide("to_dask", _to_dask)
conveniences.provide("append_dask", _append_dask)


# -- the .zarrx accessors of xarray objects -----------------------------------------------------------
_ACCESSORS = "zarrx.xarray.accessor"


class _AccessorLoader(importlib.abc.Loader):
    """xarray's own loader, then the registration of zarrx's accessors."""

    def __init__(self, loader: importlib.abc.Loader) -> None:
        self._loader = loader

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._loader.exec_module(module)
        sys.meta_path[:] = [finder for finder in sys.meta_path if not isinstance(finder, _AccessorHook)]
        sys.modules[module.__name__] = module  # importlib puts it there after exec; the accessors need it now
        try:
            importlib.import_module(_ACCESSORS)
        except Exception as error:  # xarray itself imported fine: never make its import fail
            warnings.warn(
                f"zarrx could not register the .zarrx accessors of xarray objects ({error!r}); "
                "import zarrx.xarray to register them",
                RuntimeWarning,
                stacklevel=2,
            )

    def __getattr__(self, name: str) -> Any:  # resources, get_code, is_package ...: xarray's loader answers
        return getattr(self._loader, name)


class _AccessorHook(importlib.abc.MetaPathFinder):
    """Waits for ``import xarray``, then lets :class:`_AccessorLoader` load it (and leaves).

    A mere look for xarray (``importlib.util.find_spec("xarray")``, as libraries do to see
    whether it is installed) gets the wrapped spec too, but imports nothing: the hook stays
    until xarray is executed."""

    def __init__(self) -> None:
        self._looking = False

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != "xarray" or self._looking:
            return None
        self._looking = True  # the look below asks the other finders, not this one again
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._looking = False
        if spec is not None and spec.loader is not None:
            spec.loader = _AccessorLoader(spec.loader)
        return spec


if "xarray" in sys.modules:
    importlib.import_module(_ACCESSORS)
elif not any(isinstance(finder, _AccessorHook) for finder in sys.meta_path):
    sys.meta_path.insert(0, _AccessorHook())


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'zarrx' has no attribute {name!r}")


__all__ = [
    "Array",
    "Group",
    "open",
    "open_array",
    "open_group",
    "create_array",
    "create_group",
    "consolidate_metadata",
    "convert",
    "migrate_v2_to_v3",
    "verify",
    "from_zarr",
    "to_zarr",
    "__version__",
]
