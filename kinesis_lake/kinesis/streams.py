"""Stream and shard metadata: describe, list, create, and order shards by lineage."""

from __future__ import annotations

import heapq
import random
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from botocore.exceptions import ClientError

from kinesis_lake.errors import KinesisError
from kinesis_lake.kinesis.client import KinesisClient
from kinesis_lake.kinesis.retry import DEFAULT_RETRY, call_with_retry, error_code
from kinesis_lake.kinesis.server_time import server_ms

T = TypeVar("T")

# Codes with which an endpoint says "I do not implement ListShards (paging)". moto, for
# one, rejects a real-API-shaped ListShards(NextToken=...) page with InvalidToken.
_LIST_SHARDS_UNSUPPORTED = frozenset(
    {"UnknownOperationException", "InvalidAction", "NotImplemented"}
)
_PAGING_UNSUPPORTED = _LIST_SHARDS_UNSUPPORTED | {"InvalidToken", "InvalidArgumentException"}

_POLL_INTERVAL_S = 0.1


@dataclass(frozen=True)
class Shard:
    """A shard and its place in the resharding lineage."""

    shard_id: str
    parent_shard_id: str | None
    adjacent_parent_shard_id: str | None
    starting_sequence_number: str
    ending_sequence_number: str | None

    @property
    def is_closed(self) -> bool:
        """A closed shard (split or merged away) takes no new writes and can be drained."""
        return self.ending_sequence_number is not None

    @property
    def parent_ids(self) -> tuple[str, ...]:
        """Parents that must be read to their end before this shard, to keep key order."""
        return tuple(p for p in (self.parent_shard_id, self.adjacent_parent_shard_id) if p)

    @classmethod
    def from_api(cls, shard: Mapping[str, Any]) -> Shard:
        """Build from a ListShards / DescribeStream ``Shards`` entry."""
        sequence_range = shard["SequenceNumberRange"]
        return cls(
            shard_id=shard["ShardId"],
            parent_shard_id=shard.get("ParentShardId"),
            adjacent_parent_shard_id=shard.get("AdjacentParentShardId"),
            starting_sequence_number=sequence_range["StartingSequenceNumber"],
            ending_sequence_number=sequence_range.get("EndingSequenceNumber"),
        )


@dataclass(frozen=True)
class StreamInfo:
    """The stream facts a job needs before reading: does it exist, is it usable, how big."""

    name: str
    arn: str
    created_at_ms: int
    retention_hours: int
    status: str
    open_shard_count: int
    server_ms: int | None = None
    """The endpoint's clock when it answered (Date header), None if it sent none."""


class StreamNotFoundError(KinesisError, LookupError):
    """The stream does not exist at this endpoint (or in this region)."""

    def __init__(self, stream_name: str, endpoint: str, region: str | None) -> None:
        # All parts go to args so the exception survives pickling (Spark ships executor
        # exceptions to the driver).
        super().__init__(stream_name, endpoint, region)
        self.stream_name = stream_name
        self.endpoint = endpoint
        self.region = region

    def __str__(self) -> str:
        return (
            f"Kinesis stream {self.stream_name!r} does not exist at {self.endpoint} "
            f"(region {self.region}). Create it (for local endpoints: ensure_stream / "
            "`make setup`), or check the stream name setting (streamName / "
            "KINESIS_STREAM_NAME), the endpoint and the region."
        )


def _not_found(client: KinesisClient, stream_name: str) -> StreamNotFoundError:
    return StreamNotFoundError(stream_name, client.meta.endpoint_url, client.meta.region_name)


def _call(client: KinesisClient, stream_name: str, operation: Callable[[], T]) -> T:
    """Retry transient errors and turn ResourceNotFound into StreamNotFoundError."""
    try:
        return call_with_retry(operation, DEFAULT_RETRY, sleep=time.sleep, rng=random.Random())
    except ClientError as error:
        if error_code(error) == "ResourceNotFoundException":
            raise _not_found(client, stream_name) from error
        raise


def describe_stream(client: KinesisClient, stream_name: str) -> StreamInfo:
    """Stream facts via DescribeStreamSummary (cheap: no shard list, 20 calls/s limit)."""
    response = _call(
        client, stream_name, lambda: client.describe_stream_summary(StreamName=stream_name)
    )
    summary = response["StreamDescriptionSummary"]
    return StreamInfo(
        name=summary["StreamName"],
        arn=summary["StreamARN"],
        created_at_ms=int(summary["StreamCreationTimestamp"].timestamp() * 1000),
        retention_hours=int(summary["RetentionPeriodHours"]),
        status=summary["StreamStatus"],
        open_shard_count=int(summary["OpenShardCount"]),
        server_ms=server_ms(response),
    )


def list_shards(client: KinesisClient, stream_name: str) -> list[Shard]:
    """All shards of the stream (open and closed, still within retention), by shard id.

    Uses ListShards with NextToken paging (a NextToken page must not repeat StreamName, real
    Kinesis rejects that). Falls back to DescribeStream paging when the endpoint does not
    implement ListShards or its paging. Never sends a NextToken the endpoint did not hand
    out: kinesalite 3.3.3 crashes on ``ListShards(NextToken=...)`` (it never pages anyway).
    """
    try:
        page = _call(client, stream_name, lambda: client.list_shards(StreamName=stream_name))
    except ClientError as error:
        # Only "operation unknown" justifies the fallback on the first page; anything else
        # (e.g. InvalidArgumentException for a bad name) is a real error.
        if error_code(error) not in _LIST_SHARDS_UNSUPPORTED:
            raise
        raw = _describe_stream_paged(client, stream_name)
    else:
        raw = list(page["Shards"])
        try:
            while token := page.get("NextToken"):
                page = _call(client, stream_name, partial(client.list_shards, NextToken=token))
                raw.extend(page["Shards"])
        except ClientError as error:
            if error_code(error) not in _PAGING_UNSUPPORTED:
                raise
            raw = _describe_stream_paged(client, stream_name)
    return sorted((Shard.from_api(s) for s in raw), key=lambda s: s.shard_id)


def _describe_stream_paged(client: KinesisClient, stream_name: str) -> list[Mapping[str, Any]]:
    shards: dict[str, Mapping[str, Any]] = {}
    exclusive_start: dict[str, str] = {}
    while True:
        description = _call(
            client,
            stream_name,
            partial(client.describe_stream, StreamName=stream_name, **exclusive_start),
        )["StreamDescription"]
        new = [s for s in description["Shards"] if s["ShardId"] not in shards]
        shards.update((s["ShardId"], s) for s in new)
        if not description.get("HasMoreShards"):
            return list(shards.values())
        if not new:
            # moto ignores ExclusiveStartShardId; without this guard we would loop forever.
            raise KinesisError(
                f"DescribeStream paging of {stream_name!r} at {client.meta.endpoint_url} made"
                " no progress: the endpoint ignores ExclusiveStartShardId"
            )
        exclusive_start = {"ExclusiveStartShardId": max(shards)}


def ensure_stream(
    client: KinesisClient, stream_name: str, shard_count: int, *, timeout_s: float = 30
) -> StreamInfo:
    """Create the stream if missing and wait until it is ACTIVE.

    An existing stream is left as it is, even with another shard count: resharding a live
    stream is an operator decision, not a side effect of starting a job. ResourceInUse
    (someone else created it in the meantime) is fine.
    """
    try:
        info = describe_stream(client, stream_name)
    except StreamNotFoundError:
        try:
            _call(
                client,
                stream_name,
                lambda: client.create_stream(StreamName=stream_name, ShardCount=shard_count),
            )
        except ClientError as error:
            if error_code(error) != "ResourceInUseException":
                raise
        info = describe_stream(client, stream_name)
    deadline = time.monotonic() + timeout_s
    while info.status != "ACTIVE":
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"Kinesis stream {stream_name!r} at {client.meta.endpoint_url} is still "
                f"{info.status} after {timeout_s} s"
            )
        time.sleep(_POLL_INTERVAL_S)
        info = describe_stream(client, stream_name)
    return info


def could_have_aged_out(shard_id: str, listed_ids: Collection[str]) -> bool:
    """Whether ``shard_id``, missing from a listing of ``listed_ids``, may be a closed
    shard past retention rather than one the stream never had.

    Kinesis stops listing a closed shard once its records are past retention, and numbers
    shards in creation order: a closed shard's children are newer, and still listed. So
    only an id numbered below the newest listed shard can have aged out.
    """
    number = _shard_number(shard_id)
    newest = max((n for n in map(_shard_number, listed_ids) if n is not None), default=-1)
    return number is not None and number < newest


def _shard_number(shard_id: str) -> int | None:
    """The creation number in a Kinesis shard id (shardId-000000000007 -> 7), if any."""
    prefix, _, digits = shard_id.rpartition("-")
    return int(digits) if prefix == "shardId" and digits.isdigit() else None


def shard_lineage_order(shards: list[Shard]) -> list[Shard]:
    """Parents before children (a topological order), ties broken by shard id.

    Parents missing from ``shards`` (expired past retention) impose no constraint.
    """
    by_id = {s.shard_id: s for s in shards}
    children: dict[str, list[str]] = {shard_id: [] for shard_id in by_id}
    waiting_on: dict[str, int] = {}
    for shard in shards:
        present = [p for p in shard.parent_ids if p in by_id]
        waiting_on[shard.shard_id] = len(present)
        for parent in present:
            children[parent].append(shard.shard_id)
    ready = [shard_id for shard_id, count in waiting_on.items() if count == 0]
    heapq.heapify(ready)
    ordered: list[Shard] = []
    while ready:
        shard_id = heapq.heappop(ready)
        ordered.append(by_id[shard_id])
        for child in children[shard_id]:
            waiting_on[child] -= 1
            if waiting_on[child] == 0:
                heapq.heappush(ready, child)
    if len(ordered) != len(by_id):
        raise ValueError("shard lineage has a cycle; the shard list is inconsistent")
    return ordered
