"""The data type contract.

A :class:`DataType` is one Zarr data type (``"float32"``, ``{"name":
"numpy.datetime64", ...}``…) bound to the NumPy dtype zarrx uses for it in
memory. It knows:

* its JSON form (:meth:`to_json`, :meth:`from_json`), and which NumPy dtypes it
  stands for (:meth:`from_numpy`);
* how its scalars are written as a ``fill_value`` (:meth:`fill_value_from_json`,
  :meth:`fill_value_to_json`), and how a user's Python value becomes one
  (:meth:`cast_scalar`);
* how its elements are laid out by the ``bytes`` codec (:meth:`to_stored`,
  :meth:`from_stored`: by default the NumPy dtype's bytes in the stored byte order), and by the
  ``packbits`` codec (:attr:`packbits_bits` bits per component, :attr:`packbits_components`
  components, sign-extended when :attr:`packbits_signed`).

In memory, arrays are always native byte order; the ``bytes`` codec handles
the stored endianness. Fixed-size types have ``item_size`` bytes per element;
variable-length ones (``string``, ``bytes``) have ``item_size is None`` and need
a variable-length array -> bytes codec.

Errors are :class:`~zarrx.errors.MetadataError` whose message starts with the
field name (``data_type`` or ``fill_value``); the metadata layer adds the key.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar, Mapping

import numpy as np

__all__ = ["DataType", "JSON"]

JSON = Any


class DataType(ABC):
    #: the registered spec name written to metadata
    name: ClassVar[str]
    #: other names read (never written), e.g. "variable_length_bytes", "structured"
    aliases: ClassVar[tuple[str, ...]] = ()
    #: bits of each component in the ``packbits`` codec (its ``N``); None: packbits cannot encode it
    packbits_bits: ClassVar[int | None] = None
    #: components per element (2 for complex numbers): packbits applies its bit range to each
    packbits_components: ClassVar[int] = 1
    #: packbits sign-extends decoded components (signed integers); others are zero-extended
    packbits_signed: ClassVar[bool] = False
    #: the one array -> bytes codec that can store the type (zarrs' ``optional``), None: any that fits
    stored_by: ClassVar[str | None] = None

    @property
    @abstractmethod
    def numpy_dtype(self) -> np.dtype:
        """The in-memory NumPy dtype (native byte order)."""

    @property
    def item_size(self) -> int | None:
        """Bytes per element in the ``bytes`` codec's encoding; None for variable length."""
        return self.numpy_dtype.itemsize

    @property
    def is_variable_length(self) -> bool:
        return self.item_size is None

    @property
    def needs_endian(self) -> bool:
        """Whether the ``bytes`` codec must be told a byte order for this type."""
        return False

    @classmethod
    @abstractmethod
    def from_json(cls, name: str, configuration: Mapping[str, Any]) -> "DataType":
        """Build from a parsed extension (name and configuration)."""

    @abstractmethod
    def to_json(self) -> JSON:
        """The canonical ``data_type`` value."""

    @classmethod
    def from_numpy(cls, dtype: np.dtype) -> "DataType | None":
        """The data type for a NumPy dtype, or None when this class does not represent it."""
        return None

    @abstractmethod
    def fill_value_from_json(self, value: JSON) -> Any:
        """Decode a ``fill_value`` JSON value into a scalar of :attr:`numpy_dtype`."""

    @abstractmethod
    def fill_value_to_json(self, value: Any) -> JSON:
        """Encode a scalar in the canonical ``fill_value`` form."""

    @abstractmethod
    def default_fill_value(self) -> Any:
        """The fill value used when the user gives none."""

    def cast_scalar(self, value: Any) -> Any:
        """Turn a user's value (Python or NumPy scalar) into a scalar of this type."""
        return np.asarray(value).astype(self.numpy_dtype, casting="unsafe")[()]

    # -- the bytes codec's layout ----------------------------------------------------------
    def stored_is_memory(self, byte_order: str) -> bool:
        """Whether the ``bytes`` encoding in ``byte_order`` (``"<"`` or ``">"``) is the in-memory
        bytes as they are (then codecs may decode straight into an output buffer)."""
        return self.numpy_dtype.newbyteorder(byte_order) == self.numpy_dtype

    def to_stored(self, array: np.ndarray, byte_order: str) -> np.ndarray:
        """A C-contiguous array whose bytes are the ``bytes`` codec's encoding of ``array``."""
        return np.ascontiguousarray(array, dtype=self.numpy_dtype.newbyteorder(byte_order))

    def from_stored(self, raw: np.ndarray, shape: tuple[int, ...], byte_order: str) -> np.ndarray:
        """The elements encoded in ``raw`` (flat uint8 of exactly ``item_size`` bytes per element),
        as an array of ``shape`` and :attr:`numpy_dtype` (possibly a read-only view of ``raw``)."""
        stored = self.numpy_dtype.newbyteorder(byte_order)
        array = raw.view(stored).reshape(shape)
        return array if stored == self.numpy_dtype else array.astype(self.numpy_dtype)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DataType) and self.to_json() == other.to_json()

    def __hash__(self) -> int:
        return hash(repr(self.to_json()))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.to_json()!r})"
