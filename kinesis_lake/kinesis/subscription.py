"""One SubscribeToShard subscription (enhanced fan-out), as the shard reader uses it.

A subscription pushes events for up to five minutes over one HTTP response. Errors can
come as the answer to the call or as the first event of the stream (an exception event:
``ResourceInUseException`` while an earlier subscription of the same consumer and shard
is still held), so :meth:`Subscription.open` waits for the first event: whoever retries
the open then retries both.

Kinesis opens every event stream with an ``initial-response`` event, which botocore
requires. kinesis-mock (the local endpoint that serves SubscribeToShard) sends none, so
:func:`tolerate_missing_initial_response` supplies one where it is missing; against AWS it
changes nothing.
"""

from __future__ import annotations

import binascii
import random
import struct
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from botocore.eventstream import EventStreamBuffer
from botocore.exceptions import ClientError

from kinesis_lake.kinesis.client import KinesisClient
from kinesis_lake.kinesis.retry import error_code
from kinesis_lake.kinesis.server_time import server_ms

SUBSCRIPTION_BUSY = frozenset({"ResourceInUseException"})
"""Codes that mean "the previous subscription of this consumer and shard is still held":
Kinesis frees it seconds after its reader went away, so a later try succeeds."""


BUSY_RETRIES = 20
"""How often one read tries again while its shard is still held (:func:`open_when_free`)."""


@dataclass
class BusyWaits:
    """The tries a read has left for a shard that is still held: one budget for all of the
    read's subscriptions, so that it does not multiply with the caller's retries."""

    left: int = BUSY_RETRIES


def open_when_free(
    client: KinesisClient,
    consumer_arn: str,
    shard_id: str,
    position: Mapping[str, Any],
    *,
    sleep: Callable[[float], None],
    rng: random.Random,
    on_call: Callable[[], None],
    waits: BusyWaits,
) -> Subscription:
    """:meth:`Subscription.open`, waiting out the previous subscription of this consumer
    and shard. Kinesis refuses a new one within 5 s of the last (ResourceInUseException)
    and every micro-batch subscribes anew, so that refusal is routine, not a fault: it is
    tried again 1 to 2 s later (the limit is one call per second per consumer and shard),
    while ``waits`` lasts, apart from the caller's ``maxRetries`` for real faults, which
    are raised."""
    while True:
        on_call()
        try:
            return Subscription.open(client, consumer_arn, shard_id, position)
        except ClientError as error:
            if error_code(error) not in SUBSCRIPTION_BUSY or waits.left <= 0:
                raise
        waits.left -= 1
        sleep(1.0 + rng.random())


def subscription_held(error: BaseException) -> bool:
    """Whether ``error`` (or what it was raised from) is Kinesis refusing a subscription
    because the consumer's previous one of the shard is still held."""
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, ClientError) and error_code(cause) in SUBSCRIPTION_BUSY:
            return True
        cause = cause.__cause__
    return False


_HOOK_ID = "kinesis-lake-initial-response"


class Subscription:
    """An open subscription: its events, and the server's time when it was opened."""

    def __init__(self, events: Any, first: Mapping[str, Any] | None, server_ms: int | None):
        self._events = events
        self._pending = first
        self._iterator: Iterator[Mapping[str, Any]] = iter(events)
        self.server_ms = server_ms
        """Every record that arrived before this instant is delivered before the events
        report the shard caught up (the response's Date header)."""

    @classmethod
    def open(
        cls, client: KinesisClient, consumer_arn: str, shard_id: str, position: Mapping[str, Any]
    ) -> Subscription:
        """Subscribe at a GetShardIterator-shaped ``position`` and wait for the first event."""
        tolerate_missing_initial_response(client)
        response = client.subscribe_to_shard(
            ConsumerARN=consumer_arn, ShardId=shard_id, StartingPosition=starting_position(position)
        )
        events = response["EventStream"]
        try:
            first = _shard_event(next(iter(events), None))
        except BaseException:
            events.close()
            raise
        return cls(events, first, server_ms(response))

    def next_event(self) -> Mapping[str, Any] | None:
        """The next SubscribeToShardEvent, or None once the subscription has ended."""
        event: Mapping[str, Any] | None
        if self._pending is not None:
            event, self._pending = self._pending, None
        else:
            event = _shard_event(next(self._iterator, None))
        return event

    def close(self) -> None:
        self._events.close()


def starting_position(position: Mapping[str, Any]) -> dict[str, Any]:
    """GetShardIterator arguments -> SubscribeToShard's StartingPosition."""
    converted: dict[str, Any] = {"Type": position["ShardIteratorType"]}
    if "StartingSequenceNumber" in position:
        converted["SequenceNumber"] = position["StartingSequenceNumber"]
    if "Timestamp" in position:
        converted["Timestamp"] = position["Timestamp"]
    return converted


def _shard_event(event: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    return None if event is None else event["SubscribeToShardEvent"]


def tolerate_missing_initial_response(client: KinesisClient) -> None:
    """Make ``client`` accept a SubscribeToShard stream that lacks ``initial-response``
    (idempotent: botocore keeps one handler per unique id)."""
    client.meta.events.register(
        "before-parse.kinesis.SubscribeToShard", _supply_initial_response, unique_id=_HOOK_ID
    )


def _supply_initial_response(response_dict: dict[str, Any], **_: Any) -> None:
    if response_dict.get("status_code") == 200:
        response_dict["body"] = WithInitialResponse(response_dict["body"])


class WithInitialResponse:
    """The raw event stream, led by an ``initial-response`` event when it has none."""

    def __init__(self, raw: Any) -> None:
        self._raw = raw

    def stream(self, *args: Any, **kwargs: Any) -> Iterator[bytes]:
        chunks = self._raw.stream(*args, **kwargs)
        seen: list[bytes] = []
        parser = EventStreamBuffer()
        first = None
        for chunk in chunks:
            seen.append(chunk)
            parser.add_data(chunk)
            first = next(parser, None)
            if first is not None:
                break
        # A stream that ended before its first message is a subscription that ended
        # at once: with an initial-response it reads as such, not as a parse error.
        if first is None or first.headers.get(":event-type") != "initial-response":
            yield INITIAL_RESPONSE
        yield from seen
        yield from chunks

    def close(self) -> None:
        self._raw.close()


def event_message(event_type: str, payload: bytes, *, exception: bool = False) -> bytes:
    """One event stream message (the AWS event stream encoding: prelude, CRCs); with
    ``exception``, an exception event of that type, as Kinesis reports errors in-stream."""
    kind = b"exception" if exception else b"event"
    headers = b"".join(
        bytes([len(name)]) + name + b"\x07" + struct.pack(">H", len(value)) + value
        for name, value in ((b":message-type", kind), (b":" + kind + b"-type", event_type.encode()))
    )
    prelude = struct.pack(">II", 16 + len(headers) + len(payload), len(headers))
    head = prelude + struct.pack(">I", binascii.crc32(prelude))
    body = head + headers + payload
    return body + struct.pack(">I", binascii.crc32(body))


INITIAL_RESPONSE = event_message("initial-response", b"{}")
