"""Keeping every read, write and deletion of a local store inside its root folder.

A store key names a file below the store's root, and symbolic links on the way may point
anywhere. :class:`RootFolder` resolves a key the way the kernel would, one component at a
time, but never lets the kernel follow a link on its behalf:

* every folder is opened relative to the folder before it (``openat``: ``dir_fd``) with
  ``O_NOFOLLOW | O_DIRECTORY``, and the last component with ``O_NOFOLLOW``;
* a link found on the way is read (``readlink``) and its target resolved by the same walk:
  ``..`` steps back to the folder the walk came from, an absolute target is compared with the
  root (as given and as ``realpath`` gives it);
* a target that stays inside the root is followed; one that leaves it raises
  :class:`~zarrx.errors.OutsideStoreError` naming the key, the link and its target -- except
  for a *read* from a store that allows it (``follow_external_links``), which the kernel then
  resolves from there.

Writes and deletions act through the descriptor of the resolved parent folder: folders are
created with ``mkdir(dir_fd=)``, a value is written to a temporary file created with
``O_CREAT | O_EXCL | O_NOFOLLOW`` in that folder and renamed over the key with
``rename(src_dir_fd=, dst_dir_fd=)``, keys are removed with ``unlink(dir_fd=)``, emptied folders
with ``rmdir(dir_fd=)`` and whole folders with ``shutil.rmtree(dir_fd=)`` (which follows no
link). So replacing a folder by a link between a check and a use cannot send a write or a
deletion out of the root: there is no separate check, every step is the use. (A folder the walk
holds open can still be *moved* elsewhere by someone who can write to both places; nothing short
of a lock prevents that.)

The walk costs a system call per component. Where Linux offers ``openat2`` (5.6+), a read, the
folder of a write and a listed folder are first opened in one call with ``RESOLVE_BENEATH``
(:mod:`zarrx.storage.beneath`), which refuses atomically any step out of the root; the walk runs
only where that call cannot decide (an absolute link, a way out to name or to follow) and for
deletions, whose clean-up of emptied folders needs each folder of the key. :data:`RESOLUTIONS`
lists the ways this system has, fastest first. Where the operating system has no ``dir_fd`` calls
(Windows), the walk runs on path strings, checking each component with ``lstat`` before using
it: contained, but not race-free (:mod:`zarrx.storage.folder_calls`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import uuid
from collections import deque
from typing import Any, BinaryIO, Callable, Iterable, Iterator

from zarrx.errors import OutsideStoreError, UsageError
from zarrx.storage import beneath
from zarrx.storage.folder_calls import (
    FOLDER_FLAGS,
    NOFOLLOW,
    RACE_FREE,
    READ_FLAGS,
    ROOT_FLAGS,
    TEMPORARY_FLAGS,
    DescriptorCalls,
    PathCalls,
    regular,
    write_all,
)

__all__ = ["RootFolder", "RACE_FREE", "MAX_LINKS", "RESOLUTIONS"]

#: how keys can be resolved here, fastest first: by the kernel in one call (``openat2``, Linux),
#: by a walk of folder descriptors, or by a walk of checked paths (not race-free)
RESOLUTIONS = {"kernel": RACE_FREE and beneath.AVAILABLE, "walk": RACE_FREE, "paths": True}
#: links followed while resolving one key before giving up (Linux's own limit)
MAX_LINKS = 40
#: what ``open(..., O_NOFOLLOW)`` of a link gives (ELOOP; EMLINK on FreeBSD; ENOTDIR on Linux
#: with O_DIRECTORY): then ``readlink`` tells a link from what the error says
_LINK_ERRNOS = {errno.ELOOP, errno.EMLINK}
_FOLDER_LINK_ERRNOS = _LINK_ERRNOS | {errno.ENOTDIR}


class _Outside(Exception):
    """The walk left the root; ``path`` is where it went, as a path the kernel can resolve."""

    def __init__(self, path: str, link: str, target: str) -> None:
        super().__init__(path)
        self.path, self.link, self.target = path, link, target


# -- the walk ----------------------------------------------------------------------------------------
class _Walk:
    """Folders opened from the root one component at a time; ``folder`` is where the walk is.

    ``entries`` records, for each component entered with :meth:`enter_key`, the folder that holds
    it and its name: the folders the empty-folder clean-up may remove, in the key's own terms.
    """

    def __init__(self, root: "RootFolder", key: str, create: bool, tail: Iterable[str]) -> None:
        self.root, self.key, self.create, self.tail = root, key, create, list(tail)
        #: the parts of the key still to walk after the current step (for a path out of the root)
        self.rest: list[str] = list(self.tail)
        self.calls = root.calls
        try:
            self.stack = [self.calls.open_root(root.path)]
        except FileNotFoundError:
            if not create:
                raise
            os.makedirs(root.path, exist_ok=True)  # the root is the store: trusted, made as given
            self.stack = [self.calls.open_root(root.path)]
        self.opened = list(self.stack)
        self.names: list[str] = []  # the folders of the stack below the root, by name
        self.entries: list[tuple[Any, str]] = []
        self.links = 0
        #: whether the walk's current folder was just made by it: what is below it is new too
        self.made = False

    @property
    def folder(self) -> Any:
        return self.stack[-1]

    def close(self) -> None:
        for folder in self.opened:
            self.calls.close(folder)

    def enter_key(self, names: Iterable[str]) -> None:
        """Walk into the folders ``names`` of the key, recording each one's entry."""
        names = list(names)
        for position, name in enumerate(names):
            self.entries.append((self.folder, name))
            self.rest = [*names[position + 1 :], *self.tail]
            self.enter([name])
        self.rest = list(self.tail)

    def enter(self, parts: Iterable[str]) -> None:
        """Walk into the folders ``parts`` (names, ``..`` and ``.`` of link targets too)."""
        pending = deque(parts)
        while pending:
            part = pending.popleft()
            if part in ("", "."):
                continue
            if part == "..":
                if not self.names:
                    link, target = self.last_link
                    raise _Outside(os.path.join(self.root.path, part, *pending, *self.rest), link, target)
                self.stack.pop()
                self.names.pop()
                self.made = False
                continue
            try:
                folder = self._open_folder(part)
            except OSError as error:
                if error.errno not in _FOLDER_LINK_ERRNOS:
                    raise
                pending.extendleft(reversed(self.follow(part, error, pending)))
                continue
            self.opened.append(folder)
            self.stack.append(folder)
            self.names.append(part)

    def _open_folder(self, name: str) -> Any:
        """The folder ``name`` of the current folder, opened (made first when the walk creates)."""
        if not self.made:
            try:
                return self.calls.open_folder(self.folder, name)
            except FileNotFoundError:
                if not self.create:
                    raise
        # missing, or in a folder this walk has just made (so surely missing): make it
        try:
            self.calls.mkdir(self.folder, name)
            self.made = True
        except FileExistsError:  # made meanwhile by another writer
            self.made = False
        return self.calls.open_folder(self.folder, name)

    def follow(self, name: str, error: OSError, pending: Iterable[str] = ()) -> list[str]:
        """The parts of the target of the link ``name`` in the current folder, to walk next."""
        try:
            target = self.calls.readlink(self.folder, name)
        except OSError:
            raise error from None  # not a link after all: the open's own error
        self.links += 1
        if self.links > MAX_LINKS:
            raise OSError(errno.ELOOP, f"more than {MAX_LINKS} symbolic links", self.key)
        link = "/".join([*self.names, name])
        self.last_link = (link, target)
        if not os.path.isabs(target):
            return target.replace(os.sep, "/").split("/")
        inside = self.root.relative(target)
        if inside is None:
            raise _Outside(os.path.join(target, *pending, *self.rest), link, target)
        del self.stack[1:], self.names[:]
        return inside

    def open_file(self, name: str, flags: int) -> int:
        """Open the file ``name`` of the current folder, following links that stay inside."""
        self.rest = []
        for _ in range(MAX_LINKS + 1):
            try:
                return self.calls.open_file(self.folder, name, flags)
            except OSError as error:
                if error.errno not in _LINK_ERRNOS:
                    raise
                parts = self.follow(name, error)
            *folders, name = parts or [""]
            self.enter(folders)
            if name in ("", ".", ".."):  # the target is a folder
                self.enter([name])
                raise IsADirectoryError(errno.EISDIR, "a folder", self.key)
        raise OSError(errno.ELOOP, f"more than {MAX_LINKS} symbolic links", self.key)


class RootFolder:
    """The folder of a local store, through which every key is resolved (see the module docstring).

    Parameters
    ----------
    path
        The root folder (absolute). It is trusted as given, links in it included.
    follow_external_links
        Let *reads* follow links that leave the root (writes and deletions never do).

    Examples
    --------
    >>> import tempfile
    >>> folder = RootFolder(tempfile.mkdtemp())
    >>> folder.write("a/b", b"value")
    >>> folder.read("a/b", lambda file: file.read())
    b'value'
    """

    def __init__(self, path: str, follow_external_links: bool = False, *, resolution: str | None = None) -> None:
        self.path = path
        self.follow_external_links = follow_external_links
        self.resolution = resolution or next(name for name, available in RESOLUTIONS.items() if available)
        if not RESOLUTIONS.get(self.resolution):
            raise UsageError(f"resolution: expected one of {[n for n, a in RESOLUTIONS.items() if a]}, found {resolution!r}")
        self.calls = PathCalls() if self.resolution == "paths" else DescriptorCalls()

    def __reduce__(self) -> tuple[Any, ...]:
        # unpickled elsewhere (a dask worker), it picks what that system offers
        return (RootFolder, (self.path, self.follow_external_links))

    def open_beneath(self, relative: str, flags: int) -> int | None:
        """``relative`` opened by the kernel below the root (:mod:`zarrx.storage.beneath`), or None
        when the walk must decide; FileNotFoundError when the root is missing."""
        if self.resolution != "kernel":
            return None
        root = os.open(self.path, ROOT_FLAGS)
        if not relative:
            return root
        try:
            return beneath.open_beneath(root, relative, flags)
        finally:
            os.close(root)

    def relative(self, target: str) -> list[str] | None:
        """The parts of an absolute link target below the root, or None when it is elsewhere."""
        for base in dict.fromkeys((self.path, os.path.realpath(self.path))):
            prefix = os.path.join(base, "")
            if target == base or target.startswith(prefix):
                return target[len(prefix) :].replace(os.sep, "/").split("/")
        return None

    @contextlib.contextmanager
    def _walk(self, key: str, folders: list[str], tail: Iterable[str] = (), *, create: bool = False) -> Iterator[_Walk]:
        walk = _Walk(self, key, create, tail)
        try:
            walk.enter_key(folders)
            yield walk
        finally:
            walk.close()

    def _refuse(self, key: str, outside: _Outside, action: str) -> OutsideStoreError:
        allowed = (
            "writes and deletions never leave it"
            if action != "read"
            else "to read through links out of the root, open the store with follow_external_links=True "
            "(LocalStore(root, follow_external_links=True), or the storage option)"
        )
        return OutsideStoreError(
            f"cannot {action} {key!r}: {outside.link!r} is a symbolic link to {outside.target!r}, which leaves "
            f"the store root {self.path!r}; {allowed}"
        )

    # -- reading -----------------------------------------------------------------------------
    def read(self, key: str, use: Callable[[BinaryIO], Any]) -> Any:
        """``use(file)`` on the regular file of ``key``, opened for reading without blocking.

        Raises FileNotFoundError, IsADirectoryError or NotADirectoryError when there is no file,
        :class:`~zarrx.errors.OutsideStoreError` for a link out of the root (unless allowed),
        OSError for anything that is not a regular file.
        """
        with open(self.open_regular(key)[0], "rb", buffering=0) as file:
            return use(file)

    def open_regular(self, key: str) -> tuple[int, int]:
        """A descriptor of the regular file of ``key``, opened for reading without blocking (the
        caller closes it), and the file's size; raises as :meth:`read` does."""
        *folders, name = key.split("/")
        descriptor = self.open_beneath(key, READ_FLAGS & ~NOFOLLOW)
        try:
            if descriptor is None:
                with self._walk(key, folders, [name]) as walk:
                    descriptor = walk.open_file(name, READ_FLAGS)
        except _Outside as outside:
            if not self.follow_external_links:
                raise self._refuse(key, outside, "read") from None
            descriptor = os.open(outside.path, READ_FLAGS & ~NOFOLLOW)
        return regular(descriptor, key)

    def scan(self, key: str) -> list[os.DirEntry[Any]]:
        """The entries of the folder ``key`` ('' for the root)."""
        folders = key.split("/") if key else []
        descriptor = self.open_beneath(key, FOLDER_FLAGS & ~NOFOLLOW)
        if descriptor is not None:
            try:
                return self.calls.scandir(descriptor)
            finally:
                os.close(descriptor)
        try:
            with self._walk(key, folders) as walk:
                return self.calls.scandir(walk.folder)
        except _Outside as outside:
            if not self.follow_external_links:
                raise self._refuse(key, outside, "list") from None
            with os.scandir(outside.path) as scan:
                return list(scan)

    def kind(self, key: str) -> str:
        """What the link (or entry) ``key`` leads to: 'folder', 'file' (or missing), 'outside'."""
        *folders, name = key.split("/")
        try:
            with self._walk(key, folders) as walk:
                walk.enter([name])
                return "folder"
        except (FileNotFoundError, NotADirectoryError):
            return "file"
        except _Outside:
            return "outside"

    def identity(self, key: str) -> tuple[int, int]:
        """``(device, inode)`` of the folder ``key`` (to follow a linked folder only once)."""
        try:
            with self._walk(key, key.split("/")) as walk:
                status = os.stat(walk.folder)
        except _Outside as outside:
            status = os.stat(outside.path)
        return status.st_dev, status.st_ino

    def external_links(self, key: str = "") -> list[tuple[str, str]]:
        """``(key, target)`` of every link below the folder ``key`` that leaves the root.

        Only real folders are walked (a link's folder is reached by its own path too).
        """
        found = []
        stack = [key]
        while stack:
            folder = stack.pop()
            try:
                entries = self.scan(folder)
            except (OSError, OutsideStoreError):
                continue
            for entry in entries:
                child = f"{folder}/{entry.name}" if folder else entry.name
                if entry.is_symlink():
                    if self.kind(child) == "outside":
                        *parent, name = child.split("/")
                        with self._walk(child, parent) as walk:
                            found.append((child, walk.calls.readlink(walk.folder, name)))
                elif entry.is_dir(follow_symlinks=False):
                    stack.append(child)
        return sorted(found)

    # -- writing -----------------------------------------------------------------------------
    def write(self, key: str, value: Any, *, kernel_tried: bool = False) -> None:
        """Store ``value`` under ``key``: a temporary file beside it, renamed over it.

        ``kernel_tried`` says the caller has just tried to open the key's folder below the root in
        one call (:meth:`open_beneath`) and could not (missing, or for the walk to decide): the walk
        runs at once. Retries when a concurrent deletion removes the (empty) folder between
        the walk and the creation of the temporary file.
        """
        *folders, name = key.split("/")
        temporary = f".{name}.{uuid.uuid4().hex}.tmp"
        with contextlib.suppress(FileNotFoundError):  # the folder is missing: the walk makes it
            folder = None if kernel_tried else self.open_beneath("/".join(folders), FOLDER_FLAGS & ~NOFOLLOW)
            if folder is not None:
                try:
                    return self.write_in(self.calls, folder, name, temporary, value)
                finally:
                    os.close(folder)
        attempts = 5
        for attempt in range(attempts):
            try:
                with self._walk(key, folders, [name], create=True) as walk:
                    self.write_in(walk.calls, walk.folder, name, temporary, value)
                return
            except FileNotFoundError:
                if attempt == attempts - 1:
                    raise
            except _Outside as outside:
                raise self._refuse(key, outside, "write") from None

    def write_in(self, calls: DescriptorCalls, folder: Any, name: str, temporary: str, value: Any) -> None:
        """``value`` into the temporary file ``temporary`` created in the open ``folder``, renamed
        over ``name`` there (the temporary file removed on any failure)."""
        descriptor = calls.open_file(folder, temporary, TEMPORARY_FLAGS)
        try:
            try:
                write_all(descriptor, value)
            finally:
                os.close(descriptor)
            calls.replace(folder, temporary, name)
        except BaseException:
            with contextlib.suppress(OSError):
                calls.unlink(folder, temporary)
            raise

    def delete(self, key: str) -> None:
        """Remove the file ``key`` (a link: the link) and the folders that leaves empty."""
        *folders, name = key.split("/")
        try:
            with self._walk(key, folders) as walk:
                try:
                    walk.calls.unlink(walk.folder, name)
                except (IsADirectoryError, PermissionError):
                    if not stat.S_ISDIR(walk.calls.lstat(walk.folder, name).st_mode):
                        raise
                    return  # a folder is no key (macOS and Windows say EPERM)
                self._remove_empty(walk)
        except (FileNotFoundError, NotADirectoryError):
            return
        except _Outside as outside:
            raise self._refuse(key, outside, "delete") from None

    def delete_folder(self, key: str) -> None:
        """Remove the folder ``key`` with everything in it (a linked folder: only the link); ''
        empties the root but keeps it."""
        *folders, name = key.split("/") if key else [""]
        try:
            with self._walk(key, folders) as walk:
                if not name:
                    for entry in self.calls.scandir(walk.folder):
                        self._remove(walk, entry.name, files_too=True)
                elif self._remove(walk, name):
                    self._remove_empty(walk)
        except (FileNotFoundError, NotADirectoryError):
            return
        except _Outside as outside:
            raise self._refuse(key, outside, "delete") from None

    def _remove(self, walk: _Walk, name: str, files_too: bool = False) -> bool:
        """Remove ``name`` in the walk's folder: a real folder with its contents, else the entry."""
        try:
            mode = walk.calls.lstat(walk.folder, name).st_mode
        except FileNotFoundError:
            return False
        if stat.S_ISDIR(mode):
            walk.calls.rmtree(walk.folder, name)
        elif stat.S_ISLNK(mode) or files_too:
            walk.calls.unlink(walk.folder, name)
        else:
            return False  # a file where a folder was asked for: not a folder to remove
        return True

    def _remove_empty(self, walk: _Walk) -> None:
        """Remove the key's folders, deepest first, while they are empty; stop at a link or the root."""
        for folder, name in reversed(walk.entries):
            try:
                walk.calls.rmdir(folder, name)
            except OSError:  # not empty, a link, or already gone: stop
                return
