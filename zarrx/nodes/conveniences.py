"""Conveniences on arrays and groups that the layers above the core implement.

``arr.to_dask()`` builds a dask graph, ``str(node)``, ``node._repr_html_()`` and
``group.tree()`` render text and HTML, ``arr.explain()`` renders a traced read: that work
belongs to the dask layer and the tools, which the core never imports. So the core asks this
registry for the implementation, and the layer that has it provides it: ``import zarrx``
provides every one (the dask layer's lazily, so ``import zarrx`` does not import dask).

A convenience nobody provided raises :class:`~zarrx.errors.UsageError` naming what to import.
"""

from __future__ import annotations

from typing import Any, Callable

from zarrx.errors import UsageError

__all__ = ["provide", "call", "NAMES"]

#: every convenience and the module that provides it
NAMES = {
    "to_dask": "zarrx.dask",
    "append_dask": "zarrx.dask",
    "explain": "zarrx.tools.explain",
    "node_text": "zarrx.tools.display",
    "node_html": "zarrx.tools.display",
    "tree": "zarrx.tools.display",
}

_PROVIDED: dict[str, Callable[..., Any]] = {}


def provide(name: str, implementation: Callable[..., Any]) -> None:
    """Make ``implementation`` the one behind the convenience ``name`` (see :data:`NAMES`)."""
    if name not in NAMES:
        raise UsageError(f"unknown convenience {name!r}; the conveniences are {sorted(NAMES)}")
    _PROVIDED[name] = implementation


def call(name: str, *args: Any, **kwargs: Any) -> Any:
    """Run the convenience ``name``."""
    implementation = _PROVIDED.get(name)
    if implementation is None:
        raise UsageError(f"{name} is provided by {NAMES[name]}, which is not loaded; import zarrx (or {NAMES[name]})")
    return implementation(*args, **kwargs)
