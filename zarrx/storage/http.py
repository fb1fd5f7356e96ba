"""Reading objects over HTTP(S) with aiohttp: bounded bodies, per-host connection gating.

zarrx reads the values of HTTP stores itself rather than through fsspec's ``_cat_file``,
which reads any body whole and takes a ``200`` answer to a ranged request as the range, and
reads the folder pages it lists itself too (:meth:`HttpReader.listing`; fsspec's ``ls`` would go
around the connection gating below).
:class:`HttpReader` sends one GET through the session of fsspec's HTTP file system (so the
user's ``client_kwargs`` -- headers, auth, SSL -- and zarrx's timeouts apply) and:

* answers ``None`` for 404 and 410 (a missing key), ``b""`` for 416 (a range past the end);
* raises :class:`~zarrx.storage.transfers.ServerAnswer` for other statuses (the runner
  retries 429, 500, 502, 503 and 504, honouring ``Retry-After``);
* checks ``Content-Length`` against the most bytes the key may hold before reading a byte
  (:class:`~zarrx.storage.transfers.BodyTooLarge`), and streams a body of unknown length -- or a
  compressed one (``Content-Encoding``), counting the decompressed bytes -- stopping one byte
  past that limit: memory stays bounded whatever the server sends;
* cuts the range out of a ``200`` answer from a server that ignores ``Range`` (as
  ``python -m http.server`` does), and refuses a ``206`` for other bytes than asked;
* refuses an HTML page answered with ``200`` (a login page, a "soft 404", a wrong URL) for
  an object that is not one.

Redirects are followed (aiohttp's default, at most 10; a loop ends in ``TooManyRedirects``).

**Connection gating.** :class:`HttpClientFactory` makes the file system's aiohttp session
with a ``TraceConfig`` through which every new connection of a zarrx read first waits for
the host's :class:`~zarrx.storage.limiter.HostLimiter` (``open_connection``) and reports
how long it took to open; the attempt's ``sock_connect`` timeout is the limiter's
:meth:`~zarrx.storage.limiter.HostLimiter.connect_timeout`, so a connection attempt dropped
by a full listen backlog is abandoned after ~0.1 s and started afresh (:class:`SlowConnect`)
instead of waiting for TCP's 1 s retransmission.
"""

from __future__ import annotations

import functools
import inspect
import re
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urljoin, urlsplit

from zarrx.storage.limiter import HostLimiter
from zarrx.storage.transfers import Attempt, BodyTooLarge, ObjectRead, ServerAnswer, SlowConnect

__all__ = ["HttpReader", "HttpClientFactory", "MISSING_STATUSES", "host_of"]

#: statuses that mean "no such object"
MISSING_STATUSES = frozenset({404, 410})
#: what an HTML page starts with (after white space)
_HTML_STARTS = (b"<!doctype html", b"<html")
#: what an HTML page answered for an object is
HTML_ANSWER = "with an HTML page (text/html) instead of the object: a login page, a missing object answered as a web page, or a wrong URL?"
#: bytes read at a time from a body of unknown length
STREAM_BLOCK = 2**20


def host_of(url: str) -> str:
    """``scheme://host:port`` of a URL, credentials left out (what a limiter is kept for).

    Examples
    --------
    >>> host_of("https://reader:pw@data.example.org/x.zarr/c/0")
    'https://data.example.org:443'
    """
    # asked for every request: the URL's scheme and authority are parsed once
    scheme, separator, rest = url.partition("://")
    if not separator:
        return _host_of(url)
    end = len(rest)
    for mark in "/?#":
        found = rest.find(mark, 0, end)
        if found >= 0:
            end = found
    return _host_of(f"{scheme}://{rest[:end]}")


@functools.lru_cache(maxsize=256)
def _host_of(origin: str) -> str:
    parts = urlsplit(origin)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme, 0)
    return f"{parts.scheme}://{parts.hostname}:{port}"


def _aiohttp():
    import aiohttp

    return aiohttp


class _Connection:
    """What one attempt's connection did (aiohttp's ``trace_request_ctx``): the new connection it
    opened, if any, and whether its request is on the wire (sent, not yet answered)."""

    __slots__ = ("limiter", "timeout", "held", "gate_wait", "connect_seconds", "_started", "on_wire", "level")

    def __init__(self, limiter: HostLimiter, timeout: float) -> None:
        self.limiter, self.timeout = limiter, timeout
        self.held = False
        self.on_wire = False
        self.gate_wait = 0.0
        self.connect_seconds: float | None = None
        self._started = 0.0
        #: connections being opened to the host when this one was (itself included)
        self.level = 0

    def sent(self) -> None:
        if not self.on_wire:  # a redirect sends once more: the same request, still on the wire
            self.on_wire = True
            self.limiter.on_wire += 1

    def off_wire(self) -> int:
        """The request's answer came (or it failed): the requests the server had then, itself included."""
        level = self.limiter.on_wire
        if self.on_wire:
            self.on_wire = False
            self.limiter.on_wire -= 1
        return level

    async def opening(self) -> None:
        # aiohttp sends a request once more on a new connection when the first one is closed
        # under it (RFC 9112 section 9.3.1.1): that connection has failed
        self.failed(slow=False)
        waited = time.monotonic()
        await self.limiter.open_connection(self.timeout)
        self.held = True
        self.level = self.limiter.opening
        self._started = time.monotonic()
        self.gate_wait = self._started - waited

    def opened(self) -> None:
        self.connect_seconds = time.monotonic() - self._started

    def answered(self, holds_latency: bool, keeps_alive: bool) -> None:
        if self.held:
            self.held = False
            self.limiter.connection_answered(self.connect_seconds, holds_latency, keeps_alive)

    def failed(self, slow: bool) -> None:
        if self.held:
            self.held = False
            self.limiter.connection_failed(slow, self.level)


async def _on_connection_create_start(session: Any, context: Any, params: Any) -> None:
    connection = context.trace_request_ctx
    if isinstance(connection, _Connection):
        await connection.opening()


async def _on_connection_create_end(session: Any, context: Any, params: Any) -> None:
    connection = context.trace_request_ctx
    if isinstance(connection, _Connection):
        connection.opened()


async def _on_request_headers_sent(session: Any, context: Any, params: Any) -> None:
    connection = context.trace_request_ctx
    if isinstance(connection, _Connection):
        connection.sent()


def _trace_config() -> Any:
    aiohttp = _aiohttp()
    trace = aiohttp.TraceConfig()
    trace.on_connection_create_start.append(_on_connection_create_start)
    trace.on_connection_create_end.append(_on_connection_create_end)
    trace.on_request_headers_sent.append(_on_request_headers_sent)
    trace.freeze()
    return trace


@dataclass(frozen=True)
class HttpClientFactory:
    """``get_client`` for fsspec's HTTP file system: an aiohttp session allowing ``limit``
    connections, keeping them alive, with zarrx's connection gating (see the module docstring).

    A value, not a closure, so file systems configured with it pickle (dask sends stores to
    workers), compare equal and have a stable ``repr`` (fsspec caches file systems by it).
    """

    limit: int

    async def __call__(self, **kwargs: Any) -> Any:
        aiohttp = _aiohttp()
        kwargs.pop("loop", None)  # the session belongs to the running loop
        traces = [*(kwargs.pop("trace_configs", None) or ()), _trace_config()]
        connector = aiohttp.TCPConnector(limit=self.limit, limit_per_host=self.limit)
        return aiohttp.ClientSession(connector=connector, trace_configs=traces, **kwargs)


def _takes_middlewares() -> bool:
    """Whether this aiohttp has client middlewares (3.12 and later)."""
    return "middlewares" in inspect.signature(_aiohttp().ClientSession.__init__).parameters


class HttpReader:
    """Reads object values over HTTP(S) for :class:`~zarrx.storage.transfers.Transfers`.

    ``fs`` is fsspec's ``HTTPFileSystem`` (its session, loop and request options are used);
    ``connect_timeout`` and ``read_timeout`` are zarrx's ``zarrx_connect_timeout`` and
    ``zarrx_timeout``.
    """

    #: zarrx retries transient failures itself (aiohttp has no retry)
    retries = True

    def __init__(self, fs: Any, connect_timeout: float, read_timeout: float) -> None:
        self.fs = fs
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self._no_middlewares = {"middlewares": ()} if _takes_middlewares() else {}

    def host(self, path: str) -> str:
        return host_of(path)

    async def read(self, read: ObjectRead, attempt: Attempt) -> bytes | None:
        headers = {"Range": _range_header(read.start, read.end)} if _ranged(read) else {}
        return await self._get(read.path, headers, attempt, lambda response: self._body(read, response))

    async def listing(self, path: str, limit: int, attempt: Attempt) -> list[str] | None:
        """The URLs a web server's page for the folder ``path`` links to below it, as
        :func:`folder_links` finds them (sorted; folders end in ``/``); None when the server has
        no such page (404, 410). The page may hold at most ``limit`` bytes.

        The request goes as a value's read does: through the host's connection gate, with
        zarrx's timeouts, retried by the runner (fsspec's own ``ls`` goes around both, so a
        burst of listings to a server with a small listen backlog waited for TCP's 1 s
        retransmissions)."""

        async def links(response: Any) -> list[str] | None:
            if response.status in MISSING_STATUSES:
                return None
            if response.status != 200:
                raise ServerAnswer(response.status, response.reason, response.headers.get("Retry-After"))
            if response.headers.get("Content-Type", "text/html").partition(";")[0].strip() != "text/html":
                return []  # a file, not a folder page
            page = await _read_bounded(response.content, limit)
            try:
                text = page.decode(response.charset or "utf-8", errors="ignore")
            except LookupError:  # a charset Python does not know: the links are ASCII anyway
                text = page.decode("utf-8", errors="ignore")
            return folder_links(text, path, self.fs)

        return await self._get(path, {}, attempt, links)

    async def _get(self, path: str, headers: dict[str, str], attempt: Attempt, answer: Any) -> Any:
        """GET ``path`` through the host's connection gate; ``answer(response)`` reads the answer."""
        aiohttp = _aiohttp()
        fs = self.fs
        session = await fs.set_session()
        options = dict(fs.kwargs)
        headers = {**(options.pop("headers", None) or {}), **headers}
        connect_timeout = attempt.limiter.connect_timeout(self.connect_timeout, attempt.slow_connects)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout, sock_read=self.read_timeout)
        connection = _Connection(attempt.limiter, attempt.remaining())
        # zarrx retries these reads itself: the session's retry middleware must not add its own
        options.update(self._no_middlewares)
        sent = time.monotonic()
        try:
            async with session.get(
                fs.encode_url(path), headers=headers, timeout=timeout, trace_request_ctx=connection, **options
            ) as response:
                latency = time.monotonic() - sent - connection.gate_wait - (connection.connect_seconds or 0.0)
                attempt.latency, attempt.fresh = max(latency, 0.0), connection.held
                attempt.level = connection.off_wire()
                connection.answered(attempt.limiter.holds_latency(attempt.latency, fresh=True), _keeps_alive(response))
                return await answer(response)
        except aiohttp.ConnectionTimeoutError as error:
            slow = connect_timeout < self.connect_timeout
            connection.failed(slow=slow)
            if slow:
                raise SlowConnect(f"no connection within {connect_timeout:.2f} s") from error
            raise
        except BaseException:
            if connection.on_wire:
                attempt.level = connection.off_wire()
            connection.failed(slow=False)
            raise

    async def _body(self, read: ObjectRead, response: Any) -> bytes | None:
        status = response.status
        if status in MISSING_STATUSES:
            return None
        if status == 416:  # the range starts past the end: no bytes
            return b""
        if status not in (200, 206):
            raise ServerAnswer(status, response.reason, response.headers.get("Retry-After"))
        ranged = _ranged(read)
        whole = status == 200
        # a 200 to a ranged request is the whole value: bounded by what the key may hold
        limit = read.limit if whole or not ranged else min(read.limit, read.length or read.limit)
        # a compressed body (Content-Encoding) is decompressed as it is read: its Content-Length
        # says nothing of the bytes it holds, so it is streamed to the limit
        encoded = response.headers.get("Content-Encoding", "identity").strip().lower() not in ("", "identity")
        length = None if encoded else response.content_length
        html = response.content_type == "text/html"
        if length is not None and length > limit:
            if html:
                raise ServerAnswer(status, HTML_ANSWER, None, transient=False)
            raise BodyTooLarge(length, limit, declared=True)
        if length is not None:
            body = await response.read()
        else:
            body = await _read_bounded(response.content, limit)
        if html and body[:256].lstrip().lower().startswith(_HTML_STARTS):
            raise ServerAnswer(status, HTML_ANSWER, None, transient=False)
        if not ranged:
            return body
        if whole:
            return body[read.start : read.end]  # the server ignored Range: cut it out here
        _check_content_range(response.headers.get("Content-Range"), read.start)
        return body


#: links of a folder page, as fsspec's HTTP file system finds them: ``<a href="...">`` ...
_HREF = re.compile(r"""<(a|A)\s+(?:[^>]*?\s+)?(href|HREF)=["'](?P<url>[^"']+)""")
#: ... and, unless the file system's ``simple_links`` is off, bare URLs in the text
_BARE_URL = re.compile(r"""(?P<url>http[s]?://[-a-zA-Z0-9@:%_+.~#?&/=]+)""")


def folder_links(page: str, url: str, fs: Any) -> list[str]:
    """The URLs below the folder ``url`` that its ``page`` links to, sorted, as fsspec's
    ``HTTPFileSystem.ls(url, detail=False)`` finds them (its ``simple_links`` honoured; ``http``
    and ``https`` taken as one), so that a listing gives the same keys whichever of the two read
    it -- except that links are resolved as browsers resolve them (RFC 3986: ``./g0/`` is
    ``g0/``, as Caddy writes its links), and links with a query or a fragment (the sort links
    ``?C=N;O=D`` of Apache's pages) are not entries: fsspec lists those, and reading a node
    below them reads the folder's page again.

    Examples
    --------
    >>> page = '<a href="g0/">g0</a> <a href="./zarr.json">zarr.json</a> <a href="../">up</a> <a href="?C=N">N</a>'
    >>> folder_links(page, "http://h/t.zarr/", None)
    ['http://h/t.zarr/g0/', 'http://h/t.zarr/zarr.json']
    """
    links = [match[2] for match in _HREF.findall(page)]
    if getattr(fs, "simple_links", True):
        links = _BARE_URL.findall(page) + links
    base = url.rstrip("/") + "/"
    # compared percent-decoded: "/my data.zarr/" and "/my%20data.zarr/" are one folder
    below = unquote(base.replace("https", "http"))
    found = set()
    for link in links:
        if "?" in link or "#" in link:  # a query or a fragment: not an entry of the folder
            continue
        target = urljoin(base, link)
        plain = unquote(target.replace("https", "http"))
        if plain.startswith(below) and len(plain) > len(below):
            found.add(target)
    return sorted(found)


def _ranged(read: ObjectRead) -> bool:
    """Whether a read asks for part of a value: from 0 to the end is the whole, asked without
    ``Range`` (``bytes=0-`` is refused by servers without byte ranges)."""
    return read.end is not None or read.start not in (None, 0)


def _keeps_alive(response: Any) -> bool:
    """Whether the server keeps the connection open for more requests (HTTP/1.1 unless it says
    ``Connection: close``; HTTP/1.0 only when it says ``keep-alive``)."""
    connection = response.headers.get("Connection", "").lower()
    if tuple(response.version) >= (1, 1):
        return "close" not in connection
    return "keep-alive" in connection


async def _read_bounded(content: Any, limit: int) -> bytes:
    """A body of unknown length, read until its end or one byte past ``limit`` (BodyTooLarge)."""
    parts: list[bytes] = []
    size = 0
    while True:
        part = await content.read(min(STREAM_BLOCK, limit + 1 - size))
        if not part:
            return b"".join(parts)
        parts.append(part)
        size += len(part)
        if size > limit:
            raise BodyTooLarge(size, limit, declared=False)


def _range_header(start: int | None, end: int | None) -> str:
    """RFC 9110 ``Range`` for fsspec's (start, end): a negative start is a suffix."""
    if start is not None and start < 0:
        return f"bytes={start}"  # the last -start bytes
    first = start or 0
    return f"bytes={first}-" if end is None else f"bytes={first}-{end - 1}"


def _check_content_range(header: str | None, start: int | None) -> None:
    """A 206 answer must hold the bytes asked for (``Content-Range: bytes first-last/size``)."""
    if header is None or start is None or start < 0:
        return
    try:
        first = int(header.split()[1].split("-")[0])
    except (IndexError, ValueError):
        raise ServerAnswer(206, f"an unreadable Content-Range {header!r}", None, transient=False) from None
    if first != start:
        raise ServerAnswer(206, f"bytes from {first} (Content-Range {header!r}) for a request from {start}", None,
                           transient=False)  # fmt: skip
