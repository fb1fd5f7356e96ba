"""Metadata updates that other processes cannot lose: a store's lock, or its conditional writes.

Zarr keeps a hierarchy's metadata in documents that several writers edit: a group's
consolidated metadata copies every member's, so adding an array rewrites it. Two processes
doing that at once each read the document, add their own member and write it back -- and the
later write drops the earlier member. A store offers one of two abilities against that (both
are store abilities, see :mod:`zarrx.storage.store`):

``locks_metadata`` / ``lock_metadata()``
    a ``with`` block that no other process holding the same store's metadata lock runs at the
    same time. :class:`~zarrx.storage.local.LocalStore` takes an advisory lock
    (``fcntl.flock``) on its root folder (:func:`folder_lock`; on file systems that lock only
    files, on the file :data:`LOCK_NAME` in it, which listings never show); the lock is
    released when the block ends or the process dies, so a killed writer leaves no lock behind.
``conditional_writes`` / ``get_versioned(key)`` / ``set_if(key, value, version)``
    a read that returns the value with its version (S3's ETag) and a write that succeeds only
    while the value is still that version (``If-Match``; ``If-None-Match: *`` for a key read as
    absent). The writer retries from a fresh read when it returns False.

A store with neither (a plain fsspec file system, zarr-python's stores) is serialized only
within one process; ``docs/reliability.md`` says what that means and ``zarrx verify`` names the
members a consolidated copy misses.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Iterator

from zarrx.errors import UsageError

try:  # POSIX; Windows has no flock, and a LocalStore there offers no metadata lock
    import fcntl
except ImportError:  # pragma: no cover - not on the platforms CI runs
    fcntl = None  # type: ignore[assignment]

__all__ = ["MetadataUpdates", "ForwardedMetadataUpdates", "LOCK_NAME", "folder_lock", "HAS_FILE_LOCKS"]

#: the lock file a local store locks where its root folder cannot be locked (never listed, never deleted)
LOCK_NAME = ".zarrx-metadata.lock"
#: whether this platform has the advisory file locks a local store's metadata lock needs
HAS_FILE_LOCKS = fcntl is not None


@contextlib.contextmanager
def folder_lock(folder: str) -> Iterator[None]:
    """Hold an exclusive advisory lock (``flock``) on the folder ``folder`` (created if missing).

    The lock is taken on the folder itself, so no file is added to the store. Where a folder
    cannot be locked (NFS, where Linux emulates ``flock`` with byte-range locks that need a file
    open for writing), the file :data:`LOCK_NAME` in it is locked instead -- every process on
    that file system then does the same. ``flock`` locks belong to the open file, so the lock
    ends with the block or with the process: a killed writer never leaves the hierarchy locked.
    (A lock file library such as ``filelock`` would add Windows support at the price of a
    dependency; zarrx uses the few lines of the standard library it needs.)

    Examples
    --------
    >>> import tempfile
    >>> with folder_lock(tempfile.mkdtemp()):
    ...     pass
    """
    os.makedirs(folder, exist_ok=True)
    descriptor = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
    except OSError:  # a file system that locks only files opened for writing
        os.close(descriptor)
        descriptor = os.open(os.path.join(folder, LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
        except BaseException:
            os.close(descriptor)
            raise
    try:
        yield
    finally:
        os.close(descriptor)  # releases the lock


class MetadataUpdates:
    """The defaults of a :class:`~zarrx.storage.store.Store`: neither a lock nor conditional writes."""

    #: ``lock_metadata()`` excludes other processes' metadata updates of this store
    locks_metadata: bool = False
    #: ``get_versioned`` / ``set_if`` write only over the version read
    conditional_writes: bool = False

    @contextlib.contextmanager
    def lock_metadata(self) -> Iterator[None]:
        """A ``with`` block no other process's metadata update of this store runs in (when
        ``locks_metadata``; else it excludes nothing)."""
        yield

    def get_versioned(self, key: str) -> tuple[bytes | None, Any]:
        """``(value, version)`` of ``key``: the value (None when absent) and what :meth:`set_if`
        compares against (when ``conditional_writes``)."""
        raise UsageError(f"{self!r} offers no conditional writes (conditional_writes is False); key {key!r}")

    def set_if(self, key: str, value: bytes, version: Any) -> bool:
        """Store ``value`` under ``key`` if it is still at ``version`` (from :meth:`get_versioned`;
        None: only if it is still absent); False, writing nothing, when another writer came first."""
        raise UsageError(f"{self!r} offers no conditional writes (conditional_writes is False); key {key!r}")


class ForwardedMetadataUpdates:
    """What :class:`~zarrx.storage.store.WrapperStore` forwards to the store it wraps."""

    inner: Any

    @property
    def locks_metadata(self) -> bool:
        return self.inner.locks_metadata

    @property
    def conditional_writes(self) -> bool:
        return self.inner.conditional_writes

    def lock_metadata(self) -> Any:
        return self.inner.lock_metadata()

    def get_versioned(self, key: str) -> tuple[bytes | None, Any]:
        return self.inner.get_versioned(key)

    def set_if(self, key: str, value: bytes, version: Any) -> bool:
        return self.inner.set_if(key, value, version)
