"""How zarrx configures remote file systems: concurrency, retries, timeouts, redaction.

Every round trip to an object store or web server costs tens of milliseconds, so a
read must go out as few concurrent batches as possible and a transient failure must
not lose the whole read. zarrx sets this up when it builds a file system from a URL
(:meth:`zarrx.storage.FsspecStore.from_url`, so every ``zarrx.open*``,
``xr.open_dataset(..., engine="zarrx")`` and ``ds.zarrx.to_zarr``):

**zarrx's own storage options** (removed before the options reach fsspec):

=========================  =====================================================================
``zarrx_max_concurrency``  requests one batch keeps in flight at once (default 64, or the
                           ``ZARRX_MAX_CONCURRENCY`` environment variable). Passed as
                           ``batch_size`` to fsspec's ``cat_ranges``/``pipe``/``rm`` on async
                           file systems (where they take it), as botocore's
                           ``max_pool_connections`` on S3 and as aiohttp's connection limit
                           over HTTP(S).
``zarrx_retries``          retries of a transient failure (default 5, or ``ZARRX_RETRIES``).
``zarrx_timeout``          seconds one attempt may wait to connect or for the next bytes
                           (default 30, or ``ZARRX_TIMEOUT``).
=========================  =====================================================================

**Retries are the libraries' own where they have them.** Only options the user did not
set are filled in:

* ``s3://`` (s3fs over aiobotocore): botocore's ``standard`` retry mode
  (``config_kwargs={"retries": {"mode": "standard", "total_max_attempts": retries + 1}}``:
  500/502/503/504, throttling, connection resets and timeouts, exponential backoff with
  jitter), ``connect_timeout``/``read_timeout``, and ``max_pool_connections``; s3fs adds
  its own retry of interrupted bodies (``S3FileSystem.retries``, 5). s3fs's
  ``max_concurrency`` (parts of *one* object fetched concurrently) is set to 1: above 1,
  s3fs sends a HEAD before every whole-object GET to learn the size, doubling the
  requests of every chunk read; zarrx's concurrency is across objects.
* ``http://``, ``https://`` (fsspec's HTTP file system over aiohttp): aiohttp has
  timeouts but no retry, and fsspec's HTTP file system none either, so zarrx adds a
  small one as an aiohttp *client middleware* (:class:`RetryMiddleware`, passed in
  ``client_kwargs``): idempotent requests answered 429/500/502/503/504, or failing with
  a connection error or timeout (also while the body is read), are sent again after
  ``0.1 s * 2**attempt`` (with jitter, at most 5 s); aiohttp before 3.12 has no
  middlewares and gets no retry. Timeouts are an ``aiohttp.ClientTimeout`` per attempt
  (``sock_connect``/``sock_read``, no total), and the session's connection limit (100 by
  default) is raised to ``zarrx_max_concurrency`` when that is higher.
* ``gs://`` (gcsfs) and ``az://``/``abfs://`` (adlfs) retry transient errors themselves
  and get only the concurrency cap; other file systems are left as they are.

Chained URLs (``simplecache::s3://…``) and file systems built by the user get only the
concurrency cap of the store (their options are the user's business).

**Redaction.** :func:`redact` removes credentials from any text zarrx puts in an error
message or a ``repr``: ``user:password@`` in URLs, signature and token query
parameters, and the values of the secret storage options (``key``, ``secret``,
``token``, ``password``, ...).
"""

from __future__ import annotations

import asyncio
import os
import random
import re
from typing import Any, Callable, Iterable, Mapping

__all__ = [
    "DEFAULT_MAX_CONCURRENCY",
    "DEFAULT_RETRIES",
    "DEFAULT_TIMEOUT",
    "RemoteOptions",
    "split_storage_options",
    "configure",
    "RetryMiddleware",
    "HttpClientFactory",
    "redact",
    "secret_values",
]

DEFAULT_MAX_CONCURRENCY = 64
DEFAULT_RETRIES = 5
DEFAULT_TIMEOUT = 30.0

#: HTTP statuses worth a second try (RFC 9110: the server may answer differently later)
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
#: methods that may be sent twice (RFC 9110 section 9.2.2)
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
BACKOFF_BASE = 0.1
BACKOFF_MAX = 5.0

_OPTION_NAMES = ("zarrx_max_concurrency", "zarrx_retries", "zarrx_timeout")


class RemoteOptions:
    """zarrx's own storage options, with their defaults from the environment."""

    __slots__ = ("max_concurrency", "retries", "timeout")

    def __init__(self, max_concurrency: int | None = None, retries: int | None = None, timeout: float | None = None):
        self.max_concurrency = _positive_int(
            "zarrx_max_concurrency", max_concurrency, "ZARRX_MAX_CONCURRENCY", DEFAULT_MAX_CONCURRENCY
        )
        self.retries = _positive_int("zarrx_retries", retries, "ZARRX_RETRIES", DEFAULT_RETRIES, minimum=0)
        self.timeout = _positive_float("zarrx_timeout", timeout, "ZARRX_TIMEOUT", DEFAULT_TIMEOUT)

    def __repr__(self) -> str:
        return f"RemoteOptions(max_concurrency={self.max_concurrency}, retries={self.retries}, timeout={self.timeout})"


def _from_environment(name: str, value: Any, variable: str, default: Any) -> tuple[Any, str]:
    if value is not None:
        return value, f"storage option {name!r}"
    if os.environ.get(variable, "").strip():
        return os.environ[variable].strip(), f"environment variable {variable}"
    return default, name


def _positive_int(name: str, value: Any, variable: str, default: int, minimum: int = 1) -> int:
    from zarrx.errors import UsageError

    value, source = _from_environment(name, value, variable, default)
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = None
    if number is None or number < minimum or isinstance(value, (bool, float)):
        raise UsageError(f"{source} must be an integer >= {minimum}, found {value!r}")
    return number


def _positive_float(name: str, value: Any, variable: str, default: float) -> float:
    from zarrx.errors import UsageError

    value, source = _from_environment(name, value, variable, default)
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = None
    if number is None or not number > 0 or isinstance(value, bool):
        raise UsageError(f"{source} must be a number of seconds > 0, found {value!r}")
    return number


def split_storage_options(storage_options: Mapping[str, Any] | None) -> tuple[RemoteOptions, dict[str, Any]]:
    """zarrx's options (``zarrx_*``) and the rest, which go to fsspec.

    Examples
    --------
    >>> options, rest = split_storage_options({"anon": True, "zarrx_max_concurrency": 16})
    >>> options.max_concurrency, rest
    (16, {'anon': True})
    """
    rest = dict(storage_options or {})
    ours = {name.removeprefix("zarrx_"): rest.pop(name) for name in _OPTION_NAMES if name in rest}
    return RemoteOptions(**ours), rest


# -- per protocol defaults -------------------------------------------------------------------
def _s3_defaults(options: dict[str, Any], remote: RemoteOptions) -> dict[str, Any]:
    config = dict(options.get("config_kwargs") or {})
    config.setdefault("max_pool_connections", remote.max_concurrency)
    config.setdefault("retries", {"mode": "standard", "total_max_attempts": remote.retries + 1})
    config.setdefault("connect_timeout", remote.timeout)
    config.setdefault("read_timeout", remote.timeout)
    # s3fs's own max_concurrency splits one large object into concurrent parts, and to know
    # the size it sends a HEAD before every whole-object GET: twice the requests for every
    # chunk. zarrx's concurrency is across objects, so one request per object.
    return {"max_concurrency": 1, **options, "config_kwargs": config}


def _http_defaults(options: dict[str, Any], remote: RemoteOptions) -> dict[str, Any]:
    import aiohttp

    client = dict(options.get("client_kwargs") or {})
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=remote.timeout, sock_read=remote.timeout)
    client.setdefault("timeout", timeout)
    if remote.retries and _has_middlewares(aiohttp):
        client["middlewares"] = (*tuple(client.get("middlewares") or ()), RetryMiddleware(remote.retries))
    configured = {**options, "client_kwargs": client}
    # aiohttp allows 100 connections per session: lift that to the cap when it is higher
    configured.setdefault("get_client", HttpClientFactory(max(100, remote.max_concurrency)))
    return configured


def _has_middlewares(aiohttp: Any) -> bool:
    """Whether this aiohttp takes client middlewares (3.12 and later); older ones get no retry."""
    import inspect

    return "middlewares" in inspect.signature(aiohttp.ClientSession.__init__).parameters


#: protocol -> how its file system is configured (see the module docstring)
PROTOCOL_DEFAULTS: dict[str, Callable[[dict[str, Any], RemoteOptions], dict[str, Any]]] = {
    "s3": _s3_defaults,
    "s3a": _s3_defaults,
    "http": _http_defaults,
    "https": _http_defaults,
}


def configure(url: str, storage_options: Mapping[str, Any] | None) -> tuple[RemoteOptions, dict[str, Any]]:
    """zarrx's options and the fsspec options for ``url``, with zarrx's defaults filled in.

    Examples
    --------
    >>> remote, options = configure("s3://bucket/x.zarr", {"anon": True, "zarrx_max_concurrency": 32})
    >>> options["config_kwargs"]["max_pool_connections"], options["anon"]
    (32, True)
    """
    remote, options = split_storage_options(storage_options)
    match = re.match(r"([A-Za-z][A-Za-z0-9+.\-]*)://", url)
    if match is None or "::" in url:
        return remote, options
    defaults = PROTOCOL_DEFAULTS.get(match[1].lower())
    return remote, (defaults(options, remote) if defaults is not None else options)


# -- HTTP: the retry aiohttp does not have ---------------------------------------------------
def backoff(attempt: int) -> float:
    """Seconds to wait before retry number ``attempt`` (1, 2, ...): exponential, with full jitter."""
    return random.uniform(0.5, 1.0) * min(BACKOFF_MAX, BACKOFF_BASE * 2 ** (attempt - 1))


class RetryMiddleware:
    """An aiohttp client middleware retrying transient failures of idempotent requests.

    A response with a status in :data:`RETRY_STATUSES`, a connection error, a timeout or a
    body cut short is retried up to ``retries`` times after :func:`backoff`; the last
    response (or error) is what the caller sees. The body of a successful GET is read here,
    so an interrupted transfer is retried too. A class, not a closure, so file systems
    configured with it pickle (dask sends stores to workers) and compare equal.
    """

    __slots__ = ("retries",)

    def __init__(self, retries: int) -> None:
        self.retries = retries

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RetryMiddleware) and other.retries == self.retries

    def __hash__(self) -> int:
        return hash((RetryMiddleware, self.retries))

    def __repr__(self) -> str:
        return f"RetryMiddleware(retries={self.retries})"

    def __getstate__(self) -> int:
        return self.retries

    def __setstate__(self, state: int) -> None:
        self.retries = state

    async def __call__(self, request: Any, handler: Any) -> Any:
        import aiohttp

        transient = (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, asyncio.TimeoutError)
        if request.method not in IDEMPOTENT_METHODS:
            return await handler(request)
        attempt = 0
        while True:
            try:
                response = await handler(request)
                if response.status in RETRY_STATUSES and attempt < self.retries:
                    response.release()
                elif request.method == "GET" and response.status < 300:
                    await response.read()  # a reset mid-body is retried too
                    return response
                else:
                    return response
            except transient:
                if attempt >= self.retries:
                    raise
            attempt += 1
            await asyncio.sleep(backoff(attempt))


class HttpClientFactory:
    """``get_client`` for fsspec's HTTP file system: an aiohttp session allowing ``limit`` connections."""

    __slots__ = ("limit",)

    def __init__(self, limit: int) -> None:
        self.limit = limit

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HttpClientFactory) and other.limit == self.limit

    def __hash__(self) -> int:
        return hash((HttpClientFactory, self.limit))

    def __repr__(self) -> str:
        # fsspec caches file systems by the repr of their options: keep it stable
        return f"HttpClientFactory(limit={self.limit})"

    def __getstate__(self) -> int:
        return self.limit

    def __setstate__(self, state: int) -> None:
        self.limit = state

    async def __call__(self, **kwargs: Any) -> Any:
        import aiohttp

        kwargs.pop("loop", None)  # the session belongs to the running loop
        return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=self.limit), **kwargs)


# -- redaction -------------------------------------------------------------------------------
#: storage options whose values are credentials (s3fs, gcsfs, adlfs, HTTP and common spellings)
SECRET_OPTION = re.compile(
    r"(^|[_-])(key|secret|token|password|passwd|credentials?|auth|authorization|sas|signature|sig|connection_string)"
    r"s?($|[_-])",
    re.IGNORECASE,
)
_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)[^/@\s'\"]+@")
_SECRET_QUERY = re.compile(
    r"(?P<name>[?&;](?:[^=&\s'\"]*(?:signature|token|credential|secret|password|key|sig|sas)[^=&\s'\"]*))"
    r"=[^&\s'\"]*",
    re.IGNORECASE,
)
REDACTED = "***"


def secret_values(storage_options: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The string values of secret-looking options, at any depth (``s3={"secret": ...}``)."""
    found: list[str] = []

    def walk(options: Any, depth: int) -> None:
        if depth > 4 or not isinstance(options, Mapping):
            return
        for name, value in options.items():
            if isinstance(value, Mapping):
                walk(value, depth + 1)
            elif isinstance(getattr(value, "password", None), str) and len(value.password) >= 3:
                found.append(value.password)  # aiohttp.BasicAuth in client_kwargs["auth"]
            elif isinstance(name, str) and SECRET_OPTION.search(name) and isinstance(value, str) and len(value) >= 3:
                found.append(value)

    walk(storage_options, 0)
    return tuple(sorted(set(found), key=len, reverse=True))


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with credentials replaced by ``***``.

    Examples
    --------
    >>> redact("https://user:pa55@example.com/x.zarr?X-Amz-Signature=abc&v=1")
    'https://***@example.com/x.zarr?X-Amz-Signature=***&v=1'
    >>> redact("key AKIA123 rejected", secrets=["AKIA123"])
    'key *** rejected'
    """
    text = _URL_USERINFO.sub(lambda m: m["scheme"] + REDACTED + "@", text)
    text = _SECRET_QUERY.sub(lambda m: m["name"] + "=" + REDACTED, text)
    for secret in secrets:
        text = text.replace(secret, REDACTED)
    return text
