"""Folder listings of an async file system, as requests of its store's host.

A walk of a hierarchy without consolidated metadata lists many folders at once from its
threads. :class:`Listings` sends each listing as one of the store's requests, through its
host's :class:`~zarrx.storage.limiter.HostLimiter` (the request window; over HTTP the connection
gate too), within the request deadline, and retried where zarrx retries:

* where the store's reader lists folders itself -- :meth:`zarrx.storage.http.HttpReader.listing`,
  the folder's page of links, which fsspec's ``ls`` would send around the connection gate --
  ``find`` walks the folders too, each depth's folders in one batch;
* elsewhere (s3fs, gcsfs, adlfs, ...) it is the file system's own ``ls`` or ``find``.

Listing over HTTP works where the server answers a folder URL with an HTML index of links
(``python -m http.server``, nginx's ``autoindex``); elsewhere open hierarchies through
consolidated metadata.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable, Sequence

from zarrx.storage.transfers import Transfers

__all__ = ["Listings"]


class Listings:
    """The keys ``fs.ls(folder, detail=False)`` and ``fs.find(folder)`` list, as requests of the
    store whose :class:`~zarrx.storage.transfers.Transfers` is ``transfers`` (None: a synchronous
    file system, called directly) and whose ``key_of(path)`` is the key of a path (None: not
    below its root); a listing page may hold at most ``limit`` bytes."""

    def __init__(self, fs: Any, transfers: Transfers | None, limit: int, key_of: Callable[[str], str | None]) -> None:
        self.fs, self.transfers, self.limit, self.key_of = fs, transfers, limit, key_of
        self.listing = getattr(transfers.reader, "listing", None) if transfers is not None else None

    def folder_keys(self, folder: str) -> list[str]:
        """The keys of ``fs.ls(folder, detail=False)``; ``FileNotFoundError`` when there is no such folder."""
        if self.listing is None:
            paths = self._call("ls", folder, detail=False)
        else:
            (paths,) = self._folders([folder])
            if paths is None:
                raise FileNotFoundError(folder)
        return self._keys(paths)

    def keys(self, folder: str, prefix: str) -> list[str]:
        """The keys starting with ``prefix`` of the files ``fs.find(folder)`` finds, sorted; walked
        by the reader's listing, only the folders that may hold such keys are listed."""
        paths = self._call("find", folder) if self.listing is None else self._find(folder, prefix)
        return sorted(key for key in self._keys(paths) if key.startswith(prefix))

    def _keys(self, paths: Sequence[str]) -> list[str]:
        return [key for key in map(self.key_of, paths) if key is not None]

    def _find(self, folder: str, prefix: str) -> list[str]:
        files: list[str] = []
        seen = {folder}
        listings = self._folders([folder])
        if listings[0] is None:
            raise FileNotFoundError(folder)
        while listings:
            level = []
            for path in (path for listed in listings for path in listed or ()):
                if not path.endswith("/"):
                    files.append(path)
                elif path not in seen and self._may_hold(path, prefix):
                    seen.add(path)
                    level.append(path)
            listings = self._folders(level)
        return files

    def _may_hold(self, folder: str, prefix: str) -> bool:
        key = self.key_of(folder)
        return key is not None and ((key + "/").startswith(prefix) or prefix.startswith(key + "/"))

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        if self.transfers is None:
            return getattr(self.fs, method)(path, **kwargs)
        return self.transfers.send(path, lambda: getattr(self.fs, "_" + method)(path, **kwargs))

    def _folders(self, folders: Sequence[str]) -> list[list[str] | None]:
        """The reader's listing of each folder (None: no such folder), in one batch."""
        found = self._send(folders)
        # as fsspec does: a page that links to nothing below ".../" is asked again without the "/"
        again = [i for i, listed in enumerate(found) if listed == [] and folders[i].endswith("/")]
        for i, listed in zip(again, self._send([folders[i].rstrip("/") for i in again])):
            found[i] = listed
        return found

    def _send(self, paths: Sequence[str]) -> list[Any]:
        if not paths:
            return []
        assert self.transfers is not None
        outcomes = self.transfers.send_many([(path, partial(self.listing, path, self.limit)) for path in paths])
        failed = next((outcome for outcome in outcomes if isinstance(outcome, BaseException)), None)
        if failed is not None:
            raise failed
        return outcomes
