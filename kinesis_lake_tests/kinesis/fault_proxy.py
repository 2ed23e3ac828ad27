"""A fault-injecting HTTP proxy in front of a Kinesis endpoint (tests and chaos runs).

No local endpoint throttles, fails with 5xx, expires iterators on demand or partially fails
PutRecords, yet those are the paths where consumers lose or duplicate data. Putting this
proxy between a real boto3 client and a real endpoint makes the production retry code run
against real HTTP responses, with nothing of ours mocked.

Requests pass through byte for byte. boto3 signs for the proxy's host; kinesalite and moto
do not verify signatures, so forwarding the Host header unchanged is fine. Standard library
only, so it works wherever the package does.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import time
from collections import Counter, deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from kinesis_lake.kinesis.subscription import event_message

FAULT_KINDS = (
    "throttle",
    "limit",
    "server_error",
    "expired_iterator",
    "partial_put",
    "unknown_operation",
    "invalid_argument",
    "in_use",
    "access_denied",
    "end_subscription",
    "drop_subscription",
    "failure_event",
)

# kind -> (HTTP status, AWS error code) for faults answered without contacting upstream.
_ERROR_FAULTS = {
    "throttle": (400, "ProvisionedThroughputExceededException"),
    "limit": (400, "LimitExceededException"),
    "server_error": (500, "InternalFailure"),
    "expired_iterator": (400, "ExpiredIteratorException"),
    "unknown_operation": (400, "UnknownOperationException"),
    "invalid_argument": (400, "InvalidArgumentException"),
    # SubscribeToShard's answer while the consumer's last subscription of the shard is held.
    "in_use": (400, "ResourceInUseException"),
    # An identity without the IAM permission for the call.
    "access_denied": (400, "AccessDeniedException"),
}
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "content-length",
    }
)
_AMZ_JSON = "application/x-amz-json-1.1"
_EVENT_STREAM = "application/vnd.amazon.eventstream"


class FaultProxy:
    """Forwards to ``upstream_url``; ``inject()`` makes the next calls of an operation fail.

    ``counts[(operation, kind)]`` is how many faults were actually injected;
    ``signed_by[(operation, access key id)]`` how many calls each key signed, which is
    what IAM would judge them by (local endpoints check no signature).
    """

    def __init__(self, upstream_url: str) -> None:
        upstream = urlsplit(upstream_url)
        if upstream.scheme != "http" or upstream.hostname is None:
            raise ValueError(f"FaultProxy forwards plain http only, got {upstream_url!r}")
        self._upstream_host = upstream.hostname
        self._upstream_port = upstream.port or 80
        self._lock = threading.Lock()
        self._faults: dict[str, deque[list[Any]]] = {}
        self.counts: Counter[tuple[str, str]] = Counter()
        self.signed_by: Counter[tuple[str, str]] = Counter()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._relays: set[http.client.HTTPConnection] = set()

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("the proxy is not started")
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FaultProxy:
        proxy = self

        class Handler(_ProxyHandler):
            owner = proxy

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="kinesis-fault-proxy", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        # A relayed subscription waits on its upstream between events: cut it, or its
        # thread and both sockets would outlive the proxy by up to the upstream timeout.
        with self._lock:
            relays, self._relays = list(self._relays), set()
        for connection in relays:
            if connection.sock is not None:
                with contextlib.suppress(OSError):
                    connection.sock.shutdown(socket.SHUT_RDWR)
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join()
        self._server = self._thread = None

    def inject(self, operation: str, kind: str, times: int = 1) -> None:
        """Make the next ``times`` calls of ``operation`` fail with ``kind``.

        ``operation`` is the X-Amz-Target action, with or without its prefix
        (``GetRecords`` or ``Kinesis_20131202.GetRecords``). Faults queue up in order.
        """
        if kind not in FAULT_KINDS:
            raise ValueError(f"fault kind {kind!r} is not one of {FAULT_KINDS}")
        if kind == "partial_put" and _action(operation) != "PutRecords":
            raise ValueError("partial_put applies to PutRecords only")
        subscription_only = kind.endswith("_subscription") or kind == "failure_event"
        if subscription_only and _action(operation) != "SubscribeToShard":
            raise ValueError(f"{kind} applies to SubscribeToShard only")
        with self._lock:
            self._faults.setdefault(_action(operation), deque()).append([kind, times])

    def _take_fault(self, action: str) -> str | None:
        with self._lock:
            queue = self._faults.get(action)
            if not queue:
                return None
            entry = queue[0]
            entry[1] -= 1
            if entry[1] <= 0:
                queue.popleft()
            self.counts[(action, entry[0])] += 1
            return str(entry[0])

    def _forward(
        self, method: str, path: str, headers: list[tuple[str, str]], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        connection = self._send(method, path, headers, body)
        try:
            response = connection.getresponse()
            return response.status, response.getheaders(), response.read()
        finally:
            connection.close()

    def _send(
        self, method: str, path: str, headers: list[tuple[str, str]], body: bytes
    ) -> http.client.HTTPConnection:
        return send_upstream(
            (self._upstream_host, self._upstream_port), method, path, headers, body
        )

    def now(self) -> float:
        """The endpoint's clock (epoch seconds), sent in every response's Date header."""
        return time.time()

    def _exchange(
        self, action: str, path: str, headers: list[tuple[str, str]], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        """Answer a request that no fault intercepted; subclasses rewrite it here."""
        return self._forward("POST", path, headers, body)


def send_upstream(
    upstream: tuple[str, int],
    method: str,
    path: str,
    headers: list[tuple[str, str]],
    body: bytes,
) -> http.client.HTTPConnection:
    """Send a request on as it came, minus hop-by-hop headers; the caller reads the
    response and closes the connection."""
    connection = http.client.HTTPConnection(*upstream, timeout=60)
    connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
    for name, value in headers:
        if name.lower() not in _HOP_BY_HOP:
            connection.putheader(name, value)
    connection.putheader("Content-Length", str(len(body)))
    connection.endheaders(body)
    return connection


def _action(operation: str) -> str:
    return operation.rsplit(".", 1)[-1]


def _access_key(authorization: str) -> str:
    """The key id of a SigV4 ``Authorization`` header (``... Credential=AKID/date/...``)."""
    _, _, credential = authorization.partition("Credential=")
    return credential.split("/", 1)[0]


def _error_body(code: str, message: str | None = None) -> bytes:
    text = message or f"{code} injected by FaultProxy"
    return json.dumps({"__type": code, "message": text}).encode()


class _ProxyHandler(BaseHTTPRequestHandler):
    owner: FaultProxy
    protocol_version = "HTTP/1.1"  # keep-alive, like the real endpoint

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        action = _action(self.headers.get("X-Amz-Target", ""))
        with self.owner._lock:
            self.owner.signed_by[(action, _access_key(self.headers.get("Authorization", "")))] += 1
        fault = self.owner._take_fault(action)
        if fault in _ERROR_FAULTS:
            status, code = _ERROR_FAULTS[fault]
            self._reply(status, [("Content-Type", _AMZ_JSON)], _error_body(code))
        elif fault == "partial_put":
            self._partial_put(body)
        elif fault == "end_subscription":
            # A subscription that ends before its first event: what a reader sees when
            # Kinesis ends one (every 5 minutes) or the connection drops, compressed.
            self._reply(200, [("Content-Type", _EVENT_STREAM)], b"")
        elif fault == "failure_event":
            # Kinesis reports errors of a subscription inside its stream, as events.
            failure = event_message(
                "InternalFailureException", b'{"message": "injected"}', exception=True
            )
            self._reply(200, [("Content-Type", _EVENT_STREAM)], failure)
        elif fault == "drop_subscription":
            self._relay(body, drop=True)
        elif action == "SubscribeToShard":
            self._relay(body)
        else:
            self._reply(*self.owner._exchange(action, self.path, self.headers.items(), body))

    def _partial_put(self, body: bytes) -> None:
        """Fail the first half of the entries truthfully: only the second half is sent on."""
        request = json.loads(body)
        entries = request["Records"]
        failing = (len(entries) + 1) // 2
        failures = [
            {
                "ErrorCode": "ProvisionedThroughputExceededException",
                "ErrorMessage": "Rate exceeded for shard (injected by FaultProxy)",
            }
        ] * failing
        passed: dict[str, Any] = {"FailedRecordCount": 0, "Records": []}
        status, headers = 200, [("Content-Type", _AMZ_JSON)]
        if entries[failing:]:
            forwarded = json.dumps({**request, "Records": entries[failing:]}).encode()
            status, headers, upstream_body = self.owner._forward(
                "POST", self.path, self.headers.items(), forwarded
            )
            if status != 200:
                self._reply(status, headers, upstream_body)
                return
            passed = json.loads(upstream_body)
        merged = {
            **passed,
            "FailedRecordCount": failing + int(passed.get("FailedRecordCount", 0)),
            "Records": failures + passed["Records"],
        }
        self._reply(status, headers, json.dumps(merged).encode())

    def _relay(self, body: bytes, *, drop: bool = False) -> None:
        """Pass an event stream on chunk by chunk as it arrives: a subscription holds its
        response open for minutes, so it cannot be read whole first. Ends when either
        side closes; with ``drop``, right after the headers, mid-response, as a dropped
        connection does."""
        connection = self.owner._send("POST", self.path, self.headers.items(), body)
        with self.owner._lock:
            self.owner._relays.add(connection)
        try:
            response = connection.getresponse()
            self.send_response(response.status)
            for name, value in response.getheaders():
                if name.lower() not in _HOP_BY_HOP and name.lower() not in ("date", "server"):
                    self.send_header(name, value)
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            while not drop and (chunk := response.read1(65536)):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
            if not drop:
                self.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass  # the reader closed its subscription, or the endpoint went away
        finally:
            with self.owner._lock:
                self.owner._relays.discard(connection)
            connection.close()

    def _reply(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        self.send_response(status)
        for name, value in headers:
            if name.lower() not in _HOP_BY_HOP and name.lower() not in ("date", "server"):
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def date_time_string(self, timestamp: float | None = None) -> str:
        """The Date header from the proxy's clock: consumers may take the server's time."""
        return super().date_time_string(self.owner.now() if timestamp is None else timestamp)

    def log_message(self, format: str, *args: Any) -> None:
        """Silence per-request logging; ``FaultProxy.counts`` records what matters."""
