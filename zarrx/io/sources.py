"""Which stored arrays a lazy array-like reads: so a streaming copy never reads what it overwrote.

``arr[1:] = zarrx.from_zarr(arr.store)[:-1]`` copied step by step would read parts of ``arr``
the copy has already overwritten. :func:`reads_array` tells whether a source reads the array an
:class:`~zarrx.io.handle.ArrayHandle` writes -- a zarrx ``Array`` over it, a zarr-python
``Array`` over the same folder, or a dask array (legacy graph or array expression) whose reads
hold such a handle or array -- so the caller can read the source whole first. What cannot be
seen (an opaque array-like that reads a store itself) counts as not reading it.
"""

from __future__ import annotations

import os
from typing import Any, Iterator

from zarrx.io.handle import ArrayHandle
from zarrx.storage.paths import join_key

__all__ = ["reads_array"]


def _identity(store: Any, path: str) -> Any:
    """What names the array at ``path`` of a zarrx store: its folder when it has one (also through
    zarr-python's ``LocalStore``)."""
    local = store.local_path(join_key(path, "zarr.json"))
    if local:
        return ("file", os.path.realpath(os.path.dirname(local)))
    location = store.location
    root = getattr(location[1], "root", None) if isinstance(location, tuple) and location[0] == "zarr-python" else None
    if root is not None:
        return ("file", os.path.realpath(os.path.join(str(root), path.strip("/"))))
    return (location, path.strip("/"))


def _zarr_python_identity(array: Any) -> Any:
    """The identity of a zarr-python ``Array`` (its folder, for a local store), or None."""
    store_path = getattr(array, "store_path", None)
    root = getattr(getattr(store_path, "store", None), "root", None)
    if store_path is None or root is None:
        return None
    return ("file", os.path.realpath(os.path.join(str(root), str(store_path.path).strip("/"))))


def _identity_of(value: Any) -> Any:
    """The identity of a stored array ``value`` is (a handle, a zarrx or zarr-python array), or None."""
    if isinstance(value, ArrayHandle):
        return _identity(value.store, value.path)
    handle = getattr(value, "handle", None)
    if isinstance(handle, ArrayHandle):
        return _identity(handle.store, handle.path)
    if type(value).__module__.startswith("zarr.core.array"):
        return _zarr_python_identity(value)
    return None


def _graph_values(value: Any) -> Iterator[Any]:
    """The arguments of the reads in a dask array's graph, as far as they can be seen cheaply."""
    expr = getattr(value, "expr", None)
    if expr is not None and hasattr(expr, "walk"):  # dask's array expressions: the read's operands
        for node in expr.walk():
            for operand in getattr(node, "operands", ()):
                source = getattr(operand, "source", None)
                yield getattr(source, "argument", operand)
        return
    graph = getattr(value, "dask", None)
    for layer in getattr(graph, "layers", {}).values():
        for argument, _ in getattr(layer, "indices", ()):  # a Blockwise layer's arguments
            yield argument
        mapping = getattr(layer, "mapping", None)  # a materialized layer: its values (the array of
        if isinstance(mapping, dict) and len(mapping) <= 16:  # from_array(..., inline_array=False))
            for item in mapping.values():
                yield getattr(item, "value", item)


def reads_array(source: Any, handle: ArrayHandle) -> bool:
    """Whether ``source`` reads the array ``handle`` stands for.

    Examples
    --------
    >>> import zarrx
    >>> arr = zarrx.create_array({}, shape=(4,), chunks=(2,), dtype="i1")
    >>> other = zarrx.create_array({}, shape=(4,), chunks=(2,), dtype="i1")
    >>> reads_array(arr, arr.handle), reads_array(arr.to_dask()[1:], arr.handle), reads_array(other, arr.handle)
    (True, True, False)
    """
    target = _identity(handle.store, handle.path)
    data = getattr(source, "data", None)  # an xarray DataArray: what it wraps
    candidates = [source] if data is None or data is source else [source, data]
    for candidate in candidates:
        if _identity_of(candidate) == target:
            return True
        if any(_identity_of(item) == target for item in _graph_values(candidate) if item is not None):
            return True
    return False
