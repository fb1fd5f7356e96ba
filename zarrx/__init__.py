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

Every name is loaded on first use (``zarrx.open`` imports the core, ``zarrx.from_zarr`` the
dask layer): Python imports this module before any of zarrx's modules, including the entry
points xarray loads whenever it lists its engines (``zarrx.xarray.backend``,
``zarrx.xarray.chunkmanager``), so it must cost nothing to a session that never opens a Zarr
store.

xarray objects get their ``.zarrx`` accessor (``ds.zarrx.to_zarr(...)``, ``ds.zarrx.chunk()``)
by plain imports, as with rioxarray or cf_xarray: ``import zarrx.xarray``, or xarray loading
zarrx's backend entry point (``xr.open_dataset(..., engine="zarrx")``, or xarray listing its
engines). ``import zarrx`` registers them only when xarray is already imported; it never
imports xarray itself and never touches the import system.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

from zarrx.nodes import conveniences

if TYPE_CHECKING:
    from zarrx.dask.read import from_zarr
    from zarrx.dask.write import to_zarr
    from zarrx.nodes.api import consolidate_metadata, create_array, create_group, open, open_array, open_group
    from zarrx.nodes.array import Array
    from zarrx.nodes.group import Group
    from zarrx.tools.conversion import convert, migrate_v2_to_v3
    from zarrx.tools.verify import verify

__version__ = "0.1.0"

#: each public name and the module it is loaded from on first use
_LAZY = {
    "Array": "zarrx.nodes.array",
    "Group": "zarrx.nodes.group",
    "open": "zarrx.nodes.api",
    "open_array": "zarrx.nodes.api",
    "open_group": "zarrx.nodes.api",
    "create_array": "zarrx.nodes.api",
    "create_group": "zarrx.nodes.api",
    "consolidate_metadata": "zarrx.nodes.api",
    "convert": "zarrx.tools.conversion",
    "migrate_v2_to_v3": "zarrx.tools.conversion",
    "verify": "zarrx.tools.verify",
    "from_zarr": "zarrx.dask.read",
    "to_zarr": "zarrx.dask.write",
}

#: the subpackages and modules reached as attributes (``zarrx.storage.MemoryStore``) after ``import zarrx``
_SUBMODULES = frozenset(
    {"codecs", "concurrency", "dask", "dtypes", "errors", "extension", "io", "metadata", "nodes", "sizes",
     "storage", "testing", "tools", "xarray"}
)


# -- the conveniences of the core, each importing its layer when first used ------------------------
def _to_dask(array: Any, chunks: Any = None, region: Any = None) -> Any:
    return importlib.import_module("zarrx.dask.read").array_to_dask(array, chunks, region=region)


def _provided_by(module: str, name: str) -> Any:
    """The function ``name`` of ``module``, imported at the first call; importing the module
    provides its own implementation (``conveniences.provide``), which replaces this one."""

    def convenience(*args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    return convenience


def _append_dask(array: Any, x: Any, axis: int = 0) -> tuple[int, ...]:
    return importlib.import_module("zarrx.dask.append").append_dask(array, x, axis)


conveniences.provide("to_dask", _to_dask)
conveniences.provide("append_dask", _append_dask)
conveniences.provide("explain", _provided_by("zarrx.tools.explain", "explain"))
conveniences.provide("node_text", _provided_by("zarrx.tools.display", "node_text"))
conveniences.provide("node_html", _provided_by("zarrx.tools.display", "node_html"))
conveniences.provide("tree", _provided_by("zarrx.tools.display", "group_tree"))


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module 'zarrx' has no attribute {name!r}")
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, *_SUBMODULES})


# xarray is here already: give its objects the .zarrx accessors now (a plain import; when xarray
# comes later, `import zarrx.xarray` or its loading of zarrx's entry points registers them)
if "xarray" in sys.modules:
    importlib.import_module("zarrx.xarray.accessor")


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
