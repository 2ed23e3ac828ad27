"""The write half of the ``kinesis_lake_iceberg`` sink: executor tasks and the driver commit.

:mod:`kinesis_lake.spark.iceberg.sink` describes the protocol (files written by tasks,
one commit per micro-batch, replays skipped, aborts that delete only what no snapshot
references). This module holds the code that runs it, with the Iceberg and Arrow imports
it needs. It is imported when Spark asks the data source for a writer, and in the
processes that run the writer's tasks and commit, never in the processes that only look
up or create the data source.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

from kinesis_lake.errors import IngestionError
from kinesis_lake.iceberg.commit import (
    CommitOutcome,
    commit_files,
    later_sequence,
    merge_positions,
)
from kinesis_lake.iceberg.data_files import TableWriteTarget, WrittenFile, write_data_files
from kinesis_lake.iceberg.maintenance import delete_unreferenced
from kinesis_lake.iceberg.summary import POSITIONS, committed_positions
from kinesis_lake.spark.datasource_api import DataSourceStreamArrowWriter
from kinesis_lake.spark.iceberg.options import SinkOptions
from kinesis_lake.spark.worker_process import freeze_imported_objects

logger = logging.getLogger(__name__)

_QUERY_ID_PROPERTY = "sql.streaming.queryId"
_BATCH_ID_PROPERTY = "streaming.sql.batchId"


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
                writer_properties=self.options.writer_properties,
                just_loaded=True,
            )
        except OverlappingPositionsError:
            delete_unreferenced(table, paths)
            raise
        if outcome.skipped_duplicate and outcome.attempts == 1:
            # Not necessarily orphans: an attempt that landed but was reported as failed
            # (a lost answer) makes the batch a duplicate of itself. Skipped after an
            # attempt of ours was sent, they are kept: that attempt may land yet (the
            # commit that raised the watermark may not have moved main), as in _abort.
            delete_unreferenced(table, paths)
        if outcome.skipped_duplicate and outcome.attempts == 1 and prepare is not None:
            _refuse_uncommitted_skip(table, written, batch_id, writer)
        return outcome

    def _abort(self, messages: list) -> None:
        """Delete the batch's files only when its commit never ran.

        Spark aborts for ANY exception of ``commit``, and an exception proves nothing: the
        catalog may have applied the commit and lost the answer, or may apply it LATER (a
        REST server still processing it, a Glue update going through after the client's
        timeout). No read of the table can prove a commit in flight will never land, so
        once commit ran nothing is deleted (Iceberg's Java client also keeps its files on
        an unknown commit state): the replay of the batch learns from the watermark
        whether it landed, and orphan-file removal reclaims the files of one that did not.

        Commit ran iff every task delivered its message: Spark passes None for a task
        that failed, and calls commit only when none did. Then the files of the tasks that
        succeeded were never sent to the catalog, and those the refreshed table does not
        reference are deleted. When the table cannot be read, nothing is deleted.
        """
        paths = [p for m in messages if isinstance(m, DataFilesWritten) for p in m.paths]
        if not paths:
            return
        if all(message is not None for message in messages):
            logger.warning(
                "Abort of batch files of %s kept its %d files: its commit ran and may land "
                "yet; the batch's replay decides, and orphan-file removal reclaims them if "
                "it never lands",
                self.options.table,
                len(paths),
            )
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


class DivergedCheckpointError(OverlappingPositionsError):
    """A batch id the writer already passed holds records the table never committed."""


def _refuse_uncommitted_skip(
    table, written: list[DataFilesWritten], batch_id: int, writer: str
) -> None:
    """Refuse to drop, as a replay, a batch whose records the table does not hold.

    The watermark says batch ``batch_id`` of ``writer`` is done, and a replay of a batch
    that landed holds only records at or before the positions that landed with it
    (positions never move backwards). A record past them means another copy of this
    query's checkpoint (same query id, so same watermark) committed batch ids past this
    one, even empty ones: skipping would move Spark's offsets past records never written.
    Found by issue 31's simulation (seed 26). Only a skip decided before any attempt of
    ours was sent is judged: after one, that attempt may still land with these records
    (a catalog still processing it), so its absence proves nothing yet.
    """
    committed = committed_positions(table)
    beyond = sorted(
        (shard, sequence)
        for message in written
        for shard, sequence in message.positions.items()
        if shard not in committed or int(sequence) > int(committed[shard])
    )
    if beyond:
        shard, sequence = beyond[0]
        raise DivergedCheckpointError(
            f"Batch {batch_id} of query {writer} is marked committed in {table.name()}, but "
            f"its records are not (shard {shard}: record {sequence} is past the committed "
            "positions): another copy of this query's checkpoint committed later batch ids. "
            "Stop the other copy and delete this query's checkpoint folder; a new checkpoint "
            "resumes after the table's committed positions."
        )


class _BatchTracker:
    """Counts rows and keeps the lowest and highest sequence number per shard.

    In Arrow, a group-by per batch: a loop over rows in Python cost a tenth of the
    executor's Python CPU in the ingest profile (benchmarks/results/REPORT.md).
    """

    def __init__(self, position_columns: tuple[str, str] | None) -> None:
        self.rows = 0
        self.positions: dict[str, str] = {}
        self.first_positions: dict[str, str] = {}
        self._columns = position_columns

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        self.rows += batch.num_rows
        if self._columns is not None and batch.num_rows:
            shard_column, sequence_column = self._columns
            for shard, low, high in _sequence_extremes(
                batch.column(shard_column), batch.column(sequence_column)
            ):
                self.positions[shard] = later_sequence(self.positions.get(shard), high)
                first = self.first_positions.get(shard)
                self.first_positions[shard] = low if first is None else _lower(first, low)
        return batch


def _sequence_extremes(shards: pa.Array, sequences: pa.Array) -> list[tuple[str, str, str]]:
    """(shard, lowest, highest) sequence number of each shard in the arrays.

    Kinesis sequence numbers are decimal strings without leading zeros: padded with
    zeros to one width, their text order is their numeric order.
    """
    width = pc.max(pc.utf8_length(sequences)).as_py()
    extremes = (
        pa.table({"shard": shards, "sequence": pc.utf8_lpad(sequences, width, "0")})
        .group_by("shard")
        .aggregate([("sequence", "min"), ("sequence", "max")])
    )
    return [
        (shard, _unpadded(low), _unpadded(high))
        for shard, low, high in zip(
            extremes.column("shard").to_pylist(),
            extremes.column("sequence_min").to_pylist(),
            extremes.column("sequence_max").to_pylist(),
            strict=True,
        )
    ]


def _unpadded(sequence: str) -> str:
    return sequence.lstrip("0") or "0"


def _lower(a: str, b: str) -> str:
    return b if int(b) < int(a) else a


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
