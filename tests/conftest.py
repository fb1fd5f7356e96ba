import os

import numpy as np
import pytest

# One sample per data type zarrx supports: (dtype argument to create_array, value generator)
def _structured():
    return np.dtype([("x", "<f4"), ("n", "<i2"), ("tag", "S3")])


DTYPES = {
    "bool": "bool",
    "int8": "int8",
    "int16": "int16",
    "int32": "int32",
    "int64": "int64",
    "uint8": "uint8",
    "uint16": "uint16",
    "uint32": "uint32",
    "uint64": "uint64",
    "float16": "float16",
    "float32": "float32",
    "float64": "float64",
    "complex64": "complex64",
    "complex128": "complex128",
    "r24": "r24",
    "string": "string",
    "bytes": "bytes",
    "fixed_length_utf32": "<U5",
    "null_terminated_bytes": "S4",
    "datetime64": "M8[ns]",
    "timedelta64": "m8[10s]",
    "struct": _structured(),
}


def sample_values(name, dtype, shape, seed=0):
    """Deterministic values of ``dtype`` (the array's numpy dtype) with the given shape."""
    rng = np.random.default_rng(seed)
    size = int(np.prod(shape))
    kind = dtype.kind
    if name == "string":
        words = np.array(["", "a", "héllo", "日本語", "x" * 40, "zarr\u0000x"], dtype=object)
        return np.asarray(words[rng.integers(0, len(words), size)].reshape(shape), dtype=dtype)
    if name == "bytes":
        words = [b"", b"\x00\x01", b"abc", bytes(range(256))]
        out = np.empty(size, dtype=object)
        out[:] = [words[i] for i in rng.integers(0, len(words), size)]
        return out.reshape(shape)
    if kind == "b":
        return rng.integers(0, 2, size).astype(bool).reshape(shape)
    if kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size, dtype=dtype, endpoint=True).reshape(shape)
    if kind == "f":
        values = rng.standard_normal(size).astype(dtype) * 100
        if size > 3:
            values[:3] = [np.nan, np.inf, -0.0]
        return values.reshape(shape)
    if kind == "c":
        return (rng.standard_normal(size) + 1j * rng.standard_normal(size)).astype(dtype).reshape(shape)
    if kind == "V" and dtype.names is None:
        return rng.integers(0, 256, size * dtype.itemsize, dtype=np.uint8).view(dtype).reshape(shape)
    if kind == "U":
        letters = np.array(list("abcdé日"))
        return np.array(["".join(rng.choice(letters, rng.integers(0, 6))) for _ in range(size)], dtype=dtype).reshape(shape)
    if kind == "S":
        return np.array([bytes(rng.integers(1, 256, rng.integers(0, 5), dtype=np.uint8)) for _ in range(size)], dtype=dtype).reshape(shape)
    if kind in "mM":
        return rng.integers(-(2**40), 2**40, size).astype(dtype).reshape(shape)
    if dtype.names:
        out = np.zeros(size, dtype=dtype)
        for field in dtype.names:
            out[field] = sample_values(field, dtype[field], (size,), seed + 1)
        return out.reshape(shape)
    raise AssertionError(f"no sample for {dtype}")


def assert_same(actual, expected):
    """Equal values, NaN equal to NaN (and NaT to NaT), including dtype."""
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    assert actual.shape == expected.shape
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    if expected.dtype.kind in "fc":
        np.testing.assert_array_equal(actual, expected)  # treats NaN == NaN
        # signs of zeros too
        np.testing.assert_array_equal(np.signbit(actual.real), np.signbit(expected.real))
    elif expected.dtype.kind == "V":
        assert actual.tobytes() == expected.tobytes()
    elif expected.dtype.kind in "mM":  # NaT != NaT, but its int64 counts are equal
        np.testing.assert_array_equal(actual.view(np.int64), expected.view(np.int64))
    else:
        assert (actual == expected).all() if actual.size else True


@pytest.fixture(params=sorted(DTYPES))
def dtype_name(request):
    return request.param


# -- the peers' test suites (tests/test_peer_*.py) -------------------------------------------------
#: markers the peers' tests use; xarray and dask register them in their own (uninstalled) conftest files
PEER_MARKERS = {
    "skip_if_param": "skip_if_param(reason=..., condition=True, **params): xarray's: skip where the params match",
    "flaky": "xarray's and dask's: a test that fails at times",
    "network": "xarray's: needs the internet (never run here)",
    "slow": "dask's and xarray's: a slow test",
    "skip_with_dask_array": "xarray's: skipped when dask-array is xarray's chunk manager (XR_USE_DASK_ARRAY=1)",
    "xfail_with_dask_array": "xarray's: fails when dask-array is xarray's chunk manager (XR_USE_DASK_ARRAY=1)",
}

#: set by tests/test_peer_query_planning.py for the peer suites it runs with dask's array
#: expressions (DASK_ARRAY__QUERY_PLANNING=True): the run stops unless they are really in use
EXPECT_ARRAY_EXPRESSIONS = "ZARRX_EXPECT_DASK_ARRAY_EXPRESSIONS"


def _on(name):
    return os.environ.get(name, "").lower() in ("1", "true", "yes", "on")


def use_dask_array():
    """xarray's own switch (its conftest's ``XR_USE_DASK_ARRAY``): the separate ``dask-array``
    package is xarray's "dask" chunk manager for the run."""
    return _on("XR_USE_DASK_ARRAY")


def array_expressions_in_use():
    """Whether ``dask.array.Array`` is dask's array-expression class (``array.query-planning``):
    dask's public ``array_expr_enabled()`` says so, and a new array has an expression."""
    import dask._expr
    import dask.array as da

    return da.array_expr_enabled() and isinstance(getattr(da.zeros(1), "expr", None), dask._expr.Expr)


def _register_dask_array():
    try:
        import dask_array.xarray
    except ImportError as error:
        raise pytest.UsageError("XR_USE_DASK_ARRAY=1 needs the dask-array package") from error
    dask_array.xarray.register()
    if not dask_array.xarray.isactive():
        raise pytest.UsageError("dask-array registered, but it is not xarray's active dask chunk manager")


def pytest_configure(config):
    for name, description in PEER_MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {description}")
    if _on(EXPECT_ARRAY_EXPRESSIONS) and not array_expressions_in_use():
        raise pytest.UsageError(
            f"{EXPECT_ARRAY_EXPRESSIONS} is set but dask's array expressions are not in use: set "
            "DASK_ARRAY__QUERY_PLANNING=True before dask.array is first imported"
        )
    if use_dask_array():
        _register_dask_array()


def pytest_collection_modifyitems(config, items):
    """xarray's ``skip_if_param`` mark: skip a parametrized test whose parameters match the mark's.

    A peer-suite module's ``DIFFERENCES`` (test name, or name with parameters -> reason) marks
    those tests ``xfail(strict=True)``: the intentional differences from the peer, which must
    keep failing. Its ``NOT_APPLICABLE`` (test name -> reason) deselects tests that check the
    peer's own internals (calls into zarr-python's classes); the module has a zarrx equivalent
    of each."""
    deselected = []
    for item in items:
        module = getattr(item, "module", None)
        name = getattr(item, "originalname", item.name)
        if name in getattr(module, "NOT_APPLICABLE", {}) and isinstance(item, pytest.Function) and item.cls is not None:
            deselected.append(item)
            continue
        differences = getattr(module, "DIFFERENCES", {})
        reason = differences.get(item.name, differences.get(name))
        if reason is not None:
            item.add_marker(pytest.mark.xfail(reason=reason, strict=True))
        if use_dask_array() and "skip_with_dask_array" in item.keywords:
            item.add_marker(pytest.mark.skip(reason="skipped with dask-array chunk manager"))
        if use_dask_array() and "xfail_with_dask_array" in item.keywords:
            mark = item.get_closest_marker("xfail_with_dask_array")
            kwargs = {"reason": "expected failure with dask-array chunk manager", "strict": True, **mark.kwargs}
            item.add_marker(pytest.mark.xfail(**kwargs))
        params = getattr(getattr(item, "callspec", None), "params", {})
        for mark in item.iter_markers("skip_if_param"):
            wanted = {k: v for k, v in mark.kwargs.items() if k not in ("reason", "condition")}
            matches = all(k in params and params[k] == v for k, v in wanted.items())
            if wanted and matches and mark.kwargs.get("condition", True):
                item.add_marker(pytest.mark.skip(reason=mark.kwargs.get("reason", "skip_if_param")))
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        dropped = set(deselected)
        items[:] = [item for item in items if item not in dropped]


def pytest_runtest_setup(item):
    if use_dask_array():
        _register_dask_array()  # as xarray's conftest: a test may have reset the chunk managers
    if "network" in item.keywords:
        pytest.skip("needs the internet")
