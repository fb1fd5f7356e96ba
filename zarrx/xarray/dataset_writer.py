"""Writing one Dataset into one group: the steps of xarray's ``ZarrStore.store`` on zarrx.

:class:`DatasetWriter` encodes the variables with xarray's own CF coding (existing variables
with the encoding they were stored with), creates the arrays with xarray's zarr engine's fill
value and dimension rules, checks regions and appends, and writes the data -- NumPy at once,
dask block by block through :func:`zarrx.to_zarr`. :mod:`zarrx.xarray.writer` holds the public
``to_zarr`` functions, the modes and the target group; its docstring describes the whole write.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from xarray import coding, conventions
from xarray.backends.zarr import (
    FillValueCoder,
    encode_zarr_variable,
    extract_zarr_variable_encoding,
)
from xarray import Dataset, Variable
from xarray.namedarray.pycompat import is_chunked_array

from zarrx.dask.append import commit, commit_after
from zarrx.dask.write import dask_chunk_grid
from zarrx.dask.write import to_zarr as dask_to_zarr
from zarrx.errors import ChunkAlignmentError, NameNotFoundError, UsageError, UsageTypeError
from zarrx.metadata.rectilinear import is_edge_list
from zarrx.nodes.array import Array
from zarrx.nodes.group import Group
from zarrx.xarray.store import DIMENSION_KEY, ZarrxDataStore
from zarrx.xarray.encoding import codecs_argument
from zarrx.xarray.validation import (
    check_append_dtype,
    check_encoding_argument,
    check_names,
    check_region_on_grid,
    json_attributes,
    match_stored_dims,
    store_none_name,
)

__all__ = ["DatasetWriter", "WriteOptions"]

@dataclass
class WriteOptions:
    """What one call to ``to_zarr`` asks for, shared by every group it writes."""

    mode: str
    append_dim: Hashable | None
    safe_chunks: bool
    align_chunks: bool
    write_empty_chunks: bool | None
    #: the data writes of dask-backed variables, computed together at the end
    writes: list[Any] = field(default_factory=list)
    #: new dask-backed variables with irregular blocks get them as a rectilinear chunk grid
    rectilinear: bool = False

    @property
    def align(self) -> str:
        return "rechunk" if self.align_chunks or not self.safe_chunks else "error"


class DatasetWriter:
    """Writes one Dataset into one (writable) group; the steps of xarray's ``ZarrStore.store``."""

    def __init__(self, group: Group, options: WriteOptions, *, append_dim: Hashable | None) -> None:
        self.group = group
        self.options = options
        self.mode = options.mode
        self.append_dim = append_dim
        # the fill value rules xarray applies when writing: the Zarr fill_value is the CF mask in v2
        self.reader = ZarrxDataStore(group)
        self.zarr_format = self.reader.zarr_format
        self.existing: dict[str, Array] = {} if self.mode == "w" else self.reader.arrays
        self.region: dict[Hashable, slice] | None = None
        #: appended arrays, grown in memory only until their data is written
        self.staged: list[Array] = []

    # -- checks ---------------------------------------------------------------------------------
    def _prepare_region(self, dataset: Dataset, region: Any) -> Dataset:
        if region is None:
            return dataset
        if isinstance(region, str) and region == "auto":
            region = dict.fromkeys(dataset.dims, "auto")
        if not isinstance(region, Mapping):
            raise UsageTypeError(
                f"``region`` must be a dict, got {type(region)}: a dict of slices by dimension (or 'auto'), "
                f"found {region!r}"
            )
        region = dict(region)
        if any(isinstance(value, str) and value == "auto" for value in region.values()):
            if self.mode not in ("r+", "a"):
                raise UsageError(
                    f"``mode`` must be 'r+' or 'a' when using ``region='auto'``, got {self.mode!r}: the region is "
                    f"found in the stored coordinates of {self.group.name!r}"
                )
            region = self._auto_region(dataset, region)
        for dim, value in region.items():
            if dim not in dataset.dims:
                raise UsageError(
                    f"all keys in ``region`` are not in Dataset dimensions, got {list(region)} and "
                    f"{list(dataset.dims)}: {dim!r} is not a dimension of the dataset"
                )
            if not isinstance(value, slice):
                raise UsageTypeError(
                    f"all values in ``region`` must be slice objects, got region={region}: dimension {dim!r} has "
                    f"{value!r}"
                )
            if value.step not in (1, None):
                raise UsageError(
                    f"step on all slices in ``region`` must be 1 or None, got region={region}: dimension {dim!r} "
                    f"has step {value.step}"
                )
        unrelated = [name for name, var in dataset.variables.items() if not set(region).intersection(var.dims)]
        if region and unrelated:
            raise UsageError(
                f"when setting `region` explicitly in to_zarr(), all variables in the dataset to write must have "
                f"at least one dimension in common with the region's dimensions {list(region)}, but {unrelated!r} "
                f"do not; drop them first with .drop_vars({unrelated!r})"
            )
        if self.append_dim is not None and self.append_dim in region:
            raise UsageError(
                f"cannot list the same dimension in both ``append_dim`` and ``region`` with to_zarr(), got "
                f"{self.append_dim!r} in both"
            )
        self.region = region
        # a region write never touches indexes (they would have to be the stored ones anyway)
        return dataset.drop_vars(dataset.indexes)

    def _auto_region(self, dataset: Dataset, region: dict[Hashable, Any]) -> dict[Hashable, slice]:
        for dim, value in region.items():
            if not (isinstance(value, str) and value == "auto"):
                continue
            if dim not in dataset._variables:
                region[dim] = slice(0, dataset.sizes[dim])  # a dimension without coordinate
                continue
            if dim not in self.existing:
                raise NameNotFoundError(
                    f"region='auto': the store has no coordinate {dim!r} in {self.group.name!r} to find the region from"
                )
            stored = conventions.decode_cf_variable(dim, self.reader.open_store_variable(dim).compute())
            positions = pd.Index(stored.data).get_indexer(dataset[dim].data)
            if (positions == -1).any():
                missing = dataset[dim].data[positions == -1]
                raise NameNotFoundError(
                    f"Not all values of coordinate '{dim}' in the new array were found in the original store. "
                    "Writing to a zarr region slice requires that no dimensions or metadata are changed by the "
                    f"write: {missing[:5].tolist()!r} are not in {self.group.name!r} (use append_dim to grow)"
                )
            if (np.diff(positions) != 1).any():
                raise UsageError(
                    f"The auto-detected region of coordinate '{dim}' for writing new data to the original store "
                    "had non-contiguous indices. Writing to a zarr region slice requires that the new data "
                    f"constitute a contiguous subset of the original store ({self.group.name!r})."
                )
            region[dim] = slice(int(positions[0]), int(positions[-1]) + 1)
        return region

    def _check_encoding(self, encoding: Mapping[Hashable, Any]) -> None:
        if encoding and self.mode in ("a", "a-", "r+"):
            given = [name for name in encoding if name in self.existing]
            if given:
                raise UsageError(
                    f"variable {given[0]!r} already exists, but encoding was provided: the variables {given} "
                    f"of {self.group.name!r} keep their stored encoding, so pass no encoding for them"
                )

    # -- the write ------------------------------------------------------------------------------
    def write(self, dataset: Dataset, *, region: Any = None, encoding: Mapping[Hashable, Any] | None = None) -> None:
        check_names(dataset)
        encoding = check_encoding_argument(encoding, dataset)
        dataset, encoding = store_none_name(dataset, encoding)
        dataset = self._prepare_region(dataset, region)
        self._check_encoding(encoding)
        variables, attributes = conventions.encode_dataset_coordinates(dataset)
        for name, variable in variables.items():
            if variable.size == 0:
                variable.load()  # nothing to write in parallel; dask cannot store zero-size blocks
        for name, var_encoding in encoding.items():
            variables[name].encoding = var_encoding
        self.store_variables(variables, attributes, check_encoding=set(encoding))

    def store_variables(self, variables: dict[Hashable, Variable], attributes: dict, check_encoding: set) -> None:
        """Write CF-coordinate-encoded ``variables`` and ``attributes``: the body of xarray's ``ZarrStore.store``."""
        existing_names = [name for name in variables if name in self.existing]
        new_names = [name for name in variables if name not in self.existing]
        if self.mode == "r+" and new_names:
            raise UsageError(
                f"dataset contains non-pre-existing variables {new_names!r}, which is not allowed in "
                f"``xarray.Dataset.to_zarr()`` with ``mode='r+'`` (they are not in {self.group.name!r}). "
                "To allow writing new variables, set ``mode='a'``."
            )
        append_dim = self.append_dim
        if append_dim is not None and append_dim not in self.existing:
            dimensions = self.reader.get_dimensions()
            if append_dim not in dimensions:
                raise UsageError(
                    f"append_dim={append_dim!r} does not match any existing dataset dimensions {dimensions} "
                    f"(the dimensions of the stored arrays in {self.group.name!r})"
                )
        encoded = {name: self._encode(variables[name], name) for name in new_names}
        if existing_names:
            # Values written into existing arrays are encoded exactly as the stored ones (same
            # time units, scale, fill value): decode the stored variables to learn their encoding.
            stored, _, _ = conventions.decode_cf_variables(
                {name: self.reader.open_store_variable(name) for name in existing_names}, {}
            )
            for name in existing_names:
                check_append_dtype(name, stored[name], variables[name])
                variable = variables[name].copy(deep=False)
                variable.encoding = dict(stored[name].encoding)
                encoded[name] = match_stored_dims(
                    name, self._encode(variable, name), stored[name], self.region, append_dim
                )
        if self.mode != "r+":
            self.group.attrs.put(json_attributes(attributes, f"the dataset (group {self.group.name!r})"))
        # 'a-' appends and adds: existing variables without the append dimension are left as they are
        leave_alone = self.mode == "a-" and self.options.append_dim is not None
        for name in variables:  # in the dataset's order
            if leave_alone and name in self.existing and (append_dim is None or append_dim not in encoded[name].dims):
                continue
            self._set_variable(name, encoded[name], name in check_encoding)
        if self.staged:
            # the grown shapes are stored after all the data: at once (NumPy data), or by a task after
            # every write task (dask data); with consolidated metadata in one rewrite of its copies
            if self.options.writes:
                self.options.writes[:] = [commit_after(self.options.writes, self.staged)]
            else:
                commit(self.staged)

    def _encode(self, variable: Variable, name: Hashable) -> Variable:
        return encode_zarr_variable(variable, name=name, zarr_format=self.zarr_format)

    def _set_variable(self, name: Hashable, variable: Variable, check_encoding: bool) -> None:
        attrs = dict(variable.attrs)
        dims = variable.dims
        if self.zarr_format == 2:
            fill_value = attrs.pop("_FillValue", None)
        else:
            fill_value = variable.encoding.pop("fill_value", None)
            if fill_value is None and variable.dtype.kind == "f":
                fill_value = np.nan  # xarray's default for floats (zarr's would be 0)
            if "_FillValue" in attrs:
                mask = attrs.pop("_FillValue")
                if mask is not None:
                    attrs["_FillValue"] = FillValueCoder.encode(mask, variable.dtype)
        if variable.encoding.pop("_FillValue", None) is not None:
            raise UsageError(f"variable {name!r}: _FillValue belongs in attributes or CF encoding, not Zarr encoding")
        probe, grid = variable, variable.encoding.get("chunks")
        if not is_edge_list(grid):  # a rectilinear grid comes from the stored array, or is asked for
            asked = self.options.rectilinear and is_chunked_array(variable.data) and grid is None
            grid = dask_chunk_grid(variable.chunks) if asked else None
        if grid is not None:
            # xarray refuses rectilinear grids and irregular blocks: it reads the rest of the encoding
            # off a stand-in without them
            stand_in = np.broadcast_to(np.zeros((), variable.dtype), variable.shape)
            encoding = {key: value for key, value in variable.encoding.items() if key != "chunks"}
            probe = Variable(variable.dims, stand_in, variable.attrs, encoding)
        encoding = extract_zarr_variable_encoding(
            probe, raise_on_invalid=check_encoding, name=name, zarr_format=self.zarr_format
        )
        if grid is not None:
            encoding["chunks"] = grid
        region = dict(self.region or {})
        append_dim = self.append_dim
        resized_from = None
        if name in self.existing:
            array = self.existing[name]
            if append_dim is not None and append_dim in dims:
                axis = dims.index(append_dim)
                region[append_dim] = slice(array.shape[axis], None)
                array = array.staged_append(variable.shape, axis)[0]  # its shape is stored after the data
                self.staged.append(array)
        else:
            array = self._create(name, variable, fill_value, encoding, attrs)
        selection = tuple(region.get(dim, slice(None)) for dim in dims)
        try:
            self._write_data(name, variable, array, selection)
        except ChunkAlignmentError as error:
            # leave the store as it was: no half-grown array, no new array without data
            if resized_from is not None:
                array.resize(resized_from)
            elif name not in self.existing:
                del self.group[array.basename]
            grid = f"shards={array.shards}" if array.shards else f"encoding['chunks']={array.chunks}"
            raise ChunkAlignmentError(
                f"Specified Zarr chunks ({grid}) for variable named {name!r} would overlap multiple Dask chunks: "
                f"{error}. ds.zarrx.to_zarr follows xarray: safe_chunks=True, the default, refuses; "
                "align_chunks=True (or safe_chunks=False) rechunks onto the grid"
            ) from None

    def _create(self, name: Hashable, variable: Variable, fill_value: Any, encoding: dict, attrs: dict) -> Array:
        dtype: Any = variable.dtype
        vlen = coding.strings.check_vlen_dtype(dtype)
        if vlen is str:
            dtype = str
        elif vlen is bytes:
            dtype = bytes
        attributes = json_attributes(attrs, f"variable {name!r}")
        kwargs: dict[str, Any] = {
            "shape": variable.shape,
            "dtype": dtype,
            "fill_value": fill_value,
            "chunks": encoding.get("chunks", "auto"),
            "shards": encoding.get("shards"),
        }
        for key in ("compressors", "filters", "serializer"):
            if key in encoding:
                kwargs[key] = codecs_argument(encoding[key], self.zarr_format, key)
        if encoding.get("chunk_key_encoding") is not None:
            kwargs["chunk_key_encoding"] = encoding["chunk_key_encoding"]
        write_empty = encoding.get("write_empty_chunks")
        if self.options.write_empty_chunks is not None:
            if write_empty is not None and write_empty != self.options.write_empty_chunks:
                raise UsageError(
                    f"variable {name!r}: encoding write_empty_chunks={write_empty} differs from "
                    f"write_empty_chunks={self.options.write_empty_chunks}"
                )
            write_empty = self.options.write_empty_chunks
        if self.zarr_format == 2:
            attributes[DIMENSION_KEY] = list(variable.dims)
        else:
            # a 0-d array has no dimension names to store (xarray writes none either)
            kwargs["dimension_names"] = variable.dims or None
        return self.group.create_array(
            str(name),
            attributes=attributes,
            overwrite=self.mode == "w",
            write_empty_chunks=bool(write_empty),
            **kwargs,
        )

    def _write_data(self, name: Hashable, variable: Variable, array: Array, selection: tuple[slice, ...]) -> None:
        if self.options.write_empty_chunks is not None:
            array.write_empty_chunks = self.options.write_empty_chunks
        data = variable.data
        if is_chunked_array(data):
            if self.mode == "r+" and self.options.safe_chunks and not self.options.align_chunks:
                check_region_on_grid(array, selection)
            self.options.writes.append(
                dask_to_zarr(data, array, region=selection, compute=False, align=self.options.align)
            )
            return
        values = np.asarray(variable.values)
        if values.size:
            array[selection or Ellipsis] = values


# -- helpers ---------------------------------------------------------------------------------------
