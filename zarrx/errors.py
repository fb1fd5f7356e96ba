"""The one error tree of zarrx.

Every error zarrx raises on purpose is a :class:`ZarrxError`. Where a builtin
exception fits, the class also inherits from it, so ``except FileNotFoundError``
and ``except ValueError`` keep working for code that does not know zarrx.

Messages say what was expected, what was found, and name the store key, node
path or metadata field involved, so a user can find the bad object.
"""

from __future__ import annotations

__all__ = [
    "ZarrxError",
    "NodeNotFoundError",
    "ContainsArrayError",
    "ContainsGroupError",
    "MetadataError",
    "UnknownCodecError",
    "ConflictingDimensionsError",
    "UnsupportedExtensionError",
    "ChunkDecodeError",
    "ChunkEncodeError",
    "ReadOnlyError",
    "InvalidPathError",
    "SelectionError",
    "BoundsCheckError",
    "ChunkAlignmentError",
    "GraphTooLargeError",
    "StoreError",
    "StoreTimeoutError",
    "OutsideStoreError",
    "UsageError",
    "UsageTypeError",
    "NameNotFoundError",
    "StoreTypeError",
]


class ZarrxError(Exception):
    """Base class of every error raised by zarrx."""

    def __str__(self) -> str:
        # the message as given: a class that is also a KeyError would otherwise show its repr
        return Exception.__str__(self)


class NodeNotFoundError(ZarrxError, FileNotFoundError, KeyError):
    """No array or group exists at the requested path (also a KeyError, for ``group[name]``)."""


class ContainsArrayError(ZarrxError, FileExistsError):
    """An array already exists where a group (or a new array) was to be created."""


class ContainsGroupError(ZarrxError, FileExistsError):
    """A group already exists where an array (or a new group) was to be created."""


class MetadataError(ZarrxError, ValueError):
    """A metadata document is invalid or uses something zarrx does not support.

    The message names the document's key and the offending field.
    """


class UnsupportedExtensionError(MetadataError):
    """A required extension (``must_understand`` true) that zarrx does not know."""


class UnknownCodecError(UnsupportedExtensionError):
    """A codec name that is not in the codec registry."""


class ConflictingDimensionsError(MetadataError):
    """Arrays of one group give one dimension name different lengths (xarray needs one length)."""


class ChunkDecodeError(ZarrxError, ValueError):
    """A stored chunk is corrupt, truncated, fails its checksum or decodes to the wrong size.

    The message names the chunk key and the codec that failed.
    """


class ChunkEncodeError(ZarrxError, ValueError):
    """A chunk could not be encoded with the array's codecs (e.g. a value the codec cannot hold)."""


class ReadOnlyError(ZarrxError, PermissionError):
    """A write was attempted through a node or store opened read-only."""


class InvalidPathError(ZarrxError, ValueError):
    """A node name or path that is not allowed (``..``, absolute, empty, reserved)."""


class SelectionError(ZarrxError, IndexError):
    """A selection that the array cannot take (wrong type, too many indices, bad step)."""


class BoundsCheckError(SelectionError):
    """An index outside the array's bounds."""


class ChunkAlignmentError(ZarrxError, ValueError):
    """A parallel write would make two tasks write the same chunk (or shard)."""


class GraphTooLargeError(ZarrxError, MemoryError):
    """A dask graph that cannot be built: its block sizes alone would not fit in memory (too many
    chunks). Larger blocks (``chunks=``) make it fit."""


class StoreError(ZarrxError, OSError):
    """The underlying storage failed for a key (other than the key being absent)."""


class StoreTimeoutError(StoreError, TimeoutError):
    """A store request (or a batch of them) got no complete answer in the time allowed."""


class OutsideStoreError(StoreError, PermissionError):
    """A key whose file lies outside the store's root folder, through a symbolic link.

    Writes and deletions never leave the root; reads do only where the store allows it
    (``LocalStore(root, follow_external_links=True)``).
    """


class UsageError(ZarrxError, ValueError):
    """An argument zarrx cannot take (an unknown mode, an unusable option)."""


class UsageTypeError(UsageError, TypeError):
    """An argument of the wrong type (a region that is not a dict, a variable named 0, ...)."""


class NameNotFoundError(UsageError, KeyError):
    """An argument names something that is not there: a variable in ``encoding``, a coordinate
    value of ``region="auto"`` missing from the stored coordinate."""


class StoreTypeError(UsageTypeError):
    """An object that cannot be used as a store."""
