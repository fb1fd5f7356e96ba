"""The data type registry (core spec, "Data types"; zarr-extensions "data-types").

Every :class:`~zarrx.dtypes.base.DataType` class registers itself with
:func:`register_data_type`, keyed by its spec ``name`` and each read-only
alias. A family of names such as the raw bits types ``r8``, ``r16``… registers
a ``name_pattern`` instead.

* :func:`parse_data_type` reads the JSON ``data_type`` of array metadata. An
  unknown name raises :class:`~zarrx.errors.UnsupportedExtensionError`: the
  core spec does not allow ``"must_understand": false`` on data types, so an
  unknown data type can never be skipped.
* :func:`resolve_data_type` turns what a user passes as ``dtype`` (a NumPy
  dtype, a string like ``"<f4"`` or ``"float32"``, ``str``, ``bytes``, a JSON
  object, or a :class:`DataType`) into a :class:`DataType`.

Both raise :class:`~zarrx.errors.MetadataError` whose message starts with the
field (``data_type``, ``data_type.configuration.unit``…) or, for user input,
with ``dtype``.
"""

from __future__ import annotations

from zarrx.dtypes.base import JSON, DataType
from zarrx.dtypes.registry import (
    data_type_from_numpy,
    parse_data_type,
    register_data_type,
    registered_data_types,
    resolve_data_type,
)

# The modules register their classes on import.
from zarrx.dtypes import ml, numeric, optional, strings, struct, temporal  # noqa: E402, F401  isort: skip

__all__ = [
    "DataType",
    "JSON",
    "register_data_type",
    "parse_data_type",
    "resolve_data_type",
    "registered_data_types",
]
