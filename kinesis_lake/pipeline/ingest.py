"""The ingestion job: Kinesis stream -> ``kinesis`` source -> Iceberg sink -> raw table.

One function serves the CLI (``kinesis-lake ingest`` / ``stream``), the Dagster asset and
the tests, so they all run the same code path. A bounded run drains what the stream holds
when the run starts, in micro-batches of at most ``max_records_per_shard`` records per shard,
and stops: ``trigger(availableNow=True)`` on Spark 4.2+, an equivalent on 4.0/4.1
(:mod:`kinesis_lake.spark.kinesis.available_now`). The
continuous mode uses a processing-time trigger and stops when asked, after the batch
in flight has committed.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import fsspec
from pyiceberg.table import Table
from pyiceberg.table.snapshots import ancestors_of
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from kinesis_lake.config import Settings
from kinesis_lake.iceberg.catalog import ensure_namespace
from kinesis_lake.iceberg.raw_table import ensure_raw_table
from kinesis_lake.iceberg.summary import BATCH_ID, WRITER_ID, committed_positions
from kinesis_lake.pipeline.earlier_reads import earlier_reads, record_earlier_reads
from kinesis_lake.pipeline.lake import open_lake
from kinesis_lake.spark.iceberg.sink import SINK_NAME
from kinesis_lake.spark.kinesis.available_now import AvailableNow
from kinesis_lake.spark.kinesis.offsets import SourceOffset
from kinesis_lake.spark.kinesis.options import EarlierReads
from kinesis_lake.spark.kinesis.progress import ShardProgressStore
from kinesis_lake.spark.kinesis.source import release_consumer
from kinesis_lake.spark.spark_version import progress_offset

logger = logging.getLogger(__name__)


@dataclass
class BatchReport:
    """One committed micro-batch, as the continuous mode reports it.

    ``raw_rows_total`` and ``snapshot_id`` describe the raw table as this batch left it
    (not as it is when the report is made: later batches may have committed since), so a
    plot of reported row counts is exact. ``skipped_ranges`` is the source's running count
    of data-loss gaps, as in ``IngestResult``, so the data-loss check can rely on it.
    """

    batch_id: int
    rows: int
    seconds: float
    raw_rows_total: int
    snapshot_id: int | None
    max_millis_behind_latest: int
    skipped_ranges: int
    millis_behind_latest: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class SkippedGap:
    """A range a run skipped as data loss (failOnDataLoss=false), and why.

    The error of the run that failed on it names only the shard whose task failed first;
    when several shards lost records in one batch, the others are named only here, and an
    operator needs each of them to re-send what was lost.
    """

    shard_id: str
    epoch: int
    detail: str


@dataclass
class IngestResult:
    """What a run did, in numbers a dashboard can plot; ``skipped_gaps`` are the data-loss
    gaps this run skipped (``skipped_ranges`` counts those of the checkpoint's life)."""

    batches: int
    rows: int
    seconds: float
    raw_rows_total: int
    snapshot_id: int | None
    max_millis_behind_latest: int
    millis_behind_latest: dict[str, int]
    skipped_ranges: int
    shards_read: int
    skipped_gaps: list[SkippedGap] = field(default_factory=list)

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0


def checkpoint_location(settings: Settings) -> str:
    return f"{settings.checkpoint_dir.rstrip('/')}/{settings.namespace}/{settings.raw_table_name}"


def source_metadata_path(settings: Settings) -> str:
    """Beside the checkpoint by default, so the two move together between machines.

    Its own folder when Spark's checkpoint must stay where executors cannot see it
    (driver-local disk, because Spark has no S3 filesystem): executors write these
    records and the driver reads them, so they need storage both share, such as s3://.
    """
    root = settings.source_progress_dir.rstrip("/")
    return f"{root}/{settings.namespace}/{settings.raw_table_name}/kinesis-source"


def prepare_raw_table(settings: Settings) -> Table:
    """The deployment's raw table, its namespace and the table created or evolved first:
    the sink's commits and the query's start position read it before the first batch."""
    catalog = open_lake(settings)
    ensure_namespace(catalog, settings.namespace)
    return ensure_raw_table(catalog, settings.raw_table)


def _byte_cap(settings: Settings) -> dict[str, str]:
    """The source's per-shard byte cap, when one is set."""
    if settings.max_bytes_per_shard is None:
        return {}
    return {"maxBytesPerShard": str(settings.max_bytes_per_shard)}


def _stream_options(settings: Settings) -> dict[str, str]:
    """The source options that say which stream, where, and as whom it is read: all that
    ``release_consumer`` needs after the query."""
    options = {
        "streamName": settings.stream_name,
        "metadataPath": source_metadata_path(settings),
        "consumerType": settings.consumer_type,
    }
    if settings.region:
        options["regionName"] = settings.region
    if settings.role_arn:
        options["roleArn"] = settings.role_arn
    if settings.endpoint_url:
        options["endpointUrl"] = settings.endpoint_url
    return options


def _release_consumer(settings: Settings) -> None:
    """Deregister an efo run's consumer; a failure is logged, not raised, so it never
    hides why the run ended (the consumer is reused by the next run either way)."""
    try:
        release_consumer(_stream_options(settings))
    except Exception as error:
        logger.warning("the run's enhanced fan-out consumer was not deregistered: %s", error)


def start_ingestion_query(
    spark: SparkSession,
    settings: Settings,
    *,
    bounded: AvailableNow | None = None,
    processing_time: str = "5 seconds",
) -> StreamingQuery:
    """Start the raw table's streaming query: ``bounded``'s, else one on ``processing_time``.

    Where a query with no checkpoint starts: after the positions the raw table's
    snapshots record as committed, if there are any; the configured starting position
    only for an empty table. The table is the durable state, so a lost or unshareable
    checkpoint (a new machine, a checkpoint folder that cannot live on S3) resumes
    exactly once instead of re-reading the stream. Spark ignores the starting position
    when a checkpoint exists: the checkpoint, when there is one, wins.
    """
    table = prepare_raw_table(settings)
    reader = (
        spark.readStream.format("kinesis")
        .options(**_stream_options(settings))
        .option("maxRecordsPerShard", str(settings.max_records_per_shard))
        .options(**_byte_cap(settings))
        .option("failOnDataLoss", str(settings.fail_on_data_loss).lower())
        .options(**(bounded.source_options() if bounded is not None else {}))
    )
    reads = earlier_reads(table)
    if reads != EarlierReads():
        reader = reader.option("earlierReads", reads.to_option())
    resume_after = committed_positions(table)
    if resume_after:
        reader = reader.option("startingPosition", json.dumps(resume_after, sort_keys=True))
    else:
        reader = reader.option("startingPosition", settings.starting_position)
        if settings.starting_timestamp:
            reader = reader.option("startingTimestamp", settings.starting_timestamp)
    records = reader.load().withColumn("ingested_at", F.current_timestamp())
    write_tasks = _write_tasks(spark, settings)
    if write_tasks:
        # A narrow coalesce: each task reads its shards one after another and writes them
        # together, so a commit holds files per task, not per shard. No shuffle.
        records = records.coalesce(write_tasks)
    writer = (
        records.writeStream.format(SINK_NAME)
        .queryName(f"ingest_{settings.namespace}_raw_events")
        .option("table", settings.raw_table)
        .option("catalog", settings.catalog_name)
        .option("dataDir", str(settings.data_dir))
        .option("batchIdColumn", "batch_id")
        .option("positionColumns", "shard_id,sequence_number")
        .option("checkpointLocation", checkpoint_location(settings))
    )
    if bounded is not None:
        return bounded.trigger(writer).start()
    return writer.trigger(processingTime=processing_time).start()


def _is_local(master: str) -> bool:
    """``local`` or ``local[N]``: one JVM whose cores are known at once (``local-cluster``
    starts executor processes that register later, like a real cluster)."""
    return master == "local" or master.startswith("local[")


def _write_tasks(spark: SparkSession, settings: Settings) -> int:
    """How many tasks write a micro-batch; 0 for one per shard.

    Spark runs at most one task per core at a time, so tasks beyond that only queue, and
    each writes files of its own: by default shard reads are coalesced into one task per
    core, which measured the same throughput with half the files (4 shards, 2 cores).
    Only a local master knows its cores when the query starts. A cluster's executors
    register later (none yet under dynamic allocation, which also scales on pending
    tasks), so there only a configured ``spark.default.parallelism`` counts; without one
    each shard keeps its task.
    """
    if settings.max_write_tasks is not None:
        return settings.max_write_tasks
    if isinstance(spark, SparkSession) and _is_local(spark.sparkContext.master or ""):
        return spark.sparkContext.defaultParallelism
    # Over Spark Connect (no SparkContext here) or on a cluster: the configured value.
    return int(spark.conf.get("spark.default.parallelism", "0") or 0)


def run_ingestion(
    spark: SparkSession,
    settings: Settings,
    *,
    on_batch: Callable[[BatchReport], None] | None = None,
    busy: Callable[[], bool] | None = None,
) -> IngestResult:
    """Drain what the stream holds now into the raw table, then stop; ``on_batch`` sees
    each committed micro-batch that moved rows (a progress display, say). An ``on_batch``
    that raises is logged with its traceback and ingestion goes on: the batch is committed.

    With ``settings.run_linger_seconds`` the run goes on after the drain, on a short
    processing-time trigger, until no record arrived for that long (nor was ``busy``, the
    work that follows the commits, such as a Dagster run's downstream refresh) or
    ``settings.run_max_seconds`` passed. Under a steady stream a record put meanwhile then
    waits for the next trigger of a running query, not for the next run (a new process, a
    new query, and in Dagster the sensor's next tick).
    """
    if settings.run_linger_seconds:
        return run_continuous(
            spark,
            settings,
            stop=threading.Event(),
            processing_time=LINGER_TRIGGER,
            on_batch=on_batch,
            linger=Linger(settings.run_linger_seconds, settings.run_max_seconds),
            busy=busy,
        )
    started = time.monotonic()
    before = _raw_rows(settings)
    status_before = _status_before(settings)
    bounded = AvailableNow.on(spark)
    query = start_ingestion_query(spark, settings, bounded=bounded)
    try:
        if on_batch is None:
            bounded.wait(query)
        else:
            follower = _BatchFollower(settings, query, on_batch)
            while not bounded.wait(query, 1):
                follower.poll()
            follower.poll()
    finally:
        try:
            query.stop()
        finally:
            try:
                _release_consumer(settings)
            finally:
                _record_earlier_reads(settings)
    return _summarise(
        settings, query.recentProgress, time.monotonic() - started, before, status_before
    )


LINGER_TRIGGER = "1 second"
"""A lingering run's trigger. While the stream is quiet the source reads every shard about
once a second (``idleTimeBetweenReadsMs``) and each empty read is made durable in a
metadata-only commit (no snapshot): a linger of 30 s costs about 30 of those."""


@dataclass(frozen=True)
class Linger:
    """When a run that goes on after its drain ends: ``idle_seconds`` after its last batch
    that moved rows (counted from its first trigger, so a slow query start is not idleness),
    or ``max_seconds`` after it started, whichever comes first."""

    idle_seconds: float
    max_seconds: float

    def over(self, started: float, quiet_since: float | None, now: float) -> bool:
        if now - started >= self.max_seconds:
            return True
        return quiet_since is not None and now - quiet_since >= self.idle_seconds


class _BatchFollower:
    """Reports each committed micro-batch of ``query`` that moved rows, once, and since
    when none has (``quiet_since``: monotonic, None before the query's first trigger).

    A report that fails (the catalog read behind it, or ``on_batch`` itself: Dagster's
    event log) is logged and skipped, never raised: the batch is already committed, and
    ending the query over its report would stop ingestion on a flaky event store.
    """

    def __init__(
        self,
        settings: Settings,
        query: StreamingQuery,
        on_batch: Callable[[BatchReport], None] | None,
    ) -> None:
        self._settings, self._query, self._on_batch = settings, query, on_batch
        self._reported = -1
        self.batches = 0
        self.quiet_since: float | None = None

    def poll(self) -> None:
        progresses = self._query.recentProgress
        if progresses and self.quiet_since is None:
            self.quiet_since = time.monotonic()
        for progress in progresses:
            if progress["batchId"] > self._reported and input_rows(progress) > 0:
                self._reported = progress["batchId"]
                self.batches += 1
                self.quiet_since = time.monotonic()
                if self._on_batch is not None:
                    self._report(self._on_batch, progress)

    def _report(self, on_batch: Callable[[BatchReport], None], progress: dict) -> None:
        try:
            on_batch(_batch_report(self._settings, progress))
        except Exception as error:
            logger.warning(
                "Micro-batch %s committed %d rows but could not be reported (%s: %s); "
                "ingestion goes on, and the run's summary counts it. If this repeats, check "
                "the catalog, the Dagster instance storage and any on_batch callback.",
                progress["batchId"],
                input_rows(progress),
                type(error).__name__,
                error,
                exc_info=True,
            )


def run_continuous(
    spark: SparkSession,
    settings: Settings,
    *,
    stop: threading.Event,
    processing_time: str = "5 seconds",
    on_batch: Callable[[BatchReport], None] | None = None,
    linger: Linger | None = None,
    busy: Callable[[], bool] | None = None,
) -> IngestResult:
    """Ingest until ``stop`` is set (or ``linger`` is over); report each committed batch
    that moved rows. While ``busy()`` says the work that follows the commits is still
    going, the run is not idle: ``linger`` counts from when it stops.

    Stopping waits for the batch in flight (Spark itself has no graceful stop: ``stop()``
    interrupts), so it commits and is reported before this returns. Only a trigger that
    has not planned a batch yet is interrupted, and it holds nothing to replay.
    """
    started = time.monotonic()
    before = _raw_rows(settings)
    status_before = _status_before(settings)
    query = start_ingestion_query(spark, settings, processing_time=processing_time)
    follower = _BatchFollower(settings, query, on_batch)
    recorded = time.monotonic()
    try:
        while not stop.is_set() and query.isActive:
            stop.wait(0.5)
            follower.poll()
            if busy is not None and follower.quiet_since is not None and busy():
                follower.quiet_since = time.monotonic()
            if time.monotonic() - recorded >= RECORD_READS_EVERY_S:
                _record_earlier_reads(settings)
                recorded = time.monotonic()
            if linger is not None and linger.over(started, follower.quiet_since, time.monotonic()):
                break
        failure = query.exception()
        if failure is not None:
            raise failure
    finally:
        # A lingering run's cap or quiet spell is ours to choose, not an operator's signal:
        # its batch in flight (a big backlog's, on a slow endpoint) always finishes, or a
        # run that reached its cap mid-batch would throw that batch away, and so would the
        # next run, and the next.
        try:
            _stop_gracefully(
                query, checkpoint_location(settings), wait_s=None if linger is not None else 120
            )
        finally:
            try:
                _release_consumer(settings)
            finally:
                _record_earlier_reads(settings)
    # The batch that was in flight when ``stop`` was set committed during the graceful
    # stop: it must be reported like every other.
    follower.poll()
    return _summarise(
        settings,
        query.recentProgress,
        time.monotonic() - started,
        before,
        status_before,
        batches=follower.batches,
    )


RECORD_READS_EVERY_S = 300
"""How often a long-running query keeps its reads in the raw table, besides at its end."""


def _record_earlier_reads(settings: Settings) -> None:
    """Keep in the raw table what the source's runs read (see
    :mod:`kinesis_lake.pipeline.earlier_reads`), whether or not the run failed. Failing
    here costs only precision (the next start knows older times, so it is stricter): the
    run, committed, stands."""
    store = ShardProgressStore(source_metadata_path(settings))
    try:
        record_earlier_reads(open_lake(settings).load_table(settings.raw_table), store)
    except Exception as error:
        logger.warning("could not record the source's reads in the raw table: %s", error)


def _stop_gracefully(query: StreamingQuery, checkpoint: str, wait_s: float | None) -> None:
    """Let a planned batch finish and commit (waiting at most ``wait_s``, None: as long as
    the query runs), then stop.

    A batch is in flight once Spark has written it to the checkpoint's offset log and not
    yet to its commit log; that is the only state worth waiting for. Spark's status is
    not used: it says data is available only some moments after the offsets are logged,
    and a stop in between would interrupt a batch that had begun. A trigger that is just
    asking the source for new offsets holds nothing to lose, and when that takes longer
    than the interval (a slow endpoint, a busy machine) such triggers run back to back:
    waiting for the trigger to go idle would wait for the deadline at every stop.
    """
    deadline = None if wait_s is None else time.monotonic() + wait_s
    while query.isActive and (deadline is None or time.monotonic() < deadline):
        if not _planned_batch_uncommitted(checkpoint):
            break
        time.sleep(0.2)
    query.stop()


def _planned_batch_uncommitted(checkpoint: str) -> bool:
    """Whether the offset log is ahead of the commit log (fsspec: local or s3:// alike)."""
    fs, base = fsspec.core.url_to_fs(checkpoint)

    def latest(log: str) -> int:
        try:
            names = fs.ls(f"{base}/{log}", detail=False)
        except FileNotFoundError:
            return -1
        ids = [int(name.rsplit("/", 1)[-1]) for name in names if name.rsplit("/", 1)[-1].isdigit()]
        return max(ids, default=-1)

    return latest("offsets") > latest("commits")


def read_source_status(settings: Settings, progress: dict) -> dict:
    """The status the source published (:func:`~kinesis_lake.spark.kinesis.progress.source_status`)
    for the epoch that ended ``progress``'s batch; {} before it published one."""
    end_offset = progress["sources"][0].get("endOffset") if progress.get("sources") else None
    if not end_offset:
        return {}
    offset = SourceOffset.from_dict(progress_offset(end_offset))
    return ShardProgressStore(source_metadata_path(settings)).read_status(offset.run_id) or {}


def _lag_by_shard(status: dict) -> dict[str, int]:
    return {
        shard: int(outcome.get("millis_behind_latest") or 0)
        for shard, outcome in status.get("shards", {}).items()
    }


def _batch_report(settings: Settings, progress: dict) -> BatchReport:
    status = read_source_status(settings, progress)
    lags = _lag_by_shard(status)
    total, snapshot_id = _raw_table_state(
        settings, writer_id=progress["id"], batch_id=progress["batchId"]
    )
    return BatchReport(
        batch_id=progress["batchId"],
        rows=input_rows(progress),
        seconds=progress.get("durationMs", {}).get("triggerExecution", 0) / 1000,
        raw_rows_total=total,
        snapshot_id=snapshot_id,
        max_millis_behind_latest=max(lags.values(), default=0),
        skipped_ranges=int(status.get("skippedRanges", 0)),
        millis_behind_latest=lags,
    )


def _raw_table_state(
    settings: Settings, *, writer_id: str | None = None, batch_id: int | None = None
) -> tuple[int, int | None]:
    """(rows, snapshot id) of the raw table now, or as of the snapshot that committed
    ``batch_id`` of ``writer_id`` (the streaming query id; the sink stamps both).

    Only snapshot summaries are read, newest first; a batch is reported right after its
    commit, so the walk stops after a few snapshots. A batch without a snapshot of its
    own (a replay the sink skipped) falls back to the current state.
    """
    table = open_lake(settings).load_table(settings.raw_table)
    snapshot = table.current_snapshot()
    if snapshot is not None and batch_id is not None:
        wanted = {WRITER_ID: writer_id, BATCH_ID: str(batch_id)}
        snapshot = next(
            (
                s
                for s in ancestors_of(snapshot, table.metadata)
                if s.summary is not None
                and all(s.summary.additional_properties.get(k) == v for k, v in wanted.items())
            ),
            snapshot,
        )
    if snapshot is None or snapshot.summary is None:
        return 0, None
    return int(snapshot.summary.get("total-records", 0)), snapshot.snapshot_id


def _raw_rows(settings: Settings) -> int:
    prepare_raw_table(settings)
    return _raw_table_state(settings)[0]


def input_rows(progress: Mapping[str, Any]) -> int:
    """A micro-batch's input rows: over Spark Connect the progress leaves the total unset
    and counts them per source only."""
    total = progress.get("numInputRows")
    if total is None:
        total = sum(source.get("numInputRows") or 0 for source in progress.get("sources") or ())
    return int(total)


def _status_before(settings: Settings) -> Mapping[str, Any]:
    """The source's status as a run finds it: the gaps it names after this are the run's."""
    return ShardProgressStore(source_metadata_path(settings)).latest_status() or {}


def _gaps_since(status: Mapping[str, Any], before: Mapping[str, Any]) -> list[SkippedGap]:
    """The gaps ``status`` names that ``before`` did not: those of later epochs of the
    same checkpoint, or all of a new one's. A gap is named by the run that publishes its
    epoch's status, which is the next run when one dies right after the epoch."""
    same_run = status.get("runId") == before.get("runId")
    published = int(before.get("epoch", 0)) if same_run else -1
    return [
        SkippedGap(gap["shard"], int(gap["epoch"]), gap["detail"])
        for gap in status.get("skippedGaps", [])
        if int(gap["epoch"]) > published
    ]


def _summarise(
    settings: Settings,
    progresses: Sequence[dict],
    seconds: float,
    rows_before: int,
    status_before: Mapping[str, Any],
    *,
    batches: int | None = None,
) -> IngestResult:
    """Rows come from the table itself: Spark keeps only recent progress entries (100 by
    default), which is also why a long continuous run passes the ``batches`` it counted."""
    moving = [p for p in progresses if input_rows(p) > 0]
    status = read_source_status(settings, progresses[-1]) if progresses else {}
    lags = _lag_by_shard(status)
    total, snapshot_id = _raw_table_state(settings)
    return IngestResult(
        batches=len(moving) if batches is None else batches,
        rows=total - rows_before,
        seconds=seconds,
        raw_rows_total=total,
        snapshot_id=snapshot_id,
        max_millis_behind_latest=max(lags.values(), default=0),
        millis_behind_latest=lags,
        skipped_ranges=int(status.get("skippedRanges", 0)),
        shards_read=len(lags),
        skipped_gaps=_gaps_since(status, status_before),
    )
