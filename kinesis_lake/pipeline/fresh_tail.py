"""A fresh read's tail: each shard of a stream read straight from Kinesis past the raw
table's committed positions, up to now, as raw-table rows not committed yet.

Split from :mod:`kinesis_lake.pipeline.fresh_read`, which assembles these rows with the
tables' snapshots. Where a shard's read starts and what counts as loss follow ingestion's
rules: after its committed position; a shard without one from where ingestion starts it
(the backlog probe's start, with ``latest`` the shard's recorded read to its tip: none on
record and the shard is left out, named); each shard's recorded read to its tip and the
stream's retention tell a quiet shard from records that expired unread. Bounded by
:class:`TailLimits`; what is not read is named in ``Tail.left_out``, a child shard waits
for its parents as the Spark source does, and the rows read are each shard's oldest, so
never a gap.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import pyarrow as pa
from botocore.exceptions import ClientError

from kinesis_lake.config import Settings
from kinesis_lake.iceberg.raw_table import RAW_ARROW_SCHEMA
from kinesis_lake.kinesis.client import KinesisClient
from kinesis_lake.kinesis.consumers import ConsumerError, ensure_consumer
from kinesis_lake.kinesis.records import KinesisRecord
from kinesis_lake.kinesis.shard_calls import ShardReadError
from kinesis_lake.kinesis.shard_reader import ReadOutcome, ShardReader
from kinesis_lake.kinesis.start_positions import StartPosition
from kinesis_lake.kinesis.streams import Shard, describe_stream, list_shards, shard_lineage_order
from kinesis_lake.kinesis.subscription import subscription_held
from kinesis_lake.pipeline.backlog import probe_starts
from kinesis_lake.pipeline.earlier_reads import READ_TO_TIP
from kinesis_lake.spark.kinesis.arrow import records_to_arrow

# Columns the pipeline stamps when it commits a raw row: a row still in the stream has
# none yet, and reads as null there (which also tells the two kinds of row apart).
RAW_STAMPS = ("ingested_at", "batch_id")


@dataclass(frozen=True)
class TailLimits:
    """How much of the stream one fresh read takes at most.

    ``max_records``: Kinesis records taken over all shards (an aggregate counts once); up
    to twice as many may be read from Kinesis where the cap binds (:class:`_ReadAhead`).
    ``max_age_s``: a shard whose oldest uncommitted record arrived longer ago than this is
    left out whole (None: no such limit). ``max_bytes``: bytes of Kinesis records taken
    over all shards, as Kinesis counts a record (data and partition key); a record that
    would pass it is left out, unless it is the tail's first (None: no such limit; with
    one, shards are read one after another). Either way the shards left out are reported.
    """

    max_records: int = 100_000
    max_age_s: float | None = None
    max_bytes: int | None = None

    def __post_init__(self) -> None:
        if self.max_records < 1:
            raise ValueError("max_records must be at least 1")
        if self.max_age_s is not None and self.max_age_s <= 0:
            raise ValueError("max_age_s must be positive (or None)")
        if self.max_bytes is not None and self.max_bytes < 1:
            raise ValueError("max_bytes must be at least 1 (or None)")


DEFAULT_LIMITS = TailLimits()
"""A fresh read's limits unless told otherwise."""


@dataclass(frozen=True)
class LeftOut:
    """A shard's records the read did not take: those after ``after_sequence_number``
    (None: all of its records past where ingestion starts it)."""

    shard_id: str
    after_sequence_number: str | None
    reason: str


@dataclass
class Tail:
    """The stream's records past the committed positions, as the raw table's rows."""

    rows: pa.Table
    shards_read: int
    left_out: list[LeftOut]
    warnings: list[str]
    subscribed: int = 0
    """Shards read through the fresh reads' enhanced fan-out consumer."""
    polled_while_held: list[str] = field(default_factory=list)
    """Shards read by GetRecords instead: the consumer still held their subscription (one
    per consumer and shard every 5 s, so fresh reads that close together poll)."""


def read_tail(
    client: KinesisClient,
    stream: Settings,
    positions: dict[str, str],
    tips: dict[str, int],
    limits: TailLimits,
    cutoff_ms: int,
) -> Tail:
    """Every shard after its committed position, parents to their end before children,
    records that arrived up to ``cutoff_ms`` (now), within ``limits``; one pass each,
    subscribed as the fresh reads' own consumer where one is configured
    (:func:`_fresh_consumer_arn`), and polled after a refused subscription.
    ``tips``: each shard's last read to its tip by ingestion (server ms), which tells a
    quiet shard from records that expired unread, as in ingestion's reads."""
    description = describe_stream(client, stream.stream_name)
    retention_ms = description.retention_hours * 3_600_000
    warnings: list[str] = []
    consumer_arn = _fresh_consumer_arn(client, stream, description.arn, warnings)
    shards = list_shards(client, stream.stream_name)
    listed = {shard.shard_id for shard in shards}
    starts = _starts(stream, tips)
    budget, bytes_left = limits.max_records, limits.max_bytes
    finished: set[str] = set()
    batches: list[pa.RecordBatch] = []
    left_out: list[LeftOut] = []
    shards_read = subscribed = 0
    polled_while_held: list[str] = []
    ordered = shard_lineage_order(shards)

    def read_of(
        shard: Shard, max_records: int, after: str | None = None, max_bytes: int | None = None
    ) -> _ShardRead | None:
        committed = positions.get(shard.shard_id)
        start = (
            StartPosition.after(after)
            if after is not None
            else _start(shard.shard_id, committed, starts, stream.starting_position)
        )
        if start is None:
            return None
        return functools.partial(
            _read_shard,
            client,
            stream.stream_name,
            shard.shard_id,
            start,
            max_records=max_records,
            max_bytes=max_bytes,
            arrival_cutoff_ms=cutoff_ms,
            quiet_since_ms=tips.get(shard.shard_id),
            retention_ms=retention_ms,
            listed_open=not shard.is_closed,
        )

    # A byte cap is taken shard after shard: a read ahead would need a share of it too.
    ahead_of = ordered if consumer_arn is None and bytes_left is None else []
    with _ReadAhead(ahead_of, listed, read_of, budget) as ahead:
        for shard in ordered:
            committed = positions.get(shard.shard_id)
            waiting = [p for p in shard.parent_ids if p in listed and p not in finished]
            if waiting:
                reason = f"waits for its parent {', '.join(waiting)} to be read to its end"
                left_out.append(LeftOut(shard.shard_id, committed, reason))
                continue
            if budget < 1 or (bytes_left is not None and bytes_left < 1):
                left_out.append(LeftOut(shard.shard_id, committed, _cap_reached(limits, budget)))
                continue
            read = read_of(shard, budget, max_bytes=bytes_left)
            if read is None:
                left_out.append(LeftOut(shard.shard_id, None, _UNKNOWN_START))
                continue
            if consumer_arn is None:
                records, outcome = ahead.taken(shard, budget) or read(None)
            else:
                try:
                    records, outcome = read(consumer_arn)
                    subscribed += 1
                except ShardReadError as error:
                    if not subscription_held(error):
                        raise
                    # What the subscription gave is dropped: the same start, polled.
                    records, outcome = read(None)
                    polled_while_held.append(shard.shard_id)
            shards_read += 1
            if outcome.data_loss:
                warnings.append(f"{shard.shard_id}: {outcome.data_loss}")
            too_old = _too_old(records, limits, cutoff_ms)
            if too_old:
                left_out.append(LeftOut(shard.shard_id, committed, too_old))
                continue
            if _past_the_byte_cap(limits, bytes_left, outcome):
                left_out.append(LeftOut(shard.shard_id, committed, _cap_reached(limits, budget)))
                continue
            budget -= outcome.records_read
            if bytes_left is not None:
                bytes_left -= outcome.bytes_read
            if outcome.stopped_by in _CAPS:
                cap = _cap_reached(limits, 0 if outcome.stopped_by == "limit" else budget)
                left_out.append(LeftOut(shard.shard_id, outcome.last_sequence_number, cap))
            # A shard closed before this read that caught up has no record left: kinesalite
            # may still hand out an iterator after its last record (see plan_next_offset).
            elif outcome.shard_ended or (shard.is_closed and outcome.caught_up):
                finished.add(shard.shard_id)
            if records:
                batches.append(records_to_arrow(stream.stream_name, shard.shard_id, records))
    rows = pa.Table.from_batches(batches) if batches else None
    return Tail(_as_raw_rows(rows), shards_read, left_out, warnings, subscribed, polled_while_held)


_CAPS = ("limit", "bytes", "over_bytes")
"""How a shard's read stops at the tail cap (records, bytes)."""


def _past_the_byte_cap(limits: TailLimits, bytes_left: int | None, outcome: ReadOutcome) -> bool:
    """Whether a shard's read is one record larger than the byte cap left: the shard
    reader reads a read's first record whatever its size (ingestion must get past it), but
    only the tail's first record may pass the cap."""
    if limits.max_bytes is None or bytes_left is None or bytes_left == limits.max_bytes:
        return False
    return outcome.bytes_read > bytes_left


def _cap_reached(limits: TailLimits, records_left: int) -> str:
    if records_left < 1:
        return f"the tail cap of {limits.max_records} records was reached"
    return f"the tail cap of {limits.max_bytes} bytes was reached"


_ShardRead = Callable[[str | None], tuple[list[KinesisRecord], ReadOutcome]]
"""One shard's read, given the consumer to subscribe as (None: polled)."""


class _ReadOf(Protocol):
    def __call__(
        self,
        shard: Shard,
        max_records: int,
        after: str | None = None,
        max_bytes: int | None = None,
    ) -> _ShardRead | None:
        """The shard's read of ``max_records`` (and ``max_bytes``) from where it starts (or
        ``after`` that record); None: its start is unknown."""


MAX_READS_AHEAD = 4
"""Shards read at once by :class:`_ReadAhead`: each reader may have two calls under way
(its own and the page it fetches ahead), and the client shared by the read keeps 10
connections (botocore's default pool)."""


class _ReadAhead:
    """Polled shard reads started together, before the loop that takes them in lineage
    order.

    One after another, each shard costs two round trips (GetShardIterator, GetRecords):
    on the benchmark's 4 shards beside the pipeline, most of a fresh read's time. Read
    ahead are the shards that no listed parent precedes, each with an equal share of the
    record cap (none when there are more such shards than records in the cap). The loop
    takes a read ahead where it is exactly what its own read would return: the same
    ``max_records``, or a read that stopped before its share and the budget left. One that
    the cap stopped short of the budget left is read on from its last record, so the
    shard's records are read once; one that read past the budget left (earlier shards took
    their share and more) or failed is read again by the loop itself. What is read from
    Kinesis is then at most twice the cap, what is taken at most the cap, as before.
    Not where a consumer subscribes: one subscription per shard at a time is Kinesis's
    rule, and the subscribed path falls back shard by shard.
    """

    def __init__(
        self,
        shards: Sequence[Shard],
        listed: set[str],
        read_of: _ReadOf,
        budget: int,
    ) -> None:
        self._read_of = read_of
        roots = [
            shard
            for shard in shards
            if not any(parent in listed for parent in shard.parent_ids)
            and read_of(shard, 1) is not None
        ]
        self._share = budget // len(roots) if roots else budget
        self._pool: ThreadPoolExecutor | None = None
        self._ahead: dict[str, Future[tuple[list[KinesisRecord], ReadOutcome]]] = {}
        if len(roots) > 1 and self._share >= 1:
            self._pool = ThreadPoolExecutor(min(MAX_READS_AHEAD, len(roots)), "fresh-tail")
            for shard in roots:
                read = read_of(shard, self._share)
                assert read is not None
                self._ahead[shard.shard_id] = self._pool.submit(read, None)

    def taken(self, shard: Shard, budget: int) -> tuple[list[KinesisRecord], ReadOutcome] | None:
        """The shard's records and outcome as a read with ``budget`` returns them, from its
        read ahead; None: read it."""
        ahead = self._ahead.pop(shard.shard_id, None)
        if ahead is None:
            return None
        try:
            records, outcome = ahead.result()
        except Exception:  # the loop's own read decides (it raises if it fails too)
            return None
        if self._share == budget or (
            outcome.stopped_by != "limit" and outcome.records_read < budget
        ):
            return records, outcome
        if outcome.stopped_by != "limit" or outcome.records_read >= budget:
            return None
        assert outcome.last_sequence_number is not None  # the cap stops on a record
        rest = self._read_of(
            shard, budget - outcome.records_read, after=outcome.last_sequence_number
        )
        assert rest is not None  # a start after a record is known
        more, then = rest(None)
        return records + more, _joined(outcome, then)

    def __enter__(self) -> _ReadAhead:
        return self

    def __exit__(self, *_: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)


def _joined(first: ReadOutcome, then: ReadOutcome) -> ReadOutcome:
    """One read's outcome from a read and the read on from its last record."""
    return replace(
        then,
        records_read=first.records_read + then.records_read,
        user_records=first.user_records + then.user_records,
        bytes_read=first.bytes_read + then.bytes_read,
        last_sequence_number=then.last_sequence_number or first.last_sequence_number,
        last_arrival_ms=then.last_arrival_ms or first.last_arrival_ms,
        calls=first.calls + then.calls,
        retries=first.retries + then.retries,
        iterator_renewals=first.iterator_renewals + then.iterator_renewals,
        data_loss=first.data_loss or then.data_loss,
        read_started_ms=first.read_started_ms,
    )


CONSUMER_WAIT_S = 30.0
"""How long a fresh read waits for its consumer to become ACTIVE (seconds on AWS, once)
before it polls instead."""


def _fresh_consumer_arn(
    client: KinesisClient, stream: Settings, stream_arn: str, warnings: list[str]
) -> str | None:
    """The consumer fresh reads subscribe as (``KINESIS_LAKE_FRESH_CONSUMER``), registered
    if need be; None to poll.

    Where it is set, the shards' shared GetRecords budget (2 MB/s, 5 calls/s) is kept for
    the stream's other readers. Never ingestion's consumer: a consumer holds one
    subscription per shard, and a fresh read would take ingestion's. A consumer that cannot
    be had (an identity without kinesis:RegisterStreamConsumer, a stream with its 20
    consumers, throttling) is warned of and the read polls, as it did without one.
    """
    name = stream.fresh_consumer
    if not name:
        return None
    try:
        return ensure_consumer(client, stream_arn, name, timeout_s=CONSUMER_WAIT_S).arn
    except (ConsumerError, ClientError) as refused:
        warnings.append(f"polled: the fresh reads' consumer {name!r} is not to be had ({refused})")
        return None


def _read_shard(
    client: KinesisClient,
    stream_name: str,
    shard_id: str,
    start: StartPosition,
    consumer_arn: str | None,
    **limits: Any,
) -> tuple[list[KinesisRecord], ReadOutcome]:
    """One shard's records past ``start``: by GetRecords, or subscribed under
    ``consumer_arn`` without waiting for a subscription the consumer still holds."""
    reader = ShardReader(
        client, stream_name, shard_id, consumer_arn=consumer_arn, wait_if_held=False
    )
    records = [record for batch in reader.read(start, **limits) for record in batch]
    assert reader.outcome is not None  # the generator ran to its end
    return records, reader.outcome


_UNKNOWN_START = (
    "KINESIS_STARTING_POSITION=latest and no read of it to its tip is on record (the raw "
    f"table's {READ_TO_TIP}, the source's status): where ingestion starts it is unknown"
)


def _starts(stream: Settings, tips: dict[str, int]) -> dict[str, dict]:
    """GetShardIterator arguments of shards without a committed position: the backlog
    probe's, and with ``latest`` each shard's recorded read to its tip. Exact: a shard
    without a committed record was empty at that read, so ingestion commits only records
    that arrived after it (and none before its pinned start, which came first)."""
    starts = probe_starts(stream)
    if stream.starting_position == "latest":
        for shard_id, tip_ms in tips.items():
            starts.setdefault(shard_id, StartPosition.at_timestamp(tip_ms).iterator_args())
    return starts


def _start(
    shard_id: str, committed: str | None, starts: dict[str, dict], configured: str
) -> StartPosition | None:
    """After the committed position; a shard without one where ingestion would start it
    (the configured start, else its oldest record), None where that is unknown: with
    ``latest``, ingestion pins the start in a checkpoint this machine may not have, and
    reading from the oldest record would show records no run will ever commit."""
    if committed is not None:
        return StartPosition.after(committed)
    args = starts.get(shard_id, starts.get("*"))
    if args is None:
        return None if configured == "latest" else StartPosition.trim_horizon()
    return StartPosition.at_timestamp(round(args["Timestamp"].timestamp() * 1000))


def _too_old(records: Sequence[KinesisRecord], limits: TailLimits, now_ms: int) -> str | None:
    if limits.max_age_s is None or not records:
        return None
    behind_s = (now_ms - records[0].arrival_ms) / 1000
    if behind_s <= limits.max_age_s:
        return None
    return (
        f"the pipeline is {behind_s:.0f} s behind on it, more than the tail's age limit "
        f"of {limits.max_age_s:g} s"
    )


def raw_arrow_schema() -> pa.Schema:
    return relaxed(RAW_ARROW_SCHEMA, RAW_STAMPS)


def _as_raw_rows(rows: pa.Table | None) -> pa.Table:
    """Source rows as raw-table rows, with the commit's stamps null."""
    schema = raw_arrow_schema()
    if rows is None:
        return schema.empty_table()
    stamps = [pa.nulls(rows.num_rows, schema.field(name).type) for name in RAW_STAMPS]
    return pa.Table.from_arrays([*rows.columns, *stamps], schema=schema)


def relaxed(schema: pa.Schema, names: Sequence[str]) -> pa.Schema:
    """``schema`` with the columns ``names`` nullable."""
    for name in names:
        index = schema.get_field_index(name)
        if index >= 0:
            schema = schema.set(index, schema.field(index).with_nullable(True))
    return schema
