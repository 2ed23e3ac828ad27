"""The derive job: every table downstream of raw, brought up to date incrementally.

Words used the same way everywhere: the *routed* tables are the declaration's ``tables:``,
fed by routing raw records; the *derived* tables are its ``derived:`` section (upsert and
SQL tables over other tables); *downstream* means all of them with the quarantine and the
per-minute counts: raw -> routed tables + quarantine -> counts -> derived tables.

Each derived table remembers, in its own Iceberg commit, the snapshot of its source it
has caught up to: the commit's batch id is that source snapshot's sequence number
(monotonic), under writer id ``derive:<source table>``. A refresh therefore reads only the
data files appended to the source since then, and re-running a refresh that already
committed is skipped by the same idempotent commit that protects ingestion.

* routed tables and quarantine: the new raw files are read on executors, every record is
  decoded once, routed to the tables whose routes take it and parsed against each one's
  schema (``mapInArrow``); valid rows go to their tables, the rest (undecodable, no route,
  rejected by a table's schema, repeated keys) with their payload and error to quarantine:
  none is dropped.
* aggregate: only the minute windows that new rows of its source table fall in are
  recomputed, from that table's rows of those windows, and replace the old rows of those
  windows in one overwrite commit.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import reduce

from pyiceberg.expressions import (
    AlwaysFalse,
    And,
    EqualTo,
    GreaterThanOrEqual,
    In,
    IsNull,
    LessThan,
    Or,
)
from pyiceberg.table import Table
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from kinesis_lake.config import Settings
from kinesis_lake.events import columns as C
from kinesis_lake.events.declaration import AGGREGATE_TABLE, QUARANTINE_TABLE, LakeDeclaration
from kinesis_lake.events.declaration_file import load_declaration
from kinesis_lake.events.derived_tables import DerivedTable, WindowSpec
from kinesis_lake.events.schema import EventSchema
from kinesis_lake.events.tables import (
    aggregate_partition_spec,
    aggregate_table_schema,
    quarantine_arrow_schema,
    quarantine_partition_spec,
    quarantine_table_schema,
)
from kinesis_lake.iceberg.incremental import (
    IncrementalSlice,
    appended_since,
    caught_up_snapshot_id,
)
from kinesis_lake.iceberg.lineage import (
    rebuild_if_source_moved_back,
    source_properties,
    source_summary,
)
from kinesis_lake.iceberg.summary import derived_writer_id
from kinesis_lake.iceberg.tables import ensure_table
from kinesis_lake.pipeline.lake import declared_stream, lake_streams, load_table, open_lake
from kinesis_lake.pipeline.refresh import (
    TableRefresh,
    append_rows,
    from_micros,
    iso,
    pending_slice,
    sequence_number,
)
from kinesis_lake.pipeline.routed_tables import ensure_routed_table
from kinesis_lake.pipeline.sql_tables import refresh_sql, refresh_windowed
from kinesis_lake.pipeline.upsert import ensure_upsert_tables, refresh_upsert
from kinesis_lake.spark.iceberg.files_reader import read_table_files
from kinesis_lake.spark.routing import (
    QUARANTINE,
    declared_rows,
    quarantined_rows,
    route_on_executors,
)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
UNKNOWN_EVENT_TYPE = "unknown"

OnCommit = Callable[[str, TableRefresh, dict[str, int]], None]
"""Told each table's refresh (by the table's short name, with numbers of its own such as
the aggregate's ``windows_recomputed``) as soon as its commit has landed, before the next
table's work starts: a caller shows each table fresh when it is, not when the slowest
table of the refresh is."""


def _no_report(name: str, refresh: TableRefresh, numbers: dict[str, int]) -> None:
    """The default ``OnCommit``: nobody is watching."""


@dataclass
class DeriveResult:
    tables: dict[str, TableRefresh]
    """Per routed table (its short name), in declared order."""
    quarantine: TableRefresh
    aggregate: TableRefresh
    windows_recomputed: int
    derived: dict[str, TableRefresh]
    """Per ``derived:`` table (upsert and SQL), in declared order."""

    @property
    def rows_written(self) -> int:
        return sum(refresh.rows_written for refresh in self.tables.values())


@dataclass(frozen=True)
class DownstreamTables:
    """The loaded tables one refresh writes, by role."""

    routed: dict[str, Table]
    quarantine: Table
    aggregate: Table


def ensure_downstream_tables(settings: Settings, declaration: LakeDeclaration) -> DownstreamTables:
    """Create or evolve every routed table, the quarantine and the aggregate."""
    catalog = open_lake(settings)
    routed = {}
    for table in declaration.tables:
        identifier = settings.table_identifier(table.name)
        routed[table.name] = ensure_routed_table(catalog, identifier, table)
    quarantine_schema = quarantine_table_schema()
    aggregate_schema = aggregate_table_schema()
    return DownstreamTables(
        routed,
        ensure_table(
            catalog,
            settings.quarantine_table,
            quarantine_schema,
            partition_spec=quarantine_partition_spec(quarantine_schema),
        ),
        ensure_table(
            catalog,
            settings.aggregate_table,
            aggregate_schema,
            partition_spec=aggregate_partition_spec(aggregate_schema),
        ),
    )


def refresh_downstream(
    spark: SparkSession, settings: Settings, *, on_commit: OnCommit = _no_report
) -> DeriveResult:
    """Bring every downstream table up to date with raw: the routed tables, the quarantine
    and the aggregate, then the derived tables; ``on_commit`` hears of each commit as it
    lands (a table with nothing new commits nothing and is not reported)."""
    declaration = load_declaration(settings.event_schema_path)
    tables = ensure_downstream_tables(settings, declaration)
    routed: dict[str, TableRefresh] = {}
    quarantined: list[TableRefresh] = []
    for stream in lake_streams(settings, declaration):
        raw = load_table(open_lake(stream), stream.raw_table)
        part = declaration.for_stream(declared_stream(stream, declaration))
        if raw is None:  # a stream not ingested yet: its tables wait
            continue
        written, quarantine_part = refresh_routed(
            spark, stream, part, raw, tables, on_commit=on_commit
        )
        routed.update(written)
        quarantined.append(quarantine_part)
    for name in declaration.names:
        identifier = settings.table_identifier(name)
        routed.setdefault(name, TableRefresh(identifier, 0, 0, 0, None, False))
    quarantine = _combined(settings.quarantine_table, quarantined)
    source = open_lake(settings).load_table(settings.table_identifier(declaration.aggregate_source))
    aggregate, windows = refresh_aggregate(
        spark, declaration.table(declaration.aggregate_source).schema, source, tables.aggregate
    )
    if aggregate.committed:
        on_commit(AGGREGATE_TABLE, aggregate, {"windows_recomputed": windows})
    derived = refresh_derived_tables(spark, settings, declaration, tables, on_commit=on_commit)
    return DeriveResult(
        {name: routed[name] for name in declaration.names}, quarantine, aggregate, windows, derived
    )


def refresh_derived_tables(
    spark: SparkSession,
    settings: Settings,
    declaration: LakeDeclaration,
    tables: DownstreamTables,
    *,
    on_commit: OnCommit = _no_report,
) -> dict[str, TableRefresh]:
    """Refresh the ``derived:`` tables in declared order, each after the ones it reads."""
    catalog = open_lake(settings)
    readable: dict[str, Table] = {
        name: catalog.load_table(settings.table_identifier(name)) for name in tables.routed
    }
    results: dict[str, TableRefresh] = {}
    for spec in declaration.derived:
        if spec.upsert is not None:
            source = readable[spec.source]
            upsert_tables = ensure_upsert_tables(catalog, settings, spec, source)
            results[spec.name] = refresh_upsert(spark, spec, source, upsert_tables)
            readable[spec.name] = catalog.load_table(settings.table_identifier(spec.name))
        else:
            inputs = {name: readable[name] for name in spec.inputs}
            results[spec.name] = refresh_sql(spark, catalog, settings, spec, inputs)
        if results[spec.name].committed:
            on_commit(spec.name, results[spec.name], {})
    return results


def _combined(identifier: str, refreshes: list[TableRefresh]) -> TableRefresh:
    """One table's refreshes from several raw tables, as one."""
    return TableRefresh(
        identifier,
        sum(r.source_files_read for r in refreshes),
        sum(r.source_rows_read for r in refreshes),
        sum(r.rows_written for r in refreshes),
        refreshes[-1].source_snapshot_id if refreshes else None,
        any(r.committed for r in refreshes),
    )


def refresh_routed(
    spark: SparkSession,
    settings: Settings,
    declaration: LakeDeclaration,
    raw: Table,
    tables: DownstreamTables,
    *,
    on_commit: OnCommit = _no_report,
) -> tuple[dict[str, TableRefresh], TableRefresh]:
    """Route and parse the raw files each target has not seen, and append them to it;
    ``on_commit`` hears of each target's commit as it lands.

    Every target (each routed table and the quarantine) keeps its own place in raw, so a
    crash between two targets' commits is repaired by the next refresh writing only the ones
    behind. Targets that lag by the same slice, the usual case, share one routing pass.

    The pass that starts furthest back goes first, and each pass sees the tables as the
    earlier ones left them: the quarantine's duplicate verdicts for a keyed table must be
    computed against every earlier record of that table. A table added to the declaration
    (its first refresh reads all of raw) judged by a quarantine pass over the new files
    alone, before its backfill, let a repeat of a backfilled key land in neither. The
    loaded tables in ``tables`` are left refreshed, as this refresh's commits left them.

    A target whose rows came from a raw history raw no longer has (raw dropped and
    re-created, or rolled back) is emptied first and rebuilt from the whole of raw,
    the quarantine too: its rows, and the marks of records a replay resolved (their rows
    go with the tables), are verdicts on the old history; the rebuilt raw's records are
    all judged again under the declaration as it is now, each once.
    """
    stream_tables = {name: tables.routed[name] for name in declaration.names}
    targets: dict[str, Table] = {**stream_tables, QUARANTINE: tables.quarantine}
    for table in stream_tables.values():  # each by its own record: a crash between is repaired
        rebuild_if_source_moved_back(raw, table)
    # The quarantine holds every stream's records: only this stream's are verdicts on raw.
    stream_rows = EqualTo(C.STREAM_NAME, settings.stream_name)
    rebuild_if_source_moved_back(raw, tables.quarantine, rows=stream_rows)
    backfilled = _backfill_to_quarantine(spark, settings, declaration, raw, tables)
    for name, earlier in backfilled.items():
        on_commit(name, earlier, {})
    slices = {name: pending_slice(raw, table) for name, table in targets.items()}
    groups: dict[tuple[str, ...], list[str]] = {}
    for name, piece in slices.items():
        groups.setdefault(tuple(piece.files), []).append(name)
    results: dict[str, TableRefresh] = {}
    for names in sorted(groups.values(), key=lambda names: _start(raw, slices[names[0]])):
        piece = slices[names[0]]
        if not piece.files:
            for name in names:
                identifier = ".".join(targets[name].name())
                results[name] = TableRefresh(identifier, 0, 0, 0, piece.to_snapshot_id, False)
            continue
        raw_rows = read_table_files(spark, raw, piece.files)
        routed = route_on_executors(raw_rows, declaration).persist()
        try:
            outputs = target_rows(spark, routed, raw_rows, declaration, tables, names)
            for name in names:
                identifier = ".".join(targets[name].name())
                count = _append(outputs[name], settings, identifier, raw, piece)
                results[name] = TableRefresh(
                    identifier, len(piece.files), piece.rows, count, piece.to_snapshot_id, True
                )
                targets[name].refresh()  # committed through Spark: the next pass reads it
                on_commit(QUARANTINE_TABLE if name == QUARANTINE else name, results[name], {})
        finally:
            routed.unpersist()
    for name, earlier in backfilled.items():
        results[name] = _combined(results[name].table, [earlier, results[name]])
    quarantine = results.pop(QUARANTINE)
    return {name: results[name] for name in declaration.names}, quarantine


def _backfill_to_quarantine(
    spark: SparkSession,
    settings: Settings,
    declaration: LakeDeclaration,
    raw: Table,
    tables: DownstreamTables,
) -> dict[str, TableRefresh]:
    """Bring each routed table that is behind the quarantine in raw (one just added to
    the declaration) up to the quarantine's place, and quarantine its own rejections there.

    The quarantine judged those raw records before the table existed: the table's schema
    rejections and duplicates among them would otherwise be in neither (issue 31, suspected
    c). They are appended first, so a crash before the table's commit repeats this pass;
    records the quarantine already holds for the table, or holds as taken by no table (a
    replay judges those again), are left out, so nothing is quarantined twice.
    """
    done = caught_up_snapshot_id(raw, tables.quarantine)
    if done is None:
        return {}
    behind: dict[int | None, list[str]] = {}
    for name in declaration.names:
        start = caught_up_snapshot_id(raw, tables.routed[name])
        if start is None or sequence_number(raw, start) < sequence_number(raw, done):
            behind.setdefault(start, []).append(name)
    results: dict[str, TableRefresh] = {}
    for start, names in behind.items():
        piece = appended_since(raw, start, to_snapshot_id=done)
        if not piece.files:
            continue
        raw_rows = read_table_files(spark, raw, piece.files)
        routed = route_on_executors(raw_rows, declaration).persist()
        try:
            outputs = target_rows(
                spark, routed, raw_rows, declaration, tables, [*names, QUARANTINE], judged=names
            )
            rejected = outputs[QUARANTINE].where(F.col(C.TARGET_TABLE).isin(names))
            held = _quarantined_for(spark, tables.quarantine, names)
            if held is not None:
                rejected = rejected.join(held, list(C.IDENTITY_COLUMNS), "left_anti")
            identifier = ".".join(tables.quarantine.name())
            append_rows(
                rejected,
                settings,
                identifier,
                writer_id=f"{derived_writer_id(raw.name()[-1])}:{'+'.join(names)}",
                batch_id=sequence_number(raw, done),
                summary=source_summary(raw, done),
                writer_properties=source_properties(raw),
            )
            tables.quarantine.refresh()
            for name in names:
                table = tables.routed[name]
                count = _append(outputs[name], settings, ".".join(table.name()), raw, piece)
                results[name] = TableRefresh(
                    ".".join(table.name()), len(piece.files), piece.rows, count, done, True
                )
                table.refresh()
        finally:
            routed.unpersist()
    return results


def _quarantined_for(spark: SparkSession, quarantine: Table, names: list[str]) -> DataFrame | None:
    """Identities the quarantine holds for ``names`` or for no table (a one-time scan: it
    serves a new table's backfill, which reads the whole raw table anyway)."""
    wanted = Or(IsNull(C.TARGET_TABLE), In(C.TARGET_TABLE, names))
    files = [task.file.file_path for task in quarantine.scan(row_filter=wanted).plan_files()]
    if not files:
        return None
    rows = read_table_files(spark, quarantine, files)
    wanted_rows = F.col(C.TARGET_TABLE).isNull() | F.col(C.TARGET_TABLE).isin(names)
    return rows.where(wanted_rows).select(*C.IDENTITY_COLUMNS).distinct()


def _start(raw: Table, piece: IncrementalSlice) -> int:
    """Where in raw a slice starts, as a sequence number (-1: from the beginning)."""
    if piece.from_snapshot_id is None:
        return -1
    return sequence_number(raw, piece.from_snapshot_id)


def target_rows(
    spark: SparkSession,
    routed: DataFrame,
    raw_rows: DataFrame,
    declaration: LakeDeclaration,
    tables: DownstreamTables,
    names: list[str],
    judged: Collection[str] | None = None,
) -> dict[str, DataFrame]:
    """The rows each of ``names`` receives from one routing pass.

    A table with a dedup key keeps the first occurrence of each key and day; the repeats go
    to quarantine, so the quarantine needs every keyed table's verdicts (or those of the
    ``judged`` ones: each verdict reads the table's days), a table only its own.
    """
    quarantine_columns = quarantine_arrow_schema().names
    outputs: dict[str, DataFrame] = {}
    quarantined = [quarantined_rows(routed)]
    for table in declaration.tables:
        wanted = table.name in names
        verdicts = QUARANTINE in names and (judged is None or table.name in judged)
        if not wanted and not (verdicts and table.schema.event_key):
            continue
        rows = declared_rows(routed, declaration, table.name)
        if table.schema.event_key:
            rows, repeats = deduplicate(
                spark, rows, raw_rows, table.name, table.schema, tables.routed[table.name]
            )
            quarantined.append(repeats.select(*quarantine_columns))
        if wanted:
            outputs[table.name] = rows
    if QUARANTINE in names:
        outputs[QUARANTINE] = reduce(DataFrame.unionByName, quarantined)
    return outputs


_KEY_EXCERPT_CHARS = 60


def deduplicate(
    spark: SparkSession,
    rows: DataFrame,
    raw_rows: DataFrame,
    table_name: str,
    schema: EventSchema,
    table: Table,
) -> tuple[DataFrame, DataFrame]:
    """Split a table's new rows into the first occurrence of each key and day, and the
    repeats as quarantine rows (with ``table_name`` as their target).

    Producers retry, so the same event can arrive twice, with the same event time. The dedup
    window is declared, not accidental: two events are the same event when they share the key
    and the UTC day of their event time. The first occurrence wins in Kinesis order (shard, then
    sequence number as an integer, then sub-sequence); later ones, in this slice or already in
    the table, are quarantined with the reason rather than dropped, so every raw row is still
    accounted for. The outcome of a record therefore depends only on the records before it,
    never on what else its batch holds, and the lookup reads only the table's day partitions
    the new events fall in: the cost follows the new data. The same key on another day is
    another event.

    A row already in the table that *is* the record being judged (same Kinesis identity) does
    not count as an earlier occurrence: after a crash between the table's and the quarantine's
    commits, the quarantine-only re-run must reach the verdicts of the first run, not
    quarantine every event it finds already written.
    """
    key = schema.event_key
    assert key is not None
    valid = rows.withColumn("__day", _day(C.EVENT_TIMESTAMP))
    order = Window.partitionBy(key, "__day").orderBy(
        C.SHARD_ID, F.length(C.SEQUENCE_NUMBER), C.SEQUENCE_NUMBER, C.SUB_SEQUENCE_NUMBER
    )
    ranked = valid.withColumn("__rank", F.row_number().over(order))
    earlier = _written_in_days(spark, valid, table, key)
    identity = F.struct(*C.IDENTITY_COLUMNS)
    if earlier is not None:
        # The day partitions hold every key of those days; only the new rows' keys can
        # match, and on a busy day they are few: drop the rest before the aggregation.
        # (No broadcast hint: a backfill's new keys can be millions; Spark decides.)
        new_keys = valid.select(key, "__day").distinct()
        occurrences = (
            earlier.join(new_keys, [key, "__day"], "left_semi")
            .groupBy(key, "__day")
            .agg(F.collect_set(identity).alias("__ids"))
        )
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
        .withColumn(C.TARGET_TABLE, F.lit(table_name))
        .withColumn(C.RESOLVED_AT, F.lit(None).cast("timestamp"))
        .withColumn(C.RESOLVED_INTO, F.lit(None).cast("string"))
    )
    firsts = ranked.filter(~duplicate).select(*rows.columns)
    return firsts, repeats


def _day(column: str) -> Column:
    """The UTC day of a timestamp column (the Spark session's time zone is UTC)."""
    return F.date_trunc("day", column)


def _written_in_days(
    spark: SparkSession, new_events: DataFrame, parsed: Table, key: str
) -> DataFrame | None:
    """Key, day and identity of the table's rows in the days new events fall into."""
    day_micros = [row[0] for row in new_events.select(F.unix_micros("__day")).distinct().collect()]
    if not day_micros or parsed.current_snapshot() is None:
        return None
    days = [from_micros(m) for m in day_micros]
    row_filter = Or(
        *(
            And(
                GreaterThanOrEqual(C.EVENT_TIMESTAMP, iso(day)),
                LessThan(C.EVENT_TIMESTAMP, iso(day + timedelta(days=1))),
            )
            for day in days
        ),
        AlwaysFalse(),
    )
    files = [task.file.file_path for task in parsed.scan(row_filter=row_filter).plan_files()]
    if not files:
        return None
    earlier = read_table_files(spark, parsed, files)
    return earlier.select(key, *C.IDENTITY_COLUMNS, _day(C.EVENT_TIMESTAMP).alias("__day"))


def _append(
    rows: DataFrame, settings: Settings, identifier: str, source: Table, piece: IncrementalSlice
) -> int:
    assert piece.to_snapshot_id is not None
    return append_rows(
        rows,
        settings,
        identifier,
        writer_id=derived_writer_id(source.name()[-1]),
        batch_id=sequence_number(source, piece.to_snapshot_id),
        summary=source_summary(source, piece.to_snapshot_id),
        writer_properties=source_properties(source),
    )


def refresh_aggregate(
    spark: SparkSession, schema: EventSchema, parsed: Table, aggregate: Table
) -> tuple[TableRefresh, int]:
    """Recompute only the minute windows that newly parsed rows fall into: the per-minute
    counts are one windowed SQL table (``aggregate_sql``), refreshed as declared ones are."""
    spec = aggregate_sql(schema, parsed.name()[-1])
    return refresh_windowed(spark, spec, parsed, aggregate, create=lambda _: aggregate)


def aggregate_sql(schema: EventSchema, source: str) -> DerivedTable:
    """The per-minute counts of ``source`` as the windowed SQL table it is."""
    event_type = (
        f"coalesce(CAST(`{schema.event_type_field}` AS STRING), '{UNKNOWN_EVENT_TYPE}')"
        if schema.event_type_field
        else f"'{C.ALL_EVENT_TYPES}'"
    )
    sql = (
        f"SELECT date_trunc('minute', {C.EVENT_TIMESTAMP}) AS {C.WINDOW_START}, "
        f"{event_type} AS {C.EVENT_TYPE}, count(*) AS {C.EVENT_COUNT}, "
        f"current_timestamp() AS {C.UPDATED_AT} FROM `{source}` GROUP BY 1, 2"
    )
    window = WindowSpec(C.EVENT_TIMESTAMP, "minute", C.WINDOW_START)
    return DerivedTable(AGGREGATE_TABLE, "", (source,), sql=sql, refresh="windowed", window=window)
