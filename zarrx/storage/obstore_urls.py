"""Which library reads a URL -- fsspec or obstore -- and the obstore store for a URL.

:func:`~zarrx.storage.make_store` reads ``s3://``, ``gs://``, ``az://`` and ``http(s)://`` URLs
through either library; the storage option ``zarrx_backend`` (or the environment variable
``ZARRX_BACKEND``) chooses:

=====================  ===================================================================
``zarrx_backend``      the URL is read through
=====================  ===================================================================
``"obstore"``          obstore (:class:`~zarrx.storage.obstore.ObstoreStore`); an option
                       obstore cannot honour is a :class:`~zarrx.errors.UsageError` naming it
``"fsspec"``           fsspec (:class:`~zarrx.storage.FsspecStore`), every option as fsspec
                       takes it
``"auto"`` (default)   the scheme's default of :data:`DEFAULT_BACKENDS` -- chosen by the
                       measurements of ``benchmarks/bench_stores.py`` (``docs/stack.md``) --
                       falling back to fsspec when obstore is not installed, an option is
                       one obstore cannot honour, or the options and the environment leave
                       out what only fsspec's library finds by itself (:func:`_told_enough`:
                       an S3 bucket's region, ``~/.aws`` profiles, gcsfs's anonymous
                       fallback), so what works with fsspec keeps working unchanged
=====================  ===================================================================

Other URLs (``memory://``, chained ``simplecache::s3://``, ``reference://``, ...) are fsspec's.

**The storage options obstore is given** are the ones users pass fsspec's libraries today,
translated (:data:`S3_OPTIONS` ... :data:`HTTP_OPTIONS`; values of options listed in
:data:`IGNORED` concern only fsspec's caches and file objects and are dropped). zarrx's own
``zarrx_*`` options set obstore's client: ``zarrx_connect_timeout`` its ``connect_timeout``,
``zarrx_timeout`` its ``read_timeout``, ``zarrx_request_deadline`` its overall ``timeout``; its own
retries are off: zarrx retries (``zarrx_retries``) and so sees every answer that says overload.
"""

from __future__ import annotations

import json
import os
from datetime import timedelta
from typing import Any, Callable, Mapping
from urllib.parse import urlsplit

from zarrx.errors import StoreError, UsageError
from zarrx.storage.obstore import ObstoreStore
from zarrx.storage.redaction import redact, secret_values
from zarrx.storage.remote import RemoteOptions, split_storage_options

__all__ = ["BACKENDS", "DEFAULT_BACKENDS", "choose_backend", "obstore_from_url", "IGNORED"]

BACKENDS = ("auto", "obstore", "fsspec")
#: scheme -> the library reading its URLs by default (``"auto"``), by the numbers of
#: ``benchmarks/bench_stores.py``: see ``docs/stack.md``
DEFAULT_BACKENDS: dict[str, str] = {
    "s3": "obstore", "s3a": "obstore", "gs": "obstore", "gcs": "obstore",
    "az": "obstore", "abfs": "obstore", "abfss": "obstore", "azure": "obstore",
    "http": "fsspec", "https": "fsspec",
}  # fmt: skip
#: fsspec options about its own caches, file objects and listings: nothing obstore needs
IGNORED = frozenset({
    "asynchronous", "skip_instance_cache", "use_listings_cache", "listings_expiry_time", "max_paths", "loop",
    "default_block_size", "default_fill_cache", "default_cache_type", "cache_regions", "max_concurrency",
    "block_size", "cache_type", "cache_options", "simple_links", "same_scheme", "size_policy", "encoded",
    "batch_size", "project", "fixed_upload_size",
})  # fmt: skip


class _Unsupported(Exception):
    """An option obstore cannot honour (its name)."""


def choose_backend(url: str, storage_options: Mapping[str, Any] | None) -> tuple[str, dict[str, Any]]:
    """``("obstore" | "fsspec", the options without zarrx_backend)`` for ``url``.

    Examples
    --------
    >>> choose_backend("memory://x", {"zarrx_backend": "fsspec"})
    ('fsspec', {})
    >>> choose_backend("s3://bucket/x.zarr", {"anon": True, "zarrx_backend": "obstore"})
    ('obstore', {'anon': True})
    """
    options = dict(storage_options or {})
    given = options.pop("zarrx_backend", None)
    source = "storage option 'zarrx_backend'"
    if given is None and os.environ.get("ZARRX_BACKEND", "").strip():
        given, source = os.environ["ZARRX_BACKEND"].strip(), "environment variable ZARRX_BACKEND"
    backend = "auto" if given is None else given
    if backend not in BACKENDS:
        raise UsageError(f"{source}: expected one of {', '.join(map(repr, BACKENDS))}, found {backend!r}")
    scheme = url.split("://", 1)[0].lower() if "://" in url and "::" not in url else None
    if backend == "fsspec":
        return "fsspec", options
    if scheme not in TRANSLATIONS:
        if backend == "obstore":
            raise UsageError(
                f"{source} is 'obstore', but obstore does not read {url!r}; it reads "
                f"{', '.join(s + '://' for s in TRANSLATIONS)} URLs (not chained ones); use zarrx_backend='fsspec'"
            )
        return "fsspec", options
    if backend == "auto":
        if DEFAULT_BACKENDS.get(scheme) != "obstore" or not _obstore_installed():
            return "fsspec", options
        try:
            kwargs = _translate(scheme, split_storage_options(options)[1])
        except _Unsupported:
            return "fsspec", options  # fsspec honours every fsspec option: it reads this one
        if not _told_enough(scheme, kwargs):
            return "fsspec", options
    elif not _obstore_installed():
        raise UsageError(f"{source} is 'obstore', but obstore is not installed (pip install 'zarrx[obstore]')")
    return "obstore", options


def _told_enough(scheme: str, kwargs: Mapping[str, Any]) -> bool:
    """Whether the options or the environment say what obstore cannot find out itself but fsspec's
    library can: on S3 the bucket's region (or an endpoint) and the credentials or ``anon``
    (botocore also reads ``~/.aws`` profiles and asks S3 where a bucket is); on GCS the
    credentials or ``anon`` (gcsfs falls back to anonymous access); on Azure the account and
    its credentials or ``anon`` (a connection string gives both), or Azurite's. Web servers need nothing."""
    environ = os.environ
    if scheme in AZURE_SCHEMES:
        who = any(kwargs.get(name) for name in ("skip_signature", "account_key", "sas_key", "client_secret"))
        return bool(kwargs.get("use_emulator") or (kwargs.get("account_name") and who))
    if scheme in ("gs", "gcs"):
        return bool(kwargs.get("skip_signature") or kwargs.get("service_account_key") or kwargs.get("service_account_path")
                    or environ.get("GOOGLE_APPLICATION_CREDENTIALS") or environ.get("GOOGLE_SERVICE_ACCOUNT"))  # fmt: skip
    if scheme not in ("s3", "s3a"):
        return True
    where = kwargs.get("endpoint") or kwargs.get("region") or environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION")
    who = (kwargs.get("skip_signature") or kwargs.get("access_key_id") or environ.get("AWS_ACCESS_KEY_ID")
           or environ.get("AWS_WEB_IDENTITY_TOKEN_FILE") or environ.get("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"))  # fmt: skip
    return bool(where and who and not environ.get("AWS_PROFILE"))


def _obstore_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("obstore") is not None


def obstore_from_url(url: str, storage_options: Mapping[str, Any] | None = None, read_only: bool = False) -> ObstoreStore:
    """The :class:`~zarrx.storage.obstore.ObstoreStore` of ``url``, its storage options translated
    from fsspec's (see the module docstring); an option obstore cannot honour is a UsageError.

    Examples
    --------
    >>> obstore_from_url("s3://bucket/data.zarr", {"anon": True, "region_name": "eu-west-1"}, read_only=True)
    ObstoreStore(S3Store(bucket="bucket", prefix="data.zarr"), read_only=True)
    """
    from obstore import store as obstores

    remote, options = split_storage_options(storage_options)
    scheme = url.split("://", 1)[0].lower()
    try:
        kwargs = _translate(scheme, options)
    except _Unsupported as error:
        raise UsageError(
            f"storage option {error.args[0]!r} (for {redact(url, secret_values(options))}) is one obstore cannot "
            "honour; pass zarrx_backend='fsspec' to read the URL through fsspec, which takes it"
        ) from None
    client = {"connect_timeout": timedelta(seconds=remote.connect_timeout),
              "read_timeout": timedelta(seconds=remote.timeout),
              "timeout": timedelta(seconds=remote.request_deadline), **kwargs.pop("client_options", {})}  # fmt: skip
    # zarrx retries (and sees every 503 SlowDown, which shrinks the host's window): obstore does not
    retry = {"max_retries": 0, "retry_timeout": timedelta(seconds=remote.request_deadline)}
    parts = urlsplit(url)
    try:
        if scheme in ("http", "https"):
            client["allow_http"] = True
            made = obstores.HTTPStore.from_url(url.rstrip("/"), client_options=client, retry_config=retry)
            read_only = True  # a web server is read, as every HTTP(S) store of zarrx
        else:
            bucket, prefix = _bucket_and_prefix(scheme, parts, kwargs)
            kind = {"s3": obstores.S3Store, "s3a": obstores.S3Store, "gs": obstores.GCSStore,
                    "gcs": obstores.GCSStore}.get(scheme, obstores.AzureStore)  # fmt: skip
            if str(kwargs.get("endpoint", "")).startswith("http://"):
                client["allow_http"] = True
            made = kind(bucket, prefix=prefix or None, client_options=client, retry_config=retry, **kwargs)
    except Exception as error:  # noqa: BLE001 (obstore's configuration errors, credentials removed)
        secrets = secret_values(options)
        raise StoreError(redact(f"cannot open {url!r} with obstore: {type(error).__name__}: {error}", secrets)) from None
    return ObstoreStore(made, read_only=read_only, options=remote)


def _bucket_and_prefix(scheme: str, parts: Any, kwargs: dict[str, Any]) -> tuple[str, str]:
    """``(bucket, prefix)`` of an object store URL; ``az://container@account.host/path`` names the account."""
    netloc, path = parts.netloc, parts.path.strip("/")
    if "@" in netloc and scheme in AZURE_SCHEMES:
        netloc, host = netloc.split("@", 1)
        kwargs.setdefault("account_name", host.split(".", 1)[0])
    if not netloc:
        raise UsageError(f"{scheme}:// URL without a bucket: {parts.geturl()!r}")
    return netloc, path


# -- translations of fsspec's options ---------------------------------------------------------
#: s3fs option -> S3Store configuration key
S3_OPTIONS = {
    "key": "access_key_id", "aws_access_key_id": "access_key_id", "secret": "secret_access_key",
    "aws_secret_access_key": "secret_access_key", "token": "session_token", "aws_session_token": "session_token",
    "endpoint_url": "endpoint", "region_name": "region", "region": "region", "requester_pays": "request_payer",
}  # fmt: skip
#: gcsfs option -> GCSStore configuration key (``token`` is translated by its value)
GCS_OPTIONS: dict[str, str] = {}
#: adlfs option -> AzureStore configuration key
AZURE_OPTIONS = {
    "account_name": "account_name", "account_key": "account_key", "sas_token": "sas_key", "tenant_id": "tenant_id",
    "client_id": "client_id", "client_secret": "client_secret",
}  # fmt: skip
#: fsspec HTTP option -> obstore client option
HTTP_OPTIONS = {"headers": "default_headers"}
AZURE_SCHEMES = ("az", "abfs", "abfss", "azure")


def _s3(options: dict[str, Any]) -> dict[str, Any]:
    kwargs = _renamed(options, S3_OPTIONS, special=("anon", "client_kwargs", "config_kwargs", "use_ssl"))
    if options.get("anon"):
        kwargs["skip_signature"] = True
    client_kwargs = dict(options.get("client_kwargs") or {})
    for name, key in (("endpoint_url", "endpoint"), ("region_name", "region")):
        if name in client_kwargs:
            kwargs[key] = client_kwargs.pop(name)
    _refuse_rest(client_kwargs, "client_kwargs")
    config_kwargs = dict(options.get("config_kwargs") or {})
    addressing = dict(config_kwargs.pop("s3", None) or {}).get("addressing_style")
    if addressing is not None:
        kwargs["virtual_hosted_style_request"] = addressing == "virtual"
    if "region_name" in config_kwargs:
        kwargs["region"] = config_kwargs.pop("region_name")
    _refuse_rest(config_kwargs, "config_kwargs")
    if options.get("use_ssl") is False:
        kwargs.setdefault("client_options", {})["allow_http"] = True
    if kwargs.get("endpoint") and not kwargs.get("region"):
        kwargs["region"] = "us-east-1"  # a custom endpoint (MinIO, moto, Ceph) ignores the region: sign for any
    return kwargs


def _gcs(options: dict[str, Any]) -> dict[str, Any]:
    kwargs = _renamed(options, GCS_OPTIONS, special=("token", "anon"))
    token = options.get("token")
    if token == "anon" or options.get("anon"):
        kwargs["skip_signature"] = True
    elif isinstance(token, Mapping):
        kwargs["service_account_key"] = json.dumps(dict(token))
    elif isinstance(token, str) and token not in ("google_default", "cloud", "browser"):
        kwargs["service_account_path"] = token
    elif token not in (None, "google_default", "cloud"):
        raise _Unsupported("token")
    return kwargs


def _azure(options: dict[str, Any]) -> dict[str, Any]:
    kwargs = _renamed(options, AZURE_OPTIONS, special=("anon", "connection_string"))
    if options.get("connection_string"):
        kwargs = {**_connection_string(options["connection_string"]), **kwargs}
    if options.get("anon"):
        kwargs["skip_signature"] = True
    return kwargs


def _connection_string(text: str) -> dict[str, Any]:
    """AzureStore's configuration from an Azure Storage connection string (adlfs's
    ``connection_string``, what the Azure portal and Azurite's docs give): its ``Name=value;``
    settings, the blob endpoint built from the protocol and suffix when not given.

    >>> _connection_string("DefaultEndpointsProtocol=https;AccountName=acc;AccountKey=k==;EndpointSuffix=example.net")
    {'account_name': 'acc', 'account_key': 'k==', 'endpoint': 'https://acc.blob.example.net'}
    >>> _connection_string("UseDevelopmentStorage=true")
    {'use_emulator': True}
    """
    settings = dict(part.split("=", 1) for part in text.split(";") if "=" in part)
    if settings.get("UseDevelopmentStorage", "").lower() == "true":
        return {"use_emulator": True}  # Azurite's account, key and endpoint (127.0.0.1:10000)
    kwargs: dict[str, Any] = {}
    for setting, name in (("AccountName", "account_name"), ("AccountKey", "account_key"),
                          ("SharedAccessSignature", "sas_key")):  # fmt: skip
        if settings.get(setting):
            kwargs[name] = settings[setting]
    endpoint = settings.get("BlobEndpoint")
    if not endpoint and "account_name" in kwargs:
        protocol = settings.get("DefaultEndpointsProtocol", "https")
        endpoint = f"{protocol}://{kwargs['account_name']}.blob.{settings.get('EndpointSuffix', 'core.windows.net')}"
    if endpoint:
        kwargs["endpoint"] = endpoint.rstrip("/")
    return kwargs


def _http(options: dict[str, Any]) -> dict[str, Any]:
    client_kwargs = dict(options.get("client_kwargs") or {})
    headers = {**dict(client_kwargs.pop("headers", None) or {}), **dict(options.get("headers") or {})}
    _refuse_rest(client_kwargs, "client_kwargs")
    _renamed(options, HTTP_OPTIONS, special=("client_kwargs",))
    return {"client_options": {"default_headers": {str(k): str(v) for k, v in headers.items()}}} if headers else {}


def _renamed(options: dict[str, Any], names: Mapping[str, str], special: tuple[str, ...]) -> dict[str, Any]:
    """Options renamed by ``names``; ``special`` ones are the caller's; others unsupported."""
    kwargs: dict[str, Any] = {}
    for name, value in options.items():
        if name in names:
            if value is not None:
                kwargs[names[name]] = value
        elif name not in special and name not in IGNORED:
            raise _Unsupported(name)
    return kwargs


def _refuse_rest(rest: Mapping[str, Any], within: str) -> None:
    for name in rest:
        raise _Unsupported(f"{within}[{name!r}]")


TRANSLATIONS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "s3": _s3, "s3a": _s3, "gs": _gcs, "gcs": _gcs, **{scheme: _azure for scheme in AZURE_SCHEMES},
    "http": _http, "https": _http,
}  # fmt: skip


def _translate(scheme: str, options: dict[str, Any]) -> dict[str, Any]:
    return TRANSLATIONS[scheme](options)

