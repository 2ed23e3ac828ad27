"""A simulated Kinesis stream on a virtual clock, spoken to like a boto3 client.

Why not kinesalite behind the clock proxy: a schedule of the simulation lets days pass,
reshards, throttles and expires iterators hundreds of times a second, and must do so
deterministically (a seed is a replay). In-process, the whole stream is a few lists.

The code under test receives this object where it expects a boto3 Kinesis client, and
calls the same methods with the same arguments: ``describe_stream_summary``,
``list_shards``, ``get_shard_iterator``, ``get_records`` (plus ``meta.endpoint_url`` /
``meta.region_name`` for error messages). Responses have boto3's shapes, including the
``Date`` header the reader takes the server's clock from (second precision, rounded down,
as HTTP dates are), and errors are real ``botocore.exceptions.ClientError``s (whose
response holds that header too: the reader dates a shard found gone by it).

What it models (AWS Kinesis Data Streams API reference and developer guide):

* **Records**: sequence numbers are decimal strings growing across the stream (so,
  within a shard), of varying length; ``ApproximateArrivalTimestamp`` is the virtual
  clock at the put. KPL aggregates are ordinary records whose data is an aggregate.
* **Retention**: a record older than ``now - retention`` is never returned (exact at the
  boundary; real Kinesis may keep records a little longer, never shorter).
* **TRIM_HORIZON / LATEST / AT_TIMESTAMP / AT_ and AFTER_SEQUENCE_NUMBER**. A sequence
  number whose record was trimmed is, per ``trimmed_position``, either granted (reading
  goes on at the oldest retained record after it, what the clock proxy and KCL assume) or
  refused with ``InvalidArgumentException`` (what the reader must also survive).
* **Resharding**: a split or merge closes its parent(s) (``EndingSequenceNumber``), the
  children name ``ParentShardId`` / ``AdjacentParentShardId``; a closed shard's
  ``NextShardIterator`` is null once a page reached its end.
* **Expired shards are not listed**: a closed shard whose every record is past retention
  (``retention`` after it closed) disappears from ListShards and GetShardIterator answers
  ``ResourceNotFoundException``.
* **Iterators expire** 5 minutes (virtual) after they were handed out:
  ``ExpiredIteratorException``. ``expire_iterators(n)`` makes every iterator handed out so
  far stale at a chosen later call, as a task that stalled there would find.
* **Throttling**: ``throttle(shard, n)`` makes the next ``n`` GetRecords calls on the shard
  fail with ``ProvisionedThroughputExceededException``.
* **MillisBehindLatest**: 0 when the page reached the shard's tip, else the age of the
  newest record minus the age of the last one returned (at least 1). ``lagging_empty_pages``
  makes the next GetRecords answer an empty page while behind, as real Kinesis may.

Not modelled: throughput limits other than injected throttling (bytes/s, records/s,
5 calls/s), PutRecords failures (the simulation puts records itself), control-plane
throttling (the code under test retries those with real sleeps), enhanced fan-out
(SubscribeToShard), stream deletion and re-creation, encryption, paging of ListShards.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import format_datetime
from types import SimpleNamespace
from typing import Any

from botocore.exceptions import ClientError

ITERATOR_LIFETIME_MS = 5 * 60 * 1000
GRANT = "grant"
REFUSE = "refuse"


@dataclass
class Record:
    """One Kinesis record as the stream holds it."""

    sequence_number: int
    partition_key: str
    data: bytes
    arrival_ms: int


@dataclass
class SimShard:
    shard_id: str
    parent: str | None
    adjacent_parent: str | None
    starting_sequence_number: int
    records: list[Record] = field(default_factory=list)
    ending_sequence_number: int | None = None
    closed_ms: int | None = None

    @property
    def is_closed(self) -> bool:
        return self.ending_sequence_number is not None


@dataclass
class _Iterator:
    shard_id: str
    from_sequence: int
    """The first sequence number this iterator may return."""
    issued_ms: int
    generation: int


class SimulatedKinesis:
    """One stream, its shards and records, on the clock ``now_ms()`` reads."""

    def __init__(
        self,
        now_ms: Callable[[], int],
        *,
        stream_name: str = "events",
        shards: int = 1,
        retention_hours: int = 24,
        trimmed_position: str = GRANT,
    ) -> None:
        self._now_ms = now_ms
        self.stream_name = stream_name
        self.retention_hours = retention_hours
        self.trimmed_position = trimmed_position
        self.created_ms = now_ms()
        self.meta = SimpleNamespace(endpoint_url="simulated://kinesis", region_name="us-east-1")
        self.shards: dict[str, SimShard] = {}
        self._ids = itertools.count()
        self._sequence = 49_000_000_000
        self._tokens = itertools.count()
        self._iterators: dict[str, _Iterator] = {}
        self._generation = 0
        self._throttled: dict[str, int] = {}
        self._lagging_empty_pages = 0
        self._expire_after = 0
        self.calls: dict[str, int] = {}
        for _ in range(shards):
            self._new_shard(None, None)

    # ---------------------------------------------------------------- the operator's side

    def now_ms(self) -> int:
        return self._now_ms()

    @property
    def retention_ms(self) -> int:
        return self.retention_hours * 3_600_000

    def open_shards(self) -> list[str]:
        return sorted(sid for sid, shard in self.shards.items() if not shard.is_closed)

    def put(self, shard_id: str, partition_key: str, data: bytes) -> str:
        """Append one record to an open shard; returns its sequence number."""
        shard = self.shards[shard_id]
        if shard.is_closed:
            raise ValueError(f"{shard_id} is closed")
        sequence = self._next_sequence()
        shard.records.append(Record(sequence, partition_key, data, self._now_ms()))
        return str(sequence)

    def split(self, shard_id: str) -> tuple[str, str]:
        """SplitShard: close ``shard_id``, open two children."""
        self._close(shard_id)
        return self._new_shard(shard_id, None), self._new_shard(shard_id, None)

    def merge(self, shard_id: str, adjacent_id: str) -> str:
        """MergeShards: close both, open one child naming both parents."""
        self._close(shard_id)
        self._close(adjacent_id)
        return self._new_shard(shard_id, adjacent_id)

    def throttle(self, shard_id: str, calls: int) -> None:
        self._throttled[shard_id] = self._throttled.get(shard_id, 0) + calls

    def lag_with_empty_pages(self, pages: int) -> None:
        self._lagging_empty_pages += pages

    def expire_iterators(self, after_calls: int = 0) -> None:
        """Every iterator handed out before the ``after_calls``-th next GetRecords expires
        then, as if the reader had stalled for 5 minutes at that point."""
        if after_calls <= 0:
            self._generation += 1
        else:
            self._expire_after = after_calls

    @contextmanager
    def faults_suspended(self) -> Iterator[None]:
        """No injected fault fires in the block: for the sensor's probe, whose retries
        sleep on the wall clock (control-plane and sensor faults are not modelled)."""
        saved = self._throttled, self._lagging_empty_pages, self._expire_after
        self._throttled, self._lagging_empty_pages, self._expire_after = {}, 0, 0
        try:
            yield
        finally:
            self._throttled, self._lagging_empty_pages, self._expire_after = saved

    def retained(self, shard: SimShard) -> list[Record]:
        horizon = self._now_ms() - self.retention_ms
        return [r for r in shard.records if r.arrival_ms > horizon]

    def listed(self, shard: SimShard) -> bool:
        """ListShards omits a closed shard once all its records are past retention."""
        if shard.closed_ms is None:
            return True
        return shard.closed_ms > self._now_ms() - self.retention_ms

    # ---------------------------------------------------------------- boto3's side

    def describe_stream_summary(self, *, StreamName: str) -> dict[str, Any]:
        self._stream(StreamName, "DescribeStreamSummary")
        return self._response(
            {
                "StreamDescriptionSummary": {
                    "StreamName": self.stream_name,
                    "StreamARN": f"arn:aws:kinesis:us-east-1:000000000000:stream/{StreamName}",
                    "StreamStatus": "ACTIVE",
                    "RetentionPeriodHours": self.retention_hours,
                    "StreamCreationTimestamp": _datetime(self.created_ms),
                    "OpenShardCount": len(self.open_shards()),
                }
            }
        )

    def list_shards(self, *, StreamName: str | None = None, **_: Any) -> dict[str, Any]:
        self._stream(StreamName or "", "ListShards")
        shards = []
        for shard in sorted(self.shards.values(), key=lambda s: s.shard_id):
            if not self.listed(shard):
                continue
            entry: dict[str, Any] = {
                "ShardId": shard.shard_id,
                "HashKeyRange": {"StartingHashKey": "0", "EndingHashKey": "1"},
                "SequenceNumberRange": {
                    "StartingSequenceNumber": str(shard.starting_sequence_number)
                },
            }
            if shard.ending_sequence_number is not None:
                entry["SequenceNumberRange"]["EndingSequenceNumber"] = str(
                    shard.ending_sequence_number
                )
            if shard.parent:
                entry["ParentShardId"] = shard.parent
            if shard.adjacent_parent:
                entry["AdjacentParentShardId"] = shard.adjacent_parent
            shards.append(entry)
        return self._response({"Shards": shards})

    def get_shard_iterator(
        self,
        *,
        StreamName: str,
        ShardId: str,
        ShardIteratorType: str,
        StartingSequenceNumber: str | None = None,
        Timestamp: datetime | None = None,
    ) -> dict[str, Any]:
        operation = "GetShardIterator"
        self._stream(StreamName, operation)
        shard = self.shards.get(ShardId)
        if shard is None or not self.listed(shard):
            raise self._error(operation, "ResourceNotFoundException", f"Shard {ShardId} not found")
        retained = self.retained(shard)
        oldest = retained[0].sequence_number if retained else self._sequence + 1
        if ShardIteratorType == "TRIM_HORIZON":
            start = shard.starting_sequence_number
        elif ShardIteratorType == "LATEST":
            start = self._sequence + 1
        elif ShardIteratorType == "AT_TIMESTAMP":
            assert Timestamp is not None
            at_ms = int(Timestamp.timestamp() * 1000)
            later = [r.sequence_number for r in retained if r.arrival_ms >= at_ms]
            start = later[0] if later else self._sequence + 1
        else:
            if StartingSequenceNumber is None or not StartingSequenceNumber.isdigit():
                raise self._error(
                    operation, "InvalidArgumentException", "bad StartingSequenceNumber"
                )
            number = int(StartingSequenceNumber)
            if not any(r.sequence_number == number for r in shard.records):
                raise self._error(
                    operation,
                    "InvalidArgumentException",
                    f"StartingSequenceNumber {number} used in GetShardIterator on shard "
                    f"{ShardId} in stream {StreamName} did not come from this stream",
                )
            if number < oldest and self.trimmed_position == REFUSE:
                raise self._error(
                    operation,
                    "InvalidArgumentException",
                    f"StartingSequenceNumber {number} is past the retention period",
                )
            start = number if ShardIteratorType == "AT_SEQUENCE_NUMBER" else number + 1
        return self._response({"ShardIterator": self._issue(ShardId, start)})

    def get_records(self, *, ShardIterator: str, Limit: int = 10_000) -> dict[str, Any]:
        operation = "GetRecords"
        iterator = self._iterators.get(ShardIterator)
        if iterator is None:
            raise self._error(operation, "InvalidArgumentException", "unknown shard iterator")
        if self._expire_after:
            self._expire_after -= 1
            if not self._expire_after:
                self._generation += 1
        now = self._now_ms()
        if iterator.generation != self._generation or now - iterator.issued_ms > (
            ITERATOR_LIFETIME_MS
        ):
            raise self._error(operation, "ExpiredIteratorException", "Iterator expired")
        shard = self.shards[iterator.shard_id]
        if self._throttled.get(shard.shard_id):
            self._throttled[shard.shard_id] -= 1
            raise self._error(operation, "ProvisionedThroughputExceededException", "Rate exceeded")
        ahead = [r for r in self.retained(shard) if r.sequence_number >= iterator.from_sequence]
        if ahead and self._lagging_empty_pages:
            self._lagging_empty_pages -= 1
            page: list[Record] = []
        else:
            page = ahead[:Limit]
        rest = ahead[len(page) :]
        last = page[-1].sequence_number if page else iterator.from_sequence - 1
        ended = shard.is_closed and not rest
        behind = 0
        if rest:
            newest = rest[-1].arrival_ms
            reference = page[-1].arrival_ms if page else rest[0].arrival_ms
            behind = max(1, newest - reference)
        return self._response(
            {
                "Records": [
                    {
                        "SequenceNumber": str(r.sequence_number),
                        "ApproximateArrivalTimestamp": _datetime(r.arrival_ms),
                        "Data": r.data,
                        "PartitionKey": r.partition_key,
                    }
                    for r in page
                ],
                "NextShardIterator": None if ended else self._issue(shard.shard_id, last + 1),
                "MillisBehindLatest": behind,
            }
        )

    # ---------------------------------------------------------------- internals

    def _next_sequence(self) -> int:
        # Steps of varying size, crossing a power of ten now and then, so that numeric
        # and text order differ somewhere in a long run.
        self._sequence += 1 + (self._sequence % 7) * 1_000_003
        return self._sequence

    def _new_shard(self, parent: str | None, adjacent: str | None) -> str:
        shard_id = f"shardId-{next(self._ids):012d}"
        self.shards[shard_id] = SimShard(shard_id, parent, adjacent, self._sequence + 1)
        return shard_id

    def _close(self, shard_id: str) -> None:
        shard = self.shards[shard_id]
        if shard.is_closed:
            raise ValueError(f"{shard_id} is already closed")
        shard.ending_sequence_number = self._next_sequence()
        shard.closed_ms = self._now_ms()

    def _issue(self, shard_id: str, from_sequence: int) -> str:
        token = f"it-{next(self._tokens)}"
        self._iterators[token] = _Iterator(
            shard_id, from_sequence, self._now_ms(), self._generation
        )
        return token

    def _stream(self, name: str, operation: str) -> None:
        self.calls[operation] = self.calls.get(operation, 0) + 1
        if name != self.stream_name:
            raise self._error(operation, "ResourceNotFoundException", f"Stream {name} not found")

    def _response(self, body: dict[str, Any]) -> dict[str, Any]:
        body["ResponseMetadata"] = {"HTTPStatusCode": 200, "HTTPHeaders": self._headers()}
        return body

    def _error(self, operation: str, code: str, message: str) -> ClientError:
        """An error response carries the server's Date header too, as botocore's
        ``ClientError.response`` does for a real one."""
        response: Mapping[str, Any] = {
            "Error": {"Code": code, "Message": message},
            "ResponseMetadata": {"HTTPStatusCode": 400, "HTTPHeaders": self._headers()},
        }
        return ClientError(response, operation)

    def _headers(self) -> dict[str, str]:
        return {"date": format_datetime(_datetime(self._now_ms()), usegmt=True)}


def _datetime(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)
