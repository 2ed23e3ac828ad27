"""The ``kinesis`` Spark streaming data source: a reference Kinesis consumer in Python.

Usage, as in any Spark connector::

    spark.readStream.format("kinesis")
        .option("streamName", "events")
        .option("regionName", "eu-west-1")
        .option("startingPosition", "trim_horizon")
        .load()

Options are listed in :mod:`kinesis_lake.spark.kinesis.options`; the columns in
:mod:`kinesis_lake.spark.kinesis.arrow`. One row is one user record: a KPL aggregate becomes
one row per user record, addressed by (``sequence_number``, ``sub_sequence_number``).

How a micro-batch is made
-------------------------
0. ``.load()`` (driver): the options are parsed and the stream is looked up, so a typo, a
   bad starting position or a missing stream fails (``KinesisOptionError``) before the
   query starts.
1. ``initialOffset`` (driver, for a new query; a query restarted from its checkpoint
   continues from the checkpoint's offsets, which win over ``startingPosition``): one
   DescribeStreamSummary and one ListShards call; every shard gets its starting
   position. ``latest`` is pinned here as "arrived at or after now", so records that
   arrive before the first read are kept.
2. ``latestOffset`` (driver): the progress records of the epoch just completed, the
   stream identity check, one ListShards call, and
   :func:`~kinesis_lake.spark.kinesis.planning.plan_next_offset`, which turns them into
   the next read plan: start position, record limit and byte budget per shard, parents
   before children, Spark's read limit split across shards. No records are read on the driver.
   When the last epoch found the stream idle, the answer for the next
   ``idleTimeBetweenReadsMs`` is "nothing new", given without any API call (twice as long
   after each further empty epoch, up to ``maxIdleTimeBetweenReadsMs``).
3. ``partitions`` (driver): the shards the plan reads, packed into input partitions of
   about ``bytesPerTask`` bytes each by their last reads (:mod:`.task_groups`), so a sink
   writes files that follow the batch's bytes, not the shard count.
4. ``read`` (executors, :mod:`.read_task`): each shard is read with
   :class:`~kinesis_lake.kinesis.shard_reader.ShardReader` (at most one GetRecords call
   per ``minCallIntervalMs`` per shard, across epochs too; jittered backoff on
   throttling, LimitExceeded and 5xx; expired iterators renewed; bounded retries ending
   in an error that names shard and cause; KPL aggregates split, corrupt aggregates kept
   whole with ``source_error`` set), yields
   Arrow batches as records arrive, and finally records where it stopped in the
   :class:`~kinesis_lake.spark.kinesis.progress.ShardProgressStore`. With
   ``consumerType=efo`` a fresh read goes over SubscribeToShard under the query's
   consumer, which the driver registers when it first plans partitions (docs/efo.md).
5. ``commit`` (driver): progress records older than a few epochs are deleted.

Why a replayed micro-batch holds the same records
-------------------------------------------------
Spark writes an epoch's plan to its offset log before running it. If the query dies
before the batch is marked committed, the restarted query runs the same plan again.
Each task first looks for its shard's progress record of that epoch:

* found: the first attempt finished reading the shard, so the retry reads from the same
  start up to exactly the recorded last sequence number. Kinesis records are immutable,
  so that is the same set of records, whatever arrived since. (Only retention can take
  records out of the range in between; a range that resumes after a known record then
  reports the gap as data loss.)
* not found: the first attempt never finished reading this shard, so its batch was
  never complete and no sink committed it (the record is written before the task's
  output is complete). Reading afresh, under the same limit and cutoff, is safe.

So every batch a sink may have committed replays identically, and a sink that skips
batch ids it already committed (ours does) gets exactly-once end to end. A KPL aggregate
is never split across batches: limits count Kinesis records (byte budgets their bytes),
and an aggregate is one.

Stream identity: the initial offset stores the stream's creation time; a checkpoint taken
from a stream that was since deleted and re-created under the same name is refused.

Observability: once an epoch's batch has committed, the driver writes ``status.json``
beside the progress records (see :func:`.progress.source_status`): the batch's records,
every shard's ``MillisBehindLatest`` and reader, data-loss ranges skipped, finished shards.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence

import pyarrow as pa
import pyspark
from botocore.exceptions import NoRegionError
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from kinesis_lake.kinesis.client import KinesisClient, kinesis_client
from kinesis_lake.kinesis.consumers import (
    Consumer,
    deregister_consumer,
    ensure_consumer,
    find_consumer,
)
from kinesis_lake.kinesis.streams import (
    StreamInfo,
    StreamNotFoundError,
    describe_stream,
    list_shards,
)
from kinesis_lake.spark.datasource_api import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from kinesis_lake.spark.kinesis.arrow import KINESIS_SCHEMA_DDL
from kinesis_lake.spark.kinesis.earlier_runs import with_earlier_runs
from kinesis_lake.spark.kinesis.offsets import SourceOffset, SourcePlanningError
from kinesis_lake.spark.kinesis.options import (
    KinesisOptionError,
    KinesisSourceOptions,
    check_against_stream,
)
from kinesis_lake.spark.kinesis.planning import PlanningInput, plan_next_offset, resting
from kinesis_lake.spark.kinesis.progress import ProgressRecord, ShardProgressStore, source_status
from kinesis_lake.spark.kinesis.read_task import ShardReadTask, read_shard
from kinesis_lake.spark.kinesis.task_groups import (
    ShardGroupTask,
    estimated_bytes,
    grouped_partitions,
    read_group,
)
from kinesis_lake.spark.packing import pack_by_bytes
from kinesis_lake.spark.spark_version import require_spark

logger = logging.getLogger(__name__)


class KinesisDataSource(DataSource):
    """Spark data source ``kinesis`` (streaming read only).

    Spark builds this on the driver when the query is defined (``.load()``); the options
    are checked here, against the stream too, so errors come before the query starts.
    """

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        require_spark(pyspark.__version__)
        self.parsed = KinesisSourceOptions.parse(options)
        _check_stream(self.parsed)

    @classmethod
    def name(cls) -> str:
        return "kinesis"

    def schema(self) -> str:
        return KINESIS_SCHEMA_DDL

    def streamReader(self, schema: StructType) -> KinesisStreamReader:
        if self.parsed.metadata_path_defaulted:
            # Spark gives a Python source its options only, never the query's checkpoint,
            # so the default cannot sit beside it: say where the records go instead.
            logger.warning(
                "kinesis source: metadataPath not set; progress records of stream %s go to "
                "%s. Set .option('metadataPath', ...) beside the query's checkpoint "
                "(shared storage on a cluster) so the two move together.",
                self.parsed.stream_name,
                self.parsed.metadata_path,
            )
        return KinesisStreamReader(self.parsed)


def _check_stream(options: KinesisSourceOptions) -> None:
    """Refuse a stream that does not exist, or a JSON start naming shards it lacks."""
    try:
        client = kinesis_client(options.endpoint_url, options.region_name, role=options.role)
    except NoRegionError:
        raise KinesisOptionError(
            "No AWS region: set .option('regionName', 'us-east-1') or AWS_REGION."
        ) from None
    try:
        describe_stream(client, options.stream_name)
    except StreamNotFoundError as error:
        raise KinesisOptionError(f"Option 'streamName': {error}") from error
    if options.per_shard_start:
        check_against_stream(options, list_shards(client, options.stream_name))


class KinesisStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Driver half (planning) and executor half (``read``) of the ``kinesis`` source."""

    def __init__(self, options: KinesisSourceOptions) -> None:
        self.options = options
        self._client: KinesisClient | None = None
        # availableNow: Spark 4.0/4.1's bounded runs (available_now.py); the reader is
        # made when the query starts, as 4.2+ call prepareForTriggerAvailableNow.
        self._cutoff_ms: int | None = _now_ms() if options.available_now else None
        self._initial: dict | None = None
        self._newest: dict | None = None
        self._status_epoch: int | None = None
        self._plan_epoch: int | None = None
        self._loaded: tuple[tuple[str, int], dict[str, ProgressRecord]] | None = None
        self._store = ShardProgressStore(options.metadata_path)
        self._consumer: Consumer | None = None

    def __getstate__(self) -> dict:
        # Spark ships the reader to executors for read(); clients and filesystems are
        # rebuilt there from the task, never pickled.
        state = dict(self.__dict__)
        state["_client"] = None
        state["_store"] = None
        return state

    def _kinesis(self) -> KinesisClient:
        if self._client is None:
            self._client = kinesis_client(
                self.options.endpoint_url, self.options.region_name, role=self.options.role
            )
        return self._client

    # ---- driver: planning -------------------------------------------------------------
    def initialOffset(self) -> dict:
        # Asked twice by Spark 4.2+ and after the first latestOffset() by 4.0/4.1:
        # every answer must be the same offset (one run id).
        if self._initial is None:
            self._initial = self._first_offset()
        return self._initial

    def _first_offset(self) -> dict:
        stream = describe_stream(self._kinesis(), self.options.stream_name)
        shards = list_shards(self._kinesis(), self.options.stream_name)
        start, new_shard_start = self.options.initial_start(_now_ms())
        offset = SourceOffset.initial(
            stream_created_ms=stream.created_at_ms,
            shards=shards,
            start=start,
            new_shard_start=new_shard_start,
            per_shard_start=self.options.per_shard_start,
            started_ms=stream.server_ms,
        )
        offset = with_earlier_runs(offset, self._store, self.options, shards)
        return self._record_plan(offset)

    def getDefaultReadLimit(self) -> ReadLimit:
        """Spark's limit per micro-batch: ``maxRecordsPerBatch``, else ``maxBytesPerBatch``.

        Spark takes one limit from a Python source; with both options set the byte cap
        rides beside Spark's ReadMaxRows (:func:`batch_caps`). ``maxRecordsPerShard`` and
        ``maxBytesPerShard`` are not Spark read limits and apply under any limit,
        ReadAllAvailable included: they bound what one executor task reads and holds.
        """
        if self.options.max_records_per_batch is not None:
            return ReadMaxRows(self.options.max_records_per_batch)
        if self.options.max_bytes_per_batch is not None:
            return ReadMaxBytes(self.options.max_bytes_per_batch)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        # "Everything that exists now" is expressed as an arrival-time cutoff, because
        # the driver cannot learn each shard's last sequence number without reading it.
        self._cutoff_ms = _now_ms()

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        """Plan the epoch after ``start``. Spark calls this only once the batch that read
        ``start`` has committed, so its progress records are complete.

        Spark 4.0/4.1 pass no arguments (they have no read limits): the plan then follows
        the newest offset Spark has logged, which ``partitions`` is always told, under
        the default limit."""
        if start is None:
            newest = self._newest or self.initialOffset()
            return self._remember(self.latestOffset(newest, self.getDefaultReadLimit()))
        current = SourceOffset.from_dict(start)
        records = self._completed_epoch(current)
        self._publish_status(current, records)
        outcomes = {shard_id: r.outcome for shard_id, r in records.items()}
        now_ms = _now_ms()
        if self._cutoff_ms is None and resting(
            current, outcomes, now_ms, self.options.idle_ms, self.options.max_idle_ms
        ):
            # Spark asks again within milliseconds under the default trigger: answering
            # without API calls keeps an idle query far below the control-plane limits.
            return start
        stream = self._check_stream_identity(current)
        max_rows, max_bytes = batch_caps(limit, self.options.max_bytes_per_batch)
        planned = plan_next_offset(
            current,
            PlanningInput(
                listed_shards=list_shards(self._kinesis(), self.options.stream_name),
                outcomes=outcomes,
                max_records_per_shard=self.options.max_records_per_shard,
                max_rows=max_rows,
                max_bytes=max_bytes,
                max_bytes_per_shard=self.options.max_bytes_per_shard,
                now_ms=now_ms,
                cutoff_ms=self._cutoff_ms,
                idle_ms=self.options.idle_ms,
                max_idle_ms=self.options.max_idle_ms,
                fail_on_data_loss=self.options.fail_on_data_loss,
                listed_ms=stream.server_ms,
            ),
        )
        return self._record_plan(planned)

    def _record_plan(self, planned: SourceOffset) -> dict:
        """``planned`` for Spark's offset log, kept beside the progress records too: a
        query started after this one's checkpoint is lost learns from it when the stream
        was listed and since when this deployment reads it (:mod:`.earlier_runs`)."""
        if planned.epoch != self._plan_epoch:
            self._store.write_plan(planned.run_id, planned.to_dict())
            self._plan_epoch = planned.epoch
        return planned.to_dict()

    def _completed_epoch(self, done: SourceOffset) -> dict[str, ProgressRecord]:
        """The progress records of epoch ``done``, read once: they never change, and Spark
        asks for the next offset of an idle stream many times a second."""
        key = (done.run_id, done.epoch)
        if self._loaded is None or self._loaded[0] != key:
            records = self._store.load_epoch(done.run_id, done.epoch, done.shards_to_read())
            self._loaded = (key, records)
        return self._loaded[1]

    def _check_stream_identity(self, offset: SourceOffset) -> StreamInfo:
        stream = describe_stream(self._kinesis(), self.options.stream_name)
        if stream.created_at_ms != offset.stream_created_ms:
            raise SourcePlanningError(
                f"Stream {self.options.stream_name!r} was created at {stream.created_at_ms} ms "
                f"but this query's checkpoint was taken from a stream created at "
                f"{offset.stream_created_ms} ms: the stream was deleted and re-created, so "
                "the checkpoint's sequence numbers mean nothing here. Start the query with "
                "a new checkpointLocation to read the new stream."
            )
        return stream

    def _publish_status(self, done: SourceOffset, records: Mapping[str, ProgressRecord]) -> None:
        """Write status.json once per completed epoch (idle polls re-plan the same one)."""
        if done.epoch == 0 or done.epoch == self._status_epoch:
            return
        previous = self._store.read_status(done.run_id)
        if previous is None or int(previous["epoch"]) < done.epoch:
            self._store.write_status(done.run_id, source_status(done, records, previous))
        self._status_epoch = done.epoch

    def _remember(self, offset: dict) -> dict:
        """``offset``, kept if it is the newest Spark has seen (epochs only grow)."""
        if self._newest is None or offset["epoch"] >= self._newest["epoch"]:
            self._newest = offset
        return offset

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        # On 4.0/4.1 a restarted query names its last logged offset only here, as
        # partitions(X, X), before its first latestOffset().
        self._remember(end)
        if start == end:
            return []
        plan = SourceOffset.from_dict(end)
        # A replay after a restart comes here without a latestOffset call first.
        stream = self._check_stream_identity(plan)
        not_before_ms = plan.planned_ms + int(self.options.min_call_interval_s * 1000)
        reads = [
            ShardReadTask(
                stream_name=self.options.stream_name,
                shard_id=shard_id,
                region_name=self.options.region_name,
                endpoint_url=self.options.endpoint_url,
                role=self.options.role,
                run_id=plan.run_id,
                epoch=plan.epoch,
                start=plan.shards[shard_id].to_dict()["start"],
                limit=plan.shards[shard_id].limit,
                max_bytes=plan.shards[shard_id].max_bytes,
                listed_open=not plan.shards[shard_id].closed,
                cutoff_ms=plan.cutoff_ms,
                quiet_since_ms=plan.quiet_since(shard_id),
                retention_ms=stream.retention_hours * 3_600_000,
                processed_through=_processed_through(self.options, shard_id),
                not_before_ms=not_before_ms,
                metadata_path=self.options.metadata_path,
                fail_on_data_loss=self.options.fail_on_data_loss,
                min_call_interval_s=self.options.min_call_interval_s,
                max_retries=self.options.max_retries,
                consumer_arn=self._consumer_arn(stream),
            )
            for shard_id in plan.shards_to_read()
        ]
        return self._grouped(SourceOffset.from_dict(start), plan, reads)

    def _grouped(
        self, start: SourceOffset, plan: SourceOffset, reads: list[ShardReadTask]
    ) -> list[InputPartition]:
        """``reads`` packed into tasks by the bytes each shard is expected to give
        (:mod:`.task_groups`), guessed from the progress records of ``start``'s epoch."""
        if self.options.bytes_per_task == 0:
            return list(reads)
        cursors = {read.shard_id: plan.shards[read.shard_id] for read in reads}
        last = {sid: r.outcome for sid, r in self._completed_epoch(start).items()}
        groups = pack_by_bytes(
            estimated_bytes(cursors, last), self.options.bytes_per_task, self.options.min_tasks
        )
        return grouped_partitions(reads, groups)

    def _consumer_arn(self, stream: StreamInfo) -> str | None:
        """For efo, the query's consumer, registered on first use (on the driver)."""
        if self.options.consumer_type != "efo":
            return None
        if self._consumer is None:
            self._consumer = ensure_consumer(
                self._kinesis(), stream.arn, self.options.consumer_name
            )
        return self._consumer.arn

    def commit(self, end: dict) -> None:
        done = SourceOffset.from_dict(end)
        self._store.forget_before(done.run_id, done.epoch)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        # Executors' half: Spark pickles this reader to them, and the task says it all.
        if isinstance(partition, ShardGroupTask):
            return read_group(partition)
        return read_shard(partition)  # type: ignore[arg-type]


def batch_caps(
    limit: ReadLimit | None, max_bytes_per_batch: int | None
) -> tuple[int | None, int | None]:
    """The epoch's (records, bytes) caps over all shards under Spark's ``limit``.

    Spark 4.2+ passes the default limit back (``getDefaultReadLimit``), or
    ReadAllAvailable (``Trigger.Once``), which lifts both batch caps; 4.0/4.1 pass none,
    and the reader uses its default. A byte cap Spark cannot carry beside ReadMaxRows
    comes from the option.
    """
    if isinstance(limit, ReadMaxRows):
        return limit.max_rows, max_bytes_per_batch
    if isinstance(limit, ReadMaxBytes):
        return None, limit.max_bytes
    return None, None


def release_consumer(options: Mapping[str, str]) -> None:
    """Deregister the consumer an ``efo`` query with these options read as, once the query
    has stopped; a no-op for polling and for a consumer named in ``consumerName`` (the
    user's to manage).

    The source cannot do it itself: Spark ends a Python source's driver process without
    calling its ``stop()``. The consumer is registered again when the query next starts.
    """
    parsed = KinesisSourceOptions.parse(options)
    if parsed.consumer_type != "efo" or not parsed.consumer_name_defaulted:
        return
    client = kinesis_client(parsed.endpoint_url, parsed.region_name, role=parsed.role)
    stream = describe_stream(client, parsed.stream_name)
    found = find_consumer(client, stream.arn, parsed.consumer_name)
    if found is not None:
        deregister_consumer(client, found)


def _processed_through(options: KinesisSourceOptions, shard_id: str) -> str | None:
    """The last sequence number a JSON startingPosition says was already processed."""
    start = options.per_shard_start.get(shard_id)
    return start.sequence_number if start is not None else None


def _now_ms() -> int:
    return int(time.time() * 1000)
