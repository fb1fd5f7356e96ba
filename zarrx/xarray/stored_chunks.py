"""Dask blocks along the stored chunks of a selection: what ``ds.zarrx.chunk()`` does.

The recipe for giant datasets is to select first and chunk after::

    ds = xr.open_dataset(store, engine="zarrx")              # lazy, no dask graph at all
    ds.isel(time=slice(5, 100)).zarrx.chunk()                # dask blocks for the selection only

A selection of a dataset opened without ``chunks`` stays xarray's lazily indexed wrapper of
:class:`~zarrx.xarray.store.ZarrxBackendArray`, which only records the key; chunking it
afterwards builds a graph of the selected blocks, nothing more. :func:`stored_block_sizes`
finds, for each dimension of a variable, where its elements sit in the stored array -- by
walking the wrapper's public ``array`` and ``key`` attributes down to the backend array, so no
private xarray module is imported -- and cuts the dimension at the stored objects' boundaries
(the shards of a sharded array, else its chunks: the backend's ``preferred_chunks``). After
``isel(time=slice(5, 100))`` over chunks of 10 the blocks are ``(5, 10, 10, ...)``: no block
straddles two stored objects, so no stored object is read by two tasks.

A variable whose place in the stored array is not known (in memory, from another engine, or
behind a vectorized selection) is cut by ``encoding["preferred_chunks"]`` counted from its
first element, or left in one block when it has none; a variable that is already a chunked
array is left as it is.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

import numpy as np

from zarrx.errors import UsageError
from zarrx.xarray.store import ZarrxBackendArray

__all__ = ["check_multiples", "chunk_dataset", "chunk_variable", "stored_block_sizes"]

#: the lazy keys whose entries index each dimension on its own (vectorized keys do not)
_PER_DIMENSION_KEYS = ("BasicIndexer", "OuterIndexer")

#: wrappers looked through at most (xarray stacks a handful: caching, copy-on-write, CF decoding)
_MAX_WRAPPERS = 32

#: positions along one dimension of the stored array: a range, or an array of indices
Positions = range | np.ndarray


def _take(outer: Positions, inner: Positions) -> Positions:
    """``outer[inner]``: the stored positions of a selection of a selection."""
    if isinstance(outer, range):
        if isinstance(inner, range):
            return range(outer.start + outer.step * inner.start, outer.start + outer.step * inner.stop,
                         outer.step * inner.step)
        return outer.start + outer.step * np.asarray(inner, dtype=np.int64)
    index = np.arange(inner.start, inner.stop, inner.step) if isinstance(inner, range) else inner
    return np.asarray(outer)[index]


def _key_positions(entry: Any, length: int) -> Positions:
    if isinstance(entry, slice):
        return range(length)[entry]
    return np.asarray(entry, dtype=np.int64) % max(length, 1)  # negative indices count from the end


def _stored_positions(data: Any) -> tuple[ZarrxBackendArray, list[tuple[int, Positions]]] | None:
    """The backend array under ``data`` and, for each dimension of ``data``, its dimension in
    the backend array and the stored positions of its elements; None when they are not known."""
    ndim = len(data.shape)
    where: list[tuple[int, Positions | None]] = [(axis, None) for axis in range(ndim)]
    node = data
    for _ in range(_MAX_WRAPPERS):
        if isinstance(node, ZarrxBackendArray):
            break
        inner = getattr(node, "array", None)
        if inner is None or not hasattr(inner, "shape"):
            return None
        key = getattr(node, "key", None)
        if key is not None:  # a lazily indexed array: `key` selects from `inner`
            if type(key).__name__ not in _PER_DIMENSION_KEYS:
                return None
            entries = key.tuple
            kept = [axis for axis, entry in enumerate(entries) if not isinstance(entry, (int, np.integer))]
            updated = []
            for axis, positions in where:
                inner_axis = kept[axis]
                selected = _key_positions(entries[inner_axis], inner.shape[inner_axis])
                updated.append((inner_axis, selected if positions is None else _take(selected, positions)))
            where = updated
        elif tuple(inner.shape) != tuple(node.shape):  # a wrapper that reshapes (stacked characters...)
            return None
        node = inner
    else:
        return None
    return node, [(axis, range(node.shape[axis]) if p is None else p) for axis, p in where]


def _boundaries(array: Any, axis: int, multiple: int) -> np.ndarray | int:
    """The stored objects' boundaries along ``axis`` taken every ``multiple``-th: a block size
    for a regular grid, an array of the ends of the blocks for a rectilinear one."""
    stored = array.get_array()
    grid = stored.shards or stored.chunks
    edges = grid[axis]
    if isinstance(edges, (int, np.integer)):
        return int(edges) * multiple
    ends = np.cumsum(np.asarray(edges, dtype=np.int64))
    return ends[multiple - 1 :: multiple]


def _run_lengths(labels: np.ndarray) -> tuple[int, ...]:
    if labels.size == 0:
        return (0,)
    starts = np.flatnonzero(np.diff(labels)) + 1
    return tuple(int(n) for n in np.diff(np.concatenate(([0], starts, [labels.size]))))


def _sizes_along(positions: Positions, boundaries: np.ndarray | int) -> tuple[int, ...]:
    """Block sizes that cut ``positions`` wherever they cross a stored boundary."""
    count = len(positions)
    if count == 0:
        return (0,)
    if isinstance(boundaries, int) and isinstance(positions, range) and positions.step == 1:
        first = min(boundaries - positions.start % boundaries, count)
        full, rest = divmod(count - first, boundaries)
        return (first,) + (boundaries,) * full + ((rest,) if rest else ())
    index = np.arange(positions.start, positions.stop, positions.step) if isinstance(positions, range) else positions
    labels = index // boundaries if isinstance(boundaries, int) else np.searchsorted(boundaries, index, side="right")
    return _run_lengths(labels)


def _regular_sizes(length: int, size: int) -> tuple[int, ...]:
    full, rest = divmod(length, size)
    return (size,) * full + ((rest,) if rest else ()) or (0,)


def _multiple(multiples: Mapping[Hashable, int], dim: Hashable) -> int:
    multiple = multiples.get(dim, 1)
    is_integer = isinstance(multiple, (int, np.integer)) and not isinstance(multiple, bool)
    if not is_integer or not (multiple >= 1 or multiple == -1):
        raise UsageError(
            f"multiples[{dim!r}]: expected the number of stored chunks per block (an integer >= 1), "
            f"or -1 for one block along the dimension; found {multiple!r}"
        )
    return int(multiple)


def stored_block_sizes(
    variable: Any, multiples: Mapping[Hashable, int] | None = None
) -> dict[Hashable, tuple[int, ...]]:
    """The dask block sizes of each dimension of an ``xarray.Variable`` along its stored chunks.

    ``multiples`` maps a dimension to the number of stored objects (shards, or chunks) in one
    block (default 1), or -1 for one block along the dimension. See the module docstring for
    variables whose stored positions are not known.

    Examples
    --------
    >>> import numpy as np, xarray as xr, zarrx
    >>> root = zarrx.create_group("memory://example-stored-blocks", overwrite=True)
    >>> t = root.create_array("t", shape=(100,), chunks=(10,), dtype="f4", dimension_names=["time"])
    >>> ds = xr.open_dataset("memory://example-stored-blocks", engine="zarrx", consolidated=False)
    >>> stored_block_sizes(ds.t.isel(time=slice(5, 40)).variable)
    {'time': (5, 10, 10, 10)}
    >>> stored_block_sizes(ds.t.isel(time=slice(5, 40)).variable, {"time": 2})
    {'time': (15, 20)}
    """
    multiples = dict(multiples or {})
    given = {dim: _multiple(multiples, dim) for dim in variable.dims}
    origin = _stored_positions(variable._data)  # no public way to reach a Variable's lazy data unloaded
    sizes: dict[Hashable, tuple[int, ...]] = {}
    preferred = variable.encoding.get("preferred_chunks", {})
    for axis, dim in enumerate(variable.dims):
        length, multiple = variable.shape[axis], given[dim]
        if multiple == -1:
            sizes[dim] = (length,)
        elif origin is not None:
            backend, where = origin
            stored_axis, positions = where[axis]
            sizes[dim] = _sizes_along(positions, _boundaries(backend, stored_axis, multiple))
        elif isinstance(preferred.get(dim), (int, np.integer)):
            sizes[dim] = _regular_sizes(length, int(preferred[dim]) * multiple)
        else:
            sizes[dim] = (length,)
    return sizes


def check_multiples(multiples: Mapping[Hashable, int], dims: set[Hashable]) -> None:
    """Raise :class:`~zarrx.errors.UsageError` naming the keys of ``multiples`` not in ``dims``."""
    unknown = set(multiples) - dims
    if unknown:
        raise UsageError(
            f"multiples: {sorted(map(str, unknown))} are not dimensions of the data; its dimensions are "
            f"{sorted(map(str, dims))}"
        )


def chunk_variable(variable: Any, multiples: Mapping[Hashable, int] | None = None, **chunk_options: Any) -> Any:
    """The variable as a chunked array whose blocks follow its stored chunks (a chunked variable
    is returned as it is); ``chunk_options`` go to ``Variable.chunk``."""
    if variable.chunks is not None:  # already a dask (or other chunked) array
        return variable
    return variable.chunk(stored_block_sizes(variable, multiples), **chunk_options)


def chunk_dataset(dataset: Any, multiples: Mapping[Hashable, int] | None = None, **chunk_options: Any) -> Any:
    """Every variable of ``dataset`` but its indexes chunked by :func:`chunk_variable`."""
    check_multiples(multiples or {}, set(dataset.dims))
    chunked = {
        name: chunk_variable(variable, multiples, **chunk_options)
        for name, variable in dataset.variables.items()
        if name not in dataset.xindexes
    }
    coords = {name: v for name, v in chunked.items() if name in dataset.coords}
    data = {name: v for name, v in chunked.items() if name not in dataset.coords}
    return dataset.assign_coords(coords).assign(data)
