"""``spark.read.format("kinesis_lake_iceberg").option("fresh", "true").load("orders")``:
the Spark batch reader's fresh read, the same rows as :func:`~kinesis_lake.pipeline.
fresh_read.fresh_read` (and ``kinesis-lake query --fresh``).

The tables' reader (:mod:`kinesis_lake.spark.iceberg.sink`) may not import the pipeline,
yet the tail is routed and deduplicated by the pipeline's code and the lake's settings
(stream, endpoint, declaration). So the lake registers, under the same source name, a
subclass built with its :class:`~kinesis_lake.config.Settings`
(:func:`register_fresh_reads`): Spark pickles the registered class by value, settings
included, so the planning worker needs no environment of its own. Without ``fresh`` it
is the ordinary reader; a bare registration refuses ``fresh`` in one line.

The driver plans once, when Spark asks for the schema at ``load`` (the frame keeps the
rows its schema was given, as the ordinary reader keeps its snapshot): it reads the tail
and decides its rows (small: bounded by the limits, ``freshMaxRecords``, ``freshMaxBytes``
and ``freshMaxAge``, as ``query --fresh``'s flags), and for an upsert table the keys they
decide again; the snapshot itself is read by the executors, one task per data file, as
the ordinary reader reads it, so a fresh read scales as a plain one does. What the read
left out is logged on the driver with
:meth:`~kinesis_lake.pipeline.fresh_read.FreshRead.describe`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from kinesis_lake.config import Settings
from kinesis_lake.errors import ConfigurationError
from kinesis_lake.pipeline.fresh_read import FreshRead, TailLimits, fresh_read
from kinesis_lake.spark.iceberg.files_reader import FilesReader
from kinesis_lake.spark.iceberg.sink import IcebergDataSource, wants_fresh
from kinesis_lake.spark.iceberg.table_reader import scan_file_tasks
from kinesis_lake.spark.spark_version import register_data_source, replaces_data_sources

log = logging.getLogger(__name__)

_ROWS_PER_PARTITION = 100_000


@dataclass(frozen=True)
class PlannedFreshRead:
    """What the driver planned, picklable (Spark pickles the source after ``schema()``):
    one task per data file of the snapshot, read on the executors, and the fresh rows."""

    schema: pa.Schema
    partitions: tuple[InputPartition, ...]

    @classmethod
    def of(cls, fresh: FreshRead) -> PlannedFreshRead:
        snapshot = fresh.snapshot
        files: list[InputPartition] = []
        if snapshot.table is not None and snapshot.snapshot_id is not None:
            planned = snapshot.table.scan(snapshot_id=snapshot.snapshot_id).plan_files()
            files = list(
                scan_file_tasks(snapshot.table, planned, snapshot.schema, snapshot.row_filter)
            )
        return cls(snapshot.schema, (*files, *ArrowRowsReader.of(fresh.fresh).partitions()))


class FreshIcebergDataSource(IcebergDataSource):
    """The tables' reader with option ``fresh``; ``settings`` is set by the registration."""

    settings: Settings | None = None

    def _fresh(self) -> PlannedFreshRead:
        planned: PlannedFreshRead | None = getattr(self, "_fresh_read", None)
        if planned is None:
            if self.settings is None:
                raise ConfigurationError(
                    "FreshIcebergDataSource has no settings: register it with "
                    "register_fresh_reads(spark, settings)."
                )
            options = {key.lower(): value for key, value in self.options.items()}
            name = (options.get("table") or options.get("path") or "").rsplit(".", 1)[-1]
            fresh = fresh_read(self.settings, name, limits=fresh_limits(options))
            log.log(
                logging.WARNING if fresh.tail_truncated else logging.INFO,
                "fresh %s",
                fresh.describe(name),
            )
            for warning in fresh.warnings:
                log.warning("fresh %s: %s", name, warning)
            planned = self._fresh_read = PlannedFreshRead.of(fresh)
        return planned

    def schema(self) -> StructType:
        if not wants_fresh(dict(self.options)):
            return super().schema()
        return from_arrow_schema(self._fresh().schema)

    def reader(self, schema: StructType) -> DataSourceReader:
        if not wants_fresh(dict(self.options)):
            return super().reader(schema)
        return FreshReader(self._fresh().partitions)


def fresh_limits(options: dict[str, str]) -> TailLimits:
    """:class:`TailLimits` from lower-cased options ``freshmaxrecords``, ``freshmaxbytes``
    and ``freshmaxage``."""
    records, size = options.get("freshmaxrecords"), options.get("freshmaxbytes")
    age = options.get("freshmaxage")
    try:
        return TailLimits(
            max_records=int(records) if records else TailLimits.max_records,
            max_age_s=float(age) if age else None,
            max_bytes=int(size) if size else None,
        )
    except ValueError as error:
        raise ConfigurationError(
            f"Options 'freshMaxRecords'={records!r}/'freshMaxBytes'={size!r}/"
            f"'freshMaxAge'={age!r}: {error}; give whole numbers of records and bytes and "
            "a number of seconds."
        ) from None


@dataclass(frozen=True)
class ArrowRows(InputPartition):
    """Rows computed on the driver, as Arrow IPC bytes."""

    ipc: bytes


class ArrowRowsReader(DataSourceReader):
    """Rows the driver computed, read back by the executors one partition at a time."""

    def __init__(self, parts: list[bytes]) -> None:
        self.parts = parts

    @classmethod
    def of(cls, table: pa.Table) -> ArrowRowsReader:
        parts = []
        for start in range(0, max(table.num_rows, 1), _ROWS_PER_PARTITION):
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, table.schema) as writer:
                writer.write_table(table.slice(start, _ROWS_PER_PARTITION))
            parts.append(sink.getvalue().to_pybytes())
        return cls(parts)

    def partitions(self) -> Sequence[InputPartition]:
        return [ArrowRows(part) for part in self.parts]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ArrowRows)
        yield from pa.ipc.open_stream(partition.ipc).read_all().to_batches()


class FreshReader(DataSourceReader):
    """The snapshot's files and the fresh rows, each partition read on an executor."""

    def __init__(self, partitions: Sequence[InputPartition]) -> None:
        self.planned = list(partitions)

    def partitions(self) -> Sequence[InputPartition]:
        return self.planned

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, ArrowRows):
            return ArrowRowsReader([]).read(partition)
        return FilesReader([]).read(partition)


def register_fresh_reads(spark: SparkSession, settings: Settings) -> SparkSession:
    """Register, as ``kinesis_lake_iceberg``, the tables' reader that also reads fresh,
    for the lake ``settings`` describes (a class of its own, carrying them).

    Raises:
        ConfigurationError: on Spark 4.0, which keeps the plain reader registered first,
            so the option would be refused as if this were never called.
    """
    if not replaces_data_sources(spark.version):
        raise ConfigurationError(
            f"The Spark reader's option 'fresh' needs Spark 4.1 or later (this is "
            f"{spark.version}, which keeps the plain tables' reader); on it, read fresh "
            "with kinesis_lake.pipeline.fresh_read.fresh_read or `kinesis-lake query --fresh`."
        )
    source = type("LakeFreshIcebergDataSource", (FreshIcebergDataSource,), {"settings": settings})
    register_data_source(spark, source)
    return spark
