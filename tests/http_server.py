"""Loopback HTTP servers serving a folder, for tests and benchmarks of remote reads.

Python's ``http.server`` answers every GET with the whole file; this handler also
answers ``Range: bytes=a-b``, ``bytes=a-`` and ``bytes=-n`` with 206 and a
``Content-Range`` (416 when the range starts past the end), as object stores and
web servers do. A folder URL gets an HTML index of links (what fsspec's HTTP file
system lists). It refuses PUT, POST and DELETE (405).

Every request is recorded (:class:`Request`: method, path, range, start and end
times, status), so tests can count requests and see whether they overlapped in
time. ``delay`` seconds are added to each request (a remote store's latency);
``fail`` decides, per request, to answer with an error status instead, or (status
0) to close the connection without an answer (:class:`FailFirst` for flaky servers,
:class:`FailAlways` for broken ones). ``backlog`` is the listen backlog (5 is what
``socketserver`` and most small servers keep: connection attempts beyond it are
dropped, and the client's TCP stack sends them again after 1 s, 3 s, ...).

``behaviour`` makes the server misbehave the way real ones do; each is a class here:

=====================  ==========================================================================
:class:`Throttle`      503 with ``Retry-After`` while more than ``limit`` requests are in flight
                       (S3's SlowDown, GCS's 429)
:class:`RefuseFirst`   503 with ``Retry-After`` to the first requests of every path
:class:`Stall`         reads the request, never answers
:class:`Drip`          answers 200 and sends the body one byte every ``interval`` seconds
:class:`HugeBody`      answers every GET with ``size`` bytes (1 GiB), with or without
                       ``Content-Length``
:class:`GzipBomb`      answers a small gzip body that decompresses to ``size`` bytes
:class:`Redirect`      answers 302 to another path (``prefix`` + path), or to itself (a loop)
:class:`HtmlPage`      answers every GET 200 with an HTML page (a login page, a "soft 404")
:class:`IndexPages`    writes folder pages as Apache's or Caddy's are written (other link forms)
=====================  ==========================================================================

Usage::

    with serve(folder, delay=0.02, backlog=5) as server:
        url = server.url + "/data.zarr"
        ...
        server.requests, server.max_in_flight(), server.connections(), server.reset()

or in a process of its own (so its work does not compete with the client's for the GIL),
printing its URL on the first line and answering ``GET /__stats__`` and ``/__reset__``::

    python -m tests.http_server FOLDER --delay 0.02 --backlog 5 --throttle 16

:func:`serve_plain` runs exactly ``python -m http.server`` (HTTP/1.0, no keep-alive, no
ranges, backlog 5) in a subprocess; :func:`serve_silent` a socket that accepts connections
and never reads from them.
"""

from __future__ import annotations

import argparse
import contextlib
import html
import itertools
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from collections import Counter
from dataclasses import dataclass
from http import HTTPStatus
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Iterator

__all__ = [
    "Request", "RequestLog", "RecordingServer", "RangeHTTPRequestHandler", "FailFirst", "FailAlways",
    "Throttle", "RefuseFirst", "Stall", "Drip", "HugeBody", "GzipBomb", "Redirect", "HtmlPage", "serve", "serve_plain", "serve_silent",
    "PlainServer", "ServerProcess",
]  # fmt: skip

_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")
#: requests that read or reset the request log (for a server in another process)
CONTROL_PATHS = ("/__stats__", "/__reset__")


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    range: str | None
    start: float
    end: float
    status: int
    #: the connection it came on: a number the server gives each connection it accepts (not the
    #: client's port, which the kernel may give a later connection again once one has closed)
    connection: int = 0


class FailFirst:
    """Answer ``status`` to the first ``count`` requests of every path, then serve normally."""

    def __init__(self, count: int, status: int = 503, paths: str = "") -> None:
        self.count, self.status, self.paths = count, status, paths
        self.seen: Counter[str] = Counter()
        self.lock = threading.Lock()

    def __call__(self, method: str, path: str) -> int | None:
        if self.paths not in path:
            return None
        with self.lock:
            self.seen[path] += 1
            return self.status if self.seen[path] <= self.count else None


class FailAlways:
    """Answer ``status`` to every request whose path contains ``paths``."""

    def __init__(self, status: int = 503, paths: str = "") -> None:
        self.status, self.paths = status, paths

    def __call__(self, method: str, path: str) -> int | None:
        return self.status if self.paths in path else None


# -- misbehaviours: each answers a request itself (returns True) or lets the server serve it --
class Throttle:
    """503 with ``Retry-After: retry_after`` while more than ``limit`` requests are in flight."""

    def __init__(self, limit: int, retry_after: str = "0", paths: str = "") -> None:
        self.limit, self.retry_after, self.paths = limit, retry_after, paths
        self.refused = 0

    def __call__(self, handler: "RangeHTTPRequestHandler", method: str) -> bool:
        if self.paths not in handler.path or handler.server.in_flight <= self.limit:
            return False
        self.refused += 1
        handler.send_response(HTTPStatus.SERVICE_UNAVAILABLE)
        handler.send_header("Retry-After", self.retry_after)
        handler.send_header("Content-Type", "application/xml")
        body = b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>"
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)
        return True


class RefuseFirst:
    """Answer ``status`` with ``Retry-After: retry_after`` to the first ``count`` requests of every path."""

    def __init__(self, count: int = 1, status: int = 503, retry_after: str = "1", paths: str = "") -> None:
        self.count, self.status, self.retry_after, self.paths = count, status, retry_after, paths
        self.seen: Counter[str] = Counter()
        self.lock = threading.Lock()

    def __call__(self, handler: "RangeHTTPRequestHandler", method: str) -> bool:
        if self.paths not in handler.path:
            return False
        with self.lock:
            self.seen[handler.path] += 1
            if self.seen[handler.path] > self.count:
                return False
        handler.send_response(self.status)
        handler.send_header("Retry-After", self.retry_after)
        handler.send_header("Content-Length", "0")
        handler.end_headers()
        return True


class Stall:
    """Read the request and never answer (until the server stops)."""

    def __init__(self, paths: str = "") -> None:
        self.paths = paths

    def __call__(self, handler: "RangeHTTPRequestHandler", method: str) -> bool:
        if self.paths not in handler.path:
            return False
        handler.server.stopping.wait()
        handler.close_connection = True
        return True


class Drip:
    """Answer 200 with a ``size``-byte body sent one byte every ``interval`` seconds."""

    def __init__(self, interval: float = 0.5, size: int = 1000, paths: str = "") -> None:
        self.interval, self.size, self.paths = interval, size, paths

    def __call__(self, handler: "RangeHTTPRequestHandler", method: str) -> bool:
        if self.paths not in handler.path:
            return False
        handler.send_response(HTTPStatus.OK)
        handler.send_header("Content-Type", "application/octet-stream")
        handler.send_header("Content-Length", str(self.size))
        handler.end_headers()
        handler.wfile.flush()
        for _ in range(self.size):
            if handler.server.stopping.wait(self.interval):
                break
            handler.wfile.write(b"\x00")
            handler.wfile.flush()
        handler.close_connection = True
        return True


class HugeBody:
    """Answer every GET with ``size`` zero bytes (1 GiB), with a ``Content-Length`` or without one
    (then the body ends when the connection closes)."""

    BLOCK = bytes(2**20)

    def __init__(self, size: int = 2**30, content_length: bool = True, paths: str = "") -> None:
        self.size, self.content_length, self.paths = size, content_length, paths
        self.sent = 0

    def __call__(self, handler: "RangeHTTPRequestHandler", method: str) -> bool:
        if self.paths not in handler.path:
            return False
        handler.send_response(HTTPStatus.OK)
        handler.send_header("Content-Type", "application/octet-stream")
        if self.content_length:
            handler.send_header("Content-Length", str(self.size))
        else:
            handler.send_header("Connection", "close")
        handler.end_headers()
        left = self.size
        while left > 0 and not handler.server.stopping.is_set():
            block = self.BLOCK[: min(left, len(self.BLOCK))]
            handler.wfile.write(block)
            left -= len(block)
            self.sent += len(block)
        handler.close_connection = True
        return True


class GzipBomb:
    """Answer every GET with ``Content-Encoding: gzip``: a small body that decompresses to ``size``
    zero bytes (the ``Content-Length`` is the compressed size)."""

    def __init__(self, size: int = 2**30, paths: str = "") -> None:
        self.size, self.paths = size, paths
        self._body: bytes | None = None

    def body(self) -> bytes:
        if self._body is None:
            import zlib

            packer = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: the gzip format
            block = bytes(2**20)
            parts = [packer.compress(block) for _ in range(self.size // len(block))]
            self._body = b"".join(parts) + packer.flush()
        return self._body

    def __call__(self, handler: "RangeHTTPRequestHandler", method: str) -> bool:
        if self.paths not in handler.path:
            return False
        body = self.body()
        handler.send_response(HTTPStatus.OK)
        handler.send_header("Content-Type", "application/octet-stream")
        handler.send_header("Content-Encoding", "gzip")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)
        return True


class Redirect:
    """Answer ``302`` to ``prefix`` + the path (where the server then serves it), or, with
    ``loop=True``, to the path itself (a redirect loop)."""

    def __init__(self, prefix: str = "", loop: bool = False, paths: str = "") -> None:
        self.prefix, self.loop, self.paths = prefix, loop, paths

    def __call__(self, handler: "RangeHTTPRequestHandler", method: str) -> bool:
        if self.paths not in handler.path or (self.prefix and handler.path.startswith(self.prefix)):
            return False
        handler.send_response(HTTPStatus.FOUND)
        handler.send_header("Location", handler.path if self.loop else self.prefix + handler.path)
        handler.send_header("Content-Length", "0")
        handler.end_headers()
        return True


class HtmlPage:
    """Answer every GET 200 with an HTML page, whatever the path (a login page, a "soft 404")."""

    PAGE = b"<!DOCTYPE html>\n<html><head><title>Sign in</title></head><body><form>...</form></body></html>\n"

    def __init__(self, paths: str = "") -> None:
        self.paths = paths

    def __call__(self, handler: "RangeHTTPRequestHandler", method: str) -> bool:
        if self.paths not in handler.path:
            return False
        handler.send_response(HTTPStatus.OK)
        handler.send_header("Content-Type", "text/html; charset=utf-8")
        handler.send_header("Content-Length", str(len(self.PAGE)))
        handler.end_headers()
        if method == "GET":
            handler.wfile.write(self.PAGE)
        return True


class IndexPages:
    """Folder pages as other web servers write them, in ``charset``: Apache's mod_autoindex
    (``style="apache"``: sort links ``?C=N;O=D``, a parent link by absolute path) or Caddy's file
    browser (``"caddy"``: links ``./name``)."""

    def __init__(self, style: str = "apache", charset: str = "utf-8") -> None:
        self.style, self.charset = style, charset

    def __call__(self, handler: "RangeHTTPRequestHandler", method: str) -> bool:
        folder = handler.translate_path(handler.path)
        if not os.path.isdir(folder) or not handler.path.endswith("/"):
            return False
        names = sorted(name + ("/" if os.path.isdir(os.path.join(folder, name)) else "") for name in os.listdir(folder))
        links = [(urllib.parse.quote(name), html.escape(name)) for name in names]
        if self.style == "apache":
            rows = ['<a href="?C=N;O=D">Name</a> <a href="?C=M;O=A">Modified</a>', '<a href="/">Parent Directory</a>']
            rows += [f'<a href="{href}">{text}</a>' for href, text in links]
        else:
            rows = ['<a href="../">Up</a>'] + [f'<a href="./{href}">{text}</a>' for href, text in links]
        page = ("<html><body>" + "<br>\n".join(rows) + "</body></html>").encode()
        handler.send_response(HTTPStatus.OK)
        handler.send_header("Content-Type", f"text/html; charset={self.charset}")
        handler.send_header("Content-Length", str(len(page)))
        handler.end_headers()
        if method == "GET":
            handler.wfile.write(page)
        return True


Behaviour = Callable[["RangeHTTPRequestHandler", str], bool]


class RequestLog:
    """The requests a test server handled (:class:`Request`), recorded from its threads."""

    def __init__(self) -> None:
        self.requests: list[Request] = []
        self.lock = threading.Lock()

    def record(self, request: Request) -> None:
        with self.lock:
            self.requests.append(request)

    def reset(self) -> None:
        with self.lock:
            self.requests = []

    def count(self, method: str | None = None) -> int:
        return sum(1 for r in self.requests if method is None or r.method == method)

    def connections(self) -> int:
        """How many connections the requests came on."""
        return len({r.connection for r in self.requests})

    def max_in_flight(self) -> int:
        """The most requests the server was handling at one moment."""
        events = sorted([(r.start, 1) for r in self.requests] + [(r.end, -1) for r in self.requests])
        current = peak = 0
        for _, change in events:
            current += change
            peak = max(peak, current)
        return peak


class RecordingServer(ThreadingHTTPServer, RequestLog):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        directory: str,
        delay: float = 0.0,
        fail: Callable[[str, str], int | None] | None = None,
        *,
        backlog: int = 512,
        behaviour: Behaviour | None = None,
        keep_alive: bool = True,
    ):
        # the listen backlog: many concurrent connects overflow a small one (dropped SYNs, 1 s retransmits)
        self.request_queue_size = backlog
        super().__init__(("127.0.0.1", 0), RangeHTTPRequestHandler)
        RequestLog.__init__(self)
        self.directory = directory
        self.delay = delay
        self.fail = fail
        self.behaviour = behaviour
        self.keep_alive = keep_alive
        self.in_flight = 0
        self._in_flight_lock = threading.Lock()
        #: numbers for the connections accepted (next() on it is atomic)
        self.connection_numbers = itertools.count()
        #: set when the server stops: stalling and dripping handlers give up
        self.stopping = threading.Event()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"

    def arrive(self, change: int) -> None:
        with self._in_flight_lock:
            self.in_flight += change


class RangeHTTPRequestHandler(SimpleHTTPRequestHandler):
    """``SimpleHTTPRequestHandler`` with byte ranges, a delay, failures and a request log."""

    server: RecordingServer
    protocol_version = "HTTP/1.1"  # keep-alive, as clients pool connections
    # headers and body go out in separate writes: with Nagle's algorithm the body would wait
    # for the client's delayed ACK of the headers, 40 ms on Linux
    disable_nagle_algorithm = True

    def __init__(self, *args, **kwargs):
        self.connection_number = next(args[2].connection_numbers)  # (the base class serves the connection in __init__)
        super().__init__(*args, directory=args[2].directory, **kwargs)

    def log_message(self, format: str, *args) -> None:  # quiet
        pass

    def _handle(self, method: str, respond: Callable[[], object]) -> None:
        self._request = (method, time.perf_counter())
        self.server.arrive(1)
        try:
            if not self.server.keep_alive:
                self.close_connection = True
            if self.server.delay:
                time.sleep(self.server.delay)
            behaviour = self.server.behaviour
            failure = self.server.fail(method, self.path) if self.server.fail else None
            if failure == 0:  # a connection reset: close without answering
                self._record(0)
                self.close_connection = True
            elif failure is not None:
                self.send_error(failure)
            elif behaviour is None or not behaviour(self, method):
                respond()
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout): nothing to answer
            self.close_connection = True
        finally:
            self.server.arrive(-1)
            if self._request is not None:  # never answered
                self._record(0)

    def _record(self, status: int) -> None:
        method, start = self._request
        self._request = None
        now = time.perf_counter()
        self.server.record(Request(method, self.path, self.headers.get("Range"), start, now, int(status), self.connection_number))

    def send_response(self, code, message=None) -> None:
        # recorded before the first byte of the answer leaves, so a client that has its answer
        # always finds its request in the log, and "in flight" ends before it can send the next
        if getattr(self, "_request", None) is not None:
            self._record(code)
        super().send_response(code, message)
        if not self.server.keep_alive:
            self.send_header("Connection", "close")

    def do_GET(self) -> None:
        if self.path in CONTROL_PATHS:
            return self._control()
        self._handle("GET", lambda: self._send(head=False))

    def _control(self) -> None:
        """``/__stats__``: the requests so far as JSON (count, by method, most in flight);
        ``/__reset__``: forget them. Neither is recorded nor delayed."""
        server = self.server
        stats = {
            "requests": server.count(),
            "methods": dict(Counter(r.method for r in server.requests)),
            "statuses": {str(status): count for status, count in Counter(r.status for r in server.requests).items()},
            "max_in_flight": server.max_in_flight(),
        }
        if self.path == "/__reset__":
            server.reset()
        body = json.dumps(stats).encode()
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_HEAD(self) -> None:
        self._handle("HEAD", lambda: self._send(head=True))

    def _refuse(self) -> None:
        self.send_error(HTTPStatus.METHOD_NOT_ALLOWED, "read-only server")

    def do_PUT(self) -> None:
        self._handle("PUT", self._refuse)

    def do_POST(self) -> None:
        self._handle("POST", self._refuse)

    def do_DELETE(self) -> None:
        self._handle("DELETE", self._refuse)

    def _send(self, head: bool) -> int:
        path = self.translate_path(self.path)
        if os.path.isdir(path):
            if not self.path.split("?")[0].endswith("/"):
                self.send_response(HTTPStatus.MOVED_PERMANENTLY)
                self.send_header("Location", self.path.split("?")[0] + "/")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return HTTPStatus.MOVED_PERMANENTLY
            listing = self.list_directory(path)  # sends the headers itself
            if listing is not None:
                if not head:
                    shutil.copyfileobj(listing, self.wfile)
                listing.close()
            return HTTPStatus.OK
        try:
            with open(path, "rb") as file:
                data = file.read()
        except OSError:
            self.send_error(HTTPStatus.NOT_FOUND)
            return HTTPStatus.NOT_FOUND
        size = len(data)
        header = self.headers.get("Range")
        status = HTTPStatus.OK
        if header:
            match = _RANGE.match(header.strip())
            if match is None or match[1] == match[2] == "":
                self.send_error(HTTPStatus.BAD_REQUEST, "bad Range")
                return HTTPStatus.BAD_REQUEST
            if match[1] == "":  # the last n bytes
                first, last = max(0, size - int(match[2])), size - 1
            else:
                first = int(match[1])
                last = min(size - 1, int(match[2])) if match[2] else size - 1
            if first >= size or first > last:
                self.send_response(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE
            data = data[first : last + 1]
            status = HTTPStatus.PARTIAL_CONTENT
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Accept-Ranges", "bytes")
        if status == HTTPStatus.PARTIAL_CONTENT:
            self.send_header("Content-Range", f"bytes {first}-{last}/{size}")
        self.end_headers()
        if not head:
            self.wfile.write(data)
        return status


@contextlib.contextmanager
def serve(
    directory: str | os.PathLike,
    delay: float = 0.0,
    fail: Callable[[str, str], int | None] | None = None,
    *,
    backlog: int = 512,
    behaviour: Behaviour | None = None,
    keep_alive: bool = True,
) -> Iterator[RecordingServer]:
    """Serve ``directory`` on 127.0.0.1 (a free port) in a background thread; stopped on exit."""
    server = RecordingServer(
        os.fspath(directory), delay=delay, fail=fail, backlog=backlog, behaviour=behaviour, keep_alive=keep_alive
    )
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), name="zarrx-test-http", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.stopping.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


# -- servers in processes of their own -------------------------------------------------------------
class ServerProcess:
    """A server in a subprocess (``python ARGUMENTS``) that prints its URL on its first line -- or,
    as ``http.server`` does, ``Serving HTTP on ... port N``."""

    def __init__(self, arguments: list[str], cwd: str | os.PathLike | None = None) -> None:
        environment = {**os.environ, "PYTHONUNBUFFERED": "1"}  # the first line at once
        self.process = subprocess.Popen(
            [sys.executable, *arguments], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            env=environment,
        )  # fmt: skip
        line = self.process.stdout.readline()
        port = re.search(r"port (\d+)", line)
        self.url = f"http://127.0.0.1:{port[1]}" if port else line.strip()
        if not self.url.startswith("http://"):
            self.close()
            raise RuntimeError(f"python {' '.join(arguments)} did not start (it printed {line!r})")

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class PlainServer(ServerProcess):
    """Exactly ``python -m http.server 0 --bind 127.0.0.1 --directory FOLDER``."""

    def __init__(self, directory: str | os.PathLike) -> None:
        super().__init__(["-m", "http.server", "0", "--bind", "127.0.0.1", "--directory", os.fspath(directory)])


@contextlib.contextmanager
def serve_plain(directory: str | os.PathLike) -> Iterator[PlainServer]:
    server = PlainServer(directory)
    try:
        yield server
    finally:
        server.close()


@contextlib.contextmanager
def serve_silent() -> Iterator[str]:
    """A listening socket that never accepts a connection: the URL of a server that never answers."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()


def main() -> None:
    parser = argparse.ArgumentParser(description="Serve a folder over HTTP with byte ranges, a delay and a request log")
    parser.add_argument("directory")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds added to every request")
    parser.add_argument("--backlog", type=int, default=512, help="the listen backlog")
    parser.add_argument("--throttle", type=int, default=None, help="503 + Retry-After above this many in flight")
    parser.add_argument("--retry-after", default="0", help="the Retry-After of a throttled answer")
    parser.add_argument("--stall", action="store_true", help="never answer")
    parser.add_argument("--no-keep-alive", action="store_true", help="close the connection after every answer")
    arguments = parser.parse_args()
    behaviour = Throttle(arguments.throttle, arguments.retry_after) if arguments.throttle is not None else None
    behaviour = Stall() if arguments.stall else behaviour
    server = RecordingServer(
        arguments.directory, delay=arguments.delay, backlog=arguments.backlog, behaviour=behaviour,
        keep_alive=not arguments.no_keep_alive,
    )  # fmt: skip
    print(server.url, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.stopping.set()
        server.server_close()


if __name__ == "__main__":
    main()
