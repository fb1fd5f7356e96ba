"""Node paths and store keys (core spec, "Node names" and "Storage").

A *node path* names an array or group in a hierarchy: node names joined by
``/``. Its canonical form has no leading or trailing ``/``; the root is ``""``.
:func:`normalize_path` turns what a user typed (``"/a/b/"``) into that form and
checks every name against the spec's rules; :func:`validate_node_name` checks
one name. The rules (core spec, "Node names"): a name is not empty, has no
``/``, is not made only of periods (``.``, ``..``), does not start with the
reserved ``__`` and is not ``zarr.json``. zarrx also refuses a backslash (a
path separator on Windows, so ``a\\..`` could climb out of a store) and NUL
(no file system accepts it).

A *store key* is what a :class:`~zarrx.storage.store.Store` maps to bytes:
``/``-separated, relative to the store root (``"a/b/zarr.json"``,
``"a/b/c/0/1"``). Keys come from validated node names and chunk key encodings;
:func:`validate_key` is the stores' defence in depth: it refuses anything that
could name a file outside the store (``..``, a leading ``/``) or alias another
key (``a//b``, ``a/./b``), but allows what the node rules reserve
(``zarr.json``, ``__zarr…``, ``.zarray``), since those are legitimate keys.

Every refusal is an :class:`~zarrx.errors.InvalidPathError` naming the path and
the offending component, with a hint how to fix it.
"""

from __future__ import annotations

from typing import Callable
from urllib.parse import quote, unquote

from zarrx.errors import InvalidPathError

__all__ = [
    "FilePaths",
    "normalize_path", "validate_node_name", "is_node_name", "validate_key", "validate_prefix", "join_key", "parent_path",
]  # fmt: skip

# (test, what is wrong, how to fix it) for one node name, in the order they are checked;
# the first that matches is reported. ``{suggestion}`` in a hint is a fixed-up name.
_NODE_NAME_RULES: tuple[tuple[Callable[[str], bool], str, str], ...] = (
    (lambda name: name == "", "is empty", "give every node a name (in a path, write 'a/b', not 'a//b')"),
    (
        lambda name: "/" in name,
        "contains '/', which separates node names",
        "pass a path to normalize_path, or a single name",
    ),
    (
        lambda name: name.strip(".") == "",
        "is made only of periods, which the Zarr spec forbids ('..' would climb out of the hierarchy)",
        "use a name with at least one other character",
    ),
    (
        lambda name: name.startswith("__"),
        "starts with '__', a prefix the Zarr spec reserves for Zarr and its extensions",
        "rename it, e.g. to {suggestion!r}",
    ),
    (lambda name: name == "zarr.json", "is the name of the metadata document", "choose another name"),
    (lambda name: "\\" in name, "contains a backslash, a path separator on Windows", "separate node names with '/'"),
    (lambda name: "\x00" in name, "contains a NUL character, which no file system accepts", "remove it"),
)

# (test, what is wrong) for a store key, in the order they are checked.
_KEY_RULES: tuple[tuple[Callable[[str], bool], str], ...] = (
    (lambda key: key == "", "it is empty"),
    (lambda key: key.startswith("/"), "it starts with '/', but keys are relative to the store root"),
    (lambda key: key.endswith("/"), "it ends with '/', which makes it a prefix, not a key"),
    (lambda key: "//" in key, "it has an empty component ('//')"),
    (lambda key: "\\" in key, "it contains a backslash, a path separator on Windows"),
    (lambda key: "\x00" in key, "it contains a NUL character"),
    (lambda key: ".." in key.split("/"), "component '..' would leave the store root"),
    (lambda key: "." in key.split("/"), "component '.' would make two keys name one object"),
    (lambda key: True, "a component made only of periods is not a name on every file system"),
)


def _node_name_problem(name: str, allow_reserved: bool = False) -> str | None:
    """What is wrong with ``name`` as a node name (with a hint), or None when it is valid."""
    for test, problem, hint in _NODE_NAME_RULES:
        if allow_reserved and problem.startswith("starts with '__'"):
            continue
        if test(name):
            suggestion = name.lstrip("_") or "node"
            return f"component {name!r} {problem}; {hint.format(suggestion=suggestion)}"
    return None


def validate_node_name(name: str) -> str:
    """Check one node name against the spec's rules and return it.

    Raises
    ------
    InvalidPathError
        Naming the rule the name breaks.

    Examples
    --------
    >>> validate_node_name("temperature")
    'temperature'
    >>> validate_node_name("__meta")
    Traceback (most recent call last):
    ...
    zarrx.errors.InvalidPathError: invalid node name '__meta': component '__meta' starts with '__', ...
    """
    if not isinstance(name, str):
        raise InvalidPathError(f"a node name must be a str, found {type(name).__name__} {name!r}")
    problem = _node_name_problem(name)
    if problem is not None:
        raise InvalidPathError(f"invalid node name {name!r}: {problem}")
    return name


def is_node_name(name: str) -> bool:
    """Whether a name found in a store (a listed folder) can be a child node.

    Names other writers use are accepted (xarray's ``__xarray_dataarray_variable__`` starts with
    the reserved ``__``); folders such as ``.`` or ``..``, or names with a backslash, are not.

    Examples
    --------
    >>> is_node_name("t2m"), is_node_name("__xarray_dataarray_variable__"), is_node_name("..")
    (True, True, False)
    """
    return isinstance(name, str) and _node_name_problem(name, allow_reserved=True) is None


def normalize_path(path: str, allow_reserved: bool = False) -> str:
    """The canonical form of a node path: names joined by '/', no leading or trailing '/'.

    Leading and trailing slashes are dropped (``"/a/b/"`` is ``"a/b"``, ``"/"``
    and ``""`` are the root ``""``); every name must pass
    :func:`validate_node_name`, so an empty name inside (``"a//b"``) is an error
    rather than silently merged. ``allow_reserved`` lets names start with the
    reserved ``__``: other writers made such nodes (xarray's
    ``__xarray_dataarray_variable__``), and zarrx reads them, but never creates one.

    Examples
    --------
    >>> normalize_path("/a/b/")
    'a/b'
    >>> normalize_path("")
    ''
    >>> normalize_path("__xarray_dataarray_variable__", allow_reserved=True)
    '__xarray_dataarray_variable__'
    >>> normalize_path("a/../b")
    Traceback (most recent call last):
    ...
    zarrx.errors.InvalidPathError: invalid node path 'a/../b': component '..' is made only of periods, ...
    """
    if not isinstance(path, str):
        raise InvalidPathError(f"a node path must be a str like 'a/b', found {type(path).__name__} {path!r}")
    stripped = path.strip("/")
    if not stripped:
        return ""
    for name in stripped.split("/"):
        problem = _node_name_problem(name, allow_reserved)
        if problem is not None:
            raise InvalidPathError(f"invalid node path {path!r}: {problem}")
    return stripped


def _key_problem(key: str) -> str | None:
    """What is wrong with ``key`` as a store key, or None when it is valid."""
    # One combined test on the fast path: this runs for every store read and write.
    if (
        isinstance(key, str)
        and key
        and key[0] != "/"
        and key[-1] != "/"
        and "//" not in key
        and "\\" not in key
        and "\x00" not in key
        # a component made of periods ("..") starts the key or follows a "/"
        and ((key[0] != "." and "/." not in key) or all(component.strip(".") for component in key.split("/")))
    ):
        return None
    if not isinstance(key, str):
        return f"it is a {type(key).__name__}, not a str"
    return next(problem for test, problem in _KEY_RULES if test(key))


_KEY_HINT = "keys are '/'-separated names relative to the store root, like 'a/b/zarr.json'"


def validate_key(key: str) -> str:
    """Check that a store key stays inside the store and names exactly one object; return it.

    A key is non-empty, relative (no leading '/'), has no trailing '/', no
    empty component, none made only of periods (``.``, ``..``), no backslash
    and no NUL.

    Examples
    --------
    >>> validate_key("a/b/c/0/1")
    'a/b/c/0/1'
    >>> validate_key("../secret")
    Traceback (most recent call last):
    ...
    zarrx.errors.InvalidPathError: invalid store key '../secret': component '..' would leave the store root; ...
    """
    problem = _key_problem(key)
    if problem is not None:
        raise InvalidPathError(f"invalid store key {key!r}: {problem}; {_KEY_HINT}")
    return key


def validate_prefix(prefix: str) -> str:
    """Check a key prefix for listing or deleting and return it.

    A prefix is ``""`` (everything) or a valid key followed by ``/``
    (``"a/b/"``); a valid key without the ``/`` is accepted too and then
    matches as a plain string prefix.

    Examples
    --------
    >>> validate_prefix("a/b/")
    'a/b/'
    """
    if prefix == "":
        return prefix
    problem = _key_problem(prefix[:-1] if isinstance(prefix, str) and prefix[-1] == "/" else prefix)
    if problem is not None:
        raise InvalidPathError(
            f"invalid key prefix {prefix!r}: {problem}; a prefix is '' or a key and '/', {_KEY_HINT}"
        )
    return prefix


def join_key(prefix: str, key: str) -> str:
    """``prefix + "/" + key``, where an empty prefix (the root) adds nothing.

    With ``key=""`` it gives the key prefix of a node (``"a/b/"``, or ``""`` for the root).

    Examples
    --------
    >>> join_key("a/b", "zarr.json")
    'a/b/zarr.json'
    >>> join_key("", "c/0")
    'c/0'
    >>> join_key("a", "")
    'a/'
    """
    if not prefix:
        return key
    if prefix[-1] == "/":
        return prefix + key
    return f"{prefix}/{key}"


def parent_path(path: str) -> str:
    """The path of the group that contains the node at ``path`` (``""`` for a top-level node).

    Raises
    ------
    InvalidPathError
        For the root, which has no parent.

    Examples
    --------
    >>> parent_path("a/b/c")
    'a/b'
    >>> parent_path("a")
    ''
    """
    path = path.strip("/")
    if not path:
        raise InvalidPathError("the root node '' has no parent; stop walking up at the root")
    return path.rpartition("/")[0]


class FilePaths:
    """Where the keys of a store lie in a file system: ``prefix`` + the key; in URLs
    (``url=True``: web servers) the key percent-encoded, since a key is any string -- ``a%20b``,
    ``x#1``, ``q?r`` and ``temp (K)`` are names of nodes, not escapes, fragments or queries. The
    prefix (the root, as the user wrote it) is left alone.

    Examples
    --------
    >>> paths = FilePaths("http://h/my data.zarr/", url=True)
    >>> paths.path("x#1/c/0")
    'http://h/my data.zarr/x%231/c/0'
    >>> paths.key("http://h/my%20data.zarr/x%231/"), paths.key("http://h/other/x")
    ('x#1', None)
    """

    def __init__(self, prefix: str, url: bool) -> None:
        self.prefix, self.url = prefix, url
        self._plain_prefix = unquote(prefix) if url else prefix

    def path(self, text: str) -> str:
        """The path of a key, or of a folder (a prefix)."""
        return self.prefix + (quote(text) if self.url else text)

    def key(self, path: str) -> str | None:
        """The key of a path the file system listed (a URL percent-decoded), or None when it
        is not below the prefix."""
        path = unquote(path.rstrip("/")) if self.url else path.rstrip("/")
        if not path.startswith(self._plain_prefix) or len(path) == len(self._plain_prefix):
            return None
        return path[len(self._plain_prefix) :]
