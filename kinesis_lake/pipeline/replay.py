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

from pyiceberg.expressions import IsNull
from pyiceberg.table import Table
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from kinesis_lake.config import Settings
from kinesis_lake.events import columns as C
from kinesis_lake.events.declaration import QUARANTINE_TABLE, LakeDeclaration
from kinesis_lake.events.declaration_file import load_declaration
from kinesis_lake.pipeline.aggregate import refresh_aggregate
from kinesis_lake.pipeline.downstream_tables import DownstreamTables, ensure_downstream_tables
from kinesis_lake.pipeline.lake import declared_stream, lake_streams, load_table, open_lake
from kinesis_lake.pipeline.quarantine_marks import (
    KEYS,
    WAS,
    mark_resolved,
    movable,
    resolvable,
)
from kinesis_lake.pipeline.refresh import TableRefresh, append_rows
from kinesis_lake.pipeline.routed_refresh import refresh_routed, target_rows
from kinesis_lake.spark.iceberg.files_reader import read_table_files
from kinesis_lake.spark.routing import QUARANTINE, route_on_executors

REPLAY_WRITER_ID = f"replay:{QUARANTINE_TABLE}"
"""Whom a replay's commits name (``kinesis-lake history`` shows it)."""


@dataclass
class ReplayResult:
    candidates: int
    """Unresolved quarantine rows looked at (with those the catch-up's backfill resolved)."""
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
        caught_up, resolved_by_catch_up = _catch_up(spark, stream, part, tables)
        result.caught_up |= caught_up
        found = _replay_stream(spark, stream, part, tables)
        result.candidates += found.candidates + resolved_by_catch_up
        result.resolved += found.resolved + resolved_by_catch_up
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
) -> tuple[dict[str, int], int]:
    """Bring the stream's tables and the quarantine up to date with raw, as the next refresh
    would; the rows written per table, and how many quarantined records a new table's
    backfill took (marked resolved: the replay counts them as its own).

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
        return {}, 0
    resolved = [0]

    def count_resolved(name: str, refresh: TableRefresh, numbers: dict[str, int]) -> None:
        resolved[0] += numbers.get("rows_resolved", 0)

    routed, _ = refresh_routed(  # leaves them fresh
        spark, settings, declaration, raw, tables, on_commit=count_resolved
    )
    return {name: refresh.rows_written for name, refresh in routed.items()}, resolved[0]


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
    unresolved = movable(read_table_files(spark, quarantine, files), settings.stream_name)
    candidates = unresolved.select(
        *KEYS,
        C.ARRIVAL_TIMESTAMP,
        F.col(C.PAYLOAD).alias(C.DATA),
        F.lit(None).cast("string").alias(C.SOURCE_ERROR),
        F.col(C.TARGET_TABLE).alias(WAS),
    ).persist()
    try:
        total = candidates.count()
        if not total:
            return ReplayResult(0, 0)
        # One raw record may be quarantined for several tables: route it once.
        records = candidates.drop(WAS).dropDuplicates(KEYS)
        routed = route_on_executors(records, declaration).persist()
        try:
            outputs = target_rows(
                spark, routed, records, declaration, tables, [*declaration.names, QUARANTINE]
            )
            fixed = resolvable(candidates, outputs, declaration.names).persist()
            written = {
                name: _append_new(
                    spark, settings, tables.routed[name], outputs[name], fixed, name, batch_id
                )
                for name in declaration.names
            }
            resolved = mark_resolved(
                unresolved, fixed, quarantine, writer_id=REPLAY_WRITER_ID, batch_id=batch_id
            )
            fixed.unpersist()
        finally:
            routed.unpersist()
    finally:
        candidates.unpersist()
    return ReplayResult(total, resolved, written)


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
        fixed.where(F.col(WAS).isNull() | (F.col(WAS) == name)).select(*KEYS).distinct(),
        KEYS,
        "left_semi",
    )
    files = [task.file.file_path for task in table.scan().plan_files()]
    if files:
        held = read_table_files(spark, table, files).select(*KEYS)
        moving = moving.join(held, KEYS, "left_anti")
    return append_rows(
        moving,
        settings,
        ".".join(table.name()),
        writer_id=REPLAY_WRITER_ID,
        batch_id=batch_id,
        summary={},
    )
