"""Property test: random selections of zarrx's dask arrays give plain dask's chunks and NumPy's values.

``zarrx.from_zarr(..., region=index)`` builds the read of a basic selection's bounding box
(:func:`zarrx.dask.lazy.select`) instead of slicing the whole array's read; what follows is
dask's own slicing. For random arrays (regular and irregular
blocks, rectilinear chunk grids, shards, ``chunks=`` multiples, empty axes) and random chains of basic indices (integers, slices with any
start, stop and step, ``Ellipsis``, ``None``; a few lists, which go to dask), the region and every
step after it must give the chunks dask gives for the same selection of ``da.from_array`` with the same blocks, the
values NumPy gives, and the same IndexError when NumPy refuses.
"""

from __future__ import annotations

import os

import dask
import dask.array as da
import numpy as np
from dask.array.slicing import replace_ellipsis
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import zarrx
from zarrx.errors import UsageTypeError

EXAMPLES = int(os.environ.get("ZARRX_FUZZ_EXAMPLES", 150))
PROPERTY = settings(
    max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)


@st.composite
def arrays(draw):
    """A zarrx array over random values and the dask ``chunks=`` to read it with."""
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(0, 11), min_size=ndim, max_size=ndim)))
    kind = draw(st.sampled_from(["chunks", "multiples", "irregular", "rectilinear", "sharded"]))
    values = np.arange(int(np.prod(shape)), dtype="int32").reshape(shape)
    if kind == "irregular":  # explicit block sizes need chunks of 1 to be allowed
        chunk_shape, chunks = (1,) * ndim, tuple(draw(_sizes(length)) for length in shape)
    elif kind == "rectilinear" and all(shape):  # a rectilinear chunk grid: its chunks are the blocks
        chunk_shape, chunks = tuple(draw(_sizes(length)) for length in shape), None
    else:
        chunk_shape = tuple(draw(st.lists(st.integers(1, 4), min_size=ndim, max_size=ndim)))
        chunks = None
        if kind == "multiples":
            chunks = tuple(size * draw(st.integers(1, 3)) for size in chunk_shape)
    shards = tuple(size * 2 for size in chunk_shape) if kind == "sharded" else None
    array = zarrx.create_array({}, shape=shape, dtype="int32", chunks=chunk_shape, shards=shards, fill_value=-1)
    array[...] = values
    return array, chunks, values


@st.composite
def _sizes(draw, length):
    """Block sizes (all positive) summing to ``length``; ``(0,)`` for an empty axis."""
    sizes, left = [], length
    while left:
        sizes.append(draw(st.integers(1, left)))
        left -= sizes[-1]
    return tuple(sizes) or (0,)


def _bound(length):
    return st.one_of(st.none(), st.integers(-length - 3, length + 3))


@st.composite
def indices(draw, shape):
    """A basic index for an array of ``shape`` (sometimes out of bounds, sometimes a list)."""
    items, axes = [], list(shape)
    ellipsis_used = False
    while axes:
        length = axes[0]
        choice = draw(st.sampled_from(["slice", "slice", "slice", "int", "none", "ellipsis", "list", "stop"]))
        if choice == "stop":
            break
        if choice == "none":
            items.append(None)
            continue
        if choice == "ellipsis" and not ellipsis_used:
            ellipsis_used = True
            items.append(Ellipsis)
            keep = draw(st.integers(0, len(axes)))
            axes = axes[len(axes) - keep :]
            continue
        axes.pop(0)
        if choice == "int":
            items.append(draw(st.integers(-length - 1, length)) if length else 0)
        elif choice == "list" and length:
            items.append(draw(st.lists(st.integers(0, length - 1), min_size=1, max_size=3)))
        else:
            step = draw(st.one_of(st.none(), st.sampled_from([1, 1, 2, 3, -1, -2])))
            items.append(slice(draw(_bound(length)), draw(_bound(length)), step))
    if len(items) == 1 and draw(st.booleans()):
        return items[0]
    return tuple(items)


def _without_dask_issue_10555(index, shape):
    """``index`` with each negative-step slice that starts before the array (empty in NumPy, not
    in dask: dask issue 10555) written as ``slice(0, 0)``, which dask gets right; and whether
    there was one."""
    items = replace_ellipsis(len(shape), _as_tuple(index))
    lengths, fixed = iter(shape), []
    for item in items:
        length = None if item is None else next(lengths, None)
        if isinstance(item, slice) and length is not None and (item.step or 1) < 0 and item.indices(length)[0] == -1:
            item = slice(0, 0)
        fixed.append(item)
    fixed = tuple(fixed)
    changed = any(a is not b for a, b in zip(fixed, items))
    return (fixed if changed else index), changed


def _as_tuple(index):
    return index if isinstance(index, tuple) else (index,)


def _has_list(index):
    return any(isinstance(item, list) for item in _as_tuple(index))


def _compute(x):
    try:
        return x.compute(), None
    except Exception as error:  # noqa: BLE001 -- compared with dask's own error
        return None, error


def _mixes_advanced_indices(index):
    items = index if isinstance(index, tuple) else (index,)
    lists = sum(isinstance(item, list) for item in items)
    return lists > 1 or (lists == 1 and any(isinstance(item, int) for item in items))


def _apply(target, index):
    try:
        return target[index], None
    except Exception as error:  # noqa: BLE001 -- the same error as dask's is what is checked
        return None, error


@PROPERTY
@given(data=st.data())
def test_chains_of_selections_match_dask_and_numpy(data):
    array, chunks, values = data.draw(arrays())
    ours = zarrx.from_zarr(array, chunks=chunks)
    assert type(ours) is da.Array
    theirs = da.from_array(values, chunks=ours.chunks)
    expected = values
    for step in range(data.draw(st.integers(1, 4))):
        index = data.draw(indices(expected.shape))
        if _mixes_advanced_indices(index):
            return  # NumPy broadcasts a list with other lists and integers; dask indexes each axis
        numpy_result, numpy_error = _apply(expected, index)
        fixed, changed = _without_dask_issue_10555(index, expected.shape)
        as_region = step == 0 and not _has_list(index)
        if changed and not as_region:
            return  # plain dask's slicing, issue 10555 included
        if as_region:  # the first selection is the region the array is made of
            try:
                our_result, our_error = zarrx.from_zarr(array, chunks=chunks, region=_as_tuple(index)), None
            except Exception as error:  # noqa: BLE001 -- compared with dask's own error
                our_result, our_error = None, error
        else:
            our_result, our_error = _apply(ours, index)
        their_result, their_error = _apply(theirs, fixed)
        if as_region and our_error is not None:  # zarrx's error, also the builtin dask raises
            assert isinstance(our_error, type(their_error)), (index, our_error, their_error)
            assert not isinstance(our_error, UsageTypeError), (index, our_error)
        else:
            assert type(our_error) is type(their_error), (index, our_error, their_error)
        if their_error is not None:
            # dask raises IndexError only where NumPy does -- except for a list after a None on
            # an array with an empty axis, which NumPy indexes and dask 2026.8 does not
            # (np.zeros((1, 0, 1, 1, 4))[:, :, :, :, None, [0, 1]]); zarrx gave dask's error above
            assert numpy_error is not None or not isinstance(their_error, IndexError) or 0 in expected.shape, index
            return
        assert numpy_error is None, index
        assert our_result.shape == their_result.shape == numpy_result.shape, index
        assert our_result.chunks == their_result.chunks, index
        assert our_result.chunksize == their_result.chunksize, index
        assert our_result.numblocks == their_result.numblocks, index
        event("a region" if as_region else "dask's slicing")
        ours, theirs, expected = our_result, their_result, numpy_result
    with dask.config.set(scheduler="sync"):
        computed, error = _compute(ours)
        if error is not None:  # dask cannot compute some selections (None with a list): nor can we
            assert type(_compute(theirs)[1]) is type(error), error
            return
        np.testing.assert_array_equal(computed, expected)
    if expected.ndim:
        assert len(ours) == len(expected)


@PROPERTY
@given(data=st.data())
def test_blocks_of_selections_read_the_right_values(data):
    """Each block of a sliced array on its own (culled to one task) holds NumPy's values."""
    array, chunks, values = data.draw(arrays())
    x = zarrx.from_zarr(array, chunks=chunks)
    index = data.draw(indices(values.shape))
    if isinstance(index, list) or (isinstance(index, tuple) and any(isinstance(item, list) for item in index)):
        return
    try:
        expected = values[index]
    except IndexError:
        return
    part = zarrx.from_zarr(array, chunks=chunks, region=_as_tuple(index))
    if not part.ndim or not part.size:
        np.testing.assert_array_equal(part.compute(scheduler="sync"), expected)
        return
    block = tuple(data.draw(st.integers(0, n - 1)) for n in part.numblocks)
    starts = [sum(sizes[:i]) for sizes, i in zip(part.chunks, block)]
    region = tuple(slice(s, s + sizes[i]) for s, sizes, i in zip(starts, part.chunks, block))
    np.testing.assert_array_equal(part.blocks[block].compute(scheduler="sync"), expected[region])
