"""Conditional writes on S3 through s3fs: ETag preconditions (``If-Match``, ``If-None-Match: *``).

An :class:`~zarrx.storage.fsspec.FsspecStore` on s3fs offers ``conditional_writes`` (see
:mod:`zarrx.storage.metadata_updates`) with these two functions. The version of a value is the
ETag of the ``GetObject`` answer that carried it: one request, and the version of exactly the
bytes read (a ``HEAD`` before the ``GET`` cost a request more, with an ETag that could be older
than the value -- safe, the conditional ``PUT`` then failed and was retried, but slower). A
failed precondition (S3's 412
``PreconditionFailed``, or 409 ``ConditionalRequestConflict`` when two conditional writes race)
is a False answer for the caller to retry; anything else is an error naming the key.

AWS S3 honours both headers on ``PutObject`` (since August and November 2024), as do MinIO and
moto's server; s3fs passes ``IfMatch`` through ``pipe_file``'s keywords and sends
``IfNoneMatch="*"`` for ``mode="create"``. Other file systems (gcsfs, adlfs) have their own
preconditions that zarrx does not use yet: they offer no conditional writes.
"""

from __future__ import annotations

from typing import Any

__all__ = ["get_versioned", "set_if"]

#: S3's answers to a write whose precondition failed
_CONFLICT_CODES = {"PreconditionFailed", "412", "ConditionalRequestConflict", "409"}


def get_versioned(store: Any, key: str) -> tuple[bytes | None, Any]:
    """``(value, ETag)`` of ``key`` in the :class:`~zarrx.storage.fsspec.FsspecStore` ``store``
    (one ``GetObject``, within the request deadline); ``(None, None)`` when it is absent."""
    from s3fs.core import version_id_kw

    fs, path = store.fs, store._path(key)
    bucket, name, version = fs.split_path(path)

    async def get() -> tuple[bytes, Any]:
        response = await fs._call_s3("get_object", Bucket=bucket, Key=name, **version_id_kw(version))
        body = response["Body"]
        try:
            return await body.read(), response.get("ETag")
        finally:
            body.close()

    try:
        return store.transfers.call(f"read {key!r}", get)
    except FileNotFoundError:
        return None, None
    except Exception as error:
        raise store._error("read", key, error) from error


def set_if(store: Any, key: str, value: bytes, version: Any) -> bool:
    """Write ``value`` under ``key`` of ``store`` if it is still at ETag ``version`` (absent, when
    None); False when another writer came first. Other failures raise a StoreError naming the key."""
    fs, path = store.fs, store._path(key)
    try:
        if version is None:
            fs.pipe_file(path, value, mode="create")
        else:
            fs.pipe_file(path, value, IfMatch=version)
    except Exception as error:
        if _precondition_failed(error):
            return False
        raise store._error("write", key, error) from error
    return True


def _precondition_failed(error: BaseException | None) -> bool:
    """Whether ``error`` (or what it was raised from) is S3 saying a precondition failed."""
    seen = 0
    while error is not None and seen < 5:
        response = getattr(error, "response", None)
        if isinstance(response, dict):
            code = str(response.get("Error", {}).get("Code", ""))
            status = str(response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
            if code in _CONFLICT_CODES or status in ("412", "409"):
                return True
        error = error.__cause__ or error.__context__
        seen += 1
    return False
