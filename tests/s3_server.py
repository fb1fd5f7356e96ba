"""moto's S3 server on 127.0.0.1 (a free port), with every request recorded.

The server is moto's own WSGI application (what ``moto_server`` and
``moto.server.ThreadedMotoServer`` run) wrapped in a middleware that records each
request (method, path, query, start and end time) and can add a ``delay`` to each,
so tests can count S3 requests and see whether they overlapped. ``fail`` (as in
:mod:`tests.http_server`) answers chosen requests with an S3 error document instead
(``SlowDown`` for 503, S3's throttling answer). ``python -m tests.s3_server`` serves until
interrupted, printing its URL first.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Iterator

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import make_server

from tests.http_server import Request, RequestLog

__all__ = ["S3Server", "serve_s3", "main"]


class S3Server(RequestLog):
    def __init__(self) -> None:
        super().__init__()
        self.delay = 0.0
        self.fail = None
        self._app = DomainDispatcherApplication(create_backend_app)
        self._server = make_server(
            "127.0.0.1", 0, self._recording_app, threaded=True, request_handler=MotoRequestHandler
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def _recording_app(self, environ, start_response):
        start = time.perf_counter()
        status = []

        def recording_start_response(code, headers, *args):
            status.append(int(code.split()[0]))
            return start_response(code, headers, *args)

        if self.delay:
            time.sleep(self.delay)
        try:
            failure = self.fail(environ["REQUEST_METHOD"], environ.get("PATH_INFO", "")) if self.fail else None
            if failure is not None:
                code = {503: "SlowDown"}.get(failure, "InternalError")  # S3's throttling answer is 503 SlowDown
                body = f"<?xml version='1.0'?><Error><Code>{code}</Code><Message>injected</Message></Error>".encode()
                recording_start_response(
                    f"{failure} Injected", [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))]
                )
                return [body]
            return self._app(environ, recording_start_response)
        finally:
            query = environ.get("QUERY_STRING")
            path = environ.get("PATH_INFO", "") + (f"?{query}" if query else "")
            request = Request(
                environ["REQUEST_METHOD"], path, environ.get("HTTP_RANGE"), start, time.perf_counter(),
                status[0] if status else 0,
            )  # fmt: skip
            self.record(request)


def main() -> None:
    """``python -m tests.s3_server``: serve until interrupted, printing the URL on the first line."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = S3Server()
    print(server.url, flush=True)
    try:
        server._server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server._server.server_close()


@contextlib.contextmanager
def serve_s3() -> Iterator[S3Server]:
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = S3Server()
    thread = threading.Thread(target=server._server.serve_forever, args=(0.05,), name="zarrx-test-s3", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server._server.shutdown()
        server._server.server_close()
        thread.join(timeout=5)


if __name__ == "__main__":
    main()
