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
"""

import importlib
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


def _to_dask(array: Array, chunks: Any = None) -> Any:
    return importlib.import_module("zarrx.dask.read").array_to_dask(array, chunks)


conveniences.provide("to_dask", _to_dask)


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
