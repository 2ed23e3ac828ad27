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
from pyiceberg.schema import Schema
from pyiceberg.table import Table

from kinesis_lake.config import Settings
from kinesis_lake.errors import SnapshotExpiredError
from kinesis_lake.events.columns import (
    EVENT_COUNT,
    EVENT_TIMESTAMP,
    IDENTITY_COLUMNS,
    SEQUENCE_NUMBER,
    SHARD_ID,
    WINDOW_START,
)
from kinesis_lake.events.schema import load_event_schema
from kinesis_lake.events.tables import parsed_table_schema
from kinesis_lake.iceberg.incremental import caught_up_snapshot_id
from kinesis_lake.pipeline.lake import committed_positions, table_stats

EXAMPLES = 5
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
    for shard in sorted(set(table_max) | set(committed.positions)):
        in_table = table_max.get(shard)
        position = committed.positions.get(shard)
        if in_table is None or position is None or int(in_table) != int(position):
            mismatched[shard] = (in_table, position)
    return PositionReconciliation(
        rows=rows,
        positions_snapshot_id=committed.snapshot_id,
        committed=committed.positions,
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
    return int(summary.get("total-records", 0)) if summary is not None else 0


@dataclass(frozen=True)
class DerivedReconciliation:
    """Raw rows the derived tables have processed against parsed + quarantined rows.

    The parser drops nothing (an invalid record and a repeat of an already parsed event
    key are both quarantined), so every processed raw row must be in exactly one of the
    two tables. ``missing``: processed raw rows in neither; ``unexpected``: derived rows
    that match no processed raw row (a double commit, rows written from elsewhere).
    """

    source_snapshot_id: int | None
    raw_processed: int
    parsed: int
    quarantined: int
    missing: int = 0
    unexpected: int = 0
    examples: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.raw_processed == self.parsed + self.quarantined and not (
            self.missing or self.unexpected
        )


def reconcile_derived(raw: Table, parsed: Table, quarantine: Table) -> DerivedReconciliation:
    """Cost: metadata only when the counts agree; otherwise one identity scan of each of
    the three tables (raw as of the processed snapshot) to name the rows that differ."""
    source = caught_up_snapshot_id(raw, parsed)
    parsed_rows = table_stats(parsed).rows
    quarantined_rows = table_stats(quarantine).rows
    if source is None:
        return DerivedReconciliation(None, 0, parsed_rows, quarantined_rows)
    raw_processed = rows_at(raw, source)
    counts = DerivedReconciliation(source, raw_processed, parsed_rows, quarantined_rows)
    if raw_processed == parsed_rows + quarantined_rows:
        return counts

    def identities(table: Table, snapshot_id: int | None = None) -> pa.RecordBatchReader:
        scan = table.scan(snapshot_id=snapshot_id, selected_fields=IDENTITY_COLUMNS)
        return scan.to_arrow_batch_reader()

    keys = ", ".join(IDENTITY_COLUMNS)
    connection = _sql(
        raw_ids=identities(raw, source),
        parsed_ids=identities(parsed),
        quarantine_ids=identities(quarantine),
    )
    connection.execute(f"CREATE TEMP TABLE r AS SELECT {keys} FROM raw_ids")
    connection.execute(
        f"CREATE TEMP TABLE d AS SELECT {keys} FROM parsed_ids "
        f"UNION ALL SELECT {keys} FROM quarantine_ids"
    )

    def differing(left: str, right: str) -> tuple[int, list[str]]:
        query = f"SELECT {keys} FROM {left} EXCEPT ALL SELECT {keys} FROM {right}"
        (total,) = _one_row(connection, f"SELECT count(*) FROM ({query})")
        examples = connection.execute(
            f"SELECT shard_id, sequence_number, sub_sequence_number FROM ({query}) "
            f"ORDER BY shard_id, {_padded('sequence_number')} LIMIT {EXAMPLES}"
        ).fetchall()
        return int(total), [f"{shard}/{seq}/{sub}" for shard, seq, sub in examples]

    missing, missing_examples = differing("r", "d")
    unexpected, unexpected_examples = differing("d", "r")
    return DerivedReconciliation(
        source_snapshot_id=source,
        raw_processed=raw_processed,
        parsed=parsed_rows,
        quarantined=quarantined_rows,
        missing=missing,
        unexpected=unexpected,
        examples=(missing_examples + unexpected_examples)[:EXAMPLES],
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


def quarantine_ratio(raw: Table, parsed: Table, quarantine: Table) -> QuarantineRatio:
    """Quarantined rows over the raw rows the derived tables have processed (metadata only)."""
    source = caught_up_snapshot_id(raw, parsed)
    processed = rows_at(raw, source) if source is not None else 0
    return QuarantineRatio(table_stats(quarantine).rows, processed)


@dataclass(frozen=True)
class SchemaComparison:
    """The parsed table's columns against the ones the event schema declares.

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
    return {f.name: str(f.field_type) for f in schema.fields}


def compare_parsed_schema(parsed: Table, settings: Settings) -> SchemaComparison:
    """Metadata only: the table's current schema and the YAML schema file."""
    declared = _column_types(parsed_table_schema(load_event_schema(settings.event_schema_path)))
    actual = _column_types(parsed.schema())
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
