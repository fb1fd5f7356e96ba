"""Persisted user attributes of an array or group.

:class:`Attributes` is a ``MutableMapping`` view of the node's ``attributes``
member. Every change rewrites the node's ``zarr.json`` at once (``update`` makes
one write for many keys), so ``node.attrs["units"] = "K"`` is saved when the
statement ends. A change applies to the attributes stored at that moment (read again
under the hierarchy's metadata lock), so processes setting different keys keep each other's.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any, Callable, Iterator, Mapping, Protocol

__all__ = ["Attributes"]


class _Node(Protocol):
    def _get_attributes(self) -> dict[str, Any]: ...
    def _change_attributes(self, change: Callable[[dict[str, Any]], dict[str, Any]]) -> None: ...


class Attributes(MutableMapping):
    def __init__(self, node: _Node) -> None:
        self._node = node

    def __getitem__(self, key: str) -> Any:
        return self._node._get_attributes()[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.update({key: value})

    def __delitem__(self, key: str) -> None:
        if key not in self._node._get_attributes():
            raise KeyError(key)
        self._node._change_attributes(lambda stored: {name: value for name, value in stored.items() if name != key})

    def __iter__(self) -> Iterator[str]:
        return iter(self._node._get_attributes())

    def __len__(self) -> int:
        return len(self._node._get_attributes())

    def update(self, other: Mapping[str, Any] = (), /, **kwargs: Any) -> None:  # type: ignore[override]
        changes = dict(other, **kwargs)
        self._node._change_attributes(lambda stored: {**stored, **changes})

    def put(self, attributes: Mapping[str, Any]) -> None:
        """Replace all attributes in one write."""
        replacement = dict(attributes)
        self._node._change_attributes(lambda stored: replacement)

    def asdict(self) -> dict[str, Any]:
        return dict(self._node._get_attributes())

    def __repr__(self) -> str:
        return f"Attributes({self._node._get_attributes()!r})"
