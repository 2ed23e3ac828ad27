"""The numbers behind the checks of ``derived:`` tables, computed without Spark.

* an upsert table holds one row per key, and for a sample of keys exactly the rows a
  from-scratch recomputation over its source's whole history gives (same key, same
  winning version and Kinesis record), as of the source snapshot it caught up to;
* a windowed SQL table has a row for exactly the windows its input has;
* rows and full SQL tables are caught up with their inputs (their SQL is arbitrary, so
  recomputing it is a Spark job, not a check).

Reads only the key, version and order columns (DuckDB over pyiceberg scans).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import duckdb
import pyarrow.compute as pc
from pyiceberg.table import Table

from kinesis_lake.errors import SnapshotExpiredError
from kinesis_lake.events.derived_tables import ORDER_COLUMNS, DerivedTable, UpsertSpec
from kinesis_lake.iceberg.incremental import appended_since, caught_up_snapshot_id
from kinesis_lake.iceberg.lineage import full_refresh_batch, source_moved_back, table_state
from kinesis_lake.iceberg.summary import derived_writer_id, full_writer_id

SAMPLED_HISTORY_ROWS = 1_000_000
"""Above this many source rows, a 1-in-N sample of keys (by hash) is compared."""
EXAMPLES = 5


@dataclass(frozen=True)
class UpsertReconciliation:
    rows: int
    distinct_keys: int
    keys_compared: int
    sample_one_in: int
    mismatched_keys: int
    source_snapshot_id: int | None
    examples: list[str] = field(default_factory=list)

    @property
    def unique(self) -> bool:
        return self.rows == self.distinct_keys

    @property
    def matches(self) -> bool:
        return self.mismatched_keys == 0


def reconcile_upsert(spec: DerivedTable, source: Table, table: Table) -> UpsertReconciliation:
    """Keys unique, and the sampled keys' rows equal the recomputation's."""
    upsert = spec.upsert
    assert upsert is not None
    columns = (upsert.key, upsert.version, *ORDER_COLUMNS)
    held = table.scan(selected_fields=columns).to_arrow()
    rows = held.num_rows
    distinct = len(pc.unique(held.column(upsert.key)))
    snapshot = caught_up_snapshot_id(source, table)
    if snapshot is None:
        return UpsertReconciliation(rows, distinct, 0, 1, 0, None)
    if source.snapshot_by_id(snapshot) is None:
        raise SnapshotExpiredError(
            f"Snapshot {snapshot} of {'.'.join(source.name())}, which {spec.name} last "
            "processed, has expired: there is no history to recompute it from."
        )
    wanted = dict.fromkeys([*columns, *([upsert.delete.field] if upsert.delete else [])])
    history = source.scan(snapshot_id=snapshot, selected_fields=tuple(wanted))
    total = sum(task.file.record_count for task in history.plan_files())
    one_in = max(1, -(-total // SAMPLED_HISTORY_ROWS))
    connection = duckdb.connect()
    connection.register("history", history.to_arrow_batch_reader())
    connection.register("held", held)
    connection.execute(_comparison(upsert, one_in))
    compared, mismatched = connection.execute(
        "SELECT count(*), count(*) FILTER (WHERE NOT same) FROM compared"
    ).fetchone() or (0, 0)
    examples = [
        f"{key}: table {got}, recomputed {want}"
        for key, got, want in connection.execute(
            f"SELECT k, got, want FROM compared WHERE NOT same ORDER BY k LIMIT {EXAMPLES}"
        ).fetchall()
    ]
    return UpsertReconciliation(
        rows, distinct, int(compared), one_in, int(mismatched), snapshot, examples
    )


def _comparison(upsert: UpsertSpec, one_in: int) -> str:
    key, version = _quoted(upsert.key), _quoted(upsert.version)
    arrival, shard, sequence, sub = (_quoted(c) for c in ORDER_COLUMNS)
    order = (
        f"{version} DESC NULLS LAST, {arrival} DESC NULLS LAST, {shard} DESC NULLS LAST, "
        f"length({sequence}) DESC NULLS LAST, {sequence} DESC NULLS LAST, {sub} DESC NULLS LAST"
    )
    deleted = "false"
    if upsert.delete is not None:
        values = ", ".join("'" + v.replace("'", "''") + "'" for v in upsert.delete.values)
        deleted = f"coalesce(CAST({_quoted(upsert.delete.field)} AS VARCHAR) IN ({values}), false)"
    sampled = f"hash({key}) % {one_in} = 0"
    record = f"concat_ws('/', {version}, {shard}, {sequence}, {sub})"
    return f"""
        CREATE TEMP TABLE compared AS
        WITH ranked AS (
            SELECT {key} AS k, {record} AS r, {deleted} AS gone,
                   row_number() OVER (PARTITION BY {key} ORDER BY {order}) AS rank
            FROM history WHERE {key} IS NOT NULL AND {sampled}
        ), want AS (SELECT k, r FROM ranked WHERE rank = 1 AND NOT gone),
        got AS (SELECT {key} AS k, {record} AS r FROM held WHERE {sampled})
        SELECT coalesce(got.k, want.k) AS k, got.r AS got, want.r AS want,
               got.r IS NOT DISTINCT FROM want.r AS same
        FROM got FULL OUTER JOIN want ON got.k = want.k
    """


def _quoted(column: str) -> str:
    return '"' + column.replace('"', '""') + '"'


@dataclass(frozen=True)
class WindowCoverage:
    input_windows: int
    table_windows: int
    missing: list[str]
    extra: list[str]

    @property
    def passed(self) -> bool:
        return not self.missing and not self.extra


def reconcile_windows(spec: DerivedTable, source: Table, table: Table) -> WindowCoverage:
    """The windows of the input as it is now and of the table are the same set.

    The input now, not as of the snapshot the table last caught up to: a table whose
    refresh keeps failing stays caught up to an old snapshot, and would pass forever.
    """
    window = spec.window
    assert window is not None
    connection = duckdb.connect()
    connection.register(
        "input_rows", source.scan(selected_fields=(window.column,)).to_arrow_batch_reader()
    )
    connection.register("output", table.scan(selected_fields=(window.output,)).to_arrow())
    connection.execute(
        f"""
        CREATE TEMP TABLE i AS SELECT DISTINCT date_trunc('{window.size}', {_quoted(window.column)})
            AS w FROM input_rows WHERE {_quoted(window.column)} IS NOT NULL;
        CREATE TEMP TABLE o AS SELECT DISTINCT {_quoted(window.output)} AS w FROM output;
        """
    )
    counts = connection.execute(
        "SELECT (SELECT count(*) FROM i), (SELECT count(*) FROM o)"
    ).fetchone()
    assert counts is not None

    def listed(query: str) -> list[str]:
        return [str(row[0]) for row in connection.execute(query + f" LIMIT {EXAMPLES}").fetchall()]

    return WindowCoverage(
        int(counts[0]),
        int(counts[1]),
        listed("SELECT w FROM i EXCEPT SELECT w FROM o ORDER BY 1"),
        listed("SELECT w FROM o EXCEPT SELECT w FROM i ORDER BY 1"),
    )


def sql_table_caught_up(spec: DerivedTable, inputs: dict[str, Table], table: Table) -> bool:
    """True when the table has processed every row its inputs hold now, and only those: an
    input re-created or rolled back since makes it behind, whatever the numbers say."""
    if spec.refresh == "full":
        state = {name: table_state(inputs[name]) for name in spec.inputs}
        return full_refresh_batch(table, full_writer_id(spec.name), state) is None
    source = inputs[spec.source]
    if source_moved_back(source, table, derived_writer_id(source.name()[-1])) is not None:
        return False
    return not appended_since(source, caught_up_snapshot_id(source, table)).files
