"""zarrx: Zarr v3 for the dask/xarray world.

Open a hierarchy with :func:`open`, :func:`open_group` or :func:`open_array`,
create one with :func:`create_group` / :func:`create_array`; arrays index like
NumPy and groups like dicts. Zarr v2 and the 2022 draft layout open the same way;
:func:`convert` and :func:`migrate_v2_to_v3` turn them into Zarr v3; :func:`verify` decodes
every stored chunk and reports the bad ones. Errors are in :mod:`zarrx.errors`.
"""

from zarrx.api import consolidate_metadata, create_array, create_group, open, open_array, open_group
from zarrx.array import Array
from zarrx.conversion import convert, migrate_v2_to_v3
from zarrx.group import Group
# ``zarrx.verify`` is the function; ``from zarrx.verify import VerifyReport`` still reads the module
from zarrx.verify import verify

__version__ = "0.1.0"

#: names loaded on first use, so ``import zarrx`` does not import dask
_LAZY = {"from_zarr": "zarrx.dask", "to_zarr": "zarrx.dask"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

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
