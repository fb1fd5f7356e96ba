"""Appending a dask array to a Zarr array: the new chunks in parallel, then the metadata.

``arr.append(x)`` with a dask array ``x`` (and the xarray writer's ``append_dim``) writes every
block of ``x`` in its own task through the array grown in memory (:meth:`zarrx.Array.staged_append`)
-- so the tasks write chunks past the stored shape with zarrx's normal write path -- and stores
the new shape only after every block is written (:func:`commit_after`). A run killed before that
leaves the array as it was; running the append again completes it.
"""

from __future__ import annotations

import uuid
from typing import Any

import dask

from zarrx.dask.write import to_zarr
from zarrx.nodes.array import Array
from zarrx.nodes.consolidated import write_many

__all__ = ["append_dask", "commit_after", "commit"]


def append_dask(array: Array, x: Any, axis: int = 0, **to_zarr_kwargs: Any) -> tuple[int, ...]:
    """Append the dask array ``x`` to ``array`` along ``axis``; returns the new shape. Blocks that
    would share a stored chunk are rechunked onto the grid (``align_chunks=True``) unless
    ``to_zarr_kwargs`` say otherwise.

    Examples
    --------
    >>> import dask.array as da, zarrx
    >>> arr = zarrx.create_array({}, shape=(4,), chunks=(2,), dtype="int64", fill_value=0)
    >>> append_dask(arr, da.arange(4, chunks=2), axis=0)
    (8,)
    >>> zarrx.open_array(arr.store)[:]
    array([0, 0, 0, 0, 0, 1, 2, 3])
    """
    staged, region = array.staged_append(x.shape, axis)
    to_zarr_kwargs.setdefault("align_chunks", True)  # blocks straddling a chunk are rechunked onto the grid
    dask.compute(commit_after([to_zarr(x, staged, region=region, compute=False, **to_zarr_kwargs)], [staged]))
    array._metadata = staged.metadata
    array._handle = array.handle.evolve(metadata=staged.metadata)
    return staged.shape


def commit_after(writes: list[Any], staged: list[Array]) -> Any:
    """A dask ``Delayed`` that stores the metadata of the ``staged`` arrays (:func:`commit`) once every
    one of the lazy ``writes`` (dask arrays, as ``zarrx.to_zarr(..., compute=False)`` returns, or
    Delayeds) is done.

    Examples
    --------
    >>> import dask, dask.array as da, zarrx
    >>> arr = zarrx.create_array({}, shape=(2,), chunks=(2,), dtype="int64", fill_value=0)
    >>> grown, region = arr.staged_append((2,))
    >>> finish = commit_after([zarrx.to_zarr(da.ones(2, chunks=2, dtype="int64"), grown, region=region,
    ...                                      compute=False)], [grown])
    >>> zarrx.open_array(arr.store).shape   # nothing shown before the writes ran
    (2,)
    >>> _ = dask.compute(finish)
    >>> zarrx.open_array(arr.store)[:]
    array([0, 0, 1, 1])
    """
    parts = [
        part for write in writes
        for part in (write.to_delayed(optimize_graph=False).ravel().tolist() if hasattr(write, "to_delayed") else [write])
    ]  # fmt: skip
    return dask.delayed(_commit, pure=False, name=f"zarrx-commit-{uuid.uuid4().hex}")(staged, parts)


def commit(staged: list[Array]) -> None:
    """Store the metadata of the ``staged`` arrays: the consolidated copies first, rewritten once
    for all (a reader of the copies sees every array grown, or none), then each ``zarr.json``.

    Examples
    --------
    >>> import zarrx
    >>> arrays = [zarrx.create_array({}, shape=(1,), dtype="int8") for _ in range(2)]
    >>> commit([array.staged(2) for array in arrays])
    >>> [zarrx.open_array(array.store).shape for array in arrays]
    [(2,), (2,)]
    """
    by_store: dict[int, list[Array]] = {}
    for array in staged:
        by_store.setdefault(id(array.store), []).append(array)
    for arrays in by_store.values():
        write_many(arrays[0].store, [(array.path, array.metadata) for array in arrays])


def _commit(staged: list[Array], written: list[Any]) -> None:
    commit(staged)
