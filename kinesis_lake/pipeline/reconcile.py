"""The numbers behind every asset check: reconciliation of the raw and derived tables.

Dagster-free on purpose (pyiceberg and DuckDB only): the checks, the CLI and the tests all
ask the same questions, so they must get the same answers, and a check that can be run
from a plain Python shell is a check an operator can debug.

Each function returns a small dataclass with the raw numbers and a ``passed`` verdict;
deciding severities and wording is the caller's job. Costs are stated per function: the
checks scan the columns they need and nothing more.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import duckdb
import pyarrow as pa
from pyiceberg.expressions import AlwaysTrue, And, EqualTo, IsNull, NotNull
from pyiceberg.schema import Schema
from pyiceberg.table import Table

from kinesis_lake.errors import SnapshotExpiredError
from kinesis_lake.events.columns import (
    EVENT_COUNT,
    EVENT_TIMESTAMP,
    IDENTITY_COLUMNS,
    RESOLVED_AT,
    SEQUENCE_NUMBER,
    SHARD_ID,
    STREAM_NAME,
    TARGET_TABLE,
    WINDOW_START,
)
from kinesis_lake.events.schema import EventSchema
from kinesis_lake.events.tables import parsed_table_schema
from kinesis_lake.iceberg.incremental import caught_up_snapshot_id
from kinesis_lake.iceberg.row_deletes import live_records
from kinesis_lake.iceberg.summary import committed_positions, positions_snapshot_id
from kinesis_lake.iceberg.tables import type_text
from kinesis_lake.pipeline.lake import table_stats

EXAMPLES = 5
QUARANTINE_TARGET = ""
"""The quarantine's key among the targets (no declared table has an empty name)."""
"""How many offending keys a report quotes: enough to start debugging, small as metadata."""

# Kinesis sequence numbers are decimal strings wider than any SQL integer (up to 128
# bits); left-padding them to a fixed width makes string order equal numeric order.
_SEQUENCE_WIDTH = 64


def _sql(**tables: pa.Table | pa.RecordBatchReader) -> duckdb.DuckDBPyConnection:
    connection = duckdb.connect()
    connection.execute("SET TimeZone = 'UTC'")
    for name, data in tables.items():
        connection.register(name, data)
    return connection


def _one_row(connection: duckdb.DuckDBPyConnection, query: str) -> tuple[Any, ...]:
    """The row of an aggregate query without GROUP BY, which always returns exactly one."""
    row = connection.execute(query).fetchone()
    assert row is not None, query
    return row


def _padded(column: str) -> str:
    return f"lpad({column}, {_SEQUENCE_WIDTH}, '0')"


@dataclass(frozen=True)
class DuplicateReport:
    """Kinesis record identities present more than once in the raw table."""

    rows: int
    duplicate_keys: int
    extra_rows: int
    examples: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.duplicate_keys == 0


def raw_duplicates(raw: Table) -> DuplicateReport:
    """Duplicates of (stream_name, shard_id, sequence_number, sub_sequence_number).

    Cost: one scan of the four identity columns, streamed into DuckDB's hash aggregate.
    """
    reader = raw.scan(selected_fields=IDENTITY_COLUMNS).to_arrow_batch_reader()
    keys = ", ".join(IDENTITY_COLUMNS)
    connection = _sql(raw_ids=reader)
    connection.execute(
        f"CREATE TEMP TABLE groups AS SELECT {keys}, count(*) AS n FROM raw_ids GROUP BY ALL"
    )
    rows, duplicate_keys, extra_rows = _one_row(
        connection,
        "SELECT coalesce(sum(n), 0), count(*) FILTER (WHERE n > 1), "
        "coalesce(sum(n - 1) FILTER (WHERE n > 1), 0) FROM groups",
    )
    examples = [
        f"{shard}/{sequence}/{sub} x{n}"
        for shard, sequence, sub, n in connection.execute(
            f"SELECT shard_id, sequence_number, sub_sequence_number, n FROM groups "
            f"WHERE n > 1 ORDER BY shard_id, {_padded('sequence_number')} LIMIT {EXAMPLES}"
        ).fetchall()
    ]
    return DuplicateReport(int(rows), int(duplicate_keys), int(extra_rows), examples)


@dataclass(frozen=True)
class PositionReconciliation:
    """The raw table's rows against the positions its own commits recorded.

    Per shard, the highest sequence number in the table must be exactly the committed
    position: higher means rows the positions do not account for (a writer that
    bypassed the sink), lower or absent means committed positions whose rows are not
    in the table (lost rows, or a rollback that left positions behind).
    """

    rows: int
    positions_snapshot_id: int | None
    committed: dict[str, str]
    table_max: dict[str, str]
    mismatched: dict[str, tuple[str | None, str | None]]

    @property
    def passed(self) -> bool:
        return not self.mismatched


def raw_position_reconciliation(raw: Table) -> PositionReconciliation:
    """Cost: one scan of (shard_id, sequence_number) at the current snapshot."""
    committed = committed_positions(raw)
    positions_snapshot = positions_snapshot_id(raw)
    snapshot = raw.current_snapshot()
    table_max: dict[str, str] = {}
    rows = 0
    if snapshot is not None:
        reader = raw.scan(
            snapshot_id=snapshot.snapshot_id, selected_fields=(SHARD_ID, SEQUENCE_NUMBER)
        ).to_arrow_batch_reader()
        result = (
            _sql(raw_ids=reader)
            .execute(
                f"SELECT {SHARD_ID}, max({_padded(SEQUENCE_NUMBER)}), count(*) "
                f"FROM raw_ids GROUP BY {SHARD_ID}"
            )
            .fetchall()
        )
        for shard, padded, count in result:
            table_max[shard] = padded.lstrip("0") or "0"
            rows += int(count)
    mismatched: dict[str, tuple[str | None, str | None]] = {}
    for shard in sorted(set(table_max) | set(committed)):
        in_table = table_max.get(shard)
        position = committed.get(shard)
        if in_table is None or position is None or int(in_table) != int(position):
            mismatched[shard] = (in_table, position)
    return PositionReconciliation(
        rows=rows,
        positions_snapshot_id=positions_snapshot,
        committed=committed,
        table_max=table_max,
        mismatched=mismatched,
    )


def rows_at(table: Table, snapshot_id: int) -> int:
    """Rows of ``table`` as of ``snapshot_id`` (its summary's running total; no scan)."""
    snapshot = table.snapshot_by_id(snapshot_id)
    if snapshot is None:
        raise SnapshotExpiredError(
            f"Snapshot {snapshot_id} of {'.'.join(table.name())} has expired, so the rows the "
            "derived tables processed can no longer be counted. Keep snapshots longer than "
            "the refresh interval (history.expire.min-snapshots-to-keep / max-snapshot-age-ms)."
        )
    summary = snapshot.summary
    return live_records(summary)


_UNRESOLVED = IsNull(RESOLVED_AT)


def _has_resolutions(quarantine: Table) -> bool:
    """Whether the quarantine has the replay's columns yet (the next refresh adds them)."""
    return RESOLVED_AT in quarantine.schema().column_names


def unresolved_rows(quarantine: Table) -> int:
    """Quarantined rows a replay has not moved into their tables (it keeps the moved ones,
    marked resolved). Cost: a scan of ``resolved_at`` when any row is resolved."""
    total = table_stats(quarantine).rows
    if not total or not _has_resolutions(quarantine):
        return total
    resolved = quarantine.scan(row_filter=NotNull(RESOLVED_AT), selected_fields=(RESOLVED_AT,))
    return total - resolved.to_arrow().num_rows


@dataclass(frozen=True)
class RoutedReconciliation:
    """Raw rows the routed tables have processed against those tables and the quarantine.

    Routing drops nothing: a raw row is in each table whose route takes it, either as a typed
    row or as a quarantine row naming that table, or else exactly once in quarantine (it did
    not decode, or no route took it). ``missing``: processed raw rows found nowhere;
    ``repeated``: raw rows found twice for one table (or quarantined as unroutable and also
    routed); ``unexpected``: derived rows that match no processed raw row (rows written from
    elsewhere); ``out_of_step``: targets caught up to another raw snapshot than the rest (a
    refresh was interrupted between commits; the next one repairs it).
    """

    source_snapshot_id: int | None
    raw_processed: int
    routed: dict[str, int]
    quarantined: int
    missing: int = 0
    repeated: int = 0
    unexpected: int = 0
    out_of_step: list[str] = field(default_factory=list)
    examples: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not (self.missing or self.repeated or self.unexpected or self.out_of_step)


def reconcile_routed(
    raw: Table,
    declared: dict[str, Table],
    quarantine: Table,
    *,
    routes_everything: bool,
    stream_name: str | None = None,
) -> RoutedReconciliation:
    """Cost: metadata only for one table that takes every record and counts that agree;
    otherwise one identity scan of raw (as of the processed snapshot) and of every target.

    ``declared`` are the tables that take ``raw``'s records; with ``stream_name`` (a lake of
    several streams) only that stream's quarantine rows are counted, and the metadata-only
    shortcut is off (the quarantine's row count is every stream's).
    """
    targets = {**declared, QUARANTINE_TARGET: quarantine}
    sources = {name: caught_up_snapshot_id(raw, table) for name, table in targets.items()}
    source = sources[QUARANTINE_TARGET]
    routed = {name: table_stats(table).rows for name, table in declared.items()}
    quarantined = unresolved_rows(quarantine)
    behind = sorted(name for name, snapshot in sources.items() if snapshot != source)
    if behind:
        return RoutedReconciliation(source, 0, routed, quarantined, out_of_step=behind)
    if source is None:
        return RoutedReconciliation(None, 0, routed, quarantined)
    raw_processed = rows_at(raw, source)
    if (
        stream_name is None
        and routes_everything
        and raw_processed == sum(routed.values()) + quarantined
    ):
        return RoutedReconciliation(source, raw_processed, routed, quarantined)

    def identities(table: Table, snapshot_id: int | None = None) -> pa.RecordBatchReader:
        scan = table.scan(snapshot_id=snapshot_id, selected_fields=IDENTITY_COLUMNS)
        return scan.to_arrow_batch_reader()

    keys = ", ".join(IDENTITY_COLUMNS)
    connection = _sql(
        raw_ids=identities(raw, source),
        quarantine_ids=quarantine.scan(
            row_filter=And(
                _UNRESOLVED if _has_resolutions(quarantine) else AlwaysTrue(),
                AlwaysTrue() if stream_name is None else EqualTo(STREAM_NAME, stream_name),
            ),
            selected_fields=(*IDENTITY_COLUMNS, TARGET_TABLE),
        ).to_arrow_batch_reader(),
    )
    connection.execute(f"CREATE TEMP TABLE r AS SELECT DISTINCT {keys} FROM raw_ids")
    connection.execute(
        f"CREATE TEMP TABLE d AS SELECT {keys}, coalesce({TARGET_TABLE}, '') AS target "
        "FROM quarantine_ids"
    )
    for name, table in declared.items():
        connection.register("table_ids", identities(table))
        connection.execute(f"INSERT INTO d SELECT {keys}, ? FROM table_ids", [name])
        connection.unregister("table_ids")

    def counted(query: str) -> tuple[int, list[str]]:
        (total,) = _one_row(connection, f"SELECT count(*) FROM ({query})")
        examples = connection.execute(
            f"SELECT shard_id, sequence_number, sub_sequence_number FROM ({query}) "
            f"ORDER BY shard_id, {_padded('sequence_number')} LIMIT {EXAMPLES}"
        ).fetchall()
        return int(total), [f"{shard}/{seq}/{sub}" for shard, seq, sub in examples]

    missing, missing_examples = counted(f"SELECT {keys} FROM r EXCEPT SELECT {keys} FROM d")
    unexpected, unexpected_examples = counted(f"SELECT {keys} FROM d EXCEPT SELECT {keys} FROM r")
    repeated, repeated_examples = counted(
        f"SELECT {keys} FROM d GROUP BY {keys}, target HAVING count(*) > 1 "
        f"UNION SELECT {keys} FROM d GROUP BY {keys} "
        "HAVING count(*) > 1 AND bool_or(target = '')"
    )
    return RoutedReconciliation(
        source_snapshot_id=source,
        raw_processed=raw_processed,
        routed=routed,
        quarantined=quarantined,
        missing=missing,
        repeated=repeated,
        unexpected=unexpected,
        examples=(missing_examples + repeated_examples + unexpected_examples)[:EXAMPLES],
    )


@dataclass(frozen=True)
class WindowReconciliation:
    """Per minute of ``event_timestamp``: the aggregate's summed counts against parsed rows.

    Parsed is read as of the snapshot the aggregate last caught up to, so rows parsed
    since (that the next refresh will count) are not mistaken for a mismatch.
    """

    parsed_snapshot_id: int | None
    windows: int
    mismatched_windows: int
    parsed_rows: int
    aggregate_sum: int
    examples: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.mismatched_windows == 0


def reconcile_aggregate(parsed: Table, aggregate: Table) -> WindowReconciliation:
    """Cost: a scan of parsed's event_timestamp column and of the (small) aggregate."""
    source = caught_up_snapshot_id(parsed, aggregate)
    if source is None:
        return WindowReconciliation(None, 0, 0, 0, 0)
    if parsed.snapshot_by_id(source) is None:
        raise SnapshotExpiredError(
            f"Snapshot {source} of {'.'.join(parsed.name())}, which the aggregate last "
            "processed, has expired: the per-window comparison has nothing to compare with."
        )
    connection = _sql(
        parsed_times=parsed.scan(
            snapshot_id=source, selected_fields=(EVENT_TIMESTAMP,)
        ).to_arrow_batch_reader(),
        counts=aggregate.scan(selected_fields=(WINDOW_START, EVENT_COUNT)).to_arrow(),
    )
    connection.execute(
        f"""
        CREATE TEMP TABLE compared AS
        WITH p AS (
            SELECT epoch_us(date_trunc('minute', {EVENT_TIMESTAMP})) AS w, count(*) AS n
            FROM parsed_times GROUP BY 1
        ), a AS (
            SELECT epoch_us({WINDOW_START}) AS w, sum({EVENT_COUNT}) AS n FROM counts GROUP BY 1
        )
        SELECT coalesce(p.w, a.w) AS w, coalesce(p.n, 0) AS parsed, coalesce(a.n, 0) AS agg
        FROM p FULL OUTER JOIN a ON p.w = a.w
        """
    )
    windows, mismatched, parsed_rows, aggregate_sum = _one_row(
        connection,
        "SELECT count(*), count(*) FILTER (WHERE parsed <> agg), "
        "coalesce(sum(parsed), 0), coalesce(sum(agg), 0) FROM compared",
    )
    examples = [
        f"{window}: aggregate {agg} vs parsed {count}"
        for window, count, agg in connection.execute(
            "SELECT strftime(make_timestamp(w), '%Y-%m-%dT%H:%MZ'), parsed, agg "
            f"FROM compared WHERE parsed <> agg ORDER BY w LIMIT {EXAMPLES}"
        ).fetchall()
    ]
    return WindowReconciliation(
        parsed_snapshot_id=source,
        windows=int(windows),
        mismatched_windows=int(mismatched),
        parsed_rows=int(parsed_rows),
        aggregate_sum=int(aggregate_sum),
        examples=examples,
    )


@dataclass(frozen=True)
class QuarantineRatio:
    quarantined: int
    raw_processed: int

    @property
    def ratio(self) -> float:
        return self.quarantined / self.raw_processed if self.raw_processed else 0.0


def quarantine_ratio(raws: list[Table], quarantine: Table) -> QuarantineRatio:
    """Unresolved quarantined rows over the raw rows (of every stream) it has processed."""
    processed = 0
    for raw in raws:
        source = caught_up_snapshot_id(raw, quarantine)
        processed += rows_at(raw, source) if source is not None else 0
    return QuarantineRatio(unresolved_rows(quarantine), processed)


@dataclass(frozen=True)
class SchemaComparison:
    """A declared table's columns against the ones its declaration gives it.

    ``missing``: declared, not in the table. ``mismatched``: {column: (table type, declared
    type)}. ``extra``: in the table, no longer declared (a field removed from the YAML;
    Iceberg keeps the column and old rows keep their values).
    """

    declared: dict[str, str]
    actual: dict[str, str]
    missing: list[str]
    extra: list[str]
    mismatched: dict[str, tuple[str, str]]

    @property
    def passed(self) -> bool:
        return not self.missing and not self.mismatched


def _column_types(schema: Schema) -> dict[str, str]:
    return {f.name: type_text(f.field_type) for f in schema.fields}


def compare_table_schema(table: Table, schema: EventSchema) -> SchemaComparison:
    """Metadata only: the table's current schema and its declared event schema."""
    declared = _column_types(parsed_table_schema(schema))
    actual = _column_types(table.schema())
    return SchemaComparison(
        declared=declared,
        actual=actual,
        missing=[name for name in declared if name not in actual],
        extra=[name for name in actual if name not in declared],
        mismatched={
            name: (actual[name], wanted)
            for name, wanted in declared.items()
            if name in actual and actual[name] != wanted
        },
    )
