"""A store in a directory on the local file system (``stores/filesystem`` spec).

Key ``a/b/c`` is the file ``<root>/a/b/c``. Plain ``os`` calls and ``open``,
no fsspec: a single-key read is one ``open(...).read()``.

Rules this store keeps:

* **Atomic writes.** :meth:`LocalStore.set` writes a temporary file beside the
  target (``.<name>.<32 hex digits>.tmp``) and renames it over the target with
  ``os.replace``, so a reader sees the old bytes or the new ones, never a torn
  file, and a crashed writer leaves the old value. Temporary files are never
  listed. (No ``fsync``: atomic for readers, not durable across a power cut.)
* **Keys stay inside the root.** Every key and prefix goes through
  :func:`~zarrx.storage.paths.validate_key`; ``..`` or a leading ``/`` raise
  :class:`~zarrx.errors.InvalidPathError`.
* **No empty folders.** :meth:`LocalStore.delete` and
  :meth:`LocalStore.delete_prefix` remove the folders they leave empty, up to
  (not including) the root, so a deleted node does not linger as a prefix in
  :meth:`LocalStore.list_dir`. A writer racing that cleanup re-creates its
  folder and retries.
* **Missing is None.** A missing file, or a folder where a key was asked for,
  reads as None; any other OS error is a :class:`~zarrx.errors.StoreError`
  naming the key. So is anything else that is not a regular file (a FIFO, a
  device such as ``/dev/zero`` behind a symlink, a socket): reading one could
  block forever or never end.

Batch methods (``get_many``, ``get_ranges``, ``set_many``, ``delete_many``)
run on zarrx's shared thread pool (:mod:`zarrx.concurrency`: a few groups per
worker, small batches inline). ``get_ranges`` opens each file once for all its
ranges.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import stat
import uuid
from typing import Any, BinaryIO, Iterable, Iterator, Mapping, Sequence

from zarrx.concurrency import map_concurrent
from zarrx.errors import ReadOnlyError, StoreError
from zarrx.storage.paths import validate_key, validate_prefix
from zarrx.storage.store import ByteRequest, Store, byte_bounds

__all__ = ["LocalStore", "is_temporary_name"]


# A missing file, a folder where a file was expected, or a file where a folder was.
_MISSING = (FileNotFoundError, IsADirectoryError, NotADirectoryError)

_TEMPORARY_NAME = re.compile(r"\..+\.[0-9a-f]{32}\.tmp")


def is_temporary_name(name: str) -> bool:
    """True for the name of a temporary file :meth:`LocalStore.set` writes before renaming it."""
    return name[:1] == "." and name.endswith(".tmp") and _TEMPORARY_NAME.fullmatch(name) is not None


# -- reading and writing one file ---------------------------------------------------
def _read_range(file: BinaryIO, byte_range: ByteRequest) -> bytes:
    start, end = byte_bounds(byte_range, os.fstat(file.fileno()).st_size)
    file.seek(start)
    return file.read(end - start)


_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # not on Windows
_SPECIAL_FILES = {stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device"}


def _open_regular_file(path: str, flags: int) -> int:
    """``open`` opener for reads: refuse what is not a regular file before reading from it.

    ``O_NONBLOCK`` keeps the open of a FIFO without a writer from blocking (it changes nothing
    for regular files); a folder is left to ``open``, which raises IsADirectoryError.
    """
    descriptor = os.open(path, flags | _NONBLOCK)
    try:
        mode = os.fstat(descriptor).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            kind = _SPECIAL_FILES.get(stat.S_IFMT(mode), "a special file")
            raise OSError(errno.EINVAL, f"not a regular file but {kind}", path)
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor


def _open_exclusive(path: str, directory: str) -> BinaryIO:
    """Create ``path`` for writing, creating ``directory`` as needed.

    Retries because a concurrent :meth:`LocalStore.delete` may remove a folder
    that has just become empty between our ``makedirs`` and ``open``.
    """
    attempts = 5
    for attempt in range(attempts):
        try:
            return open(path, "xb")
        except FileNotFoundError:
            if attempt == attempts - 1:
                raise
            with contextlib.suppress(FileNotFoundError):
                os.makedirs(directory, exist_ok=True)
    raise AssertionError("unreachable")


def _write_atomic(path: str, value: Any) -> None:
    directory, name = os.path.split(path)
    temporary = os.path.join(directory, f".{name}.{uuid.uuid4().hex}.tmp")
    file = _open_exclusive(temporary, directory)
    try:
        with file:
            file.write(value)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(temporary)
        raise


class LocalStore(Store):
    """Keys as files under a root directory.

    Parameters
    ----------
    root
        The directory (made absolute). It need not exist: the first write
        creates it; reads from a missing root find nothing.
    read_only
        Refuse writes with :class:`~zarrx.errors.ReadOnlyError`.

    Examples
    --------
    >>> store = LocalStore(tmp_path / "data.zarr")  # doctest: +SKIP
    >>> store.set("zarr.json", b'{"zarr_format": 3, "node_type": "group"}')  # doctest: +SKIP
    >>> store.get("zarr.json", SuffixByteRequest(2))  # doctest: +SKIP
    b'"}'
    """

    #: abilities (see zarrx.storage.store): a read is a file read, and a batch of ranges opens
    #: each file once, so its ranges come from one version of it
    reads_are_local = True
    consistent_ranges = True

    def __init__(self, root: str | os.PathLike[str], read_only: bool = False) -> None:
        self.root = os.path.abspath(os.fspath(root))
        self.read_only = read_only
        # Keys join the root by concatenation, never os.path.join, which would
        # restart at an absolute component.
        self._prefix = os.path.join(self.root, "")

    def _path(self, key: str) -> str:
        return self._prefix + validate_key(key)

    def local_path(self, key: str) -> str:
        return self._path(key)

    @property
    def location(self) -> tuple[str, str]:
        return ("file", self.root)

    def _error(self, action: str, key: str, error: BaseException) -> StoreError:
        return StoreError(f"could not {action} {key!r} in {self!r}: {error}")

    def _check_writable(self, key: str) -> None:
        if self.read_only:
            raise ReadOnlyError(
                f"cannot write {key!r}: {self!r} is read-only (open it with mode 'r+', 'a' or 'w' to write)"
            )

    # -- reading -----------------------------------------------------------------
    def get(self, key: str, byte_range: ByteRequest | None = None) -> bytes | None:
        path = self._path(key)
        try:
            if byte_range is None:
                with open(path, "rb", buffering=0, opener=_open_regular_file) as file:
                    return file.read()
            with open(path, "rb", opener=_open_regular_file) as file:
                return _read_range(file, byte_range)
        except _MISSING:
            return None
        except PermissionError as error:
            if os.path.isdir(path):  # Windows reports a folder this way
                return None
            raise self._error("read", key, error) from error
        except OSError as error:
            raise self._error("read", key, error) from error

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
            path = self._path(key)
            try:
                with open(path, "rb", opener=_open_regular_file) as file:
                    for position in positions[key]:
                        results[position] = _read_range(file, requests[position][1])
            except _MISSING:
                return
            except PermissionError as error:
                if not os.path.isdir(path):
                    raise self._error("read", key, error) from error
            except OSError as error:
                raise self._error("read", key, error) from error

        map_concurrent(read_ranges, list(positions))
        return results

    def exists(self, key: str) -> bool:
        return os.path.isfile(self._path(key))

    # -- writing -----------------------------------------------------------------
    def set(self, key: str, value: bytes) -> None:
        path = self._path(key)
        self._check_writable(key)
        try:
            _write_atomic(path, value)
        except OSError as error:
            raise self._error("write", key, error) from error

    def set_many(self, items: Mapping[str, bytes]) -> None:
        for key in items:
            self._check_writable(validate_key(key))
        map_concurrent(lambda item: self.set(*item), list(items.items()))

    def delete(self, key: str) -> None:
        path = self._path(key)
        self._check_writable(key)
        try:
            os.remove(path)
        except _MISSING:
            return
        except PermissionError as error:
            if os.path.isdir(path):  # macOS and Windows report a folder this way
                return
            raise self._error("delete", key, error) from error
        except OSError as error:
            raise self._error("delete", key, error) from error
        self._remove_empty_folders(os.path.dirname(path))

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
                folder = self._prefix + prefix[:-1]
                if _remove_folder(folder):
                    self._remove_empty_folders(os.path.dirname(folder))
            else:
                # Empty the root but keep it: it is the store.
                with os.scandir(self.root) as scan:
                    entries = list(scan)
                for entry in entries:
                    if not _remove_folder(entry.path):
                        os.remove(entry.path)
        except _MISSING:
            return
        except OSError as error:
            raise self._error("delete", prefix, error) from error

    def _remove_empty_folders(self, folder: str) -> None:
        """Remove ``folder`` and its parents while they are empty, stopping at the root."""
        while len(folder) > len(self.root) and folder.startswith(self._prefix):
            try:
                os.rmdir(folder)
            except OSError:  # not empty (or already gone, or not ours to remove): stop
                return
            folder = os.path.dirname(folder)

    # -- listing -----------------------------------------------------------------
    def list_prefix(self, prefix: str) -> Iterator[str]:
        validate_prefix(prefix)  # now, not at the first next()
        folder_key, _, name_start = prefix.rpartition("/")
        folder = self._prefix + folder_key if folder_key else self.root
        return self._walk(prefix, folder, folder_key + "/" if folder_key else "", name_start)

    def _walk(self, prefix: str, folder: str, key_prefix: str, name_start: str) -> Iterator[str]:
        """The keys of the files below ``folder``; only its own entries must start with ``name_start``."""
        stack = [(folder, key_prefix, name_start)]
        seen_links: set[tuple[int, int]] = set()
        while stack:
            folder, key_prefix, name_start = stack.pop()
            try:
                with os.scandir(folder) as scan:
                    entries = [entry for entry in scan if entry.name.startswith(name_start)]
            except _MISSING:
                continue
            except OSError as error:
                raise self._error("list", prefix, error) from error
            for entry in entries:
                if _is_folder(entry, seen_links):
                    stack.append((entry.path, f"{key_prefix}{entry.name}/", ""))
                elif not is_temporary_name(entry.name):
                    yield key_prefix + entry.name

    def list_dir(self, prefix: str) -> list[str]:
        validate_prefix(prefix)
        folder = self._prefix + prefix.rstrip("/") if prefix else self.root
        try:
            with os.scandir(folder) as scan:
                return sorted(entry.name for entry in scan if not is_temporary_name(entry.name))
        except _MISSING:
            return []
        except OSError as error:
            raise self._error("list", prefix, error) from error

    # -- identity ----------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        return isinstance(other, LocalStore) and (other.root, other.read_only) == (self.root, self.read_only)

    def __hash__(self) -> int:
        return hash((LocalStore, self.root, self.read_only))

    def __repr__(self) -> str:
        flag = ", read_only=True" if self.read_only else ""
        return f"LocalStore({self.root!r}{flag})"


def _is_folder(entry: os.DirEntry[str], seen_links: set[tuple[int, int]]) -> bool:
    """Whether to descend into ``entry``; a linked folder is followed once (no cycles)."""
    try:
        if not entry.is_dir():
            return False
        if entry.is_symlink():
            status = entry.stat()
            identity = (status.st_dev, status.st_ino)
            if identity in seen_links:
                return False
            seen_links.add(identity)
        return True
    except OSError:
        return False


def _remove_folder(path: str) -> bool:
    """Remove the folder at ``path`` with everything in it (only the link, for a linked folder).

    False, removing nothing, when ``path`` is not a folder.
    """
    if not os.path.isdir(path):
        return False
    if os.path.islink(path):
        os.remove(path)
    else:
        shutil.rmtree(path)
    return True
