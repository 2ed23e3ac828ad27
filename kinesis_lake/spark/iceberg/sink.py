"""The ``kinesis_lake_iceberg`` Spark data source: executor-side writes, one driver commit.

This is the shape of Iceberg's own Spark sink, built on PySpark's Python writer API
because no Iceberg Spark runtime jar can be had here:

* ``write`` runs in each executor task: it turns the task's Arrow batches into Parquet
  data files under the table location (one partition value per file, with column
  statistics) and returns them described (path, size, Parquet footer, partition values),
  so the driver commits them without opening them. Nothing is visible yet.
* ``commit`` runs once per micro-batch on the driver: it adds every task's files to the
  table in ONE Iceberg transaction that also records ``(writer id, batch id)``
  (:func:`kinesis_lake.iceberg.commit.commit_files`). A batch id the writer already
  committed is skipped and its new files deleted, so Spark's replay of a batch after a
  crash between the Iceberg commit and Spark's own checkpoint never duplicates rows.
  The positions and the stale-checkpoint guard below are decided on the base of every
  commit attempt, so two writers racing to commit cannot both pass the guard.
* ``abort`` deletes nothing once ``commit`` ran: a commit can land and still raise (a
  lost answer), or land after the abort (a catalog still processing it), so neither the
  exception nor a reload justifies a delete; the replay decides from the watermark and
  orphan-file removal reclaims the files of a commit that never landed. When a task
  failed (Spark passes None for its message), commit never ran, and the other tasks'
  files that the refreshed table does not reference are deleted. Files of tasks that
  died before reporting fall to orphan-file removal.

The writer id defaults to the streaming query's id, which Spark keeps in the checkpoint:
a fresh checkpoint is a new writer (so its batch ids, restarting at 0, are not mistaken for
replays), and a restarted query is the same writer.

With ``positionColumns=shard_id,sequence_number`` each task also reports the highest
sequence number it wrote per shard, and the commit stores the merged map of every shard's
last committed position in the table property ``kinesis-lake.positions``, atomically
with the data. That is what the Iceberg Kafka Connect sink does with Kafka offsets: the
table itself says how far the stream has been committed, so a backlog sensor or a
reconciliation check needs no scan and no side store. It is also where a query with no
checkpoint starts (:func:`kinesis_lake.pipeline.ingest_query.start_ingestion_query`), and why a
batch that would re-add a committed position is refused rather than committed: that is
a second, stale checkpoint (a machine that was replaced, then came back) writing what
another query already wrote (:class:`~kinesis_lake.spark.iceberg.writer.OverlappingPositionsError`).

Options: the table :data:`kinesis_lake.spark.iceberg.options.OPTIONS` (an unknown key is
refused, naming the known ones).

This module holds the data source; its options are
:mod:`kinesis_lake.spark.iceberg.options`, the write half
:mod:`kinesis_lake.spark.iceberg.writer` and the read half
:mod:`kinesis_lake.spark.iceberg.table_reader`, imported by the methods that return them.
Spark imports this module in every Python process it starts for a query, one after
another, and the first two (the data-source lookup and the data source's creation) need
only the class. Keeping Iceberg's table, file and catalog code out of them took a new
``kinesis-lake ingest`` of 2,000 records from 18.4 s to 15.6 s (medians of 4 alternating
runs against the code before the split).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource, DataSourceReader
from pyspark.sql.types import StructType

from kinesis_lake.spark.iceberg.options import IcebergSinkOptionError, SinkOptions

if TYPE_CHECKING:
    from kinesis_lake.spark.iceberg.table_reader import TableRead
    from kinesis_lake.spark.iceberg.writer import IcebergBatchWriter, IcebergStreamWriter

SINK_NAME = "kinesis_lake_iceberg"


def wants_fresh(options: dict[str, str]) -> bool:
    """Whether a read's options ask for a fresh read (option ``fresh``, any case)."""
    lowered = {key.lower(): value for key, value in options.items()}
    return (lowered.get("fresh") or "false").strip().lower() == "true"


def refuse_unregistered_fresh(options: dict[str, str]) -> None:
    """This source reads committed snapshots only; reading the stream's tail is the
    pipeline's (it routes and deduplicates by the lake's declaration), so option ``fresh``
    here means the session lacks the lake's registration: say so rather than ignore it."""
    if wants_fresh(options):
        raise IcebergSinkOptionError(
            f"Option 'fresh' needs the lake's {SINK_NAME} reader: call "
            "kinesis_lake.pipeline.fresh_spark.register_fresh_reads(spark, settings) on "
            "this session first, or drop the option."
        )


class IcebergDataSource(DataSource):
    """Spark data source ``kinesis_lake_iceberg``: batch and streaming writes, batch reads
    (:mod:`kinesis_lake.spark.iceberg.table_reader`)."""

    @classmethod
    def name(cls) -> str:
        return SINK_NAME

    def _planned_read(self) -> TableRead:
        """Planned once, when Spark asks for the schema at ``load``: Spark pickles this
        instance after ``schema()`` and plans every action of the frame from that copy, so
        the frame's rows keep the snapshot and columns its schema was given."""
        planned: TableRead | None = getattr(self, "_read", None)
        if planned is None:
            refuse_unregistered_fresh(dict(self.options))
            from kinesis_lake.spark.iceberg.table_reader import TableRead

            options = SinkOptions.parse(dict(self.options))
            planned = self._read = TableRead.plan(options.load_table(), dict(self.options))
        return planned

    def schema(self) -> StructType:
        return self._planned_read().spark_schema

    def reader(self, schema: StructType) -> DataSourceReader:
        from kinesis_lake.spark.iceberg.table_reader import TableReader

        return TableReader(SinkOptions.parse(dict(self.options)).load_table, self._planned_read())

    def writer(self, schema: StructType, overwrite: bool) -> IcebergBatchWriter:
        if overwrite:
            raise IcebergSinkOptionError(
                f"{SINK_NAME} appends only; overwrite mode is not supported. Use mode('append')."
            )
        from kinesis_lake.iceberg.data_files import TableWriteTarget
        from kinesis_lake.spark.iceberg.writer import IcebergBatchWriter

        options = SinkOptions.parse(dict(self.options))
        if options.writer_id is None or options.batch_id is None:
            raise IcebergSinkOptionError(
                "Batch writes need options 'writerId' and 'batchId': they make the commit "
                "idempotent (a second write under the same ids is skipped)."
            )
        return IcebergBatchWriter(
            options, TableWriteTarget.from_table(options.load_table_to_write())
        )

    def streamWriter(self, schema: StructType, overwrite: bool) -> IcebergStreamWriter:
        from kinesis_lake.iceberg.data_files import TableWriteTarget
        from kinesis_lake.spark.iceberg.writer import IcebergStreamWriter

        options = SinkOptions.parse(dict(self.options))
        return IcebergStreamWriter(
            options, TableWriteTarget.from_table(options.load_table_to_write())
        )
