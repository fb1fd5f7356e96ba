"""The checks of a write's arguments, with xarray's messages plus zarrx's detail.

Each check raises a :mod:`zarrx.errors` class that is also the builtin xarray's zarr engine
raises in the same situation (``TypeError`` for a variable named ``0``, ``KeyError`` for
``encoding`` naming an absent variable, ``ValueError`` otherwise), and its message contains
xarray's text, so code (and tests) written against ``engine="zarr"`` keep catching and matching
it. Also here: how a variable named ``None`` is stored (:func:`store_none_name`).
"""

from __future__ import annotations

import itertools

import json
from collections.abc import Hashable, Mapping
from typing import Any

import numpy as np
from xarray.backends.zarr import encode_zarr_attr_value
from xarray import Dataset, Variable

from zarrx.errors import ChunkAlignmentError, NameNotFoundError, UsageError, UsageTypeError
from zarrx.nodes.array import Array
from zarrx.xarray.store import NONE_NAME_ATTRIBUTE, NONE_VARIABLE

__all__ = [
    "check_append_dtype",
    "check_encoding_argument",
    "check_names",
    "check_region_on_grid",
    "json_attributes",
    "match_stored_dims",
    "store_none_name",
]


def check_names(dataset: Dataset) -> None:
    """Variable names are strings of one character or more, or None (stored as :data:`NONE_VARIABLE`)."""
    for name in dataset.variables:
        if isinstance(name, str):
            if not name:
                raise UsageError(
                    f"Invalid name {name!r} for DataArray or Dataset key: string must be length 1 or greater for "
                    "serialization to netCDF or zarr files (a Zarr array needs a name)"
                )
        elif name is not None:
            raise UsageTypeError(
                f"Invalid name {name!r} for DataArray or Dataset key: must be either a string or None for "
                f"serialization to netCDF or zarr files; found a {type(name).__name__}"
            )


def check_encoding_argument(encoding: Any, dataset: Dataset) -> dict[Hashable, dict[str, Any]]:
    """``encoding`` as ``{variable: dict}``, each variable in ``dataset`` and each value a mapping."""
    if encoding is None:
        return {}
    if not isinstance(encoding, Mapping):
        raise UsageTypeError(
            f"encoding must be a dict of {{variable name: {{key: value}}}}, found {type(encoding).__name__} {encoding!r}"
        )
    checked = {}
    for name, value in encoding.items():
        if name not in dataset.variables:
            raise NameNotFoundError(
                f"encoding: variable {name!r} is not in the dataset (its variables: {list(dataset.variables)})"
            )
        try:
            checked[name] = dict(value)
        except (TypeError, ValueError):
            raise UsageError(
                f"encoding for variable {name!r} must be castable to a dictionary of {{key: value}} "
                f"(e.g. {{'chunks': (10,), 'dtype': 'int16'}}), found {type(value).__name__} {value!r}"
            ) from None
    return checked


def store_none_name(dataset: Dataset, encoding: dict[Hashable, Any]) -> tuple[Dataset, dict[Hashable, Any]]:
    """A variable named None is stored as :data:`NONE_VARIABLE`, marked by :data:`NONE_NAME_ATTRIBUTE`.

    (xarray's zarr engine stores it as ``__values__``, a name the Zarr spec reserves; zarrx reads
    both back as None.)"""
    if None not in dataset.variables:
        return dataset, encoding
    if NONE_VARIABLE in dataset.variables:
        raise UsageError(
            f"a variable named None is stored as {NONE_VARIABLE!r}, but the dataset has a variable of that name too"
        )
    variable = dataset.variables[None].copy(deep=False)
    variable.attrs = {**variable.attrs, NONE_NAME_ATTRIBUTE: True}
    renamed = dataset.drop_vars([None]).assign({NONE_VARIABLE: variable})
    if None in encoding:
        encoding = {NONE_VARIABLE if name is None else name: value for name, value in encoding.items()}
    return renamed, encoding


def json_attributes(attributes: Mapping[Hashable, Any], owner: str) -> dict[str, Any]:
    """The attributes of ``owner`` (``"the dataset"``, ``"variable 'x'"``) as Zarr stores them
    (xarray's encoding of NumPy values), each checked to be JSON."""
    encoded = {}
    for key, value in attributes.items():
        encoded[key] = value = encode_zarr_attr_value(value)
        try:
            json.dumps(value, allow_nan=True)
        except (TypeError, ValueError) as error:
            raise UsageTypeError(
                f"Invalid attribute in Dataset.attrs. Attribute {key!r} of {owner} holds a {type(value).__name__}, "
                f"which Zarr's JSON metadata cannot store ({error})"
            ) from None
    return encoded


def check_append_dtype(name: Hashable, stored: Variable, new: Variable) -> None:
    """Fixed-length strings must keep their length (others could be truncated), as in xarray."""
    easy = (
        np.issubdtype(new.dtype, np.number)
        or np.issubdtype(new.dtype, np.datetime64)
        or np.issubdtype(new.dtype, np.bool_)
        or new.dtype.kind in "OT"
        or (new.dtype.kind in "SU" and stored.dtype.kind in "OT")
    )
    if not easy and new.dtype != stored.dtype:
        raise UsageError(
            f"Mismatched dtypes for variable {name} between Zarr store on disk and dataset to append. Store has "
            f"dtype {stored.dtype} but dataset to append has dtype {new.dtype} (fixed-length strings would be "
            "cut to the stored length)."
        )


def match_stored_dims(
    name: Hashable, new: Variable, stored: Variable, region: Mapping | None, append_dim: Hashable | None
) -> Variable:
    """``new`` in the stored dimension order, after checking sizes (all but ``append_dim`` and the region)."""
    if new.dims != stored.dims:
        if set(new.dims) != set(stored.dims):
            raise UsageError(
                f"variable {name!r} already exists with different dimension names {stored.dims} != {new.dims}, "
                "but changing variable dimensions is not supported by to_zarr()"
            )
        new = new.transpose(*stored.dims)
    expected = {}
    for dim, size in stored.sizes.items():
        if region and dim in region:
            start, stop, _ = region[dim].indices(size)
            size = stop - start
        if dim != append_dim:
            expected[dim] = size
    found = {dim: size for dim, size in new.sizes.items() if dim != append_dim}
    if expected != found:
        raise UsageError(
            f"variable {name!r} already exists with different dimension sizes: {expected} != {found}. "
            f"to_zarr() only supports changing dimension sizes when explicitly appending, but "
            f"append_dim={append_dim!r}; use region= to write part of it, or append_dim= to grow it"
        )
    return new


def check_region_on_grid(array: Array, selection: tuple[slice, ...]) -> None:
    """In mode r+ other writers may fill the regions beside this one: a dask-backed region must
    not share a chunk (shard) with them, so it starts and ends on the grid or at the array's end."""
    unit = array.shards or array.chunks
    kind = "shard" if array.shards else "chunk"
    for axis, (item, length, size) in enumerate(zip(selection, array.shape, unit)):
        start, stop, _ = item.indices(length)
        if isinstance(size, tuple):  # a rectilinear axis: the bounds must be chunk boundaries
            bounds = {0, *itertools.accumulate(size)}
            if start not in bounds or (stop not in bounds and stop != length):
                raise ChunkAlignmentError(
                    f"the region {start}:{stop} on axis {axis} does not start and end on the {kind} boundaries "
                    f"of {array.name!r}, so a write beside it could rewrite the same {kind}; choose region bounds "
                    "on them, or pass safe_chunks=False to accept the risk of concurrent region writes"
                )
            continue
        if start % size or (stop % size and stop != length):
            raise ChunkAlignmentError(
                f"the region {start}:{stop} on axis {axis} does not start and end on the {kind} "
                f"grid ({kind} length {size}) of {array.name!r}, so a write beside it could rewrite the same "
                f"{kind}; choose region bounds that are multiples of {size}, or pass safe_chunks=False to "
                "accept the risk of concurrent region writes"
            )
