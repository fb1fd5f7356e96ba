"""Reading and writing many whole files of a local store in a row: :func:`folder_reader`,
:func:`folder_writer`.

A chunk read through :meth:`~zarrx.storage.containment.RootFolder.read` resolves its whole key
below the store's root and reads through a file object: right for one read, a cost per chunk
for thousands of small ones. :func:`folder_reader` keeps what those reads share -- with the
kernel's resolution each *folder* is opened once (``openat2`` with ``RESOLVE_BENEATH``, so it
is inside the root), each file below it with ``openat(folder, name, O_NOFOLLOW)``, then
``fstat``, one ``read`` of the size found and ``close``, no file object. A file that is itself
a link, and anything ``openat2`` cannot decide, goes through ``RootFolder.read`` (the walk),
so links are followed or refused exactly as there.

:func:`folder_writer` is the same for writes: each value goes to a temporary file created in
the folder's descriptor (``O_CREAT | O_EXCL | O_NOFOLLOW``) and renamed over the key within it,
as ``RootFolder.write`` does; a folder that does not exist yet (or cannot be opened below the
root by the kernel) is left to ``RootFolder.write``, which creates it or refuses the link.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import stat
from typing import Any, Callable, Iterator

from zarrx.storage.containment import RootFolder
from zarrx.storage.folder_calls import FOLDER_FLAGS, NOFOLLOW, READ_FLAGS, regular_size

__all__ = ["folder_reader", "folder_writer", "MAX_OPEN_FOLDERS"]

#: folder descriptors a reader keeps open at once
MAX_OPEN_FOLDERS = 256


@contextlib.contextmanager
def folder_reader(root: RootFolder) -> Iterator[Callable[[str], bytes]]:
    """A function reading the whole file of a (validated) key below ``root``, as ``root.read``
    does, for as long as the ``with`` block lasts; its folder descriptors are closed at the end.

    Missing files raise FileNotFoundError (or NotADirectoryError) as ``root.read`` does.

    Examples
    --------
    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> with open(folder + "/a", "wb") as file:
    ...     _ = file.write(b"data")
    >>> with folder_reader(RootFolder(folder)) as read:
    ...     read("a")
    b'data'
    """
    folders, calls = _Folders(root), root.calls
    fstat, read_descriptor, close, is_regular = os.fstat, os.read, os.close, stat.S_ISREG

    def read_walking(key: str) -> bytes:
        return root.read(key, lambda file: _read_regular(file.fileno(), key))

    def read(key: str) -> bytes:
        path, _, name = key.rpartition("/")
        folder = folders.get(path)
        if folder is None and (folder := folders.open(path)) is None:
            return read_walking(key)
        try:
            descriptor = calls.open_file(folder, name, READ_FLAGS)
        except OSError as error:
            if error.errno == errno.ELOOP:  # the file is a link: the walk decides where it leads
                return read_walking(key)
            raise
        try:  # _read_regular's first read inline, for a regular file of the size fstat gives
            info = fstat(descriptor)
            if is_regular(info.st_mode):
                if len(data := read_descriptor(descriptor, info.st_size + 1)) == info.st_size:
                    return data
                os.lseek(descriptor, 0, os.SEEK_SET)  # it changed size since: read it as it is now
            return _read_regular(descriptor, key)
        finally:
            close(descriptor)

    try:
        yield read if root.resolution == "kernel" else read_walking
    finally:
        folders.close()


@contextlib.contextmanager
def folder_writer(root: RootFolder) -> Iterator[Callable[[str, Any], None]]:
    """A function storing a value under a (validated) key below ``root`` atomically, as
    ``root.write`` does, for as long as the ``with`` block lasts.

    Examples
    --------
    >>> import tempfile
    >>> folder = RootFolder(tempfile.mkdtemp())
    >>> with folder_writer(folder) as write:
    ...     write("a/b", b"data")
    >>> with folder_reader(folder) as read:
    ...     read("a/b")
    b'data'
    """
    folders, calls = _Folders(root), root.calls
    # temporary names as RootFolder.write makes them (32 hex digits), unique without uuid4 per file
    prefix, counter = os.urandom(12).hex(), itertools.count()

    def write(key: str, value: Any) -> None:
        path, _, name = key.rpartition("/")
        folder = folders.get(path)
        if folder is None and (folder := folders.open(path, missing_ok=True)) is None:
            # a folder to create, or a way the walk must decide
            root.write(key, value, kernel_tried=True)
            return
        temporary = f".{name}.{prefix}{next(counter) % 2**32:08x}.tmp"
        try:
            root.write_in(calls, folder, name, temporary, value)
        except FileNotFoundError:  # the folder was deleted (emptied) since it was opened
            folders.forget(path)
            root.write(key, value)

    try:
        yield write if root.resolution == "kernel" else root.write
    finally:
        folders.close()


class _Folders(dict):
    """Descriptors of folders below a root, opened by the kernel's resolution, by key prefix."""

    def __init__(self, root: RootFolder) -> None:
        super().__init__()
        self.root = root

    def open(self, path: str, *, missing_ok: bool = False) -> int | None:
        """The folder ``path`` opened below the root (None: the walk must decide, or missing)."""
        try:
            folder = self.root.open_beneath(path, FOLDER_FLAGS & ~NOFOLLOW)
        except (FileNotFoundError, NotADirectoryError):
            if not missing_ok:
                raise
            return None
        if folder is not None:
            if len(self) >= MAX_OPEN_FOLDERS:
                self.close()
            self[path] = folder
        return folder

    def forget(self, path: str) -> None:
        os.close(self.pop(path))

    def close(self) -> None:
        for descriptor in self.values():
            os.close(descriptor)
        self.clear()


def _read_regular(descriptor: int, key: str) -> bytes:
    """The whole regular file open at ``descriptor``: one ``read`` of the size ``fstat`` gives
    (more only when the file grew or a read came back short); anything but a regular file
    raises as :func:`~zarrx.storage.folder_calls.regular` does."""
    size = regular_size(descriptor, key)
    data = os.read(descriptor, size + 1)
    if len(data) == size:
        return data
    parts = [data]
    while part := os.read(descriptor, max(size, 2**16)):
        parts.append(part)
    return b"".join(parts)
