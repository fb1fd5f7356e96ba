"""The system calls a local store's folder walk makes, on folder descriptors or on checked paths.

:class:`DescriptorCalls` names a folder by an open descriptor and makes every call relative to it
(``openat``, ``mkdirat``, ``unlinkat``, ``renameat``, ``readlinkat``: Python's ``dir_fd=``), so what
a call acts on is the folder that was opened, whatever its path names meanwhile.
:class:`PathCalls` does the same on path strings where the system has no ``dir_fd`` calls
(Windows), checking each component with ``lstat`` first: contained, but not race-free.
:data:`RACE_FREE` says whether this system has the descriptor calls;
:mod:`zarrx.storage.containment` walks keys with them.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from typing import Any

__all__ = [
    "DescriptorCalls", "PathCalls", "RACE_FREE", "regular", "write_all",
    "NOFOLLOW", "ROOT_FLAGS", "FOLDER_FLAGS", "READ_FLAGS", "TEMPORARY_FLAGS",
]  # fmt: skip

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
DIRECTORY = getattr(os, "O_DIRECTORY", 0)
CLOEXEC = getattr(os, "O_CLOEXEC", 0)
NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # a FIFO without a writer must not block its open
BINARY = getattr(os, "O_BINARY", 0)

#: whether this system resolves keys through folder descriptors (else through checked paths)
RACE_FREE = (
    bool(NOFOLLOW and DIRECTORY)
    and all(call in os.supports_dir_fd for call in (os.open, os.mkdir, os.rmdir, os.unlink, os.readlink, os.stat))
    and os.scandir in os.supports_fd
    and shutil.rmtree.avoids_symlink_attacks
)

ROOT_FLAGS = os.O_RDONLY | DIRECTORY | CLOEXEC
FOLDER_FLAGS = os.O_RDONLY | DIRECTORY | NOFOLLOW | CLOEXEC | NONBLOCK
READ_FLAGS = os.O_RDONLY | NOFOLLOW | CLOEXEC | NONBLOCK | BINARY
TEMPORARY_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW | CLOEXEC | BINARY
SPECIAL_FILES = {stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device"}


class DescriptorCalls:
    """Folders are open descriptors; every call is relative to one (``*at`` system calls)."""

    def open_root(self, root: str) -> Any:
        return os.open(root, ROOT_FLAGS)

    def open_folder(self, folder: Any, name: str) -> Any:
        return os.open(name, FOLDER_FLAGS, dir_fd=folder)

    def open_file(self, folder: Any, name: str, flags: int) -> int:
        return os.open(name, flags, 0o666, dir_fd=folder)

    def readlink(self, folder: Any, name: str) -> str:
        return os.readlink(name, dir_fd=folder)

    def lstat(self, folder: Any, name: str) -> os.stat_result:
        return os.stat(name, dir_fd=folder, follow_symlinks=False)

    def mkdir(self, folder: Any, name: str) -> None:
        os.mkdir(name, dir_fd=folder)

    def rmdir(self, folder: Any, name: str) -> None:
        os.rmdir(name, dir_fd=folder)

    def unlink(self, folder: Any, name: str) -> None:
        os.unlink(name, dir_fd=folder)

    def rmtree(self, folder: Any, name: str) -> None:
        shutil.rmtree(name, dir_fd=folder)

    def replace(self, folder: Any, source: str, target: str) -> None:
        os.replace(source, target, src_dir_fd=folder, dst_dir_fd=folder)

    def scandir(self, folder: Any) -> list[os.DirEntry[Any]]:
        with os.scandir(folder) as scan:
            return list(scan)

    def close(self, folder: Any) -> None:
        os.close(folder)


class PathCalls(DescriptorCalls):
    """Folders are path strings, each component checked with ``lstat`` first (not race-free)."""

    def open_root(self, root: str) -> Any:
        if not os.path.isdir(root):
            raise FileNotFoundError(errno.ENOENT, "no such folder", root)
        return root

    def open_folder(self, folder: Any, name: str) -> Any:
        path = os.path.join(folder, name)
        mode = os.lstat(path).st_mode
        if stat.S_ISLNK(mode):
            raise OSError(errno.ELOOP, "a symbolic link", path)
        if not stat.S_ISDIR(mode):
            raise NotADirectoryError(errno.ENOTDIR, "not a folder", path)
        return path

    def open_file(self, folder: Any, name: str, flags: int) -> int:
        path = os.path.join(folder, name)
        if os.path.islink(path):
            raise OSError(errno.ELOOP, "a symbolic link", path)
        return os.open(path, flags & ~(NOFOLLOW | NONBLOCK) if os.name == "nt" else flags, 0o666)

    def readlink(self, folder: Any, name: str) -> str:
        return os.readlink(os.path.join(folder, name))

    def lstat(self, folder: Any, name: str) -> os.stat_result:
        return os.lstat(os.path.join(folder, name))

    def mkdir(self, folder: Any, name: str) -> None:
        os.mkdir(os.path.join(folder, name))

    def rmdir(self, folder: Any, name: str) -> None:
        os.rmdir(os.path.join(folder, name))

    def unlink(self, folder: Any, name: str) -> None:
        os.unlink(os.path.join(folder, name))

    def rmtree(self, folder: Any, name: str) -> None:
        shutil.rmtree(os.path.join(folder, name))

    def replace(self, folder: Any, source: str, target: str) -> None:
        os.replace(os.path.join(folder, source), os.path.join(folder, target))

    def scandir(self, folder: Any) -> list[os.DirEntry[Any]]:
        with os.scandir(folder) as scan:
            return list(scan)

    def close(self, folder: Any) -> None:
        pass


def regular(descriptor: int, key: str) -> tuple[int, int]:
    """``descriptor`` and the file's size when it is a regular file; a folder is IsADirectoryError,
    anything else OSError (the descriptor then closed)."""
    try:
        return descriptor, regular_size(descriptor, key)
    except BaseException:
        os.close(descriptor)
        raise


def regular_size(descriptor: int, key: str) -> int:
    """The size of the regular file open at ``descriptor``; a folder is IsADirectoryError,
    anything else OSError (the descriptor stays open)."""
    info = os.fstat(descriptor)
    mode = info.st_mode
    if stat.S_ISREG(mode):
        return info.st_size
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, "a folder", key)
    kind = SPECIAL_FILES.get(stat.S_IFMT(mode), "a special file")
    raise OSError(errno.EINVAL, f"not a regular file but {kind}", key)


def write_all(descriptor: int, value: Any) -> None:
    """Write the bytes of ``value`` (any buffer) to ``descriptor`` with ``os.write`` -- no file
    object, whose set-up costs three system calls (``fstat``, ``ioctl``, ``lseek``) per file."""
    with memoryview(value) as view:
        data = view.cast("B") if view.c_contiguous else memoryview(view.tobytes())
        written = 0
        while written < len(data):
            written += os.write(descriptor, data[written:])
