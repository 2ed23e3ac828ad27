"""Parquet data files for an Iceberg table, written where the data is (Spark executors).

Executors have no catalog connection: they get a :class:`TableWriteTarget`, a few
plain facts about the table, and write files that the driver later adds to the table in
one commit (:func:`kinesis_lake.iceberg.commit.commit_files`). Each file is returned as
a :class:`WrittenFile`, which carries its size, its Parquet footer and its partition
source values, so the driver commits it without opening it: reading every footer back
cost the commit of a 500-shard micro-batch 1.4 s locally, and a GET per file on S3.
Every file holds exactly one partition value and carries column statistics; otherwise
rows would silently vanish from partition-filtered scans.

All file access goes through pyiceberg's FileIO, so the same code writes to a local
warehouse and to s3:// with the table's own credentials and endpoint.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.io import PY_IO_IMPL, FileIO, OutputStream, load_file_io
from pyiceberg.io.pyarrow import (
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    parquet_path_to_id_mapping,
    pyarrow_to_schema,
)
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.table import Table, TableProperties
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.transforms import IdentityTransform, Transform, parse_transform
from pyiceberg.typedef import Record
from pyiceberg.types import IcebergType
from pyiceberg.utils.datetime import date_to_days, datetime_to_micros
from pyiceberg.utils.properties import property_as_int

from kinesis_lake.iceberg.arrow_schema import conform_batch, table_arrow_schema

logger = logging.getLogger(__name__)

# FileIO needs only its own settings; the catalog's (a database URI with its password)
# stay on the driver instead of travelling inside every task.
_IO_PROPERTY_PREFIXES = ("s3.", "gcs.", "adls.", "hdfs.", "oss.", "hf.", "client.")

# Rows are buffered per partition up to this many in-memory bytes, then written as one
# row group: big row groups compress well, and the bound keeps executor memory flat.
_ROW_GROUP_BYTES = 32 * 1024 * 1024

_PARQUET_OPTIONS = {
    "compression": "zstd",
    # add_files derives partition values and scan-pruning bounds from these.
    "write_statistics": True,
    # Iceberg timestamps are microseconds; refuse to silently drop nanoseconds.
    "coerce_timestamps": "us",
    "allow_truncated_timestamps": False,
}


@dataclass(frozen=True)
class TableWriteTarget:
    """What an executor needs to write data files for a table, and nothing more.

    Plain values only, so it pickles small into every Spark task. ``io_properties`` may
    hold storage credentials and is left out of the repr so it never reaches a log.
    """

    identifier: str
    location: str
    io_properties: dict[str, str] = field(repr=False)
    partition_fields: tuple[tuple[str, str], ...]
    target_file_size_bytes: int
    arrow_schema_ipc: bytes = field(repr=False)

    @classmethod
    def from_table(cls, table: Table) -> TableWriteTarget:
        """The write target of ``table``'s current schema and partition spec.

        Raises:
            ValueError: the table is partitioned on a nested column: a file's partition
                is computed from a top-level column's values.
        """
        schema = table.schema()
        top_level = {f.field_id for f in schema.fields}
        partition_fields = []
        for spec_field in table.spec().fields:
            column = schema.find_column_name(spec_field.source_id)
            if spec_field.source_id not in top_level:
                raise ValueError(
                    f"Table {'.'.join(table.name())} is partitioned by {spec_field.transform} "
                    f"of {column}: partition by a top-level column."
                )
            partition_fields.append((str(column), str(spec_field.transform)))
        return cls(
            identifier=".".join(table.name()),
            location=table.location().rstrip("/"),
            io_properties={
                key: value
                for key, value in table.io.properties.items()
                if key == PY_IO_IMPL or key.startswith(_IO_PROPERTY_PREFIXES)
            },
            partition_fields=tuple(partition_fields),
            target_file_size_bytes=property_as_int(
                table.properties,
                TableProperties.WRITE_TARGET_FILE_SIZE_BYTES,
                TableProperties.WRITE_TARGET_FILE_SIZE_BYTES_DEFAULT,
            )
            or TableProperties.WRITE_TARGET_FILE_SIZE_BYTES_DEFAULT,
            arrow_schema_ipc=table_arrow_schema(schema).serialize().to_pybytes(),
        )

    def arrow_schema(self) -> pa.Schema:
        """The Arrow schema files are written with (the table's, with field ids)."""
        return pa.ipc.read_schema(pa.py_buffer(self.arrow_schema_ipc))


@dataclass(frozen=True)
class WrittenFile:
    """A data file as its writer knows it: all a commit needs, without opening the file.

    ``footer`` is the Parquet footer the writer produced (pyarrow pickles it, so it travels
    from an executor to the driver in Spark's commit message); ``partition_source`` holds
    the first row's values of the partition source columns, by column name: every file
    holds one partition value, and a ``bucket`` partition cannot be told from statistics.
    """

    path: str
    size_bytes: int
    footer: pq.FileMetaData = field(repr=False)
    partition_source: dict[str, Any]


_UNSAFE_FILE_CHARACTERS = re.compile(r"[^A-Za-z0-9._-]")


def write_data_files(
    target: TableWriteTarget, batches: Iterable[pa.RecordBatch], *, file_prefix: str
) -> list[WrittenFile]:
    """Stream ``batches`` into Parquet files under the table's data directory.

    Files are ``<location>/data/<partition path>/<file_prefix>-<n>.parquet``, one
    partition value each, rolled over at the target file size. ``file_prefix`` must be
    unique per task attempt: an existing file is refused, but FileIO checks before it
    creates, so only unique prefixes rule out two attempts racing. Batches are matched
    to the table schema by column name (missing optional columns become nulls).

    Returns the files written; none for empty input. On failure every file this call
    created is deleted before the error propagates.
    """
    # Writer ids such as "derive:raw_events" name files; Hadoop's paths (Iceberg Java,
    # Spark, Athena) cannot hold a colon in a file name, and S3 tools dislike the rest.
    safe_prefix = _UNSAFE_FILE_CHARACTERS.sub("-", file_prefix)
    schema = target.arrow_schema()
    io = load_file_io(target.io_properties, target.location)
    partitioner = _Partitioner(schema, target.partition_fields)
    partition_columns = [column for column, _ in target.partition_fields]
    sequence = itertools.count()
    writers: dict[str, _RollingParquetFile] = {}

    def path_maker(partition_path: str) -> Callable[[], str]:
        directory = f"{target.location}/data/{partition_path}".rstrip("/")
        return lambda: f"{directory}/{safe_prefix}-{next(sequence):05d}.parquet"

    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            for partition_path, rows in partitioner.split(conform_batch(batch, schema)):
                writer = writers.get(partition_path)
                if writer is None:
                    writer = _RollingParquetFile(
                        io,
                        schema,
                        path_maker(partition_path),
                        target.target_file_size_bytes,
                        partition_columns,
                    )
                    writers[partition_path] = writer
                writer.write(rows)
        for writer in writers.values():
            writer.finish()
    except BaseException:
        for writer in writers.values():
            writer.abort()
        _delete(io, [path for writer in writers.values() for path in writer.paths])
        raise
    return [file for writer in writers.values() for file in writer.files]


def delete_files(io_properties: dict[str, str], location: str, paths: Iterable[str]) -> None:
    """Delete data files that will never be committed (aborted or duplicate batches).

    Already-missing files are fine: an abort may run twice.
    """
    _delete(load_file_io(io_properties, location), paths)


class _Partitioner:
    """Splits batches by partition value, computed with pyiceberg's own transforms.

    Using pyiceberg's transforms (not hand-written date math) guarantees the values
    agree with the partition add_files later infers from the same rows.
    """

    def __init__(self, schema: pa.Schema, partition_fields: tuple[tuple[str, str], ...]):
        iceberg_schema = pyarrow_to_schema(schema)
        self._fields = [
            _PartitionField(column, parse_transform(name), iceberg_schema.find_type(column))
            for column, name in partition_fields
        ]

    def split(self, batch: pa.RecordBatch) -> Iterator[tuple[str, pa.RecordBatch]]:
        if not self._fields:
            yield "", batch
            return
        keys = [f.values(batch) for f in self._fields]
        key_table = pa.table(keys, names=[f.column for f in self._fields])
        distinct = key_table.group_by(key_table.column_names).aggregate([]).to_pylist()
        for row in distinct:
            values = list(row.values())
            path = "/".join(f.path_segment(v) for f, v in zip(self._fields, values, strict=True))
            if len(distinct) == 1:
                yield path, batch
                continue
            mask = None
            for key, value in zip(keys, values, strict=True):
                matches = pc.is_null(key) if value is None else pc.equal(key, value)
                mask = matches if mask is None else pc.and_(mask, matches)
            yield path, batch.filter(mask)


@dataclass(frozen=True)
class _PartitionField:
    column: str
    transform: Transform[Any, Any]
    source_type: IcebergType

    def values(self, batch: pa.RecordBatch) -> pa.Array:
        """Partition values of the batch's rows, in Iceberg's internal representation."""
        column = batch.column(self.column)
        if isinstance(self.transform, IdentityTransform):
            values = column
        else:
            values = self.transform.pyarrow_transform(self.source_type)(column)
        if pa.types.is_timestamp(values.type) or pa.types.is_time(values.type):
            return values.cast(pa.int64())
        if pa.types.is_date(values.type):
            return values.cast(pa.int32())
        return values

    def path_segment(self, value: object) -> str:
        name = self.column
        if not isinstance(self.transform, IdentityTransform):
            name = f"{self.column}_{str(self.transform).split('[')[0]}"
        human = self.transform.to_human_string(self.source_type, value)
        return f"{name}={quote(human, safe='')}"


def data_files_of(metadata: TableMetadata, files: Iterable[WrittenFile]) -> list[DataFile]:
    """``DataFile`` entries for files ``write_data_files`` wrote, ready to append.

    Statistics come from the footer each writer kept and the partition from the file's
    partition source values, with pyiceberg's own transforms: no file is read.
    """
    spec, schema = metadata.spec(), metadata.schema()
    sources = [schema.find_field(spec_field.source_id) for spec_field in spec.fields]
    stats_columns = compute_statistics_plan(schema, metadata.properties)
    column_mapping = parquet_path_to_id_mapping(schema)
    data_files = []
    for file in files:
        partition = Record(
            *(
                spec_field.transform.transform(source.field_type)(
                    _internal(file.partition_source[source.name])
                )
                for spec_field, source in zip(spec.fields, sources, strict=True)
            )
        )
        statistics = data_file_statistics_from_parquet_metadata(
            parquet_metadata=file.footer,
            stats_columns=stats_columns,
            parquet_column_mapping=column_mapping,
        )
        data_files.append(
            DataFile.from_args(
                content=DataFileContent.DATA,
                file_path=file.path,
                file_format=FileFormat.PARQUET,
                partition=partition,
                file_size_in_bytes=file.size_bytes,
                sort_order_id=None,
                spec_id=metadata.default_spec_id,
                equality_ids=None,
                key_metadata=None,
                **statistics.to_serialized_dict(),
            )
        )
    return data_files


def _internal(value: object) -> object:
    """A Python value as Iceberg's transforms take it (timestamps as microseconds, dates
    as days since the epoch)."""
    if isinstance(value, datetime):
        return datetime_to_micros(value)
    if isinstance(value, date):
        return date_to_days(value)
    return value


class _RollingParquetFile:
    """One partition's output: buffered row groups, a new file at the target size."""

    def __init__(
        self,
        io: FileIO,
        schema: pa.Schema,
        new_path: Callable[[], str],
        target_bytes: int,
        partition_columns: list[str],
    ) -> None:
        self.paths: list[str] = []
        self.files: list[WrittenFile] = []
        self._partition_columns = partition_columns
        self._partition_source: dict[str, Any] = {}
        self._io = io
        self._schema = schema
        self._new_path = new_path
        self._target_bytes = target_bytes
        self._row_group_bytes = min(target_bytes, _ROW_GROUP_BYTES)
        self._pending: list[pa.RecordBatch] = []
        self._pending_bytes = 0
        self._stream: OutputStream | None = None
        self._writer: pq.ParquetWriter | None = None

    def write(self, batch: pa.RecordBatch) -> None:
        self._pending.append(batch)
        self._pending_bytes += batch.nbytes
        if self._pending_bytes >= self._row_group_bytes:
            self._flush()

    def finish(self) -> None:
        self._flush()
        self._close_file()

    def abort(self) -> None:
        """Close whatever is open without flushing; the caller deletes the files."""
        try:
            self._close_file()
        except Exception:
            logger.warning("Could not close a partial data file while aborting", exc_info=True)

    def _flush(self) -> None:
        if not self._pending:
            return
        writer, stream = self._writer, self._stream
        if writer is None or stream is None:
            path = self._new_path()
            self.paths.append(path)
            stream = self._stream = self._io.new_output(path).create(overwrite=False)
            writer = self._writer = pq.ParquetWriter(stream, self._schema, **_PARQUET_OPTIONS)
            first = self._pending[0].select(self._partition_columns).slice(0, 1)
            self._partition_source = first.to_pylist()[0] if self._partition_columns else {}
        rows = pa.Table.from_batches(self._pending, schema=self._schema)
        writer.write_table(rows, row_group_size=rows.num_rows)
        self._pending = []
        self._pending_bytes = 0
        if stream.tell() >= self._target_bytes:
            self._close_file()

    def _close_file(self) -> None:
        writer, stream = self._writer, self._stream
        self._writer = self._stream = None
        if writer is not None:
            writer.close()
        if stream is not None:
            size = stream.tell()
            stream.close()
            if writer is not None:
                # The footer pyiceberg's own writer reads its statistics from, too.
                footer = writer.writer.metadata
                self.files.append(WrittenFile(self.paths[-1], size, footer, self._partition_source))


def _delete(io: FileIO, paths: Iterable[str]) -> None:
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            io.delete(path)
