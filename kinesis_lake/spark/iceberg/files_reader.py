"""Batch reading of an Iceberg table's data files on executors.

Derived tables refresh from the raw rows appended since the snapshot they last processed
(:func:`kinesis_lake.iceberg.incremental.appended_since`). The driver only plans: it
lists those files from the manifests. Each executor task opens its Parquet files (small
ones packed into one task, as Spark's own file sources pack them) through pyiceberg's
FileIO (local paths and s3:// alike) and streams their Arrow batches, so refresh
work scales with the new files and with the cluster, not with the table or the driver.

Raw tables are append-only and written by :mod:`kinesis_lake.spark.iceberg.sink` with the
table's exact schema, so reading a file whole is reading its rows; files written under an
older schema are projected onto the current one (new columns read as nulls). Tables with
row deletes (merge-on-read upsert tables) are read from planned scan tasks
(:func:`read_planned_files`): the driver reads the tasks' position delete files once
and each task drops its file's deleted positions, so Spark sees exactly the rows a
pyiceberg scan gives.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.io import load_file_io
from pyiceberg.table import FileScanTask, Table
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema

from kinesis_lake.iceberg.data_files import TableWriteTarget
from kinesis_lake.iceberg.row_deletes import deleted_positions
from kinesis_lake.spark.packing import MAX_TASK_BYTES, MIN_TASK_BYTES, known_cores, pack_by_bytes
from kinesis_lake.spark.worker_process import freeze_imported_objects


@dataclass(frozen=True)
class FileTask(InputPartition):
    """One data file to read. ``io_properties`` may hold storage credentials, so they
    are left out of the repr: a task printed in a log or an error report must not carry
    them (the same rule as ``TableWriteTarget``).

    ``schema_ipc`` is what is read from the file; with a ``row_filter`` (a PyArrow
    expression over those columns) only matching rows are kept, and ``output`` names the
    columns returned (the filter may need columns the caller did not ask for).
    ``deleted``: the sorted row positions (int64, native order) the table's delete files
    delete in this file, dropped before anything else. ``positions``: each row also gets
    :data:`FILE_PATH` and :data:`POSITION` (its row number in the file), what a position
    delete names. ``size``: the file's bytes, what packing small files into one task
    counts (0: unknown, and the file gets a task of its own).
    """

    path: str
    location: str
    io_properties: dict[str, str] = field(repr=False)
    schema_ipc: bytes = field(repr=False)
    row_filter: pc.Expression | None = field(default=None, repr=False)
    output: tuple[str, ...] | None = None
    deleted: bytes = field(default=b"", repr=False)
    positions: bool = False
    size: int = 0


@dataclass(frozen=True)
class FileGroup(InputPartition):
    """Several small files read by one task, one after another (:meth:`FilesReader.partitions`)."""

    files: tuple[FileTask, ...]


FILE_PATH = "__file_path"
POSITION = "__pos"
_POSITION_FIELDS = [pa.field(FILE_PATH, pa.string()), pa.field(POSITION, pa.int64())]


class FilesReader(DataSourceReader):
    """Each task reads its data files, only the columns of their schema, on an executor.

    With ``min_tasks`` (the cores known where the read was planned), small files are
    packed into one task by Spark's file-split rule (:func:`kinesis_lake.spark.packing.
    pack_by_bytes` with the open cost added per file), as Spark's own Parquet reader
    does: a merge-on-read refresh reads the key columns of a few hundred small files, and
    at one task (and one Python worker hand-over) per file that cost followed the table's
    file count, not its bytes (benchmark 8). Without it, every file is a task.
    """

    def __init__(self, tasks: list[FileTask], min_tasks: int | None = None) -> None:
        self.tasks = tasks
        self.min_tasks = min_tasks

    def partitions(self) -> list[InputPartition]:
        if self.min_tasks is None or any(task.size <= 0 for task in self.tasks):
            return list(self.tasks)
        estimates = {
            f"{index:09d}": task.size + MIN_TASK_BYTES for index, task in enumerate(self.tasks)
        }
        groups = pack_by_bytes(estimates, MAX_TASK_BYTES, self.min_tasks)
        return [
            self.tasks[int(group[0])]
            if len(group) == 1
            else FileGroup(tuple(self.tasks[int(one)] for one in group))
            for group in groups
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, FileGroup):
            for task in partition.files:
                yield from _read_file(task)
        elif isinstance(partition, FileTask):
            yield from _read_file(partition)
        # else nothing was planned: Spark still reads one empty partition


def _read_file(task: FileTask) -> Iterator[pa.RecordBatch]:
    freeze_imported_objects()
    schema = pa.ipc.read_schema(pa.py_buffer(task.schema_ipc))
    io = load_file_io(task.io_properties, task.location)
    with io.new_input(task.path).open() as stream:
        parquet = pq.ParquetFile(stream)
        present = set(parquet.schema_arrow.names)
        # At least one column, so batches carry the row count when every wanted
        # column was added after this file was written (read as nulls).
        columns = [name for name in schema.names if name in present] or [
            parquet.schema_arrow.names[0]
        ]
        deleted = np.frombuffer(task.deleted, dtype=np.int64)
        offset = 0
        for batch in parquet.iter_batches(batch_size=65_536, columns=columns):
            batch, offset = _live(_project(batch, schema), task, deleted, offset)
            yield from _kept(batch, task)


def _live(
    batch: pa.RecordBatch, task: FileTask, deleted: np.ndarray, offset: int
) -> tuple[pa.RecordBatch, int]:
    """``batch`` (rows ``offset`` on of the file) without its deleted rows, with their
    positions when asked; and the next batch's offset."""
    end = offset + batch.num_rows
    if task.positions:
        batch = pa.RecordBatch.from_arrays(
            [
                *batch.columns,
                pa.array([task.path] * batch.num_rows, pa.string()),
                pa.array(np.arange(offset, end, dtype=np.int64)),
            ],
            schema=pa.schema([*batch.schema, *_POSITION_FIELDS]),
        )
    low, high = np.searchsorted(deleted, [offset, end])
    if high > low:
        keep = np.ones(batch.num_rows, dtype=bool)
        keep[deleted[low:high] - offset] = False
        batch = batch.filter(pa.array(keep))
    return batch, end


def _kept(batch: pa.RecordBatch, task: FileTask) -> Iterator[pa.RecordBatch]:
    if task.row_filter is None and task.output is None:
        yield batch
        return
    kept = pa.Table.from_batches([batch])
    if task.row_filter is not None:
        kept = kept.filter(task.row_filter)
    if task.output is not None:
        kept = kept.select(list(task.output))
    yield from kept.to_batches()


def _project(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    columns = []
    for target in schema:
        index = batch.schema.get_field_index(target.name)
        if index < 0:
            columns.append(pa.nulls(batch.num_rows, target.type))
        else:
            columns.append(batch.column(index).cast(target.type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def read_data_files(
    spark: SparkSession,
    paths: list[str],
    *,
    arrow_schema: pa.Schema,
    location: str,
    io_properties: dict[str, str],
) -> DataFrame:
    """A DataFrame over exactly these data files, read on executors."""
    schema_ipc = arrow_schema.serialize().to_pybytes()
    tasks = [FileTask(path, location, dict(io_properties), schema_ipc) for path in paths]
    return _files_frame(spark, tasks, arrow_schema)


def read_planned_files(
    spark: SparkSession,
    table: Table,
    planned: list[FileScanTask],
    *,
    columns: tuple[str, ...] = (),
    positions: bool = False,
) -> DataFrame:
    """The rows of ``table``'s planned scan tasks (``table.scan(...).plan_files()``), each
    file without the rows its delete files delete; only ``columns`` if given, and with
    :data:`FILE_PATH` and :data:`POSITION` when ``positions``."""
    schema = TableWriteTarget.from_table(table).arrow_schema()
    if columns:
        schema = pa.schema([schema.field(name) for name in columns])
    tasks = scan_file_tasks(table, planned, schema, positions=positions)
    return _files_frame(
        spark, tasks, pa.schema([*schema, *_POSITION_FIELDS]) if positions else schema
    )


def scan_file_tasks(
    table: Table,
    planned: Iterable[FileScanTask],
    schema: pa.Schema,
    row_filter: pc.Expression | None = None,
    output: tuple[str, ...] | None = None,
    *,
    positions: bool = False,
) -> list[FileTask]:
    """A :class:`FileTask` per planned file of ``table``: its rows in ``schema`` (cast to
    it), without those its delete files delete (read here, once), then only those
    ``row_filter`` keeps."""
    target = TableWriteTarget.from_table(table)
    schema_ipc = schema.serialize().to_pybytes()
    planned = list(planned)
    deleted = deleted_positions(table.io, {d for task in planned for d in task.delete_files})
    return [
        FileTask(
            task.file.file_path,
            target.location,
            target.io_properties,
            schema_ipc,
            row_filter,
            output,
            deleted=deleted.get(task.file.file_path, np.empty(0, np.int64)).tobytes(),
            positions=positions,
            size=task.file.file_size_in_bytes,
        )
        for task in planned
    ]


def _files_frame(spark: SparkSession, tasks: list[FileTask], arrow_schema: pa.Schema) -> DataFrame:
    spark_schema = from_arrow_schema(arrow_schema)
    min_tasks = max(known_cores(spark), 1)

    source_name = f"kinesis_lake_data_files_{uuid.uuid4().hex}"

    class _DataFilesSource(DataSource):
        """Registered per call under its own name: it carries this call's file list to the
        planner without putting storage credentials into options, which plans print."""

        @classmethod
        def name(cls) -> str:
            return source_name

        def schema(self):
            return spark_schema

        def reader(self, schema) -> FilesReader:
            return FilesReader(tasks, min_tasks)

    spark.dataSource.register(_DataFilesSource)
    return spark.read.format(source_name).load()


def read_table_files(spark: SparkSession, table: Table, paths: list[str]) -> DataFrame:
    """``read_data_files`` of ``table``'s files, in the table's current schema."""
    target = TableWriteTarget.from_table(table)
    return read_data_files(
        spark,
        paths,
        arrow_schema=target.arrow_schema(),
        location=target.location,
        io_properties=target.io_properties,
    )
