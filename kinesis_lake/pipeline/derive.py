"""Derived tables: raw -> parsed + quarantine -> per-minute counts, all incremental.

Each derived table remembers, in its own Iceberg commit, the snapshot of its source it
has caught up to: the commit's batch id is that source snapshot's sequence number
(monotonic), under writer id ``derive:<source table>``. A refresh therefore reads only the
data files appended to the source since then, and re-running a refresh that already
committed is skipped by the same idempotent commit that protects ingestion.

* parsed and quarantine: the new raw files are read on executors, every row is parsed
  against the declared event schema once (``mapInArrow``), valid rows go to the parsed
  table, the rest with their payload and error to quarantine: none is dropped.
* aggregate: only the minute windows that new parsed rows fall in are recomputed, from
  the parsed rows of those windows, and replace the old rows of those windows in one
  overwrite commit.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pyarrow as pa
from pyiceberg.expressions import AlwaysFalse, And, GreaterThanOrEqual, In, LessThan, Or
from pyiceberg.table import Table
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from kinesis_lake.config import Settings
from kinesis_lake.events import columns as C
from kinesis_lake.events.parse import parse_events
from kinesis_lake.events.schema import EventSchema, load_event_schema
from kinesis_lake.events.tables import (
    aggregate_arrow_schema,
    aggregate_partition_spec,
    aggregate_table_schema,
    parsed_arrow_schema,
    parsed_partition_spec,
    parsed_table_schema,
    quarantine_arrow_schema,
    quarantine_partition_spec,
    quarantine_table_schema,
)
from kinesis_lake.iceberg.commit import CommitOutcome, commit_arrow
from kinesis_lake.iceberg.data_files import TableWriteTarget
from kinesis_lake.iceberg.incremental import (
    SOURCE_SNAPSHOT_PROPERTY,
    IncrementalSlice,
    appended_since,
    caught_up_snapshot_id,
)
from kinesis_lake.iceberg.summary import derived_writer_id
from kinesis_lake.iceberg.tables import ensure_table
from kinesis_lake.pipeline.lake import open_lake
from kinesis_lake.spark.iceberg_files_reader import read_data_files
from kinesis_lake.spark.iceberg_sink import SINK_NAME

_QUARANTINED = "__quarantined"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
UNKNOWN_EVENT_TYPE = "unknown"


@dataclass
class TableRefresh:
    """What one derived table's refresh read and wrote."""

    table: str
    source_files_read: int
    source_rows_read: int
    rows_written: int
    source_snapshot_id: int | None
    committed: bool

    @property
    def up_to_date(self) -> bool:
        return self.source_files_read == 0


@dataclass
class DeriveResult:
    parsed: TableRefresh
    quarantine: TableRefresh
    aggregate: TableRefresh
    windows_recomputed: int


def ensure_derived_tables(settings: Settings, schema: EventSchema) -> dict[str, Table]:
    catalog = open_lake(settings)
    parsed_schema = parsed_table_schema(schema)
    quarantine_schema = quarantine_table_schema()
    aggregate_schema = aggregate_table_schema()
    return {
        "parsed": ensure_table(
            catalog,
            settings.parsed_table,
            parsed_schema,
            partition_spec=parsed_partition_spec(parsed_schema),
        ),
        "quarantine": ensure_table(
            catalog,
            settings.quarantine_table,
            quarantine_schema,
            partition_spec=quarantine_partition_spec(quarantine_schema),
        ),
        "aggregate": ensure_table(
            catalog,
            settings.aggregate_table,
            aggregate_schema,
            partition_spec=aggregate_partition_spec(aggregate_schema),
        ),
    }


def pending_slice(source: Table, derived: Table) -> IncrementalSlice:
    """The source's data files appended since ``derived`` last caught up with it."""
    return appended_since(source, caught_up_snapshot_id(source, derived))


def _sequence_number(table: Table, snapshot_id: int | None) -> int:
    """The sequence number of a slice's end snapshot; a slice with files always has one."""
    snapshot = table.snapshot_by_id(snapshot_id) if snapshot_id is not None else None
    assert snapshot is not None and snapshot.sequence_number is not None
    return snapshot.sequence_number


def refresh_derived(spark: SparkSession, settings: Settings) -> DeriveResult:
    """Bring parsed, quarantine and aggregate up to date with the raw table."""
    schema = load_event_schema(settings.event_schema_path)
    tables = ensure_derived_tables(settings, schema)
    raw = open_lake(settings).load_table(settings.raw_table)
    parsed, quarantine = refresh_parsed_and_quarantine(
        spark, settings, schema, raw, tables["parsed"], tables["quarantine"]
    )
    parsed_table = open_lake(settings).load_table(settings.parsed_table)
    aggregate, windows = refresh_aggregate(spark, schema, parsed_table, tables["aggregate"])
    return DeriveResult(parsed, quarantine, aggregate, windows)


def refresh_parsed_and_quarantine(
    spark: SparkSession,
    settings: Settings,
    schema: EventSchema,
    raw: Table,
    parsed: Table,
    quarantine: Table,
) -> tuple[TableRefresh, TableRefresh]:
    slices = {"parsed": pending_slice(raw, parsed), "quarantine": pending_slice(raw, quarantine)}
    results = {}
    # Both targets usually lag by the same slice; parse it once and write both.
    groups: list[tuple[str, ...]]
    if slices["parsed"].files == slices["quarantine"].files:
        groups = [("parsed", "quarantine")]
    else:
        groups = [("parsed",), ("quarantine",)]
    for group in groups:
        piece = slices[group[0]]
        if not piece.files:
            for name in group:
                results[name] = TableRefresh(
                    settings_table(settings, name), 0, 0, 0, piece.to_snapshot_id, False
                )
            continue
        target = TableWriteTarget.from_table(raw)
        raw_rows = read_data_files(
            spark,
            piece.files,
            arrow_schema=target.arrow_schema(),
            location=target.location,
            io_properties=target.io_properties,
        )
        split = parse_on_executors(raw_rows, schema)
        if schema.event_key:
            split = quarantine_duplicates(spark, split, raw_rows, schema, parsed)
        split = split.persist()
        try:
            for name in group:
                columns = (
                    parsed_arrow_schema(schema) if name == "parsed" else quarantine_arrow_schema()
                ).names
                written = split.filter(
                    ~F.col(_QUARANTINED) if name == "parsed" else F.col(_QUARANTINED)
                ).select(*columns)
                count = _append(written, settings, name, raw, piece)
                results[name] = TableRefresh(
                    settings_table(settings, name),
                    len(piece.files),
                    piece.rows,
                    count,
                    piece.to_snapshot_id,
                    True,
                )
        finally:
            split.unpersist()
    return results["parsed"], results["quarantine"]


def settings_table(settings: Settings, name: str) -> str:
    return {
        "parsed": settings.parsed_table,
        "quarantine": settings.quarantine_table,
        "aggregate": settings.aggregate_table,
    }[name]


def parse_on_executors(raw_rows: DataFrame, schema: EventSchema) -> DataFrame:
    """Parse once into a union of the parsed and quarantine columns plus a flag."""
    schema_dict = schema.to_dict()
    union = _union_schema(schema)

    def parse_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        event_schema = EventSchema.from_dict(schema_dict)
        for batch in batches:
            good, bad = parse_events(batch, event_schema)
            yield from _to_union(good, union, quarantined=False).to_batches()
            yield from _to_union(bad, union, quarantined=True).to_batches()

    return raw_rows.mapInArrow(parse_partition, from_arrow_schema(union))


_KEY_EXCERPT_CHARS = 60


def quarantine_duplicates(
    spark: SparkSession, split: DataFrame, raw_rows: DataFrame, schema: EventSchema, parsed: Table
) -> DataFrame:
    """Send every repeat of an ``event_key`` on the same UTC day to quarantine, keeping the first.

    Producers retry, so the same event can arrive twice, with the same event time. The dedup
    window is declared, not accidental: two events are the same event when they share the key
    and the UTC day of their event time. The first occurrence wins in Kinesis order (shard, then
    sequence number as an integer, then sub-sequence); later ones, in this slice or already in
    the parsed table, are quarantined with the reason rather than dropped, so
    ``parsed + quarantined == raw`` still holds. The outcome of a record therefore depends only
    on the records before it, never on what else its batch holds, and the lookup reads only the
    parsed table's day partitions the new events fall in: the cost follows the new data. The
    same key on another day is another event.

    A parsed row that *is* the record being judged (same Kinesis identity) does not count as an
    earlier occurrence: after a crash between the parsed and quarantine commits, the
    quarantine-only re-run must reach the verdicts of the first run, not quarantine every
    event it finds already parsed.
    """
    key = schema.event_key
    assert key is not None
    valid = split.filter(~F.col(_QUARANTINED)).withColumn("__day", _day(C.EVENT_TIMESTAMP))
    order = Window.partitionBy(key, "__day").orderBy(
        C.SHARD_ID, F.length(C.SEQUENCE_NUMBER), C.SEQUENCE_NUMBER, C.SUB_SEQUENCE_NUMBER
    )
    ranked = valid.withColumn("__rank", F.row_number().over(order))
    earlier = _parsed_in_days(spark, valid, parsed, key)
    identity = F.struct(*C.IDENTITY_COLUMNS)
    if earlier is not None:
        occurrences = earlier.groupBy(key, "__day").agg(F.collect_set(identity).alias("__ids"))
        ranked = ranked.join(occurrences, [key, "__day"], "left")
        seen = F.size(F.array_except("__ids", F.array(identity))) > 0
    else:
        seen = F.lit(False)
    duplicate = (F.col("__rank") > 1) | F.coalesce(seen, F.lit(False))
    payloads = raw_rows.select(*C.IDENTITY_COLUMNS, F.col(C.DATA).alias("__payload"))
    shown = F.col(key).cast("string")
    shown = F.when(
        F.length(shown) > _KEY_EXCERPT_CHARS,
        F.concat(F.substring(shown, 1, _KEY_EXCERPT_CHARS - 3), F.lit("...")),
    ).otherwise(shown)
    repeats = (
        ranked.filter(duplicate)
        .join(payloads, list(C.IDENTITY_COLUMNS), "left")
        .withColumn(C.PAYLOAD, F.col("__payload"))
        .withColumn(
            C.ERROR,
            F.format_string(
                f"duplicate event: {key}=%s was already parsed with an event time on the same "
                "UTC day",
                shown,
            ),
        )
        .withColumn(C.ERROR_FIELD, F.lit(key))
        .withColumn(C.QUARANTINED_AT, F.current_timestamp())
        .withColumn(_QUARANTINED, F.lit(True))
    )
    firsts = ranked.filter(~duplicate)
    return (
        split.filter(F.col(_QUARANTINED))
        .unionByName(firsts.select(*split.columns))
        .unionByName(repeats.select(*split.columns))
    )


def _day(column: str) -> Column:
    """The UTC day of a timestamp column (the Spark session's time zone is UTC)."""
    return F.date_trunc("day", column)


def _parsed_in_days(
    spark: SparkSession, new_events: DataFrame, parsed: Table, key: str
) -> DataFrame | None:
    """Key, day and identity of the parsed rows in the day partitions new events fall into."""
    day_micros = [row[0] for row in new_events.select(F.unix_micros("__day")).distinct().collect()]
    if not day_micros or parsed.current_snapshot() is None:
        return None
    days = [_from_micros(m) for m in day_micros]
    row_filter = Or(
        *(
            And(
                GreaterThanOrEqual(C.EVENT_TIMESTAMP, _iso(day)),
                LessThan(C.EVENT_TIMESTAMP, _iso(day + timedelta(days=1))),
            )
            for day in days
        ),
        AlwaysFalse(),
    )
    files = [task.file.file_path for task in parsed.scan(row_filter=row_filter).plan_files()]
    if not files:
        return None
    target = TableWriteTarget.from_table(parsed)
    earlier = read_data_files(
        spark,
        files,
        arrow_schema=target.arrow_schema(),
        location=target.location,
        io_properties=target.io_properties,
    )
    return earlier.select(key, *C.IDENTITY_COLUMNS, _day(C.EVENT_TIMESTAMP).alias("__day"))


def _union_schema(schema: EventSchema) -> pa.Schema:
    fields: dict[str, pa.Field] = {}
    for field in [*parsed_arrow_schema(schema), *quarantine_arrow_schema()]:
        fields.setdefault(field.name, field.with_nullable(True))
    fields[_QUARANTINED] = pa.field(_QUARANTINED, pa.bool_(), nullable=False)
    return pa.schema(list(fields.values()))


def _to_union(table: pa.Table, union: pa.Schema, *, quarantined: bool) -> pa.Table:
    columns = []
    for field in union:
        if field.name == _QUARANTINED:
            columns.append(pa.array([quarantined] * table.num_rows, pa.bool_()))
        elif field.name in table.column_names:
            columns.append(table.column(field.name).cast(field.type))
        else:
            columns.append(pa.nulls(table.num_rows, field.type))
    return pa.Table.from_arrays(columns, schema=union)


def _append(
    rows: DataFrame, settings: Settings, name: str, source: Table, piece: IncrementalSlice
) -> int:
    count = rows.count()
    assert piece.to_snapshot_id is not None
    (
        rows.write.format(SINK_NAME)
        .mode("append")
        .option("table", settings_table(settings, name))
        .option("catalog", settings.catalog_name)
        .option("dataDir", str(settings.data_dir))
        .option("writerId", derived_writer_id(source.name()[-1]))
        .option("batchId", str(_sequence_number(source, piece.to_snapshot_id)))
        .option(f"summary.{SOURCE_SNAPSHOT_PROPERTY}", str(piece.to_snapshot_id))
        .save()
    )
    return count


def refresh_aggregate(
    spark: SparkSession, schema: EventSchema, parsed: Table, aggregate: Table
) -> tuple[TableRefresh, int]:
    """Recompute only the minute windows that newly parsed rows fall into."""
    piece = pending_slice(parsed, aggregate)
    name = ".".join(aggregate.name())
    if not piece.files:
        return TableRefresh(name, 0, 0, 0, piece.to_snapshot_id, False), 0
    target = TableWriteTarget.from_table(parsed)
    arrow_schema = target.arrow_schema()
    new_rows = read_data_files(
        spark,
        piece.files,
        arrow_schema=arrow_schema,
        location=target.location,
        io_properties=target.io_properties,
    )
    # Windows travel as epoch microseconds: collecting Spark timestamps would convert
    # them to the Python process's local time zone.
    window_micros = sorted(
        row[0]
        for row in new_rows.select(F.unix_micros(F.date_trunc("minute", C.EVENT_TIMESTAMP)))
        .distinct()
        .collect()
    )
    windows = [_from_micros(m) for m in window_micros]
    counts = _window_counts(spark, schema, parsed, window_micros, arrow_schema, target)
    outcome: CommitOutcome = commit_arrow(
        aggregate,
        counts,
        writer_id=derived_writer_id(parsed.name()[-1]),
        batch_id=_sequence_number(parsed, piece.to_snapshot_id),
        summary={SOURCE_SNAPSHOT_PROPERTY: str(piece.to_snapshot_id)},
        overwrite_filter=In(C.WINDOW_START, [_iso(w) for w in windows]) if windows else None,
    )
    refresh = TableRefresh(
        name, len(piece.files), piece.rows, counts.num_rows, piece.to_snapshot_id, outcome.committed
    )
    return refresh, len(windows)


def _window_counts(
    spark: SparkSession,
    schema: EventSchema,
    parsed: Table,
    window_micros: list[int],
    arrow_schema: pa.Schema,
    target: TableWriteTarget,
) -> pa.Table:
    """Count parsed rows per (window, event type) over the files that can hold them."""
    if not window_micros:
        return aggregate_arrow_schema().empty_table()
    low = _from_micros(window_micros[0])
    high = _from_micros(window_micros[-1]) + timedelta(minutes=1)
    files = [
        task.file.file_path
        for task in parsed.scan(
            row_filter=And(
                GreaterThanOrEqual(C.EVENT_TIMESTAMP, _iso(low)),
                LessThan(C.EVENT_TIMESTAMP, _iso(high)),
            )
        ).plan_files()
    ]
    rows = read_data_files(
        spark,
        files,
        arrow_schema=arrow_schema,
        location=target.location,
        io_properties=target.io_properties,
    )
    event_type = (
        F.coalesce(F.col(schema.event_type_field).cast("string"), F.lit(UNKNOWN_EVENT_TYPE))
        if schema.event_type_field
        else F.lit(C.ALL_EVENT_TYPES)
    )
    window = F.date_trunc("minute", C.EVENT_TIMESTAMP)
    grouped = (
        rows.where(F.unix_micros(window).isin(window_micros))
        .select(window.alias(C.WINDOW_START), event_type.alias(C.EVENT_TYPE))
        .groupBy(C.WINDOW_START, C.EVENT_TYPE)
        .agg(F.count(F.lit(1)).alias(C.EVENT_COUNT))
        .withColumn(C.UPDATED_AT, F.current_timestamp())
    )
    return grouped.toArrow().cast(aggregate_arrow_schema())


def _from_micros(micros: int) -> datetime:
    """Exact (no float rounding) and valid for every year Spark can hold."""
    return _EPOCH + timedelta(microseconds=micros)


def _iso(moment: datetime) -> str:
    return moment.isoformat()
