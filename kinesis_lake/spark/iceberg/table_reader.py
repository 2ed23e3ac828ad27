"""``spark.read.format("kinesis_lake_iceberg").load("raw_events")``: a lake table as a
Spark DataFrame, read on the executors, without the Iceberg Spark runtime.

The driver plans with pyiceberg, as Iceberg's own Spark reader plans with the Java
library: the snapshot (current, ``snapshot-id`` or ``as-of-timestamp``, Iceberg's option
names), the columns (``columns``), and, with a ``filter`` option (an Iceberg row filter),
only the data files whose partitions and column statistics can hold matching rows; the
executors then drop the rows of those files that do not match. Filters written in Spark
(``.where``) are applied by Spark after the read and prune nothing (see
:class:`TableReader`). Each file is one task of
:class:`kinesis_lake.spark.iceberg.files_reader.FilesReader`, the reader the derived-table
refreshes use for the files appended since their last run.

PySpark's Python data sources get no column pruning from Spark, so ``.select`` after
``load`` still reads every column: name the columns with ``columns`` to read only those.
Position delete files (merge-on-read upsert tables) are applied: the driver reads them
once and each task drops its file's deleted rows. Deletion vectors and equality deletes
(other engines' writes) are refused, naming the readers that apply them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyiceberg.expressions.parser import parse
from pyiceberg.expressions.visitors import bind, extract_field_ids
from pyiceberg.io.pyarrow import expression_to_pyarrow
from pyiceberg.table import Table
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from kinesis_lake.errors import ConfigurationError
from kinesis_lake.iceberg.arrow_schema import table_arrow_schema
from kinesis_lake.kinesis.start_positions import TIMESTAMP_FORMS, parse_timestamp_ms
from kinesis_lake.spark.iceberg.files_reader import FilesReader, FileTask, scan_file_tasks


class TableReadError(ConfigurationError):
    """A read option names a snapshot, time or column the table does not have."""


@dataclass(frozen=True)
class TableRead:
    """What the driver decided: the snapshot and its (projected) schema. Picklable: Spark
    moves the reader between its planning workers; the table is opened again to plan."""

    snapshot_id: int | None
    arrow_schema: pa.Schema
    """The columns returned."""
    row_filter: str
    read_schema: pa.Schema
    """The columns returned and those the filter needs."""

    @classmethod
    def plan(cls, table: Table, options: dict[str, str]) -> TableRead:
        lowered = {key.lower(): value for key, value in options.items()}
        name = ".".join(table.name())
        snapshot_id = _snapshot_id(table, name, lowered)
        schema = table.schema()
        if snapshot_id is not None:
            snapshot = table.snapshot_by_id(snapshot_id)
            if snapshot is not None and snapshot.schema_id is not None:
                schema = table.schemas()[snapshot.schema_id]
        arrow_schema = table_arrow_schema(schema)
        columns = [c.strip() for c in (lowered.get("columns") or "").split(",") if c.strip()]
        missing = [c for c in columns if c not in arrow_schema.names]
        if missing:
            raise TableReadError(
                f"Option 'columns' names {', '.join(missing)}, which {name} does not have; "
                f"its columns are: {', '.join(arrow_schema.names)}."
            )
        table_schema = arrow_schema
        if columns:
            arrow_schema = pa.schema([table_schema.field(c) for c in columns])
        row_filter = (lowered.get("filter") or "").strip() or "True"
        try:
            bound = bind(schema, parse(row_filter), case_sensitive=True)
        except Exception as error:
            raise TableReadError(
                f"Option 'filter'={row_filter!r} is not an Iceberg row filter on {name} "
                f"({str(error).splitlines()[0]}); write e.g. "
                "\"approximate_arrival_timestamp >= '2026-11-01T00:00:00+00:00'\"."
            ) from None
        needed = {str(schema.find_column_name(i)).split(".")[0] for i in extract_field_ids(bound)}
        read_schema = pa.schema(
            [f for f in table_schema if f.name in arrow_schema.names or f.name in needed]
        )
        return cls(snapshot_id, arrow_schema, row_filter, read_schema)

    @property
    def spark_schema(self) -> StructType:
        return from_arrow_schema(self.arrow_schema)

    def tasks(self, table: Table) -> list[FileTask]:
        if self.snapshot_id is None:
            return []  # a table with no snapshot yet holds no rows
        scan = table.scan(
            row_filter=self.row_filter,
            snapshot_id=self.snapshot_id,
            selected_fields=tuple(self.read_schema.names),
        )
        schema = table.schema()
        row_filter = (
            # With the schema, fields inside structs are named by their full path.
            expression_to_pyarrow(bind(schema, parse(self.row_filter), True), schema)
            if self.row_filter != "True"
            else None
        )
        output = tuple(self.arrow_schema.names) if self.read_schema != self.arrow_schema else None
        return scan_file_tasks(table, scan.plan_files(), self.read_schema, row_filter, output)


def _snapshot_id(table: Table, name: str, options: dict[str, str]) -> int | None:
    by_id, as_of = options.get("snapshot-id"), options.get("as-of-timestamp")
    if by_id and as_of:
        raise TableReadError("Options 'snapshot-id' and 'as-of-timestamp' exclude each other.")
    if by_id:
        if not by_id.strip().lstrip("-").isdigit() or table.snapshot_by_id(int(by_id)) is None:
            raise TableReadError(
                f"Option 'snapshot-id'={by_id!r}: {name} has no such snapshot "
                "(`kinesis-lake history` lists them)."
            )
        return int(by_id)
    if as_of:
        try:
            moment_ms = parse_timestamp_ms(as_of)
        except ValueError:
            raise TableReadError(
                f"Option 'as-of-timestamp'={as_of!r} is neither {TIMESTAMP_FORMS}."
            ) from None
        snapshot = table.snapshot_as_of_timestamp(moment_ms)
        if snapshot is None:
            first = min((s.timestamp_ms for s in table.snapshots()), default=None)
            raise TableReadError(
                f"Option 'as-of-timestamp'={as_of!r} is before {name}'s first snapshot"
                + (f" (epoch ms {first})." if first is not None else " (it has none yet).")
            )
        return snapshot.snapshot_id
    current = table.current_snapshot()
    return current.snapshot_id if current is not None else None


class TableReader(DataSourceReader):
    """Driver: plans the files; executors: one :class:`FilesReader` task per file.

    Spark pickles the reader from one planning worker to the next and then to the
    executors, so it holds only picklable state and ``open_table`` reopens the table where
    planning needs it.

    No ``pushFilters``: in PySpark 4.3 the reader a filtered query pushed its filters into
    is reused by later plans of the same unfiltered DataFrame (seen while building this:
    after ``df.where(...)`` was planned, ``df.count()`` returned the filtered count), so
    pruning is the explicit ``filter`` option.
    """

    def __init__(self, open_table: Callable[[], Table], read: TableRead) -> None:
        self.open_table = open_table
        self.read_plan = read

    def partitions(self) -> Sequence[InputPartition]:
        return FilesReader(self.read_plan.tasks(self.open_table())).partitions()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return FilesReader([]).read(partition)
