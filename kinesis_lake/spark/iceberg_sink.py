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
* ``abort`` deletes the files of a failed batch that the refreshed table does not
  reference: a commit can land and still raise (a lost answer), so the exception alone
  never justifies a delete. Files of tasks that died before reporting are unreferenced
  and fall to orphan-file removal.

The writer id defaults to the streaming query's id, which Spark keeps in the checkpoint:
a fresh checkpoint is a new writer (so its batch ids, restarting at 0, are not mistaken for
replays), and a restarted query is the same writer.

With ``positionColumns=shard_id,sequence_number`` each task also reports the highest
sequence number it wrote per shard, and the commit stores the merged map of every shard's
last committed position in the table property ``kinesis-lake.positions``, atomically
with the data. That is what the Iceberg Kafka Connect sink does with Kafka offsets: the
table itself says how far the stream has been committed, so a backlog sensor or a
reconciliation check needs no scan and no side store. It is also where a query with no
checkpoint starts (:func:`kinesis_lake.pipeline.ingest.start_ingestion_query`), and why a
batch that would re-add a committed position is refused rather than committed: that is
a second, stale checkpoint (a machine that was replaced, then came back) writing what
another query already wrote (:class:`OverlappingPositionsError`).

Options: the table :data:`OPTIONS` (an unknown key is refused, naming the known ones).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
from pyiceberg.table import Table
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from kinesis_lake.errors import ConfigurationError, IngestionError
from kinesis_lake.iceberg.catalog import DEFAULT_CATALOG_NAME, default_data_dir, open_catalog
from kinesis_lake.iceberg.commit import CommitOutcome, commit_files
from kinesis_lake.iceberg.data_files import TableWriteTarget, WrittenFile, write_data_files
from kinesis_lake.iceberg.maintenance import delete_unreferenced
from kinesis_lake.iceberg.summary import POSITIONS, committed_positions
from kinesis_lake.spark.iceberg_table_reader import READ_OPTIONS, TableRead, TableReader, qualified
from kinesis_lake.spark.worker_process import freeze_imported_objects

logger = logging.getLogger(__name__)

SINK_NAME = "kinesis_lake_iceberg"
_QUERY_ID_PROPERTY = "sql.streaming.queryId"
_BATCH_ID_PROPERTY = "streaming.sql.batchId"


class IcebergSinkOptionError(ConfigurationError):
    """An option of the Iceberg sink is missing, unknown or malformed."""


# option name (as users write it) -> (default, description). Spark passes keys in any case.
OPTIONS: dict[str, tuple[str | None, str]] = {
    "table": (
        None,
        "Table to write or read, as 'namespace.name' or a name in 'namespace' (required; "
        ".save(name) and .load(name) work too). Writes refuse a bare name without option "
        "'namespace': its namespace would come from the planning process's environment.",
    ),
    "catalog": (DEFAULT_CATALOG_NAME, "pyiceberg catalog name."),
    "dataDir": (
        str(default_data_dir()),
        "Home of the embedded default catalog and warehouse (when the catalog has no "
        "configuration of its own).",
    ),
    "writerId": (None, "Writer identity for the commit protocol; default the query's id."),
    "batchIdColumn": (None, "A column to fill with the micro-batch id."),
    "batchId": (None, "Batch writes: the id to commit under (required with writerId)."),
    "positionColumns": (
        None,
        "'<shard column>,<sequence number column>': record and guard committed positions.",
    ),
    "checkpointLocation": (None, "Spark's own streaming checkpoint (read by Spark)."),
    "queryName": (None, "The streaming query's name (Spark passes .queryName() here)."),
}
_SUMMARY_PREFIX = "summary."
"""Options ``summary.<key>`` become extra snapshot-summary entries."""
OPTIONS.update(READ_OPTIONS)
_KNOWN = {name.lower() for name in OPTIONS} | {"path"}


@dataclass(frozen=True)
class SinkOptions:
    table: str
    catalog: str
    data_dir: Path
    writer_id: str | None
    batch_id_column: str | None
    batch_id: int | None
    position_columns: tuple[str, str] | None = None
    summary: dict[str, str] = field(default_factory=dict)
    namespace_from: str | None = None
    """Where a bare table name's namespace came from; None when the name was qualified."""

    @classmethod
    def parse(cls, options: dict[str, str]) -> SinkOptions:
        lowered = {k.lower(): v for k, v in options.items()}
        unknown = sorted(
            key
            for key in options
            if key.lower() not in _KNOWN and not key.lower().startswith(_SUMMARY_PREFIX)
        )
        if unknown:
            raise IcebergSinkOptionError(
                f"Unknown option(s) {', '.join(map(repr, unknown))} of the Iceberg sink; known: "
                f"{', '.join(OPTIONS)} and {_SUMMARY_PREFIX}<key>."
            )
        table = lowered.get("table") or lowered.get("path")
        if not table:
            raise IcebergSinkOptionError(
                "Option 'table' is required: a table as 'namespace.name' or a name in the "
                "namespace of option 'namespace' (e.g. .load('raw_events'))."
            )
        table, namespace_from = qualified(table, lowered.get("namespace"))
        batch_id = lowered.get("batchid")
        if batch_id is not None and not batch_id.lstrip("-").isdigit():
            raise IcebergSinkOptionError(f"Option 'batchId'={batch_id!r} must be an integer.")
        data_dir = lowered.get("datadir")
        positions = lowered.get("positioncolumns")
        position_columns = None
        if positions:
            parts = tuple(p.strip() for p in positions.split(","))
            if len(parts) != 2 or not all(parts):
                raise IcebergSinkOptionError(
                    f"Option 'positionColumns'={positions!r} must name two columns: "
                    "'<shard column>,<sequence number column>'."
                )
            position_columns = (parts[0], parts[1])
        return cls(
            table=table,
            catalog=lowered.get("catalog") or DEFAULT_CATALOG_NAME,
            data_dir=Path(data_dir) if data_dir else default_data_dir(),
            writer_id=lowered.get("writerid"),
            batch_id_column=lowered.get("batchidcolumn"),
            batch_id=int(batch_id) if batch_id is not None else None,
            position_columns=position_columns,
            summary={
                key[len(_SUMMARY_PREFIX) :]: value
                for key, value in options.items()
                if key.lower().startswith(_SUMMARY_PREFIX)
            },
            namespace_from=namespace_from,
        )

    def load_table(self) -> Table:
        catalog = open_catalog(self.catalog, data_dir=self.data_dir)
        try:
            return catalog.load_table(self.table)
        except NoSuchTableError:
            namespace = self.table.rsplit(".", 1)[0]
            try:
                names = sorted(".".join(t) for t in catalog.list_tables(namespace))
            except NoSuchNamespaceError:
                names = []
            looked = f" (a bare name, read in {self.namespace_from})" if self.namespace_from else ""
            raise IcebergSinkOptionError(
                f"No table {self.table}{looked} in catalog {self.catalog}; "
                + (f"it has: {', '.join(names)}." if names else f"{namespace} has no tables.")
            ) from None

    def load_table_to_write(self) -> Table:
        """Writes take no namespace from the environment: the same job planned on another
        machine would write into another namespace."""
        if self.namespace_from not in (None, "option 'namespace'"):
            bare = self.table.rsplit(".", 1)[1]
            raise IcebergSinkOptionError(
                f"Writes name their namespace: {bare!r} would go to {self.table} (from "
                f"{self.namespace_from}); write 'namespace.{bare}' or set option 'namespace'."
            )
        return self.load_table()


@dataclass
class DataFilesWritten(WriterCommitMessage):
    """What one task wrote: data files (not yet in the table) and where they belong."""

    files: list[WrittenFile]
    rows: int
    query_id: str | None
    batch_id: int | None
    positions: dict[str, str] = field(default_factory=dict)
    first_positions: dict[str, str] = field(default_factory=dict)

    @property
    def paths(self) -> list[str]:
        return [file.path for file in self.files]


class IcebergDataSource(DataSource):
    """Spark data source ``kinesis_lake_iceberg``: batch and streaming writes, batch reads
    (:mod:`kinesis_lake.spark.iceberg_table_reader`)."""

    @classmethod
    def name(cls) -> str:
        return SINK_NAME

    def _planned_read(self) -> TableRead:
        """Planned once, when Spark asks for the schema at ``load``: Spark pickles this
        instance after ``schema()`` and plans every action of the frame from that copy, so
        the frame's rows keep the snapshot and columns its schema was given."""
        planned: TableRead | None = getattr(self, "_read", None)
        if planned is None:
            options = SinkOptions.parse(dict(self.options))
            planned = self._read = TableRead.plan(options.load_table(), dict(self.options))
        return planned

    def schema(self) -> StructType:
        return self._planned_read().spark_schema

    def reader(self, schema: StructType) -> TableReader:
        return TableReader(SinkOptions.parse(dict(self.options)).load_table, self._planned_read())

    def writer(self, schema: StructType, overwrite: bool) -> IcebergBatchWriter:
        if overwrite:
            raise IcebergSinkOptionError(
                f"{SINK_NAME} appends only; overwrite mode is not supported. Use mode('append')."
            )
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
        options = SinkOptions.parse(dict(self.options))
        return IcebergStreamWriter(
            options, TableWriteTarget.from_table(options.load_table_to_write())
        )


class _FileWritingTask:
    """Executor half shared by the batch and streaming writers."""

    def __init__(self, options: SinkOptions, target: TableWriteTarget) -> None:
        self.options = options
        self.target = target

    def _write_task(self, batches: Iterator[pa.RecordBatch]) -> DataFilesWritten:
        freeze_imported_objects()
        context = TaskContext.get()
        query_id = context.getLocalProperty(_QUERY_ID_PROPERTY) if context else None
        raw_batch_id = context.getLocalProperty(_BATCH_ID_PROPERTY) if context else None
        batch_id = int(raw_batch_id) if raw_batch_id is not None else self.options.batch_id
        prefix = "-".join(
            str(part)
            for part in (
                (query_id or self.options.writer_id or "writer")[:8],
                batch_id,
                context.partitionId() if context else 0,
                context.attemptNumber() if context else 0,
                uuid.uuid4().hex[:12],
            )
        )
        tracker = _BatchTracker(self.options.position_columns)
        aligned = (
            tracker(_with_batch_id(batch, self.options.batch_id_column, batch_id))
            for batch in batches
        )
        files = write_data_files(self.target, aligned, file_prefix=prefix)
        return DataFilesWritten(
            files, tracker.rows, query_id, batch_id, tracker.positions, tracker.first_positions
        )

    def _commit(self, messages: list, batch_id: int, writer_id: str | None) -> CommitOutcome | None:
        written = [m for m in messages if isinstance(m, DataFilesWritten)]
        files = [f for m in written for f in m.files]
        paths = [p for m in written for p in m.paths]
        writer = writer_id or next((m.query_id for m in written if m.query_id), None)
        if writer is None:
            return None  # no task ran: an empty micro-batch has nothing to make durable
        table = self.options.load_table()
        summary = {**self.options.summary, "kinesis-lake.rows": str(sum(m.rows for m in written))}

        def positions_on(base) -> dict[str, str]:
            """Guard and merged positions, decided on the base this attempt commits to."""
            positions = committed_positions(base)
            _refuse_overlap(base, written, positions, batch_id)
            for message in written:
                positions = merge_positions(positions, message.positions)
            return {POSITIONS: json.dumps(positions, sort_keys=True)}

        prepare = positions_on if self.options.position_columns is not None else None
        try:
            outcome = commit_files(
                table,
                files,
                writer_id=writer,
                batch_id=batch_id,
                summary=summary,
                prepare=prepare,
                just_loaded=True,
            )
        except OverlappingPositionsError:
            delete_unreferenced(table, paths)
            raise
        if outcome.skipped_duplicate:
            # Not necessarily orphans: an attempt that landed but was reported as failed
            # (a lost answer) makes the batch a duplicate of itself.
            delete_unreferenced(table, paths)
        return outcome

    def _abort(self, messages: list) -> None:
        """Delete the batch's files that no snapshot references, after a refresh.

        Spark aborts for ANY exception of ``commit``, including one raised after the
        catalog applied the commit (a lost answer): the exception proves nothing, so only
        files the refreshed table does not reference are deleted. When the table cannot
        be read, nothing is deleted; orphan-file removal reclaims what is truly unused.
        """
        paths = [p for m in messages if isinstance(m, DataFilesWritten) for p in m.paths]
        if not paths:
            return
        try:
            table = self.options.load_table()
        except Exception:
            logger.warning(
                "Abort of a batch of %s kept its %d files: the table could not be read to "
                "prove them unreferenced (orphan-file removal reclaims them)",
                self.options.table,
                len(paths),
                exc_info=True,
            )
            return
        delete_unreferenced(table, paths)


class IcebergStreamWriter(_FileWritingTask, DataSourceStreamArrowWriter):
    def write(self, iterator: Iterator[pa.RecordBatch]) -> DataFilesWritten:
        return self._write_task(iterator)

    def commit(self, messages: list, batchId: int) -> None:
        self._commit(messages, batchId, self.options.writer_id)

    def abort(self, messages: list, batchId: int) -> None:
        self._abort(messages)


class IcebergBatchWriter(_FileWritingTask, DataSourceArrowWriter):
    def write(self, iterator: Iterator[pa.RecordBatch]) -> DataFilesWritten:
        return self._write_task(iterator)

    def commit(self, messages: list) -> None:
        assert self.options.batch_id is not None
        self._commit(messages, self.options.batch_id, self.options.writer_id)

    def abort(self, messages: list) -> None:
        self._abort(messages)


class OverlappingPositionsError(IngestionError, RuntimeError):
    """A batch holds records at or before positions the table has already committed."""


def _refuse_overlap(
    table, written: list[DataFilesWritten], committed: dict[str, str], batch_id: int
) -> None:
    """Refuse a batch that would add records at or before positions ``table`` committed.

    Called on the base of every commit attempt, after the watermark said the batch is new
    for its writer (a replay of its own batch is skipped before this). A batch that
    starts at or before a committed position comes from a checkpoint that fell behind
    the table, and committing it would duplicate rows.
    """
    overlap = {
        shard: sequence
        for message in written
        for shard, sequence in message.first_positions.items()
        if shard in committed and int(sequence) <= int(committed[shard])
    }
    if overlap:
        shard, sequence = sorted(overlap.items())[0]
        raise OverlappingPositionsError(
            f"Batch {batch_id} starts at or before what {table.name()} "
            f"has already committed (shard {shard}: record {sequence}, committed up to "
            f"{committed[shard]}; {len(overlap)} shard(s) in all). Its checkpoint is behind "
            "the table, so another query has ingested this range: committing would "
            "duplicate rows. Delete this query's checkpoint folder; a new checkpoint "
            "resumes after the table's committed positions."
        )


class _BatchTracker:
    """Counts rows and keeps the lowest and highest sequence number per shard."""

    def __init__(self, position_columns: tuple[str, str] | None) -> None:
        self.rows = 0
        self.positions: dict[str, str] = {}
        self.first_positions: dict[str, str] = {}
        self._columns = position_columns

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        self.rows += batch.num_rows
        if self._columns is not None and batch.num_rows:
            shard_column, sequence_column = self._columns
            shards = batch.column(shard_column).to_pylist()
            sequences = batch.column(sequence_column).to_pylist()
            for shard, sequence in zip(shards, sequences, strict=True):
                self.positions[shard] = _higher(self.positions.get(shard), sequence)
                first = self.first_positions.get(shard)
                if first is None or int(sequence) < int(first):
                    self.first_positions[shard] = sequence
        return batch


def _higher(a: str | None, b: str) -> str:
    """Kinesis sequence numbers are decimal strings: compare them as integers."""
    return b if a is None or int(b) > int(a) else a


def merge_positions(old: dict[str, str], new: dict[str, str]) -> dict[str, str]:
    merged = dict(old)
    for shard, sequence in new.items():
        merged[shard] = _higher(merged.get(shard), sequence)
    return merged


def _with_batch_id(
    batch: pa.RecordBatch, column: str | None, batch_id: int | None
) -> pa.RecordBatch:
    """Stamp the micro-batch id on every row (write_data_files conforms the rest)."""
    if column is None:
        return batch
    values = pa.array([batch_id] * batch.num_rows, pa.int64())
    index = batch.schema.get_field_index(column)
    if index >= 0:
        return batch.set_column(index, column, values)
    return batch.append_column(column, values)
