"""The ingestion job: Kinesis stream -> ``kinesis`` source -> Iceberg sink -> raw table.

One function serves the CLI (``kinesis-lake ingest`` / ``stream``), the Dagster asset and
the tests, so they all run the same code path. A bounded run drains what the stream holds
when the run starts, in micro-batches of at most ``max_records_per_shard`` records per shard,
and stops: ``trigger(availableNow=True)`` on Spark 4.2+, an equivalent on 4.0/4.1
(:mod:`kinesis_lake.spark.kinesis.available_now`). The
continuous mode uses a processing-time trigger and stops when asked, after the batch
in flight has committed.

How a run ends is this module's concern: a bounded run when the drain is done, a lingering
one when the stream was quiet long enough, a continuous one when asked; and every run, failed
or not, stops its query without losing the batch in flight, releases its enhanced fan-out
consumer and keeps what the source read in the raw table. The query itself is
``ingest_query.py``'s, the numbers a run reports ``ingest_report.py``'s.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import fsspec
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from kinesis_lake.config import Settings
from kinesis_lake.pipeline.earlier_reads import record_earlier_reads
from kinesis_lake.pipeline.ingest_query import (
    checkpoint_location,
    release_query_consumer,
    source_metadata_path,
    start_ingestion_query,
)
from kinesis_lake.pipeline.ingest_report import (
    BatchFollower,
    BatchReport,
    IngestResult,
    RunStart,
    summarise,
)
from kinesis_lake.pipeline.lake import open_lake
from kinesis_lake.spark.kinesis.available_now import AvailableNow
from kinesis_lake.spark.kinesis.progress import ShardProgressStore

logger = logging.getLogger(__name__)


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
    start = RunStart.now(settings)
    bounded = AvailableNow.on(spark)
    query = start_ingestion_query(spark, settings, bounded=bounded)
    try:
        if on_batch is None:
            bounded.wait(query)
        else:
            follower = BatchFollower(settings, query, on_batch)
            while not bounded.wait(query, 1):
                follower.poll()
            follower.poll()
    finally:
        try:
            query.stop()
        finally:
            try:
                release_query_consumer(settings)
            finally:
                _record_earlier_reads(settings)
    return summarise(settings, start, query.recentProgress)


LINGER_TRIGGER = "1 second"
"""A lingering run's trigger. While the stream is quiet the source reads every shard after
1 s, then 2, 4 and every 5 s (``KINESIS_LAKE_IDLE_BACKOFF_MS``), each empty read a micro-batch made
durable in a metadata-only commit (no snapshot): a linger of 30 s costs about 8 of those."""


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
    start = RunStart.now(settings)
    query = start_ingestion_query(spark, settings, processing_time=processing_time)
    follower = BatchFollower(settings, query, on_batch)
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
            if linger is not None and linger.over(
                start.monotonic, follower.quiet_since, time.monotonic()
            ):
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
                release_query_consumer(settings)
            finally:
                _record_earlier_reads(settings)
    # The batch that was in flight when ``stop`` was set committed during the graceful
    # stop: it must be reported like every other.
    follower.poll()
    return summarise(settings, start, query.recentProgress, batches=follower.batches)


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
