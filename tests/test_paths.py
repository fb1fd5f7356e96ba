"""Node paths and store keys: the core spec's node-name rules and the stores' key rules."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zarrx.errors import InvalidPathError
from zarrx.storage.paths import (
    join_key,
    normalize_path,
    parent_path,
    validate_key,
    validate_node_name,
    validate_prefix,
)


@pytest.mark.parametrize(
    "path, expected",
    [
        ("", ""),
        ("/", ""),
        ("//", ""),
        ("a", "a"),
        ("/a", "a"),
        ("a/", "a"),
        ("/a/b/c/", "a/b/c"),
        ("a/b/c", "a/b/c"),
        ("a.b/c-d/e_f", "a.b/c-d/e_f"),
        ("...a/b..", "...a/b.."),  # periods with something else are fine
        ("_a/b__", "_a/b__"),  # one leading underscore, or underscores later, are fine
        ("zarr.json.bak/zarr", "zarr.json.bak/zarr"),
        ("Temperature/temperature", "Temperature/temperature"),  # case sensitive, both kept
        ("日本/données", "日本/données"),
    ],
)
def test_normalize_path(path, expected):
    assert normalize_path(path) == expected


# (path, the offending component as the message quotes it, a word of the reason)
BAD_PATHS = [
    ("a//b", "''", "empty"),
    ("a/./b", "'.'", "periods"),
    ("a/../b", "'..'", "periods"),
    ("..", "'..'", "periods"),
    ("a/...", "'...'", "periods"),
    ("__zarr/x", "'__zarr'", "reserves"),
    ("a/__b", "'__b'", "reserves"),
    ("zarr.json", "'zarr.json'", "metadata document"),
    ("a/zarr.json", "'zarr.json'", "metadata document"),
    ("a\\b", "'a\\\\b'", "backslash"),
    ("a/..\\..\\x", "'..\\\\..\\\\x'", "backslash"),
    ("a/b\x00c", "'b\\x00c'", "NUL"),
]


@pytest.mark.parametrize("path, component, reason", BAD_PATHS)
def test_normalize_path_names_the_bad_component(path, component, reason):
    with pytest.raises(InvalidPathError) as caught:
        normalize_path(path)
    message = str(caught.value)
    assert repr(path) in message
    assert f"component {component}" in message
    assert reason in message


def test_invalid_path_error_is_a_value_error():
    with pytest.raises(ValueError):
        normalize_path("a/../b")


def test_errors_suggest_a_fix():
    with pytest.raises(InvalidPathError, match="'a/b', not 'a//b'"):
        normalize_path("a//b")
    with pytest.raises(InvalidPathError, match="e.g. to 'meta'"):
        normalize_path("__meta")


def test_normalize_path_refuses_non_strings():
    with pytest.raises(InvalidPathError, match="str"):
        normalize_path(3)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["a", "zarr", "zarr.jsonx", ".a", "a.", "_", "_x", "x__", "é"])
def test_validate_node_name_accepts(name):
    assert validate_node_name(name) == name


@pytest.mark.parametrize(
    "name, reason",
    [
        ("", "empty"),
        ("a/b", "'/'"),
        (".", "periods"),
        ("..", "periods"),
        ("....", "periods"),
        ("__", "reserves"),
        ("__zarr", "reserves"),
        ("zarr.json", "metadata document"),
        ("a\\b", "backslash"),
        ("a\x00", "NUL"),
    ],
)
def test_validate_node_name_refuses(name, reason):
    with pytest.raises(InvalidPathError, match=reason) as caught:
        validate_node_name(name)
    assert f"invalid node name {name!r}" in str(caught.value)


node_names = st.text(st.characters(blacklist_characters="/\\\x00", blacklist_categories=("Cs",)), min_size=1).filter(
    lambda name: name.strip(".") and not name.startswith("__") and name != "zarr.json"
)


@given(st.lists(node_names, max_size=5), st.booleans(), st.booleans())
def test_normalize_path_of_valid_names(names, leading, trailing):
    path = ("/" if leading else "") + "/".join(names) + ("/" if trailing else "")
    normalized = normalize_path(path)
    assert normalized == "/".join(names)
    assert normalize_path(normalized) == normalized
    if normalized:
        assert validate_key(join_key(normalized, "zarr.json")) == f"{normalized}/zarr.json"


# -- store keys ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "key",
    ["zarr.json", "a/b/zarr.json", "a/c/0/1", "c.0.1", ".zarray", "a/.zattrs", "__zarr/x", "a..b", "x[0]", "a b"],
)
def test_validate_key_accepts(key):
    assert validate_key(key) == key


@pytest.mark.parametrize(
    "key, reason",
    [
        ("", "empty"),
        ("/etc/passwd", "starts with '/'"),
        ("a/", "ends with '/'"),
        ("a//b", "empty component"),
        ("..", "'..'"),
        ("../x", "'..'"),
        ("a/../../x", "'..'"),
        ("a/..", "'..'"),
        (".", "'.'"),
        ("a/./b", "'.'"),
        ("a/...", "periods"),
        ("a\\..\\x", "backslash"),
        ("a\x00", "NUL"),
    ],
)
def test_validate_key_refuses(key, reason):
    with pytest.raises(InvalidPathError, match=reason) as caught:
        validate_key(key)
    assert f"invalid store key {key!r}" in str(caught.value)


def test_validate_key_refuses_non_strings():
    with pytest.raises(InvalidPathError, match="not a str"):
        validate_key(b"zarr.json")  # type: ignore[arg-type]


@pytest.mark.parametrize("prefix", ["", "a/", "a/b/", "a", "a/b", ".zarray", "c/0."])
def test_validate_prefix_accepts(prefix):
    assert validate_prefix(prefix) == prefix


@pytest.mark.parametrize("prefix", ["/", "//", "a//", "../", "/a/", "a/../"])
def test_validate_prefix_refuses(prefix):
    with pytest.raises(InvalidPathError, match="invalid key prefix"):
        validate_prefix(prefix)


# -- joining and parents ------------------------------------------------------------------
@pytest.mark.parametrize(
    "prefix, key, expected",
    [
        ("a/b", "zarr.json", "a/b/zarr.json"),
        ("", "c/0", "c/0"),
        ("", "zarr.json", "zarr.json"),
        ("a", "", "a/"),
        ("", "", ""),
        ("a/", "zarr.json", "a/zarr.json"),
    ],
)
def test_join_key(prefix, key, expected):
    assert join_key(prefix, key) == expected


@pytest.mark.parametrize("path, expected", [("a/b/c", "a/b"), ("a", ""), ("/a/b/", "a")])
def test_parent_path(path, expected):
    assert parent_path(path) == expected


def test_the_root_has_no_parent():
    with pytest.raises(InvalidPathError, match="root"):
        parent_path("")
