"""Look at the lake: SQL over its tables, snapshot history, printable results.

For people and checks (the CLI, Dagster asset checks, tests), not for heavy analytics:
:func:`run_sql` gives DuckDB each table the query names as a PyArrow dataset over the
snapshot's data files (planned by pyiceberg), so DuckDB reads only the columns the query
uses and skips row groups its filters rule out, instead of the whole table in memory.
Big queries belong in Spark.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.dataset as pa_dataset
from pyiceberg.catalog import Catalog
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from kinesis_lake.errors import TableError
from kinesis_lake.iceberg import summary as keys
from kinesis_lake.iceberg.arrow_schema import table_arrow_schema
from kinesis_lake.iceberg.incremental import SOURCE_SNAPSHOT_PROPERTY
from kinesis_lake.iceberg.row_deletes import live_records

# Spark's show() layout, which people know: cells cut at 20 characters, columns at
# least 3 wide.
CELL_WIDTH = 20
"""Spark's ``show()`` truncates cells to 20 characters; so do we unless told otherwise."""
_MIN_COLUMN_WIDTH = 3


def run_sql(
    catalog: Catalog,
    namespace: str,
    sql: str,
    *,
    snapshot_id: int | None = None,
    as_of_ms: int | None = None,
    read: Callable[[str], pa.Table] | None = None,
) -> pa.Table:
    """Run DuckDB ``sql`` over the tables of ``namespace``, optionally in the past.

    Each table of the namespace that the query names is a view, under its short name and
    under ``<namespace>.<name>``, that DuckDB scans lazily (see the module docstring). Time
    travel:

    * ``as_of_ms`` reads every table as it was at that time (epoch milliseconds); a table
      without data yet reads as empty.
    * ``snapshot_id`` pins the one table whose history holds that snapshot (snapshot ids
      are unique per table, never shared); the other tables read their current state.

    ``read`` (a table's short name -> its rows) replaces the snapshot read of every table
    the query names: ``query --fresh`` reads them with the stream's uncommitted tail.

    Raises:
        QueryError: the SQL does not parse or bind (an unknown table or column: the message
            lists the namespace's tables), both time-travel arguments are given, no named
            table has ``snapshot_id``, or ``as_of_ms`` is before any named table had data.
    """
    if snapshot_id is not None and as_of_ms is not None:
        raise QueryError("Pass --snapshot or --as-of, not both.")
    if read is not None and (snapshot_id is not None or as_of_ms is not None):
        raise QueryError("--fresh reads the tables as they are now: drop --snapshot/--as-of.")
    named = _named_tables(sql)
    existing = sorted(identifier[-1] for identifier in catalog.list_tables(namespace))
    tables = {
        name: catalog.load_table((namespace, name))
        for name in existing
        if name in named or f"{namespace}.{name}" in named
    }
    if snapshot_id is not None and not any(t.snapshot_by_id(snapshot_id) for t in tables.values()):
        raise QueryError(
            f"None of the tables the query names ({', '.join(sorted(tables)) or 'none'}) "
            f"has snapshot {snapshot_id}: kinesis-lake history TABLE lists a table's snapshots."
        )
    if as_of_ms is not None and tables:
        firsts = {
            name: min(s.timestamp_ms for s in t.snapshots())
            for name, t in tables.items()
            if t.snapshots()
        }
        if all(first > as_of_ms for first in firsts.values()):
            earliest = min(firsts, key=lambda n: firsts[n]) if firsts else None
            since = (
                f"; the earliest data is {earliest}'s, from {_iso(firsts[earliest])}"
                if earliest
                else ""
            )
            raise QueryError(f"No table the query names had data at {_iso(as_of_ms)}{since}.")
    connection = duckdb.connect()
    try:
        # Otherwise DuckDB resolves an unknown table name to any Python variable of that
        # name in the caller's frames, and a typo would query the wrong data.
        connection.execute("SET python_enable_replacements = false")
        connection.execute(f'CREATE SCHEMA IF NOT EXISTS "{namespace}"')
        for name, table in tables.items():
            rows = (
                read(name)
                if read is not None
                else _read(table, snapshot_id=snapshot_id, as_of_ms=as_of_ms)
            )
            connection.register(name, rows)
            connection.execute(f'CREATE VIEW "{namespace}"."{name}" AS SELECT * FROM main."{name}"')
        try:
            return connection.sql(sql).to_arrow_table()
        except duckdb.CatalogException as error:
            raise QueryError(
                f"{_first_line(error)}; the tables in {namespace} are: "
                f"{', '.join(existing) or 'none yet'}"
            ) from None
        except (duckdb.ParserException, duckdb.BinderException) as error:
            raise QueryError(f"{_first_line(error)}") from None
    finally:
        connection.close()


class QueryError(TableError):
    """A query that cannot run as written; the message says why and what exists."""


def _first_line(error: Exception) -> str:
    return str(error).strip().splitlines()[0]


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="seconds")


def table_history(table: Table) -> list[dict[str, Any]]:
    """Every snapshot of ``table``, oldest first, with what kinesis-lake recorded in it."""
    current_id = table.metadata.current_snapshot_id
    return [
        _history_row(snapshot, is_current=snapshot.snapshot_id == current_id)
        for snapshot in sorted(table.snapshots(), key=lambda s: s.timestamp_ms)
    ]


def format_table(t: pa.Table, max_rows: int = 20, max_width: int = CELL_WIDTH) -> str:
    """``t`` as text laid out like Spark's ``DataFrame.show()``, cells cut at ``max_width``."""
    header = t.column_names
    rows = [[_cell(v, max_width) for v in row.values()] for row in t.slice(0, max_rows).to_pylist()]
    widths = [
        max([_MIN_COLUMN_WIDTH, len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(header)
    ]
    border = "+" + "+".join("-" * w for w in widths) + "+"

    def line(cells: list[str]) -> str:
        return "|" + "|".join(c.rjust(w) for c, w in zip(cells, widths, strict=True)) + "|"

    lines = [border, line(header), border, *(line(r) for r in rows), border]
    if t.num_rows > max_rows:
        lines.append(f"only showing top {max_rows} rows")
    return "\n".join(lines)


def _named_tables(sql: str) -> set[str]:
    """Names the query reads from (``name`` or ``schema.name``), found by parsing only.

    DuckDB's ``get_table_names`` binds the query, which fails before the tables exist;
    its parse tree as JSON needs no tables.
    """
    with duckdb.connect() as connection:
        row = connection.execute("SELECT json_serialize_sql(?)", [sql]).fetchone()
    tree = json.loads(row[0]) if row else {}
    if tree.get("error"):
        raise QueryError(f"Cannot parse the query: {tree.get('error_message', tree)}")
    names: set[str] = set()
    pending: list[Any] = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            if node.get("type") == "BASE_TABLE":
                schema, name = node.get("schema_name"), node.get("table_name")
                names.add(f"{schema}.{name}" if schema else str(name))
            pending.extend(node.values())
        elif isinstance(node, list):
            pending.extend(node)
    return names


def _read(
    table: Table, *, snapshot_id: int | None, as_of_ms: int | None
) -> pa.Table | pa_dataset.Dataset:
    if as_of_ms is not None:
        snapshot = table.snapshot_as_of_timestamp(as_of_ms)
        if snapshot is None:
            return table_arrow_schema(table.schema()).empty_table()
        return _snapshot_dataset(table, snapshot.snapshot_id)
    if snapshot_id is not None and table.snapshot_by_id(snapshot_id):
        return _snapshot_dataset(table, snapshot_id)
    current = table.current_snapshot()
    if current is None:
        return table_arrow_schema(table.schema()).empty_table()
    return _snapshot_dataset(table, current.snapshot_id)


def _snapshot_dataset(table: Table, snapshot_id: int) -> pa.Table | pa_dataset.Dataset:
    """The snapshot's data files as one dataset in the table's schema; pyiceberg's own
    full read where a dataset cannot stand for the table: a schema that evolved (files
    are matched by field id there, a dataset matches by name and cannot add a field
    inside a struct), delete files, or a FileIO that is not PyArrow's. The current snapshot
    reads in the current schema (a column added since the last write shows, as nulls), an
    older one in its own, as Iceberg's time travel does."""
    current = snapshot_id == table.metadata.current_snapshot_id
    scan = table.scan() if current else table.scan(snapshot_id=snapshot_id)
    tasks = list(scan.plan_files())
    if (
        len(table.schemas()) > 1
        or not isinstance(table.io, PyArrowFileIO)
        or any(t.delete_files for t in tasks)
    ):
        # Correct for null lists of structs only with pyiceberg_fixes applied (#3833).
        return scan.to_arrow()
    arrow_schema = table_arrow_schema(table.schema())
    if not tasks:
        return arrow_schema.empty_table()
    scheme, netloc, _ = PyArrowFileIO.parse_location(tasks[0].file.file_path)
    paths = [
        PyArrowFileIO.parse_location(task.file.file_path, table.io.properties)[2] for task in tasks
    ]
    return pa_dataset.dataset(
        paths,
        schema=arrow_schema,
        format="parquet",
        filesystem=table.io.fs_by_scheme(scheme, netloc),
    )


def _history_row(snapshot: Snapshot, *, is_current: bool) -> dict[str, Any]:
    summary = snapshot.summary
    operation = summary.operation.value if summary else None

    def number(key: str) -> int | None:
        value = summary.get(key) if summary else None
        return int(value) if value is not None else None

    # Upkeep rewrites rows it does not add: an "overwrite" of N rows by no writer read
    # like a duplicate load.
    upkeep = summary is not None and summary.get(keys.OPERATION) == keys.COMPACTION
    added = number("added-records")
    moved = number(keys.REWRITTEN_RECORDS)  # a merge-on-read delta's rewritten files
    if added is not None and moved is not None:
        added -= moved

    return {
        "snapshot_id": snapshot.snapshot_id,
        "parent_id": snapshot.parent_snapshot_id,
        "timestamp": datetime.fromtimestamp(snapshot.timestamp_ms / 1000, tz=UTC).isoformat(
            timespec="milliseconds"
        ),
        "operation": keys.COMPACTION if upkeep else operation,
        "added_records": None if upkeep else added,
        "rewritten_records": added if upkeep else moved,
        "added_data_files": number("added-data-files"),
        "total_records": live_records(summary),  # without rows deleted by position
        "writer_id": "maintenance" if upkeep else summary.get(keys.WRITER_ID) if summary else None,
        "batch_id": number(keys.BATCH_ID),
        "source_snapshot_id": number(SOURCE_SNAPSHOT_PROPERTY),
        "is_current": is_current,
    }


def _cell(value: Any, width: int) -> str:
    if value is None:
        text = "NULL"
    elif isinstance(value, bool):
        text = str(value).lower()
    elif isinstance(value, bytes):
        text = _bytes_text(value[: width * 4])  # payloads may be megabytes: what can show
    else:
        text = str(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def _bytes_text(value: bytes) -> str:
    """Payloads are mostly JSON: show UTF-8 as text, anything else as hex bytes."""
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return "[" + " ".join(f"{b:02X}" for b in value) + "]"


def _plain(value: Any) -> Any:
    """A JSON-able form of a result value (bytes as text when UTF-8, else hex)."""
    if isinstance(value, bytes):
        return _bytes_text(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)  # Decimal, date, time: their exact text


def format_json_lines(t: pa.Table) -> str:
    """One JSON object per row (JSON Lines): what scripts and ``jq`` read."""
    return "".join(json.dumps(_plain(row)) + "\n" for row in t.to_pylist())


def format_csv(t: pa.Table) -> str:
    """RFC 4180 CSV with a header; nested values as JSON text."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(t.column_names)
    for row in t.to_pylist():
        writer.writerow(
            [
                ""
                if value is None
                else json.dumps(_plain(value))
                if isinstance(value, dict | list)
                else _plain(value)
                for value in row.values()
            ]
        )
    return out.getvalue()
