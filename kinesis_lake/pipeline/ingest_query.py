"""The raw table's streaming query: where its state lives, where it starts, how it writes.

Every ingestion run (bounded, lingering or continuous: ``ingest.py``) starts the same query,
so the choices that decide correctness across runs are made once, here: the checkpoint and
the source's progress records live at paths derived from the settings, so they move
together between machines; a query without a checkpoint starts after the positions the raw
table itself records as committed; and shards are packed into tasks by the bytes a batch
holds, so files per commit follow the data, not the shard count.

Invariant: the raw table is the durable state. A lost or unshareable checkpoint resumes
exactly once from the table's committed positions instead of re-reading the stream; the
configured starting position applies to an empty table only.
"""

from __future__ import annotations

import json
import logging

from pyiceberg.table import Table, TableProperties
from pyiceberg.utils.properties import property_as_int
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from kinesis_lake.config import Settings
from kinesis_lake.iceberg.catalog import ensure_namespace
from kinesis_lake.iceberg.raw_table import ensure_raw_table
from kinesis_lake.iceberg.summary import committed_positions
from kinesis_lake.pipeline.earlier_reads import earlier_reads
from kinesis_lake.pipeline.lake import open_lake
from kinesis_lake.spark.iceberg.sink import SINK_NAME
from kinesis_lake.spark.kinesis.available_now import AvailableNow
from kinesis_lake.spark.kinesis.options import EarlierReads
from kinesis_lake.spark.kinesis.source import release_consumer
from kinesis_lake.spark.packing import known_cores

logger = logging.getLogger(__name__)


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


def _task_options(spark: SparkSession, settings: Settings, table: Table) -> dict[str, str]:
    """How the source packs a micro-batch's shards into read (and so write) tasks.

    Each task writes one data file per partition value, so by default shards are packed
    by the bytes their last reads gave into tasks of the table's target file size
    (``write.target-file-size-bytes``; :mod:`kinesis_lake.spark.kinesis.task_groups`):
    files per commit follow the batch's bytes on every master, whatever the shard count.
    A batch is spread over the cores known when the query starts, as long as each task
    still gets 4 MiB: a local master's, else a configured ``spark.default.parallelism``
    (a cluster's executors register later, none at all yet under dynamic allocation).

    ``KINESIS_LAKE_MAX_WRITE_TASKS`` wins: set, each shard is a read task (0 keeps it so;
    N coalesces them into N write tasks, as before this packing existed).
    """
    if settings.max_write_tasks is not None:
        return {"bytesPerTask": "0"}
    target = property_as_int(
        table.properties,
        TableProperties.WRITE_TARGET_FILE_SIZE_BYTES,
        TableProperties.WRITE_TARGET_FILE_SIZE_BYTES_DEFAULT,
    )
    return {"bytesPerTask": str(target), "minTasks": str(max(known_cores(spark), 1))}


def _backing_off(settings: Settings) -> dict[str, str]:
    """A continuous query's idle back-off (``KINESIS_LAKE_IDLE_BACKOFF_MS``): each poll of an
    idle stream is a micro-batch, and polls once a second took 0.6-0.7 of a core of two
    from the downstream refresh that a lingering run does beside them (2026-12-06)."""
    return {"maxIdleTimeBetweenReadsMs": str(settings.idle_backoff_ms)}


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


def release_query_consumer(settings: Settings) -> None:
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
        .options(**(bounded.source_options() if bounded is not None else _backing_off(settings)))
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
    reader = reader.options(**_task_options(spark, settings, table))
    records = reader.load().withColumn("ingested_at", F.current_timestamp())
    if settings.max_write_tasks:
        # A narrow coalesce: each task reads its shards one after another and writes them
        # together, so a commit holds files per task, not per shard. No shuffle.
        records = records.coalesce(settings.max_write_tasks)
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
