"""An HTTP proxy that gives every request S3's latency, and counts requests in flight.

Local object stores (moto) answer in well under a millisecond, so a driver that reads one
object after another looks as fast as one that reads them together; real S3 takes tens of
milliseconds to a first byte, and 500 sequential GETs per micro-batch become seconds.
This proxy forwards any method byte for byte after a fixed delay and records the largest
number of requests it held at once: 1 means the client never overlapped its requests.
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from kinesis_lake_tests.kinesis.fault_proxy import send_upstream

_HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length"})


class SlowS3Proxy:
    def __init__(self, upstream_url: str, delay_s: float = 0.05) -> None:
        upstream = urlsplit(upstream_url)
        self._upstream = (upstream.hostname or "127.0.0.1", upstream.port or 80)
        self.delay_s = delay_s
        self.in_flight = 0
        self.max_in_flight = 0
        self.requests = 0
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _relay(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with proxy._lock:
                    proxy.requests += 1
                    proxy.in_flight += 1
                    proxy.max_in_flight = max(proxy.max_in_flight, proxy.in_flight)
                try:
                    time.sleep(proxy.delay_s)
                    status, headers, answer = proxy._forward(
                        self.command, self.path, self.headers.items(), body
                    )
                finally:
                    with proxy._lock:
                        proxy.in_flight -= 1
                self.send_response(status)
                # A HEAD answer has no body but tells the object's size: keep that one.
                dropped = _HOP_BY_HOP - ({"content-length"} if self.command == "HEAD" else set())
                for name, value in headers:
                    if name.lower() not in dropped | {"date", "server"}:
                        self.send_header(name, value)
                if self.command != "HEAD":
                    self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(answer)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _relay

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> SlowS3Proxy:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def reset(self) -> None:
        with self._lock:
            self.requests = self.max_in_flight = 0

    def _forward(
        self, method: str, path: str, headers: list[tuple[str, str]], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        connection = send_upstream(self._upstream, method, path, headers, body)
        try:
            response = connection.getresponse()
            return response.status, response.getheaders(), response.read()
        finally:
            connection.close()
