"""Persisted user attributes of an array or group.

:class:`Attributes` is a ``MutableMapping`` view of the node's ``attributes``
member. Every change rewrites the node's ``zarr.json`` at once (``update`` makes
one write for many keys), so ``node.attrs["units"] = "K"`` is saved when the
statement ends.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any, Iterator, Mapping, Protocol

__all__ = ["Attributes"]


class _Node(Protocol):
    def _get_attributes(self) -> dict[str, Any]: ...
    def _set_attributes(self, attributes: dict[str, Any]) -> None: ...


class Attributes(MutableMapping):
    def __init__(self, node: _Node) -> None:
        self._node = node

    def __getitem__(self, key: str) -> Any:
        return self._node._get_attributes()[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.update({key: value})

    def __delitem__(self, key: str) -> None:
        attributes = dict(self._node._get_attributes())
        del attributes[key]
        self._node._set_attributes(attributes)

    def __iter__(self) -> Iterator[str]:
        return iter(self._node._get_attributes())

    def __len__(self) -> int:
        return len(self._node._get_attributes())

    def update(self, other: Mapping[str, Any] = (), /, **kwargs: Any) -> None:  # type: ignore[override]
        attributes = dict(self._node._get_attributes())
        attributes.update(other, **kwargs)
        self._node._set_attributes(attributes)

    def put(self, attributes: Mapping[str, Any]) -> None:
        """Replace all attributes in one write."""
        self._node._set_attributes(dict(attributes))

    def asdict(self) -> dict[str, Any]:
        return dict(self._node._get_attributes())

    def __repr__(self) -> str:
        return f"Attributes({self._node._get_attributes()!r})"
