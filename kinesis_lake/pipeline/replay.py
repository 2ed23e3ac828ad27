"""Quarantine replay: after the declaration is fixed, move the records it now takes.

Each unresolved quarantine row is routed and parsed again, from its stored payload, with
the declaration as it is now. A row quarantined for one table (``target_table``) is fixed
when that table now takes it; a row no table could take (undecodable, no route) is fixed
when it now lands in at least one table and no table rejects it. Fixed records are
appended to their tables, then marked resolved in quarantine (``resolved_at``,
``resolved_into``) in one commit; the rest stay as they are. Records the Kinesis source
flagged (``kinesis source error``) are never replayed: their payload is not the record.

Exactly once, whatever was interrupted: the table appends are idempotent batches
(``replay:<quarantine>``, numbered by the quarantine snapshot replayed) and skip every
record the table already holds (by Kinesis identity), and only the marking commit makes a
row leave the candidates. Reconciliation counts unresolved quarantine rows only, so every
raw row stays in its tables or in quarantine, never both. A replay first brings the tables
up to date with raw, as the next refresh would: a table added to the declaration is then
filled from raw by its first refresh before any quarantined record moves into it, so
replay and run may come in either order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import reduce

import pyarrow as pa
from pyiceberg.expressions import And, BooleanExpression, EqualTo, IsNull, Or
from pyiceberg.table import Table
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from kinesis_lake.config import Settings
from kinesis_lake.events import columns as C
from kinesis_lake.events.declaration import QUARANTINE_TABLE, LakeDeclaration
from kinesis_lake.events.declaration_file import load_declaration
from kinesis_lake.events.tables import quarantine_arrow_schema
from kinesis_lake.iceberg.commit import commit_arrow
from kinesis_lake.pipeline.aggregate import refresh_aggregate
from kinesis_lake.pipeline.downstream_tables import DownstreamTables, ensure_downstream_tables
from kinesis_lake.pipeline.lake import declared_stream, lake_streams, load_table, open_lake
from kinesis_lake.pipeline.refresh import append_rows
from kinesis_lake.pipeline.routed_refresh import refresh_routed, target_rows
from kinesis_lake.spark.iceberg.files_reader import read_table_files
from kinesis_lake.spark.routing import QUARANTINE, route_on_executors

SOURCE_ERROR_PREFIX = "kinesis source error"
REPLAY_WRITER_ID = f"replay:{QUARANTINE_TABLE}"
"""Whom a replay's commits name (``kinesis-lake history`` shows it)."""
_WAS = "__was"
_TABLE = "__table"
_KEYS = list(C.IDENTITY_COLUMNS)


@dataclass
class ReplayResult:
    candidates: int
    """Unresolved quarantine rows looked at."""
    resolved: int
    """Of those, now in their tables and marked resolved."""
    written: dict[str, int] = field(default_factory=dict)
    """Rows appended per declared table."""
    windows_recomputed: int = 0
    """Aggregate windows the replayed rows fell into."""
    caught_up: dict[str, int] = field(default_factory=dict)
    """Rows appended per declared table by the refresh a replay starts with (a new table's
    backfill from raw, or raw rows no refresh had read yet)."""

    @property
    def still_quarantined(self) -> int:
        return self.candidates - self.resolved


def replay_quarantine(spark: SparkSession, settings: Settings) -> ReplayResult:
    """Move every quarantined record the current declaration takes into its tables."""
    declaration = load_declaration(settings.event_schema_path)
    tables = ensure_downstream_tables(settings, declaration)
    result = ReplayResult(0, 0, {name: 0 for name in declaration.names})
    for stream in lake_streams(settings, declaration):
        part = declaration.for_stream(declared_stream(stream, declaration))
        result.caught_up |= _catch_up(spark, stream, part, tables)
        found = _replay_stream(spark, stream, part, tables)
        result.candidates += found.candidates
        result.resolved += found.resolved
        for name, rows in found.written.items():
            result.written[name] += rows
    source = declaration.aggregate_source
    if result.written.get(source) or result.caught_up.get(source):
        # The replayed events count where they happened, as if they had parsed at first.
        counted = open_lake(settings).load_table(settings.table_identifier(source))
        _, result.windows_recomputed = refresh_aggregate(
            spark, declaration.table(source).schema, counted, tables.aggregate
        )
    return result


def _catch_up(
    spark: SparkSession, settings: Settings, declaration: LakeDeclaration, tables: DownstreamTables
) -> dict[str, int]:
    """Bring the stream's tables and the quarantine up to date with raw, as the next refresh
    would; the rows written per table.

    A table added to the declaration is filled by its first refresh from the whole raw
    table, quarantined records included. A replay that moved those records into it first
    had them written twice, once by each (issue 31, defect 6), and so would a table left
    behind the quarantine by a crash between their commits. Replaying only into tables
    that have read everything the quarantine holds lets the replay's own check (it skips
    the records a table already holds) make either order of the two commands land each
    record once.
    """
    raw = load_table(open_lake(settings), settings.raw_table)
    if raw is None:  # nothing ingested, so nothing quarantined from this stream
        return {}
    routed, _ = refresh_routed(spark, settings, declaration, raw, tables)  # leaves them fresh
    return {name: refresh.rows_written for name, refresh in routed.items()}


def _replay_stream(
    spark: SparkSession, settings: Settings, declaration: LakeDeclaration, tables: DownstreamTables
) -> ReplayResult:
    """The replay of one stream's quarantined records, routed among its tables."""
    quarantine = tables.quarantine
    quarantine.refresh()  # the previous stream's replay may have committed
    snapshot = quarantine.current_snapshot()
    if snapshot is None or snapshot.sequence_number is None:
        return ReplayResult(0, 0)
    batch_id = snapshot.sequence_number
    files = [
        t.file.file_path for t in quarantine.scan(row_filter=IsNull(C.RESOLVED_AT)).plan_files()
    ]
    if not files:
        return ReplayResult(0, 0)
    unresolved = read_table_files(spark, quarantine, files).filter(
        F.col(C.RESOLVED_AT).isNull()
        & (F.col(C.STREAM_NAME) == settings.stream_name)
        & ~F.col(C.ERROR).startswith(SOURCE_ERROR_PREFIX)
    )
    candidates = unresolved.select(
        *_KEYS,
        C.ARRIVAL_TIMESTAMP,
        F.col(C.PAYLOAD).alias(C.DATA),
        F.lit(None).cast("string").alias(C.SOURCE_ERROR),
        F.col(C.TARGET_TABLE).alias(_WAS),
    ).persist()
    try:
        total = candidates.count()
        if not total:
            return ReplayResult(0, 0)
        # One raw record may be quarantined for several tables: route it once.
        records = candidates.drop(_WAS).dropDuplicates(_KEYS)
        routed = route_on_executors(records, declaration).persist()
        try:
            outputs = target_rows(
                spark, routed, records, declaration, tables, [*declaration.names, QUARANTINE]
            )
            fixed = _fixed(candidates, outputs, declaration.names).persist()
            written = {
                name: _append_new(
                    spark, settings, tables.routed[name], outputs[name], fixed, name, batch_id
                )
                for name in declaration.names
            }
            resolved = _mark_resolved(unresolved, fixed, quarantine, batch_id)
            fixed.unpersist()
        finally:
            routed.unpersist()
    finally:
        candidates.unpersist()
    return ReplayResult(total, resolved, written)


def _fixed(candidates: DataFrame, outputs: dict[str, DataFrame], names: list[str]) -> DataFrame:
    """(identity, was, into): the candidates the declaration now takes, and where."""
    typed = reduce(
        DataFrame.unionByName,
        [outputs[name].select(*_KEYS, F.lit(name).alias(_TABLE)) for name in names],
    )
    rejected = outputs[QUARANTINE].select(*_KEYS, F.col(C.TARGET_TABLE).alias(_TABLE))
    was = candidates.select(*_KEYS, _WAS)

    def considered(rows: DataFrame) -> DataFrame:
        return rows.join(was, _KEYS).where(F.col(_WAS).isNull() | (F.col(_TABLE) == F.col(_WAS)))

    # A record with no table before: any rejection now (a null target too) keeps it out.
    refused = considered(rejected).select(*_KEYS, _WAS).distinct()
    landed = (
        considered(typed)
        .groupBy(*_KEYS, _WAS)
        .agg(F.concat_ws(",", F.sort_array(F.collect_set(_TABLE))).alias(C.RESOLVED_INTO))
    )
    same = [landed[k] == refused[k] for k in _KEYS] + [landed[_WAS].eqNullSafe(refused[_WAS])]
    return landed.join(refused, same, "left_anti")


def _append_new(
    spark: SparkSession,
    settings: Settings,
    table: Table,
    rows: DataFrame,
    fixed: DataFrame,
    name: str,
    batch_id: int,
) -> int:
    """The fixed records' rows of ``name`` that the table does not hold yet."""
    moving = rows.join(
        fixed.where(F.col(_WAS).isNull() | (F.col(_WAS) == name)).select(*_KEYS).distinct(),
        _KEYS,
        "left_semi",
    )
    files = [task.file.file_path for task in table.scan().plan_files()]
    if files:
        held = read_table_files(spark, table, files).select(*_KEYS)
        moving = moving.join(held, _KEYS, "left_anti")
    return append_rows(
        moving,
        settings,
        ".".join(table.name()),
        writer_id=REPLAY_WRITER_ID,
        batch_id=batch_id,
        summary={},
    )


def _identity_filter(rows: list[dict]) -> BooleanExpression:
    def one(row: dict) -> BooleanExpression:
        target = IsNull(C.TARGET_TABLE) if row[_WAS] is None else EqualTo(C.TARGET_TABLE, row[_WAS])
        return And(
            EqualTo(C.SHARD_ID, row[C.SHARD_ID]),
            EqualTo(C.SEQUENCE_NUMBER, row[C.SEQUENCE_NUMBER]),
            EqualTo(C.SUB_SEQUENCE_NUMBER, row[C.SUB_SEQUENCE_NUMBER]),
            target,
            IsNull(C.RESOLVED_AT),
        )

    return reduce(Or, (one(row) for row in rows))


def _mark_resolved(
    unresolved: DataFrame, fixed: DataFrame, quarantine: Table, batch_id: int
) -> int:
    """Rewrite the fixed rows with ``resolved_at`` / ``resolved_into`` set, in one commit.

    Driver-side (copy-on-write through pyiceberg): only the rows that leave quarantine
    travel, and a replay follows a fix of the declaration, not every batch.
    """
    marked = (
        unresolved.drop(C.RESOLVED_INTO)
        .join(fixed, _KEYS)
        .where(F.col(_WAS).eqNullSafe(F.col(C.TARGET_TABLE)))
    )
    rows = marked.toArrow()
    if rows.num_rows == 0:
        return 0
    stamp = pa.scalar(datetime.now(UTC), pa.timestamp("us", tz="UTC"))
    keys = rows.select([*_KEYS, _WAS]).to_pylist()
    resolved = rows.set_column(
        rows.schema.get_field_index(C.RESOLVED_AT),
        C.RESOLVED_AT,
        pa.repeat(stamp, rows.num_rows),
    )
    schema = quarantine_arrow_schema()
    resolved = pa.Table.from_arrays(
        [resolved.column(name).cast(f.type) for name, f in zip(schema.names, schema, strict=True)],
        schema=schema,
    )
    commit_arrow(
        quarantine,
        resolved,
        writer_id=REPLAY_WRITER_ID,
        batch_id=batch_id,
        overwrite_filter=_identity_filter(keys),
    )
    return resolved.num_rows
