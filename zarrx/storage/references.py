"""kerchunk references (``reference://``): keys whose values are inline or byte ranges of other files.

A reference set maps each key to its value (metadata, small chunks: inline text or
``base64:`` bytes) or to where its bytes are: ``[url]`` (a whole file) or ``[url, offset,
size]``. fsspec's ``ReferenceFileSystem`` loads it -- JSON (version 0 and 1, ``templates``,
``gen``), a dict, or parquet (``LazyReferenceMapper``) -- and makes the file systems of the
targets (``remote_protocol``/``remote_options``, ``fs=``). :class:`ReferenceStore` is an
:class:`~zarrx.storage.fsspec.FsspecStore` on that file system (listing, metadata, missing keys
as for any store) that reads the *targets* itself, each through zarrx's reader of its file system
(:mod:`zarrx.storage.readers`): the per-host adaptive limit, retries, deadlines and bounded bodies
of the target's host (an HTTP target is read by zarrx's own GET, which also cuts the range out of
the whole file a server without byte ranges answers, as ``python -m http.server`` does); a
synchronous target (a local file) in one ``cat_ranges``.

A reference that cannot be followed is a :class:`~zarrx.errors.StoreError` naming the key and
the reference, never the fill value nor other bytes: a target file that is missing, fewer
bytes at the offset than the reference's size (an offset past the end of the file), a
malformed reference (not ``[url]`` or ``[url, offset, size]``). A key the references do not
hold is missing (None), as on any store. Reference sets that cannot be loaded (malformed JSON
or parquet) fail in :func:`reference_file_system`, naming the ``fo`` given.

:func:`zarrx.storage.make_store` makes a ReferenceStore of ``reference://`` URLs (with the
``fo``, ``remote_protocol``, ``remote_options``, ``target_options``, ... that ``engine="zarr"``
takes, ``asynchronous`` included), of fsspec mappers on a ``ReferenceFileSystem`` and of the file
system itself.
"""

from __future__ import annotations

import base64
from typing import Any, Mapping, Sequence

import fsspec
from fsspec.asyn import AsyncFileSystem
from fsspec.core import split_protocol
from fsspec.implementations.reference import ReferenceFileSystem

from zarrx.errors import ReadOnlyError, StoreError, StoreTimeoutError
from zarrx.storage.fsspec import FsspecStore
from zarrx.storage.readers import MISSING, protocols, read_synchronously, reader_for
from zarrx.storage.redaction import redact, secret_values
from zarrx.storage.remote import configure
from zarrx.storage.transfers import ObjectRead, Transfers, describe_failure

__all__ = ["ReferenceStore", "BrokenReference", "reference_file_system", "is_reference_file_system", "resolve"]


class BrokenReference(Exception):
    """A reference that cannot be followed (the store names the key and the reference)."""


def is_reference_file_system(fs: Any) -> bool:
    """Whether ``fs`` is fsspec's ``ReferenceFileSystem`` (a kerchunk reference set).

    Examples
    --------
    >>> is_reference_file_system(fsspec.filesystem("reference", fo={"version": 1, "refs": {}}))
    True
    """
    return isinstance(fs, ReferenceFileSystem)


def reference_file_system(url: str, storage_options: Mapping[str, Any] | None) -> tuple[ReferenceFileSystem, str, Any]:
    """The ``ReferenceFileSystem`` of a ``reference://`` URL, its root and zarrx's options.

    ``storage_options`` are what ``engine="zarr"`` takes (``fo``, ``remote_protocol``,
    ``remote_options`` -- ``asynchronous`` there is left out, zarrx runs the file systems
    itself --, ``target_options``, ``template_overrides``, ``simple_templates``, ...) and
    zarrx's ``zarrx_*`` options; HTTP and S3 targets get zarrx's defaults (:mod:`zarrx.storage.remote`).
    A reference set that cannot be loaded is a :class:`~zarrx.errors.StoreError` naming ``fo``.

    Examples
    --------
    >>> fs, root, _ = reference_file_system("reference://", {"fo": {"version": 1, "refs": {"a": "x"}}})
    >>> fs.cat_file("a"), root
    (b'x', '')
    """
    remote, options = configure(url, storage_options)
    secrets = secret_values(storage_options)
    given = options.get("fo")
    try:
        fs, root = fsspec.core.url_to_fs(url, **options)
    except Exception as error:  # noqa: BLE001 (fsspec's, kerchunk's, json's or parquet's failure)
        what = repr(given) if isinstance(given, str) else f"a {type(given).__name__} of references"
        raise StoreError(redact(f"cannot load the references {what} ({url}): {type(error).__name__}: {error}", secrets)) from None
    return fs, root, remote


def resolve(fs: ReferenceFileSystem, path: str, start: int | None, end: int | None) -> bytes | tuple[str, int | None, int | None, int | None]:
    """Where bytes ``[start, end)`` of ``path`` are: the bytes themselves (inline), or the target's
    ``(url, first, stop, size)`` -- ``size`` None for a whole-file reference. FileNotFoundError for a
    key the references do not hold; :class:`BrokenReference` for a malformed reference.

    Examples
    --------
    >>> fs = fsspec.filesystem("reference", fo={"version": 1, "refs": {"a": "base64:eHl6", "c": ["f.nc", 10, 4]}})
    >>> resolve(fs, "a", 1, None), resolve(fs, "c", None, None), resolve(fs, "c", -2, None)
    (b'yz', ('f.nc', 10, 14, 4), ('f.nc', 12, 14, 4))
    """
    try:
        part = fs.references[path]
    except KeyError:
        raise FileNotFoundError(path) from None
    if isinstance(part, str):
        part = part.encode()
    if hasattr(part, "to_bytes"):
        part = part.to_bytes()
    if isinstance(part, bytes):
        return (base64.b64decode(part[7:]) if part.startswith(b"base64:") else part)[start:end]
    if not isinstance(part, (list, tuple)) or len(part) not in (1, 3):
        raise BrokenReference(f"the reference {part!r} is neither [url] nor [url, offset, size]")
    url = part[0] if part[0] is not None else fs.target
    if not isinstance(url, str):
        if url is None or url != url:  # None or NaN: a parquet row without a reference
            raise FileNotFoundError(path)
        raise BrokenReference(f"the reference {part!r} has no URL")
    if len(part) == 1:
        return url, start, end, None
    offset, size = part[1], part[2]
    if not all(isinstance(n, int) or hasattr(n, "__index__") for n in (offset, size)) or offset < 0 or size < 0:
        raise BrokenReference(f"the reference {list(part)!r}: offset and size must be integers >= 0")
    offset, size = int(offset), int(size)
    first, stop = slice(start, end).indices(size)[:2]
    return url, offset + first, offset + max(first, stop), size


class ReferenceStore(FsspecStore):
    """The keys of a kerchunk reference set, read from their targets by zarrx (module docstring).

    Examples
    --------
    >>> refs = {"version": 1, "refs": {"zarr.json": '{"zarr_format": 3, "node_type": "group"}'}}
    >>> store = ReferenceStore.from_url("reference://", {"fo": refs})
    >>> store.get("zarr.json")[:16], store.get("missing")
    (b'{"zarr_format": ', None)
    """

    def __init__(self, fs: ReferenceFileSystem, root: str = "", read_only: bool = True, **kwargs: Any) -> None:
        super().__init__(fs, root, read_only=True, **kwargs)

    @classmethod
    def from_url(cls, url: str, storage_options: Mapping[str, Any] | None = None, read_only: bool = True) -> ReferenceStore:
        """The store of a ``reference://`` URL and its options (see :func:`reference_file_system`)."""
        fs, root, remote = reference_file_system(url, storage_options)
        return cls(fs, root, secrets=secret_values(storage_options), options=remote)

    read_only_reason = "references are read-only (write a Zarr store)"

    def _check_writable(self, key: str) -> None:
        raise ReadOnlyError(f"cannot write {key!r}: {self!r} is read-only: {self.read_only_reason}")

    @property
    def transfers(self) -> None:
        return None  # every read goes to its target's file system (_read_all)

    @property
    def preferred_concurrency(self) -> int:
        return self.max_concurrency

    @property
    def reads_are_local(self) -> bool:
        return False

    def _call(self, method: str, *args: Any, what: str = "", **kwargs: Any) -> Any:
        # listings and sizes are answered from the references, in this process
        return getattr(self.fs, method)(*args, **{name: value for name, value in kwargs.items() if name != "batch_size"})

    def _read_all(self, reads: Sequence[ObjectRead]) -> list[Any]:
        """One outcome per read: inline values at once, the others from their targets, one batch
        per target file system."""
        outcomes: list[Any] = [None] * len(reads)
        by_protocol: dict[Any, list[tuple[int, ObjectRead, int | None, str]]] = {}
        for position, read in enumerate(reads):
            try:
                found = resolve(self.fs, read.path, read.start, read.end)
            except FileNotFoundError as error:
                outcomes[position] = error
                continue
            except BrokenReference as error:
                outcomes[position] = self._broken(read.key, str(error))
                continue
            if isinstance(found, bytes):
                outcomes[position] = found
                continue
            url, first, stop, size = found
            expected = None if size is None else stop - first
            # a ranged answer is bounded by the range; a whole file (a server ignoring Range answers
            # one) by zarrx_max_read_size
            limit = read.limit if expected is None else max(self.options.max_read_size, expected)
            target = ObjectRead(read.key, url, first, stop, limit)
            by_protocol.setdefault(split_protocol(url)[0], []).append((position, target, expected, read.path))
        for protocol, group in by_protocol.items():
            answers = self._read_targets(protocol, [target for _, target, _, _ in group])
            for (position, target, expected, path), outcome in zip(group, answers, strict=True):
                outcomes[position] = self._checked(target, expected, path, outcome)
        return outcomes

    def _reference(self, path: str) -> str:
        """The reference of ``path`` as the references hold it, for messages."""
        part = self.fs.references[path]
        return repr(list(part) if isinstance(part, tuple) else part)

    def _target_fs(self, protocol: str | None) -> Any:
        """The file system the references read ``protocol://`` URLs with: the one made for that
        protocol, else one whose library takes it too (adlfs serves ``abfs`` and ``az``, s3fs ``s3``
        and ``s3a``, gcsfs ``gs`` and ``gcs``: ``remote_protocol="az"`` reads ``abfs://`` references)."""
        if protocol in self.fs.fss:
            return self.fs.fss[protocol]
        for fs in self.fs.fss.values():
            if fs is not None and protocol in protocols(getattr(fs, "sync_fs", fs)):
                return fs
        return None

    def _read_targets(self, protocol: str | None, reads: list[ObjectRead]) -> list[Any]:
        fs = self._target_fs(protocol)
        if fs is None:
            error = StoreError(
                f"cannot read {reads[0].key!r}: its reference {reads[0].path!r} is a {protocol}:// URL, and the references "
                f"have file systems for {sorted(map(str, self.fs.fss))} only (set remote_protocol={protocol!r})"
            )
            return [error] * len(reads)
        fs = getattr(fs, "sync_fs", fs)  # fsspec wraps synchronous targets (local files) for its async API
        if isinstance(fs, AsyncFileSystem) and not fs.asynchronous:
            return Transfers(fs, reader_for(fs, self.options), self.options).read_many(reads)
        if not isinstance(fs, AsyncFileSystem):
            return read_synchronously(fs, reads, self.options)
        # made for an event loop of the caller's: zarrx reads on fsspec's own loop, from its threads
        error = StoreError(
            f"cannot read {reads[0].key!r}: the references' target file system {type(fs).__name__} was made with "
            "asynchronous=True; give zarrx the reference:// URL and its storage options (asynchronous is "
            "accepted there) or a file system made without it"
        )
        return [error] * len(reads)

    def _checked(self, target: ObjectRead, expected: int | None, path: str, outcome: Any) -> Any:
        """A target's bytes, or the error naming the key and the reference."""
        if isinstance(outcome, bytes) and (expected is None or len(outcome) == expected):
            return outcome
        reference = self._reference(path)
        if outcome is None or isinstance(outcome, MISSING):
            return self._broken(target.key, f"the reference {reference} points to {target.path!r}, which does not exist")
        if isinstance(outcome, StoreError):
            return outcome
        if isinstance(outcome, BaseException):
            timed_out, detail = describe_failure(outcome, self.options)
            text = f"could not read the reference {reference}: {redact(detail, self.secrets)}"
            return self._broken(target.key, text, outcome, StoreTimeoutError if timed_out else StoreError)
        if expected is not None and len(outcome) != expected:
            return self._broken(
                target.key,
                f"the reference {reference} asks for {expected} bytes at offset {target.start} of {target.path!r}, "
                f"which holds {len(outcome)} there (an offset or size past the end of the file?)",
            )
        return outcome

    def _broken(self, key: str, text: str, cause: BaseException | None = None, kind: type[StoreError] = StoreError) -> StoreError:
        error = kind(redact(f"could not read {key!r} at {self.url(key)}: {text}", self.secrets))
        error.__cause__ = cause
        return error

    def _outcome(self, read: ObjectRead, byte_range: Any, result: Any) -> bytes | None:
        if isinstance(result, StoreError):
            raise result
        return super()._outcome(read, None, result)

    def __repr__(self) -> str:
        return f"ReferenceStore({self.url()!r})"
