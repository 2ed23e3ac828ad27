"""Is there anything in the stream beyond the committed positions, and how old is it?

Sensors and freshness checks must answer this in well under a second and without reading
the backlog itself. Per open shard it costs one GetShardIterator and one GetRecords with
``Limit=1``: the single record returned is the oldest unconsumed one, and its arrival time
is the age freshness is judged by. ``MillisBehindLatest`` would not do: kinesalite always
reports 0, and it measures a reader's lag, not the data's age. Real Kinesis may answer an
empty page while still behind (MillisBehindLatest > 0), so the probe then follows a few
more pages.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

from botocore.exceptions import ClientError

from kinesis_lake.kinesis.retry import DEFAULT_RETRY, call_with_retry, error_code
from kinesis_lake.kinesis.server_time import server_ms
from kinesis_lake.kinesis.streams import describe_stream, list_shards

T = TypeVar("T")
_RNG = random.Random()


def _retried(operation: Callable[[], T]) -> T:
    """Our clients leave retries to us: one throttle must not fail a sensor tick."""
    return call_with_retry(operation, DEFAULT_RETRY, sleep=time.sleep, rng=_RNG)


@dataclass(frozen=True)
class BacklogProbe:
    shards: int
    shards_with_backlog: list[str]
    oldest_unconsumed_arrival_ms: int | None
    retention_hours: int
    first_unconsumed: dict[str, str] = field(default_factory=dict)
    server_ms: int | None = None
    """The endpoint's clock (Date header) at the probe's last GetRecords: the time its
    "nothing past the committed positions" holds at, on the clock retention runs by."""

    @property
    def has_backlog(self) -> bool:
        return bool(self.shards_with_backlog)


def probe_backlog(
    client,
    stream_name: str,
    positions: Mapping[str, str],
    starts: Mapping[str, Mapping[str, Any]] | None = None,
) -> BacklogProbe:
    """Peek one record past ``positions`` (shard id -> last committed sequence number).

    A shard without a committed position is probed from where ingestion would start
    reading it: ``starts`` (shard id -> GetShardIterator arguments; a ``"*"`` entry for
    every other shard), else its trim horizon. Records before a configured start are no
    backlog: no run would ever commit them. A closed shard whose last record is
    committed has nothing after it, so it never shows as backlog.
    """
    starts = starts or {}
    trim_horizon = {"ShardIteratorType": "TRIM_HORIZON"}
    info = describe_stream(client, stream_name)
    shards = list_shards(client, stream_name)
    with_backlog: list[str] = []
    first: dict[str, str] = {}
    oldest: int | None = None
    server_now: int | None = None
    for shard in shards:
        committed = positions.get(shard.shard_id)
        if committed is not None:
            request = {
                "ShardIteratorType": "AFTER_SEQUENCE_NUMBER",
                "StartingSequenceNumber": committed,
            }
        else:
            request = dict(starts.get(shard.shard_id, starts.get("*", trim_horizon)))
        iterator = _iterator(client, stream_name, shard.shard_id, request)
        record, answered_ms = _first_record(client, iterator)
        server_now = max(filter(None, (server_now, answered_ms)), default=None)
        if record is None:
            continue
        with_backlog.append(shard.shard_id)
        first[shard.shard_id] = record["SequenceNumber"]
        arrival_ms = int(record["ApproximateArrivalTimestamp"].timestamp() * 1000)
        oldest = arrival_ms if oldest is None else min(oldest, arrival_ms)
    return BacklogProbe(
        shards=len(shards),
        shards_with_backlog=with_backlog,
        oldest_unconsumed_arrival_ms=oldest,
        retention_hours=info.retention_hours,
        first_unconsumed=first,
        server_ms=server_now,
    )


def _iterator(client, stream_name: str, shard_id: str, request: dict) -> str:
    """An iterator after the committed position, or at the trim horizon when Kinesis
    refuses that position because it aged out: everything retained is then after it."""
    try:
        response = _retried(
            lambda: client.get_shard_iterator(StreamName=stream_name, ShardId=shard_id, **request)
        )
    except ClientError as error:
        refused_position = "StartingSequenceNumber" in request
        if error_code(error) != "InvalidArgumentException" or not refused_position:
            raise
        response = _retried(
            lambda: client.get_shard_iterator(
                StreamName=stream_name, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON"
            )
        )
    return str(response["ShardIterator"])


_MAX_EMPTY_PAGES = 5


def _first_record(client, iterator: str | None) -> tuple[dict | None, int | None]:
    """The first record after ``iterator`` (None at the tip), and the server's time."""
    answered_ms: int | None = None
    for _ in range(_MAX_EMPTY_PAGES):
        if iterator is None:
            break
        page = _retried(partial(client.get_records, ShardIterator=iterator, Limit=1))
        answered_ms = server_ms(page) or answered_ms
        if page["Records"]:
            return page["Records"][0], answered_ms
        if not page.get("MillisBehindLatest"):
            break
        iterator = page.get("NextShardIterator")
    return None, answered_ms
