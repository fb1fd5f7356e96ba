"""How zarrx configures remote file systems: concurrency, retries, timeouts, deadlines, limits.

Every round trip to an object store or web server costs tens of milliseconds, so a
read must go out in few concurrent batches, a transient failure must not lose the whole
read, a stalled server must not hang it and a hostile one must not fill the memory. zarrx
sets this up when it builds a file system from a URL
(:meth:`zarrx.storage.FsspecStore.from_url`, so every ``zarrx.open*``,
``xr.open_dataset(..., engine="zarrx")`` and ``ds.zarrx.to_zarr``).

**zarrx's own storage options** (removed before the options reach fsspec; each also read
from an environment variable, the option winning):

==========================  ===============================  ==============================================
option                      default (environment variable)   what
==========================  ===============================  ==============================================
``zarrx_max_concurrency``   64 (``ZARRX_MAX_CONCURRENCY``)   most requests in flight to one host from one
                                                             store: the cap of the adaptive concurrency
                                                             (:mod:`zarrx.storage.limiter`)
``zarrx_retries``           5 (``ZARRX_RETRIES``)            retries of a transient failure
``zarrx_timeout``           30 s (``ZARRX_TIMEOUT``)         longest wait for the next bytes of an answer
``zarrx_connect_timeout``   10 s                             longest wait for a connection
                            (``ZARRX_CONNECT_TIMEOUT``)
``zarrx_request_deadline``  60 s                             longest a request may take, all its attempts
                            (``ZARRX_REQUEST_DEADLINE``)     and waits included
``zarrx_batch_deadline``    1800 s                           longest a batch of requests may take
                            (``ZARRX_BATCH_DEADLINE``)
``zarrx_max_read_size``     128 MiB                          most bytes a read may return when zarrx does
                            (``ZARRX_MAX_READ_SIZE``)        not know the value's size (metadata documents,
                                                             the Store API without ``max_size``)
==========================  ===============================  ==============================================

**The libraries underneath do what they can.** Only options the user did not set are filled in:

* ``s3://`` (s3fs over aiobotocore): botocore's ``standard`` retry mode
  (``config_kwargs={"retries": {"mode": "standard", "total_max_attempts": retries + 1}}``:
  500/502/503/504, throttling (SlowDown), connection resets and timeouts retried with jittered
  exponential backoff), ``connect_timeout``/``read_timeout`` and ``max_pool_connections``; s3fs
  retries interrupted bodies itself. What botocore retries also shrinks zarrx's concurrency for
  the endpoint (:class:`~zarrx.storage.readers.S3Reader`). botocore's ``adaptive`` mode (a
  client-side token bucket) is not used: starting from no measured rate, one burst of SlowDowns
  at the start of a read cuts it to half a request per second (measured: 19 s instead of 3 s
  for 8 chunks refused twice each); pass ``config_kwargs={"retries": {"mode": "adaptive"}}`` to
  have it anyway. s3fs's ``max_concurrency`` (parts of *one* object read
  concurrently) is set to 1: above 1, s3fs sends a HEAD before every whole-object GET,
  doubling the requests of every chunk read; zarrx's concurrency is across objects.
* ``http://``, ``https://`` (fsspec's HTTP file system over aiohttp): an
  ``aiohttp.ClientTimeout`` (``sock_connect``, ``sock_read``, and ``total`` = the request
  deadline), a connector keeping connections alive with ``limit`` and ``limit_per_host`` at
  least the cap, and connection gating (:class:`~zarrx.storage.http.HttpClientFactory`).
  aiohttp and fsspec's HTTP file system do not retry: zarrx retries the values it reads
  itself (:mod:`zarrx.storage.transfers`), and fsspec's other requests (listings, sizes)
  through an aiohttp *client middleware*, :class:`RetryMiddleware` (aiohttp >= 3.12).
* ``gs://`` (gcsfs) and ``az://``/``abfs://`` (adlfs) retry transient errors themselves and
  get nothing more; other file systems are left as they are.

Chained URLs (``simplecache::https://…``) get the same defaults for the file system they
read from (under its protocol's key, as fsspec passes options along a chain); ``reference://``
(kerchunk) the defaults of its ``remote_protocol`` in its ``remote_options``.
"""

from __future__ import annotations

import asyncio
import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from zarrx.storage.http import HttpClientFactory
from zarrx.storage.redaction import redact, secret_values
from zarrx.storage.transfers import RETRY_STATUSES, ServerAnswer, backoff

__all__ = [
    "DEFAULT_MAX_CONCURRENCY", "DEFAULT_RETRIES", "DEFAULT_TIMEOUT", "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_REQUEST_DEADLINE", "DEFAULT_BATCH_DEADLINE", "DEFAULT_MAX_READ_SIZE", "RemoteOptions",
    "split_storage_options", "configure", "RetryMiddleware", "HttpClientFactory", "backoff", "redact",
    "secret_values",
]  # fmt: skip

DEFAULT_MAX_CONCURRENCY = 64
DEFAULT_RETRIES = 5
DEFAULT_TIMEOUT = 30.0
DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_REQUEST_DEADLINE = 60.0
DEFAULT_BATCH_DEADLINE = 1800.0
DEFAULT_MAX_READ_SIZE = 128 * 2**20

#: methods that may be sent twice (RFC 9110 section 9.2.2)
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})

#: option -> (environment variable, default, kind: "count" (>= 0), "positive" (>= 1), "seconds")
OPTIONS: dict[str, tuple[str, Any, str]] = {
    "max_concurrency": ("ZARRX_MAX_CONCURRENCY", DEFAULT_MAX_CONCURRENCY, "positive"),
    "retries": ("ZARRX_RETRIES", DEFAULT_RETRIES, "count"),
    "timeout": ("ZARRX_TIMEOUT", DEFAULT_TIMEOUT, "seconds"),
    "connect_timeout": ("ZARRX_CONNECT_TIMEOUT", DEFAULT_CONNECT_TIMEOUT, "seconds"),
    "request_deadline": ("ZARRX_REQUEST_DEADLINE", DEFAULT_REQUEST_DEADLINE, "seconds"),
    "batch_deadline": ("ZARRX_BATCH_DEADLINE", DEFAULT_BATCH_DEADLINE, "seconds"),
    "max_read_size": ("ZARRX_MAX_READ_SIZE", DEFAULT_MAX_READ_SIZE, "positive"),
}


class RemoteOptions:
    """zarrx's own storage options (the table of the module docstring), from the arguments,
    else the environment, else the defaults.

    Examples
    --------
    >>> RemoteOptions(max_concurrency=8, request_deadline=5).request_deadline
    5.0
    """

    __slots__ = tuple(OPTIONS)

    def __init__(self, **values: Any) -> None:
        unknown = sorted(set(values) - set(OPTIONS))
        if unknown:
            from zarrx.errors import UsageError

            names = ", ".join(f"zarrx_{name}" for name in OPTIONS)
            raise UsageError(f"unknown zarrx storage options {['zarrx_' + n for n in unknown]}; zarrx takes {names}")
        for name, (variable, default, kind) in OPTIONS.items():
            setattr(self, name, _parse(f"zarrx_{name}", values.get(name), variable, default, kind))

    def __repr__(self) -> str:
        return f"RemoteOptions({', '.join(f'{name}={getattr(self, name)!r}' for name in OPTIONS)})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RemoteOptions) and all(getattr(self, n) == getattr(other, n) for n in OPTIONS)

    def __getstate__(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in OPTIONS}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            setattr(self, name, value)


def _parse(name: str, value: Any, variable: str, default: Any, kind: str) -> Any:
    from zarrx.errors import UsageError

    source = f"storage option {name!r}"
    if value is None and os.environ.get(variable, "").strip():
        value, source = os.environ[variable].strip(), f"environment variable {variable}"
    if value is None:
        return default
    if kind == "seconds":
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = None
        if number is None or not number > 0 or isinstance(value, bool) or number != number:
            raise UsageError(f"{source} must be a number of seconds > 0, found {value!r}")
        return number
    minimum = 0 if kind == "count" else 1
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = None
    if number is None or number < minimum or isinstance(value, (bool, float)):
        raise UsageError(f"{source} must be an integer >= {minimum}, found {value!r}")
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
    ours = {name.removeprefix("zarrx_"): rest.pop(name) for name in list(rest) if isinstance(name, str) and name.startswith("zarrx_")}
    return RemoteOptions(**ours), rest


# -- per protocol defaults -------------------------------------------------------------------
def _s3_defaults(options: dict[str, Any], remote: RemoteOptions) -> dict[str, Any]:
    config = dict(options.get("config_kwargs") or {})
    config.setdefault("max_pool_connections", remote.max_concurrency)
    config.setdefault("retries", {"mode": "standard", "total_max_attempts": remote.retries + 1})
    config.setdefault("connect_timeout", remote.connect_timeout)
    config.setdefault("read_timeout", remote.timeout)
    # s3fs's own max_concurrency splits one large object into concurrent parts, and to know
    # the size it sends a HEAD before every whole-object GET: twice the requests for every
    # chunk. zarrx's concurrency is across objects, so one request per object.
    return {"max_concurrency": 1, **options, "config_kwargs": config}


def _http_defaults(options: dict[str, Any], remote: RemoteOptions) -> dict[str, Any]:
    import aiohttp

    client = dict(options.get("client_kwargs") or {})
    client.setdefault(
        "timeout",
        aiohttp.ClientTimeout(
            total=remote.request_deadline, sock_connect=remote.connect_timeout, sock_read=remote.timeout
        ),
    )
    if remote.retries and "middlewares" in _session_parameters(aiohttp):
        client["middlewares"] = (*tuple(client.get("middlewares") or ()), RetryMiddleware(remote.retries))
    configured = {**options, "client_kwargs": client}
    # aiohttp allows 100 connections per session: lift that to the cap when it is higher
    configured.setdefault("get_client", HttpClientFactory(max(100, remote.max_concurrency)))
    return configured


def _session_parameters(aiohttp: Any) -> frozenset[str]:
    import inspect

    return frozenset(inspect.signature(aiohttp.ClientSession.__init__).parameters)


def _reference_defaults(options: dict[str, Any], remote: RemoteOptions) -> dict[str, Any]:
    # reference://: the targets' file system (remote_protocol) gets its protocol's defaults
    protocol = str(options.get("remote_protocol") or "").lower()
    defaults = PROTOCOL_DEFAULTS.get(protocol) if protocol != "reference" else None
    if defaults is None:
        return options
    return {**options, "remote_options": defaults(dict(options.get("remote_options") or {}), remote)}


#: protocol -> how its file system is configured (see the module docstring)
PROTOCOL_DEFAULTS: dict[str, Callable[[dict[str, Any], RemoteOptions], dict[str, Any]]] = {
    "s3": _s3_defaults,
    "s3a": _s3_defaults,
    "http": _http_defaults,
    "https": _http_defaults,
    "reference": _reference_defaults,
}
_PROTOCOL = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*)://")


def configure(url: str, storage_options: Mapping[str, Any] | None) -> tuple[RemoteOptions, dict[str, Any]]:
    """zarrx's options and the fsspec options for ``url``, with zarrx's defaults filled in.

    Examples
    --------
    >>> remote, options = configure("s3://bucket/x.zarr", {"anon": True, "zarrx_max_concurrency": 32})
    >>> options["config_kwargs"]["max_pool_connections"], options["anon"]
    (32, True)
    >>> _, options = configure("simplecache::https://example.org/x.zarr", {})
    >>> options["https"]["get_client"]
    HttpClientFactory(limit=100)
    """
    remote, options = split_storage_options(storage_options)
    options = _without_asynchronous(options)
    if "::" not in url:
        match = _PROTOCOL.match(url)
        defaults = PROTOCOL_DEFAULTS.get(match[1].lower()) if match else None
        return remote, (defaults(options, remote) if defaults is not None else options)
    # a chain: the file system that reads (the last one) gets its defaults under its protocol's key
    last = url.rsplit("::", 1)[1]
    match = _PROTOCOL.match(last)
    protocol = match[1].lower() if match else ""
    defaults = PROTOCOL_DEFAULTS.get(protocol)
    if defaults is not None:
        options[protocol] = defaults(dict(options.get(protocol) or {}), remote)
    return remote, options


#: options holding the options of another file system (a reference file system's target and
#: remote ones); a chain's file systems take theirs under their protocol's key
NESTED_OPTIONS = ("remote_options", "target_options")


def _without_asynchronous(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` without ``asynchronous``, at the top and in the nested options of
    :data:`NESTED_OPTIONS` and of chained protocols: zarrx runs async file systems on fsspec's
    loop itself, so the option zarr-python requires (``asynchronous=True``, also inside a
    ``reference://`` URL's ``remote_options``) is taken and left out, as fsspec then gives it.

    Examples
    --------
    >>> _without_asynchronous({"remote_protocol": "s3", "remote_options": {"asynchronous": True, "anon": True}})
    {'remote_protocol': 's3', 'remote_options': {'anon': True}}
    """
    from fsspec import available_protocols

    options = {name: value for name, value in options.items() if name != "asynchronous"}
    for name, value in options.items():
        if isinstance(value, Mapping) and (name in NESTED_OPTIONS or name in available_protocols()):
            options[name] = _without_asynchronous(dict(value))
    return options


# -- HTTP: the retry aiohttp does not have, for fsspec's own requests -------------------------------
@dataclass(frozen=True)
class RetryMiddleware:
    """An aiohttp client middleware retrying transient failures of idempotent requests.

    A response with a status in :data:`~zarrx.storage.transfers.RETRY_STATUSES`, a
    connection error or a timeout is retried up to ``retries`` times, after ``Retry-After``
    when the server sends one, else after :func:`~zarrx.storage.transfers.backoff`; the last
    response (or error) is what the caller sees. It serves fsspec's own requests (listings,
    sizes); the values zarrx reads are retried by :mod:`zarrx.storage.transfers`, which sends
    them without it. A value, not a closure, so file systems configured with it pickle (dask
    sends stores to workers) and compare equal.
    """

    retries: int

    async def __call__(self, request: Any, handler: Any) -> Any:
        import aiohttp

        transient = (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, asyncio.TimeoutError)
        if request.method not in IDEMPOTENT_METHODS:
            return await handler(request)
        attempt = 0
        while True:
            wait = None
            try:
                response = await handler(request)
                if response.status not in RETRY_STATUSES or attempt >= self.retries:
                    return response
                wait = ServerAnswer(response.status, None, response.headers.get("Retry-After")).retry_after_seconds()
                response.release()
            except transient:
                if attempt >= self.retries:
                    raise
            attempt += 1
            await asyncio.sleep(wait if wait is not None else backoff(attempt))
