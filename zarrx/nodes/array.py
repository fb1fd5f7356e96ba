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
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

from zarrx.codecs.sharding import ShardingCodec
from zarrx.codecs.transpose import TransposeCodec
from zarrx.errors import MetadataError, SelectionError, ZarrxError
from zarrx.io.execute import allocate_output, as_array_of, read_into
from zarrx.io.handle import ArrayHandle
from zarrx.io.selection import BasicIndexer, OrthogonalIndexer, VectorizedIndexer, is_basic
from zarrx.io.write import trim_past_edge, write_from
from zarrx.metadata.chunk_grid import parse_shape
from zarrx.metadata.protocol import ArrayMetadataLike
from zarrx.nodes import conveniences
from zarrx.nodes.node import Node
from zarrx.sizes import human_bytes
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

    def _write_metadata(self, metadata: ArrayMetadataLike) -> None:
        super()._write_metadata(metadata)
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
    def oindex(self) -> "_OIndex":
        return _OIndex(self)

    @property
    def vindex(self) -> "_VIndex":
        return _VIndex(self)

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

        The trimmed chunks are prepared first (a chunk that cannot be decoded stops the resize with
        nothing changed), then the new shape is written, then the chunks: a failed metadata write
        leaves the array as it was, shape and data. If the clean-up fails, the error says so: the
        array has its new shape, and calling ``resize`` with that shape again finishes the job.
        """
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        new_shape = parse_shape(list(shape), "shape")
        if len(new_shape) != self.ndim:
            raise MetadataError(f"shape: resize keeps the number of dimensions ({self.ndim}), found {new_shape}")
        # a rectilinear grid too short for the new shape repeats its last edges
        self._resize(new_shape, self._metadata.chunk_grid.resized(new_shape))

    def _resize(self, new_shape: tuple[int, ...], grid: Any) -> None:
        self._check_writable()
        old = self._metadata
        new = old.evolve(shape=new_shape) if grid.is_regular else old.evolve(shape=new_shape, chunk_grid=grid)
        updates: dict[str, bytes] = {}
        deletes: list[str] = []
        if new_shape == old.shape or any(n < o for n, o in zip(new_shape, old.shape)):
            # Shrinking (or a repeated resize, to finish a clean-up that failed): look only at chunks
            # that exist (one listing, not the whole grid). Chunks starting past the new edge go --
            # including stale ones beyond the old grid that another writer left -- and chunks cut
            # by a shrinking edge are trimmed. Growing alone touches no chunk, so append stays cheap.
            # The trimmed chunks are made before anything is written: a chunk that cannot be
            # decoded stops the resize with the array untouched.
            updates, deletes = self._clear_past_edge(new, old.shape)
        self._write_metadata(new)
        try:
            if updates:
                self._store.set_many(updates)
            if deletes:
                self._store.delete_many(deletes)
        except ZarrxError as error:
            raise type(error)(
                f"{self._path or '/'}: resized to {list(new_shape)}, but clearing the chunks past the new "
                f"edge failed; call resize({list(new_shape)}) again to finish ({error})"
            ) from error

    def _clear_past_edge(self, new: ArrayMetadataLike, old_shape: tuple[int, ...]) -> tuple[dict[str, bytes], list[str]]:
        """The chunks to rewrite (trimmed) and to delete so that nothing is stored past ``new``'s
        edge: chunks cut by the edge along the dimensions that shrank -- or along every dimension
        when the shape did not change (a repeated resize) -- and chunks wholly past it."""
        grid, new_shape = new.chunk_grid, new.shape
        cut = [n < o or new_shape == old_shape for n, o in zip(new_shape, old_shape)]
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

    def append(self, data: Any, axis: int = 0) -> tuple[int, ...]:
        """Grow along ``axis`` and write ``data`` into the new part; returns the new shape."""
        data = np.asarray(data, dtype=self.dtype) if not isinstance(data, np.ndarray) else data
        if data.ndim != self.ndim:
            raise SelectionError(f"append needs data with {self.ndim} dimensions, found {data.ndim}")
        if not -self.ndim <= axis < self.ndim:
            raise SelectionError(f"axis {axis} is out of range for an array of {self.ndim} dimensions")
        axis %= self.ndim
        for dim, (have, new) in enumerate(zip(self.shape, data.shape)):
            if dim != axis and have != new:
                raise SelectionError(
                    f"append along axis {axis} needs data shape {self.shape[:axis]}+(n,)+{self.shape[axis + 1:]}, "
                    f"found {data.shape}"
                )
        old_length = self.shape[axis]
        new_shape = tuple(s + data.shape[axis] if d == axis else s for d, s in enumerate(self.shape))
        # on a rectilinear grid whose edges end at the array's end, the data becomes one new chunk
        grid = self._metadata.chunk_grid.with_appended(axis, old_length, data.shape[axis])
        self._resize(new_shape, grid.resized(new_shape))
        region = tuple(slice(old_length, None) if d == axis else slice(None) for d in range(self.ndim))
        self[region] = data
        return new_shape


class _OIndex:
    def __init__(self, array: Array) -> None:
        self._array = array

    def __getitem__(self, selection: Any) -> Any:
        return self._array.get_orthogonal_selection(selection)

    def __setitem__(self, selection: Any, value: Any) -> None:
        self._array.set_orthogonal_selection(selection, value)


class _VIndex:
    def __init__(self, array: Array) -> None:
        self._array = array

    def __getitem__(self, selection: Any) -> np.ndarray:
        return self._array.get_coordinate_selection(selection)

    def __setitem__(self, selection: Any, value: Any) -> None:
        self._array.set_coordinate_selection(selection, value)


@dataclass(frozen=True)
class ArrayInfo:
    name: str
    store: str
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    dtype: str
    data_type: Any
    fill_value: Any
    codecs: list[Any]
    dimension_names: Any
    read_only: bool
    nbytes: int
    nchunks: int
    nbytes_stored: int | None = None
    nchunks_initialized: int | None = None
    shards: tuple[int, ...] | None = None

    @classmethod
    def from_array(cls, array: Array, *, complete: bool) -> "ArrayInfo":
        return cls(
            name=array.name,
            store=repr(array.store),
            shape=array.shape,
            chunks=array.chunks,
            dtype=str(array.dtype),
            data_type=array.metadata.data_type.to_json(),
            fill_value=None if array.fill_value is None else array.metadata.data_type.fill_value_to_json(array.fill_value),
            codecs=array.metadata.codecs.to_json(),
            dimension_names=array.dimension_names,
            read_only=array.read_only,
            nbytes=array.nbytes,
            nchunks=array.nchunks,
            nbytes_stored=array.nbytes_stored if complete else None,
            nchunks_initialized=array.nchunks_initialized if complete else None,
            shards=array.shards,
        )

    def __str__(self) -> str:
        rows = [
            ("Type", "zarrx.Array"),
            ("Name", self.name),
            ("Store", self.store),
            ("Shape", self.shape),
            ("Chunk shape", self.chunks),
            *([("Shard shape", self.shards)] if self.shards is not None else []),
            ("Data type", f"{self.data_type} ({self.dtype})"),
            ("Fill value", self.fill_value),
            ("Codecs", self.codecs),
            ("Dimension names", self.dimension_names),
            ("Read-only", self.read_only),
            ("No. bytes", f"{self.nbytes} ({human_bytes(self.nbytes)})"),
            ("Shards" if self.shards is not None else "Chunks", self.nchunks),  # the objects stored
        ]
        if self.nbytes_stored is not None:
            ratio = f"{self.nbytes / self.nbytes_stored:.1f}" if self.nbytes_stored else "-"
            rows += [
                ("No. bytes stored", f"{self.nbytes_stored} ({human_bytes(self.nbytes_stored)})"),
                ("Storage ratio", ratio),
                ("Shards initialized" if self.shards is not None else "Chunks initialized",
                 f"{self.nchunks_initialized}/{self.nchunks}"),
            ]
        width = max(len(label) for label, _ in rows)
        return "\n".join(f"{label:<{width}} : {value}" for label, value in rows)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))
