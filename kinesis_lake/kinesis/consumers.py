"""Registered stream consumers, the identity enhanced fan-out reads under.

A consumer gets its own 2 MB/s per shard, not shared with other readers of the stream,
and at most one subscription per shard at a time: two queries must never share one. A
consumer goes through CREATING and DELETING states that take seconds on AWS, and a name
that is DELETING cannot be registered again until it is gone, so registration waits for
states rather than assuming them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from kinesis_lake.errors import KinesisError
from kinesis_lake.kinesis.client import KinesisClient
from kinesis_lake.kinesis.retry import error_code, is_retryable

CONSUMER_TYPES = ("polling", "efo")
"""How a reader reads: GetRecords, or enhanced fan-out under a registered consumer."""

MAX_CONSUMERS = 20
"""Kinesis' limit of registered consumers per stream."""

_POLL_S = 1.0


class ConsumerError(KinesisError, RuntimeError):
    """A consumer could not be registered or did not become usable in time."""


@dataclass(frozen=True)
class Consumer:
    arn: str
    name: str


def ensure_consumer(
    client: KinesisClient,
    stream_arn: str,
    name: str,
    *,
    timeout_s: float = 120.0,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Consumer:
    """The ACTIVE consumer ``name`` of the stream, registered if it does not exist."""
    deadline = clock() + timeout_s
    status = "absent"
    while True:
        try:
            description = _describe(client, StreamARN=stream_arn, ConsumerName=name)
        except ClientError:  # throttled (20 calls/s per stream) or a 5xx: ask again
            if clock() > deadline:
                raise
            sleep(_POLL_S)
            continue
        if description is not None:
            status = str(description["ConsumerStatus"])
            if status == "ACTIVE":
                return Consumer(str(description["ConsumerARN"]), name)
        else:
            status = "absent"
            try:
                client.register_stream_consumer(StreamARN=stream_arn, ConsumerName=name)
            except ClientError as refused:
                code = error_code(refused)
                if code == "LimitExceededException":
                    _refuse_if_full(client, stream_arn, name, refused)
                elif code != "ResourceInUseException":  # the same name, registered at once
                    raise ConsumerError(
                        f"RegisterStreamConsumer {name!r} on {stream_arn} failed: {refused}. "
                        "The identity needs kinesis:RegisterStreamConsumer."
                    ) from refused
        if clock() > deadline:
            raise ConsumerError(
                f"consumer {name!r} of {stream_arn} is {status}, not ACTIVE, after "
                f"{timeout_s:.0f} s; check it with `aws kinesis describe-stream-consumer "
                f"--stream-arn {stream_arn} --consumer-name {name}`"
            )
        sleep(_POLL_S)


def _refuse_if_full(
    client: KinesisClient, stream_arn: str, name: str, refused: ClientError
) -> None:
    """LimitExceededException means too many calls (wait) or a stream with its 20
    consumers already (waiting is useless): tell them apart by counting."""
    try:
        listed = client.list_stream_consumers(StreamARN=stream_arn).get("Consumers", [])
    except ClientError:
        return  # throttled as well: keep waiting
    # A DELETING one (ours, released by the previous run) frees its place in seconds.
    listed = [c for c in listed if c.get("ConsumerStatus") != "DELETING"]
    if len(listed) >= MAX_CONSUMERS:
        names = ", ".join(sorted(str(c["ConsumerName"]) for c in listed))
        raise ConsumerError(
            f"consumer {name!r} cannot be registered: stream {stream_arn} has its "
            f"{MAX_CONSUMERS} consumers already ({names}). Deregister one you no longer "
            "need (aws kinesis deregister-stream-consumer), or read with polling."
        ) from refused


def find_consumer(client: KinesisClient, stream_arn: str, name: str) -> Consumer | None:
    """The consumer ``name`` of the stream in any state, or None."""
    description = _describe(client, StreamARN=stream_arn, ConsumerName=name)
    return None if description is None else Consumer(str(description["ConsumerARN"]), name)


def _describe(client: KinesisClient, **identity: str) -> dict[str, Any] | None:
    """The description of the consumer named by ``identity`` (its ARN, or the stream's and
    its name), None if there is none; a transient failure (throttling, a 5xx) is raised as
    botocore's ClientError for the caller to wait out."""
    try:
        found = client.describe_stream_consumer(**identity)
    except ClientError as error:
        if error_code(error) == "ResourceNotFoundException":
            return None
        if is_retryable(error):
            raise
        named = identity.get("ConsumerName", identity.get("ConsumerARN"))
        raise ConsumerError(f"DescribeStreamConsumer {named!r} failed: {error}") from error
    return dict(found["ConsumerDescription"])


def deregister_consumer(client: KinesisClient, consumer: Consumer) -> None:
    """Deregister ``consumer``; one already gone, or going, is fine."""
    try:
        client.deregister_stream_consumer(ConsumerARN=consumer.arn)
    except ClientError as error:
        if error_code(error) != "ResourceNotFoundException" and not _deleting(client, consumer):
            raise ConsumerError(
                f"DeregisterStreamConsumer {consumer.name!r} failed: {error}. It still counts "
                f"against the stream's 20 consumers: `aws kinesis deregister-stream-consumer "
                f"--consumer-arn {consumer.arn}`"
            ) from error


def _deleting(client: KinesisClient, consumer: Consumer) -> bool:
    try:
        description = _describe(client, ConsumerARN=consumer.arn)
    except (ClientError, ConsumerError):
        return False
    return description is not None and description["ConsumerStatus"] == "DELETING"
