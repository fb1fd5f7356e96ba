"""Dask arrays written into an Icechunk session from the processes of a cluster: :func:`to_icechunk`.

A writable Icechunk session holds its changes in the process that made them; a pickled copy
(``session.fork()``, the only kind Icechunk pickles) keeps the writes made with it until it is
merged back. So :func:`zarrx.to_zarr` refuses to send its write tasks with a session's store to
another process, and :func:`to_icechunk` does what Icechunk asks of a distributed write
(as ``icechunk.dask.store_dask`` does for zarr-python arrays):

1. the array is created in the session (or, with ``region``, checked there), and ``x``'s blocks
   aligned on its chunk grid, by :func:`zarrx.to_zarr` itself -- whose own write graph is never
   computed;
2. the session is forked; each write task writes its block with zarrx's write path into the
   copy of the fork it received, and returns that copy;
3. the copies are merged in a tree (``split_every`` at a time, in the workers) and the result
   merged into ``session``, ready for ``session.commit(...)``.

icechunk is never imported here: the session's own methods (``fork``, ``merge``) are all it uses.
This module is not imported by ``import zarrx``.
"""

from __future__ import annotations

from typing import Any

import dask
import dask.array as da
import numpy as np

from zarrx.dask.write import to_zarr, write_block
from zarrx.errors import UsageError
from zarrx.io.handle import ArrayHandle
from zarrx.nodes.api import open_array
from zarrx.storage.zarr_python import ZarrPythonStore

__all__ = ["to_icechunk"]


class _ForkStore(ZarrPythonStore):
    """A forked session's store whose write tasks may go to other processes: each task returns
    its copy of the fork, which :func:`to_icechunk` merges (so no write is lost)."""

    process_local = False  # type: ignore[assignment]

    @property
    def session(self) -> Any:
        """The (copy of the) forked session this store writes into."""
        return self._store.session


def to_icechunk(
    x: Any, session: Any, path: str = "", *, region: tuple[slice, ...] | None = None, split_every: int = 8, **kwargs: Any
) -> None:
    """Write the dask array ``x`` into the Icechunk ``session`` at ``path``, from any scheduler
    (a distributed cluster's processes included), then merge the workers' writes into ``session``.

    Parameters
    ----------
    x
        A dask array (anything else goes through ``dask.array.asarray``).
    session
        A writable ``icechunk.Session`` (not its store); commit it afterwards.
    path, region, kwargs
        As for :func:`zarrx.to_zarr`: without ``region`` a new array (``chunks=``, ``shards=``,
        ``overwrite=`` ... in ``kwargs``), with it a part of an existing one.
    split_every
        How many forks one task merges.

    Examples
    --------
    >>> # not run: needs icechunk (Python 3.12+) -- tests/test_icechunk.py runs it
    >>> # repo = icechunk.Repository.create(icechunk.local_filesystem_storage(folder))
    >>> # session = repo.writable_session("main")
    >>> # to_icechunk(da.ones((100, 100), chunks=10), session, "ones")
    >>> # session.commit("ones, written by the cluster")
    """
    if not callable(getattr(session, "fork", None)) or not callable(getattr(session, "merge", None)):
        raise UsageError(f"to_icechunk writes into an Icechunk session (with fork and merge), found {session!r}")
    if split_every < 2:
        raise UsageError(f"split_every: at least 2 forks per merge, found {split_every}")
    session_store = ZarrPythonStore(session.store)
    # created (or checked) in the session, blocks aligned: to_zarr's graph is never computed
    planned = to_zarr(x, session_store, path, region=region, compute=False, **kwargs)
    array = open_array(session_store, path, mode="r")
    offsets = _offsets(region, array.shape)
    x = da.asarray(x)
    if x.chunks != planned.chunks:
        x = x.rechunk(planned.chunks)  # the rechunk to_zarr chose
    fork = session.fork()
    handle = open_array(_ForkStore(fork.store), path, mode="r+").handle.evolve(for_writing=True)
    written = x.map_blocks(
        _write_and_return_fork, handle, offsets, dtype=object, meta=np.empty((0,) * x.ndim, dtype=object),
        chunks=tuple((1,) * len(sizes) for sizes in x.chunks), name=f"zarrx-icechunk-{dask.base.tokenize(x, fork)}",
    )  # fmt: skip
    level = written.to_delayed(optimize_graph=False).ravel().tolist()
    while len(level) > 1:
        level = [dask.delayed(_merge)(*level[i : i + split_every]) for i in range(0, len(level), split_every)]
    (merged,) = dask.compute(*level)
    session.merge(merged.item())


def _offsets(region: tuple[slice, ...] | None, shape: tuple[int, ...]) -> tuple[int, ...]:
    """Where ``region`` starts along each axis (to_zarr has checked it)."""
    items = () if region is None else (region if isinstance(region, tuple) else (region,))
    items = items + (slice(None),) * (len(shape) - len(items))
    return tuple(item.indices(length)[0] for item, length in zip(items, shape))


def _write_and_return_fork(
    block: np.ndarray, handle: ArrayHandle, offsets: tuple[int, ...], block_info: Any = None
) -> np.ndarray:
    """A task: write ``block`` with zarrx's write path; return (in an object array) the copy of
    the fork it was written into."""
    selection = tuple(slice(start, stop) for start, stop in block_info[0]["array-location"])
    write_block(block, handle, selection, offsets)
    result = np.empty((1,) * block.ndim, dtype=object)
    result[(0,) * block.ndim] = handle.store.session
    return result


def _merge(*forks: np.ndarray) -> np.ndarray:
    """The first of ``forks`` with the others merged into it (a fork met twice, merged once)."""
    sessions = list({id(item): item for fork in forks for item in fork.ravel()}.values())
    first, *rest = sessions
    if rest:
        first.merge(*rest)
    result = np.empty((1,) * forks[0].ndim, dtype=object)
    result[(0,) * forks[0].ndim] = first
    return result
