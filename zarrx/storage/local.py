"""A store in a directory on the local file system (``stores/filesystem`` spec).

Key ``a/b/c`` is the file ``<root>/a/b/c``. Plain ``os`` calls and ``open``,
no fsspec: a single-key read is one ``open(...).read()``.

Rules this store keeps:

* **Atomic writes.** :meth:`LocalStore.set` writes a temporary file beside the
  target (``.<name>.<32 hex digits>.tmp``) and renames it over the target with
  ``os.replace``, so a reader sees the old bytes or the new ones, never a torn
  file, and a crashed writer leaves the old value. Temporary files are never
  listed. (No ``fsync``: atomic for readers, not durable across a power cut.)
* **Metadata updates across processes** run under an advisory lock on the root folder
  (:meth:`LocalStore.lock_metadata`, :mod:`zarrx.storage.metadata_updates`; where folders
  cannot be locked, on ``<root>/.zarrx-metadata.lock``, which is never listed).
* **Keys stay inside the root.** Every key and prefix goes through
  :func:`~zarrx.storage.paths.validate_key`; ``..`` or a leading ``/`` raise
  :class:`~zarrx.errors.InvalidPathError`. Every read, write and deletion is resolved
  inside the root by :class:`~zarrx.storage.containment.RootFolder`: symbolic links that
  stay inside are followed, none that leaves it is written or deleted through, and reads
  through one raise :class:`~zarrx.errors.OutsideStoreError` unless the store was made
  with ``follow_external_links=True``. Listings show only what the store can read;
  :meth:`LocalStore.external_links` lists the links out of the root.
* **No empty folders.** :meth:`LocalStore.delete` and
  :meth:`LocalStore.delete_prefix` remove the folders they leave empty, up to
  (not including) the root, so a deleted node does not linger as a prefix in
  :meth:`LocalStore.list_dir`. A writer racing that cleanup re-creates its
  folder and retries.
* **Missing is None.** A missing file (or a file where a folder of the key was
  expected) reads as None; any other OS error is a :class:`~zarrx.errors.StoreError`
  naming the key. So is anything else that is not a regular file: a folder where
  a key was asked for (a chunk's key made a folder would otherwise read as the
  fill value, silently), a FIFO, a device such as ``/dev/zero`` behind a symlink,
  a socket (reading one could block forever or never end). :meth:`LocalStore.exists`
  is False for a folder: it holds no value.

Batch methods (``get_many``, ``get_ranges``, ``set_many``, ``delete_many``)
run on zarrx's shared thread pool (:mod:`zarrx.concurrency`: a few groups per
worker, small batches inline). ``get_ranges`` opens each file once for all its
ranges.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import re
from typing import Any, BinaryIO, Callable, Iterable, Iterator, Mapping, Sequence

from zarrx.concurrency import call_io_depth, map_concurrent, map_io
from zarrx.errors import ReadOnlyError, StoreError
from zarrx.storage.batch_files import folder_reader, folder_writer
from zarrx.storage.containment import RootFolder
from zarrx.storage.metadata_updates import HAS_FILE_LOCKS, LOCK_NAMES, folder_lock, object_file_locks
from zarrx.storage.paths import validate_key, validate_prefix
from zarrx.storage.store import ByteRequest, RangeReader, Store, byte_bounds

__all__ = ["LocalStore", "is_temporary_name"]


# A missing file, or a file where a folder was expected (a folder where a file was is an error).
_MISSING = (FileNotFoundError, NotADirectoryError)

_TEMPORARY_NAME = re.compile(r"\..+\.[0-9a-f]{32}\.tmp")


def is_temporary_name(name: str) -> bool:
    """True for the name of a temporary file :meth:`LocalStore.set` writes before renaming it."""
    return name[:1] == "." and name.endswith(".tmp") and _TEMPORARY_NAME.fullmatch(name) is not None


def _hidden(name: str, folder_key: str) -> bool:
    """A temporary file, or one of zarrx's lock files in the root folder: not a key."""
    return name[:1] == "." and (is_temporary_name(name) or (name in LOCK_NAMES and not folder_key))


# -- reading one file --------------------------------------------------------------------
def _read_range(file: BinaryIO, byte_range: ByteRequest) -> bytes:
    start, end = byte_bounds(byte_range, os.fstat(file.fileno()).st_size)
    file.seek(start)
    return file.read(end - start)


class LocalStore(Store):
    """Keys as files under a root directory.

    Parameters
    ----------
    root
        The directory (made absolute). It need not exist: the first write
        creates it; reads from a missing root find nothing.
    read_only
        Refuse writes with :class:`~zarrx.errors.ReadOnlyError`.
    follow_external_links
        Read through symbolic links that leave the root (refused with
        :class:`~zarrx.errors.OutsideStoreError` by default). Writes and deletions never
        leave the root, whatever this says.

    Examples
    --------
    >>> import tempfile
    >>> from zarrx.storage import SuffixByteRequest
    >>> store = LocalStore(tempfile.mkdtemp() + "/data.zarr")
    >>> store.set("zarr.json", b'{"zarr_format": 3, "node_type": "group"}')
    >>> store.get("zarr.json", SuffixByteRequest(2))
    b'"}'
    """

    #: abilities (see zarrx.storage.store): a read is a file read, and a batch of ranges opens
    #: each file once, so its ranges come from one version of it
    reads_are_local = True
    consistent_ranges = True
    locks_metadata = HAS_FILE_LOCKS

    def __init__(
        self, root: str | os.PathLike[str], read_only: bool = False, *, follow_external_links: bool = False
    ) -> None:
        self.root = os.path.abspath(os.fspath(root))
        self.read_only = read_only
        self.follow_external_links = bool(follow_external_links)
        self._folder = RootFolder(self.root, self.follow_external_links)
        # Keys join the root by concatenation, never os.path.join, which would
        # restart at an absolute component.
        self._prefix = os.path.join(self.root, "")

    def local_path(self, key: str) -> str:
        return self._prefix + validate_key(key)

    @property
    def location(self) -> tuple[str, str]:
        return ("file", self.root)

    def lock_metadata(self) -> Any:
        """An advisory lock on the root folder for the block's duration (see :func:`folder_lock`)."""
        if self.read_only or not HAS_FILE_LOCKS:
            return contextlib.nullcontext()  # a read-only store updates no metadata
        return folder_lock(self.root)

    @property
    def locks_objects(self) -> bool:  # type: ignore[override]
        return HAS_FILE_LOCKS and not self.read_only

    def lock_objects(self, keys: Iterable[str]) -> Any:
        """Locks of ``keys`` against other processes' partial writes (see :func:`object_file_locks`)."""
        return object_file_locks(self.root, keys) if self.locks_objects else contextlib.nullcontext()

    def external_links(self, prefix: str = "") -> list[tuple[str, str]]:
        validate_prefix(prefix)
        return self._folder.external_links(prefix.rstrip("/"))

    def _error(self, action: str, key: str, error: BaseException) -> StoreError:
        if isinstance(error, StoreError):
            return error
        return StoreError(f"could not {action} {key!r} in {self!r}: {error}")

    def _check_writable(self, key: str) -> None:
        if self.read_only:
            raise ReadOnlyError(
                f"cannot write {key!r}: {self!r} is read-only (open it with mode 'r+', 'a' or 'w' to write)"
            )

    # -- reading -----------------------------------------------------------------
    def _read(self, key: str, use: Callable[[BinaryIO], Any]) -> Any:
        """``use(file)`` on the file of ``key``; None when there is none."""
        return self._reading(key, lambda: self._folder.read(validate_key(key), use))

    def _reading(self, key: str, read: Callable[[], Any]) -> Any:
        """``read()``, which reads ``key``: None when there is no file, OS errors as StoreErrors."""
        try:
            return read()
        except OSError as error:
            return self._read_failed(key, error)

    def _read_failed(self, key: str, error: OSError) -> None:
        """None when ``error``, from reading ``key``, says there is no file; else it raised as a StoreError
        (a folder where the file should be among them)."""
        if isinstance(error, _MISSING):
            return None
        if self._is_folder(key, error):
            raise StoreError(
                f"could not read {key!r} in {self!r}: it is a folder, not a file holding a value "
                "(a chunk's key must be a file or absent)"
            ) from error
        raise self._error("read", key, error) from error

    def _is_folder(self, key: str, error: BaseException | None) -> bool:
        """Whether ``error``, from opening ``key``, says it is a folder (Windows: a PermissionError)."""
        return isinstance(error, IsADirectoryError) or (
            isinstance(error, PermissionError) and not isinstance(error, StoreError) and os.path.isdir(self.local_path(key))
        )  # fmt: skip

    def get(self, key: str, byte_range: ByteRequest | None = None) -> bytes | None:
        if byte_range is None:
            return self._read(key, _read_all)
        return self._read(key, lambda file: _read_range(file, byte_range))

    @contextlib.contextmanager
    def batch_reader(self, max_size: int | None = None) -> Iterator[Callable[[str], bytes | None]]:
        # values at hand: max_size is not needed to bound a read (as get_many)
        with folder_reader(self._folder) as read_file:

            def read(key: str) -> bytes | None:  # _reading inline: the loop of small-chunk reads calls it per file
                try:
                    return read_file(validate_key(key))
                except OSError as error:
                    return self._read_failed(key, error)

            yield read

    @contextlib.contextmanager
    def range_readers(self, max_size: int | None = None) -> Iterator[Callable[[str], RangeReader | None] | None]:
        if not _POSITIONED_READS:
            yield None
            return
        files: list[_FileRanges] = []

        def open_value(key: str) -> RangeReader | None:
            opened = self._reading(key, lambda: self._folder.open_regular(validate_key(key)))
            if opened is None:
                return None
            files.append(reader := _FileRanges(self, key, *opened))
            return reader

        try:
            yield open_value
        finally:
            for reader in files:
                os.close(reader.descriptor)

    def get_many(self, keys: Sequence[str], *, max_size: int | None = None) -> dict[str, bytes | None]:
        keys = list(keys)
        return dict(zip(keys, map_concurrent(self.get, keys), strict=True))

    def get_ranges(
        self, requests: Sequence[tuple[str, ByteRequest]], *, max_size: int | None = None
    ) -> list[bytes | None]:
        # One open per file, however many of its ranges are asked for.
        positions: dict[str, list[int]] = {}
        for position, (key, _) in enumerate(requests):
            positions.setdefault(key, []).append(position)
        results: list[bytes | None] = [None] * len(requests)

        def read_ranges(key: str) -> None:
            def use(file: BinaryIO) -> None:
                for position in positions[key]:
                    results[position] = _read_range(file, requests[position][1])

            self._read(key, use)

        map_concurrent(read_ranges, list(positions))
        return results

    def exists(self, key: str) -> bool:
        try:
            return self._read(key, lambda file: True) is not None
        except StoreError as error:  # a folder holds no value (anything else stays an error)
            if self._is_folder(key, error.__cause__):
                return False
            raise

    # -- writing -----------------------------------------------------------------
    def set(self, key: str, value: bytes) -> None:
        validate_key(key)
        self._check_writable(key)
        try:
            self._folder.write(key, value)
        except OSError as error:
            raise self._error("write", key, error) from error

    @contextlib.contextmanager
    def batch_writer(self) -> Iterator[Callable[[str, bytes], None]]:
        with folder_writer(self._folder) as write_file:

            def write(key: str, value: bytes) -> None:
                validate_key(key)
                self._check_writable(key)
                try:
                    write_file(key, value)
                except OSError as error:
                    raise self._error("write", key, error) from error

            yield write

    def set_many(self, items: Mapping[str, bytes]) -> None:
        for key in items:
            self._check_writable(validate_key(key))
        map_concurrent(lambda item: self.set(*item), list(items.items()))

    def delete(self, key: str) -> None:
        validate_key(key)
        self._check_writable(key)
        try:
            self._folder.delete(key)
        except OSError as error:
            raise self._error("delete", key, error) from error

    def delete_many(self, keys: Iterable[str]) -> None:
        keys = list(keys)
        for key in keys:
            self._check_writable(validate_key(key))
        map_concurrent(self.delete, keys)

    def delete_prefix(self, prefix: str) -> None:
        self._check_writable(validate_prefix(prefix))
        if prefix and not prefix.endswith("/"):
            # A plain string prefix ("a/b" also matches "a/bc"): key by key.
            self.delete_many(list(self.list_prefix(prefix)))
            return
        try:
            if prefix:
                self._folder.delete_folder(prefix[:-1])
                return
            # the whole store: every entry of the root but the metadata lock file, which another
            # process may hold (a new file would let two processes lock at once); a root that is
            # not there yet holds nothing to delete
            try:
                entries = list(self._folder.scan(""))
            except FileNotFoundError:
                return
            for entry in entries:
                if entry.name in LOCK_NAMES:
                    continue
                self._folder.delete_folder(entry.name)  # a folder (a link: the link)
                self._folder.delete(entry.name)  # a file
        except OSError as error:
            raise self._error("delete", prefix, error) from error

    # -- listing -----------------------------------------------------------------
    def list_prefix(self, prefix: str) -> Iterator[str]:
        validate_prefix(prefix)  # now, not at the first next()
        folder_key, _, name_start = prefix.rpartition("/")
        return self._walk(prefix, folder_key, name_start)

    def _walk(self, prefix: str, folder_key: str, name_start: str) -> Iterator[str]:
        """The keys of the files below ``folder_key``; only its own entries must start with ``name_start``.

        A linked folder is followed once (no cycles) when it stays inside the root; links out of
        the root are not followed unless the store allows it (``external_links`` lists them).
        """
        stack = [(folder_key, name_start)]
        seen_links: set[tuple[int, int]] = set()
        while stack:
            folder_key, name_start = stack.pop()
            entries = self._scan(prefix, folder_key)
            for entry in entries:
                if not entry.name.startswith(name_start):
                    continue
                key = f"{folder_key}/{entry.name}" if folder_key else entry.name
                kind = self._entry_kind(entry, key, seen_links)
                if kind == "folder":
                    stack.append((key, ""))
                elif kind == "file" and not _hidden(entry.name, folder_key):
                    yield key

    def _scan(self, prefix: str, folder_key: str) -> list[os.DirEntry[Any]]:
        try:
            return self._folder.scan(folder_key)
        except _MISSING:
            return []
        except OSError as error:
            raise self._error("list", prefix, error) from error

    def _entry_kind(self, entry: os.DirEntry[Any], key: str, seen_links: set[tuple[int, int]]) -> str:
        """'folder' to descend into, 'file' to list, '' to skip (a link out of the root, a cycle)."""
        try:
            if not entry.is_symlink():
                return "folder" if entry.is_dir(follow_symlinks=False) else "file"
            kind = self._folder.kind(key)
            if kind == "outside":
                if not self.follow_external_links:
                    return ""
                kind = "folder" if os.path.isdir(os.path.join(self.root, key)) else "file"
            if kind == "folder":
                identity = self._folder.identity(key)
                if identity in seen_links:
                    return ""
                seen_links.add(identity)
            return kind
        except OSError:
            return ""

    def list_dir(self, prefix: str) -> list[str]:
        """The names under ``prefix``; a link out of the root only when the store follows such links."""
        validate_prefix(prefix)
        folder_key = prefix.rstrip("/")
        return sorted(
            entry.name for entry in self._scan(prefix, folder_key)
            if not _hidden(entry.name, folder_key) and not self._leaves_root(entry, folder_key)
        )  # fmt: skip

    def _leaves_root(self, entry: os.DirEntry[Any], folder_key: str) -> bool:
        """Whether ``entry`` is a link out of the root that this store does not follow."""
        if self.follow_external_links or not entry.is_symlink():
            return False
        return self._folder.kind(f"{folder_key}/{entry.name}" if folder_key else entry.name) == "outside"

    # -- identity ----------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        return isinstance(other, LocalStore) and (other.root, other.read_only, other.follow_external_links) == (
            self.root,
            self.read_only,
            self.follow_external_links,
        )

    def __hash__(self) -> int:
        return hash((LocalStore, self.root, self.read_only, self.follow_external_links))

    def __repr__(self) -> str:
        flags = ", read_only=True" if self.read_only else ""
        flags += ", follow_external_links=True" if self.follow_external_links else ""
        return f"LocalStore({self.root!r}{flags})"


#: os.pread and os.preadv (not on Windows): reads at an offset that several threads may make at once
_POSITIONED_READS = hasattr(os, "pread") and hasattr(os, "preadv")


class _FileRanges(RangeReader):
    """A file of a :class:`LocalStore` open for range reads: one descriptor, read with ``pread``
    (no shared offset), so one version of the file whoever renames another over it."""

    def __init__(self, store: LocalStore, key: str, descriptor: int, size: int) -> None:
        self.store, self.key, self.descriptor, self.size = store, key, descriptor, size

    def read(self, byte_range: ByteRequest | None = None) -> bytes:
        start, end = byte_bounds(byte_range, self.size)
        try:
            return os.pread(self.descriptor, end - start, start)
        except OSError as error:
            raise self.store._error("read", self.key, error) from error

    def readinto(self, start: int, buffer: memoryview) -> int:
        """Read ``len(buffer)`` bytes from ``start`` into ``buffer``; returns the bytes read. A large
        read goes in ranges of at least :data:`IO_RANGE_BYTES`, up to
        :func:`~zarrx.concurrency.call_io_depth` of them in flight (see :func:`read_ranges_into`)."""
        try:
            return read_ranges_into(self.descriptor, start, buffer)
        except OSError as error:
            raise self.store._error("read", self.key, error) from error


#: the smallest range a large read is split into (a device serves a few MiB per request:
#: 1 GiB of 32 MiB files read cold in ranges of 1 MiB took 0.9 s, of 4 MiB 0.56 s, whole 0.65 s,
#: at 16 in flight)
IO_RANGE_BYTES = 4 * 2**20


def read_ranges_into(descriptor: int, start: int, buffer: memoryview) -> int:
    """``os.preadv(descriptor, [buffer], start)``, in ranges read in parallel when ``buffer``
    holds two ranges of :data:`IO_RANGE_BYTES` or more; returns the bytes read (fewer at the end of
    the file: up to where the first short range stopped).

    Examples
    --------
    >>> import tempfile
    >>> with tempfile.TemporaryFile() as file:
    ...     _ = file.write(bytes(range(256)) * 4); file.flush()
    ...     buffer = bytearray(8)
    ...     read_ranges_into(file.fileno(), 1020, memoryview(buffer)), bytes(buffer[:4])
    (4, b'\\xfc\\xfd\\xfe\\xff')
    """
    size = len(buffer)
    if size < 2 * IO_RANGE_BYTES or (pieces := min(call_io_depth(), size // IO_RANGE_BYTES)) <= 1:
        return os.preadv(descriptor, [buffer], start)
    step = -(-size // pieces)
    step += -step % mmap.PAGESIZE  # whole pages: no page read by two requests
    offsets = range(0, size, step)
    found = map_io(lambda offset: _read_fully(descriptor, start + offset, buffer[offset : offset + step]), offsets)
    for offset, count in zip(offsets, found):
        if count < min(step, size - offset):
            return offset + count
    return size


def _read_fully(descriptor: int, position: int, buffer: memoryview) -> int:
    """Bytes read into ``buffer`` from ``position``, reading again after a short read until the end of the file."""
    total = 0
    while total < len(buffer):
        count = os.preadv(descriptor, [buffer[total:]], position + total)
        if not count:
            break
        total += count
    return total


def _read_all(file: BinaryIO) -> bytes:
    return file.read()
