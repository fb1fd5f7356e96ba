"""zarrx and dask: Zarr arrays as dask arrays, dask arrays written to Zarr (graph building only).

:func:`from_zarr` / :func:`array_to_dask` (:mod:`zarrx.dask.read`) make one task per stored
object, in ordinary dask arrays that cost O(ndim) to build whatever the number of chunks, with
``region=`` for a graph of a selection's blocks only (:mod:`zarrx.dask.lazy`,
:mod:`zarrx.dask.layout`, :mod:`zarrx.dask.axes`) and an input expression for dask's array
expressions (:mod:`zarrx.dask.expression`); :func:`to_zarr`
(:mod:`zarrx.dask.write`) writes one block per task, with the blocks checked against the chunk
grid (:mod:`zarrx.dask.alignment`). Tasks hold an
:class:`~zarrx.io.handle.ArrayHandle` and run :mod:`zarrx.io`, as ``arr[...]`` does.
"""

from zarrx.dask.read import BlockSelections, array_to_dask, from_zarr
from zarrx.dask.write import to_zarr
from zarrx.io.handle import ArrayHandle

__all__ = ["ArrayHandle", "BlockSelections", "array_to_dask", "from_zarr", "to_zarr"]
