"""A SubscribeToShard endpoint that answers from a script: the AWS behaviour kinesis-mock
never shows, as real HTTP event streams on 127.0.0.1.

kinesis-mock puts every record in its first event at ``MillisBehindLatest`` 0 and never
reports a shard's end, so a read there never outlives its first event. This serves what
AWS sends: events behind the tip, an event without ``MillisBehindLatest``, ``ChildShards``
at a shard's end, a stall or a dropped connection after some events, an exception event
mid-stream. Only SubscribeToShard is served; each call takes the next answer of the script
and records the request, so a test can check where the reader subscribed again.
"""

from __future__ import annotations

import base64
import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from kinesis_lake.kinesis.subscription import INITIAL_RESPONSE, event_message


def record(sequence_number: int, data: bytes = b"x") -> dict:
    return {
        "SequenceNumber": str(sequence_number),
        "ApproximateArrivalTimestamp": time.time(),
        "Data": base64.b64encode(data).decode(),
        "PartitionKey": "k",
    }


def event(records: list[dict], millis_behind: int | None = 0, **extra: object) -> bytes:
    """A SubscribeToShardEvent; ``ContinuationSequenceNumber`` is set unless given None."""
    body: dict = {"Records": records, "ContinuationSequenceNumber": "0", **extra}
    if millis_behind is not None:
        body["MillisBehindLatest"] = millis_behind
    if body["ContinuationSequenceNumber"] is None:
        del body["ContinuationSequenceNumber"]
    return event_message("SubscribeToShardEvent", json.dumps(body).encode())


def failure(code: str) -> bytes:
    """An exception event, as Kinesis reports a subscription's errors in-stream."""
    return event_message(code, b'{"message": "scripted"}', exception=True)


@dataclass
class Answer:
    """One subscription: these messages, then the stream ends (``then="end"``), the
    connection drops mid-message (``"drop"``) or stays silent (``"stall"``)."""

    messages: list[bytes]
    then: str = "end"


@dataclass
class Script:
    answers: list[Answer]
    requests: list[dict] = field(default_factory=list)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    script: Script

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.script.requests.append(request)
        answer = self.script.answers.pop(0)
        self.send_response(200)
        self.send_header("Content-Type", "application/vnd.amazon.eventstream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for message in [INITIAL_RESPONSE, *answer.messages]:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(message), message))
        self.wfile.flush()
        if answer.then == "drop":
            self.wfile.write(b"40\r\n" + INITIAL_RESPONSE[:10])  # half a chunk, then gone
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
        elif answer.then == "stall":
            time.sleep(30)
        else:
            self.wfile.write(b"0\r\n\r\n")

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def scripted_endpoint(script: Script) -> Iterator[str]:
    """The endpoint's URL while the block runs."""
    handler = type("Handler", (_Handler,), {"script": script})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
