"""Stores: where the keys and bytes of a Zarr hierarchy live.

:func:`make_store` turns whatever a user passes as ``store`` into a
:class:`Store`:

=====================================================  =========================================
``store``                                              becomes
=====================================================  =========================================
a :class:`Store`                                       itself, unchanged
``None``                                               a new :class:`MemoryStore`
a ``dict`` (e.g. ``{}``)                               a :class:`MemoryStore` keeping its values in it
a ``pathlib.Path``, a path string, ``file://`` URL     a :class:`LocalStore` (root made absolute)
``s3://``, ``gs://``, ``az://`` (``abfs://``) URL      an :class:`ObstoreStore` (obstore), fsspec's
                                                       ``storage_options`` translated; a
                                                       :class:`FsspecStore` with options obstore
                                                       cannot honour, without obstore installed, or
                                                       with ``zarrx_backend="fsspec"``
                                                       (:mod:`zarrx.storage.obstore_urls`)
any other fsspec URL (``memory://``, ``https://``,     :meth:`FsspecStore.from_url`, with ``storage_options``
chained ``simplecache::s3://``)                        (``https://`` through obstore with
                                                       ``zarrx_backend="obstore"``)
an ``fsspec.FSMap``                                    a :class:`FsspecStore` on its file system and root
                                                       (a :class:`LocalStore` for a local one; a
                                                       ``DirFileSystem`` as the one it wraps)
``reference://`` (kerchunk: ``storage_options`` with   a :class:`ReferenceStore` (read-only), also of
``fo``, ...), a ``ReferenceFileSystem`` or its mapper  the file system or its mapper
a zarr-python store: any ``zarr.abc.store.Store``      a :class:`ZarrPythonStore` over it, paced,
(``LocalStore``, ``FsspecStore``, ``ObjectStore``,      retried and bounded in time as zarrx's own
icechunk's ``IcechunkStore``, ...)                     remote stores (``storage_options``: only
                                                       the ``zarrx_*`` ones); zarr-python's own
                                                       stores of local files: a :class:`LocalStore`
                                                       of the folder; its ``ObjectStore`` and
                                                       ``FsspecStore``: an :class:`ObstoreStore`,
                                                       a :class:`FsspecStore` of the same objects
an obstore store (``obstore.store.S3Store``,           an :class:`ObstoreStore` over it, paced, retried and
``HTTPStore``, ``LocalStore``, ``MemoryStore``, ...)   bounded in time (``storage_options``: only the
                                                       ``zarrx_*`` ones)
=====================================================  =========================================

:class:`MetricsStore` and :class:`PrefetchStore` wrap any store (:class:`WrapperStore` forwards
what a wrapper does not change); stores say what they can do as properties (see
:mod:`zarrx.storage.store`). A store that fails on purpose, for tests, is
:class:`zarrx.testing.FaultyStore`.

A local folder's store keeps every read, write and deletion inside the folder (see
:mod:`zarrx.storage.containment`); to let *reads* follow symbolic links out of it, pass
``follow_external_links=True`` -- to :func:`make_store`, to :class:`LocalStore`, or as the
storage option ``{"follow_external_links": True}`` of ``zarrx.open_group(path, ...)`` and the
other ``open_*`` functions.

``mode="r"`` opens the store read-only; ``"r+"``, ``"a"``, ``"w"`` and ``"w-"``
open it writable (what each means for existing nodes is the caller's business).
"""

from __future__ import annotations

import os
import re
from typing import Any, Mapping
from urllib.parse import unquote, urlsplit

# Only names from fsspec: importing the submodule zarrx.storage.fsspec below
# rebinds the name "fsspec" in this package's namespace to that submodule.
from fsspec.implementations.local import LocalFileSystem
from fsspec.mapping import FSMap

from zarrx.errors import StoreError, StoreTypeError, UsageError
from zarrx.storage.fsspec import FsspecStore
from zarrx.storage.local import LocalStore
from zarrx.storage.memory import MemoryStore
from zarrx.storage.metrics import MetricsStore
from zarrx.storage.obstore import ObstoreStore, is_obstore_store
from zarrx.storage.obstore_urls import choose_backend, obstore_from_url
from zarrx.storage.prefetch import PrefetchStore
from zarrx.storage.readers import beneath_folders
from zarrx.storage.references import ReferenceStore, is_reference_file_system
from zarrx.storage.remote import split_storage_options
from zarrx.storage.zarr_python import ACCEPTED_STORES, ZarrPythonStore, is_zarr_python_store, zarr_python_folder
from zarrx.storage.zarr_python import zarrx_store_of
from zarrx.storage.store import (
    ByteRequest,
    OffsetByteRequest,
    RangeByteRequest,
    RangeReader,
    Store,
    SuffixByteRequest,
    WrapperStore,
)

__all__ = [
    "Store",
    "WrapperStore",
    "ByteRequest",
    "RangeByteRequest",
    "RangeReader",
    "OffsetByteRequest",
    "SuffixByteRequest",
    "LocalStore",
    "MemoryStore",
    "FsspecStore",
    "ObstoreStore",
    "MetricsStore",
    "PrefetchStore",
    "ZarrPythonStore",
    "ReferenceStore",
    "make_store",
    "check_mode",
    "MODES",
]

#: the access modes (zarr-python's), and whether each opens the store read-only: ``r`` read-only,
#: must exist; ``r+`` read/write, must exist; ``a`` read/write, created when absent; ``w``
#: created, replacing what is there; ``w-`` created, failing if anything is there
MODES: dict[str, bool] = {"r": True, "r+": False, "a": False, "w": False, "w-": False}


def check_mode(mode: str) -> str:
    """``mode`` when it is one of :data:`MODES`; UsageError otherwise."""
    if mode not in MODES:
        raise UsageError(f"mode: expected one of {', '.join(map(repr, MODES))}, found {mode!r}")
    return mode

# "scheme://" with a scheme of two or more characters, so "C:\data" stays a path.
_URL_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]+)://")
_LOCAL_SCHEMES = ("file", "local")


def make_store(
    store_like: Any,
    *,
    mode: str = "r",
    storage_options: Mapping[str, Any] | None = None,
    follow_external_links: bool | None = None,
) -> Store:
    """The :class:`Store` for a store argument (see the module docstring for what is accepted).

    Parameters
    ----------
    store_like
        A Store, None, a dict, a path, a URL, an ``fsspec.FSMap``, a zarr-python store or an obstore store.
    mode
        ``"r"`` for a read-only store; ``"r+"``, ``"a"``, ``"w"``, ``"w-"`` for a writable
        one. A Store passed in is returned unchanged, whatever the mode.
    storage_options
        fsspec options (credentials, ``anon=True``, ...), for a URL other than ``file://``
        (``zarrx_backend``: ``"obstore"``, ``"fsspec"`` or ``"auto"``, the library reading it);
        for a local folder only ``follow_external_links``; for a zarr-python or obstore store
        only zarrx's own (``zarrx_request_deadline``, ...: :mod:`zarrx.storage.remote`).
    follow_external_links
        For a local folder: let reads follow symbolic links that leave it (writes and deletions
        never do). Default False (the storage option of the same name, when given).

    Raises
    ------
    StoreError
        ``storage_options`` given for something that is not an fsspec URL.

    Examples
    --------
    >>> make_store("memory://example.zarr", mode="w")
    FsspecStore('memory:///example.zarr')
    >>> make_store({}, mode="r")
    MemoryStore(<0 keys at ...>, read_only=True)
    """
    read_only = MODES[check_mode(mode)]
    if isinstance(store_like, Store):
        _refuse_options(storage_options, store_like)
        if follow_external_links is not None and follow_external_links != store_like.follow_external_links:
            raise UsageError(
                f"follow_external_links={follow_external_links!r} was given with the store {store_like!r}, which "
                "does not change; create the store with it (LocalStore(root, follow_external_links=...))"
            )
        return store_like
    url_scheme = _URL_SCHEME.match(store_like) if isinstance(store_like, str) else None
    if url_scheme and url_scheme[1].lower() in _LOCAL_SCHEMES and "::" not in store_like:
        return _local(_file_url_path(store_like), read_only, storage_options, follow_external_links, store_like)
    if url_scheme and url_scheme[1].lower() == "reference":  # kerchunk references
        return ReferenceStore.from_url(store_like, storage_options=storage_options)
    if url_scheme or isinstance(store_like, str) and "::" in store_like:  # "::" chains file systems
        backend, storage_options = choose_backend(store_like, storage_options)  # fsspec or obstore
        if backend == "obstore":
            return obstore_from_url(store_like, storage_options, read_only=read_only)
        return FsspecStore.from_url(store_like, storage_options=storage_options, read_only=read_only)
    if isinstance(store_like, (str, os.PathLike)):
        path = os.path.expanduser(os.fspath(store_like))
        return _local(path, read_only, storage_options, follow_external_links, store_like)
    if is_reference_file_system(store_like) or isinstance(store_like, FSMap) and is_reference_file_system(store_like.fs):
        _refuse_options(split_storage_options(storage_options)[1], store_like)
        fs, root = (store_like.fs, store_like.root) if isinstance(store_like, FSMap) else (store_like, "")
        return ReferenceStore(fs, root, options=split_storage_options(storage_options)[0])
    if isinstance(store_like, FSMap):
        fs, root = beneath_folders(store_like.fs, store_like.root)  # a DirFileSystem's folder of a local disk is local
        if isinstance(fs, LocalFileSystem):
            return _local(root, read_only, storage_options, follow_external_links, store_like)
        _refuse_options(storage_options, store_like)
        return FsspecStore(fs, root, read_only=read_only)
    if store_like is None or isinstance(store_like, dict):
        _refuse_options(storage_options, store_like)
        return MemoryStore(store_like, read_only=read_only)
    if is_obstore_store(store_like):
        remote, rest = split_storage_options(storage_options)  # zarrx's own options pace its requests
        _refuse_options(rest, store_like)
        return ObstoreStore(store_like, read_only=read_only, options=remote)
    if is_zarr_python_store(store_like):
        remote, rest = split_storage_options(storage_options)  # zarrx's own options pace its requests
        folder = zarr_python_folder(store_like)  # local files: written atomically and locked as a path's
        if folder is not None:
            return _local(folder, read_only or store_like.read_only, rest, follow_external_links, store_like)
        _refuse_options(rest, store_like)
        return zarrx_store_of(store_like, read_only=read_only, options=remote)
    kind = type(store_like)
    node = getattr(store_like, "store_path", None)  # a zarr-python Array or Group: its store and path
    hint = "" if node is None else f" (of this zarr-python node: its store, {node.store!r}, with path={node.path!r})"
    raise StoreTypeError(
        f"cannot use {kind.__module__}.{kind.__qualname__} {store_like!r} as a store; pass {ACCEPTED_STORES}; "
        f"or an obstore store (obstore.store.S3Store, HTTPStore, LocalStore, ...){hint}"
    )


def _local(
    path: str, read_only: bool, storage_options: Mapping[str, Any] | None, follow: bool | None, store_like: Any
) -> LocalStore:
    """The LocalStore of ``path``; of the storage options it takes only ``follow_external_links``."""
    options = dict(storage_options or {})
    option = options.pop("follow_external_links", None)
    _refuse_options(options, store_like)
    if option is not None and not isinstance(option, bool):
        raise UsageError(f"storage option follow_external_links: expected true or false, found {option!r}")
    if option is not None and follow is not None and option != bool(follow):
        raise UsageError(
            f"follow_external_links: the keyword says {follow!r}, the storage option {option!r}; give one"
        )
    return LocalStore(path, read_only=read_only, follow_external_links=bool(follow if follow is not None else option))


def _refuse_options(storage_options: Mapping[str, Any] | None, store_like: Any) -> None:
    if storage_options:
        raise StoreError(
            # the option names only: the values may be credentials
            f"storage_options (with {', '.join(map(repr, storage_options))}) were given with {store_like!r}, "
            "which does not use them; "
            "they configure fsspec file systems, so pass them with a URL like 's3://bucket/data.zarr' "
            "(or configure the file system you built the store from); a local folder takes only "
            "follow_external_links"
        )


def _file_url_path(url: str) -> str:
    """The local path of a ``file://`` URL (RFC 8089): ``file:///my%20data`` is ``/my data``."""
    parts = urlsplit(url)
    path = unquote(parts.path)
    if parts.netloc and parts.netloc != "localhost":
        # "file://data/x.zarr": not a host but a relative path, as fsspec reads it
        path = unquote(parts.netloc) + path
    if os.name == "nt" and re.match(r"^/[A-Za-z]:", path):
        path = path[1:]  # file:///C:/data
    return os.path.abspath(os.path.expanduser(path))
