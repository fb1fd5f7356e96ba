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

Chunks are shared documents too when writes cover them in part: a partial write reads the
chunk (or shard), merges its values and stores it whole. :mod:`zarrx.io.locks` serializes the
threads of one process; a store that can also exclude other processes offers

``locks_objects`` / ``lock_objects(keys)``
    a ``with`` block in which no other process's partial write of those keys runs.
    :class:`~zarrx.storage.local.LocalStore` takes a byte-range lock per object
    (:func:`object_file_locks`) in a lock file of the machine's temporary folder, so every
    process of the machine writing to that folder -- dask's worker processes, a
    ``multiprocessing`` pool -- keeps every value, and the store gets no file of zarrx's.
    So do the other stores of local files (fsspec's, obstore's, zarr-python's), whatever
    folder of the path each is rooted at. On a file system other machines mount too (NFS,
    Lustre, GPFS, ...: :func:`shared_folder`), each object is also locked in the store's own
    lock file :data:`OBJECT_LOCK_NAME`, against their processes.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import struct
import sys
import random
import re
import tempfile
import threading
import time
import warnings
from typing import Any, Callable, Iterable, Iterator

from zarrx.errors import StoreError, UsageError

try:  # POSIX; Windows has no flock, and a LocalStore there offers no metadata lock
    import fcntl
except ImportError:  # pragma: no cover - not on the platforms CI runs
    fcntl = None  # type: ignore[assignment]

__all__ = ["MetadataUpdates", "ForwardedMetadataUpdates", "LOCK_NAME", "LOCK_NAMES", "OBJECT_LOCK_NAME", "folder_lock",
           "HAS_FILE_LOCKS", "object_file_locks", "object_lock_file", "update_conditionally", "ATTEMPTS",
           "shared_folder", "file_system_type", "SHARED_FILE_SYSTEMS"]  # fmt: skip

#: the lock file a local store locks where its root folder cannot be locked (never listed, never deleted)
LOCK_NAME = ".zarrx-metadata.lock"
#: the lock file of a store's objects in its root folder, where the temporary folder cannot hold it
OBJECT_LOCK_NAME = ".zarrx-objects.lock"
#: zarrx's lock files in a store's root folder: never keys, never listed, never deleted
LOCK_NAMES = frozenset({LOCK_NAME, OBJECT_LOCK_NAME})
#: whether this platform has the advisory file locks a local store's metadata lock needs
HAS_FILE_LOCKS = fcntl is not None


@contextlib.contextmanager
def folder_lock(folder: str) -> Iterator[None]:
    """Hold an exclusive advisory lock (``flock``) on the folder ``folder`` (created if missing).

    One hierarchy may be reached through stores rooted at several of its folders (a group, its
    parent): so, against the other processes of this machine, the lock is also taken in the
    user's lock file (:func:`object_lock_file`) -- exclusive on the folder, shared on each folder
    above it, from the top down -- and a store rooted at a folder waits for one rooted below it,
    or above it, while stores of folders side by side do not wait for each other (Linux).

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
    with _hierarchy_lock(folder), _flock_folder(folder):
        yield


@contextlib.contextmanager
def _flock_folder(folder: str) -> Iterator[None]:
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


#: Linux's locks of an open file description (3.15 and later): byte ranges, owned by one open of
#: the file rather than by the process, so threads of one process exclude each other too and no
#: close elsewhere in the process drops them; None elsewhere (then the whole file is locked)
_OFD_SETLKW = getattr(fcntl, "F_OFD_SETLKW", None) if sys.platform == "linux" else None
#: ``struct flock`` of 64-bit Linux: type, whence, (padding), start, length, pid (0 for these locks)
_FLOCK = "hhqqi4x"
if _OFD_SETLKW is not None and struct.calcsize(_FLOCK) != 32:  # pragma: no cover - 32-bit Linux
    _OFD_SETLKW = None
#: (lock file, offset) pairs the current thread holds: a nested write of the same keys takes none again
_HELD = threading.local()


def object_lock_file() -> str:
    """The lock file of the objects of local stores: one of the user's, in a folder of the user's
    in the machine's temporary folder (``TMPDIR``). Each object is a byte of it chosen by the
    object's path below the real path of its store's root (:func:`_offset`), so stores rooted
    at a folder, at its parent or through a link lock one object alike."""
    return os.path.join(tempfile.gettempdir(), f"zarrx-locks-{os.getuid() if hasattr(os, 'getuid') else 0}",
                        "objects.lock")  # fmt: skip


@functools.lru_cache(maxsize=256)
def _real_folder(root: str) -> str:
    return os.path.realpath(root)


@contextlib.contextmanager
def _hierarchy_lock(folder: str) -> Iterator[None]:
    """Exclusive on ``folder``'s byte of the user's lock file, shared on those of the folders above
    it (taken from the top down: no two holders can wait for each other); nothing where there
    are no open-file-description locks, no usable lock file, or when this thread holds one
    already (a metadata update of one store inside another's: its own bytes would block it)."""
    if _OFD_SETLKW is None or getattr(_HELD, "hierarchy", False):
        yield
        return
    real = _real_folder(folder)
    above = [real[: end or 1] for end in range(len(real)) if real[end] == "/" and real[: end or 1] != real]
    try:
        descriptor = _open_lock_file(object_lock_file())
    except OSError:  # no temporary folder this user can write: the folder's own lock only
        yield
        return
    _HELD.hierarchy = True
    try:
        for path, kind in [(path, fcntl.F_RDLCK) for path in above] + [(real, fcntl.F_WRLCK)]:
            offset = _offset(path, "\0metadata")  # (no key holds a NUL: apart from the objects' bytes)
            fcntl.fcntl(descriptor, _OFD_SETLKW, struct.pack(_FLOCK, kind, os.SEEK_SET, offset, 1, 0))
        yield
    finally:
        _HELD.hierarchy = False
        os.close(descriptor)  # releases every lock taken through it


def _open_lock_file(path: str) -> int:
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except FileNotFoundError:  # the first lock of this user since the temporary folder was emptied
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o600)


def _offset(root: str, key: str) -> int:
    """The byte of the lock file that stands for the object ``key`` of the store at ``root``: a
    stable digest of its path (every process agrees), below the root's real path."""
    path = os.path.join(_real_folder(root), key).encode("utf-8", "surrogateescape")
    return int.from_bytes(hashlib.blake2b(path, digest_size=8).digest(), "little") >> 2


@contextlib.contextmanager
def object_file_locks(root: str, keys: Iterable[str]) -> Iterator[None]:
    """Hold exclusive locks, against every process of this machine, of the objects ``keys`` of
    the local store at ``root``.

    Each object is one byte of :func:`object_lock_file` (an empty file; locks past its end are
    allowed), whatever root of its folder the store has, locked with an open-file-description
    lock in ascending order, so holders of overlapping sets cannot deadlock; closing the file at
    the end of the block, or the end of the process, releases them. Where those locks do not
    exist (not Linux), the whole file is locked (``flock``): partial writes of the user's
    processes then run one at a time. Keys this thread already holds are not taken again.

    Examples
    --------
    >>> import tempfile
    >>> root = tempfile.mkdtemp()
    >>> with object_file_locks(root, ["c/0", "c/1"]):
    ...     with object_file_locks(root, ["c/1"]):  # nested: already held
    ...         pass
    """
    held: set[tuple[str, int]] = _HELD.__dict__.setdefault("pairs", set())
    wanted = sorted({_offset(root, key) for key in keys}) if _OFD_SETLKW is not None else [0]
    in_store = os.path.join(_real_folder(root), OBJECT_LOCK_NAME)
    with contextlib.ExitStack() as stack:
        try:
            path = object_lock_file()
            descriptor = _open_lock_file(path)
        except OSError as unusable:  # no temporary folder this user can write: the store's own folder
            path, descriptor = in_store, _open_in_store(root, in_store, unusable)
        stack.enter_context(_locked(descriptor, path, wanted, held))
        if path != in_store and shared_folder(root):  # and against the other machines mounting it
            try:
                descriptor = os.open(in_store, os.O_RDWR | os.O_CREAT, 0o666)
                stack.enter_context(_locked(descriptor, in_store, wanted, held))
            except OSError as error:  # a file system without locks: this machine's lock only
                _warn_unshared(root, error)
        yield


def _open_in_store(root: str, path: str, unusable: OSError) -> int:
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as error:
        raise StoreError(
            f"cannot lock the chunks of {root!r} against other processes' partial writes: no temporary "
            f"folder ({unusable}), nor {path!r} ({error}); set TMPDIR to a folder this user can write"
        ) from error


@contextlib.contextmanager
def _locked(descriptor: int, path: str, offsets: list[int], held: set[tuple[str, int]]) -> Iterator[None]:
    """Exclusive locks of ``offsets`` of the lock file open as ``descriptor`` (closed at the end,
    which releases them); offsets this thread already holds are not taken again."""
    mine = [(path, offset) for offset in offsets if (path, offset) not in held]
    try:
        for _, offset in mine:
            if _OFD_SETLKW is not None:
                fcntl.fcntl(descriptor, _OFD_SETLKW, struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, offset, 1, 0))
            else:
                fcntl.flock(descriptor, fcntl.LOCK_EX)
        held.update(mine)
        yield
    finally:
        held.difference_update(mine)
        os.close(descriptor)


#: file systems other machines mount too (network and cluster file systems), as ``/proc/self/mountinfo`` names them
SHARED_FILE_SYSTEMS = frozenset({
    "nfs", "nfs4", "lustre", "gpfs", "cifs", "smb3", "smbfs", "beegfs", "ceph", "fuse.ceph-fuse", "glusterfs",
    "fuse.glusterfs", "ocfs2", "gfs2", "afs", "wekafs", "panfs", "fuse.sshfs", "fuse.juicefs", "orangefs",
})  # fmt: skip
#: ``ZARRX_OBJECT_LOCKS``: "auto" (the default: shared where the folder's file system is one of
#: SHARED_FILE_SYSTEMS), "shared" (always) or "machine" (never)
OBJECT_LOCKS_SETTINGS = ("auto", "shared", "machine")


def shared_folder(root: str) -> bool:
    """Whether partial writes to the local store at ``root`` are also locked in the lock file in
    the store's folder, against processes of other machines mounting it (``ZARRX_OBJECT_LOCKS``)."""
    setting = os.environ.get("ZARRX_OBJECT_LOCKS", "auto").strip().lower() or "auto"
    if setting not in OBJECT_LOCKS_SETTINGS:
        raise UsageError(f"ZARRX_OBJECT_LOCKS={setting!r}: expected one of {', '.join(OBJECT_LOCKS_SETTINGS)}")
    return setting == "shared" or setting == "auto" and file_system_type(_real_folder(root)) in SHARED_FILE_SYSTEMS


@functools.lru_cache(maxsize=256)
def file_system_type(path: str, mounts: str = "/proc/self/mountinfo") -> str:
    """The type of the file system the absolute ``path`` is on (``"nfs4"``, ``"ext4"``), from the
    mount table of ``mounts``; "" where there is none (not Linux)."""
    try:
        with open(mounts, encoding="utf-8", errors="surrogateescape") as table:
            lines = table.read().splitlines()
    except OSError:
        return ""
    found, longest = "", -1
    for line in lines:
        fields, _, rest = line.partition(" - ")
        parts = fields.split()
        if len(parts) < 5 or not rest:
            continue
        point = re.sub(r"\\([0-7]{3})", lambda escape: chr(int(escape[1], 8)), parts[4])  # "\040": a space
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= longest:  # the last of equal mounts is the one on top
            found, longest = rest.split()[0], len(point)
    return found


_UNSHARED_WARNED: set[str] = set()


def _warn_unshared(root: str, error: OSError) -> None:
    if root not in _UNSHARED_WARNED:
        _UNSHARED_WARNED.add(root)
        warnings.warn(
            f"cannot lock the chunks of {root!r} against other machines' partial writes ({error}): its file system "
            "offers no locks; processes of other machines must write disjoint chunks (ZARRX_OBJECT_LOCKS=machine "
            "silences this)", RuntimeWarning, stacklevel=4,
        )  # fmt: skip


#: how often a conditional update of one value is tried before giving up
ATTEMPTS = 50


def update_conditionally(store: Any, key: str, change: Callable[[bytes | None], bytes | None]) -> None:
    """Rewrite the value at ``key`` as ``change`` makes it from its stored bytes (None: leave it),
    only over the version read (``get_versioned`` / ``set_if``); read it again and retry, after a
    jittered backoff, while another writer came first -- a consolidated document, a chunk written
    in part."""
    for attempt in range(ATTEMPTS):
        raw, version = store.get_versioned(key)
        updated = change(raw)
        if updated is None or store.set_if(key, updated, version):
            return
        time.sleep(random.uniform(0, min(0.5, 0.005 * 2**attempt)))  # jittered backoff, then read again
    raise StoreError(f"{key}: another writer changed it at each of {ATTEMPTS} attempts to update it; try again")


class MetadataUpdates:
    """The defaults of a :class:`~zarrx.storage.store.Store`: neither a lock nor conditional writes."""

    #: ``lock_metadata()`` excludes other processes' metadata updates of this store
    locks_metadata: bool = False
    #: ``get_versioned`` / ``set_if`` write only over the version read
    conditional_writes: bool = False
    #: ``lock_objects(keys)`` excludes other processes' partial writes of those keys
    locks_objects: bool = False

    def lock_objects(self, keys: Iterable[str]) -> Any:
        """A ``with`` block in which no other process's partial write of ``keys`` runs (when
        ``locks_objects``; else it excludes nothing: :mod:`zarrx.io.locks` excludes threads)."""
        return contextlib.nullcontext()

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

    @property
    def locks_objects(self) -> bool:
        return self.inner.locks_objects

    def lock_objects(self, keys: Iterable[str]) -> Any:
        return self.inner.lock_objects(keys)

    def get_versioned(self, key: str) -> tuple[bytes | None, Any]:
        return self.inner.get_versioned(key)

    def set_if(self, key: str, value: bytes, version: Any) -> bool:
        return self.inner.set_if(key, value, version)
