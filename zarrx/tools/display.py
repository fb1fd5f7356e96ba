"""Describing arrays and groups to people: text for terminals, HTML for Jupyter.

One place says what a node looks like, and everything that shows nodes uses it:
``str(node)``, ``node._repr_html_()`` and ``group.tree()`` (provided to
:class:`zarrx.Array` and :class:`zarrx.Group` through :mod:`zarrx.nodes.conveniences`), and the
``zarrx tree`` / ``zarrx info`` commands.

* :func:`describe` -- the facts about one node as ``(label, text)`` rows: shape, data
  type, chunks, shards, codecs, fill value, dimension names, size, and with
  ``stored=True`` the stored bytes, compression ratio and chunks initialized (which list
  the store); :func:`attribute_rows` its attributes.
* :func:`summary` -- one line per node (``t2m (365, 91, 180) float32 chunks=(30, 46, 90)
  shards=(30, 92, 180) codecs=[...]``), the line of a tree.
* :func:`walk` -- the hierarchy below a node, bounded (depth, children per group, nodes in
  all), as :class:`TreeEntry` values; a group whose children cannot be read becomes an entry
  with an ``error``, so one bad document does not hide the rest.
* :func:`tree_text`, :func:`info_text`, :func:`node_text`, :func:`node_html` -- the
  renderings. HTML escapes every name and value and folds each node in ``<details>``.

Only metadata is read, except by ``describe(..., stored=True)``.
"""

from __future__ import annotations

import html
import json
import math
import os
from dataclasses import dataclass, field
from typing import Any, Iterable

from zarrx.errors import ZarrxError
from zarrx.nodes import conveniences
from zarrx.nodes.array import Array
from zarrx.nodes.group import Group
from zarrx.nodes.hierarchy import list_children_many
from zarrx.sizes import human_bytes

__all__ = [
    "TreeEntry",
    "attribute_rows",
    "codecs_text",
    "describe",
    "errors",
    "group_tree",
    "human_bytes",
    "info_text",
    "node_html",
    "node_text",
    "render_tree",
    "stored_totals",
    "summary",
    "tree_text",
    "walk",
]

#: bounds of ``str(group)`` and ``group._repr_html_()``: a huge hierarchy shows its start
TEXT_LIMITS = {"max_depth": None, "max_children": 50, "max_nodes": 500}
HTML_LIMITS = {"max_depth": 8, "max_children": 50, "max_nodes": 200}
#: attributes shown per node, and characters per attribute value
MAX_ATTRIBUTES = 50
MAX_VALUE_CHARS = 200
#: configuration members left out of the short form of a codec (they are the defaults)
SHORT_DEFAULTS: dict[str, dict[str, Any]] = {"bytes": {"endian": "little"}, "zstd": {"checksum": False}}
#: configuration members left out of the short form whatever their value
SHORT_OMITTED: dict[str, set[str]] = {"zarr-v2": {"dtype", "order"}}
#: the label column of :func:`info_text`, one width for arrays (sharded or not) and groups
LABEL_WIDTH = len("Compression ratio")
NOT_SHARDED = "not sharded"
#: members a group's ``info_text`` lists
MAX_MEMBERS_LISTED = 50


# -- small formatting helpers ------------------------------------------------------------------
def _shape(shape: Iterable[int] | None) -> str:
    return "None" if shape is None else str(tuple(shape))


def _value(value: Any) -> str:
    """A configuration value, compactly: lists as tuples, numcodecs configs as ``id(k=v)``."""
    if isinstance(value, list):
        return "(" + ", ".join(_value(item) for item in value) + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, dict):
        if "name" in value:
            return codec_text(value)
        if "id" in value:
            rest = {k: v for k, v in value.items() if k != "id"}
            return f"{value['id']}({', '.join(f'{k}={_value(v)}' for k, v in rest.items())})" if rest else str(value["id"])
        return "{" + ", ".join(f"{k}: {_value(v)}" for k, v in value.items()) + "}"
    return str(value)


def codec_text(codec: dict[str, Any], short: bool = True) -> str:
    """One codec's JSON as text: ``zstd(level=3)``; a sharding codec shows its inner codecs."""
    name = str(codec.get("name"))
    configuration = dict(codec.get("configuration") or {})
    if name == "sharding_indexed":
        inner = codecs_text(configuration.get("codecs", []), short)
        if short:
            return f"sharding_indexed[{inner}]"
        index = codecs_text(configuration.get("index_codecs", []), short)
        return (
            f"sharding_indexed(chunk_shape={_value(configuration.get('chunk_shape', []))}, codecs=[{inner}], "
            f"index_codecs=[{index}], index_location={configuration.get('index_location', 'end')})"
        )
    if short:
        defaults, omitted = SHORT_DEFAULTS.get(name, {}), SHORT_OMITTED.get(name, set())
        configuration = {
            key: value
            for key, value in configuration.items()
            if value is not None and key not in omitted and (key not in defaults or defaults[key] != value)
        }
    if not configuration:
        return name
    return f"{name}({', '.join(f'{key}={_value(value)}' for key, value in configuration.items())})"


def codecs_text(codecs: Iterable[dict[str, Any]], short: bool = True) -> str:
    """A codec pipeline's JSON as ``bytes, zstd(level=3)`` (in the order they encode)."""
    return ", ".join(codec_text(codec, short) for codec in codecs)


def _attribute_value(value: Any, limit: int = MAX_VALUE_CHARS) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    text = " ".join(text.split()) if "\n" in text else text
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _is_array(node: Any) -> bool:
    return isinstance(node, Array)


def _is_group(node: Any) -> bool:
    return isinstance(node, Group)


def _format_name(node: Any) -> str:
    fmt = node.zarr_format
    return f"Zarr v{fmt}" if isinstance(fmt, int) else "Zarr 2022 draft (read-only)"


# -- what a node is ------------------------------------------------------------------------------
def summary(node: Any, name: str | None = None) -> str:
    """One line: ``name shape dtype chunks=... [shards=...] codecs=[...]`` for an array, the name for a group."""
    name = node.name if name is None else name
    if not _is_array(node):
        return name
    line = f"{name} {_shape(node.shape)} {node.dtype} chunks={_shape(node.chunks)}"
    if node.shards is not None:
        line += f" shards={_shape(node.shards)}"
    return f"{line} codecs=[{codecs_text(node.metadata.codecs.to_json())}]"


def _data_type(array: Any) -> str:
    declared = array.metadata.data_type.to_json()
    text = declared if isinstance(declared, str) else _value(declared)
    return text if text == str(array.dtype) else f"{text} (numpy {array.dtype})"


def _fill_value(array: Any) -> str:
    if array.fill_value is None:
        return "None (the data type's default)"
    try:
        return json.dumps(array.metadata.data_type.fill_value_to_json(array.fill_value), default=str)
    except (TypeError, ValueError, ZarrxError):
        return repr(array.fill_value)


def stored_totals(array: Array) -> tuple[int, int]:
    """``(stored bytes of the chunks, stored chunks)`` of an array, from one listing."""
    keys = list(array._stored_chunk_keys())
    store = array.store
    paths = [store.local_path(key) for key in keys[:1]]
    if paths and paths[0] is not None:  # files on this machine: their sizes, without reading them
        return sum(os.path.getsize(store.local_path(key)) for key in keys), len(keys)
    total = 0
    for start in range(0, len(keys), 256):  # a batch at a time: memory stays a few chunks
        total += sum(len(value) for value in store.get_many(keys[start : start + 256]).values() if value is not None)
    return total, len(keys)


def describe(node: Any, *, stored: bool = False) -> list[tuple[str, str]]:
    """The facts about ``node`` as ``(label, text)`` rows.

    ``stored=True`` adds the stored bytes, compression ratio and chunks initialized of an
    array (one listing of its chunks), and the members of a group (one listing).

    Examples
    --------
    >>> import zarrx
    >>> arr = zarrx.create_array({}, shape=(4, 6), chunks=(2, 3), dtype="int16")
    >>> dict(describe(arr))["Chunk shape"]
    '(2, 3)'
    """
    rows: list[tuple[str, str]] = []
    if _is_array(node):
        sharded = node.shards is not None
        chunk_grid = tuple(math.ceil(s / c) for s, c in zip(node.shape, node.chunks))
        objects = "shards" if sharded else "chunks"
        rows += [
            ("Type", f"zarrx.Array ({_format_name(node)})"),
            ("Path", node.name),
            ("Shape", _shape(node.shape)),
            ("Data type", _data_type(node)),
            ("Chunk shape", _shape(node.chunks)),
            ("Shard shape", _shape(node.shards) if sharded else NOT_SHARDED),
            ("No. chunks", f"{math.prod(chunk_grid)} {_shape(chunk_grid)}"),
            ("No. shards", f"{node.nchunks} {_shape(node.metadata.grid_shape)}" if sharded else NOT_SHARDED),
            ("Codecs", codecs_text(node.metadata.codecs.to_json(), short=False)),
            ("Fill value", _fill_value(node)),
            ("Dimension names", ", ".join(str(n) for n in node.dimension_names) if node.dimension_names else "None"),
            ("No. bytes", f"{node.nbytes} ({human_bytes(node.nbytes)})"),
        ]
        if stored:
            nbytes, nobjects = stored_totals(node)
            ratio = f"{node.nbytes / nbytes:.2f}" if nbytes else "- (nothing stored)"
            rows += [
                ("No. bytes stored", f"{nbytes} ({human_bytes(nbytes)})"),
                ("Compression ratio", ratio),
                ("Initialized", f"{nobjects}/{node.nchunks} {objects}"),
            ]
    else:
        rows += [("Type", f"zarrx.Group ({_format_name(node)})"), ("Path", node.name)]
        if _is_group(node):
            rows.append(("Consolidated", "yes" if node.is_consolidated else "no"))
            if stored:
                members = node._child_documents()
                arrays = sum(1 for metadata in members.values() if metadata.node_type == "array")
                rows.append(("Members", f"{arrays} array(s), {len(members) - arrays} group(s)"))
    rows += [("Read-only", "yes" if node.read_only else "no"), ("Store", repr(node.store))]
    return rows


def attribute_rows(node: Any, limit: int | None = MAX_ATTRIBUTES) -> tuple[list[tuple[str, str]], int]:
    """``([(name, value text), ...], how many more)`` for the node's attributes."""
    attributes = node.metadata.attributes or {}
    items = list(attributes.items())
    shown = items if limit is None else items[:limit]
    return [(str(key), _attribute_value(value)) for key, value in shown], len(items) - len(shown)


# -- the hierarchy -------------------------------------------------------------------------------
@dataclass
class TreeEntry:
    """One node of a bounded walk: its name (relative to the parent), the node, its children."""

    name: str
    node: Any
    children: list["TreeEntry"] = field(default_factory=list)
    #: children of a group that were not walked (over ``max_children`` or ``max_nodes``)
    hidden: int = 0
    #: a group below ``max_depth``: its children were not listed
    truncated: bool = False
    #: why a group's children could not be read
    error: str | None = None


def walk(
    node: Any,
    *,
    max_depth: int | None = None,
    max_children: int | None = None,
    max_nodes: int | None = None,
) -> TreeEntry:
    """The hierarchy below ``node``: at most ``max_children`` per group, ``max_nodes`` in all
    (depth first), and groups ``max_depth`` levels down (None: no bound)."""
    budget = [math.inf if max_nodes is None else max_nodes]
    read = _read_levels(node, max_depth, max_children, budget[0])

    def visit(name: str, current: Any, depth: int) -> TreeEntry:
        entry = TreeEntry(name, current)
        if not _is_group(current):
            return entry
        if max_depth is not None and depth >= max_depth:
            entry.truncated = True
            return entry
        try:
            documents = read.pop(current.path, None)
            if documents is None:
                documents = current._child_documents()
        except ZarrxError as error:
            entry.error = " ".join(str(error).split())
            return entry
        names = list(documents)
        for child_name in names if max_children is None else names[:max_children]:
            if budget[0] <= 0:
                break
            budget[0] -= 1
            child = current._node(current._child_path(child_name), documents[child_name])
            entry.children.append(visit(child_name, child, depth + 1))
        entry.hidden = len(names) - len(entry.children)
        return entry

    return visit(node.name, node, 0)


def _read_levels(node: Any, max_depth: int | None, max_children: int | None, budget: float) -> dict[str, Any]:
    """The child documents of the groups a walk will visit, by group path, read a level at a time
    (every group of a level listed at once, their children's documents in one batch) while the
    nodes found fit ``budget``. Groups from consolidated metadata need no reading; a level that
    fails is left to the walk, which reads it group by group and reports the failing one."""
    found: dict[str, Any] = {}
    level = [node] if _is_group(node) and not node.is_consolidated else []
    depth, seen = 0, 0
    while level and (max_depth is None or depth < max_depth) and seen < budget:
        try:
            read = list_children_many(level[0].store, [(group._path, group._format) for group in level])
        except ZarrxError:
            break
        next_level = []
        for group in level:
            documents = found[group.path] = read[group._path]
            names = list(documents) if max_children is None else list(documents)[:max_children]
            seen += len(names)
            next_level += [
                group._node(group._child_path(name), documents[name])
                for name in names
                if documents[name].node_type == "group"
            ]
        level, depth = next_level, depth + 1
    return found


def errors(entry: TreeEntry) -> list[TreeEntry]:
    """The entries of a walk whose members could not be read."""
    found = [entry] if entry.error is not None else []
    for child in entry.children:
        found += errors(child)
    return found


def tree_text(node: Any, **limits: Any) -> str:
    """The hierarchy as text, one node per line (``walk``'s keywords bound it).

    Examples
    --------
    >>> import zarrx
    >>> root = zarrx.create_group({})
    >>> _ = root.create_array("x", shape=(2,), dtype="int8", compressors=None)
    >>> print(tree_text(root))
    /
    └── x (2,) int8 chunks=(2,) codecs=[bytes]
    """
    return render_tree(walk(node, **limits))


def render_tree(root: TreeEntry) -> str:
    """The text of a walked hierarchy (see :func:`tree_text`)."""
    lines = [summary(root.node, root.name)]

    def add(entry: TreeEntry, indent: str) -> None:
        notes = []
        if entry.error is not None:
            notes.append(f"!! cannot list its members: {entry.error}")
        if entry.truncated:
            notes.append("… (deeper levels not shown)")
        if entry.hidden:
            notes.append(f"… and {entry.hidden} more")
        items: list[TreeEntry | str] = [*entry.children, *notes]
        for position, item in enumerate(items):
            last = position == len(items) - 1
            branch, extension = ("└── ", "    ") if last else ("├── ", "│   ")
            if isinstance(item, str):
                lines.append(f"{indent}{branch}{item}")
                continue
            lines.append(f"{indent}{branch}{summary(item.node, item.name)}")
            add(item, indent + extension)

    add(root, "")
    return "\n".join(lines)


def info_text(node: Any, *, stored: bool = False) -> str:
    """One layout for every node: :func:`describe`'s rows as ``label : value`` at one width, the
    attributes, and for a group its members (one line each, as in a tree).

    Examples
    --------
    >>> import zarrx
    >>> print(info_text(zarrx.create_array({}, shape=(4,), chunks=(2,), shards=(4,), dtype="u1")).splitlines()[5])
    Shard shape       : (4,)
    """
    rows = describe(node, stored=stored)
    attributes, more = attribute_rows(node, limit=None)
    lines = [f"{label:<{LABEL_WIDTH}} : {value}" for label, value in rows]
    lines.append(f"{'Attributes':<{LABEL_WIDTH}} : {len(attributes) + more}")
    lines += [f"  {key}: {value}" for key, value in attributes]
    if _is_group(node):
        entry = walk(node, max_depth=1, max_children=MAX_MEMBERS_LISTED)
        total = len(entry.children) + entry.hidden
        listed = f"{total}" + (f" ({len(entry.children)} listed)" if entry.hidden else "")
        lines.append(f"{'Children':<{LABEL_WIDTH}} : {listed}" if entry.error is None else
                     f"{'Children':<{LABEL_WIDTH}} : !! {entry.error}")  # fmt: skip
        lines += [f"  {summary(child.node, child.name)}{'/' if _is_group(child.node) else ''}" for child in entry.children]
    return "\n".join(lines)


def node_text(node: Any) -> str:
    """``str(node)``: an array's description, a group's (bounded) tree -- metadata only."""
    if _is_array(node):
        return info_text(node)
    return tree_text(node, **TEXT_LIMITS)


# -- HTML ------------------------------------------------------------------------------------------
_STYLE = """<style>
.zarrx-repr { font-family: var(--jp-code-font-family, monospace); font-size: 12px; line-height: 1.4; }
.zarrx-repr details > details, .zarrx-repr details > .zarrx-more { margin-left: 1.4em; }
.zarrx-repr summary { cursor: pointer; }
.zarrx-repr table { border-collapse: collapse; margin: 0.1em 0 0.3em 1.4em; }
.zarrx-repr td { padding: 0 0.8em 0 0; text-align: left; vertical-align: top; border: none; }
.zarrx-repr td:first-child { color: var(--jp-content-font-color2, #666); white-space: nowrap; }
.zarrx-repr .zarrx-name { font-weight: bold; }
.zarrx-repr .zarrx-more, .zarrx-repr .zarrx-note { color: var(--jp-content-font-color2, #666); font-style: italic; }
.zarrx-repr .zarrx-error { color: #b00; }
</style>"""

_e = html.escape


def _table(rows: list[tuple[str, str]]) -> str:
    cells = "".join(f"<tr><td>{_e(label)}</td><td>{_e(value)}</td></tr>" for label, value in rows)
    return f"<table>{cells}</table>"


#: rows a child's table leaves out: its summary line shows them, or its parent's table does
_CHILD_OMITTED = {"Type", "Path", "Shape", "Chunk shape", "Read-only", "Store"}


def _html_summary(entry: TreeEntry) -> str:
    node, name = entry.node, f"<span class='zarrx-name'>{_e(entry.name)}</span>"
    if _is_array(node):
        shards = f" shards={_shape(node.shards)}" if node.shards is not None else ""
        return (
            f"{name} {_e(_shape(node.shape))} {_e(str(node.dtype))} "
            f"<span class='zarrx-note'>chunks={_e(_shape(node.chunks))}{_e(shards)}</span>"
        )
    if entry.truncated or entry.error is not None:
        return f"{name} <span class='zarrx-note'>group</span>"
    arrays = sum(1 for child in entry.children if _is_array(child.node))
    counted = f"{arrays} array(s), {len(entry.children) - arrays} group(s)"
    counted += f" shown of {len(entry.children) + entry.hidden} members" if entry.hidden else ""
    return f"{name} <span class='zarrx-note'>group: {counted}</span>"


def _html_entry(entry: TreeEntry, *, open_: bool) -> str:
    node = entry.node
    parts = [f"<details{' open' if open_ else ''}><summary>{_html_summary(entry)}</summary>"]
    rows = describe(node) if open_ else [row for row in describe(node) if row[0] not in _CHILD_OMITTED]
    parts.append(_table(rows))
    attributes, more = attribute_rows(node)
    if attributes:
        total = len(attributes) + more
        extra = f"<div class='zarrx-more'>… and {more} more attributes</div>" if more else ""
        parts.append(f"<details><summary>Attributes ({total})</summary>{_table(attributes)}{extra}</details>")
    if entry.error is not None:
        parts.append(f"<div class='zarrx-more zarrx-error'>cannot list its members: {_e(entry.error)}</div>")
    parts += [_html_entry(child, open_=False) for child in entry.children]
    if entry.truncated:
        parts.append("<div class='zarrx-more'>… deeper levels not shown</div>")
    if entry.hidden:
        parts.append(f"<div class='zarrx-more'>… and {entry.hidden} more members not shown</div>")
    parts.append("</details>")
    return "".join(parts)


def node_html(node: Any, **limits: Any) -> str:
    """The HTML of ``node._repr_html_()``: a ``<details>`` per node, bounded by ``walk``'s keywords
    (:data:`HTML_LIMITS` by default); every name and value is escaped."""
    entry = walk(node, **{**HTML_LIMITS, **limits})
    return f"<div class='zarrx-repr'>{_STYLE}{_html_entry(entry, open_=True)}</div>"


def group_tree(group: Group) -> str:
    """``group.tree()``: every node below the group, one per line, unbounded; a group whose
    members cannot be read raises (``zarrx tree`` shows it instead). The hierarchy is read as
    :meth:`zarrx.Group.descendants` reads it."""
    lines = [group.name]
    found = group.descendants()

    def visit(relative: str, indent: str) -> None:
        children = list(found.get(relative, {}).items())
        for position, (name, node) in enumerate(children):
            last = position == len(children) - 1
            branch, extension = ("└── ", "    ") if last else ("├── ", "│   ")
            lines.append(f"{indent}{branch}{summary(node, name)}")
            if isinstance(node, Group):
                visit(f"{relative}/{name}" if relative else name, indent + extension)

    visit("", "")
    return "\n".join(lines)


conveniences.provide("node_text", node_text)
conveniences.provide("node_html", node_html)
conveniences.provide("tree", group_tree)
