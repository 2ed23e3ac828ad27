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
import struct
from collections.abc import Iterator, Mapping
from typing import Any

from botocore.eventstream import EventStreamBuffer

from kinesis_lake.kinesis.client import KinesisClient
from kinesis_lake.kinesis.retry import RetryPolicy
from kinesis_lake.kinesis.server_time import server_ms

SUBSCRIPTION_BUSY = frozenset({"ResourceInUseException"})
"""Codes that mean "the previous subscription of this consumer and shard is still held":
Kinesis frees it seconds after its reader went away, so a later try succeeds."""


def resubscribe_policy(policy: RetryPolicy) -> RetryPolicy:
    """Retries of SubscribeToShard itself. Kinesis refuses a subscription within 5 s of
    the previous one of the same consumer and shard, and every micro-batch subscribes
    anew, so that refusal is the normal case, not a fault: tries about a second apart
    (its limit is one call per second per consumer and shard) for 20 s or more."""
    return RetryPolicy(max_retries=max(policy.max_retries, 20), base_delay_s=1.0, max_delay_s=2.0)


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
        if self._pending is not None:
            event, self._pending = self._pending, None
            return event
        return _shard_event(next(self._iterator, None))

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
        for chunk in chunks:
            seen.append(chunk)
            parser.add_data(chunk)
            first = next(parser, None)
            if first is not None:
                if first.headers.get(":event-type") != "initial-response":
                    yield INITIAL_RESPONSE
                break
        yield from seen
        yield from chunks

    def close(self) -> None:
        self._raw.close()


def event_message(event_type: str, payload: bytes) -> bytes:
    """One event stream message (the AWS event stream encoding: prelude, CRCs)."""
    headers = b"".join(
        bytes([len(name)]) + name + b"\x07" + struct.pack(">H", len(value)) + value
        for name, value in ((b":message-type", b"event"), (b":event-type", event_type.encode()))
    )
    prelude = struct.pack(">II", 16 + len(headers) + len(payload), len(headers))
    head = prelude + struct.pack(">I", binascii.crc32(prelude))
    body = head + headers + payload
    return body + struct.pack(">I", binascii.crc32(body))


INITIAL_RESPONSE = event_message("initial-response", b"{}")
