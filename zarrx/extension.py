"""Extension definitions (core spec, "Extension definition").

An extension point value (a data type, chunk grid, chunk key encoding, codec or
storage transformer) is either a short-hand name (a string) or an object with a
``name``, an optional ``configuration`` object and an optional
``must_understand`` flag (true when absent). :func:`parse_extension` turns either
form into an :class:`Extension`; it never decides whether the name is known:
that is the job of the registry of each extension point.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from zarrx.errors import MetadataError

__all__ = ["Extension", "parse_extension", "parse_configuration"]


@dataclass(frozen=True)
class Extension:
    name: str
    configuration: Mapping[str, Any] = field(default_factory=dict)
    must_understand: bool = True
    #: whether the document used an object (``{"name": ...}``) rather than a bare name
    is_object: bool = True


def parse_extension(value: Any, field_name: str) -> Extension:
    """Parse an extension definition, raising :class:`MetadataError` naming ``field_name``."""
    if isinstance(value, str):
        if not value:
            raise MetadataError(f"{field_name}: expected a non-empty extension name, found ''")
        return Extension(value, {}, True, is_object=False)
    if not isinstance(value, Mapping):
        raise MetadataError(
            f"{field_name}: expected a name or an object with 'name', found {type(value).__name__} {value!r}"
        )
    name = value.get("name")
    if not isinstance(name, str) or not name:
        raise MetadataError(f"{field_name}.name: expected a non-empty string, found {name!r}")
    configuration = parse_configuration(value.get("configuration", {}), f"{field_name}.configuration")
    must_understand = value.get("must_understand", True)
    if not isinstance(must_understand, bool):
        raise MetadataError(f"{field_name}.must_understand: expected a boolean, found {must_understand!r}")
    unexpected = set(value) - {"name", "configuration", "must_understand"}
    if unexpected:
        # e.g. {"name": "v2", "separator": "/"}: ignoring it would silently misread every key
        raise MetadataError(
            f"{field_name}: unexpected members {sorted(unexpected)} in extension {name!r} "
            "(settings belong in 'configuration')"
        )
    return Extension(name, configuration, must_understand)


def parse_configuration(value: Any, field_name: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise MetadataError(f"{field_name}: expected an object, found {type(value).__name__} {value!r}")
    return dict(value)
