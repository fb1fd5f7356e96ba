"""The user-facing Zarr array.

:class:`Array` binds a store, a node path and its metadata (any format). Indexing
follows NumPy: ``arr[...]`` takes ints, slices with any step and Ellipsis (and,
like NumPy, integer/boolean arrays, then as outer indexing), ``arr.oindex[...]``
is outer (orthogonal) indexing, ``arr.vindex[...]`` coordinate indexing. Every read
and write is planned and run by :mod:`zarrx.io` on the array's
:class:`~zarrx.io.handle.ArrayHandle`.
"""

from __future__ import annotations

import math
from typing import Any, Iterator

import numpy as np

from zarrx.codecs.sharding import ShardingCodec
from zarrx.codecs.transpose import TransposeCodec
from zarrx.errors import MetadataError, SelectionError, ZarrxError
from zarrx.io.copy import copy_into, copy_region, is_lazy_array
from zarrx.io.sources import reads_array
from zarrx.nodes.indexing import OIndex, VIndex
from zarrx.io.execute import allocate_output, as_array_of, read_into
from zarrx.io.handle import ArrayHandle
from zarrx.io.selection import BasicIndexer, OrthogonalIndexer, VectorizedIndexer, is_basic
from zarrx.io.write import trim_past_edge, write_from
from zarrx.metadata.chunk_grid import parse_shape
from zarrx.metadata.protocol import ArrayMetadataLike
from zarrx.nodes import conveniences
from zarrx.nodes.array_info import ArrayInfo
from zarrx.nodes.node import Node
from zarrx.storage.store import Store

__all__ = ["Array", "ArrayInfo"]


class Array(Node[ArrayMetadataLike]):
    """A Zarr array in a store.

    Open or create one with :func:`zarrx.open_array` / :func:`zarrx.create_array`.

    Examples
    --------
    >>> import zarrx, numpy as np
    >>> arr = zarrx.create_array({}, shape=(4, 6), chunks=(2, 3), dtype="int32", fill_value=0)
    >>> arr[1:3, ::2] = 7
    >>> arr[:, 0]
    array([0, 7, 7, 0], dtype=int32)
    """

    _kind = "array"

    def __init__(
        self,
        store: Store,
        path: str,
        metadata: ArrayMetadataLike,
        *,
        read_only: bool = False,
        write_empty_chunks: bool = False,
    ) -> None:
        super().__init__(store, path, metadata, read_only=read_only)
        self._handle = ArrayHandle(store, path, metadata, write_empty_chunks)

    @property
    def write_empty_chunks(self) -> bool:
        """Whether chunks that are all fill value are stored (by default they are left out)."""
        return self._handle.write_empty_chunks

    @write_empty_chunks.setter
    def write_empty_chunks(self, value: bool) -> None:
        self._handle = self._handle.evolve(write_empty_chunks=bool(value))

    @property
    def handle(self) -> ArrayHandle:
        """The array's :class:`~zarrx.io.handle.ArrayHandle`: what reads, writes and dask tasks use."""
        return self._handle

    def _write_metadata(self, metadata: ArrayMetadataLike, change: Any = None, now: bool = False) -> None:
        # a shape change keeps the attributes stored now (another process may have set some)
        super()._write_metadata(metadata, change or (lambda stored: metadata.evolve(attributes=stored.attributes)), now)
        self._handle = self._handle.evolve(metadata=self._metadata)

    # -- description ------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return self._metadata.shape

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d array")
        return self.shape[0]

    @property
    def dtype(self) -> np.dtype:
        return self._metadata.dtype

    @property
    def nbytes(self) -> int:
        """Bytes of the whole array in memory (fixed-size types; variable-length count their pointers)."""
        return self.size * self.dtype.itemsize

    @property
    def chunks(self) -> tuple[int, ...]:
        """The shape of the chunks that are encoded one by one (inner chunks of a sharded array); on a
        rectilinear grid, the edge lengths of each dimension's chunks (dask's form: ``((3, 3, 4), (5,))``)."""
        pipeline = self._metadata.codecs
        if not isinstance(pipeline.array_bytes, ShardingCodec):
            return self._metadata.chunks
        inner = pipeline.array_bytes.chunk_shape
        # transposes before the sharding codec permute the shard; report inner chunks in array order
        for codec in reversed(pipeline.array_array):
            if not isinstance(codec, TransposeCodec):
                return self._metadata.chunks
            order = codec.permutation(len(inner))
            restored = [0] * len(inner)
            for position, axis in enumerate(order):
                restored[axis] = inner[position]
            inner = tuple(restored)
        return inner

    @property
    def shards(self) -> tuple[int, ...] | None:
        """The shard shape (the stored objects' chunk grid; edge lengths per dimension on a rectilinear
        grid), or None when the array is not sharded."""
        return self._metadata.chunks if isinstance(self._metadata.codecs.array_bytes, ShardingCodec) else None

    @property
    def fill_value(self) -> Any:
        """The fill value the metadata states; None for a Zarr v2 ``null`` (missing chunks then
        read as the data type's default, as in zarr-python)."""
        return self._metadata.declared_fill_value

    @property
    def dimension_names(self) -> tuple[str | None, ...] | None:
        return self._metadata.dimension_names

    @property
    def codecs(self) -> tuple:
        pipeline = self._metadata.codecs
        return (*pipeline.array_array, pipeline.array_bytes, *pipeline.bytes_bytes)

    @property
    def nchunks(self) -> int:
        return self._metadata.nchunks

    @property
    def cdata_shape(self) -> tuple[int, ...]:
        return self._metadata.grid_shape

    @property
    def nchunks_initialized(self) -> int:
        return sum(1 for _ in self._stored_chunk_keys())

    @property
    def nbytes_stored(self) -> int:
        keys = [*self._metadata.metadata_keys(self._path), *self._stored_chunk_keys()]
        return sum(len(v) for v in self._store.get_many(keys).values() if v is not None)

    def _stored_chunks(self) -> Iterator[tuple[str, tuple[int, ...]]]:
        """``(key, chunk_coords)`` of every stored chunk, found by one listing (any coordinates)."""
        prefix = self._metadata.chunk_prefix(self._path)
        decode = self._metadata.chunk_key_encoding.decode
        for key in self._store.list_prefix(prefix):
            coords = decode(key[len(prefix) :])
            if coords is not None and len(coords) == self.ndim:
                yield key, coords

    def _stored_chunk_keys(self) -> Iterator[str]:
        grid = self._metadata.grid_shape
        for key, coords in self._stored_chunks():
            if all(c < g for c, g in zip(coords, grid)):
                yield key

    def __repr__(self) -> str:
        return f"{super().__repr__()[:-1]} shape={self.shape} dtype={self.dtype}>"

    @property
    def info(self) -> "ArrayInfo":
        """A summary that needs no store access."""
        return ArrayInfo.from_array(self, complete=False)

    def info_complete(self) -> "ArrayInfo":
        """:attr:`info` plus stored bytes and initialized chunks (lists the store)."""
        return ArrayInfo.from_array(self, complete=True)

    # -- reading and writing -------------------------------------------------------------
    def __getitem__(self, selection: Any) -> Any:
        if is_basic(selection):
            return self.get_basic_selection(selection)
        return self.get_orthogonal_selection(selection)

    def _scalar_or_array(self, out: np.ndarray, selection: Any) -> Any:
        # like NumPy: integer-only selections give a scalar, anything with Ellipsis or a slice an array
        items = selection if isinstance(selection, tuple) else (selection,)
        if out.ndim == 0 and Ellipsis not in items:
            return out[()]
        return out

    def __setitem__(self, selection: Any, value: Any) -> None:
        """``arr[selection] = value``. A lazy ``value`` (a zarrx, zarr-python or dask array: see
        :func:`zarrx.io.copy.is_lazy_array`) of the selection's shape, written into a box (slices
        of step 1, ``...``), is copied a few stored objects at a time, never read whole
        (:mod:`zarrx.io.copy`): ``dst[...] = src`` is a copy with bounded memory, where
        ``dst[...] = src[...]`` reads all of ``src`` first, and so does a ``src`` that reads this
        array itself (``arr[1:] = zarrx.from_zarr(arr.store)[:-1]``:
        :func:`zarrx.io.sources.reads_array`), which a step by step copy would overwrite
        before reading it.

        >>> import zarrx
        >>> src = zarrx.create_array({}, shape=(4, 4), chunks=(2, 2), dtype="u1", fill_value=0)
        >>> src[1:3, 1:3] = 5
        >>> dst = zarrx.create_array({}, shape=(4, 4), chunks=(4, 1), dtype="u1", fill_value=0)
        >>> dst[...] = src; dst[:, 1]
        array([0, 5, 5, 0], dtype=uint8)
        """
        if is_lazy_array(value) and is_basic(selection):
            region = copy_region(selection, self.shape)
            fits = region is not None and tuple(value.shape) == tuple(r.stop - r.start for r in region)
            if fits and not reads_array(value, self._handle):
                self._check_writable()
                copy_into(self._handle, value, region)
                return
            value = value[...]  # read whole (an array-like need not convert to NumPy itself)
        if is_basic(selection):
            self.set_basic_selection(selection, value)
        else:
            self.set_orthogonal_selection(selection, value)

    def _indexer(self, kind: type, selection: Any) -> Any:
        return kind(selection, self.shape, self._handle.io_chunk_shape)

    def get_basic_selection(self, selection: Any = Ellipsis) -> Any:
        return self._scalar_or_array(self._read(self._indexer(BasicIndexer, selection)), selection)

    def set_basic_selection(self, selection: Any, value: Any) -> None:
        self._write(self._indexer(BasicIndexer, selection), value)

    def get_orthogonal_selection(self, selection: Any) -> Any:
        return self._scalar_or_array(self._read(self._indexer(OrthogonalIndexer, selection)), selection)

    def set_orthogonal_selection(self, selection: Any, value: Any) -> None:
        self._write(self._indexer(OrthogonalIndexer, selection), value)

    def get_coordinate_selection(self, selection: Any) -> np.ndarray:
        indexer = self._indexer(VectorizedIndexer, selection)
        out = allocate_output((math.prod(indexer.shape),), self.dtype, self._path)
        read_into(self._handle, indexer, out)
        return out.reshape(indexer.shape)

    def set_coordinate_selection(self, selection: Any, value: Any) -> None:
        indexer = self._indexer(VectorizedIndexer, selection)
        value = as_array_of(value, self.dtype, indexer.shape).reshape(-1)
        self._check_writable()
        write_from(self._handle, indexer, value)

    @property
    def oindex(self) -> OIndex:
        return OIndex(self)

    @property
    def vindex(self) -> VIndex:
        return VIndex(self)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        data = self[...]
        data = np.asarray(data)
        return data if dtype is None else data.astype(dtype)

    def _read(self, indexer: BasicIndexer | OrthogonalIndexer) -> np.ndarray:
        out = allocate_output(indexer.shape, self.dtype, self._path)  # checks the size first
        return read_into(self._handle, indexer, out)

    def _write(self, indexer: BasicIndexer | OrthogonalIndexer, value: Any) -> None:
        self._check_writable()
        write_from(self._handle, indexer, as_array_of(value, self.dtype, indexer.shape))

    def to_dask(self, chunks: Any = None, *, region: Any = None) -> Any:
        """A lazy dask array, one task per chunk (per shard when sharded); ``region`` (a basic
        selection: integers, slices, ``Ellipsis``, or ``{dimension name: slice}``) makes the
        array of that selection only, its graph the size of the selection; see
        :func:`zarrx.dask.array_to_dask`."""
        return conveniences.call("to_dask", self, chunks, region=region)

    def explain(self, selection: Any = Ellipsis, *, indexing: str = "auto", read_index: bool = True) -> Any:
        """The store requests ``self[selection]`` would make, without reading any chunk; see
        :func:`zarrx.tools.explain.explain`.

        >>> import zarrx
        >>> array = zarrx.create_array({}, shape=(8,), chunks=(4,), dtype="u1")
        >>> array[:] = 1
        >>> [request.key for request in array.explain(slice(0, 5)).requests]
        ['c/0', 'c/1']
        """
        return conveniences.call("explain", self, selection, indexing=indexing, read_index=read_index)

    # -- metadata changes ------------------------------------------------------------------
    def resize(self, *shape: Any) -> None:
        """Change the shape. Chunks wholly outside the new shape are deleted, and the part of a
        boundary chunk past the new edge is reset to the fill value, so growing the array later
        shows fill values there, never stale data.

        The order keeps every reader's view whole -- the old array or the resized one, never a
        mix -- when the process is killed at any point:

        * **Growing**, what lies past the old edge (stored chunks there, and the part of boundary
          chunks past it, left by an append that was interrupted) is cleared first, while no
          reader sees it, and then the new shape is written (the consolidated copies, then
          ``zarr.json``: see :mod:`zarrx.nodes.consolidated`).
        * **Shrinking**, the trimmed chunks are prepared first (a chunk that cannot be decoded
          stops the resize with nothing changed), then the new shape is written, consolidated
          copies included, and only then are chunks trimmed and deleted: a failed metadata write
          leaves the array as it was, shape and data. If the clean-up fails, the error says so:
          the array has its new shape, and calling ``resize`` with that shape again finishes the
          job.

        >>> import zarrx
        >>> arr = zarrx.create_array({}, shape=(6,), chunks=(4,), dtype="int8", fill_value=0)
        >>> arr[:] = 5
        >>> arr.resize(3); arr.resize(6)
        >>> arr[:]
        array([5, 5, 5, 0, 0, 0], dtype=int8)
        """
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        new_shape = parse_shape(list(shape), "shape")
        if len(new_shape) != self.ndim:
            raise MetadataError(f"shape: resize keeps the number of dimensions ({self.ndim}), found {new_shape}")
        # a rectilinear grid too short for the new shape repeats its last edges
        self._resize(new_shape, self._metadata.chunk_grid.resized(new_shape))

    def _resized_metadata(self, new_shape: tuple[int, ...], grid: Any) -> ArrayMetadataLike:
        old = self._metadata
        return old.evolve(shape=new_shape) if grid.is_regular else old.evolve(shape=new_shape, chunk_grid=grid)

    def _resize(self, new_shape: tuple[int, ...], grid: Any) -> None:
        self._check_writable()
        old = self._metadata
        new = self._resized_metadata(new_shape, grid)
        grows = [n > o for n, o in zip(new_shape, old.shape)]
        if any(grows):
            # nothing is shown past the old edge yet: clear what an interrupted append left there
            updates, deletes = self._clear_past_edge(old, grows)
            unchanged = {key for key, raw in self._store.get_many(list(updates)).items() if raw == updates[key]}
            self._apply({key: raw for key, raw in updates.items() if key not in unchanged}, deletes, new_shape, shown=False)
        updates, deletes = {}, []
        if new_shape == old.shape or any(n < o for n, o in zip(new_shape, old.shape)):
            # Shrinking (or a repeated resize, to finish a clean-up that failed): look only at chunks
            # that exist (one listing, not the whole grid). Chunks starting past the new edge go --
            # including stale ones beyond the old grid that another writer left -- and chunks cut
            # by a shrinking edge are trimmed. They are made before anything is written: a chunk that
            # cannot be decoded stops the resize with the array untouched.
            cut = [n < o or new_shape == old.shape for n, o in zip(new_shape, old.shape)]
            updates, deletes = self._clear_past_edge(new, cut)
        if self._store.transactional:  # an Icechunk session: nothing shows before its commit, and it
            self._apply(updates, deletes, new_shape, shown=False)  # deletes only chunks inside the shape
            self._write_metadata(new, now=True)
            return
        self._write_metadata(new, now=bool(updates or deletes))  # every copy shows the new shape before
        self._apply(updates, deletes, new_shape, shown=True)

    def _apply(self, updates: dict[str, bytes], deletes: list[str], new_shape: tuple[int, ...], shown: bool) -> None:
        try:
            if updates:
                self._store.set_many(updates)
            if deletes:
                self._store.delete_many(deletes)
        except ZarrxError as error:
            state = "resized to" if shown else "not resized yet to"
            raise type(error)(
                f"{self._path or '/'}: {state} {list(new_shape)}, but clearing the chunks past the "
                f"edge failed; call resize({list(new_shape)}) again to finish ({error})"
            ) from error

    def _clear_past_edge(self, new: ArrayMetadataLike, cut: list[bool]) -> tuple[dict[str, bytes], list[str]]:
        """The chunks to rewrite (trimmed) and to delete so that nothing is stored past ``new``'s
        edge: chunks cut by the edge along the dimensions ``cut`` says, and chunks wholly past it."""
        grid, new_shape = new.chunk_grid, new.shape
        deletes, to_trim = [], []
        for key, coords in self._stored_chunks():
            starts = grid.chunk_starts(coords)  # None: a chunk past the grid's declared edges
            if starts is None or any(start >= length for start, length in zip(starts, new_shape)):
                deletes.append(key)
                continue
            chunks = grid.chunk_shape_at(coords)
            if any(dim_cut and start + size > length
                     for dim_cut, start, size, length in zip(cut, starts, chunks, new_shape)):
                to_trim.append(coords)
        updates, fill_deletes = trim_past_edge(self._handle.evolve(metadata=new), to_trim)
        return updates, deletes + fill_deletes

    def staged(self, *shape: Any) -> "Array":
        """This array grown to ``shape`` in memory only: write the new part through it, then
        :meth:`commit` it -- new chunks before the metadata that shows them, so an interrupted
        append is never seen (readers see the old shape until the commit).

        Every element of the new part must be written (as :meth:`append` does): what was stored
        past the old edge before is not cleared.

        >>> import zarrx
        >>> arr = zarrx.create_array({}, shape=(2,), chunks=(2,), dtype="int8", fill_value=0)
        >>> grown = arr.staged(4)
        >>> grown[2:] = [7, 8]
        >>> zarrx.open_array(arr.store).shape     # not shown yet
        (2,)
        >>> grown.commit()
        >>> zarrx.open_array(arr.store)[:]
        array([0, 0, 7, 8], dtype=int8)
        """
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        new_shape = parse_shape(list(shape), "shape")
        if len(new_shape) != self.ndim or any(n < o for n, o in zip(new_shape, self.shape)):
            raise MetadataError(f"shape: a staged array grows, keeping {self.ndim} dimensions; found {new_shape} for {self.shape}")
        return self._staged(self._resized_metadata(new_shape, self._metadata.chunk_grid.resized(new_shape)))

    def _staged(self, metadata: ArrayMetadataLike) -> "Array":
        self._check_writable()
        return Array(self._store, self._path, metadata, write_empty_chunks=self.write_empty_chunks)

    def commit(self) -> None:
        """Store this array's metadata as it is in memory (a :meth:`staged` array's new shape): its
        consolidated copies, then its ``zarr.json`` (the attributes stored now are kept).

        >>> import zarrx
        >>> arr = zarrx.create_array({}, shape=(1,), dtype="int8")
        >>> arr.staged(3).commit()
        >>> zarrx.open_array(arr.store).shape
        (3,)
        """
        self._write_metadata(self._metadata)

    def append(self, data: Any, axis: int = 0) -> tuple[int, ...]:
        """Grow along ``axis`` and write ``data`` into the new part; returns the new shape.

        The new chunks are written first, through the grown metadata held in memory, and the new
        shape is stored last (the consolidated copies, then ``zarr.json``): a process killed on
        the way leaves the old array as it was (or, killed between the two, the copies already
        grown), and running the append again on the array as its ``zarr.json`` says completes
        it. A dask array is written block by block in parallel (``zarrx.dask``), in the same order.
        """
        if hasattr(data, "__dask_graph__"):  # the dask collection protocol: written in parallel
            return conveniences.call("append_dask", self, data, axis)
        data = np.asarray(data, dtype=self.dtype) if not isinstance(data, np.ndarray) else data
        staged, region = self.staged_append(data.shape, axis)
        staged[region] = data
        staged.commit()
        self._metadata, self._handle = staged._metadata, self._handle.evolve(metadata=staged._metadata)
        return staged.shape

    def staged_append(self, shape: tuple[int, ...], axis: int = 0) -> tuple["Array", tuple[slice, ...]]:
        """The array grown to take data of ``shape`` appended along ``axis`` (in memory only, see
        :meth:`staged`), and the region of the new part in it.

        >>> import zarrx
        >>> arr = zarrx.create_array({}, shape=(2, 3), dtype="int8")
        >>> grown, region = arr.staged_append((4, 3), axis=0)
        >>> grown.shape, region
        ((6, 3), (slice(2, None, None), slice(None, None, None)))
        """
        if len(shape) != self.ndim:
            raise SelectionError(f"append needs data with {self.ndim} dimensions, found {len(shape)}")
        if not -self.ndim <= axis < self.ndim:
            raise SelectionError(f"axis {axis} is out of range for an array of {self.ndim} dimensions")
        axis %= self.ndim
        for dim, (have, new) in enumerate(zip(self.shape, shape)):
            if dim != axis and have != new:
                raise SelectionError(
                    f"append along axis {axis} needs data shape {self.shape[:axis]}+(n,)+{self.shape[axis + 1:]}, "
                    f"found {tuple(shape)}"
                )
        old_length = self.shape[axis]
        new_shape = tuple(s + shape[axis] if d == axis else s for d, s in enumerate(self.shape))
        # on a rectilinear grid whose edges end at the array's end, the data becomes one new chunk
        grid = self._metadata.chunk_grid.with_appended(axis, old_length, shape[axis])
        region = tuple(slice(old_length, None) if d == axis else slice(None) for d in range(self.ndim))
        staged = self._staged(self._resized_metadata(new_shape, grid.resized(new_shape)))
        if self.store.transactional:  # an Icechunk session: nothing shows before its commit, and chunks
            staged.commit()  # past the stored shape are refused, so the shape goes first
        return staged, region

