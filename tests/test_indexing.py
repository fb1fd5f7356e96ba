"""Indexers against NumPy: every projection, pasted into an output, must give numpy's answer."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from zarrx.errors import BoundsCheckError, SelectionError
from zarrx.io.selection import BasicIndexer, OrthogonalIndexer, VectorizedIndexer


def chunked_copy(data, chunk_shape):
    """A function that returns the chunk at given coords, padded to full chunk shape with -1."""

    def get(coords):
        chunk = np.full(chunk_shape, -1, dtype=data.dtype)
        region = tuple(slice(c * s, min((c + 1) * s, n)) for c, s, n in zip(coords, chunk_shape, data.shape))
        chunk[tuple(slice(0, r.stop - r.start) for r in region)] = data[region]
        return chunk

    return get


def apply(indexer, data, chunk_shape, flat=False):
    get = chunked_copy(data, chunk_shape)
    out = np.full(int(np.prod(indexer.shape)) if flat else indexer.shape, -7, dtype=data.dtype)
    seen = set()
    for p in indexer:
        assert p.chunk_coords not in seen, "a chunk is visited once per selection"
        seen.add(p.chunk_coords)
        chunk = get(p.chunk_coords)
        out[p.out_selection] = chunk[p.chunk_selection]
        if p.is_complete_chunk:
            region = tuple(slice(c * s, min((c + 1) * s, n)) for c, s, n in zip(p.chunk_coords, chunk_shape, data.shape))
            assert chunk[p.chunk_selection].size == data[region].size
    return out.reshape(indexer.shape) if flat else out


shapes = st.lists(st.integers(0, 9), min_size=0, max_size=3).map(tuple)


@st.composite
def array_and_chunks(draw):
    shape = draw(shapes)
    chunks = tuple(draw(st.integers(1, 5)) for _ in shape)
    return np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape), chunks


def slice_strategy(n):
    bound = st.one_of(st.none(), st.integers(-n - 3, n + 3))
    step = st.one_of(st.none(), st.integers(-4, 4).filter(lambda s: s != 0))
    return st.builds(slice, bound, bound, step)


@st.composite
def basic_selection(draw, shape):
    items = []
    for n in shape:
        if n > 0 and draw(st.booleans()) and draw(st.booleans()):
            items.append(draw(st.integers(-n, n - 1)))
        else:
            items.append(draw(slice_strategy(n)))
    if items and draw(st.booleans()):
        cut = draw(st.integers(0, len(items)))
        items = items[:cut] + [Ellipsis] + items[cut + draw(st.integers(0, len(items) - cut)) :]
    return tuple(items)


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_basic_selection_matches_numpy(data):
    array, chunks = data.draw(array_and_chunks())
    selection = data.draw(basic_selection(array.shape))
    expected = array[selection]
    out = apply(BasicIndexer(selection, array.shape, chunks), array, chunks)
    np.testing.assert_array_equal(out, expected)


@st.composite
def orthogonal_selection(draw, shape):
    items = []
    for n in shape:
        kind = draw(st.sampled_from(["int", "slice", "ints", "mask"] if n else ["slice", "ints", "mask"]))
        if kind == "int":
            items.append(draw(st.integers(-n, n - 1)))
        elif kind == "slice":
            items.append(draw(slice_strategy(n)))
        elif kind == "ints":
            items.append(np.array(draw(st.lists(st.integers(-n, n - 1), max_size=6)) if n else [], dtype=np.int64))
        else:
            items.append(np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool))
    return tuple(items)


def numpy_outer(array, selection):
    result = array
    axis = 0
    for item in selection:
        if isinstance(item, (int, np.integer)):
            result = np.take(result, item, axis=axis)
            continue
        if isinstance(item, np.ndarray) and item.dtype == bool:
            item = np.flatnonzero(item)
        if isinstance(item, slice):
            result = result[(slice(None),) * axis + (item,)]
        else:
            result = np.take(result, item, axis=axis)
        axis += 1
    return result


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_orthogonal_selection_matches_numpy(data):
    array, chunks = data.draw(array_and_chunks())
    selection = data.draw(orthogonal_selection(array.shape))
    expected = numpy_outer(array, selection)
    out = apply(OrthogonalIndexer(selection, array.shape, chunks), array, chunks)
    np.testing.assert_array_equal(out, expected)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_vectorized_selection_matches_numpy(data):
    array, chunks = data.draw(array_and_chunks())
    if array.ndim == 0 or array.size == 0:
        return
    npoints = data.draw(st.integers(0, 12))
    coords = tuple(
        np.array(data.draw(st.lists(st.integers(-n, n - 1), min_size=npoints, max_size=npoints)), dtype=np.int64)
        for n in array.shape
    )
    out = apply(VectorizedIndexer(coords, array.shape, chunks), array, chunks, flat=True)
    np.testing.assert_array_equal(out, array[coords])


def test_vectorized_broadcasts_and_masks():
    array = np.arange(60).reshape(6, 10)
    rows = np.array([[0], [5]])
    cols = np.array([[1, 9, 3]])
    out = apply(VectorizedIndexer((rows, cols), array.shape, (4, 4)), array, (4, 4), flat=True)
    np.testing.assert_array_equal(out, array[rows, cols])
    mask = array % 7 == 0
    out = apply(VectorizedIndexer(mask, array.shape, (4, 4)), array, (4, 4), flat=True)
    np.testing.assert_array_equal(out, array[mask])


@pytest.mark.parametrize(
    "selection, error",
    [
        ((5,), BoundsCheckError),
        ((-6,), BoundsCheckError),
        ((slice(None, None, 0),), SelectionError),
        ((Ellipsis, Ellipsis), SelectionError),
        ((0, 0), SelectionError),
        (("a",), SelectionError),
        (([0, 1],), SelectionError),
    ],
)
def test_basic_selection_errors(selection, error):
    with pytest.raises(error):
        BasicIndexer(selection, (5,), (2,))


def test_orthogonal_errors_name_the_dimension():
    with pytest.raises(BoundsCheckError, match="dimension 1"):
        OrthogonalIndexer((slice(None), [0, 7]), (3, 4), (2, 2))
    with pytest.raises(SelectionError, match="length 4"):
        OrthogonalIndexer((slice(None), np.array([True, False])), (3, 4), (2, 2))
    with pytest.raises(SelectionError):
        OrthogonalIndexer((np.array([0.5]),), (3,), (2,))


def test_complete_chunks_are_flagged():
    indexer = BasicIndexer((slice(None), slice(2, 6)), (5, 7), (2, 2))
    complete = {p.chunk_coords for p in indexer if p.is_complete_chunk}
    # rows 0-1, 2-3 and the 1-row edge chunk 4 are all whole; columns 2-3, 4-5 whole
    assert complete == {(r, c) for r in range(3) for c in (1, 2)}
